"""Caption inputs and their likelihood for a multimodal model: the stand-in's ``Image:<image>*n\\nCaption:...``
prompt or a hub processor's chat template, the per-token NLL of the caption from the logits kept, the image-dependent
token's NLL, and the held-out digit check (the lowest-NLL of ten digit captions).
"""

from __future__ import annotations

import contextlib
import inspect

import numpy as np
import torch
from torch import nn

from sinklib.architectures.mllm.image_layout import image_size_kwargs


def caption_inputs(lm, pictures: list, captions: list[str]) -> tuple[dict, torch.Tensor]:
    """Model inputs for images + captions and the caption labels (-100 elsewhere).

    The stand-in (:mod:`sinklib.models.stitch`): ``Image:<image>*n\\nCaption:<caption>``, pixels at its 84 px. A hub
    MLLM (GPU profile): its processor's chat template with one image and "Describe the image." as the user turn,
    the caption appended as the answer; a processor that sizes pictures by pixel count (Qwen2-VL) is asked for at
    least LLaVA-1.5's 576 image tokens (:func:`~sinklib.architectures.mllm.image_layout.image_size_kwargs`: an 8 x 8
    digit is not 2 x 2 tokens). pictures: RGB uint8 arrays, all of one size.
    """
    from sinklib.core import images
    from sinklib.models import stitch

    if lm.spec.source == "stitched":
        n = lm.model.config.image_seq_length
        ids, mask, labels = stitch.batch(lm.tokenizer, n, captions)
        size = int(round(n ** 0.5)) * lm.model.config.vision_config.patch_size
        pixels = images.to_pixels(pictures, size=size).to(lm.device, lm.dtype)
        return {"input_ids": ids.to(lm.device), "attention_mask": mask.to(lm.device), "pixel_values": pixels}, labels
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(lm.name)
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]}]
    prompt = processor.apply_chat_template(messages, add_generation_prompt=True)
    processor.tokenizer.padding_side = "right"
    batch = processor(images=[Image.fromarray(p) for p in pictures], text=[prompt + c for c in captions],
                      return_tensors="pt", padding=True, **image_size_kwargs(processor.image_processor))
    labels = torch.full_like(batch["input_ids"], -100)
    for i, c in enumerate(captions):
        n = len(processor.tokenizer(c, add_special_tokens=False).input_ids)
        end = int(batch["attention_mask"][i].sum())
        labels[i, end - n:end] = batch["input_ids"][i, end - n:end]
    out = {k: v.to(lm.device) for k, v in batch.items()}
    out["pixel_values"] = out["pixel_values"].to(lm.dtype)  # processors return float32; the model may be bf16
    return out, labels


def logits_kwargs(model: nn.Module, labels: torch.Tensor | None = None) -> dict:
    """``logits_to_keep`` for a forward whose logits only :func:`token_nll` reads: the output head and the
    log-softmax then run from the position before the first caption token on, not on the image and the prompt
    (whose logits are never read); without labels, the last position only (a forward run for what it captures).
    Empty where the model's forward has no such argument."""
    if "logits_to_keep" not in inspect.signature(model.forward).parameters:
        return {}
    if labels is None:
        return {"logits_to_keep": 1}
    cols = (labels != -100).any(0).nonzero().flatten()
    return {"logits_to_keep": labels.shape[1] - int(cols[0]) + 1 if len(cols) else 1}


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood of each caption token (0 where labels are -100), from the logits of the last K
    positions: position t predicts token t + 1. logits: (B, K, V); labels: (B, T), K <= T -> (B, K - 1)."""
    skipped = labels.shape[1] - logits.shape[1] + 1  # labels before this column have no logits here
    if (labels[:, :skipped] != -100).any():
        raise ValueError("caption tokens before the first position whose logits were kept")
    target = labels[:, skipped:].to(logits.device)  # (B, K - 1)
    keep = target != -100
    logp = torch.log_softmax(logits[:, :-1][keep].float(), -1)  # (N, V): only the scored positions
    nll = torch.zeros(keep.shape, dtype=logp.dtype, device=logp.device)
    nll[keep] = -logp.gather(-1, target[keep][:, None])[:, 0]
    return nll


def mean_nll(nll: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Per-example mean of :func:`token_nll`'s (B, K - 1) over the caption tokens -> (B,), on the CPU."""
    count = (labels != -100).sum(-1).clamp_min(1).to(nll.device)
    return (nll.sum(-1) / count).cpu()


