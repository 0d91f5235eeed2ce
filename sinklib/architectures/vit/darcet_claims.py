"""Darcet et al.'s high-norm-token claims (arXiv 2309.16588) as records: the rules (which models should have
outliers, the late-layer outlier fraction, the band a large model must fall in) and the claims built from a
:class:`~sinklib.architectures.vit.vit_sinks.VitProfile` -- outliers only in large models, registers remove them,
outliers sit on redundant patches, and they hold global information (a linear probe). The measurements are in
:mod:`sinklib.architectures.vit.vit_sinks`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from fractions import Fraction

from sinklib.architectures.vit.vit_sinks import (
    DARCET_CUT_VIT_G,
    DARCET_FRACTION,
    OUTLIER_FACTOR,
    VitProfile,
    first_outlier_layer,
    outlier_mask,
)
from sinklib.core import quantities as q
from sinklib.core.claims import Claim, over_draws

# ------------------------------------------------------------------------------------------------------- claims
DARCET = "Darcet et al., Vision Transformers Need Registers, arXiv 2309.16588"


DARCET_CODE = ("no public code for the norm analysis (facebookresearch/dinov2 publishes the register models: "
               "dinov2/models/vision_transformer.py, num_register_tokens)")


RELATIVE_CUT = (f"outlier = norm > {OUTLIER_FACTOR:g} x the image's median patch norm, instead of the paper's absolute "
                f"cut (norm > {DARCET_CUT_VIT_G:g} for DINOv2 ViT-g)")


REGISTER_TWINS = {"facebook/dinov2-large": "facebook/dinov2-with-registers-large",  # without -> with registers
                  "facebook/dinov2-giant": "facebook/dinov2-with-registers-giant"}


LARGE_FRACTION = (0.005, 0.10)  # a large model without registers: 0.5-10% outliers late (ViT-g: ~2.4%)


# ---------------------------------------------------------------------------------------------- quantities
# A fraction of discrete items (held-out digits, photos, patch tokens) moves in steps of 1/n when one item crosses a
# cut on another machine: its tolerance is one step (:func:`fraction_of_items`), not the float forward's 1e-4.
ONE_STEP = ("on an Intel AMX host the pretrained ONNX forward moved darcet2023.outliers_hold_global_information's "
            "probe gap by one held-out digit, 0.0667 -> 0.0708 (1/240 of the CPU profile's 240 held-out digits)")
PROBE_WHY = (f"a fraction of the held-out digits moves in steps of 1/n when one digit's prediction flips: {ONE_STEP}; "
             f"the tolerance is one step, n read off the accuracies (their least common denominator)")
PATCH_WHY = (f"a fraction of patch tokens (images x patches x layers) moves by one step when one patch crosses the "
             f"outlier cut on another machine; the tolerance is one step (the float forward's default fails on a "
             f"single patch; {ONE_STEP})")


def item_step(fractions: Iterable[float | None], most: int = 100_000) -> float | None:
    """The step that fractions k / n of n items move by when one item changes: 1 / n, n the least common denominator
    of ``fractions`` (each read as the nearest k / n with n <= ``most``). Never finer than the true step (the n found
    divides the true one); None when nothing tells it (no finite fraction, or only 0 and 1)."""
    n = 1
    for x in fractions:
        if x is not None and math.isfinite(x):
            n = math.lcm(n, Fraction(x).limit_denominator(most).denominator)
    return 1 / n if n > 1 else None


def fraction_of_items(step: float | None, why: str, unit: str = "fraction", kind: q.Kind = q.Kind.SHARE
                      ) -> q.Quantity:
    """A fraction of discrete items with the tolerance of one ``step`` (``why``: what the step is and the measurement
    behind it), plus 1e-9 for float rounding (0.0708333 - 0.0666667 is 1/240 + 1e-17); the kind's default where the
    step is unknown (None)."""
    if step is None:
        return q.Quantity(kind=kind, unit=unit)
    return q.Quantity(kind=kind, unit=unit, abs_tol=step + 1e-9, why=why)


def late_step(profile: VitProfile) -> float:
    """One patch token's step in :func:`late_outlier_fraction`: 1 / (images x patches x layers of the last third)."""
    n_layers, n_images, n_patches = profile.patch_norms().shape
    return 1 / (n_images * n_patches * max(1, n_layers // 3))


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
    n_layers, n_images, n_patches = profile.patch_norms().shape
    one_layer = fraction_of_items(1 / (n_images * n_patches), PATCH_WHY, "fraction of patch tokens")  # calibration's
    quantities = {"outlier fraction, last third": fraction_of_items(late_step(profile), PATCH_WHY,
                                                                    "fraction of patch tokens"),
                  "max / median patch norm": q.ratio(), "layers with outliers": q.count("layers"),
                  "first layer with outliers": q.identity("layer"),
                  # registers.calibration of the same profile, at Jiang et al.'s detection layer
                  "calibration.layer": q.identity("layer"), "calibration.absolute cut": q.value("|h|"),
                  "calibration.absolute cut / median patch norm": q.ratio(),
                  "calibration.fraction over the absolute cut": one_layer,
                  f"calibration.fraction over {OUTLIER_FACTOR:g} x the median": one_layer}
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
        at_init=False, quantities=quantities)


def registers_remove_outliers_claim(pairs: dict[str, tuple[VitProfile, VitProfile]]) -> Claim:
    """``darcet2023.registers_remove_outliers`` (Sec. 3, Fig. 7): the same model trained with registers has no
    high-norm patch tokens where the one without has them. ``pairs``: {name: (without, with registers)}. Rule: every
    pair whose model without registers has >= 0.5% late outliers (:func:`late_outlier_fraction`) has under 0.5% with
    them; None when no pair has outliers to remove (then nothing was tested)."""
    low = LARGE_FRACTION[0]
    measured = {name: {"without registers": late_outlier_fraction(a), "with registers": late_outlier_fraction(b)}
                for name, (a, b) in pairs.items()}
    tested = {n: m for n, m in measured.items() if m["without registers"] >= low}
    step = max((late_step(x) for pair in pairs.values() for x in pair), default=None)  # the coarsest profile's
    quantities = {"*": fraction_of_items(step, PATCH_WHY, "fraction of patch tokens")}  # {name: {without, with}}
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
        at_init=False, quantities=quantities)


