"""Su et al.'s super-expert claims (arXiv 2507.23279; the authors' code ZunhaiSu/Super-Experts-Profilling) as
records: a few super experts (the authors' selection rule,
:func:`~sinklib.architectures.moe.super_experts.super_experts`,
plus an effect size), judged over three draws, and pruning them breaks the sink (against random experts, per draw);
and what the upcycled stand-in cannot test, claim by claim. The measurements they read (routing, pruning runs) are
in :mod:`sinklib.architectures.moe.moe_sinks`.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from sinklib.architectures.moe.moe_sinks import Routing, routing
from sinklib.architectures.moe.pruning import compare_pruning
from sinklib.architectures.moe.super_experts import EFFECT, effect_size, super_experts
from sinklib.core import quantities as q
from sinklib.core.claims import Claim, over_draws
from sinklib.core.claims_file import Recorder
from sinklib.core.loaded import LoadedModel

SU = "Su et al., Unveiling Super Experts in MoE LLMs, arXiv 2507.23279"


STAND_IN_NOTE = ("stand-in: its experts are slices of SmolLM2-135M's dense MLP and its router was fitted afterwards, "
                 "not a trained MoE")


SE_CODE = "ZunhaiSu/Super-Experts-Profilling:eval_utils.py"


# What the upcycled stand-in cannot test, claim by claim: its experts are column slices of one dense MLP and its
# router a regression fitted afterwards, so these are measured and shown but judged "cannot be judged here".
STANDIN_CANNOT_TEST = {
    "su2025.few_super_experts": "the stand-in's experts are slices of SmolLM2's dense MLP: the neurons that write "
                                "its massive activation land in some expert by construction, so finding a super "
                                "expert says how the split was made, not that training makes few super experts",
    "su2025.pruning_super_experts_breaks_the_sink": "pruning a stand-in expert zeroes an eighth of a dense MLP's "
                                                    "neurons, including the super neuron that writes the massive "
                                                    "dimension: a dense super-neuron ablation (02_interpretation's "
                                                    "question), not Su et al.'s expert pruning",
    "routing.first_token_fixed_route": "the router was fitted to the dense activations after the split, not trained "
                                       "with the experts: whether the first token takes a fixed route in training is "
                                       "not in it",
    "routing.load_balance": "no load-balancing loss ever acted on the stand-in's router",
    "su2025.super_experts_form_in_training": "the stand-in was never trained as a MoE",
}


def standin_verdict(claim: Claim) -> Claim:
    """``claim`` as measured on the upcycled stand-in: the numbers kept, the verdict "cannot be judged here"
    (``holds=None``) with the reason from :data:`STANDIN_CANNOT_TEST` and what the rule gave."""
    reason = STANDIN_CANNOT_TEST[claim.id]
    ruled = {True: "holds", False: "fails", None: "cannot decide"}[claim.holds]
    return replace(claim, holds=None,
                   note=f"not judgeable on the stand-in: {reason} (the rule on these numbers {ruled})"
                        + (f"; {claim.note}" if claim.note else ""))


# What su2025.few_super_experts' numbers are; its spread (:func:`super_experts_over_draws`): the effect size over the
# draws. A super expert is a (layer, expert) pair of ints (expert -1: a layer's shared expert).
SUPER_EXPERT_QUANTITIES = {"super_experts": q.identity("(layer, expert)"), "share": q.share("fraction of experts"),
                           "a of the super experts": q.value("|down_proj output|"), "effect size": q.ratio(),
                           "authors' rule finds": q.count("super experts"), "@spread": q.ratio()}


def super_experts_claim(output_max: torch.Tensor, include_layers: float = 0.75, effect: float = EFFECT,
                        note: str = "", shared: torch.Tensor | None = None) -> Claim:
    """Su et al.: a few super experts carry "rare but extreme activation outliers in the output of the down_proj"
    (Sec. 3; Mixtral-8x7B: 1 of 256, < 0.5% of the experts in every model studied).

    Rule: S = the authors' super experts (:func:`super_experts`: first 75% of layers, a > P99.5 and a > max // 10);
    holds iff 1 <= |S| <= 1% of all experts **and** min_{s in S} a_s >= ``effect`` x the median a of the other
    routed experts (:func:`effect_size`). output_max: (L, E) largest |down_proj output| per layer (the model's
    index; NaN rows: no routed experts) and expert; ``shared``: (L,) the shared experts' (candidates as expert -1)."""
    supers = super_experts(output_max, include_layers, shared=shared)
    total = int(torch.isfinite(output_max).sum()) + (0 if shared is None else int(torch.isfinite(shared).sum()))
    share = len(supers) / total
    size = effect_size(output_max, supers, include_layers)
    return Claim(id="su2025.few_super_experts", source=f"{SU}, Section 3 (authors' code: _identify_super_experts)",
                 statement="a few experts produce the extreme down_proj outputs behind the massive activations",
                 rule=f"the authors' rule (first 75% of layers, a > 99.5th percentile and > max // 10) finds 1 or more "
                      f"super experts, at most 1% of all experts, and each has a >= {effect:g} x the median a of the "
                      f"other routed experts",
                 published={"Mixtral-8x7B": "1 of 256", "DeepSeek-V2-Lite": "2 of 1,782",
                            "Qwen3-30B-A3B": "3 of 6,144"},
                 measured={"super_experts": [[int(s[0]), int(s[1])] for s in supers], "share": share,
                           "a of the super experts": [s[2] for s in supers], "effect size": size,
                           "authors' rule finds": len(supers)},
                 holds=bool(supers) and share <= 0.01 and size >= effect, note=note,
                 follows=f"Sec. 3.2.1, Eq. 6 and Algorithm 1; {SE_CODE}:_identify_super_experts (quantile=99.5, "
                         f"times=10) after _super_experts_analysis (include_layers=0.75)",
                 adapted=f"a is the max |down_proj output| over every token routed to the expert, where the authors' "
                         f"hook keeps the first routed token's row per call (output[0].abs().max(), the earliest "
                         f"routed "
                         f"token's row: super_experts.first_routed_max, whose selection the notebook prints beside "
                         f"it); the authors' rule is kept as the "
                         f"selection; the claim adds an effect size (each super "
                         f"expert's a >= {effect:g} x the median a of the other routed experts), because with few "
                         f"layer-experts (the stand-in keeps 22 x 8 = 176) the 99.5th percentile lies between the two "
                         f"largest a and the rank rule alone passes exactly one expert for any weights",
                 at_init=False, quantities=SUPER_EXPERT_QUANTITIES)


