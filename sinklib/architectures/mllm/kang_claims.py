"""Kang et al.'s claims as records (:class:`~sinklib.core.claims.Claim`): visual sink tokens exist, hiding them is
harmless, VAR helps, and they sit on the background -- each judged by :mod:`sinklib.architectures.mllm.kang_rules`
on one model (one stand-in seed); :func:`claims_over_draws` combines the stand-ins, and :func:`judge_over_standins`
is 12_mllm's whole record: every stand-in's edits, the random-weight control, the claims judged over the draws.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, replace

import torch

from sinklib.architectures.mllm.captions import caption_inputs
from sinklib.architectures.mllm.image_layout import ImageLayout
from sinklib.architectures.mllm.kang_quantities import (
    PEAK_QUANTITIES,
    background_quantities,
    masking_quantities,
    sink_quantities,
    var_quantities,
)
from sinklib.architectures.mllm.kang_rules import (
    KANG_BACKGROUND,
    KANG_D_REF,
    KANG_FIRST_LAYER,
    KANG_TAU,
    largest_sink_phi,
    margin,
    norm_share,
    phi_ceiling,
    sink_union,
    sinks_unsettled,
    tau_sensitivity,
    width_matched_tau,
)
from sinklib.architectures.mllm.protocol import MllmSizes
from sinklib.architectures.mllm.visual_attention import SCORES, EditComparison, compare_edits
from sinklib.architectures.mllm.visual_sinks import MllmProfile, plain_background, profile_mllm
from sinklib.core.claims import Claim, against_cut, over_draws
from sinklib.core.claims_file import Recorder
from sinklib.core.loaded import LoadedModel
from sinklib.models import stitch
from sinklib.models.random_init import random_weights

SOURCE = "Kang et al., See What You Are Told: Visual Attention Sink in LMMs, ICLR 2025, arXiv 2503.03321"
CODE = "seilk/VisAttnSink:src/logic/logic.py"
FOLLOWS_SINKS = (f"Sec. 3 (phi(x) = max_d |x_d| / RMS(x) >= tau = 20 over the sink dims, layers >= 2); "
                 f"{CODE}:DimProspector.run_logic")
FOLLOWS_MASKING = ("Sec. 3.2 (masking visual sink tokens vs random image tokens); no public code for the masking "
                   "experiment (seilk/VisAttnSink:src/model/llava.py passes a masking_vis_idx hook but never sets it)")
FOLLOWS_VAR = (f"Sec. 4 (VAR: image-centric heads, then redistribution) and Tables 1-3 (rho = 0.5, summ = 0.2, "
               f"p = 0.6); {CODE}:HeadFork.run_logic, "
               f"{CODE}:VARProcessor.attn_redist")


def _score_name(score: str) -> str:
    return {"image token": "NLL of the image-dependent token (the digit)",
            "caption": "mean caption NLL"}.get(score, score)


def width_note(profile: MllmProfile) -> str:
    """What tau = 20 asks of this model's width: phi <= sqrt(d) (:func:`~sinklib.architectures.mllm.kang_rules.
    phi_ceiling`), so tau asks a token for tau^2 / d of its squared norm in one dimension (9.8% at LLaVA-1.5-7B's
    d = 4096, 69% at d = 576) -- a stricter test on a narrow model -- with the largest image-token phi measured in
    the layers Kang et al. search, and how many image tokens would pass at the width-matched tau."""
    d = profile.first_hidden.shape[-1]
    matched = width_matched_tau(d)
    every = tau_sensitivity(profile, [matched])[matched]["max fraction"]
    return (f"at d = {d}, phi <= sqrt(d) = {phi_ceiling(d):.1f} and tau = {KANG_TAU:g} asks a token for "
            f"{norm_share(KANG_TAU, d):.0%} of its squared norm in one dimension "
            f"({norm_share(KANG_TAU, KANG_D_REF):.1%} "
            f"at LLaVA-1.5-7B's d = {KANG_D_REF}): a stricter test than the paper's; its image tokens' phi peaks at "
            f"{largest_sink_phi(profile):.1f} (layers >= {KANG_FIRST_LAYER}), and at the width-matched tau = "
            f"{matched:.3g} up to {every:.0%} of them in a layer would pass")


def phi_peaks(profile: MllmProfile) -> dict[str, float]:
    """The largest phi of an image token in layers >= 2 (:func:`largest_sink_phi`, what the existence rule cuts at
    tau) and the ceiling sqrt(d)."""
    return {"largest image-token phi": largest_sink_phi(profile),
            "phi ceiling sqrt(d)": phi_ceiling(profile.first_hidden.shape[-1])}


def exists_judged(peak: float, ratios: list[float], standin: bool | str) -> dict:
    """Kang et al.'s test with its cross-machine margin: the largest image-token phi (layers >= 2) against tau
    (:func:`against_cut` with :func:`margin` "phi": within it, unsettled); above by more, the claim holds when the
    sinks also receive more attention than the other image tokens (mean ratio > 1, as :func:`sink_tokens_hold`);
    below by more, no visual sink token exists here -- it does not hold. Returns the Claim fields."""
    above, unsettled, cut = against_cut(peak, KANG_TAU, margin("phi", standin))
    fields = {"margin": cut | {"of": "the largest image-token phi against tau"}, "unsettled": unsettled}
    if unsettled:
        return fields | {"holds": None}
    return fields | {"holds": bool(above and ratios and sum(ratios) / len(ratios) > 1)}


def visual_sink_claims(profile: MllmProfile, masking: dict[str, float] | None, var: dict[str, float] | None,
                       standin: bool | str, d_model: int | None = None) -> list[Claim]:
    """Kang et al.'s claims judged on one model (one stand-in seed).

    * ``kang2025.visual_sink_tokens_exist`` (:func:`exists_judged`): some image tokens carry the LM's sink
      dimensions (phi >= 20) in the layers from 2 on and receive more attention than the other image tokens.
    * ``kang2025.masking_sinks_is_harmless`` (:func:`masking_holds`): hiding the visual sink tokens from the text
      raises the caption loss less than hiding as many random image tokens, in every random draw. masking:
      {"none", "sinks", "random"} mean caption NLL, and optionally "random_draws": the mean NLL of each random draw.
    * ``kang2025.var_helps``: VAR lowers the caption NLL (the paper: benchmark accuracy; here likelihood).

    All three are effects of training (``at_init=False``): a randomly initialised LM has no sink dimension for an
    image token to carry. A stand-in (``standin``) is judged by the same test, labelled as a stand-in, with the
    stand-in's cross-machine margins (:data:`~sinklib.architectures.mllm.kang_rules.MARGINS`): a number within its
    margin of the cut is unsettled. What tau = 20 asks of a narrow model is said in ``adapted`` (:func:`width_note`).
    """
    frac = [f for f in profile.sink_fraction() if f == f]  # drop the NaN layers
    ratio = [r for r in profile.received_ratio() if r is not None]
    has = any(f > 0 for f in frac)
    note = "stand-in: projector trained here, no instruction tuning" if standin else ""
    matched = width_matched_tau(d_model) if d_model else None
    sensitivity = tau_sensitivity(profile, [KANG_TAU] + ([matched] if matched else []))
    peaks, width = phi_peaks(profile), width_note(profile)
    claims = [Claim(
        id="kang2025.visual_sink_tokens_exist", source=f"{SOURCE}, Sec. 3",
        statement="some image tokens carry the LM's sink dimensions (phi >= 20) and draw extra attention",
        rule="image tokens with phi >= 20 exist in layers >= 2 and receive more attention than the other image tokens",
        published={"sink dims (LLaVA-1.5-7B)": [1415, 2533], "tau": KANG_TAU},
        measured={"sink dims": [int(d) for d in profile.dims], "max fraction of image tokens": max(frac, default=0.0),
                  "attention received, sink / non-sink": (sum(ratio) / len(ratio)) if ratio else None,
                  "width-matched tau": matched,
                  "by tau": {f"{t:.3g}": v for t, v in sensitivity.items()}} | peaks,
        **exists_judged(peaks["largest image-token phi"], ratio, standin), note=note, follows=FOLLOWS_SINKS,
        adapted=f"{width}; the verdict uses the paper's tau = 20, the width-matched tau 20 sqrt(d / 4096) is "
                "recorded beside it under 'by tau'; sink dims found from the first token's hidden states "
                "(the paper: the LM's known massive-activation dims); the attention-received comparison is ours",
        at_init=False, quantities=PEAK_QUANTITIES | sink_quantities(standin))]
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
                     | ({"caption NLL": masking["caption NLL"]} if "caption NLL" in masking else {}) | peaks,
            **_judged(has, min(draws) - d_sink, margin("masking", standin),
                      "hiding the sinks vs the least harmful random draw"),
            note=(note or ("" if has else "no visual sink token")) + spread, follows=FOLLOWS_MASKING,
            quantities=PEAK_QUANTITIES | masking_quantities(standin),
            adapted=f"the {scored} of held-out digit captions instead of benchmark accuracy (the caption's other "
                    f"tokens "
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
            measured=var | peaks, **_judged(has and not idle, var["none"] - var["VAR"], margin("var", standin),
                                    "the NLL without VAR minus with it"),
            note=(note + "; " if note else "") + ("" if has else "no visual sink token; ")
                 + ("VAR found no image-centric row to edit; " if has and idle else "")
                 + "likelihood of held-out captions, not the paper's benchmarks",
            follows=FOLLOWS_VAR, adapted=f"the {scored} of a teacher-forced digit caption (one forward) instead of "
                                         f"benchmark accuracy of generated answers", at_init=False,
            quantities=PEAK_QUANTITIES | var_quantities(standin)))
    return [c if c.id == "kang2025.visual_sink_tokens_exist" else _open_sinks(c, peaks["largest image-token phi"],
                                                                               standin)
            for c in claims]


def _open_sinks(claim: Claim, peak: float | None, standin: bool | str) -> Claim:
    """``claim`` (one that needs visual sinks) as "cannot be judged here" when whether there are any depends on the
    kernels (:func:`~sinklib.architectures.mllm.kang_rules.sinks_unsettled`: the largest image-token phi within its
    margin of tau): one machine would judge it on its sinks, another find none. The existence claim itself is then
    unsettled; a claim that needs the sinks has no settled sinks to be judged on, on any machine."""
    if peak is None or not sinks_unsettled(peak, standin):
        return claim
    why = (f"whether there are visual sink tokens at all depends on the kernels: the largest image-token phi "
           f"{peak:.2f} lies within {margin('phi', standin):g} of tau = {KANG_TAU:g}")
    return replace(claim, holds=None, unsettled=False, note=f"{why}; {claim.note}" if claim.note else why)


def _judged(judgeable: bool, gain: float, spread: float, what: str) -> dict:
    """A comparison's Claim fields: holds when ``gain`` > 0 by more than ``spread`` (its cross-machine margin), fails
    when < 0 by more, unsettled within (:func:`sinklib.core.claims.against_cut`); not judgeable: None."""
    if not judgeable:
        return {"holds": None}
    holds, unsettled, cut = against_cut(gain, 0.0, spread)
    return {"holds": holds if not unsettled else None, "unsettled": unsettled, "margin": cut | {"of": what}}


def background_claim(sinks: torch.Tensor, background: torch.Tensor, standin: bool | str,
                     peak: float | None = None) -> Claim:
    """``kang2025.sinks_on_background`` (Table 6: > 90% of visual sink tokens lie on background). sinks, background:
    (B, P) bool (:func:`sink_union`, :func:`plain_background`). Rule: at least 90% of the visual sink tokens sit on
    background patches, more than the background's share of all image tokens; a share within its cross-machine
    margin of 90% (:func:`margin` "background") is unsettled; None without sinks. ``peak``: the largest image-token
    phi (:func:`largest_sink_phi`); within its margin of tau the claim is unsettled (:func:`_open_sinks`).
    """
    n = int(sinks.sum())
    share = (sinks & background).sum().item() / n if n else None
    base = background.float().mean().item()
    judged: dict = {"holds": None}
    if share is not None:
        above, unsettled, cut = against_cut(share, KANG_BACKGROUND, margin("background", standin))
        judged = {"holds": None if unsettled else bool(above and share > base), "unsettled": unsettled,
                  "margin": cut | {"of": "the sinks' share on background against 90%"}}
    claim = Claim(
        id="kang2025.sinks_on_background", source=f"{SOURCE}, Table 6",
        statement="visual sink tokens lie on the background, not on the objects",
        rule=f"at least {KANG_BACKGROUND:.0%} of the visual sink tokens (phi >= 20 in a layer >= 2) sit on plain "
             f"background, more than the background's share of all image tokens",
        published=f"> {KANG_BACKGROUND:.0%} of visual sink tokens on background (PASCAL VOC / COCO masks)",
        measured={"visual sink tokens": n, "share on background": share, "background share of all image tokens": base},
        **judged,
        note=("stand-in: projector trained here, no instruction tuning; " if standin else "")
             + (f"{share:.0%} of the {n} visual sink tokens sit on background, which is {base:.0%} of all image "
                f"tokens" if n else "no visual sink token"),
        follows=f"Table 6 (visual sink tokens against segmentation masks); sinks as {CODE}:DimProspector.run_logic",
        adapted="the digits' plain white background (a patch whose pixels stay within 5% of the border colour) "
                "instead of segmentation masks",
        at_init=False, quantities=background_quantities(standin))
    return _open_sinks(claim, peak, standin)


def edit_claims(profile: MllmProfile, edits: EditComparison, standin: bool | str, d_model: int | None = None,
                score: str = SCORES[0]) -> list[Claim]:
    """Kang et al.'s three claims (:func:`visual_sink_claims`) for one model and its edits, judged on ``score``
    (the image-dependent token by default); the other score is recorded beside it."""
    m = edits.means[score]
    var = {"none": m["as is"], "VAR": m["VAR"], "score": score, "rows edited": edits.var_rows[0],
           "rows it could edit": edits.var_rows[1],
           "caption NLL": {"none": edits.means["caption"]["as is"], "VAR": edits.means["caption"]["VAR"]}}
    masking = edits.masking(score) | {"caption NLL": edits.masking("caption")}
    return visual_sink_claims(profile, masking, var, standin, d_model)


def claims_over_draws(runs: list[list[Claim]], draws_of: str) -> list[Claim]:
    """Each claim judged over the draws ``runs`` (one list of :func:`edit_claims` per stand-in seed, the run's own
    seed first) with :func:`sinklib.core.claims.over_draws`: it holds (fails) only when every draw holds (fails),
    else it is unsettled. The spread recorded: the sinks' share of image tokens, the NLL increase with the sinks
    hidden, VAR's change of the NLL. One run: its claims as they are (the Recorder records one evaluation)."""
    if len(runs) == 1:
        return [replace(c, draws_of=draws_of) for c in runs[0]]
    # each claim's "@spread" is declared with its other numbers (kang_quantities.sink_quantities, masking_quantities,
    # var_quantities)
    keys = {"kang2025.visual_sink_tokens_exist": lambda c: c.measured["max fraction of image tokens"],
            "kang2025.masking_sinks_is_harmless": lambda c: c.measured["delta NLL sinks"],
            "kang2025.var_helps": lambda c: c.measured["VAR"] - c.measured["none"]}
    return [over_draws([run[i] for run in runs], draws_of, key=keys.get(claim.id))
            for i, claim in enumerate(runs[0])]


# ------------------------------------------------------------------------------------------------ 12_mllm's record
@dataclass
class StandinVerdicts:
    """Kang et al.'s four claims as 12_mllm records them, and the per-stand-in numbers its figure and text read.

    claims: id -> the recorded claim (existence, masking, VAR; each judged over the stand-ins, with its control);
    background: the recorded ``kang2025.sinks_on_background``; background_per_seed: each stand-in's own record of it;
    nll_changes: seed -> :meth:`EditComparison.nll_changes` (sinks, random, VAR against "as is"; max_phi);
    random_changes: seed -> each random draw's NLL change; background_digits: seed -> the digits its background share
    was measured on; control_dims, control_phi: the random-weight control's sink dimensions and largest image-token
    phi; no_sinks: what a control note says when the random weights grow no sink."""

    claims: dict[str, Claim]
    background: Claim
    background_per_seed: dict[int, Claim]
    nll_changes: dict[int, dict[str, float]]
    random_changes: dict[int, list[float]]
    background_digits: dict[int, int]
    control_dims: list[int]
    control_phi: float
    no_sinks: str
    draw_seconds: float
    control_seconds: float


def judge_over_standins(record: Recorder, lm: LoadedModel, profile: MllmProfile, edits: EditComparison,
                        pictures: list, captions: list[str], layout: ImageLayout, others: dict[int, LoadedModel],
                        base: stitch.StitchConfig, sizes: MllmSizes, seed: int, kind: bool | str,
                        d_model: int) -> StandinVerdicts:
    """Kang et al.'s claims judged and recorded over every stand-in, with the random-weight control.

    The run's own model (seed ``seed``): ``profile`` (its first batch) and ``edits`` (:func:`compare_edits` of
    ``pictures`` with ``captions``). Each other stand-in of ``others`` (projector seed -> model, released from the dict
    once measured) runs the same edits on its own ``sizes.draw_digits`` held-out digits with
    ``sizes.draw_random_draws`` random draws. Each draw gives :func:`edit_claims` and a :func:`background_claim` of
    its first ``sizes.batch_size`` digits; :func:`claims_over_draws` and :func:`over_draws` combine them (a claim
    holds only when every stand-in agrees). The control: the same cells on ``lm``'s architecture with every weight
    drawn fresh (:func:`random_weights`), on the first ``sizes.draw_digits`` digits -- the edits only where its
    random weights grow a visual sink; a control that cannot be judged says why. ``kind``: the stand-in's margins
    (:func:`~sinklib.architectures.mllm.kang_rules.standin_kind`), False for a pretrained model."""
    score, batch = SCORES[0], sizes.batch_size

    def background(p: MllmProfile, shown: list) -> Claim:
        return background_claim(sink_union(p), plain_background(shown, layout), kind, largest_sink_phi(p))

    runs = {seed: edit_claims(profile, edits, kind, d_model)}
    changes = {seed: edits.nll_changes()}
    random_changes = {seed: [r - edits.means[score]["as is"] for r in edits.random_draws[score]]}
    backgrounds = {seed: background(edits.profile, pictures[:batch])}
    background_digits = {seed: len(pictures[:batch])}
    t0 = time.perf_counter()
    for s in list(others):  # the other stand-ins: the same edits, fewer digits and random draws
        other = others.pop(s)
        d, y = stitch.heldout_digits(replace(base, seed=s), sizes.draw_digits)
        e = compare_edits(other, d, [stitch.digit_caption(v) for v in y], profile.dims, batch,
                          sizes.draw_random_draws, seed)
        runs[s], changes[s] = edit_claims(e.profile, e, kind, d_model), e.nll_changes()
        random_changes[s] = [r - e.means[score]["as is"] for r in e.random_draws[score]]
        backgrounds[s], background_digits[s] = background(e.profile, d[:batch]), len(d[:batch])
        del other
        gc.collect()
    draw_seconds = time.perf_counter() - t0
    seeds = list(runs)
    draws_of = (f"{len(seeds)} stand-ins, projector seeds {seeds[0]}-{seeds[-1]} (seed {seeds[0]}: {len(pictures)} "
                f"digits, {sizes.random_draws} random-token draws; the others: {sizes.draw_digits} digits, "
                f"{sizes.draw_random_draws} each)" if len(seeds) > 1 else
                f"one model; the masking rule compares with each of {sizes.random_draws} random-token draw(s)")
    claims = claims_over_draws(list(runs.values()), draws_of)

    t0 = time.perf_counter()
    control = random_weights(lm, seed=seed)
    cd, cy = pictures[:sizes.draw_digits], captions[:sizes.draw_digits]
    control_prof = profile_mllm(control.model, caption_inputs(control, cd, cy)[0])
    control_phi = float(torch.nan_to_num(control_prof.phi, nan=0).max())
    if sink_union(control_prof).any():  # sinks to hide and redistribute: run the edits too
        control_edits = compare_edits(control, cd, cy, control_prof.dims, batch, sizes.draw_random_draws, seed)
        control_claims = edit_claims(control_prof, control_edits, kind, d_model)
    else:  # nothing to hide: the edit claims cannot be judged on the control
        control_claims = visual_sink_claims(control_prof, None, None, kind, d_model)
    control_background = background(control_prof, cd)
    controls = {c.id: c for c in control_claims}
    del control
    gc.collect()
    control_seconds = time.perf_counter() - t0
    no_sinks = (f"control run: on random weights no image token reaches phi >= {KANG_TAU:g} (largest "
                f"{control_phi:.1f}), so there is nothing to hide or redistribute")

    # a control that cannot be judged says why: its own reason, else that the random weights grow no sink
    recorded = {c.id: record.add(c, control=replace(controls[c.id], note=controls[c.id].note or no_sinks))
                if c.id in controls else record.add(replace(c, control_note=no_sinks)) for c in claims}
    background_of = (f"{len(seeds)} stand-in(s), projector seeds {seeds[0]}-{seeds[-1]}, the first {batch} digits of "
                     f"each")
    combined = (over_draws(list(backgrounds.values()), background_of, key=lambda c: c.measured["share on background"])
                if len(backgrounds) > 1 else replace(backgrounds[seed], draws_of=background_of))
    background_record = record.add(combined, control=control_background,
                                   control_note="" if control_background.holds is not None else no_sinks)
    return StandinVerdicts(recorded, background_record, backgrounds, changes, random_changes, background_digits,
                           list(control_prof.dims), control_phi, no_sinks, draw_seconds, control_seconds)
