"""The LLaVA-style stand-in: DINOv2-S/14 -> a two-layer MLP projector -> SmolLM2-135M, as a real
``LlavaForConditionalGeneration``, with only the projector trained, here, on offline image-caption pairs.

No pretrained vision-language model ships offline. The stand-in is stitched from the two offline models
(:mod:`sinklib.models.onnx_vit`, :mod:`sinklib.models.conversion`) the way LLaVA-1.5 is: the vision tower's
second-to-last layer (``vision_feature_layer=-2``), CLS dropped (``"default"`` strategy), each patch token mapped by
``Linear(384, 576) -> GELU -> Linear(576, 576)`` into the language model's embedding space. Images are 84 px, so
an image is 6 x 6 = 36 tokens (LLaVA-1.5: 576 -- here each training step is a full language-model forward and
backward on 2 CPU cores); a new ``<image>`` token marks where they go.

Training (LLaVA's stage 1, feature alignment): both towers frozen, the projector trained to maximise the caption's
likelihood given the image, on scikit-learn's digits ("a handwritten digit 7") and the bundled photos with the
captions in ``data/photo_captions.json`` (random crops and flips), AdamW, 60 steps, the language model's forward and
backward in bfloat16 autocast (as LLaVA trains; the projector's weights stay float32). The vision features
are computed once (the tower is frozen), so a step costs one language-model forward and backward.

Everything a notebook shows about this model is labelled :data:`LABEL`: it has never seen an instruction, its
projector has seen a few thousand captions of digits and nine photos, and it is not a trained MLLM.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from sinklib.core.manifest import note
from sinklib.core.paths import ROOT

LABEL = "LLaVA-style stand-in (DINOv2-S + SmolLM2, projector trained here)"
IMAGE_TOKEN = "<image>"
PROMPT_BEFORE = "Image:"  # text before the image, so the first token is text (LLaVA: BOS + system prompt)
PROMPT_AFTER = "\nCaption:"  # text between the image and the caption


@dataclass(frozen=True)
class StitchConfig:
    """What the cached stand-in depends on; its hash names the cache folder."""

    image_size: int = 84  # 6 x 6 = 36 image tokens
    digits: int = 1200  # training digits (the rest of the 1,797 are held out)
    photo_crops: int = 24  # random crops + flips per photo
    steps: int = 60  # 90 before recipe 3 (the cold-cache budget)
    batch_size: int = 16
    lr: float = 3e-3
    seed: int = 0
    # the language model's forward and backward in bfloat16 autocast (the projector's weights and AdamW in float32,
    # every measurement in float32 afterwards), as LLaVA trains: about half of float32's step on a CPU with AVX512-BF16
    precision: str = "bf16"
    # 2: the projector is initialised from ``seed`` (before, from whatever state the global RNG was in when the
    # stand-in was assembled, so a cold build that converted DINOv2 first got another projector)
    # 3: the language model's forward and backward in ``precision`` with eager attention while the projector trains
    # (PyTorch's CPU flash-attention backward in bfloat16 cost a fifth of each step); half of recipe 2's time
    # 4: ``images.digits`` permutes by ``seed`` also without ``n`` (before, every stand-in trained on the same 1,200
    # digits in the same order): a recipe-3 projector was trained on other digits
    recipe: int = 4

    def key(self) -> str:
        return hashlib.sha1(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]


def digit_caption(label: int) -> str:
    return f" a handwritten digit {int(label)}"


def photo_captions() -> dict[str, str]:
    return json.loads((ROOT / "data" / "photo_captions.json").read_text())


def _crops(image: np.ndarray, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """n random square crops (60-100% of the short side) with random horizontal flips."""
    h, w = image.shape[:2]
    out = []
    for _ in range(n):
        s = int(min(h, w) * rng.uniform(0.6, 1.0))
        top, left = rng.integers(0, h - s + 1), rng.integers(0, w - s + 1)
        crop = image[top:top + s, left:left + s]
        out.append(crop[:, ::-1] if rng.random() < 0.5 else crop)
    return out


def training_pairs(config: StitchConfig) -> tuple[list[np.ndarray], list[str]]:
    """The training images and captions: the first ``config.digits`` of a seeded permutation of the digits, and
    ``photo_crops`` crops of each bundled photo."""
    from sinklib.core import images

    digits, labels = images.digits(seed=config.seed)
    pics, caps = list(digits[:config.digits]), [digit_caption(y) for y in labels[:config.digits]]
    rng = np.random.default_rng(config.seed)
    captions = photo_captions()
    for photo in images.photos(list(captions)):
        crops = _crops(photo.image, config.photo_crops, rng)
        pics += crops
        caps += [" " + captions[photo.name]] * len(crops)
    return pics, caps


def heldout_digits(config: StitchConfig, n: int) -> tuple[list[np.ndarray], np.ndarray]:
    """n digits the projector never saw (after the training ones in the same seeded permutation)."""
    from sinklib.core import images

    digits, labels = images.digits(seed=config.seed)
    return list(digits[config.digits:config.digits + n]), labels[config.digits:config.digits + n]


def assemble(vision_dir: Path, text_dir: Path, image_size: int):
    """An untrained stand-in: ``LlavaForConditionalGeneration`` with DINOv2-S and SmolLM2's weights, a fresh
    projector, and SmolLM2's tokenizer plus ``<image>``. Returns (model, tokenizer)."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoTokenizer,
        Dinov2Model,
        LlavaConfig,
        LlavaForConditionalGeneration,
    )

    tokenizer = AutoTokenizer.from_pretrained(text_dir)
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    image_token = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    vision = Dinov2Model.from_pretrained(vision_dir)
    lm = AutoModelForCausalLM.from_pretrained(text_dir, dtype=torch.float32)
    text_config = AutoConfig.from_pretrained(text_dir)
    text_config.vocab_size = len(tokenizer)
    config = LlavaConfig(vision_config=vision.config, text_config=text_config, image_token_id=image_token,
                         vision_feature_layer=-2, vision_feature_select_strategy="default",
                         projector_hidden_act="gelu", image_seq_length=(image_size // 14) ** 2,
                         tie_word_embeddings=text_config.tie_word_embeddings)
    model = LlavaForConditionalGeneration(config)
    model.model.vision_tower.load_state_dict(vision.state_dict())
    lm.resize_token_embeddings(len(tokenizer))
    model.model.language_model.load_state_dict(lm.model.state_dict())
    model.lm_head.load_state_dict(lm.lm_head.state_dict())
    return model.eval(), tokenizer


def prompt_ids(tokenizer, n_image_tokens: int, caption: str = "") -> tuple[list[int], int]:
    """Token ids of ``Image:<image>*n\\nCaption:<caption>`` and the index where the caption starts."""
    before = tokenizer(PROMPT_BEFORE, add_special_tokens=False).input_ids
    after = tokenizer(PROMPT_AFTER, add_special_tokens=False).input_ids
    image = [tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)] * n_image_tokens
    head = before + image + after
    return head + tokenizer(caption, add_special_tokens=False).input_ids, len(head)


