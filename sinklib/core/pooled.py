"""Pretrained verdicts judged on every draw's windows pooled, with a percentile bootstrap interval over windows.

A pretrained model has no training noise: what changes between draws of windows (or of random-token sequences) is
only which windows were read. So a rule whose number is a mean over windows -- or a ratio of two such means -- is
judged once, on all the draws' windows pooled, and its 95 % percentile bootstrap interval over windows
(:data:`BOOTSTRAP_DRAWS` resamples, generator seeded) says whether the verdict is settled: a condition holds / fails
when its interval lies on one side of its cut and is open only when the interval straddles it
(:func:`sinklib.core.claims.against_cut` with the interval's reach toward the cut as the spread). A rule of several
conditions (:func:`settle`) holds or fails when every way the open conditions could fall gives the same answer, and is
*unsettled* only when they do not. Each draw's own verdict stays in ``Claim.draws`` and its number in
``Claim.spread`` (:func:`pooled_claim`).

Used by Gu et al.'s Llama-family shape (:func:`sinklib.core.gu_claims.llama_family_shape_pooled`: ``00_tour`` and,
through :func:`sinklib.architectures.llm.llm_survey.shape_pooled`, ``10_llm``), link 1 of the structural-origin chain
(:func:`sinklib.interpretation.chain.variance_pooled_over_draws` in ``02_interpretation``,
:func:`sinklib.interpretation.chain.variance_pooled` in ``10_llm``), link 3 in ``10_llm``
(:func:`sinklib.architectures.llm.survey_chain.disparity_pooled`) and
:func:`sinklib.architectures.llm.placement.position_pooled`;
:func:`sinklib.architectures.llm.placement.delimiter_pooled` is the same judgement for one ratio. It lives in ``core``
so that every layer above may use it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import product

import torch

from sinklib.core import quantities as q
from sinklib.core.claims import Claim, against_cut

BOOTSTRAP_DRAWS = 2000  # resamples of the pooled windows for every interval here
LEVEL = 0.95  # the percentile interval's coverage
# what a pooled claim adds: its margin (the number a verdict cuts, its cut and the interval's reach) and every
# condition's interval in the spread
POOLED_QUANTITIES = {"@margin": q.Quantity(kind=q.Kind.MARGIN)}


def resamples(n: int, seed: int = 0, n_boot: int = BOOTSTRAP_DRAWS) -> torch.Tensor:
    """(B, n) indices: ``n_boot`` resamples of n windows with replacement, from a generator seeded with ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, n, (n_boot, n), generator=gen)


def counts(index: torch.Tensor) -> torch.Tensor:
    """(B, n) resample indices -> (B, n) float64 weights w[b, i] = how often window i was drawn in resample b."""
    w = torch.zeros(index.shape, dtype=torch.float64)
    return w.scatter_add_(1, index, torch.ones_like(w))


@dataclass(frozen=True)
class Interval:
    """A number on the pooled windows and its percentile bootstrap interval over windows."""

    value: float
    low: float
    high: float

    def reach(self, cut: float) -> float:
        """How far the interval reaches toward ``cut``: value - low above it, high - value at or below it."""
        return self.value - self.low if self.value > cut else self.high - self.value

    def against(self, cut: float, above: bool = True) -> tuple[bool | None, bool, dict]:
        """(holds, unsettled, margin) of value >= cut (``above``) with the interval's reach as the spread
        (:func:`~sinklib.core.claims.against_cut`): unsettled exactly when the interval straddles the cut."""
        if math.isnan(self.low):  # no finite resample: the point alone
            return against_cut(self.value, cut, 0.0, above)
        return against_cut(self.value, cut, self.reach(cut), above)

    @property
    def bounds(self) -> list[float]:
        return [self.low, self.high]


def interval_of(value: float, boot: torch.Tensor, level: float = LEVEL) -> Interval:
    """``value`` with the (1 - level)/2 and (1 + level)/2 quantiles of the resampled values ``boot`` (B,), NaN ones
    left out (NaN bounds when none is finite)."""
    boot = boot[torch.isfinite(boot)].double()
    if not boot.numel():
        return Interval(float(value), math.nan, math.nan)
    lo, hi = torch.quantile(boot, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=boot.dtype)).tolist()
    return Interval(float(value), lo, hi)


def mean_interval(x: torch.Tensor, seed: int = 0, n_boot: int = BOOTSTRAP_DRAWS) -> Interval:
    """mean_n x[n] over the N pooled windows, and its bootstrap interval: resample b's mean_n x[idx[b, n]].
    x: (N,)."""
    x = x.double()
    return interval_of(float(x.mean()), x[resamples(len(x), seed, n_boot)].mean(-1))  # (B, N) -> (B,)


def ratio_interval(num: torch.Tensor, den: torch.Tensor, seed: int = 0, n_boot: int = BOOTSTRAP_DRAWS) -> Interval:
    """A ratio of means over the N pooled windows, sum_n num[n] / sum_n den[n], and its bootstrap interval (the
    same ratio of each resample's sums). num, den: (N,)."""
    num, den = num.double(), den.double()
    idx = resamples(len(num), seed, n_boot)  # (B, N)
    return interval_of(float(num.sum() / den.sum()), num[idx].sum(-1) / den[idx].sum(-1))


