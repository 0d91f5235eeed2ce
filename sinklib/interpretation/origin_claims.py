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
                                   "paper reads the ratio off per-layer plots); 'a few' made a rule of ours: in "
                                   "every layer where it is met, at most 2 positions t >= 1 per window on average",
    "sun2024.massive_activations_are_bias": "every site meeting the criterion (the layer's median; the stated fallback "
                                            "ratio when 1000x is unmet) in every onset layer, each site's own mean "
                                            "from calibration windows (the authors: one layer, the first token and "
                                            "the largest delimiter, fixed values); held-out Bible, not WikiText; "
                                            "5% / 2x thresholds ours",
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


def _claim(claim_id: str, **fields) -> Claim:
    """A :class:`Claim` of this notebook, with its rule's ``follows`` / ``adapted`` / ``at_init``."""
    return Claim(id=claim_id, follows=FOLLOWS[claim_id], adapted=ADAPTED[claim_id], at_init=AT_INIT[claim_id],
                 **fields)


def variance_discrepancy(ratio_t0: Sequence[float], t0_is_max: Sequence[bool]) -> Claim:
    """Link 1: under the causal mask o_0 = v_0, so the first position's head output varies most across inputs in
    the first layer. Rule: in layer 0, Var at t = 0 is the largest of all positions and > 2x the second half's mean.
    ``ratio_t0``, ``t0_is_max``: per early layer."""
    return _claim("origin.variance_discrepancy", source=f"{ORIGIN}, Section 3",
                  statement="the first position's head output varies most across inputs (first layer)",
                  rule="layer 0: Var at t = 0 is the largest position and > 2x the mean of the second half",
                  published=None, measured={"ratio_t0_to_second_half": list(ratio_t0), "t0_is_max": list(t0_is_max)},
                  holds=bool(t0_is_max[0] and ratio_t0[0] > 2))


def super_neuron(neuron, massive_dims: Sequence[int], paper: dict, massive_onset: int | None = None) -> Claim:
    """Link 2: an early MLP neuron fires on the first token only and writes the massive dimension. Rule: the
    earliest writer (``neuron``: an :class:`~sinklib.interpretation.origin.SuperNeuron` or None) is > 10x more
    active on the first token than elsewhere, puts > 50% of its W_down column's squared norm into dimensions that
    include a massive one, and sits at or before ``massive_onset`` -- the first token's value onset, the first layer l
    whose output h^l holds the first token's large value on a massive dimension (|v| > 100, doubling; block l's MLP
    writes into h^l, so a neuron of a later layer cannot be what put it there). Without an onset the order is not
    judged (``massive_onset=None``)."""
    ref = paper["super_neuron"]
    if neuron is None:
        return _claim("origin.super_neuron", source=f"{ORIGIN}, Section 4", statement=_SUPER, rule=_SUPER_RULE,
                      published=ref, measured=None, holds=False, note="no neuron meets the super-neuron criterion")
    in_order = massive_onset is None or neuron.layer <= massive_onset
    holds = (neuron.selectivity > 10 and neuron.write_share > SUPER_WRITE_SHARE
             and bool(set(neuron.write_dims) & set(massive_dims))
             and in_order)
    same_layer = "the paper's" if neuron.layer == ref["layer"] else f"not the paper's ({ref['layer']})"
    order = ("" if massive_onset is None else
             f"; the first token's value onset (|v| > 100, doubling) is layer {massive_onset}" + (
                 "" if in_order else ", before this neuron's layer: it cannot have written it first"))
    return _claim("origin.super_neuron", source=f"{ORIGIN}, Section 4", statement=_SUPER, rule=_SUPER_RULE,
                  published=ref, measured={"layer": neuron.layer, "neuron": neuron.neuron,
                                           "write_dims": list(neuron.write_dims), "selectivity": neuron.selectivity,
                                           "write_share": neuron.write_share,
                                           "first_token_value_onset": massive_onset},
                  holds=bool(holds), note=f"layer {neuron.layer}: {same_layer}; neuron and dimension ids are "
                                          f"model-specific{order}")