def batch(tokenizer, n_image_tokens: int, captions: list[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (B, T) ids, attention mask and labels (-100 everywhere but the caption tokens)."""
    rows = [prompt_ids(tokenizer, n_image_tokens, c) for c in captions]
    width = max(len(ids) for ids, _ in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids = torch.full((len(rows), width), pad)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    labels = torch.full((len(rows), width), -100)
    for i, (row, start) in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
        labels[i, start:len(row)] = torch.tensor(row[start:])
    return ids, mask, labels


@torch.no_grad()
def vision_features(model, pixels: torch.Tensor, batch_size: int = 64) -> torch.Tensor:
    """The frozen tower's features as LLaVA selects them: hidden_states[-2] without CLS. (B, 3, S, S) -> (B, P, 384).

    hidden_states[k] is the output of the tower's first k layers, so a DINOv2 tower runs only those k (the last
    layer's output was never read): the same features, bit for bit, a twelfth of the encoding sooner."""
    tower = model.model.vision_tower
    layers = getattr(getattr(tower, "encoder", None), "layer", None)  # DINOv2's blocks; other towers run whole
    k = model.config.vision_feature_layer
    out = []
    if layers is not None:
        k %= len(layers) + 1  # -2 of 12 layers + the embeddings: 11
        tower.encoder.layer = layers[:k]
    try:
        for start in range(0, len(pixels), batch_size):
            hs = tower(pixels[start:start + batch_size], output_hidden_states=True).hidden_states
            out.append(hs[k][:, 1:])
    finally:
        if layers is not None:
            tower.encoder.layer = layers
    return torch.cat(out)


def caption_loss(model, features: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor,
                 labels: torch.Tensor) -> torch.Tensor:
    """Mean caption-token cross-entropy with the projected features in the ``<image>`` slots: what
    ``LlavaForConditionalGeneration.forward(..., labels=labels).loss`` computes, with the vision tower's output
    given and the output head applied only where a caption token is predicted (the rest of the logits are unused).
    features: (B, P, 384); ids, mask, labels: (B, T)."""
    embeds = model.get_input_embeddings()(ids)  # (B, T, d)
    image = model.model.multi_modal_projector(features)  # (B, P, d)
    slots = ids == model.config.image_token_id
    embeds = embeds.masked_scatter(slots[..., None], image.reshape(-1, image.shape[-1]).to(embeds.dtype))
    hidden = model.model.language_model(inputs_embeds=embeds, attention_mask=mask).last_hidden_state  # (B, T, d)
    target = labels[:, 1:]  # token t + 1 is predicted at position t
    keep = target != -100
    logits = model.lm_head(hidden[:, :-1][keep])  # (N_caption, V)
    return torch.nn.functional.cross_entropy(logits.float(), target[keep])


def train_projector(model, tokenizer, config: StitchConfig, log=note) -> list[float]:
    """LLaVA stage 1 on the offline pairs: only the projector learns; returns the loss per step. On a CPU it runs on
    one thread whatever the notebook has (:func:`sinklib.core.precision.training_threads`: on an Intel CPU with AMX
    the step-0 loss was 6.919816 at 1 thread and 6.925381 at 2)."""
    from sinklib.core import precision

    with precision.training_threads(next(model.parameters()).device):
        return _train_projector(model, tokenizer, config, log)


def _train_projector(model, tokenizer, config: StitchConfig, log=note) -> list[float]:
    from sinklib.core import images, precision

    torch.manual_seed(config.seed)
    pics, caps = training_pairs(config)
    t0 = time.perf_counter()
    feats = vision_features(model, images.to_pixels(pics, size=config.image_size))
    log(f"stand-in: {len(pics)} training images encoded in {time.perf_counter() - t0:.0f} s")
    for p in model.parameters():
        p.requires_grad_(False)
    projector = model.model.multi_modal_projector
    for p in projector.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(projector.parameters(), lr=config.lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=config.lr, total_steps=config.steps, pct_start=0.1)
    rng = np.random.default_rng(config.seed)
    losses = []
    lm = model.model.language_model
    attention = lm.config._attn_implementation  # put back before the model is saved or measured
    lm.set_attn_implementation("eager")
    try:
        with torch.enable_grad():
            for step in range(config.steps):
                idx = rng.choice(len(caps), size=config.batch_size, replace=False)
                ids, mask, labels = batch(tokenizer, feats.shape[1], [caps[i] for i in idx])
                with precision.autocast(config.precision, feats.device):
                    loss = caption_loss(model, feats[idx], ids, mask, labels)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                losses.append(loss.item())
                if step % 50 == 0 or step == config.steps - 1:
                    log(f"stand-in projector step {step}: caption loss {loss.item():.3f} "
                        f"({time.perf_counter() - t0:.0f} s)")
    finally:
        lm.set_attn_implementation(attention)
    for p in model.parameters():
        p.requires_grad_(False)
    return losses


def build_standin(out: Path, config: StitchConfig | None = None) -> None:
    """Assemble, train the projector and save the stand-in (model, tokenizer, training log) into ``out``."""
    from sinklib.models.conversion import build_once, convert_gguf
    from sinklib.models.onnx_vit import build_dinov2_small

    config = config or StitchConfig()
    vision_dir, text_dir = build_once("dinov2-s", build_dinov2_small), convert_gguf("smollm2-135m")
    torch.manual_seed(config.seed)  # the fresh projector's initialisation depends on the seed and nothing else
    model, tokenizer = assemble(vision_dir, text_dir, config.image_size)
    t0 = time.perf_counter()
    losses = train_projector(model, tokenizer, config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "stitch.json").write_text(json.dumps({"config": asdict(config), "label": LABEL, "losses": losses,
                                                 "train_seconds": round(time.perf_counter() - t0, 1)}, indent=1))


def training_log(folder: Path) -> dict:
    return json.loads((folder / "stitch.json").read_text())


def standin_path(config: StitchConfig | None = None) -> Path:
    """The cached stand-in for ``config`` (built on first use: ~5 minutes on 2 CPU cores)."""
    from sinklib.models.conversion import build_once

    config = config or StitchConfig()
    return build_once(f"llava-standin-{config.key()}", lambda out: build_standin(out, config))


def load_standin(seed: int, like, base: StitchConfig | None = None):
    """The stand-in whose projector was trained with ``seed`` (:func:`standin_path` of ``StitchConfig(seed=seed)``,
    built on first use), as a :class:`sinklib.core.loaded.LoadedModel` on ``like``'s device and dtype.

    ``like``: the stand-in as :func:`sinklib.models.load.load_model` returns it (``"llava-standin"``); every stand-in
    shares its towers, tokenizer and shape facts, only the projector differs, so those are taken from it. The label
    names the seed when it is not the default configuration's, so a figure never mixes two stand-ins up.
    ``base``: the configuration ``like`` was built with (e.g. the smoke profile's 4 steps), of which only the seed
    changes; None: the default configuration.
    """
    from dataclasses import replace

    from transformers import AutoModelForImageTextToText

    base = base or StitchConfig()
    config = replace(base, seed=seed)
    model = AutoModelForImageTextToText.from_pretrained(standin_path(config), dtype=like.dtype)
    label = like.spec.label if seed == base.seed else f"{LABEL[:-1]}, projector seed {seed})"
    return replace(like, model=model.to(like.device).eval(), spec=replace(like.spec, label=label))
