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

This module measures: phi, the sink dimensions, the per-layer profile of one forward, which patches are plain
background and how two sink sets overlap. The rules are in :mod:`sinklib.architectures.mllm.kang_rules`, the claim
records in :mod:`sinklib.architectures.mllm.kang_claims`, caption inputs and their likelihood in
:mod:`sinklib.architectures.mllm.captions` (import each name from the module that defines it), and the two attention edits
(hiding keys, VAR) in :mod:`sinklib.architectures.mllm.visual_attention`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from sinklib.architectures.mllm.captions import logits_kwargs
from sinklib.architectures.mllm.image_layout import ImageLayout
from sinklib.architectures.mllm.kang_rules import KANG_FIRST_LAYER, KANG_TAU
from sinklib.core.adapters import adapter_for
from sinklib.core.capture import Capture


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


def sink_jaccard(a: torch.Tensor, b: torch.Tensor) -> float | None:
    """Mean over rows of |a & b| / |a | b| for (B, P) bool sink sets, over the rows where a or b has a sink; None
    when neither has any (no sink: nothing to overlap, not a perfect overlap)."""
    inter, union = (a & b).sum(-1).float(), (a | b).sum(-1).float()
    some = union > 0
    return (inter[some] / union[some]).mean().item() if some.any() else None


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


def random_like(chosen: torch.Tensor, seed: int) -> torch.Tensor:
    """(B, P) bool with the same number of True per row as ``chosen``, at random image positions."""
    g = torch.Generator().manual_seed(seed)
    out = torch.zeros_like(chosen)
    for b, k in enumerate(chosen.sum(-1).tolist()):
        out[b, torch.randperm(chosen.shape[1], generator=g)[:k]] = True
    return out