SUPER_WRITE_SHARE = 0.5  # a super neuron puts more than half its W_down column's squared norm into its top dims
_SUPER = "an early MLP neuron fires on the first token only and writes the massive dimension"
_SUPER_RULE = ("first-token |a| > 10x its 95th percentile elsewhere, > 50% of |W_down| squared in a massive "
               "dimension, and its layer at or before the first token's value onset (the first layer whose output "
               "holds |v| > 100 on a massive dimension)")


def dom_share(dom_ratio: float, width: int) -> float:
    """DomRatio without its width: max|h| / mean|h| is at most d (a one-hot vector), so DomRatio / d = max|h| /
    sum|h|, the largest entry's share of the L1 mass, in (0, 1]. Llama-2-7B's 263 at d = 4096 is 0.064; the same
    raw number at d = 576 would be 0.46."""
    return dom_ratio / width


def disparity_then_sink(onset: Sequence[int], sink_onset: int | None, dom_ratio_at_sink_onset: float,
                        dom_after_super: float, paper: dict, width: int | None = None,
                        sun_onset: int | None = None, sun_measured: bool | None = None) -> Claim:
    """Link 3: the first token's state turns nearly one-hot (DomRatio jumps) where its massive value appears, and
    the sink switches on within two layers of the first attention that can read it.

    Indices are what the tensors are: ``onset`` lists layers l whose *output* h^l (``hidden_states[l]``, the
    residual after block l) first holds or doubles the first token's value on a massive dimension -- the *first-token
    value onset* (|v| > 100 and doubling, :func:`~sinklib.interpretation.massive_activations.onset_layers`), which is
    not Sun et al.'s criterion; ``sun_onset`` is the first layer whose output meets Sun et al.'s criterion (> 100 and
    > 1000x the layer median) anywhere, recorded beside it (None: never met, or not measured -- ``sun_measured``,
    by default whether ``sun_onset`` was given). ``sink_onset`` is the
    first layer whose *attention* gives alpha_0 > 0.3, and block l's attention reads h^(l-1). So the first attention
    that sees the value is block ``onset[0] + 1``, and a sink at ``onset[0]`` or earlier formed before its supposed
    cause. Rule: 0 <= sink_onset - (onset[0] + 1) <= 2, and the first token's DomRatio at the sink onset > 3x the
    other tokens'. ``dom_ratio_at_sink_onset``: that ratio, stored with the verdict of its condition.

    The record says which onset the link rests on (the first-token value onset) and where the sink sits against
    Sun et al.'s onset. The number is compared without its width (:func:`dom_share`, DomRatio / d against the
    paper's 263 / 4096) when ``width`` (the model's d) is given: DomRatio is bounded by d."""
    entry = paper["dom_ratio_first_after_rmsnorm"]
    ref = entry["value"]
    reader = onset[0] + 1 if onset else None  # the first block whose attention reads the first token's value
    in_order = reader is not None and sink_onset is not None and 0 <= sink_onset - reader <= 2
    disparate = dom_ratio_at_sink_onset > DISPARITY_AT_SINK
    order = ("" if reader is None or sink_onset is None else
             f"sink onset {sink_onset} vs first reading attention {reader}"
             + (" (the sink forms before the value it is said to follow)" if sink_onset < reader else ""))
    sun_measured = sun_onset is not None if sun_measured is None else sun_measured
    sun = _against_sun(sink_onset, sun_onset) if sun_measured else "where Sun et al.'s criterion holds was not measured"
    return _claim("origin.dimension_disparity", source=f"{ORIGIN}, Section 4",
                  statement="the first token's DomRatio jumps with the massive activation and the sink follows",
                  rule="sink onset 0-2 layers after the first attention that reads the first token's value onset "
                       "(its first layer with |v| > 100 on a massive dimension, doubling; block onset + 1 reads it: "
                       f"hidden_states[l] is block l's output); first-token DomRatio > {DISPARITY_AT_SINK:g}x the "
                       "others' there. Rests on the value onset, not on Sun et al.'s 1000x criterion (recorded beside)",
                  published={"dom_ratio_after_rmsnorm": ref},
                  measured={"first_token_value_onsets": list(onset), "first_reading_layer": reader,
                            **({"sun_onset": sun_onset} if sun_measured else {}), "sink_onset": sink_onset,
                            "sink_follows": follows_which(onset, sink_onset, sun_onset),
                            "dom_first_over_rest_at_sink": dom_ratio_at_sink_onset,
                            "dom_disparity_holds": bool(disparate), "order_holds": bool(in_order),
                            "dom_ratio_after_super_neuron": dom_after_super,
                            **({"dom_share_after_super_neuron": dom_share(dom_after_super, width)} if width else {})},
                  holds=bool(in_order and disparate),
                  note="; ".join(x for x in (order, sun, f"first-token DomRatio {dom_ratio_at_sink_onset:.3g}x the "
                                             f"others' at the sink onset" + ("" if disparate else
                                                                              f" (not > {DISPARITY_AT_SINK:g}x)"),
                                             _dom_number(dom_after_super, ref, entry, width)) if x))


