"""What each rule of ``02_interpretation`` transcribes (``follows``), how it departs from its paper (``adapted``) and
what the paper predicts at random initialisation (``at_init``), with :func:`notebook_claim`, which stamps them on a record
(rules: :mod:`sinklib.interpretation.origin_claims` and :mod:`sinklib.interpretation.massive_claims`; each rule declares
its numbers' kinds in ``quantities`` beside it, and stores an index through :func:`index`).
"""

from __future__ import annotations

from sinklib.core.claims import Claim

ORIGIN = "The Structural Origin of Attention Sink, arXiv 2605.06611"
SUN = "Sun et al., Massive Activations in Large Language Models, arXiv 2402.17762"
EPS = 0.3
SUN_CODE = "locuslab/massive-activations"  # the authors' code (read: main_llm.py, lib/hook.py)
NO_CODE = "no public code found for arXiv 2605.06611"

# What each rule transcribes (``follows``), how it departs from the paper (``adapted``) and what the paper predicts
# at random initialisation (``at_init``: True for an architectural effect, False for one that training makes).
FOLLOWS = {
    "origin.variance_discrepancy": f"Sec. 3: under the causal mask o_0 = v_0 while o_t = sum_j A_tj v_j averages t+1 "
                                   f"values, so Var_n[o_t] is largest at t = 0 and decays with t; {NO_CODE}",
    "origin.super_neuron": f"Sec. 4: SwiGLU neurons firing on the first token with channel-sparse W_down columns "
                           f"(Llama-2-7B layer 1, neuron 7890 -> dim 2533); {NO_CODE}",
    "origin.dimension_disparity": f"Sec. 4: DomRatio(h) = max_j |h_j| / mean_j |h_j| of the first token jumps where "
                                  f"the super neuron fires (about 263 after RMSNorm at layer 2 of Llama-2-7B); "
                                  f"{NO_CODE}",
    "origin.lock_in": f"Sec. 4: the first token's normalised state is a scaled basis vector, its key k_0 is fixed, "
                      f"the queries' top singular direction aligns with k_0 and q_t . k_0 > 0; {NO_CODE}",
    "origin.self_only_creates_sink": f"Sec. 5, intervention (i): the attention mask's row k keeps only column k, "
                                     f"and token k becomes a sink; {NO_CODE}",
    "origin.amplification_monotone": f"Sec. 5, intervention (ii): o'_k = mu + lambda (o_k - mu), the sink score at k "
                                     f"rises monotonically with lambda; plain scaling lambda o_k does not; {NO_CODE}",
    "sun2024.massive_activations": f"Sec. 2: |h| > 100 and about 1000x the median magnitude; "
                                   f"{SUN_CODE}:main_llm.py:--exp2 (top-3 |h| against torch.median(feat.abs()) of "
                                   f"the layer output)",
    "sun2024.massive_activations_are_bias": f"Sec. 3, Table 3: set the massive activations to zero (ppl explodes) "
                                            f"or to their mean (unchanged); {SUN_CODE}:lib/hook.py:"
                                            f"Intervened_Layer.update (main_llm.py --exp3)",
    "origin.sink_is_implicit_bias": f"Sun et al. Sec. 4: the sink token's small, nearly constant value update acts "
                                    f"as an implicit attention bias; {SUN_CODE}:main_llm.py:--exp4 captures the "
                                    f"attention only; the per-head measures here are ours",
}
ADAPTED = {
    "origin.variance_discrepancy": "variance pooled over heads and channels; judged in layer 0 by t = 0 being the "
                                   "largest position and > 2x the second half's mean (the paper shows curves); "
                                   "random tokens without BOS",
    "origin.super_neuron": "selectivity against the 95th percentile of |a| at t >= 1 (not the maximum: Sun's "
                           "delimiter fires too); thresholds 100x the layer median, 10x elsewhere, > 50% of "
                           "|W_down|^2 in two dims are ours; massive dims by Sun et al.'s layer-median criterion",
    "origin.dimension_disparity": "the paper reports the DomRatio value; the rule here is the order (sink onset "
                                  "0-2 layers after the first attention that reads the first token's value onset: "
                                  "|v| > 100 on a massive dimension and doubling, not Sun et al.'s 1000x, whose "
                                  "first layer is recorded beside it) and first-token DomRatio > 3x the others' at "
                                  "the sink onset",
    "origin.lock_in": "relative cut between head groups (sink heads alpha > 0.3 vs the rest): > 90% positive scores "
                      "in sink heads and |cos| separating them (AUC >= 0.75, bootstrap low end > 0.5) -- ours",
    "origin.self_only_creates_sink": "sink score of the later queries t > k only (the edit forces A_kk = 1); "
                                     "> 20% of heads above 0.3 and > 5x as many as before are our thresholds",
    "origin.amplification_monotone": "mu is token k's own batch mean (the paper: mean over positions/batch); layers "
                                     "0-1; no drop > 0.005, > 2x rise, control's rise < half are our thresholds",
    "sun2024.massive_activations": "the authors' median (the layer's whole (1, T, d) output, per window); judged "
                                   "as met when any entry of any layer meets it on the natural windows (the "
                                   "paper reads the ratio off per-layer plots); 'a few' made a rule of ours, judged "
                                   "layer by layer: some layer meets it with at most 2 positions t >= 1 per window "
                                   "on average (the layers where many tokens meet it are named)",
    "sun2024.massive_activations_are_bias": "every site meeting the criterion (the layer's median; the stated fallback "
                                            "ratio when 1000x is unmet) in every onset layer, each site's own mean "
                                            "from calibration windows (the authors: one layer, the first token and "
                                            "the largest delimiter, fixed values); held-out Bible, not WikiText; "
                                            "5% threshold ours; 'breaks' > 1000x (Table 3: 1,174x and inf); sites "
                                            "that are not 'a few' cannot be judged",
    "origin.sink_is_implicit_bias": "|v_0| ratio and the term's relative spread, judged by the Mann-Whitney AUC of "
                                    "sink vs other heads >= 0.75 (our measures and cut)",
}
AT_INIT = {  # the chain: value aggregation is architectural; super neurons, massive values and sinks are learned
    "origin.variance_discrepancy": True,
    "origin.super_neuron": False,
    "origin.dimension_disparity": False,
    "origin.lock_in": False,
    "origin.self_only_creates_sink": False,
    "origin.amplification_monotone": False,
    "sun2024.massive_activations": False,
    "sun2024.massive_activations_are_bias": False,
    "origin.sink_is_implicit_bias": False,
}


def index(i) -> int | None:
    """A layer / neuron / dimension index as a Python int -- an identity (:func:`sinklib.core.quantities.identity`)
    compares exactly and must be an int in the record; None (not found, not measured) stays None."""
    return None if i is None else int(i)


def notebook_claim(claim_id: str, **fields) -> Claim:
    """A :class:`Claim` of this notebook, with its rule's ``follows`` / ``adapted`` / ``at_init``."""
    return Claim(id=claim_id, follows=FOLLOWS[claim_id], adapted=ADAPTED[claim_id], at_init=AT_INIT[claim_id],
                 **fields)