@dataclass(frozen=True)
class Condition:
    """One condition of a rule: ``interval.value`` >= ``cut`` (``above``; <= otherwise), judged with its interval;
    or, for a condition read without one (a layer order), the ``fixed`` answer. A NaN value fails it, as the rule's
    own comparison does."""

    name: str
    cut: float = math.nan
    interval: Interval | None = None
    above: bool = True
    fixed: bool | None = None
    label: str = ""  # the number in words for the note ("replaced / own alpha_0"); default: the name

    @property
    def words(self) -> str:
        return self.label or self.name

    def answer(self) -> bool | None:
        """True / False when settled; None when the interval straddles the cut."""
        if self.interval is None:
            return self.fixed
        if math.isnan(self.interval.value):
            return False
        holds, _, _ = self.interval.against(self.cut, self.above)
        return holds

    def margin(self) -> dict | None:
        """{"value", "cut", "spread", "of"} (None for a fixed condition or a NaN value)."""
        if self.interval is None or math.isnan(self.interval.value):
            return None
        return self.interval.against(self.cut, self.above)[2] | {"of": self.name}

    def slack(self) -> float:
        """How far the interval stays clear of the cut: |value - cut| - reach (negative: it straddles)."""
        m = self.margin()
        return math.inf if m is None else abs(m["value"] - m["cut"]) - m["spread"]


def settle(conditions: Sequence[Condition], rule: Callable[[dict[str, bool]], bool | None]
           ) -> tuple[bool | None, bool, list[Condition]]:
    """``rule`` (condition name -> answer) applied to conditions of which some may be open (their interval straddles
    the cut): (holds, unsettled, deciding). Every True / False assignment of the open conditions is tried; one answer
    for all -> that answer (None, not unsettled: the rule itself answers neither); different answers -> (None,
    True). ``deciding``: the open conditions that change the answer when unsettled, else those whose flip alone would
    change it (every condition when none would)."""
    answers = {c.name: c.answer() for c in conditions}
    open_ = [c.name for c in conditions if answers[c.name] is None]
    outcomes = {rule(answers | dict(zip(open_, combo))) for combo in product((True, False), repeat=len(open_))}
    if len(outcomes) > 1:
        return None, True, [c for c in conditions if c.name in open_]
    outcome = outcomes.pop()
    settled = answers | dict.fromkeys(open_, True)  # (none is open here unless it does not matter)
    deciding = [c for c in conditions
                if c.name not in open_ and rule(settled | {c.name: not settled[c.name]}) != outcome]
    return outcome, False, deciding or list(conditions)


def nearest_margin(conditions: Sequence[Condition]) -> dict | None:
    """The margin of the condition whose interval comes closest to (or across) its cut (None: none has one)."""
    judged = [c for c in conditions if c.margin() is not None]
    return min(judged, key=Condition.slack).margin() if judged else None


def pooled_claim(pooled: Claim, conditions: Sequence[Condition], rule: Callable[[dict[str, bool]], bool | None],
                 per_draw: Sequence[Claim], values: Sequence[float | None], draws_of: str, what: str,
                 main: str | None = None, unit: str = "windows") -> Claim:
    """``pooled`` (the rule's claim on the pooled windows: its statement, rule and ``measured``) judged by
    :func:`settle` on ``conditions``: holds / fails when the answer does not depend on an open condition, unsettled
    when it does. ``draws`` = each draw's own verdict (``per_draw``), ``spread`` = {"min", "max", "values" (each
    draw's number), "interval" (``main``'s, or the first interval condition's), "intervals" (name -> [low, high])},
    ``margin`` = the deciding condition nearest its cut. ``what``: the pooled windows in words ("48 Bible windows");
    ``unit``: what was resampled ("windows", "sequences")."""
    holds, unsettled, deciding = settle(conditions, rule)
    with_interval = [c for c in conditions if c.interval is not None]
    first = next((c for c in with_interval if c.name == main), with_interval[0] if with_interval else None)
    shown = [c for c in with_interval if not math.isnan(c.interval.value)]
    text = ", ".join(f"{c.words} {c.interval.value:.3g} [{c.interval.low:.3g}, {c.interval.high:.3g}] against "
                     f"{c.cut:g}" for c in shown)
    fixed = ", ".join(f"{c.words} {'yes' if c.fixed else 'no'}" for c in conditions if c.interval is None)
    open_ = [c.words for c in deciding] if unsettled else []
    note = (f"judged on all {what} pooled ({draws_of}): " + (text or "no interval")
            + (f" (95% bootstrap intervals over {unit}, {BOOTSTRAP_DRAWS:,} resamples)" if text else "")
            + (f" -- unsettled: the interval of {' and '.join(open_)} straddles its cut" if open_ else "")
            + (f"; read without an interval: {fixed}" if fixed else "")
            + ("; per draw " + " / ".join("-" if v is None or math.isnan(v) else f"{v:.3g}" for v in values)
               if values else "")
            + (f"; {pooled.note}" if pooled.note else ""))
    numbers = [v for v in values if v is not None and not math.isnan(v)]
    spread = ({"min": min(numbers), "max": max(numbers), "values": list(values)} if len(numbers) == len(values)
              and numbers else {"values": list(values)})
    if first is not None:
        spread |= {"interval": first.interval.bounds}
    spread |= {"intervals": {c.name: c.interval.bounds for c in with_interval}}
    margin = next((c.margin() for c in deciding if unsettled and c.margin()), None) or nearest_margin(
        [c for c in deciding if c.interval is not None] or with_interval)
    return replace(pooled, holds=holds, unsettled=unsettled, margin=margin, draws=tuple(c.holds for c in per_draw),
                   draws_of=draws_of, note=note, spread=spread, quantities={**pooled.quantities, **POOLED_QUANTITIES})
