"""Sinks without a causal mask: where a vision transformer's attention goes, and its high-norm tokens.

Darcet et al., "Vision Transformers Need Registers" (arXiv 2309.16588): large, long-trained ViTs (DINOv2 ViT-L/g,
OpenCLIP, DeiT-III) grow a few patch tokens with a very large output norm (a hand-picked cut of 150 for DINOv2
ViT-g, ~2.4% of tokens, Fig. 3-4), on background patches that look like their neighbours (Fig. 5a), which hold
global rather than local information (Table 1: a linear probe of the image class from such a token works almost as
well as from CLS), and which the CLS query attends to (Fig. 2). Small models do not have them (Fig. 4c).

Every token sees every token here, so the first-token story of decoders does not apply; what is measured is how
much each key receives from all queries, what the CLS query looks at, the attention entropy, and the token norms.

This module measures; Darcet et al.'s rules and claims are in :mod:`sinklib.architectures.vit.darcet_claims`, Sun et
al.'s in :mod:`sinklib.architectures.vit.vit_massive_claims`, the Table 1 probe in :mod:`sinklib.architectures.vit.probe`
(import each name from the module that defines it).
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from torch import nn

from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel

OUTLIER_FACTOR = 3.0  # this project's cut: norm > 3 x the median patch norm of the same image and layer
DARCET_CUT_VIT_G = 150.0  # Darcet et al.'s hand-picked absolute cut for DINOv2 ViT-g
DARCET_FRACTION = 0.024  # ~2.4% of tokens are high-norm in DINOv2 ViT-g (arXiv 2309.16588, Sec. 2)


@dataclass
class VitProfile:
    """What one set of images does inside a ViT, per layer l (block outputs) and image b.

    cls_map: (L, B, gh, gw) the CLS query's attention over the patch grid, mean over heads;
    received: (L, B, T) attention each key receives, mean over heads and over all T queries (sums to 1 over keys);
    entropy: (L,) mean over images, heads and queries of H(A[t, :]) = -sum_j A[t, j] log A[t, j] (nats);
    norms: (L, B, T) ||h^l_t|| after block l; n_prefix: CLS + registers (first tokens); grid: (gh, gw);
    embed_similarity: (B, P) each patch's mean cosine similarity to its 4 grid neighbours in the patch embeddings
    (the patch-embedding layer's output, before position embeddings; Darcet et al., Fig. 5a);
    top_abs: (L, B, 3) the three largest |h| of block l's whole output (all tokens x all dimensions) and
    median_abs: (L, B) its median, top_site: (L, B, 2) (token, dimension) of the largest -- Sun et al.'s layer
    statistics (locuslab/massive-activations ``main_vit.py``, exp2).
    """

    label: str
    n_prefix: int
    grid: tuple[int, int]
    cls_map: torch.Tensor
    received: torch.Tensor
    entropy: torch.Tensor
    norms: torch.Tensor
    embed_similarity: torch.Tensor | None = None
    top_abs: torch.Tensor | None = None
    median_abs: torch.Tensor | None = None
    top_site: torch.Tensor | None = None
    cls_row: torch.Tensor | None = None  # (L, B, T) the CLS query's attention over every key, mean over heads

    @property
    def n_tokens(self) -> int:
        return self.received.shape[-1]

    def patch_norms(self) -> torch.Tensor:
        """(L, B, P) norms of the patch tokens only (prefix dropped; extra tokens appended at the end dropped)."""
        return self.norms[..., self.n_prefix:self.n_prefix + self.grid[0] * self.grid[1]]

    def patch_received(self) -> torch.Tensor:
        return self.received[..., self.n_prefix:self.n_prefix + self.grid[0] * self.grid[1]]

    def prefix_share(self) -> list[float]:
        """Per layer: attention all queries give to the prefix tokens (CLS + registers), mean over images."""
        return self.received[..., :self.n_prefix].sum(-1).mean(-1).tolist()

    def top_patch_ratio(self) -> list[float]:
        """Per layer: attention received by the most-attended patch / the uniform share 1/T, mean over images."""
        return (self.patch_received().max(-1).values * self.n_tokens).mean(-1).tolist()

    def max_norm_ratio(self) -> list[float]:
        """Per layer: the largest patch norm / the median patch norm of the same image, max over images."""
        pn = self.patch_norms()
        return (pn.max(-1).values / pn.median(-1).values).max(-1).values.tolist()


def grid_of(lm: LoadedModel, image_size: int) -> tuple[int, int]:
    """The patch grid of an image_size x image_size input: image_size // patch size in each direction."""
    model = lm.model
    patch = getattr(getattr(model, "config", None), "patch_size", None)
    if patch is None:  # timm
        patch = model.patch_embed.patch_size
    p = patch if isinstance(patch, int) else patch[0]
    return image_size // p, image_size // p


def patch_embedding(model: nn.Module) -> nn.Module:
    """The module that turns pixels into patch embeddings (before CLS, registers and position embeddings): timm's
    ``patch_embed``, transformers' ``embeddings.patch_embeddings`` (DINOv2, ViT) or ``embeddings.patch_embedding``
    (CLIP vision's convolution)."""
    for path in ("patch_embed", "embeddings.patch_embeddings", "embeddings.patch_embedding",
                 "vision_model.embeddings.patch_embedding"):
        module = model
        for part in path.split("."):
            module = getattr(module, part, None)
        if isinstance(module, nn.Module):
            return module
    raise ValueError(f"{type(model).__name__}: no patch-embedding module found (patch_embed / embeddings."
                     f"patch_embeddings / embeddings.patch_embedding); pass a ViT from timm or transformers")


def patch_grid(embedded: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """A patch-embedding output as a grid: (B, P, d), (B, d, gh, gw) or (B, gh, gw, d) -> (B, gh, gw, d)."""
    gh, gw = grid
    if embedded.dim() == 3:
        return embedded.reshape(embedded.shape[0], gh, gw, -1)
    if embedded.shape[1:3] == (gh, gw):
        return embedded
    return embedded.permute(0, 2, 3, 1)


def grid_similarity(x: torch.Tensor) -> torch.Tensor:
    """Each cell's mean cosine similarity to its 4 grid neighbours (up, down, left, right; cells on the border
    average the neighbours they have). x: (B, gh, gw, D) -> (B, gh * gw)."""
    b, gh, gw, _ = x.shape
    x = torch.nn.functional.normalize(x.float(), dim=-1)
    total = torch.zeros(b, gh, gw)
    count = torch.zeros(1, gh, gw)
    for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)):
        shifted = torch.roll(x, shifts=(dy, dx), dims=(1, 2))
        valid = torch.ones(gh, gw)
        if dy:
            valid[0 if dy > 0 else -1, :] = 0
        if dx:
            valid[:, 0 if dx > 0 else -1] = 0
        total += (x * shifted).sum(-1).cpu() * valid
        count += valid
    return (total / count).reshape(b, gh * gw)