DISPARITY_AT_SINK = 3.0  # the first token's DomRatio over the others' at the sink onset


def follows_which(onset: Sequence[int], sink_onset: int | None, sun_onset: int | None) -> str:
    """Which onset the sink follows (switches on 0-2 layers after the first attention that reads it): "the value
    onset", "Sun's onset", "both", or "neither" (also when the sink or an onset is missing)."""
    def after(layer):
        return layer is not None and sink_onset is not None and 0 <= sink_onset - (layer + 1) <= 2
    value, sun = after(onset[0] if onset else None), after(sun_onset)
    return {(True, True): "both", (True, False): "the value onset", (False, True): "Sun's onset"}.get((value, sun),
                                                                                                    "neither")


def _against_sun(sink_onset: int | None, sun_onset: int | None) -> str:
    if sun_onset is None:
        return "Sun et al.'s criterion is met in no layer" if sink_onset is not None else ""
    if sink_onset is None:
        return f"Sun et al.'s criterion first holds at layer {sun_onset}"
    gap = sun_onset + 1 - sink_onset
    return (f"Sun et al.'s criterion first holds at layer {sun_onset}: the sink forms {gap} layer"
            f"{'s' if gap != 1 else ''} before the first attention that reads it" if gap > 0 else
            f"Sun et al.'s criterion first holds at layer {sun_onset}, read from layer {sun_onset + 1}, at or before "
            f"the sink onset")


def _dom_number(measured: float, ref: float, entry: dict, width: int | None) -> str:
    """The DomRatio against the paper's: as a share of the L1 mass (DomRatio / d) when the width is known."""
    if not math.isfinite(measured):
        return "number: not measurable (NaN)"
    if width and entry.get("hidden_size"):
        ok, text = number_matches(dom_share(ref, entry["hidden_size"]), dom_share(measured, width))
        return (f"number (DomRatio / d, width-free): {text}; raw {measured:.3g} of at most {width} vs {ref:.3g} of "
                f"{entry['hidden_size']}")
    return "number: " + number_matches(ref, measured)[1]


RARE_SITES = 2.0  # "a few": at most this many positions t >= 1 per window, on average, in every layer where it is met


