"""How ``03_mitigation`` records its claims: each rule judged over the training seeds, beside its random-weight
control, by one helper (:func:`judge`), so that a notebook cell reads measure, plot, judge, say.

The rules themselves live beside their tests: the sink claims in :mod:`sinklib.mitigation.sink_claims` (the cuts of
:mod:`sinklib.mitigation.verdicts`), head-wise RMSNorm's convergence in :mod:`sinklib.mitigation.convergence` and
its parity across positions in :mod:`sinklib.mitigation.parity`. The control of a claim is the same rule on the same
TinyLM at step 0 -- seeded like each run, untrained (:func:`at_init`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sinklib.core.claims import Claim
from sinklib.core.claims_file import Recorder
from sinklib.mitigation import parity
from sinklib.mitigation.convergence import convergence_claim_over_seeds
from sinklib.mitigation.sink_claims import control_note, sink_claim_over_seeds

RULES = ("sink", "convergence", "parity")


def at_init(runs: Mapping[str, Sequence[dict]]) -> dict[str, list[dict]]:
    """The runs cut to their step-0 checkpoint: the same TinyLM at initialisation (seeded like the run, untrained),
    i.e. the random-weight control of every claim judged on the final checkpoints."""
    return {v: [r | {"checkpoints": r["checkpoints"][:1]} for r in rs] for v, rs in runs.items()}


def variant_setting(variant: str, setting: str) -> str:
    """The setting a variant's claims are recorded under: ``setting`` and the variant's option, if it names one --
    ("headwise_rmsnorm g0=0.1", "bible") -> "bible g0=0.1"; ("headwise_rmsnorm", "bible") -> "bible"."""
    return setting + variant[len(variant.split(" ")[0]):]


def judge(record: Recorder, rule: str, runs: Mapping[str, Sequence[dict]], paper: Mapping, seeds: Sequence[int],
          variants: Sequence[str] = ("headwise_rmsnorm",), uniform: float | None = None, setting: str = "",
          device: str = "cpu", show: bool = False, baseline: str = "softmax") -> list[Claim]:
    """Record the claims of ``rule`` for each of ``variants`` (``runs[v]``: one run per training seed), each judged
    on every seed alone against ``baseline``'s run of the same seed and then over the seeds; returns the recorded
    claims in order.

    * ``"sink"``: :func:`~sinklib.mitigation.sink_claims.sink_claim_over_seeds` (the baseline "grows a sink",
      every other variant "removes it"; needs ``uniform``, H_T / T); control: the same rule on :func:`at_init`'s
      step-0 checkpoints, explained by :func:`~sinklib.mitigation.sink_claims.control_note`.
    * ``"convergence"``: :func:`~sinklib.mitigation.convergence.convergence_claim_over_seeds` under
      :func:`variant_setting`; no control (an untrained model has no training curve; the record says so).
    * ``"parity"``: :func:`~sinklib.mitigation.parity.parity_claim_over_seeds` and
      :func:`~sinklib.mitigation.parity.table_claim_over_seeds` on the final weights
      (:func:`~sinklib.mitigation.parity.with_parity`, the baseline measured once); control: the same two on the
      weights each run started from, a control that holds explained by :func:`~sinklib.mitigation.parity.control_notes`.
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {RULES}")
    out: list[Claim] = []
    if rule == "sink":
        untrained = at_init(runs)
        for v in variants:
            out.append(record.add(sink_claim_over_seeds(v, runs, uniform, paper, seeds, baseline), show=show,
                                  control=sink_claim_over_seeds(v, untrained, uniform, paper, seeds, baseline),
                                  control_note=control_note(v, untrained, uniform, baseline)))
    elif rule == "convergence":
        for v in variants:
            out.append(record.add(convergence_claim_over_seeds(runs[v], runs[baseline], paper,
                                                               variant_setting(v, setting), seeds), show=show))
    else:
        trained = {baseline: parity.with_parity(runs[baseline], device)}
        untrained = {baseline: parity.with_parity(runs[baseline], device, at_init=True)}
        for v in variants:
            trained[v] = parity.with_parity(runs[v], device)
            untrained[v] = parity.with_parity(runs[v], device, at_init=True)
            for one in (parity.parity_claim_over_seeds, parity.table_claim_over_seeds):
                claim = one(trained[v], trained[baseline], paper, seeds, variant_setting(v, setting))
                control = one(untrained[v], untrained[baseline], paper, seeds, variant_setting(v, setting))
                out.append(record.add(claim, show=show, control=control,
                                      control_note=parity.control_notes(claim) if control.holds else ""))
    return out