def candidate_count(route: Routing) -> int:
    """How many experts the super-expert rule chooses from: every routed expert of a MoE layer, plus shared ones."""
    shared = 0 if route.shared_max is None else int(torch.isfinite(route.shared_max).sum())
    return int(torch.isfinite(route.output_max).sum()) + shared


def super_experts_over_draws(lm: LoadedModel, first: torch.Tensor, n_first: int, seed: int, n_windows: int,
                             seq_len: int, batch_size: int = 8, note: str = "",
                             shared: torch.Tensor | None = None) -> Claim:
    """:func:`super_experts_claim` judged over 3 draws (:func:`sinklib.core.claims.over_draws`): ``first`` -- the
    run's own (L, E) expert maxima over ``n_first`` windows (seed ``seed``) -- and two more draws of ``n_windows``
    held-out windows (seeds seed + 1, seed + 2). On the upcycled stand-in its construction is a draw too: each
    extra draw routes through the stand-in upcycled with that seed (:func:`sinklib.models.upcycle.load_standin`,
    built once and cached)."""
    from sinklib.core.claims import over_draws
    from sinklib.core.data import text_windows
    from sinklib.models import upcycle
    from sinklib.models.load import load_model

    def dense() -> LoadedModel:
        return load_model(upcycle.STANDIN_RECIPE["base"], device="cpu", dtype="float32")

    rebuilt = lm.spec.source == "upcycled"
    draws = [super_experts_claim(first, note=note, shared=shared)]
    for draw_seed in (seed + 1, seed + 2):
        ids = text_windows(lm.tokenizer, n_windows, seq_len, draw_seed, split="heldout")
        other = upcycle.load_standin(draw_seed, lm, dense) if rebuilt else lm
        route = routing(other, ids, batch_size=batch_size)
        draws.append(super_experts_claim(route.output_max, note=note, shared=route.shared_max))
        del other
    what = "stand-ins upcycled with seeds" if rebuilt else "draws of held-out windows (seeds"
    return over_draws(draws, f"3 {what} {seed}-{seed + 2}{'' if rebuilt else ')'}, each routing its own held-out "
                             f"windows ({n_first}, {n_windows} and {n_windows})",
                      key=lambda c: c.measured["effect size"])


# What su2025.pruning_super_experts_breaks_the_sink's numbers are, for the model as is, with the super experts pruned
# and with each random draw pruned (:meth:`~sinklib.architectures.moe.pruning.PruneRun.summary`); its spread
# (:func:`pruning_over_draws`): each draw's largest relative perplexity change.
PRUNING_QUANTITIES = {
    **{f"{run}.alpha": q.share("alpha_0") for run in ("baseline", "prune super experts", "random.*")},
    **{f"{run}.ppl": q.loss("ppl") for run in ("baseline", "prune super experts", "random.*")},
    **{f"{run}.max_abs_first": q.value("|h|") for run in ("baseline", "prune super experts", "random.*")},
    "@spread": q.ratio("relative change")}