def massive_by_sun(massive, sites=None, max_later_sites: float = RARE_SITES) -> Claim:
    """Sun et al.'s criterion: *a few* activations exceed 100 and 1000x the median |h| of the layer's output (over
    the sequence, as their code computes it). ``massive``: an :class:`~sinklib.core.analysis.MassiveDims`;
    ``sites``: a :class:`~sinklib.interpretation.sun_sites.SunSites` of the same windows, where the criterion holds
    layer by layer.

    Rule: the criterion is met in some layer, and it is rare there -- in every layer where it is met, at most
    ``max_later_sites`` positions t >= 1 per window on average hold a qualifying entry. Sun et al. find the massive
    activations at the starting token and the first delimiter (one later position); a criterion met by most tokens
    of a layer does not single out "a few" activations, however large they are (Gemma-3-270M: most tokens in its
    first layers). Without ``sites`` the rarity is not measured and the verdict cannot be given (None)."""
    measured = {"dims": list(massive.dims), "peak_ratio_to_median": massive.peak_ratio}
    rule = (f"Sun et al.'s criterion met in some layer, and in every layer where it is met at most "
            f"{max_later_sites:g} positions t >= 1 per window on average hold it ('a few': the starting token and "
            f"the first delimiter)")
    if not massive.strict:
        holds, note = False, massive.describe()
    elif sites is None:
        holds, note = None, "cannot be judged here: where the criterion holds (how many tokens) was not measured"
    else:
        worst, per_seq, share = sites.most_sites()
        met = sites.met_layers
        measured |= {"sun_onset": sites.onset, "first_token_sun_onset": sites.first_token_onset,
                     "later_share": {str(i): sites.later_share[i] for i in met},
                     "most_later_sites_per_window": per_seq, "most_later_share": share}
        holds = per_seq <= max_later_sites
        where = ", ".join(f"{100 * sites.later_share[i]:.0f}%" for i in met[:4]) + (" ..." if len(met) > 4 else "")
        note = (f"met in layers {met[0]}-{met[-1]} ({len(met)} layers); share of the tokens after position 0 that "
                f"hold it, layer by layer from layer {met[0]}: {where}; at most {per_seq:.1f} of {sites.seq_len - 1} "
                f"later positions per window (layer {worst})"
                + ("" if holds else f": not 'a few' (more than {max_later_sites:g} per window)"))
    return _claim("sun2024.massive_activations", source=f"{SUN}, Section 2",
                  statement="a few hidden-state entries exceed |h| > 100 and 1000x the median |h| of their layer's "
                            "output",
                  rule=rule, published="|h| > 100 and > 1000x median, at the starting token and the first delimiter",
                  measured=measured, holds=holds, note=note)


LOCK_AUC = 0.75  # a random sink head's |cos| above a random other head's at least this often ...
LOCK_LOW = 0.5  # ... and the bootstrap interval's low end above chance


def lock_in(positive: tuple[float, float], cos: tuple[float, float], n_sink_heads: int,
            cos_separation: tuple[float, float, float] | None = None) -> Claim:
    """Link 4: once the first token's key is fixed, every query scores it positively in sink heads. Rule: > 90% of
    the scores q_t . k_0 are positive in sink heads, and the queries' top direction is closer to k_0 in sink heads
    than in the others by a margin that can fail: ``cos_separation`` = (AUC, low, high), P(a sink head's |cos| > an
    other head's) with its 95% bootstrap interval over heads
    (:func:`~sinklib.interpretation.massive_activations.separation_interval`); AUC >= 0.75 and low > 0.5. (A mean
    above the others' alone passed 0.26 vs 0.23.) ``positive``, ``cos``: (sink heads, other heads) means."""
    auc, low, high = cos_separation if cos_separation is not None else (float("nan"),) * 3
    separated = auc >= LOCK_AUC and low > LOCK_LOW  # False for NaN (no sink head, or not measured)
    holds = n_sink_heads > 0 and positive[0] > 0.9 and separated
    return _claim("origin.lock_in", source=f"{ORIGIN}, Section 4",
                  statement="in sink heads the queries align with the first token's fixed key and score it positively",
                  rule=f"> 90% positive q_t . k_0 in sink heads, and sink heads' |cos(top query direction, k_0)| "
                       f"above the others' (AUC >= {LOCK_AUC}, 95% bootstrap low end > {LOCK_LOW})",
                  published=None, measured={"positive_sink_vs_other": list(positive), "cos_sink_vs_other": list(cos),
                                            "cos_auc": auc, "cos_auc_interval": [low, high],
                                            "sink_heads": n_sink_heads}, holds=bool(holds),
                  note="" if cos_separation is not None else "cos separation not measured")


