"""Sinks between images and text in a multimodal LLM: where text queries look, visual sink tokens, masking them,
and visual attention redistribution (VAR).

Kang et al., "See What You Are Told: Visual Attention Sink in Large Multimodal Models" (ICLR 2025, arXiv
2503.03321; the authors' code seilk/VisAttnSink, ``src/logic/logic.py``):

* **Sink dimensions** D: the massive-activation dimensions of the language model (LLaVA-1.5-7B: {1415, 2533}, those
  of Llama-2); :func:`sink_dimensions` finds them from the first token's hidden states.
* **Visual sink token** (``DimProspector``): phi(x) = max_{d in D} |x_d| / RMS(x), RMS(x) = sqrt(mean_j x_j^2), on a
  layer's input hidden state; a token is a sink when phi >= tau = 20. Layers 0-1 are skipped (``[2:]``).
* **Image-centric heads** (``HeadFork``), per (head, text query): attention to the image sum_{j in image} A_tj >=
  0.2 and the visual sinks' portion of it <= rho = 0.5.
* **VAR** (``VARProcessor.attn_redist``): in those (head, query) rows, every sink token's attention (visual and
  text sinks alike) is multiplied by p = 0.6 and the removed (1 - p) of it goes to the non-sink image tokens in
  proportion to their attention; not in the last layer.

This module finds and measures visual sinks and judges the claims; the two attention edits (hiding keys, VAR) are
in :mod:`sinklib.architectures.mllm.visual_attention`.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from sinklib.architectures.mllm.image_layout import ImageLayout, image_size_kwargs
from sinklib.core.adapters import adapter_for
from sinklib.core.capture import Capture
from sinklib.core.claims import Claim, against_cut

KANG_TAU = 20.0
KANG_RHO = 0.5  # max visual-sink portion of a head's image attention
KANG_SUMM = 0.2  # min image attention of a head (per query)
KANG_P = 0.6  # the fraction of a sink's attention VAR keeps
KANG_FIRST_LAYER = 2  # sink tokens are looked for from layer 2 on
KANG_D_REF = 4096  # LLaVA-1.5-7B's hidden size (Llama-2-7B), where tau = 20 was set
KANG_BACKGROUND = 0.9  # Kang et al., Table 6: > 90% of visual sink tokens lie on background


def width_matched_tau(d: int, tau: float = KANG_TAU, d_ref: int = KANG_D_REF) -> float:
    """The tau that asks a width-d model's sink dimension for the same share of the token's squared norm as tau asks
    at d_ref. phi = |x_k| / RMS(x), so phi^2 / d = x_k^2 / ||x||^2 and phi <= sqrt(d): tau = 20 at d = 4096 asks for
    400 / 4096 = 9.8% of the squared norm, at d = 576 for 69%. Matched: tau_d = tau sqrt(d / d_ref) (7.5 at 576)."""
    return tau * (d / d_ref) ** 0.5


def tau_sensitivity(profile: MllmProfile, taus: Sequence[float]) -> dict[float, dict]:
    """For each tau: the largest fraction of image tokens with phi >= tau in a layer >= 2, the mean number of visual
    sink tokens per image (any layer), and :func:`sink_tokens_hold` at that tau -- how much the existence verdict
    hangs on the threshold."""
    out = {}
    for tau in taus:
        frac = [f for f in profile.sink_fraction(tau) if f == f]
        ratio = [r for r in profile.received_ratio(tau) if r is not None]
        out[float(tau)] = {"max fraction": max(frac, default=0.0),
                           "sinks per image": sink_union(profile, tau).sum(-1).float().mean().item(),
                           "holds": sink_tokens_hold(frac, ratio)}
    return out


def plain_background(pictures: list, grid: int | ImageLayout, tol: float = 0.05) -> torch.Tensor:
    """(B, P) bool: image tokens whose patch is plain background -- the mean distance of its pixels from the
    image's border colour (the median of the outermost pixels) is below ``tol`` of the full range. For the digits
    (dark ink on white) that is a patch without ink. pictures: RGB uint8 arrays (H, W, 3); grid: the tokens'
    :class:`~sinklib.architectures.mllm.image_layout.ImageLayout` (an int g: one g x g tile). Each grid of the
    layout (the crops' R x C, the global view's) is taken to cover the whole picture."""
    layout = ImageLayout.square(grid * grid) if isinstance(grid, int) else grid
    out = []
    for picture in pictures:
        x = torch.from_numpy(np.asarray(picture, dtype=np.float32) / 255).permute(2, 0, 1)[None]  # (1, 3, H, W)
        border = torch.cat([x[..., 0, :], x[..., -1, :], x[..., :, 0], x[..., :, -1]], dim=-1).median(-1).values
        distance = (x - border[..., None, None]).abs().mean(1, keepdim=True)  # (1, 1, H, W)
        over = _cell_means(distance, layout.overview) < tol if layout.overview else None
        out.append(layout.join(_cell_means(distance, layout.grid) < tol, over))
    return torch.stack(out)


def _cell_means(x: torch.Tensor, cells: tuple[int, int]) -> torch.Tensor:
    """Mean of (1, 1, H, W) over an R x C grid of cells -> (R, C): nearest-neighbour upsampled to (R ceil(H / R),
    C ceil(W / C)) px, then averaged in blocks of ceil(H / R) x ceil(W / C)."""
    (h, w), (r, c) = x.shape[-2:], cells
    kernel = (max(1, -(-h // r)), max(1, -(-w // c)))
    up = torch.nn.functional.interpolate(x, size=(r * kernel[0], c * kernel[1]), mode="nearest")
    return torch.nn.functional.avg_pool2d(up, kernel)[0, 0]


def sink_jaccard(a: torch.Tensor, b: torch.Tensor) -> float:
    """Mean over rows of |a & b| / |a | b| for (B, P) bool sink sets (1 where both are empty)."""
    inter, union = (a & b).sum(-1).float(), (a | b).sum(-1).float()
    return torch.where(union > 0, inter / union.clamp_min(1), torch.ones_like(union)).mean().item()


def phi(h: torch.Tensor, dims: Sequence[int]) -> torch.Tensor:
    """phi(x) = max_{d in dims} |x_d| / RMS(x), RMS(x) = sqrt(mean_j x_j^2 + 1e-6) (Kang et al.'s ``rmsnorm``).
    (..., d) -> (...)."""
    h = h.float()
    rms = torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (h[..., list(dims)].abs() / rms).amax(-1)


def sink_dimensions(first: torch.Tensor, k: int = 2, from_layer: int = KANG_FIRST_LAYER) -> list[int]:
    """The language model's sink dimensions: the k dimensions with the largest mean |h_d| / RMS(h) of the first
    token over layers >= ``from_layer``. first: (L, d) block outputs of the first token -> [d1, d2, ...]."""
    h = first[from_layer:].float()
    rel = h.abs() / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
    return rel.mean(0).topk(k).indices.tolist()


def shared_positions(where: torch.Tensor) -> torch.Tensor:
    """(B, T) bool image positions (from the model's adapter, :meth:`sinklib.core.adapters.Adapter.image_positions`)
    -> (T,): every row must have its image tokens at the same places (one block for LLaVA and Qwen2-VL, one block per
    tile with separators between them for SmolVLM / Idefics3). Returned on the CPU, where
    :class:`~sinklib.core.capture.Capture` keeps what it captures: the input ids, and so the mask built from them,
    sit on the model's device, and a CUDA mask cannot index CPU captures."""
    if not where.any():
        raise ValueError("no image token in the input ids")
    if not torch.equal(where, where[:1].expand_as(where)):
        raise ValueError("image tokens must sit at the same positions in every row (batch images of one size)")
    return where[0].cpu()


def image_span(where: torch.Tensor) -> tuple[int, int]:
    """(first, last + 1) of the image positions (T,) bool: the text queries start at ``last + 1``."""
    cols = where.nonzero().flatten()
    return int(cols[0]), int(cols[-1]) + 1


@dataclass
class MllmProfile:
    """Per language-model layer l (block outputs) for a batch of image + text inputs.

    shares: (L, 3) mean over heads and text queries of the attention to [tokens before the image, image tokens,
    text from the image on]; phi: (L, B, P) phi of each image token's *input* hidden state at layer l (NaN for l <
    ``KANG_FIRST_LAYER``); received: (L, B, P) attention each image token gets, mean over heads and text queries;
    first_hidden: (L, d) the first token's block outputs, mean over the batch; dims: the sink dimensions used.
    """

    span: tuple[int, int]
    image: torch.Tensor  # (T,) bool, the image tokens' positions
    text_from: int
    shares: torch.Tensor
    phi: torch.Tensor
    received: torch.Tensor
    first_hidden: torch.Tensor
    dims: list[int]

    def sinks(self, tau: float = KANG_TAU) -> torch.Tensor:
        """(L, B, P) bool: visual sink tokens (phi >= tau)."""
        return self.phi >= tau

    def sink_fraction(self, tau: float = KANG_TAU) -> list[float]:
        return self.sinks(tau).float().mean(dim=(1, 2)).tolist()

    def received_ratio(self, tau: float = KANG_TAU) -> list[float | None]:
        """Per layer: mean attention a visual sink token receives / that of a non-sink image token (None when a
        layer has no sink or only sinks)."""
        out = []
        for r, s in zip(self.received, self.sinks(tau)):
            out.append(None if not s.any() or s.all() else (r[s].mean() / r[~s].mean()).item())
        return out


@dataclass
class ProfiledForward:
    """One forward of :func:`profile_forward`: its profile, the model's own output (logits, and the KV cache when
    asked for), and token_phi: (L, B, T) phi of every token's input hidden state at layer l (NaN for l = 0, whose
    input is the embedding and is not captured) -- what VAR finds its sinks in."""

    profile: MllmProfile
    output: object
    token_phi: torch.Tensor


@torch.inference_mode()
def profile_mllm(model: nn.Module, inputs: dict, dims: Sequence[int] | None = None,
                 text_from: int | None = None) -> MllmProfile:
    """Capture the language tower's attention and hidden states for ``model(**inputs)`` and reduce them.

    ``text_from``: the first query position counted as text (default: the first token after the image).
    ``dims``: the sink dimensions (default: :func:`sink_dimensions` of this batch's first token).
    """
    return profile_forward(model, inputs, dims, text_from, **logits_kwargs(model)).profile  # logits unread


def text_rows_reduce(image: torch.Tensor, start: int, text_from: int):
    """A :class:`~sinklib.core.capture.Capture` ``reduce`` for attentions that keeps of each layer's (B, H, T, T)
    probabilities only what :class:`MllmProfile` reads, reduced where they were computed (the model's device, in
    float32): per text query t >= ``text_from`` the attention on the tokens before the image, sum_{j < start} A_tj,
    and on the image, sum_{j in image} A_tj (each (B, H, Tq)), and per image token j the mean over heads and text
    queries, mean_{h, t} A_tj (B, P); packed into one (B, 2 H Tq + P) tensor (:func:`unpack_text_rows`). What the
    host keeps per layer: B (2 H Tq + P) floats instead of B H T^2 (SmolVLM-Instruct, 24 layers x 32 heads x
    1,417^2 per image: 6 GB in float32). image: (T,) bool."""
    def reduce(weights: torch.Tensor, layer: int) -> torch.Tensor:
        rows = weights[:, :, text_from:].float()  # (B, H, Tq, T)
        on_image = rows[..., image.to(rows.device)]  # (B, H, Tq, P)
        return torch.cat([rows[..., :start].sum(-1).flatten(1), on_image.sum(-1).flatten(1),
                          on_image.mean(dim=(1, 2))], 1)
    return reduce


def unpack_text_rows(packed: torch.Tensor, n_image: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`text_rows_reduce`'s (L, B, 2 H Tq + P), stacked over layers, -> the attention on the tokens before the
    image (L, B, H * Tq), on the image (L, B, H * Tq) and received per image token (L, B, P)."""
    rows = (packed.shape[-1] - n_image) // 2
    return packed[..., :rows], packed[..., rows:2 * rows], packed[..., 2 * rows:]


def input_phi(cap: Capture, dims: Sequence[int] | None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """From a capture of block outputs (hidden_states, in the model's dtype): the first token's block outputs,
    mean over the batch (L, d) in float32, the sink dimensions (``dims``, else :func:`sink_dimensions` of them), and
    every token's phi of its layer input, (L, B, T) -- NaN at layer 0 (the embeddings are not captured), at l >= 1
    phi of block l - 1's output. One layer in float32 at a time: never the whole (L, B, T, d) stack."""
    layers = sorted(cap.layers)
    first = torch.stack([cap.get("hidden_states", i)[:, 0].float() for i in layers]).mean(1)  # (L, d)
    dims = list(dims) if dims is not None else sink_dimensions(first)
    h0 = cap.get("hidden_states", layers[0])
    out = [torch.full(h0.shape[:2], float("nan"))]  # layer 0's input: not captured
    out += [phi(cap.get("hidden_states", i), dims) for i in layers[:-1]]  # (B, T) each: the input of layer i + 1
    return first, torch.stack(out), dims


@torch.inference_mode()
def profile_forward(model: nn.Module, inputs: dict, dims: Sequence[int] | None = None, text_from: int | None = None,
                    **forward) -> ProfiledForward:
    """:func:`profile_mllm`, keeping what the same forward gives besides: the model's output for
    ``model(**inputs, **forward)`` (e.g. ``logits_to_keep``, ``use_cache=True``) and every token's phi.

    Attention is reduced on the device as each layer computes it (:func:`text_rows_reduce`): the full maps are never
    kept. Hidden states stay in the model's dtype on the host (L B T d values), phi is computed from them a layer at
    a time in float32 (:func:`input_phi`)."""
    where = shared_positions(adapter_for(model).image_positions(inputs["input_ids"]))
    start, stop = image_span(where)
    text_from = stop if text_from is None else text_from
    with Capture(model, attentions=True, hidden_states=True,
                 reduce={"attentions": text_rows_reduce(where, start, text_from)}) as cap:
        output = model(**inputs, **forward)
    before, image, received = unpack_text_rows(cap.stack("attentions"), int(where.sum()))  # (L, B, H Tq), .., (L, B, P)
    shares = torch.stack([before, image, 1 - before - image], -1).mean(dim=(1, 2))  # (L, 3)
    first, token_phi, dims = input_phi(cap, dims)  # (L, d), (L, B, T)
    ph = token_phi[:, :, where].clone()  # (L, B, P)
    ph[:KANG_FIRST_LAYER] = float("nan")
    profile = MllmProfile((start, stop), where, text_from, shares, ph, received, first, dims)
    return ProfiledForward(profile, output, token_phi)


# ------------------------------------------------------------------------------------------------------- claims
SOURCE = "Kang et al., See What You Are Told: Visual Attention Sink in LMMs, ICLR 2025, arXiv 2503.03321"


CODE = "seilk/VisAttnSink:src/logic/logic.py"
FOLLOWS_SINKS = (f"Sec. 3 (phi(x) = max_d |x_d| / RMS(x) >= tau = 20 over the sink dims, layers >= 2); "
                 f"{CODE}:DimProspector.run_logic")
FOLLOWS_MASKING = ("Sec. 3.2 (masking visual sink tokens vs random image tokens); no public code for the masking "
                   "experiment (seilk/VisAttnSink:src/model/llava.py passes a masking_vis_idx hook but never sets it)")
FOLLOWS_VAR = (f"Sec. 4 (VAR: image-centric heads, then redistribution) and Tables 1-3 (rho = 0.5, summ = 0.2, p = 0.6); {CODE}:HeadFork.run_logic, "
               f"{CODE}:VARProcessor.attn_redist")


def sink_tokens_hold(fractions: Sequence[float], ratios: Sequence[float]) -> bool:
    """Kang et al.'s visual sink tokens exist: some image token reaches phi >= tau in a layer >= 2 (a fraction > 0)
    and, averaged over the layers that have both kinds, sinks receive more text attention than non-sink image tokens
    (mean ratio > 1)."""
    return bool(any(f > 0 for f in fractions) and ratios and sum(ratios) / len(ratios) > 1)


def masking_holds(d_sink: float, d_random: Sequence[float]) -> bool:
    """Hiding the visual sinks is harmless next to hiding as many random image tokens: the caption NLL increase with
    the sinks hidden is below that of *every* random draw (d_sink < min_r d_random[r]); one draw: d_sink < d_random."""
    return bool(d_random) and d_sink < min(d_random)


# How far the masking and VAR comparisons move when the same recipe runs on another machine (nats): the seed-1
# stand-in (the one with visual sinks) built and judged here with ATen's kernels at their default (AVX-512) and capped
# to AVX2 (ATEN_CPU_CAPABILITY=avx2, a stand-in for another CPU): min_r d_random - d_sink went +0.124 -> -0.400
# (hiding its sinks: -0.022 -> +0.597 nats; random tokens +0.102 -> +0.197), none - VAR +0.008 -> -0.067 -- a
# projector trained in bfloat16 on 1,000-odd captions finds other sink tokens. A comparison within this of 0 is
# unsettled on a stand-in. A pretrained model's forward moves by float rounding only (~1e-4 nats).
MARGINS = {"stand-in": {"masking": 0.52, "var": 0.08}, "pretrained": {"masking": 1e-3, "var": 1e-3}}


def margin(kind: str, standin: bool) -> float:
    """The cross-machine margin (nats) of the ``kind`` ("masking" / "var") comparison: :data:`MARGINS`."""
    return MARGINS["stand-in" if standin else "pretrained"][kind]


def _score_name(score: str) -> str:
    return {"image token": "NLL of the image-dependent token (the digit)",
            "caption": "mean caption NLL"}.get(score, score)


def visual_sink_claims(profile: MllmProfile, masking: dict[str, float] | None, var: dict[str, float] | None,
                       standin: bool, d_model: int | None = None) -> list[Claim]:
    """Kang et al.'s claims judged on one model (one stand-in seed).

    * ``kang2025.visual_sink_tokens_exist`` (:func:`sink_tokens_hold`): some image tokens carry the LM's sink
      dimensions (phi >= 20) in the layers from 2 on and receive more attention than the other image tokens.
    * ``kang2025.masking_sinks_is_harmless`` (:func:`masking_holds`): hiding the visual sink tokens from the text
      raises the caption loss less than hiding as many random image tokens, in every random draw. masking:
      {"none", "sinks", "random"} mean caption NLL, and optionally "random_draws": the mean NLL of each random draw.
    * ``kang2025.var_helps``: VAR lowers the caption NLL (the paper: benchmark accuracy; here likelihood).

    All three are effects of training (``at_init=False``): a randomly initialised LM has no sink dimension for an
    image token to carry.
    """
    frac = [f for f in profile.sink_fraction() if f == f]  # drop the NaN layers
    ratio = [r for r in profile.received_ratio() if r is not None]
    has = any(f > 0 for f in frac)
    note = "stand-in: projector trained here, no instruction tuning" if standin else ""
    matched = width_matched_tau(d_model) if d_model else None
    sensitivity = tau_sensitivity(profile, [KANG_TAU] + ([matched] if matched else []))
    claims = [Claim(
        id="kang2025.visual_sink_tokens_exist", source=f"{SOURCE}, Sec. 3",
        statement="some image tokens carry the LM's sink dimensions (phi >= 20) and draw extra attention",
        rule="image tokens with phi >= 20 exist in layers >= 2 and receive more attention than the other image tokens",
        published={"sink dims (LLaVA-1.5-7B)": [1415, 2533], "tau": KANG_TAU},
        measured={"sink dims": profile.dims, "max fraction of image tokens": max(frac, default=0.0),
                  "attention received, sink / non-sink": (sum(ratio) / len(ratio)) if ratio else None,
                  "width-matched tau": matched,
                  "by tau": {f"{t:.3g}": v for t, v in sensitivity.items()}},
        holds=sink_tokens_hold(frac, ratio), note=note, follows=FOLLOWS_SINKS,
        adapted="phi >= tau (the authors' code: phi > tau); the verdict uses the paper's tau = 20, and the same rule "
                "at the width-matched tau 20 sqrt(d / 4096) (the same share of the squared norm as at LLaVA-1.5-7B's "
                "d = 4096) is recorded beside it under 'by tau'; sink dims found from the first token's hidden states "
                "(the paper: the LM's known massive-activation dims); the attention-received comparison is ours",
        at_init=False)]
    if masking is not None:
        scored = _score_name(masking.get("score", "caption"))
        d_sink, d_rand = masking["sinks"] - masking["none"], masking["random"] - masking["none"]
        draws = [d - masking["none"] for d in masking.get("random_draws", [])] or [d_rand]
        inside = min(draws) <= d_sink <= max(draws)
        spread = (f"; the random draws' increases span {min(draws):.4f}..{max(draws):.4f}, "
                  f"{'and' if inside else 'but'} the sinks' {'lies inside' if inside else 'lies outside'} that range")
        claims.append(Claim(
            id="kang2025.masking_sinks_is_harmless", source=f"{SOURCE}, Sec. 3.2",
            statement="hiding the visual sink tokens changes the output less than hiding as many random image tokens",
            rule=f"the increase of the {scored} with the sinks hidden < with the same number of random image tokens "
                 f"hidden, in every random draw, by more than {margin('masking', standin):g} nats (the comparison's "
                 f"cross-machine margin; within it: unsettled)",
            published="masking visual sinks: little change; random tokens: larger drop",
            measured={"scored on": scored, "delta NLL sinks": d_sink, "delta NLL random": d_rand,
                      "delta NLL random, min..max": [min(draws), max(draws)]}
                     | ({"caption NLL": masking["caption NLL"]} if "caption NLL" in masking else {}),
            **_judged(has, min(draws) - d_sink, margin("masking", standin),
                      "hiding the sinks vs the least harmful random draw"),
            note=(note or ("" if has else "no visual sink token")) + spread, follows=FOLLOWS_MASKING,
            adapted=f"the {scored} of held-out digit captions instead of benchmark accuracy (the caption's other tokens "
                    f"do not depend on the image); the sinks must beat every random draw", at_init=False))
    if var is not None:
        scored = _score_name(var.get("score", "caption"))
        idle = var.get("rows edited") == 0
        claims.append(Claim(
            id="kang2025.var_helps", source=f"{SOURCE}, Tables 1-3",
            statement="redistributing the sinks' attention to the image in image-centric heads (VAR) helps, "
                      "without training",
            rule=f"the {scored} with VAR < without by more than {margin('var', standin):g} nats (its cross-machine "
                 f"margin; within it: unsettled), where VAR edited at least one row (the paper measures benchmark "
                 f"accuracy of instruction-tuned LMMs)",
            published="+0.5 to +3 points on general, hallucination and vision-centric benchmarks",
            measured=var, **_judged(has and not idle, var["none"] - var["VAR"], margin("var", standin),
                                    "the NLL without VAR minus with it"),
            note=(note + "; " if note else "") + ("" if has else "no visual sink token; ")
                 + ("VAR found no image-centric row to edit; " if has and idle else "")
                 + "likelihood of held-out captions, not the paper's benchmarks",
            follows=FOLLOWS_VAR, adapted=f"the {scored} of a teacher-forced digit caption (one forward) instead of "
                                         f"benchmark accuracy of generated answers", at_init=False))
    return claims


def _judged(judgeable: bool, gain: float, spread: float, what: str) -> dict:
    """A comparison's Claim fields: holds when ``gain`` > 0 by more than ``spread`` (its cross-machine margin), fails
    when < 0 by more, unsettled within (:func:`sinklib.core.claims.against_cut`); not judgeable: None."""
    if not judgeable:
        return {"holds": None}
    holds, unsettled, cut = against_cut(gain, 0.0, spread)
    return {"holds": holds if not unsettled else None, "unsettled": unsettled, "margin": cut | {"of": what}}


# ------------------------------------------------------------------------------------------------------- inputs
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
    if extra is not None:
        with extra:
            logits = model(**inputs, **kwargs).logits
    else:
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


def sink_union(profile: MllmProfile, tau: float = KANG_TAU) -> torch.Tensor:
    """(B, P) bool: image tokens that are visual sinks in any layer from :data:`KANG_FIRST_LAYER` on."""
    return profile.sinks(tau)[KANG_FIRST_LAYER:].any(0)


def random_like(chosen: torch.Tensor, seed: int) -> torch.Tensor:
    """(B, P) bool with the same number of True per row as ``chosen``, at random image positions."""
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros_like(chosen)
    for b, k in enumerate(chosen.sum(-1).tolist()):
        out[b, torch.randperm(chosen.shape[1], generator=g)[:k]] = True
    return out


def background_claim(sinks: torch.Tensor, background: torch.Tensor, standin: bool) -> Claim:
    """``kang2025.sinks_on_background`` (Table 6: > 90% of visual sink tokens lie on background). sinks, background:
    (B, P) bool (:func:`sink_union`, :func:`plain_background`). Rule: at least 90% of the visual sink tokens sit on
    background patches, more than the background's share of all image tokens; None without sinks."""
    n = int(sinks.sum())
    share = (sinks & background).sum().item() / n if n else None
    base = background.float().mean().item()
    return Claim(
        id="kang2025.sinks_on_background", source=f"{SOURCE}, Table 6",
        statement="visual sink tokens lie on the background, not on the objects",
        rule=f"at least {KANG_BACKGROUND:.0%} of the visual sink tokens (phi >= 20 in a layer >= 2) sit on plain "
             f"background, more than the background's share of all image tokens",
        published=f"> {KANG_BACKGROUND:.0%} of visual sink tokens on background (PASCAL VOC / COCO masks)",
        measured={"visual sink tokens": n, "share on background": share, "background share of all image tokens": base},
        holds=None if share is None else (share >= KANG_BACKGROUND and share > base),
        note=("stand-in: projector trained here, no instruction tuning; " if standin else "")
             + ("" if n else "no visual sink token"),
        follows=f"Table 6 (visual sink tokens against segmentation masks); sinks as {CODE}:DimProspector.run_logic",
        adapted="the digits' plain white background (a patch whose pixels stay within 5% of the border colour) "
                "instead of segmentation masks",
        at_init=False)
