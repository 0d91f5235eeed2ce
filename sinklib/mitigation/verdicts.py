"""Judging the comparison of ``03_mitigation``: the rules, as data, and the claims they decide.

* :func:`grows_sink` / :func:`sink_verdict` -- does a variant grow, keep, reduce or remove the first-token sink,
  with the seeds' spread and a still-rising head taken into account (a :class:`SinkVerdict`, not a sentence to
  parse);
* :func:`convergence` -- does head-wise RMSNorm converge faster than softmax, measured against the seeds' spread;
* :func:`sink_claim` / :func:`rmsnorm_convergence` -- the :class:`~sinklib.core.claims.Claim` records: the
  baseline "grows a sink", every other variant "removes it" (holds on a clean removal; does not on reduces / keeps /
  strengthens / shrinks the rows; cannot be judged when the seeds cannot settle the cut or the head is still rising).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sinklib.core.claims import Claim
from sinklib.core.metrics import GU_EPS


def steps_to_reach(run: dict, target: float, key: str = "val_loss") -> int | None:
    """First checkpoint step at which ``key`` <= ``target`` (None if never)."""
    for c in run["checkpoints"]:
        if c[key] <= target:
            return int(c["step"])
    return None


def grows_sink(table: pd.DataFrame, variant: str, uniform: float) -> bool:
    """A variant *grows a sink* when its sink rate is >= 5% and its alpha_0 >= 2x uniform attention's."""
    return bool(table.loc[variant, ("sink rate", "mean")] >= 0.05
                and table.loc[variant, ("first-token attention", "mean")] >= 2 * uniform)


@dataclass(frozen=True)
class SinkVerdict:
    """What :func:`sink_verdict` decided, as data. ``outcome``: one of :data:`OUTCOMES`; ``settled``: False when
    alpha_0 lies within 2 seed sd's of the cut that decides (the line then names both sides); ``delayed``: the
    strongest head is still rising at the end of training; ``line``: the sentence with every number."""

    variant: str
    outcome: str
    settled: bool
    delayed: bool
    line: str

    @property
    def removes(self) -> bool | None:
        """The mitigation papers' claim "removes the first-token sink": True on a clean, settled, not-delayed
        removal; None when the baseline grew no sink, the seeds cannot settle the cut, or the head is still rising;
        else False."""
        if self.outcome == "cannot_judge" or not self.settled or self.delayed:
            return None
        return self.outcome == "removes"

    def __str__(self) -> str:
        return self.line


OUTCOMES = ("grows", "no_sink", "cannot_judge", "removes", "shrinks_rows", "reduces", "keeps", "strengthens")


