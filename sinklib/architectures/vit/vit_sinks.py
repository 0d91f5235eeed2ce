"""Sinks without a causal mask: where a vision transformer's attention goes, and its high-norm tokens.

Darcet et al., "Vision Transformers Need Registers" (arXiv 2309.16588): large, long-trained ViTs (DINOv2 ViT-L/g,
OpenCLIP, DeiT-III) grow a few patch tokens with a very large output norm (a hand-picked cut of 150 for DINOv2
ViT-g, ~2.4% of tokens, Fig. 3-4), on background patches that look like their neighbours (Fig. 5a), which hold
global rather than local information (Table 1: a linear probe of the image class from such a token works almost as
well as from CLS), and which the CLS query attends to (Fig. 2). Small models do not have them (Fig. 4c).

Every token sees every token here, so the first-token story of decoders does not apply; what is measured is how
much each key receives from all queries, what the CLS query looks at, the attention entropy, and the token norms.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from sinklib.core.adapters import adapter_for
from sinklib.core.capture import Capture
from sinklib.core.claims import Claim, over_draws
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
    """
    adapter = adapter_for(lm.model)
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
            with Capture(lm.model, attentions=True, hidden_states=True) as cap:
                if extra is not None:
                    with extra:
                        vit_forward(lm, batch)
                else:
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
                      top_abs=torch.cat(tops, 1), median_abs=torch.cat(medians, 1), top_site=torch.cat(sites, 1), cls_row=torch.cat(rows, 1))


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
    -> {"selected", "normal", "all": mean similarity, "k": tokens selected, "label", "space", "outliers"}."""
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
    return {"selected": sim[chosen].mean().item(), "normal": sim[~chosen].mean().item(), "all": sim.mean().item(),
            "k": n, "label": label, "space": "patch embeddings", "outliers": outliers}


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


@torch.inference_mode()
def token_features(lm: LoadedModel, pixels: torch.Tensor,
                   batch_size: int = 32) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Final-layer features for a linear probe (Darcet et al., Table 1): the CLS token, the highest-norm patch and
    the median-norm patch of each image, from the last block's output; and whether each image's highest-norm patch
    is an outlier there (:func:`outlier_mask` among the image's patches) -- the probe tests outlier tokens only where
    it is. (B, 3, S, S) -> ({name: (B, d)}, (B,) bool)."""
    n_prefix = adapter_for(lm.model).n_prefix
    last = len(adapter_for(lm.model).layers) - 1
    out: dict[str, list[torch.Tensor]] = {"CLS": [], "highest-norm patch": [], "median-norm patch": []}
    is_outlier: list[torch.Tensor] = []
    for start in range(0, len(pixels), batch_size):
        with Capture(lm.model, hidden_states=True, layers=[last]) as cap:
            vit_forward(lm, pixels[start:start + batch_size])
        h = cap.get("hidden_states", last).float()  # (B, T, d)
        patches = h[:, n_prefix:]
        norms = patches.norm(dim=-1)  # (B, P)
        order = norms.argsort(dim=-1)  # ascending
        rows = torch.arange(len(h))
        is_outlier.append(outlier_mask(norms)[rows, order[:, -1]].cpu())
        out["CLS"].append(h[:, 0])
        out["highest-norm patch"].append(patches[rows, order[:, -1]])
        out["median-norm patch"].append(patches[rows, order[:, order.shape[1] // 2]])
    return {k: torch.cat(v).cpu() for k, v in out.items()}, torch.cat(is_outlier)


def linear_probe(features: dict[str, torch.Tensor], labels: np.ndarray, train_fraction: float = 0.6,
                 seed: int = 0) -> dict[str, float]:
    """Held-out accuracy of a logistic-regression probe per feature set (one seeded split, standardised features)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(train_fraction * len(labels))
    train, test = order[:cut], order[cut:]
    accuracy = {}
    for name, x in features.items():
        x = x.numpy()
        probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=0.1))
        probe.fit(x[train], labels[train])
        accuracy[name] = float(probe.score(x[test], labels[test]))
    return accuracy


def probe_over_splits(features: dict[str, torch.Tensor], labels: np.ndarray, seeds: Sequence[int],
                      train_fraction: float = 0.6) -> list[dict[str, float]]:
    """:func:`linear_probe` once per train / test split (one split per seed, the run's seed first): the draws of
    ``darcet2023.outliers_hold_global_information``."""
    return [linear_probe(features, labels, train_fraction, seed) for seed in seeds]


def summary(profile: VitProfile) -> dict:
    """Per-model numbers for comparing ViTs: largest / median patch norm and outlier fraction per layer, the share
    of attention CLS (+ registers) receive, and the most-attended patch over uniform."""
    return {"max_norm_ratio": profile.max_norm_ratio(),
            "outlier_fraction": outlier_mask(profile.patch_norms()).float().mean(dim=(1, 2)).tolist(),
            "prefix_share": profile.prefix_share(), "top_patch_ratio": profile.top_patch_ratio(),
            "n_prefix": profile.n_prefix}


# ------------------------------------------------------------------------------------------------------- claims
DARCET = "Darcet et al., Vision Transformers Need Registers, arXiv 2309.16588"
DARCET_CODE = ("no public code for the norm analysis (facebookresearch/dinov2 publishes the register models: "
               "dinov2/models/vision_transformer.py, num_register_tokens)")
RELATIVE_CUT = (f"outlier = norm > {OUTLIER_FACTOR:g} x the image's median patch norm, instead of the paper's absolute "
                f"cut (norm > {DARCET_CUT_VIT_G:g} for DINOv2 ViT-g)")


REGISTER_TWINS = {"facebook/dinov2-large": "facebook/dinov2-with-registers-large",  # without -> with registers
                  "facebook/dinov2-giant": "facebook/dinov2-with-registers-giant"}
LARGE_FRACTION = (0.005, 0.10)  # a large model without registers: 0.5-10% outliers late (ViT-g: ~2.4%)


def late_outlier_fraction(profile: VitProfile) -> float:
    """The fraction of patch tokens past the outlier cut, mean over the last third of the layers and the images."""
    frac = outlier_mask(profile.patch_norms()).float().mean(dim=(1, 2))  # (L,)
    return frac[-max(1, len(frac) // 3):].mean().item()


# Which ViTs Darcet et al. / Jiang et al. find outliers in, by hub id: the three largest DINOv2 sizes (Fig. 4c: L, H,
# g -- "only the three largest models exhibit outliers") and the 12-layer CLIP / OpenCLIP ViT-B/16 that Jiang et al.
# configure outlier detection for (configs/openai_clip_base.yaml, openclip_base.yaml; Darcet et al. Fig. 2 / 7 show
# OpenCLIP and DeiT-III with artefacts too).
OUTLIER_MODELS = ("facebook/dinov2-large", "facebook/dinov2-giant", "openai/clip-vit-base-patch16",
                  "laion/CLIP-ViT-B-16-laion2B-s34B-b88K", "openai/clip-vit-large-patch14",
                  "timm/deit3_large_patch16_224.fb_in22k_ft_in1k")


def expectation(name: str, n_layers: int, n_prefix: int) -> str:
    """What Darcet et al. predict for a ViT: "registers" (trained with registers: no outlier patches, Fig. 7),
    "outliers" (a model in :data:`OUTLIER_MODELS`, or any other model of 24 layers or more), else "none" (a small
    model, Fig. 4c)."""
    if n_prefix > 1:
        return "registers"
    return "outliers" if name in OUTLIER_MODELS or n_layers >= 24 else "none"


def outliers_only_claim(profile: VitProfile, expect: str, calibration: dict | None = None,
                        note: str = "") -> Claim:
    """``darcet2023.outliers_only_in_large_models`` (Sec. 2.1, Fig. 3-4; Fig. 7 for registers), judged on the half a
    model can test (:func:`expectation`): "none" (a small model) holds when no layer's patch tokens pass
    :func:`outlier_mask`; "outliers" when the last third of the layers has 0.5-10% outlier patches
    (:func:`late_outlier_fraction`; ViT-g: ~2.4%); "registers" when that third has under 0.5%.
    ``calibration``: the relative cut set beside an absolute one (``registers.calibration``), recorded as measured."""
    frac = outlier_mask(profile.patch_norms()).float().mean(dim=(1, 2))  # (L,)
    late = late_outlier_fraction(profile)
    low, high = LARGE_FRACTION
    if expect == "registers":
        holds, rule = late < low, f"trained with registers: under {low:.1%} of patch tokens in the last third are outliers"
        statement = "a ViT trained with registers has no high-norm outlier tokens on its patches"
        why = "large model trained with registers (Darcet et al. predict no outlier patches)"
    elif expect == "outliers":
        holds, rule = low <= late <= high, f"{low:.1%}-{high:.0%} of patch tokens in the last third of layers are outliers"
        statement = "a large (or CLIP-trained) ViT has a few high-norm outlier tokens (~2.4% in DINOv2 ViT-g)"
        why = "a model Darcet et al. / Jiang et al. find outliers in"
    elif expect == "none":
        holds, rule = not bool((frac > 0).any()), "a small model: no patch token in any layer is an outlier"
        statement = ("a small ViT has no high-norm outlier tokens (the half of 'outliers appear only in large "
                     "models' that a small model can test)")
        why = "small model (Darcet et al. find none at this size)"
    else:
        raise ValueError(f"expect must be 'none', 'outliers' or 'registers', not {expect!r}")
    measured = {"outlier fraction, last third": late, "max / median patch norm": max(profile.max_norm_ratio()),
                "layers with outliers": int((frac > 0).sum()), "first layer with outliers": first_outlier_layer(profile)}
    return Claim(
        id="darcet2023.outliers_only_in_large_models", source=f"{DARCET}, Fig. 3-4",
        statement=statement,
        rule=f"{rule}; outlier = norm > {OUTLIER_FACTOR:g} x the image's median patch norm",
        published={"fraction ViT-g": DARCET_FRACTION, "cut ViT-g": DARCET_CUT_VIT_G, "small models": "none",
                   "with registers": "none"},
        measured=measured | ({"calibration": calibration} if calibration else {}),
        holds=holds, note="; ".join(x for x in (why, note) if x),
        follows=f"Sec. 2.1, Fig. 3 (bimodal norm histogram, cut 150), Fig. 4c (only the three largest DINOv2 sizes) "
                f"and Fig. 7 (registers remove them); {DARCET_CODE}",
        adapted=f"{RELATIVE_CUT}, set beside Jiang et al.'s absolute cut for the model where one exists (the "
                f"calibration in measured); expectation by model (:func:`expectation`): DINOv2-L/g, CLIP / OpenCLIP "
                f"ViT-B/16 and other models of 24+ layers are expected to have 0.5-10% outliers in the last third of "
                f"the layers, models with registers under 0.5%, small models none",
        at_init=False)


def registers_remove_outliers_claim(pairs: dict[str, tuple[VitProfile, VitProfile]]) -> Claim:
    """``darcet2023.registers_remove_outliers`` (Sec. 3, Fig. 7): the same model trained with registers has no
    high-norm patch tokens where the one without has them. ``pairs``: {name: (without, with registers)}. Rule: every
    pair whose model without registers has >= 0.5% late outliers (:func:`late_outlier_fraction`) has under 0.5% with
    them; None when no pair has outliers to remove (then nothing was tested)."""
    low = LARGE_FRACTION[0]
    measured = {name: {"without registers": late_outlier_fraction(a), "with registers": late_outlier_fraction(b)}
                for name, (a, b) in pairs.items()}
    tested = {n: m for n, m in measured.items() if m["without registers"] >= low}
    holds = all(m["with registers"] < low for m in tested.values()) if tested else None
    return Claim(
        id="darcet2023.registers_remove_outliers", source=f"{DARCET}, Fig. 7",
        statement="training with registers removes the high-norm outlier tokens from the patches",
        rule=f"every pair whose model without registers has >= {low:.1%} outlier patches in the last third of the "
             f"layers has under {low:.1%} with registers; outlier = norm > {OUTLIER_FACTOR:g} x the median patch norm",
        published="outliers disappear with registers (Fig. 7: DeiT-III, OpenCLIP, DINOv2)",
        measured=measured, holds=holds,
        note="" if tested else "no model without registers had outliers to remove",
        needs_gpu=not tested,
        follows=f"Sec. 3, Fig. 7 (norm distributions with and without registers); {DARCET_CODE}",
        adapted=f"{RELATIVE_CUT}; pairs of the published checkpoints with and without registers (DINOv2-L / -g)",
        at_init=False)


def redundant_patches_claim(similarity: dict) -> Claim:
    """``darcet2023.outliers_on_redundant_patches`` (Fig. 5a): high-norm tokens sit on patches whose patch
    embeddings look like their neighbours'. similarity: :func:`high_norm_similarity`. Rule: the last layer has
    outlier patches and their mean neighbour similarity in the patch embeddings exceeds that of the other patches;
    None without outliers (then the highest-norm patches were measured instead)."""
    has = similarity["outliers"]
    return Claim(
        id="darcet2023.outliers_on_redundant_patches", source=f"{DARCET}, Fig. 5a",
        statement="high-norm tokens sit on patches that look like their neighbours (background)",
        rule="the last layer has outlier patches, and their mean cosine similarity to their 4 neighbours in the patch "
             "embeddings exceeds that of the other patches",
        published="artifact patches (output norm > 150): high cosine similarity to their neighbours; normal: lower",
        measured={k: similarity[k] for k in ("selected", "normal", "all", "k", "label")},
        holds=similarity["selected"] > similarity["normal"] if has else None,
        note="" if has else "no outliers in this model; the highest-norm patches were measured instead",
        needs_gpu=not has,
        follows=f"Sec. 2.1, Fig. 5a (tokens chosen by their output norm; cosine similarity to the 4 neighbours right "
                f"after the patch embedding layer); {DARCET_CODE}",
        adapted=f"outliers by {OUTLIER_FACTOR:g} x the median patch norm at the last block (the paper: > 150 at the "
                f"output of ViT-g); border patches average the neighbours they have",
        at_init=False)


def global_information_claim(probe: dict[str, float], outlier_share: float) -> Claim:
    """``darcet2023.outliers_hold_global_information`` (Table 1): a linear probe of the image label works from an
    outlier token (near CLS), not from a normal patch. Rule: in most probe images (>= 50%) the last layer's
    highest-norm patch is an outlier, and probe(highest-norm patch) - probe(median-norm patch) > 0.1; None when it
    is an outlier in fewer (then the probe reads an ordinary patch)."""
    has = outlier_share >= 0.5
    return Claim(
        id="darcet2023.outliers_hold_global_information", source=f"{DARCET}, Table 1",
        statement="a linear probe of the image label works from an outlier token (near CLS) but not from a normal "
                  "patch",
        rule="the highest-norm patch is an outlier in >= 50% of the probe images, and probe(highest-norm patch) - "
             "probe(median-norm patch) > 0.1",
        published="outlier ~ CLS >> normal patch",
        measured=probe | {"probe images whose highest-norm patch is an outlier": outlier_share},
        holds=probe["highest-norm patch"] - probe["median-norm patch"] > 0.1 if has else None,
        note="" if has else (f"the highest-norm patch is an outlier in {outlier_share:.0%} of the probe images: the "
                             f"probe reads an ordinary patch"),
        needs_gpu=not has,
        follows=f"Sec. 2.1, Table 1 (linear probes of the image class from normal and outlier tokens); {DARCET_CODE}",
        adapted="scikit-learn's digits (upscaled) instead of image classification; the last layer's highest-norm "
                "patch stands for the outlier (checked on the probe images themselves) and its median-norm patch for "
                "a normal one; the 0.1 margin is this project's",
        at_init=False)


def high_norm_claims(profile: VitProfile, expect: str, similarity: dict | None = None,
                     probe: dict[str, float] | Sequence[dict[str, float]] | None = None,
                     probe_draws_of: str = "", outlier_share: float = 0.0, calibration: dict | None = None,
                     note: str = "") -> list[Claim]:
    """Darcet et al.'s claims about high-norm tokens, judged on one model (:func:`outliers_only_claim`,
    :func:`redundant_patches_claim`, :func:`global_information_claim`). ``probe``: one probe result, or one per
    train / test split (:func:`probe_over_splits`, the run's seed first), judged with
    :func:`~sinklib.core.claims.over_draws` (without outliers each draw is "not judged" and the note says why);
    ``outlier_share``: the fraction of probe images whose highest-norm patch is an outlier (:func:`token_features`)."""
    claims = [outliers_only_claim(profile, expect, calibration, note)]
    if similarity is not None:
        claims.append(redundant_patches_claim(similarity))
    if probe is not None:
        has = outlier_share >= 0.5
        probes = [probe] if isinstance(probe, dict) else list(probe)
        draws = [global_information_claim(p, outlier_share) for p in probes]
        if len(draws) == 1:
            claims.append(draws[0])
        else:
            gap = [p["highest-norm patch"] - p["median-norm patch"] for p in probes]
            spread = {"min": min(gap), "max": max(gap), "values": gap}
            of = probe_draws_of or f"{len(draws)} train / test splits of the digits"
            claims.append(replace(over_draws(draws, of), spread=spread) if has else
                          replace(draws[0], draws=tuple(d.holds for d in draws), draws_of=of, spread=spread))
    return claims


# Sun et al. report massive activations in these ViTs (Sec. 5, Fig. 10-11; timm ids in their lib/load_model.py):
# CLIP ViT-L/14 and DINOv2-reg ViT-G, the latter in a register token.
SUN_VIT_MODELS = {"openai/clip-vit-large-patch14": "CLIP ViT-L (timm vit_large_patch14_clip_224.openai)",
                  "facebook/dinov2-with-registers-giant": "DINOv2-reg ViT-G (timm vit_giant_patch14_reg4_dinov2)"}
SUN_MAGNITUDE, SUN_RATIO = 100.0, 1000.0
SUN = "Sun et al., Massive Activations in Large Language Models, arXiv 2402.17762"


def vit_massive_activations_claim(profile: VitProfile, name: str) -> Claim:
    """``sun2024.vit_massive_activations`` (Sec. 5): some ViTs have massive activations -- |h| > 100 and about
    1,000 x the median -- at fixed feature dimensions. Rule: some layer's largest |h| (mean over images) exceeds 100
    and 1000 x the layer median (:func:`massive_ratio`), and in that layer the largest entry sits in one dimension
    in at least 80% of the images. Judged only on the models Sun et al. report (:data:`SUN_VIT_MODELS`); on others
    the numbers are recorded and the claim is not judged."""
    ratio = massive_ratio(profile)
    top = profile.top_abs[..., 0].mean(-1)  # (L,)
    peak = max(range(len(ratio)), key=lambda i: ratio[i])
    dims = profile.top_site[peak, :, 1]
    common = torch.mode(dims).values
    same_dim = (dims == common).float().mean().item()
    prefix = profile.top_site[peak, :, 0] < profile.n_prefix
    massive = [i for i in range(len(ratio)) if top[i] > SUN_MAGNITUDE and ratio[i] > SUN_RATIO]
    reported = name in SUN_VIT_MODELS
    return Claim(
        id="sun2024.vit_massive_activations", source=f"{SUN}, Sec. 5",
        statement="massive activations (> 100 and ~1000 x the median) appear in ViTs such as CLIP ViT-L and "
                  "DINOv2-reg ViT-G, at fixed feature dimensions",
        rule=f"some layer's largest |h| (mean over images) > {SUN_MAGNITUDE:g} and > {SUN_RATIO:g} x the median |h| of "
             f"the whole block output (mean over images), with the largest entry in one dimension in >= 80% of the "
             f"images",
        published="CLIP ViT-L and DINOv2-reg ViT-G: yes (in DINOv2-reg, in a register token)",
        measured={"largest / layer median, peak": ratio[peak], "peak layer": peak, "largest |h| there": top[peak].item(),
                  "dimension of the largest": int(common), "images with the largest in that dimension": same_dim,
                  "images with the largest on a prefix token": prefix.float().mean().item(),
                  "layers meeting the criterion": massive},
        holds=(bool(massive) and same_dim >= 0.8) if reported else None,
        note="" if reported else "Sun et al. report no result for this model; measured, not judged",
        needs_gpu=not reported,
        follows="Sec. 5 and the layer statistics of locuslab/massive-activations:main_vit.py (exp2: top |h| and the "
                "median of the whole block output, averaged over images); the 100 / 1000x criterion of Sec. 2",
        adapted="this run's photos instead of 10 ImageNet validation images; transformers checkpoints with the same "
                "weights as the authors' timm ones",
        at_init=False)