def self_only_sink(share_before: float, share_after: float, position: int) -> Claim:
    """Intervention (i): token k attending only to itself becomes a sink. Rule: > 20% of heads have mean alpha_k
    > 0.3 after the edit, and more than 5x as many as before."""
    holds = share_after > 0.2 and share_after > 5 * share_before
    return _claim("origin.self_only_creates_sink", source=f"{ORIGIN}, Section 5",
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
    return _claim("origin.amplification_monotone", source=f"{ORIGIN}, Section 5",
                  statement="amplifying token k's variance raises its sink score monotonically; plain scaling does not",
                  rule="monotone (no drop > 0.005), > 2x rise, control's rise < half of it",
                  published="monotone rise", measured={"lambdas": list(lambdas), "centred": list(centred),
                                                       "control": list(control), "monotone": monotone, "rise": rise,
                                                       "control_rise": rise_ctl},
                  holds=bool(monotone and rise > 2 and rise_ctl < rise / 2),
                  note=f"peak {peak:.3f} is {'above' if peak > EPS else 'below'} eps {EPS}: "
                       f"{'a sink' if peak > EPS else 'more attention, not a sink'}")


def massive_bias(ppl: dict[str, float], paper: dict, first_fixed: bool = False, later_sites: int | None = None
                 ) -> Claim:
    """Sun et al.: massive activations act as a bias -- set to their mean the model is unchanged, set to zero it
    breaks. Rule: every massive site set to its mean changes perplexity by < 5%, zero more than doubles it.

    ``first_fixed``: position 0 holds the same state in every window (a BOS model): setting it to its mean rewrites it
    with itself, so the mean edit cannot fail there and is judged on the later sites only -- ``later_sites`` (how
    many calibration entries at t >= 1 met the criterion); with none, the mean half cannot fail at all and the claim
    cannot be judged here unless the zero half already fails."""
    ratio = ppl["set to mean"] / ppl["original"]
    mean_ok = abs(ratio - 1) < 0.05
    zero_breaks = ppl["set to zero"] > 2 * ppl["original"]
    holds: bool | None = bool(mean_ok and zero_breaks)
    note = f"ppl(mean)/ppl(original) {number_matches(1.0, ratio, factor=1.05)[1]}"
    if first_fixed:
        note += ("; position 0 holds the same BOS state in every window, so setting it to its mean rewrites it with "
                 "itself (ppl(mean, position 0 only) = the original by construction): the mean edit is judged on "
                 f"the {later_sites if later_sites is not None else 'later'} later sites only")
        if not later_sites and zero_breaks:
            holds = None
            note = "cannot be judged here: no later site met the criterion, so the mean edit cannot fail; " + note
    measured = dict(ppl) | ({"first_token_fixed": True, "later_sites": later_sites} if first_fixed else {})
    return _claim("sun2024.massive_activations_are_bias", source=f"{SUN}, Table 3",
                  statement="massive activations set to their mean leave the model unchanged; set to zero break it",
                  rule="ppl(mean) within 5% of the original, ppl(zero) > 2x; on a model whose position 0 is the same "
                       "BOS in every window the mean edit is judged on the later sites only",
                  published=paper["perplexity_wikitext"], measured=measured, holds=holds, note=note)


def implicit_bias(separation: dict[str, float], n_sink_heads: int) -> Claim:
    """The sink as an implicit bias: in sink heads the first token's value is small and its term A_t0 v_0 nearly
    constant. Rule: a random sink head lies below a random other head with probability >= 0.75 on both measures
    (:func:`sinklib.interpretation.massive_activations.separation`)."""
    holds = n_sink_heads > 0 and all(a >= 0.75 for a in separation.values())
    return _claim("origin.sink_is_implicit_bias", source=f"{SUN}, Section 4; {ORIGIN}",
                  statement="a sink head's first-token term is small in value and nearly constant: an additive bias",
                  rule="separation (Mann-Whitney AUC) of sink vs other heads >= 0.75 for |v_0| and the term's spread",
                  published=None, measured={IMPLICIT_AUC_NAMES.get(k, k): v for k, v in separation.items()},
                  holds=bool(holds), note="the spread falls with alpha partly by construction: a head that gives the "
                                          "first token most of every row has little room to vary")


IMPLICIT_AUC_NAMES = {"value_norm_ratio": "value_norm_auc", "sink_term_spread": "term_spread_auc"}  # AUCs, not ratios
