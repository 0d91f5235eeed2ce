"""The claims of ``03_mitigation`` as records, decided by the rules of :mod:`sinklib.mitigation.comparison`.

For every variant but the baseline the claim is the one the mitigation papers make, "removes the first-token sink",
judged by :func:`~sinklib.mitigation.comparison.sink_verdict`: it holds on a clean "removes"; it does not on "reduces", "keeps",
"strengthens" or "shrinks the rows"; and it cannot be judged when the seeds cannot settle a cut or the strongest
head is still rising at the end of training (removed or only delayed).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from sinklib.mitigation.comparison import convergence, grows_sink, sink_verdict
from sinklib.pipeline.claims import Claim

_UNSETTLED = ("removes or reduces", "reduces or keeps", "keeps or strengthens", "cannot be judged")


def removal_holds(line: str) -> bool | None:
    """True / False / None from one :func:`sink_verdict` line (see the module docstring)."""
    head = line.split(": ", 1)[1]
    if head.startswith(_UNSETTLED) or "delayed" in line:
        return None
    return head.startswith("removes the first-token sink")


def sink_claim(variant: str, table: pd.DataFrame, uniform: float, runs: Sequence[dict], paper: dict,
               baseline: str = "softmax") -> Claim:
    """One variant's record: the baseline "grows a sink" (:func:`grows_sink`), every other variant "removes it"."""
    line = sink_verdict(variant, table, uniform, runs=runs, baseline=baseline)
    published = paper["variants"].get(variant)
    measured = {"first_attention": table.loc[variant, ("first-token attention", "mean")],
                "sink_rate": table.loc[variant, ("sink rate", "mean")],
                "first_share": table.loc[variant, ("first-token share", "mean")]}
    if variant == baseline:
        return Claim(id=f"mitigation.{variant}_grows_sink", source=paper["source"],
                     statement="softmax attention trained from scratch grows a first-token sink",
                     rule="sink rate >= 5% and alpha_0 >= 2x uniform attention", published=published,
                     measured=measured, holds=grows_sink(table, baseline, uniform), note=line)
    return Claim(id=f"mitigation.{variant}_removes_sink", source=paper["source"],
                 statement=f"{variant} removes the first-token sink",
                 rule="sink_verdict says 'removes' (sink rate < 2%, alpha_0 and share <= 1.5x uniform), with the "
                      "cut settled by the seeds and the strongest head no longer rising",
                 published=published, measured=measured, holds=removal_holds(line), note=line)


def rmsnorm_convergence(candidate: Sequence[dict], baseline: Sequence[dict], paper: dict, setting: str) -> Claim:
    """The structural-origin paper: head-wise RMSNorm converges faster (lower validation loss) than softmax.
    Rule: :func:`~sinklib.mitigation.comparison.convergence` -- both the mean loss over training and the final loss lower by
    more than 2 pooled seed sd's holds; both higher by as much does not; otherwise it cannot be judged."""
    conv = convergence(candidate, baseline)
    holds = {"faster": True, "slower": False, "no difference": None}[conv["verdict"]]
    return Claim(id=f"origin.headwise_rmsnorm_converges_faster.{setting.replace(' ', '_')}", source=paper["source"],
                 statement="head-wise RMSNorm reaches a lower validation loss than softmax",
                 rule="mean and final validation loss both lower (faster) / higher (slower) by > 2 pooled seed sd's",
                 published=paper["variants"]["headwise_rmsnorm"].get("val_loss"),
                 measured={"final": conv["final"], "auc": conv["auc"]}, holds=holds,
                 note=f"{conv['verdict']} ({setting})")
