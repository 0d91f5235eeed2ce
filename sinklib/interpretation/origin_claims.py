"""The claims of ``02_interpretation``: one rule per link of the structural-origin chain and Sun et al.'s bias view.

Each function takes what the notebook measured and returns a :class:`~sinklib.core.claims.Claim` whose ``holds`` is the
*structure* of the claim on this model (a jump, an ordering, a sign); where the paper gives a number, the record
says in ``note`` whether the measured one matches it (:func:`sinklib.core.results.number_matches`) -- a number can only
be expected to match on the paper's model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sinklib.core.claims import Claim
from sinklib.core.results import number_matches

ORIGIN = "The Structural Origin of Attention Sink, arXiv 2605.06611"
SUN = "Sun et al., Massive Activations in Large Language Models, arXiv 2402.17762"
EPS = 0.3


def variance_discrepancy(ratio_t0: Sequence[float], t0_is_max: Sequence[bool]) -> Claim:
    """Link 1: under the causal mask o_0 = v_0, so the first position's head output varies most across inputs in
    the first layer. Rule: in layer 0, Var at t = 0 is the largest of all positions and > 2x the second half's mean.
    ``ratio_t0``, ``t0_is_max``: per early layer."""
    return Claim(id="origin.variance_discrepancy", source=f"{ORIGIN}, Section 3",
                 statement="the first position's head output varies most across inputs (first layer)",
                 rule="layer 0: Var at t = 0 is the largest position and > 2x the mean of the second half",
                 published=None, measured={"ratio_t0_to_second_half": list(ratio_t0), "t0_is_max": list(t0_is_max)},
                 holds=bool(t0_is_max[0] and ratio_t0[0] > 2))


def super_neuron(neuron, massive_dims: Sequence[int], paper: dict) -> Claim:
    """Link 2: an early MLP neuron fires on the first token only and writes the massive dimension. Rule: the
    earliest writer (``neuron``: an :class:`~sinklib.interpretation.origin.SuperNeuron` or None) is > 10x more active on the first
    token than elsewhere and puts > 50% of its W_down column's squared norm into dimensions that include a massive
    one."""
    ref = paper["super_neuron"]
    if neuron is None:
        return Claim(id="origin.super_neuron", source=f"{ORIGIN}, Section 4", statement=_SUPER, rule=_SUPER_RULE,
                     published=ref, measured=None, holds=False, note="no neuron meets the super-neuron criterion")
    holds = neuron.selectivity > 10 and neuron.write_share > 0.5 and bool(set(neuron.write_dims) & set(massive_dims))
    same_layer = "the paper's" if neuron.layer == ref["layer"] else f"not the paper's ({ref['layer']})"
    return Claim(id="origin.super_neuron", source=f"{ORIGIN}, Section 4", statement=_SUPER, rule=_SUPER_RULE,
                 published=ref, measured={"layer": neuron.layer, "neuron": neuron.neuron,
                                          "write_dims": list(neuron.write_dims), "selectivity": neuron.selectivity,
                                          "write_share": neuron.write_share},
                 holds=bool(holds), note=f"layer {neuron.layer}: {same_layer}; neuron and dimension ids are "
                                         f"model-specific")


_SUPER = "an early MLP neuron fires on the first token only and writes the massive dimension"
_SUPER_RULE = "first-token |a| > 10x its 95th percentile elsewhere, > 50% of |W_down| squared in a massive dimension"


def disparity_then_sink(onset: Sequence[int], sink_onset: int | None, dom_ratio_at_sink_onset: float,
                        dom_after_super: float, paper: dict) -> Claim:
    """Link 3: the first token's state turns nearly one-hot (DomRatio jumps) where the massive value appears, and
    the sink switches on within two layers. Rule: 0 <= sink onset - first massive onset <= 2, and the first token's
    DomRatio at the sink onset > 3x the other tokens'. ``dom_ratio_at_sink_onset``: that ratio."""
    ref = paper["dom_ratio_first_after_rmsnorm"]["value"]
    holds = bool(onset) and sink_onset is not None and 0 <= sink_onset - onset[0] <= 2 and dom_ratio_at_sink_onset > 3
    return Claim(id="origin.dimension_disparity", source=f"{ORIGIN}, Section 4",
                 statement="the first token's DomRatio jumps with the massive activation and the sink follows",
                 rule="sink onset within 0-2 layers after the massive value appears; first-token DomRatio > 3x "
                      "the others' there",
                 published={"dom_ratio_after_rmsnorm": ref},
                 measured={"massive_onsets": list(onset), "sink_onset": sink_onset,
                           "dom_ratio_after_super_neuron": dom_after_super},
                 holds=bool(holds), note="number: " + (number_matches(ref, dom_after_super)[1]
                                                       if math.isfinite(dom_after_super) else "not measurable (NaN)"))


def massive_by_sun(massive) -> Claim:
    """Sun et al.'s criterion: a few activations exceed 100 and 1000x the median of their token. ``massive``: an
    :class:`~sinklib.core.analysis.MassiveDims`."""
    return Claim(id="sun2024.massive_activations", source=f"{SUN}, Section 2",
                 statement="a few hidden-state entries exceed |h| > 100 and 1000x their token's median",
                 rule="Sun et al.'s criterion met in some layer", published="|h| > 100 and > 1000x median",
                 measured={"dims": list(massive.dims), "peak_ratio_to_median": massive.peak_ratio},
                 holds=bool(massive.strict), note="" if massive.strict else massive.describe())