def sink_verdict(variant: str, table: pd.DataFrame, uniform: float, eps: float = GU_EPS,
                 baseline: str = "softmax", runs: Sequence[dict] | None = None) -> SinkVerdict:
    """From the numbers: does ``variant`` grow, keep, reduce or remove the first-token sink?

    Rules (alpha_0 = first-token attention, mean over sequences, layers and heads; U = ``uniform``):
    the baseline *grows a sink* when its sink rate >= 5% and alpha_0 >= 2U; another variant *removes* it when its
    sink rate < 2% and alpha_0 <= 1.5U **and** the same holds for the row-normalised share A_t0 / sum_j A_tj (a small
    alpha_0 in a row that carries little mass is not a removal: such a variant only *shrinks the rows*), *reduces*
    it when alpha_0 <= half the baseline's, *keeps* it when within 0.5x-1.5x, and *strengthens* it above 1.5x; with
    no sink in the baseline nothing can be judged. **Seeds first:** when alpha_0 lies within 2 pooled seed sd's of
    the cut that decides (1.5U, 0.5x or 1.5x the baseline's), the verdict names *both* sides ("removes or reduces")
    instead of one -- two variants on either side of a cut by less than their seed spread are not different.
    **Removed or delayed:** given the variant's ``runs``, a removal or reduction whose strongest head is still
    rising at the end of training (:func:`late_slope` > ``RISING``) says that the budget cannot tell a removed sink
    from a delayed one. Where rows sum to < 0.95 (a learned sink, the off-by-one zero logit) the missing mass is
    reported; validation loss is compared with the baseline in seed sd's.
    """
    fa = table.loc[variant, ("first-token attention", "mean")]
    rate = table.loc[variant, ("sink rate", "mean")]
    share, share_rate = (table.loc[variant, (lab, "mean")] for lab in ("first-token share", "share sink rate"))
    base_fa = table.loc[baseline, ("first-token attention", "mean")]
    nums = f"alpha_0 {fa:.3f}, sink rate {rate:.0%} (uniform attention: {uniform:.3f}; eps {eps})"
    if abs(share - fa) > 0.005:
        nums += f"; row-normalised share of the first token {share:.3f} (sink rate on shares {share_rate:.0%})"
    base_grows = grows_sink(table, baseline, uniform)
    if variant == baseline:
        outcome = "grows" if base_grows else "no_sink"
        return SinkVerdict(variant, outcome, True, False, f"{variant}: {_HEADS[outcome]}: {nums}.")
    if not base_grows:
        outcome = "cannot_judge"
    elif rate < 0.02 and fa <= 1.5 * uniform and share_rate < 0.02 and share <= 1.5 * uniform:
        outcome = "removes"
    elif rate < 0.02 and fa <= 1.5 * uniform:
        outcome = "shrinks_rows" if share > 0.5 * base_fa else "reduces"
    elif fa <= 0.5 * base_fa:
        outcome = "reduces"
    elif fa < 1.5 * base_fa:
        outcome = "keeps"
    else:
        outcome = "strengthens"
    head = _HEADS[outcome]
    unsettled = _too_close(table, variant, baseline, fa, base_fa, uniform) if base_grows else ""
    settled = not (unsettled and outcome != "shrinks_rows")
    if not settled:
        head = _both_sides(head, fa, base_fa, uniform, rate)
    line = f"{variant}: {head}: {nums}; baseline alpha_0 {base_fa:.3f}" + unsettled
    delayed = False
    if runs and base_grows and head.startswith(("removes", "reduces")):  # incl. "removes or reduces", "reduces or keeps"
        slopes = [late_slope(r) for r in runs]
        delayed = max(slopes) > RISING
        if delayed:
            line += (f"; its strongest head is still rising at the end of training (+{max(slopes):.3f} per 100 steps "
                     f"over the last quarter, in seed {slopes.index(max(slopes))}): removed or only delayed cannot "
                     f"be told at this budget")
    mass = table.loc[variant, ("attention row mass", "mean")]
    if variant == "sigmoid":
        line += f"; sigmoid rows are not normalised (mean row sum {mass:.2f})"
    elif mass < 0.95:
        line += f"; {1 - mass:.0%} of each query's attention goes to {_MISSING_MASS.get(variant, 'no token')}"
    d = table.loc[variant, ("val loss", "mean")] - table.loc[baseline, ("val loss", "mean")]
    sd = _pooled_sd(table, variant, baseline, "val loss")
    line += f"; val loss {d:+.3f} vs baseline" + ("" if math.isnan(sd) else f" (seed sd {sd:.3f})")
    return SinkVerdict(variant, outcome, settled, delayed, line + ".")


_HEADS = {"grows": "grows a first-token sink", "no_sink": "does NOT grow a first-token sink in this setting",
          "cannot_judge": "cannot be judged (the baseline grew no sink to remove)",
          "removes": "removes the first-token sink", "reduces": "reduces the first-token sink",
          "shrinks_rows": "shrinks the rows, not the sink (little mass per row, but most of what is left goes to "
                          "the first token)",
          "keeps": "keeps the first-token sink", "strengthens": "strengthens the first-token sink"}


RISING = 0.01  # per 100 steps: a strongest-head share still climbing faster than this has not settled


