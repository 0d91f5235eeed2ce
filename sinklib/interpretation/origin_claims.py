"""The claims of ``02_interpretation``: one rule per link of the structural-origin chain and its interventions (Sun et
al.'s rules are in :mod:`sinklib.interpretation.massive_claims`; what each rule follows in
:mod:`sinklib.interpretation.claim_sources`).

Each function takes what the notebook measured and returns a :class:`~sinklib.core.claims.Claim` whose ``holds`` is the
*structure* of the claim on this model (a jump, an ordering, a sign); where the paper gives a number, the record
says in ``note`` whether the measured one matches it (:func:`sinklib.core.results.number_matches`) -- a number can only
be expected to match on the paper's model.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sinklib.core import quantities as q
from sinklib.core.claims import Claim
from sinklib.core.results import number_matches
from sinklib.interpretation.claim_sources import EPS, ORIGIN, index, notebook_claim

# What each number of a claim is (:mod:`sinklib.core.quantities`): paths into ``measured`` (and ``control_measured``),
# ``@spread`` the draws' values (:func:`~sinklib.core.claims.over_draws`' key, named where the draws are combined).
VARIANCE_QUANTITIES = {
    "ratio_t0_to_second_half": q.ratio(),  # Var_n[o_0] / mean Var_n[o_t] over the second half, per layer
    "@spread": q.ratio(),  # layer 0's ratio in each draw of random tokens
}


VARIANCE_RATIO = 2.0  # link 1: Var at t = 0 > this x the mean of the second half


def variance_discrepancy(ratio_t0: Sequence[float], t0_is_max: Sequence[bool]) -> Claim:
    """Link 1: under the causal mask o_0 = v_0, so the first position's head output varies most across inputs in
    the first layer. Rule: in layer 0, Var at t = 0 is the largest of all positions and > 2x the second half's mean.
    ``ratio_t0``, ``t0_is_max``: per early layer."""
    return notebook_claim("origin.variance_discrepancy", source=f"{ORIGIN}, Section 3",
                  statement="the first position's head output varies most across inputs (first layer)",
                  rule="layer 0: Var at t = 0 is the largest position and > 2x the mean of the second half",
                  published=None, measured={"ratio_t0_to_second_half": list(ratio_t0), "t0_is_max": list(t0_is_max)},
                  holds=bool(t0_is_max[0] and ratio_t0[0] > VARIANCE_RATIO), quantities=VARIANCE_QUANTITIES)


SUPER_NEURON_QUANTITIES = {
    "layer": q.identity("layer"), "neuron": q.identity("neuron"), "write_dims": q.identity("dim"),
    "first_token_value_onset": q.identity("layer"),
    "selectivity": q.ratio(),  # first-token |a| over its 95th percentile at t >= 1
    "write_share": q.share(),  # share of the W_down column's squared norm in the write dims
    "@spread": q.ratio(),  # the selectivity in each draw of windows (10_llm)
}


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
        return notebook_claim("origin.super_neuron", source=f"{ORIGIN}, Section 4", statement=_SUPER, rule=_SUPER_RULE,
                      published=ref, measured=None, holds=False, note="no neuron meets the super-neuron criterion",
                      quantities=SUPER_NEURON_QUANTITIES)
    in_order = massive_onset is None or neuron.layer <= massive_onset
    holds = (neuron.selectivity > 10 and neuron.write_share > SUPER_WRITE_SHARE
             and bool(set(neuron.write_dims) & set(massive_dims))
             and in_order)
    same_layer = "the paper's" if neuron.layer == ref["layer"] else f"not the paper's ({ref['layer']})"
    order = ("" if massive_onset is None else
             f"; the first token's value onset (|v| > 100, doubling) is layer {massive_onset}" + (
                 "" if in_order else ", before this neuron's layer: it cannot have written it first"))
    return notebook_claim("origin.super_neuron", source=f"{ORIGIN}, Section 4", statement=_SUPER, rule=_SUPER_RULE,
                  published=ref, measured={"layer": int(neuron.layer), "neuron": int(neuron.neuron),
                                           "write_dims": [int(d) for d in neuron.write_dims],
                                           "selectivity": neuron.selectivity, "write_share": neuron.write_share,
                                           "first_token_value_onset": index(massive_onset)},
                  holds=bool(holds), note=f"layer {neuron.layer}: {same_layer}; neuron and dimension ids are "
                                          f"model-specific{order}", quantities=SUPER_NEURON_QUANTITIES)


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


DISPARITY_QUANTITIES = {
    "first_token_value_onsets": q.identity("layer"), "first_reading_layer": q.identity("layer"),
    "sun_onset": q.identity("layer"), "sink_onset": q.identity("layer"),
    "dom_first_over_rest_at_sink": q.ratio(),  # the first token's DomRatio over the others' in the state the sink layer reads
    "dom_ratio_after_super_neuron": q.ratio(),  # DomRatio = max_j |h_j| / mean_j |h_j|: a float, not the neuron's id
    "dom_share_after_super_neuron": q.share(),  # DomRatio / d = max_j |h_j| / sum_j |h_j|, in (0, 1]
    "@spread": q.ratio(),  # dom_first_over_rest_at_sink in each draw of windows (10_llm)
}


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
    cause. Rule: 0 <= sink_onset - (onset[0] + 1) <= 2, and the first token's DomRatio in the state the sink layer's
    attention reads (its normalised input, :func:`~sinklib.interpretation.chain.dom_read_at`) > 3x the other
    tokens'. ``dom_ratio_at_sink_onset``: that ratio, stored with the verdict of its condition.

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
    return notebook_claim("origin.dimension_disparity", source=f"{ORIGIN}, Section 4",
                  statement="the sink follows the first token's value onset (|v| > 100 on a massive dimension, not "
                            "Sun et al.'s 1000x criterion), where its DomRatio jumps",
                  rule="sink onset 0-2 layers after the first attention that reads the first token's value onset "
                       "(its first layer with |v| > 100 on a massive dimension, doubling; block onset + 1 reads it: "
                       f"hidden_states[l] is block l's output); first-token DomRatio > {DISPARITY_AT_SINK:g}x the "
                       "others' in the normalised state the sink layer's attention reads (h^(l-1) after its RMSNorm). "
                       "Rests on the value onset, not on Sun et al.'s 1000x criterion (recorded beside)",
                  published={"dom_ratio_after_rmsnorm": ref},
                  measured={"first_token_value_onsets": [int(i) for i in onset], "first_reading_layer": index(reader),
                            **({"sun_onset": index(sun_onset)} if sun_measured else {}),
                            "sink_onset": index(sink_onset),
                            "sink_follows": follows_which(onset, sink_onset, sun_onset),
                            "dom_first_over_rest_at_sink": dom_ratio_at_sink_onset,
                            "dom_disparity_holds": bool(disparate), "order_holds": bool(in_order),
                            "dom_ratio_after_super_neuron": dom_after_super,
                            **({"dom_share_after_super_neuron": dom_share(dom_after_super, width)} if width else {})},
                  holds=bool(in_order and disparate),
                  note="; ".join(x for x in (_which_onset(onset, sink_onset, sun_onset), order, sun,
                                             "the sink layer's attention reads the embeddings (sink onset 0): "
                                             "DomRatio not measured there" if math.isnan(dom_ratio_at_sink_onset)
                                             else f"first-token DomRatio {dom_ratio_at_sink_onset:.3g}x the "
                                             f"others' in the state the sink layer's attention reads"
                                             + ("" if disparate else
                                                                              f" (not > {DISPARITY_AT_SINK:g}x)"),
                                             _dom_number(dom_after_super, ref, entry, width)) if x),
                  quantities=DISPARITY_QUANTITIES)


DISPARITY_AT_SINK = 3.0  # the first token's DomRatio over the others' in the state the sink layer's attention reads


def follows_which(onset: Sequence[int], sink_onset: int | None, sun_onset: int | None) -> str:
    """Which onset the sink follows (switches on 0-2 layers after the first attention that reads it): "the value
    onset", "Sun's onset", "both", or "neither" (also when the sink or an onset is missing)."""
    def after(layer):
        return layer is not None and sink_onset is not None and 0 <= sink_onset - (layer + 1) <= 2
    value, sun = after(onset[0] if onset else None), after(sun_onset)
    return {(True, True): "both", (True, False): "the value onset", (False, True): "Sun's onset"}.get((value, sun),
                                                                                                    "neither")