def layer_statistics(hidden: torch.Tensor, k: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sun et al.'s per-layer statistics of a whole block output, per image: the k largest |h| over all tokens and
    dimensions, the median |h| over the same, and the (token, dimension) of the largest.
    hidden: (L, B, T, d) -> top (L, B, k), median (L, B), site (L, B, 2)."""
    flat = hidden.abs().flatten(2)  # (L, B, T * d)
    top = flat.topk(k, dim=-1)
    d = hidden.shape[-1]
    first = top.indices[..., 0]
    return top.values, flat.median(dim=-1).values, torch.stack([first // d, first % d], dim=-1)


def vit_forward(lm: LoadedModel, pixels: torch.Tensor):
    """One forward of a transformers or timm ViT on (B, 3, S, S) pixels."""
    pixels = pixels.to(lm.device, lm.dtype)
    if hasattr(lm.model, "forward_features"):  # timm
        return lm.model.forward_features(pixels)
    return lm.model(pixel_values=pixels)


@torch.inference_mode()
def profile_vit(lm: LoadedModel, pixels: torch.Tensor, batch_size: int = 8, extra: object | None = None) -> VitProfile:
    """Capture attention and block outputs for images (B, 3, S, S) and reduce them to a :class:`VitProfile`.

    ``extra``: an optional context manager entered inside the capture for every batch (an intervention such as
    :class:`sinklib.architectures.vit.registers.TestTimeRegisters`), so before / after profiles come from one code path.
    Refused in one line: a model that is not a ViT, pixels that are not a finite float (B, 3, S, S) tensor.
    """
    from sinklib.core.images import check_pixels
    from sinklib.models.load import require_family

    require_family(lm, ("vit",), "profile_vit")
    pixels = check_pixels(pixels, "profile_vit")
    adapter = lm.adapter
    gh, gw = grid_of(lm, pixels.shape[-1])
    n_prefix = adapter.n_prefix
    cls_maps, received, entropy, norms, similarity, tops, medians, sites, rows = [], [], [], [], [], [], [], [], []
    embedded: list[torch.Tensor] = []
    hook = patch_embedding(lm.model).register_forward_hook(
        lambda m, a, out: embedded.append((out[0] if isinstance(out, tuple) else out).detach()))
    try:
        for start in range(0, len(pixels), batch_size):
            batch = pixels[start:start + batch_size]
            embedded.clear()
            with Capture(lm, attentions=True, hidden_states=True) as cap:
                with extra if extra is not None else contextlib.nullcontext():
                    vit_forward(lm, batch)
            att = cap.stack("attentions").float()  # (L, B, H, T, T)
            hid = cap.stack("hidden_states").float()  # (L, B, T, d)
            similarity.append(grid_similarity(patch_grid(embedded[0], (gh, gw))))  # (B, P)
            top, median, site = layer_statistics(hid)
            tops.append(top.cpu())
            medians.append(median.cpu())
            sites.append(site.cpu())
            cls_maps.append(att[:, :, :, 0, n_prefix:n_prefix + gh * gw].mean(2)
                            .reshape(len(att), len(batch), gh, gw).cpu())
            received.append(att.mean(dim=(2, 3)).cpu())  # (L, B, T)
            rows.append(att[:, :, :, 0].mean(2).cpu())  # (L, B, T)
            entropy.append(-(att * att.clamp_min(1e-12).log()).sum(-1).mean(dim=(2, 3)).cpu())  # (L, B)
            norms.append(hid.norm(dim=-1).cpu())
    finally:
        hook.remove()
    ent = torch.cat(entropy, dim=1).mean(1)
    return VitProfile(label=str(getattr(lm, "label", "")), n_prefix=n_prefix, grid=(gh, gw),
                      cls_map=torch.cat(cls_maps, 1), received=torch.cat(received, 1), entropy=ent,
                      norms=torch.cat(norms, 1), embed_similarity=torch.cat(similarity),
                      top_abs=torch.cat(tops, 1), median_abs=torch.cat(medians, 1), top_site=torch.cat(sites, 1),
                      cls_row=torch.cat(rows, 1))


def outlier_mask(patch_norms: torch.Tensor, factor: float = OUTLIER_FACTOR) -> torch.Tensor:
    """High-norm patch tokens: ||h_t|| > factor x the median patch norm of the same image (and layer).

    This project's relative cut (Darcet et al. hand-picked an absolute 150 for DINOv2 ViT-g, where the norm histogram
    is bimodal; a relative cut carries over to models whose norms live on another scale). (..., P) -> bool (..., P).
    """
    return patch_norms > factor * patch_norms.median(dim=-1, keepdim=True).values


def high_norm_similarity(profile: VitProfile, top_fraction: float = 0.02) -> dict:
    """Darcet et al.'s Fig. 5a: are the high-norm tokens redundant with their neighbours? The tokens are chosen as
    the paper does, by their norm at the model's output (the last block), and compared in the patch embeddings (the
    similarity to the 4 grid neighbours, :attr:`VitProfile.embed_similarity`). Where the last layer has outlier
    patches (:func:`outlier_mask`) those are taken; where it has none, the ``top_fraction`` highest-norm patches of
    each image stand in (and ``outliers`` is False).
    The gap selected - all is read against its resolution (:func:`gap_resolution`): two standard errors of the
    per-image gap over the images.
    -> {"selected", "normal", "all": mean similarity, "k": tokens selected, "label", "space", "outliers",
    "resolution", "images": the images with a selected token}."""
    if profile.embed_similarity is None:
        raise ValueError("the profile has no patch-embedding similarity (profile it with profile_vit)")
    last = profile.patch_norms()[-1]  # (B, P)
    chosen = outlier_mask(last)
    outliers = bool(chosen.any())
    if not outliers:
        k = max(1, round(top_fraction * last.shape[-1]))
        chosen = torch.zeros_like(chosen)
        chosen.scatter_(1, last.topk(k, dim=-1).indices, True)
    sim = profile.embed_similarity
    n = int(chosen.sum())
    label = (f"{n} outlier patches (last layer)" if outliers else
             f"{n} highest-norm patches (top {top_fraction:.0%} per image, last layer; no outliers)")
    resolution, images = gap_resolution(sim, chosen)
    return {"selected": sim[chosen].mean().item(), "normal": sim[~chosen].mean().item(), "all": sim.mean().item(),
            "k": n, "label": label, "space": "patch embeddings", "outliers": outliers, "resolution": resolution,
            "images": images}


def neighbour_gap(similarity: dict) -> str:
    """How the selected (high-norm) patches of :func:`high_norm_similarity` compare with all patches in their mean
    similarity to their grid neighbours: "no different" when the gap |selected - all| is below its resolution
    (:func:`gap_resolution`), else "more" or "less" alike -- "as" alike for equal means without a resolution."""
    sel, every = similarity["selected"], similarity["all"]
    res = similarity.get("resolution", float("nan"))
    if res is not None and not math.isnan(res) and abs(sel - every) < res:
        return "no different"
    return "more" if sel > every else "less" if sel < every else "as"


def gap_resolution(sim: torch.Tensor, chosen: torch.Tensor) -> tuple[float, int]:
    """The smallest gap between the chosen patches' mean similarity and all patches' that the images can resolve:
    per image b with a chosen patch, g_b = mean(sim[b, chosen_b]) - mean(sim[b]); resolution = 2 sd(g) / sqrt(n)
    over those n images (two standard errors of the mean gap). NaN for fewer than two images (no spread to measure).
    sim, chosen: (B, P). -> (resolution, n)."""
    has = chosen.any(-1)
    n = int(has.sum())
    if n < 2:
        return float("nan"), n
    picked = (sim * chosen).sum(-1)[has] / chosen.sum(-1)[has]  # (n,) mean of the chosen patches per image
    gaps = (picked - sim.mean(-1)[has]).double()
    return float(2 * gaps.std(unbiased=True) / math.sqrt(n)), n


def cls_attention_split(profile: VitProfile, chosen: torch.Tensor | None = None) -> dict[str, list[float]]:
    """Jiang et al.'s before / after view of the CLS query: per layer, its attention (mean over heads and images) to
    the extra tokens appended after the patches (a test-time register), to the ``chosen`` patches (B, P) bool --
    e.g. the outliers before the edit -- and to the other patches. -> {"extra", "chosen", "other patches"}: (L,)."""
    row = profile.cls_row  # (L, B, T)
    p0, p1 = profile.n_prefix, profile.n_prefix + profile.grid[0] * profile.grid[1]
    patches = row[..., p0:p1]  # (L, B, P)
    pick = torch.zeros(patches.shape[1:], dtype=torch.bool) if chosen is None else chosen.bool()
    return {"extra": row[..., p1:].sum(-1).mean(-1).tolist(),
            "chosen": (patches * pick).sum(-1).mean(-1).tolist(),
            "other patches": (patches * ~pick).sum(-1).mean(-1).tolist()}


def first_outlier_layer(profile: VitProfile) -> int | None:
    """Darcet et al.'s Fig. 4a: the first layer whose patch tokens include an outlier (:func:`outlier_mask`), None
    when no layer has one."""
    frac = outlier_mask(profile.patch_norms()).float().mean(dim=(1, 2))  # (L,)
    hit = (frac > 0).nonzero().flatten()
    return int(hit[0]) if len(hit) else None


def massive_ratio(profile: VitProfile) -> list[float]:
    """Per layer: the largest |h| over the median |h| of the whole block output (Sun et al.'s layer median), each
    averaged over images first, as their exp2 does (``main_vit.py``: the per-image top values and medians are
    averaged separately, then compared): mean_b top_b / mean_b median_b, not mean_b (top_b / median_b)."""
    top = profile.top_abs[..., 0].mean(-1)  # (L,)
    return (top / profile.median_abs.mean(-1).clamp_min(1e-12)).tolist()


def summary(profile: VitProfile) -> dict:
    """Per-model numbers for comparing ViTs: largest / median patch norm and outlier fraction per layer, the share
    of attention CLS (+ registers) receive, and the most-attended patch over uniform."""
    return {"max_norm_ratio": profile.max_norm_ratio(),
            "outlier_fraction": outlier_mask(profile.patch_norms()).float().mean(dim=(1, 2)).tolist(),
            "prefix_share": profile.prefix_share(), "top_patch_ratio": profile.top_patch_ratio(),
            "n_prefix": profile.n_prefix}