def late_slope(run: dict, key: str = "share_by_head", fraction: float = 0.25) -> float:
    """Slope per 100 steps of the strongest head's ``key`` (max over layers and heads) over the last ``fraction``
    of training: a least-squares line through the checkpoints in that span (at least the last two)."""
    ck = run["checkpoints"]
    last = ck[-1]["step"]
    span = [c for c in ck if c["step"] >= last - fraction * last] or ck[-2:]
    span = span if len(span) >= 2 else ck[-2:]
    x = np.array([c["step"] for c in span], dtype=float)
    y = np.array([max(max(row) for row in c[key]) for c in span], dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return 0.0
    return float(np.polyfit(x, y, 1)[0] * 100)


def _both_sides(head: str, fa: float, base_fa: float, uniform: float, rate: float) -> str:
    """The two verdicts on either side of the cut alpha_0 is closest to (used when the seeds cannot settle it)."""
    cuts = [(abs(fa - 1.5 * uniform), "removes or reduces the first-token sink (the seeds cannot tell which)")
            if rate < 0.02 else (math.inf, ""),
            (abs(fa - 0.5 * base_fa), "reduces or keeps the first-token sink (the seeds cannot tell which)"),
            (abs(fa - 1.5 * base_fa), "keeps or strengthens the first-token sink (the seeds cannot tell which)")]
    return min(cuts)[1] or head


def _too_close(table: pd.DataFrame, variant: str, baseline: str, fa: float, base_fa: float, uniform: float) -> str:
    """A caveat when alpha_0 sits within 2 pooled seed sd's of a cut the verdict depends on (1.5U, 0.5x / 1.5x the
    baseline): with that few seeds the side of the cut is not settled."""
    sd = _pooled_sd(table, variant, baseline, "first-token attention")
    if math.isnan(sd) or sd == 0:
        return ""
    cuts = {"1.5x uniform": 1.5 * uniform, "half the baseline": 0.5 * base_fa, "1.5x the baseline": 1.5 * base_fa}
    near = [name for name, c in cuts.items() if abs(fa - c) < 2 * sd]
    return (f" (within 2 seed sd's ({sd:.3f}) of {', '.join(near)}: with {int(table.loc[variant, ('seeds', '')])} "
            f"seeds the side of that cut is not settled)") if near else ""


_MISSING_MASS = {"sink_logit": "the learned sink logit", "kv_bias": "the learned key/value bias",
                 "softmax_off_by_one": "the zero logit", "softpick": "no token (rectified: rows may sum to < 1)"}


def _pooled_sd(table: pd.DataFrame, a: str, b: str, label: str) -> float:
    return float(math.sqrt((table.loc[a, (label, "sd")] ** 2 + table.loc[b, (label, "sd")] ** 2) / 2))


def convergence(candidate: Sequence[dict], baseline: Sequence[dict], key: str = "val_loss",
                margin_sds: float = 2.0) -> dict:
    """Does ``candidate`` converge faster than ``baseline`` (same configuration but attention, several seeds)?

    Two measures, each compared with the seed-to-seed spread (sd over seeds, pooled over the two variants):
    * ``auc``: mean validation loss over all checkpoints after step 0 (lower = faster convergence overall);
    * ``final``: validation loss at the last checkpoint.
    Also the step at which each first reaches the baseline's final mean loss. Verdict: "faster" when both measures
    are lower by more than ``margin_sds`` pooled sd's, "slower" when both are higher by more, else "no difference".
    """
    def per_seed(runs, fn):
        return np.array([fn([c[key] for c in r["checkpoints"][1:]]) for r in runs], dtype=float)

    out: dict = {}
    for name, fn in (("auc", np.mean), ("final", lambda xs: xs[-1])):
        c, b = per_seed(candidate, fn), per_seed(baseline, fn)
        sd = math.sqrt((c.var(ddof=1) + b.var(ddof=1)) / 2) if len(c) > 1 and len(b) > 1 else float("nan")
        out[name] = {"candidate": float(c.mean()), "baseline": float(b.mean()), "diff": float(c.mean() - b.mean()),
                     "sd": sd}
    target = out["final"]["baseline"]
    out["steps_to_baseline_final"] = {"candidate": [steps_to_reach(r, target, key) for r in candidate],
                                      "baseline": [steps_to_reach(r, target, key) for r in baseline]}
    def beyond(m: str, sign: float) -> bool:  # diff past margin_sds sd's in the direction of ``sign``
        sd = 0.0 if math.isnan(out[m]["sd"]) else out[m]["sd"]
        return sign * out[m]["diff"] > margin_sds * sd

    out["verdict"] = ("faster" if beyond("auc", -1) and beyond("final", -1) else
                      "slower" if beyond("auc", 1) and beyond("final", 1) else "no difference")
    return out


def convergence_line(name: str, conv: dict, setting: str) -> str:
    """A one-line statement of :func:`convergence`'s result."""
    a, f = conv["auc"], conv["final"]
    head = {"faster": f"{name} converges faster than softmax",
            "slower": f"{name} converges slower than softmax",
            "no difference": f"no difference in convergence between {name} and softmax at this scale"}[conv["verdict"]]
    return (f"{head} ({setting}): mean val loss over training {a['candidate']:.3f} vs {a['baseline']:.3f} "
            f"(diff {a['diff']:+.3f}, seed sd {a['sd']:.3f}); final {f['candidate']:.3f} vs {f['baseline']:.3f} "
            f"(diff {f['diff']:+.3f}, sd {f['sd']:.3f}); steps to reach the baseline's final loss "
            f"{conv['steps_to_baseline_final']['candidate']} vs {conv['steps_to_baseline_final']['baseline']}.")


def sink_claim(variant: str, table: pd.DataFrame, uniform: float, runs: Sequence[dict], paper: dict,
               baseline: str = "softmax") -> Claim:
    """One variant's record: the baseline "grows a sink" (:func:`grows_sink`), every other variant "removes it"."""
    verdict = sink_verdict(variant, table, uniform, runs=runs, baseline=baseline)
    published = paper["variants"].get(variant)
    measured = {"first_attention": table.loc[variant, ("first-token attention", "mean")],
                "sink_rate": table.loc[variant, ("sink rate", "mean")],
                "first_share": table.loc[variant, ("first-token share", "mean")]}
    if variant == baseline:
        return Claim(id=f"mitigation.{variant}_grows_sink", source=paper["source"],
                     statement="softmax attention trained from scratch grows a first-token sink",
                     rule="sink rate >= 5% and alpha_0 >= 2x uniform attention", published=published,
                     measured=measured, holds=grows_sink(table, baseline, uniform), note=verdict.line)
    return Claim(id=f"mitigation.{variant}_removes_sink", source=paper["source"],
                 statement=f"{variant} removes the first-token sink",
                 rule="sink_verdict says 'removes' (sink rate < 2%, alpha_0 and share <= 1.5x uniform), with the "
                      "cut settled by the seeds and the strongest head no longer rising",
                 published=published, measured=measured, holds=verdict.removes, note=verdict.line)


def rmsnorm_convergence(candidate: Sequence[dict], baseline: Sequence[dict], paper: dict, setting: str) -> Claim:
    """The structural-origin paper: head-wise RMSNorm converges faster (lower validation loss) than softmax.
    Rule: :func:`convergence` -- both the mean loss over training and the final loss lower by
    more than 2 pooled seed sd's holds; both higher by as much does not; otherwise it cannot be judged."""
    conv = convergence(candidate, baseline)
    holds = {"faster": True, "slower": False, "no difference": None}[conv["verdict"]]
    return Claim(id=f"origin.headwise_rmsnorm_converges_faster.{setting.replace(' ', '_')}", source=paper["source"],
                 statement="head-wise RMSNorm reaches a lower validation loss than softmax",
                 rule="mean and final validation loss both lower (faster) / higher (slower) by > 2 pooled seed sd's",
                 published=paper["variants"]["headwise_rmsnorm"].get("val_loss"),
                 measured={"final": conv["final"], "auc": conv["auc"]}, holds=holds,
                 note=f"{conv['verdict']} ({setting})")