def pruning_claim(base: dict, pruned: dict, controls: list[dict], note: str = "") -> Claim:
    """Su et al.: pruning the super experts collapses the sink and the model; pruning as many random experts does
    not. Each dict: {"alpha": mean alpha_0 over layers, "ppl": perplexity}. Rule: the super-expert prune lowers alpha
    by > 50% and raises perplexity > 1.5x, while every random control changes alpha by < 10% and perplexity by
    < 10%."""
    def rel(a, b):
        return b / a - 1

    se_ok = rel(base["alpha"], pruned["alpha"]) < -0.5 and pruned["ppl"] > 1.5 * base["ppl"]
    ctl_ok = all(abs(rel(base["alpha"], c["alpha"])) < 0.1 and abs(rel(base["ppl"], c["ppl"])) < 0.1
                 for c in controls)
    return Claim(id="su2025.pruning_super_experts_breaks_the_sink", source=f"{SU}, Table 3 and Section 4",
                 statement="pruning the super experts collapses the attention sink and the model; random pruning "
                           "does not",
                 rule="super-expert prune: alpha_0 down > 50% and perplexity up > 1.5x; each random control of as "
                      "many experts in the same layers: both within 10%",
                 published={"Mixtral-8x7B ppl": {"baseline": 3.84, "prune SEs": 6.23, "random": 3.86},
                            "attention sink decay": "about 90% or more in every layer"},
                 measured={"baseline": base, "prune super experts": pruned, "random": controls},
                 holds=bool(se_ok and ctl_ok), note=note,
                 follows=f"Table 3 (perplexity with the super experts vs as many random experts pruned) and Sec. 4 "
                         f"(attention sink decay); {SE_CODE}:evaluate_ppl (prune_SE)",
                 adapted="the paper reports numbers and no threshold: the cuts (alpha_0 down > 50%, perplexity up > "
                         "1.5x, each random control within 10%) are this project's; pruning zeroes the expert's "
                         "weights and leaves the router as it is",
                 at_init=False, quantities=PRUNING_QUANTITIES)


def pruning_over_draws(summary: dict[str, dict], note: str = "") -> Claim:
    """:func:`pruning_claim` judged once per random-expert draw (the super-expert prune against that draw) and
    combined with :func:`~sinklib.core.claims.over_draws`: holds only if every draw holds. summary: the
    :meth:`PruneRun.summary` of each run of :func:`compare_pruning` ("as is", "super experts pruned",
    "random experts: ...", ...). The record's ``measured`` keeps every draw; ``spread`` is each draw's largest
    relative perplexity change."""
    base, pruned = summary["as is"], summary["super experts pruned"]
    controls = [v for k, v in summary.items() if k.startswith("random")]
    per_draw = [pruning_claim(base, pruned, [c], note) for c in controls] or [pruning_claim(base, pruned, [], note)]
    draws_of = f"{len(controls)} draw{'' if len(controls) == 1 else 's'} of as many random experts of the same layers"
    combined = over_draws(per_draw, draws_of,
                          key=lambda c: max([abs(r["ppl"] / base["ppl"] - 1) for r in c.measured["random"]],
                                            default=0.0))
    return replace(combined, measured={"baseline": base, "prune super experts": pruned, "random": controls})


# ------------------------------------------------------------------------------------------------ the notebook's record
def record_super_experts(record: Recorder, lm: LoadedModel, route: Routing, control_route: Routing, n_windows: int,
                         seed: int, draw_windows: int, seq_len: int, batch_size: int, standin: bool) -> Claim:
    """su2025.few_super_experts as 11_moe records it: judged over three draws (:func:`super_experts_over_draws`;
    ``route``: the run's own ``n_windows`` windows, two more of ``draw_windows``), the same rule on the random-weight
    ``control_route`` as its control, and on the upcycled stand-in "cannot be judged here" (:func:`standin_verdict`,
    the numbers kept)."""
    note = STAND_IN_NOTE if standin else ""
    claim = super_experts_over_draws(lm, route.output_max, n_windows, seed, draw_windows, seq_len, batch_size, note,
                                     shared=route.shared_max)
    control = super_experts_claim(control_route.output_max, note=note, shared=control_route.shared_max)
    return record.add(standin_verdict(claim) if standin else claim, control=control)


def record_pruning(record: Recorder, summary: dict[str, dict], control: LoadedModel,
                   control_supers: list[tuple[int, int]], control_ids: torch.Tensor, held: torch.Tensor, seed: int,
                   batch_size: int, standin: bool) -> Claim | None:
    """su2025.pruning_super_experts_breaks_the_sink as 11_moe records it (None when no super expert was pruned):
    judged per random-expert draw (:func:`pruning_over_draws` of ``summary``, the :meth:`PruneRun.summary` of each run
    of :func:`compare_pruning`); its control, the same comparison on the random-weight ``control`` with its own super
    experts ``control_supers`` pruned (half of ``control_ids``, the first held-out window cut to half its length, one
    draw) -- not run, and said so, when the rule found none there; on the upcycled stand-in "cannot be judged here"
    (:func:`standin_verdict`)."""
    if "super experts pruned" not in summary:
        return None
    note = STAND_IN_NOTE if standin else ""
    control_claim = None
    if control_supers:  # fewer and shorter windows, one draw
        runs = compare_pruning(control, control_supers, control_ids[:max(1, len(control_ids) // 2)],
                               held[:1, :held.shape[1] // 2], 1, seed, batch_size)
        control_claim = pruning_over_draws({k: r.summary() for k, r in runs.items()}, note)
    why = "" if control_claim else "control not run: the authors' rule found no expert on random weights"
    claim = replace(pruning_over_draws(summary, note), control_note=why)
    return record.add(standin_verdict(claim) if standin else claim, control=control_claim, control_note=why)