# darcet2023.outliers_on_redundant_patches: mean cosine similarities to the 4 grid neighbours, and the patches chosen
REDUNDANT_QUANTITIES = {"selected": q.value("cosine"), "normal": q.value("cosine"), "all": q.value("cosine"),
                        "k": q.count("patches")}


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
        at_init=False, quantities=REDUNDANT_QUANTITIES)


OUTLIER_SHARE = "probe images whose highest-norm patch is an outlier"
OUTLIER_SHARE_WHY = (f"a fraction of all the probe digits (600 on the CPU profile) moves by one digit when a digit's "
                     f"highest-norm patch crosses the outlier cut on another machine; the tolerance is one held-out "
                     f"digit's step (1/240 there), the finest step the claim reads off its numbers ({ONE_STEP})")


def global_information_quantities(probe: dict[str, float], step: float | None) -> dict[str, q.Quantity]:
    """What ``darcet2023.outliers_hold_global_information``'s numbers are: held-out accuracies (one ``step`` =
    one held-out digit), the share of probe digits whose highest-norm patch is an outlier (a fraction of all the
    probe digits, whose step 1 / n_digits is finer than one held-out digit's: it gets that coarser step, the finest
    the claim can read off its numbers), and its spread: the accuracy gap highest - median-norm patch per split."""
    accuracy = fraction_of_items(step, PROBE_WHY, "accuracy")
    return {**{name: accuracy for name in probe},
            OUTLIER_SHARE: fraction_of_items(step, OUTLIER_SHARE_WHY, "fraction of probe digits"),
            "@spread": fraction_of_items(step, PROBE_WHY, "accuracy difference", kind=q.Kind.VALUE)}


def global_information_claim(probe: dict[str, float], outlier_share: float, step: float | None = None) -> Claim:
    """``darcet2023.outliers_hold_global_information`` (Table 1): a linear probe of the image label works from an
    outlier token (near CLS), not from a normal patch. Rule: in most probe images (>= 50%) the last layer's
    highest-norm patch is an outlier, and probe(highest-norm patch) - probe(median-norm patch) > 0.1; None when it
    is an outlier in fewer (then the probe reads an ordinary patch). ``step``: one held-out digit's step of the
    accuracies (default: :func:`item_step` of ``probe``)."""
    has = outlier_share >= 0.5
    step = item_step(probe.values()) if step is None else step
    return Claim(
        id="darcet2023.outliers_hold_global_information", source=f"{DARCET}, Table 1",
        statement="a linear probe of the image label works from an outlier token (near CLS) but not from a normal "
                  "patch",
        rule="the highest-norm patch is an outlier in >= 50% of the probe images, and probe(highest-norm patch) - "
             "probe(median-norm patch) > 0.1",
        published="outlier ~ CLS >> normal patch",
        measured=probe | {OUTLIER_SHARE: outlier_share},
        holds=probe["highest-norm patch"] - probe["median-norm patch"] > 0.1 if has else None,
        note="" if has else (f"the highest-norm patch is an outlier in {outlier_share:.0%} of the probe images: the "
                             f"probe reads an ordinary patch"),
        needs_gpu=not has,
        follows=f"Sec. 2.1, Table 1 (linear probes of the image class from normal and outlier tokens); {DARCET_CODE}",
        adapted="scikit-learn's digits (upscaled) instead of image classification; the last layer's highest-norm "
                "patch stands for the outlier (checked on the probe images themselves) and its median-norm patch for "
                "a normal one; the 0.1 margin is this project's",
        at_init=False, quantities=global_information_quantities(probe, step))


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
        step = item_step(x for p in probes for x in p.values())  # one held-out digit, read off every split
        draws = [global_information_claim(p, outlier_share, step) for p in probes]
        if len(draws) == 1:
            claims.append(draws[0])
        else:
            gap = [p["highest-norm patch"] - p["median-norm patch"] for p in probes]
            spread = {"min": min(gap), "max": max(gap), "values": gap}
            of = probe_draws_of or f"{len(draws)} train / test splits of the digits"
            claims.append(replace(over_draws(draws, of), spread=spread) if has else
                          replace(draws[0], draws=tuple(d.holds for d in draws), draws_of=of, spread=spread))
    return claims