def last_token_nll(nll: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """:func:`token_nll`'s (B, K - 1) at each row's last caption token -> (B,) on the CPU. For the digit captions
    ("a handwritten digit 7") that is the digit: the one caption token that depends on the image."""
    skipped = labels.shape[1] - nll.shape[1]  # label columns before token_nll's frame
    col = (_last_caption_token(labels) - skipped).to(nll.device)
    return nll[torch.arange(len(col), device=nll.device), col].cpu()


def scores(logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """Both scores of one forward: "caption", the mean NLL over the caption tokens, and "image token", the NLL of
    the last caption token (:func:`last_token_nll`). -> {name: (B,)}."""
    nll = token_nll(logits, labels)
    return {"caption": mean_nll(nll, labels), "image token": last_token_nll(nll, labels)}


@torch.inference_mode()
def caption_nll(model: nn.Module, inputs: dict, labels: torch.Tensor, extra=None) -> torch.Tensor:
    """Per-example mean negative log-likelihood of the caption tokens, optionally under an intervention ``extra``
    (a context manager entered around the forward). -> (B,)."""
    kwargs = logits_kwargs(model, labels)
    with extra if extra is not None else contextlib.nullcontext():
        logits = model(**inputs, **kwargs).logits
    return mean_nll(token_nll(logits, labels), labels)


def _last_caption_token(labels: torch.Tensor) -> torch.Tensor:
    """(B, T) labels -> (B,) the column of each row's last caption token (-1 in a row without one)."""
    cols = torch.arange(labels.shape[1]).expand_as(labels)
    return torch.where(labels != -100, cols, -1).amax(-1)


def _differ_only_in_last_token(built: list[tuple[dict, torch.Tensor]]) -> bool:
    """True when every (inputs, labels) of ``built`` equals the first except in each row's last caption token."""
    (x, y), last = built[0], _last_caption_token(built[0][1])
    if (last < 0).any():
        return False
    rows = torch.arange(len(last))
    for xc, yc in built[1:]:
        if set(xc) != set(x) or not torch.equal(_last_caption_token(yc), last):
            return False
        if not all(torch.equal(xc[k], x[k]) for k in x if k != "input_ids"):
            return False
        for a, b in ((xc["input_ids"].cpu(), x["input_ids"].cpu()), (yc, y)):
            a, b = a.clone(), b.clone()
            a[rows, last] = b[rows, last] = 0
            if not torch.equal(a, b):
                return False
    return True


@torch.inference_mode()
def choice_nll(lm, pictures: list, choices: list[str]) -> torch.Tensor:
    """Mean caption NLL of each picture under each caption of ``choices`` -> (C, B), as C :func:`caption_nll`.

    When the choices' inputs differ only in the last caption token (the ten digit captions " a handwritten digit
    0" ... " 9"), every token before it is the same in all C forwards, and a position never sees a later one: one
    forward gives all C -- the shared tokens' NLL once, and each choice's last token from the log-probabilities at
    the position before it. Else one forward per choice."""
    built = [caption_inputs(lm, pictures, [c] * len(pictures)) for c in choices]
    if len(built) == 1 or not _differ_only_in_last_token(built):
        return torch.stack([caption_nll(lm.model, x, y) for x, y in built])
    x, y = built[0]
    last = _last_caption_token(y)
    logits = lm.model(**x, **logits_kwargs(lm.model, y)).logits  # (B, K, V)
    shared = token_nll(logits, y)  # (B, K - 1); each row's last caption token: choice 0's
    col = (last - (y.shape[1] - logits.shape[1] + 1)).to(logits.device)  # that token's column in token_nll's frame
    rows = torch.arange(len(last), device=logits.device)
    logp = torch.log_softmax(logits[rows, col].float(), -1)  # (B, V): at the position before each last token
    out = []
    for _, yc in built:
        nll = shared.clone()
        nll[rows, col] = -logp[rows, yc[torch.arange(len(last)), last].to(logp.device)]
        out.append(mean_nll(nll, yc))
    return torch.stack(out)


def digit_accuracy(lm, digits: list, labels, batch_size: int) -> float:
    """Held-out check of a captioning model: the fraction of digits whose lowest-NLL caption among the ten
    ``stitch.digit_caption(0..9)`` is the right one (chance 0.1); one forward per batch scores all ten
    (:func:`choice_nll`)."""
    from sinklib.models.stitch import digit_caption

    choices = [digit_caption(d) for d in range(10)]
    scores = torch.cat([choice_nll(lm, digits[i:i + batch_size], choices)
                        for i in range(0, len(digits), batch_size)], dim=1)  # (10, N)
    return float((scores.argmin(0).numpy() == np.asarray(labels)).mean())
