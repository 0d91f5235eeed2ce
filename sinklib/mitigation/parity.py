"""What arXiv 2605.06611 claims of head-wise RMSNorm besides faster convergence: it *restores statistical parity
across positions* -- the first token's dimension disparity falls (DomRatio 82.67 -> 33.74 at 152M, 20B OpenWebText
tokens, 4 seeds) and the representations' effective rank rises (343.7 -> 446.0). Whether it removes the first-token
sink is not the paper's claim: 03 asks it as this project's own question (:func:`sinklib.mitigation.verdicts.sink_claim`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from sinklib.core import quantities as q
from sinklib.core.claims import Claim, over_draws
from sinklib.mitigation.verdicts import claim_source

PARITY_FOLLOWS = ("arXiv 2605.06611, the head-wise RMSNorm experiment (abstract: 'restoring statistical parity across "
                  "positions significantly accelerates convergence'; dimension disparity 82.67 -> 33.74, effective "
                  "rank 343.7 -> 446.0 against softmax; DomRatio(h) = max_j |h_j| / mean_j |h_j| of the first token): "
                  "no public code")
PARITY_ADAPTED = ("a 2-layer TinyLM trained here for a few hundred steps, DomRatio of the first token averaged over "
                  "layers and effective rank of the last layer's states at the final checkpoint; judged by direction "
                  "in each training seed (paired with softmax of the same seed), not by the paper's sizes")


# What each number is (:mod:`sinklib.core.quantities`): ``measured`` holds [softmax, head-wise RMSNorm] per quantity.
PARITY_QUANTITIES = {
    "dom_ratio": q.ratio(),  # the first token's DomRatio = max_j |h_j| / mean_j |h_j|
    "effective_rank": q.value("effective rank"),  # exp of the entropy of the normalised singular values
    "@spread": q.ratio(),  # each seed's DomRatio, head-wise RMSNorm over softmax
}


def parity_one_seed(candidate: dict, baseline: dict, paper: dict) -> Claim:
    """One seed: head-wise RMSNorm restores parity when its final first-token DomRatio is below softmax's **and** its
    final effective rank above (the paper claims both); it does not when either moves the other way, and the note
    says which half failed. ``candidate`` / ``baseline``: runs of :func:`sinklib.mitigation.training.train` (last
    checkpoint read)."""
    c, b = candidate["checkpoints"][-1], baseline["checkpoints"][-1]
    lower = c["dom_ratio_first"] < b["dom_ratio_first"]
    higher = c["effective_rank"] > b["effective_rank"]
    dom = f"first-token DomRatio {b['dom_ratio_first']:.2f} -> {c['dom_ratio_first']:.2f}"
    rank = f"effective rank {b['effective_rank']:.1f} -> {c['effective_rank']:.1f}"
    if lower and higher:
        note = ""
    elif lower:
        note = f"the disparity half holds ({dom}) but the rank half does not: {rank} falls where the paper's rises"
    elif higher:
        note = f"the rank half holds ({rank}) but the disparity half does not: {dom} does not fall"
    else:
        note = f"neither half: {dom}, {rank}"
    arxiv, source = claim_source(paper, "headwise_rmsnorm")
    published = paper["variants"].get("headwise_rmsnorm", {})
    base = paper["variants"].get("softmax", {})
    return Claim(id="origin.headwise_rmsnorm_restores_parity", source=source, paper=arxiv,
                 statement="head-wise RMSNorm lowers the first token's dimension disparity (DomRatio, mean over the "
                           "layers) and raises the last layer's effective rank against softmax -- the two numbers of "
                           "the paper's pre-training table, not yet its 'statistical parity across positions' itself",
                 rule="final DomRatio (first token) lower and final effective rank higher than softmax's, in every "
                      "training seed (paired by seed); either the other way in every seed does not hold",
                 published={"dom_ratio": [base.get("dom_ratio"), published.get("dom_ratio")],
                            "effective_rank": [base.get("effective_rank"), published.get("effective_rank")]},
                 measured={"dom_ratio": [b["dom_ratio_first"], c["dom_ratio_first"]],
                           "effective_rank": [b["effective_rank"], c["effective_rank"]]},
                 holds=lower and higher, note=note, follows=PARITY_FOLLOWS, adapted=PARITY_ADAPTED, at_init=None,
                 quantities=PARITY_QUANTITIES)


def parity_claim_over_seeds(candidate: Sequence[dict], baseline: Sequence[dict], paper: dict,
                            seeds: Sequence[int]) -> Claim:
    """:func:`parity_one_seed` on each training seed (candidate seed i against baseline seed i), then
    :func:`~sinklib.core.claims.over_draws`; ``measured``: [softmax, head-wise RMSNorm] per quantity, means over the
    seeds; ``spread``: each seed's DomRatio ratio (RMSNorm / softmax)."""
    n = min(len(candidate), len(baseline))
    per_seed = [parity_one_seed(candidate[i], baseline[i], paper) for i in range(n)]
    claim = over_draws(per_seed, f"{n} training seeds ({', '.join(str(s) for s in list(seeds)[:n])})",
                       key=lambda c: c.measured["dom_ratio"][1] / c.measured["dom_ratio"][0])
    mean = {k: [sum(c.measured[k][i] for c in per_seed) / n for i in (0, 1)] for k in ("dom_ratio", "effective_rank")}
    return replace(claim, measured=mean | {"over": f"mean over {n} seeds" if n > 1 else "one seed"},
                   control_note="control not run: parity compares two trained models; at step 0 neither has been "
                                "trained, so there is nothing to restore")