def _which_onset(onset: Sequence[int], sink_onset: int | None, sun_onset: int | None) -> str:
    """The note's first words: which onset the sink follows (:func:`follows_which`) and how far Sun et al.'s onset
    lies from the value onset -- "the sink follows the value onset (layer 1), 9 layers before Sun et al.'s criterion
    first holds (layer 10)"."""
    follows = follows_which(onset, sink_onset, sun_onset)
    text = {"the value onset": f"the sink follows the value onset (layer {onset[0] if onset else '-'})",
            "Sun's onset": f"the sink follows Sun et al.'s onset (layer {sun_onset}), not the value onset",
            "both": "the sink follows both the value onset and Sun et al.'s onset",
            "neither": "the sink follows neither the value onset nor Sun et al.'s onset"}[follows]
    if follows == "the value onset" and sun_onset is not None and onset:
        gap = sun_onset - onset[0]
        text += (f", {abs(gap)} layer{'s' if abs(gap) != 1 else ''} {'before' if gap > 0 else 'after'} Sun et al.'s "
                 f"criterion first holds (layer {sun_onset})")
    return text


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


LOCK_AUC = 0.75  # a random sink head's |cos| above a random other head's at least this often ...
LOCK_LOW = 0.5  # ... and the bootstrap interval's low end above chance