def lock_in(positive: tuple[float, float], cos: tuple[float, float], n_sink_heads: int) -> Claim:
    """Link 4: once the first token's key is fixed, every query scores it positively in sink heads. Rule: > 90% of
    the scores q_t . k_0 are positive in sink heads, and the queries' top direction is closer to k_0 there than in
    the other heads. ``positive``, ``cos``: (sink heads, other heads)."""
    holds = n_sink_heads > 0 and positive[0] > 0.9 and cos[0] > cos[1]
    return Claim(id="origin.lock_in", source=f"{ORIGIN}, Section 4",
                 statement="in sink heads the queries align with the first token's fixed key and score it positively",
                 rule="> 90% positive q_t . k_0 in sink heads, and |cos(top query direction, k_0)| above the others'",
                 published=None, measured={"positive_sink_vs_other": list(positive), "cos_sink_vs_other": list(cos),
                                           "sink_heads": n_sink_heads}, holds=bool(holds))


def self_only_sink(share_before: float, share_after: float, position: int) -> Claim:
    """Intervention (i): token k attending only to itself becomes a sink. Rule: > 20% of heads have mean alpha_k
    > 0.3 after the edit, and more than 5x as many as before."""
    holds = share_after > 0.2 and share_after > 5 * share_before
    return Claim(id="origin.self_only_creates_sink", source=f"{ORIGIN}, Section 5",
                 statement=f"a token made to attend only to itself (position {position}) becomes a sink",
                 rule="sink heads for position k (mean alpha_k > 0.3): > 20% of heads, and > 5x as many as before",
                 published="becomes a sink", measured={"sink_heads_before": share_before,
                                                       "sink_heads_after": share_after}, holds=bool(holds))


def amplification(lambdas: Sequence[float], centred: Sequence[float], control: Sequence[float]) -> Claim:
    """Intervention (ii): amplifying token k's head-output variance raises its sink score monotonically; plain
    scaling does not. Rule: the centred curve never drops by more than 0.005, ends > 2x where it starts, and the
    control's rise is < half of it. The record notes whether the peak ever passes eps = 0.3."""
    monotone = all(b >= a - 0.005 for a, b in zip(centred, centred[1:]))
    rise, rise_ctl = centred[-1] / max(centred[0], 1e-9), control[-1] / max(control[0], 1e-9)
    peak = max(centred)
    return Claim(id="origin.amplification_monotone", source=f"{ORIGIN}, Section 5",
                 statement="amplifying token k's variance raises its sink score monotonically; plain scaling does not",
                 rule="monotone (no drop > 0.005), > 2x rise, control's rise < half of it",
                 published="monotone rise", measured={"lambdas": list(lambdas), "centred": list(centred),
                                                      "control": list(control), "monotone": monotone, "rise": rise,
                                                      "control_rise": rise_ctl},
                 holds=bool(monotone and rise > 2 and rise_ctl < rise / 2),
                 note=f"peak {peak:.3f} is {'above' if peak > EPS else 'below'} eps {EPS}: "
                      f"{'a sink' if peak > EPS else 'more attention, not a sink'}")


def massive_bias(ppl: dict[str, float], paper: dict) -> Claim:
    """Sun et al.: massive activations act as a bias -- set to their mean the model is unchanged, set to zero it
    breaks. Rule: every massive site set to its mean changes perplexity by < 5%, zero more than doubles it."""
    holds = abs(ppl["set to mean"] / ppl["original"] - 1) < 0.05 and ppl["set to zero"] > 2 * ppl["original"]
    ratio = ppl["set to mean"] / ppl["original"]
    return Claim(id="sun2024.massive_activations_are_bias", source=f"{SUN}, Table 3",
                 statement="massive activations set to their mean leave the model unchanged; set to zero break it",
                 rule="ppl(mean) within 5% of the original, ppl(zero) > 2x", published=paper["perplexity_wikitext"],
                 measured=dict(ppl), holds=bool(holds),
                 note=f"ppl(mean)/ppl(original) {number_matches(1.0, ratio, factor=1.05)[1]}")


def implicit_bias(separation: dict[str, float], n_sink_heads: int) -> Claim:
    """The sink as an implicit bias: in sink heads the first token's value is small and its term A_t0 v_0 nearly
    constant. Rule: a random sink head lies below a random other head with probability >= 0.75 on both measures
    (:func:`sinklib.interpretation.massive_activations.separation`)."""
    holds = n_sink_heads > 0 and all(a >= 0.75 for a in separation.values())
    return Claim(id="origin.sink_is_implicit_bias", source=f"{SUN}, Section 4; {ORIGIN}",
                 statement="a sink head's first-token term is small in value and nearly constant: an additive bias",
                 rule="separation (Mann-Whitney AUC) of sink vs other heads >= 0.75 for |v_0| and the term's spread",
                 published=None, measured=dict(separation), holds=bool(holds),
                 note="the spread falls with alpha partly by construction")
