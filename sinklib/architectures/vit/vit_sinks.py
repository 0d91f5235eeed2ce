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
    norms: (L, B, T) ||h^l_t|| after block l; n_prefix: CLS + registers (first tokens); grid: (gh, gw).
    """

    label: str
    n_prefix: int
    grid: tuple[int, int]
    cls_map: torch.Tensor
    received: torch.Tensor
    entropy: torch.Tensor
    norms: torch.Tensor

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
    cls_maps, received, entropy, norms = [], [], [], []
    for start in range(0, len(pixels), batch_size):
        batch = pixels[start:start + batch_size]
        with Capture(lm.model, attentions=True, hidden_states=True) as cap:
            if extra is not None:
                with extra:
                    vit_forward(lm, batch)
            else:
                vit_forward(lm, batch)
        att = cap.stack("attentions").float()  # (L, B, H, T, T)
        hid = cap.stack("hidden_states").float()  # (L, B, T, d)
        cls_maps.append(att[:, :, :, 0, n_prefix:n_prefix + gh * gw].mean(2).reshape(len(att), len(batch), gh, gw))
        received.append(att.mean(dim=(2, 3)))  # (L, B, T)
        entropy.append(-(att * att.clamp_min(1e-12).log()).sum(-1).mean(dim=(2, 3)))  # (L, B)
        norms.append(hid.norm(dim=-1))
    ent = torch.cat(entropy, dim=1).mean(1)
    return VitProfile(label=str(getattr(lm, "label", "")), n_prefix=n_prefix, grid=(gh, gw),
                      cls_map=torch.cat(cls_maps, 1), received=torch.cat(received, 1), entropy=ent,
                      norms=torch.cat(norms, 1))


def outlier_mask(patch_norms: torch.Tensor, factor: float = OUTLIER_FACTOR) -> torch.Tensor:
    """High-norm patch tokens: ||h_t|| > factor x the median patch norm of the same image (and layer).

    This project's relative cut (Darcet et al. hand-picked an absolute 150 for DINOv2 ViT-g, where the norm histogram
    is bimodal; a relative cut carries over to models whose norms live on another scale). (..., P) -> bool (..., P).
    """
    return patch_norms > factor * patch_norms.median(dim=-1, keepdim=True).values


def neighbour_similarity(pixels: torch.Tensor, patch: int) -> torch.Tensor:
    """How redundant each patch is: the mean cosine similarity of its pixels to its 4 grid neighbours' pixels
    (Darcet et al., Fig. 5a, measure it on the patch embeddings; pixels need no model). (B, 3, S, S) -> (B, P)."""
    b, c, s, _ = pixels.shape
    g = s // patch
    x = pixels[..., :g * patch, :g * patch].reshape(b, c, g, patch, g, patch).permute(0, 2, 4, 1, 3, 5)
    x = torch.nn.functional.normalize(x.reshape(b, g, g, -1).float(), dim=-1)  # (B, g, g, D)
    total = torch.zeros(b, g, g)
    count = torch.zeros(1, g, g)
    for dy, dx in ((0, 1), (0, -1), (1, 0), (-1, 0)):
        shifted = torch.roll(x, shifts=(dy, dx), dims=(1, 2))
        valid = torch.ones(g, g)
        if dy:
            valid[0 if dy > 0 else -1, :] = 0
        if dx:
            valid[:, 0 if dx > 0 else -1] = 0
        total += (x * shifted).sum(-1) * valid
        count += valid
    return (total / count).reshape(b, g * g)


def top_patch_similarity(received: torch.Tensor, similarity: torch.Tensor, top_fraction: float = 0.02) -> dict:
    """Are the most-attended patches redundant? Mean neighbour similarity of the top ``top_fraction`` patches by
    attention received (per image) vs all patches. received, similarity: (B, P) -> {"top": .., "all": .., "k": ..}."""
    k = max(1, round(top_fraction * received.shape[-1]))
    idx = received.topk(k, dim=-1).indices
    return {"top": similarity.gather(1, idx).mean().item(), "all": similarity.mean().item(), "k": k}


@torch.inference_mode()
def token_features(lm: LoadedModel, pixels: torch.Tensor, batch_size: int = 32) -> dict[str, torch.Tensor]:
    """Final-layer features for a linear probe (Darcet et al., Table 1): the CLS token, the highest-norm patch and
    the median-norm patch of each image, from the last block's output. (B, 3, S, S) -> {name: (B, d)}."""
    n_prefix = adapter_for(lm.model).n_prefix
    last = len(adapter_for(lm.model).layers) - 1
    out: dict[str, list[torch.Tensor]] = {"CLS": [], "highest-norm patch": [], "median-norm patch": []}
    for start in range(0, len(pixels), batch_size):
        with Capture(lm.model, hidden_states=True, layers=[last]) as cap:
            vit_forward(lm, pixels[start:start + batch_size])
        h = cap.get("hidden_states", last).float()  # (B, T, d)
        patches = h[:, n_prefix:]
        order = patches.norm(dim=-1).argsort(dim=-1)  # (B, P) ascending
        rows = torch.arange(len(h))
        out["CLS"].append(h[:, 0])
        out["highest-norm patch"].append(patches[rows, order[:, -1]])
        out["median-norm patch"].append(patches[rows, order[:, order.shape[1] // 2]])
    return {k: torch.cat(v) for k, v in out.items()}


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


def outliers_only_claim(profile: VitProfile, large_model: bool) -> Claim:
    """``darcet2023.outliers_only_in_large_models`` (Sec. 2.1, Fig. 3-4): small models have no high-norm tokens,
    large long-trained ones ~2.4% (ViT-g), and a model trained with registers none on its patches (Sec. 3, Fig. 7:
    the registers take them). Each model gets its expectation: a small model holds when no layer's patch tokens
    pass :func:`outlier_mask`; a large one without registers when the last third of the layers has 0.5-10%
    outliers; one with registers (``profile.n_prefix > 1``) when that third has under 0.5%."""
    frac = outlier_mask(profile.patch_norms()).float().mean(dim=(1, 2))  # (L,)
    late = late_outlier_fraction(profile)
    registers = profile.n_prefix > 1
    low, high = LARGE_FRACTION
    if large_model and registers:
        holds, rule = late < low, f"trained with registers: under {low:.1%} of patch tokens in the last third are outliers"
        note = "large model trained with registers (Darcet et al. predict no outlier patches)"
    elif large_model:
        holds, rule = low <= late <= high, f"{low:.1%}-{high:.0%} of patch tokens in the last third of layers are outliers"
        note = "large model"
    else:
        holds, rule = not bool((frac > 0).any()), "a small model: no patch token in any layer is an outlier"
        note = "small model (the paper finds none at this size)"
    return Claim(
        id="darcet2023.outliers_only_in_large_models", source=f"{DARCET}, Fig. 3-4",
        statement="high-norm outlier tokens appear in large, long-trained ViTs (~2.4% of tokens in DINOv2 ViT-g), "
                  "not in small ones, and not on the patches of a model trained with registers",
        rule=f"{rule}; outlier = norm > {OUTLIER_FACTOR:g} x the image's median patch norm",
        published={"fraction ViT-g": DARCET_FRACTION, "cut ViT-g": DARCET_CUT_VIT_G, "small models": "none",
                   "with registers": "none"},
        measured={"outlier fraction, last third": late, "max / median patch norm": max(profile.max_norm_ratio()),
                  "layers with outliers": int((frac > 0).sum())},
        holds=holds, note=note,
        follows=f"Sec. 2.1, Fig. 3 (bimodal norm histogram, cut 150), Fig. 4c (only large models) and Fig. 7 "
                f"(registers remove them); {DARCET_CODE}",
        adapted=f"{RELATIVE_CUT}; 'large' = 24 layers or more; a large model holds with 0.5-10% outliers in the "
                f"last third of the layers (the paper: ~2.4% of DINOv2 ViT-g's tokens), with registers under 0.5%",
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


def redundant_patches_claim(similarity: dict, has_outliers: bool) -> Claim:
    """``darcet2023.outliers_on_redundant_patches`` (Fig. 5a): high-norm tokens sit on patches that look like their
    neighbours. Rule: outliers exist and the top-attended patches' mean neighbour similarity (:func:
    `top_patch_similarity`) exceeds that of all patches; None without outliers."""
    return Claim(
        id="darcet2023.outliers_on_redundant_patches", source=f"{DARCET}, Fig. 5a",
        statement="high-norm tokens sit on patches that look like their neighbours (background)",
        rule="outliers exist and their mean neighbour similarity exceeds that of all patches",
        published="outliers: high cosine similarity to neighbours",
        measured=similarity, holds=similarity["top"] > similarity["all"] if has_outliers else None,
        note="" if has_outliers else "no outliers in this model; measured on the most-attended patches instead",
        needs_gpu=not has_outliers,
        follows=f"Sec. 2.1, Fig. 5a (cosine similarity between a token's input patch and its 4 neighbours); "
                f"{DARCET_CODE}",
        adapted="the most-attended patches (top 2% per image by attention received, at the layer where one patch "
                "stands out most) stand for the outliers, and the similarity is taken on the pixels of the patch, "
                "not on its patch embedding",
        at_init=False)


def global_information_claim(probe: dict[str, float], has_outliers: bool) -> Claim:
    """``darcet2023.outliers_hold_global_information`` (Table 1): a linear probe of the image label works from an
    outlier token (near CLS), not from a normal patch. Rule: outliers exist and probe(highest-norm patch) -
    probe(median-norm patch) > 0.1; None without outliers."""
    return Claim(
        id="darcet2023.outliers_hold_global_information", source=f"{DARCET}, Table 1",
        statement="a linear probe of the image label works from an outlier token (near CLS) but not from a normal "
                  "patch",
        rule="outliers exist and probe(outlier) - probe(normal patch) > 0.1",
        published="outlier ~ CLS >> normal patch",
        measured=probe,
        holds=probe["highest-norm patch"] - probe["median-norm patch"] > 0.1 if has_outliers else None,
        note="" if has_outliers else "no outliers in this model: the highest-norm patch is an ordinary patch here",
        needs_gpu=not has_outliers,
        follows=f"Sec. 2.1, Table 1 (linear probes of the image class from normal and outlier tokens); {DARCET_CODE}",
        adapted="scikit-learn's digits (upscaled) instead of image classification; the last layer's highest-norm "
                "patch stands for the outlier and its median-norm patch for a normal one; the 0.1 margin is this "
                "project's",
        at_init=False)


def high_norm_claims(profile: VitProfile, large_model: bool, similarity: dict | None = None,
                     probe: dict[str, float] | Sequence[dict[str, float]] | None = None,
                     probe_draws_of: str = "") -> list[Claim]:
    """Darcet et al.'s claims about high-norm tokens, judged on one model (:func:`outliers_only_claim`,
    :func:`redundant_patches_claim`, :func:`global_information_claim`). ``probe``: one probe result, or one per
    train / test split (:func:`probe_over_splits`, the run's seed first), judged with
    :func:`~sinklib.core.claims.over_draws` (without outliers each draw is "not judged" and the note says why)."""
    has = bool(outlier_mask(profile.patch_norms()).any())
    claims = [outliers_only_claim(profile, large_model)]
    if similarity is not None:
        claims.append(redundant_patches_claim(similarity, has))
    if probe is not None:
        probes = [probe] if isinstance(probe, dict) else list(probe)
        draws = [global_information_claim(p, has) for p in probes]
        if len(draws) == 1:
            claims.append(draws[0])
        else:
            gap = [p["highest-norm patch"] - p["median-norm patch"] for p in probes]
            spread = {"min": min(gap), "max": max(gap), "values": gap}
            of = probe_draws_of or f"{len(draws)} train / test splits of the digits"
            claims.append(replace(over_draws(draws, of), spread=spread) if has else
                          replace(draws[0], draws=tuple(d.holds for d in draws), draws_of=of, spread=spread))
    return claims