LOCK_QUANTITIES = {
    "positive_sink_vs_other": q.share(),  # share of the scores q_t . k_0 > 0, (sink heads, other heads)
    "cos_sink_vs_other": q.value("|cos|"),  # mean |cos(top query direction, k_0)|, (sink heads, other heads)
    "cos_auc": q.share("AUC"), "cos_auc_interval": q.share("AUC"),  # P(a sink head's |cos| > an other head's)
    "sink_heads": q.count("heads"),
    "@spread": q.share("AUC"),  # cos_auc in each draw of windows (10_llm)
}


def lock_in(positive: tuple[float | None, float | None], cos: tuple[float | None, float | None], n_sink_heads: int,
            cos_separation: tuple[float, float, float] | None = None) -> Claim:
    """Link 4: once the first token's key is fixed, every query scores it positively in sink heads. Rule: > 90% of
    the scores q_t . k_0 are positive in sink heads, and the queries' top direction is closer to k_0 in sink heads
    than in the others by a margin that can fail: ``cos_separation`` = (AUC, low, high), P(a sink head's |cos| > an
    other head's) with its 95% bootstrap interval over heads
    (:func:`~sinklib.interpretation.massive_activations.separation_interval`); AUC >= 0.75 and low > 0.5. (A mean
    above the others' alone passed 0.26 vs 0.23.) ``positive``, ``cos``: (sink heads, other heads) means, None for a
    group with no head; ``cos_separation`` None: not measured, or a group with no head (nothing to compare)."""
    auc, low, high = cos_separation if cos_separation is not None else (None,) * 3
    separated = auc is not None and auc >= LOCK_AUC and low > LOCK_LOW
    holds = n_sink_heads > 0 and positive[0] is not None and positive[0] > 0.9 and separated
    return notebook_claim("origin.lock_in", source=f"{ORIGIN}, Section 4",
                  statement="in sink heads the queries align with the first token's fixed key and score it positively",
                  rule=f"> 90% positive q_t . k_0 in sink heads, and sink heads' |cos(top query direction, k_0)| "
                       f"above the others' (AUC >= {LOCK_AUC}, 95% bootstrap low end > {LOCK_LOW})",
                  published=None, measured={"positive_sink_vs_other": list(positive), "cos_sink_vs_other": list(cos),
                                            "cos_auc": auc, "cos_auc_interval": [low, high],
                                            "sink_heads": n_sink_heads}, holds=bool(holds),
                  note=lock_reason(positive, n_sink_heads, cos_separation),
                  quantities=LOCK_QUANTITIES)


def lock_reason(positive: tuple[float | None, float | None], n_sink_heads: int,
                cos_separation: tuple[float, float, float] | None) -> str:
    """The measured reason of a :func:`lock_in` that does not hold (empty when it holds): no sink head, too few
    positive scores, or |cos| not separating the sink heads (its AUC and interval against the cuts)."""
    if n_sink_heads <= 0 or positive[0] is None:
        return "no sink head"
    if cos_separation is None:
        return "cos separation not measured (or no head outside the sink heads to compare with)"
    auc, low, high = cos_separation
    reasons = []
    if not positive[0] > 0.9:
        reasons.append(f"only {positive[0]:.0%} of the scores q_t . k_0 are positive in sink heads (the cut is 90%)")
    if not (auc >= LOCK_AUC and low > LOCK_LOW):
        reasons.append(f"|cos(top query direction, k_0)| does not separate the sink heads: AUC {auc:.2f} (95% "
                       f"interval {low:.2f}-{high:.2f}) against >= {LOCK_AUC} with a low end > {LOCK_LOW} -- the "
                       f"scores are positive ({positive[0]:.0%} in sink heads, {positive[1]:.0%} in the others) "
                       f"without the queries aligning with the fixed key")
    return "; ".join(reasons)


SELF_ONLY_QUANTITIES = {"sink_heads_before": q.share("heads"), "sink_heads_after": q.share("heads")}  # of all heads


def self_only_sink(share_before: float, share_after: float, position: int) -> Claim:
    """Intervention (i): token k attending only to itself becomes a sink. Rule: > 20% of heads have mean alpha_k
    > 0.3 after the edit, and more than 5x as many as before."""
    holds = share_after > 0.2 and share_after > 5 * share_before
    return notebook_claim("origin.self_only_creates_sink", source=f"{ORIGIN}, Section 5",
                  statement=f"a token made to attend only to itself (position {position}) becomes a sink",
                  rule="sink heads for position k (mean alpha_k > 0.3): > 20% of heads, and > 5x as many as before",
                  published="becomes a sink", measured={"sink_heads_before": share_before,
                                                        "sink_heads_after": share_after}, holds=bool(holds),
                  quantities=SELF_ONLY_QUANTITIES)


AMPLIFICATION_QUANTITIES = {
    "lambdas": q.value("lambda"),  # the amplification factors swept (inputs)
    "centred": q.share(), "control": q.share(),  # mean attention of the later queries to token k, per lambda
    "rise": q.ratio(), "control_rise": q.ratio(),  # last over first point of each curve
    "@spread": q.ratio(),  # the centred curve's rise in each resample of the windows
}


def amplification(lambdas: Sequence[float], centred: Sequence[float], control: Sequence[float]) -> Claim:
    """Intervention (ii): amplifying token k's head-output variance raises its sink score monotonically; plain
    scaling does not. Rule: the centred curve never drops by more than 0.005, ends > 2x where it starts, and the
    control's rise is < half of it. The record notes whether the peak ever passes eps = 0.3."""
    monotone = all(b >= a - 0.005 for a, b in zip(centred, centred[1:]))
    rise, rise_ctl = centred[-1] / max(centred[0], 1e-9), control[-1] / max(control[0], 1e-9)
    peak = max(centred)
    return notebook_claim("origin.amplification_monotone", source=f"{ORIGIN}, Section 5",
                  statement="amplifying token k's variance raises its sink score monotonically; plain scaling does not",
                  rule="monotone (no drop > 0.005), > 2x rise, control's rise < half of it",
                  published="monotone rise", measured={"lambdas": list(lambdas), "centred": list(centred),
                                                       "control": list(control), "monotone": monotone, "rise": rise,
                                                       "control_rise": rise_ctl},
                  holds=bool(monotone and rise > 2 and rise_ctl < rise / 2),
                  note=f"peak {peak:.3f} is {'above' if peak > EPS else 'below'} eps {EPS}: "
                       f"{'a sink' if peak > EPS else 'more attention, not a sink'}",
                  quantities=AMPLIFICATION_QUANTITIES)
