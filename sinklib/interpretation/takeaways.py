"""The "What we saw" paragraphs of ``02_interpretation``, written from the run's own results and claims.

One function per section; each returns Markdown that starts with "**What we saw" (:func:`sinklib.core.takeaways.
paragraph`). Every number and every direction word comes from the arguments, so the sentence stays true on any
model, profile and seed. The notebook shows it with :func:`sinklib.core.takeaways.show`. Each heading names what
its numbers were measured on (``on``, built by :func:`windows` from the run's sizes), so that a perplexity on 16
windows of 256 tokens is never read beside one on 64-token windows as the same number.
"""

from __future__ import annotations

from collections.abc import Sequence

from sinklib.core.claims import Claim
from sinklib.core.takeaways import claim_line, compare, num, paragraph, pct, span, windows  # noqa: F401 (windows: re-exported)
from sinklib.interpretation.origin_claims import VARIANCE_RATIO
from sinklib.interpretation.sun_claims import ZERO_BREAKS

EPS = 0.3


def _title(title: str, on: str) -> str:
    """A takeaway heading with what it was measured on: "lock-in, on 16 Bible windows of 64 tokens"."""
    return f"{title}, on {on}" if on else title


def _pooled_ratio(claim: Claim) -> str:
    """" On all draws' sequences pooled it is 2.6x (95% interval 2.3-2.9x, above the 2x cut)." ("" when not
    pooled)."""
    bounds = ((claim.spread or {}).get("intervals") or {}).get("ratio") if isinstance(claim.spread, dict) else None
    if not bounds or bounds[0] != bounds[0]:
        return ""
    lo, hi = bounds
    where = "above" if lo > VARIANCE_RATIO else "below" if hi < VARIANCE_RATIO else "straddling"
    value = claim.measured["ratio_t0_to_second_half"][0]
    return (f" On all draws' sequences pooled it is {num(value)}x (95% interval {num(lo)}-{num(hi)}x, {where} the "
            f"{VARIANCE_RATIO:g}x cut).")


def variance(claim: Claim, layers: Sequence[int], ratios: Sequence[float], is_max: Sequence[bool], *,
             on: str = "") -> str:
    """Section 1: Var at t = 0 over the second half's mean, per early layer, and whether t = 0 is the largest; where
    the claim was judged on every draw's sequences pooled (:func:`sinklib.interpretation.chain.variance_judged`),
    the pooled ratio with its 95% interval against the cut."""
    per_layer = "; ".join(f"layer {li}: {num(r)}x, {'the largest position' if m else 'not the largest'}"
                          for li, r, m in zip(layers, ratios, is_max))
    spread = claim.spread or {}
    draws = (f" Over the random-token draws layer 0's ratio spans {span(spread['values'])}."
             if spread.get("values") and len(spread["values"]) > 1 else "") + _pooled_ratio(claim)
    kept = [li for li, m in zip(layers, is_max) if m]
    where = (f"The discrepancy is kept in layers {kept}" if kept else "No early layer keeps t = 0 the largest")
    return paragraph(_title("variance discrepancy", on),
                     f"The head outputs at t = 0 vary across random sequences, relative to the second half's mean: "
                     f"{per_layer}.{draws} {where}.",
                     f"{claim_line(claim)}.")


def super_neuron(claim: Claim, top, strongest, massive_dims: Sequence[int], paper_layer: int, *, on: str = "") -> str:
    """Section 2: the chain's neuron (the earliest writer of a massive dimension) and, if different, the strongest."""
    if top is None:
        return paragraph(_title("super neurons", on), "No neuron meets the super-neuron criterion on this model.",
                         f"{claim_line(claim)}.")
    writes_massive = bool(set(top.write_dims) & set(massive_dims))
    same = "the same layer as" if top.layer == paper_layer else "a different layer from"
    second = ""
    if strongest is not None and (strongest.layer, strongest.neuron) != (top.layer, top.neuron):
        order = "after" if strongest.layer > top.layer else "at or before"
        second = (f" The strongest writer, neuron {strongest.neuron} of layer {strongest.layer} "
                  f"({num(strongest.first_abs)} on the first token), comes {order} the chain's neuron.")
    return paragraph(_title("super neurons", on),
                     f"The chain's neuron is neuron {top.neuron} of layer {top.layer} -- {same} the paper's "
                     f"Llama-2-7B neuron (layer {paper_layer}). It reaches {num(top.first_abs)} on the first token, "
                     f"{num(top.selectivity)}x its 95th percentile elsewhere, and puts {pct(top.write_share)} of "
                     f"its W_down column's squared norm into dimensions {list(top.write_dims)}"
                     f"{', which include a massive one' if writes_massive else ', none of them massive'} "
                     f"(massive: {list(massive_dims)}).{second}",
                     f"{claim_line(claim)}.")


def disparity(claim: Claim, onset: Sequence[int], sink_onset: int | None, dom_after_super: float,
              paper_value: float, dom_peak: float, peak_layer: int, dom_rest_at_peak: float, *, on: str = "") -> str:
    """Section 3: where the massive value appears, where the sink switches on, and the DomRatio against the paper."""
    if onset and sink_onset is not None:
        reader = onset[0] + 1  # block l's attention reads h^(l-1): the first attention that can see the value
        lag = sink_onset - reader
        if lag > 0:
            order = (f"the sink switches on {lag} layer{'s' if lag != 1 else ''} after the first attention that "
                     f"reads it (layer {reader}), at layer {sink_onset}")
        elif lag == 0:
            order = f"the sink switches on in the first attention that reads it, layer {sink_onset}"
        else:
            order = (f"the sink is already on at layer {sink_onset}, before layer {reader}, the first attention that "
                     f"can read the value -- so it did not form from it")
        first = (f"The first token's value onset (a value above 100 on a massive dimension, doubling -- not Sun et "
                 f"al.'s 1000x criterion) is in the output of layer {onset[0]} (it appears or jumps at "
                 f"{list(onset)}); {order}.{_sun_onset(claim, sink_onset)}")
    else:
        first = (f"The massive value appears at {list(onset) or 'no layer'}; the sink onset is "
                 f"{'layer ' + str(sink_onset) if sink_onset is not None else 'never reached (alpha stays below eps)'}.")
    ratio = dom_after_super / paper_value if paper_value else float("nan")
    return paragraph(_title("dimension disparity", on), first,
                     f"The residual's DomRatio of the first token peaks at {num(dom_peak)} (layer {peak_layer}; the "
                     f"others: {num(dom_rest_at_peak)}). The first normalised input after the super neuron has "
                     f"DomRatio {num(dom_after_super)}, {compare(dom_after_super, paper_value)} the paper's "
                     f"{num(paper_value)} for Llama-2-7B ({num(ratio)}x)" + _width_free(claim, paper_value) + ".",
                     f"{claim_line(claim)}.")


def _sun_onset(claim: Claim, sink_onset: int) -> str:
    """Where Sun et al.'s criterion first holds against the sink onset, and which onset the sink follows."""
    m = claim.measured or {}
    if "sun_onset" not in m:
        return ""
    sun, follows = m["sun_onset"], m.get("sink_follows", "neither")
    if sun is None:
        where = " Sun et al.'s criterion is met in no layer."
    else:
        lag = sink_onset - (sun + 1)
        where = (f" Sun et al.'s criterion first holds in layer {sun}'s output: the sink switches on "
                 f"{abs(lag)} layer{'s' if abs(lag) != 1 else ''} {'after' if lag >= 0 else 'before'} the first "
                 f"attention that reads it.")
    return where + f" The sink follows {follows}" + (" of the two onsets." if follows == "neither" else ".")


def _width_free(claim: Claim, paper_value: float, paper_width: int = 4096) -> str:
    """DomRatio is at most d: the comparison that does not depend on the width (DomRatio / d), when measured."""
    share = (claim.measured or {}).get("dom_share_after_super_neuron")
    if share is None:
        return ""
    paper = paper_value / paper_width
    return (f"; but DomRatio is at most the width d, so the comparable number is DomRatio / d, the largest entry's "
            f"share of |h|'s sum: {num(share, 2)} here against {num(paper, 2)} ({num(share / paper, 2)}x)")


def lock_in(claim: Claim, n_sink_heads: int, n_heads: int, positive: tuple[float, float],
            cos: tuple[float, float], *, on: str = "") -> str:
    """Section 4: positive scores and query-key alignment, sink heads against the others."""
    if n_sink_heads == 0:
        return paragraph(_title("lock-in", on), f"No head has alpha of the first token above eps = {EPS} ({n_heads} heads): "
                                    f"there is no sink head to compare.", f"{claim_line(claim)}.")
    return paragraph(_title("lock-in", on),
                     f"In the {n_sink_heads} sink heads (of {n_heads}) {pct(positive[0], 4)} of the scores q_t . k_0 "
                     f"are positive, {compare(positive[0], positive[1], 'more than', 'fewer than', 'as many as')} "
                     f"in the other heads ({pct(positive[1], 3)}). The queries' top direction is "
                     f"{compare(cos[0], cos[1], 'closer to', 'farther from', 'as close to')} k_0 in sink heads "
                     f"(|cos| {num(cos[0], 2)} vs {num(cos[1], 2)})" + _lock_separation(claim) + ".",
                     f"{claim_line(claim)}.")


def _lock_separation(claim: Claim) -> str:
    m = claim.measured or {}
    if "cos_auc" not in m or m["cos_auc"] != m["cos_auc"]:  # not measured, or NaN
        return ""
    lo, hi = m["cos_auc_interval"]
    return (f"; a random sink head's |cos| is above a random other head's with probability {num(m['cos_auc'], 2)} "
            f"(95% bootstrap interval {num(lo, 2)}-{num(hi, 2)}; the rule asks >= 0.75 with the low end above 0.5)")


def self_only(claim: Claim, k: int, rate_before: float, rate_after: float, mean_before: float, mean_after: float,
              state_before: dict, state_after: dict, *, on: str = "") -> str:
    """Section 5: sink heads for position k before and after the self-only edit, and token k's state."""
    takes = "takes on" if state_after.get("holds") else "does not take on"
    return paragraph(_title(f"self-only edit, k = {k}", on),
                     f"Heads giving token {k} more than {EPS} of the later queries' attention: {pct(rate_before)} "
                     f"before the edit, {pct(rate_after)} after (mean alpha_{k} {num(mean_before)} -> "
                     f"{num(mean_after)}). In the sink layers token {k}'s DomRatio goes {num(state_before['dom_k'])} "
                     f"-> {num(state_after['dom_k'])} (the first token's: {num(state_after['dom_0'])}) and its key's "
                     f"cosine with the first token's {num(state_before['key_cos'], 2)} -> "
                     f"{num(state_after['key_cos'], 2)}: token {k} {takes} the first token's state.",
                     f"{claim_line(claim)}.")


def amplification(claim: Claim, lambdas: Sequence[float], centred: Sequence[float], control: Sequence[float],
                  k: int, state: dict | None = None, *, on: str = "") -> str:
    """Section 6: the centred sweep against plain scaling, its shape and whether the peak crosses eps."""
    peak_i = max(range(len(centred)), key=lambda i: centred[i])
    monotone = claim.measured.get("monotone")
    shape = ("rises monotonically" if monotone else
             f"peaks at lambda = {num(lambdas[peak_i])} and then drops (not monotone)")
    rise, rise_ctl = claim.measured["rise"], claim.measured["control_rise"]
    crosses = ("crosses eps = 0.3: token k becomes a sink" if centred[peak_i] > EPS
               else "stays below eps = 0.3: more attention, not a sink")
    mech = ""
    if state:
        mech = (f" At lambda = {num(lambdas[-1])} token {k} {'takes on' if state.get('holds') else 'does not take on'}"
                f" the first token's state (key cosine {num(state['key_cos'], 2)}).")
    resampled = (f" The verdict is judged over {claim.draws_of}: resamples of the same windows, not new windows, so "
                 f"they show how much the verdict rests on a few windows, not how it would fare on other text."
                 if "resample" in claim.draws_of else "")
    return paragraph(_title(f"variance amplification, k = {k}", on),
                     f"Amplifying token {k}'s variance around its own batch mean moves the later queries' attention to "
                     f"it from {num(centred[0])} to {num(centred[-1])} ({num(rise)}x) as lambda goes "
                     f"{num(lambdas[0])} -> {num(lambdas[-1])}; the curve {shape}. Plain scaling goes "
                     f"{num(control[0])} -> {num(control[-1])} ({num(rise_ctl)}x), "
                     f"{compare(rise_ctl, rise, 'more than', 'less than', 'as much as')} the centred edit. The peak, "
                     f"{num(centred[peak_i])}, {crosses}.{mech}{resampled}",
                     f"{claim_line(claim)}.")


def massive_bias(claim: Claim, ppl: dict[str, float], first_fixed: bool, strict: bool, min_ratio: float, *,
                 on: str = "") -> str:
    """Section 7: perplexities with the massive activations set to their mean / to zero."""
    orig, mean, zero = ppl["original"], ppl["set to mean"], ppl["set to zero"]
    first_only = ppl.get("set to mean, position 0 only", float("nan"))
    criterion = ("Sun et al.'s 1000x rule is met" if strict else
                 f"Sun et al.'s 1000x rule is not met, so the sites are those over 100 and {num(min_ratio)}x the "
                 f"layer's median |h|")
    mean_word = compare(mean, orig, "raises", "lowers", "leaves", rel_tol=0.05)
    later = (claim.measured or {}).get("later_sites")
    fixed = (" Position 0 holds the same token in every sequence here, so setting it to its mean changes nothing "
             "by construction: the mean edit is judged on the "
             + (f"{num(later)} later sites" if later is not None else "later sites") + " only." if first_fixed else "")
    spread = claim.spread or {}
    draws = (f" Over {claim.draws_of}, ppl(mean) / ppl(original) spans {span(spread['values'], 3)}"
             + (f" and ppl(zero) / ppl(original) {span(spread['zero_ratio'])}x" if spread.get("zero_ratio") else "")
             + "." if spread.get("values") and len(spread["values"]) > 1 else "")
    cut = (f" 'Breaks' means more than {num(ZERO_BREAKS)}x: Sun et al.'s Table 3 has 5.47 -> inf (LLaMA2-7B) and "
           f"4.88 -> 5,729 (13B).")
    return paragraph("massive activations as a bias" + (f", perplexity on {on}" if on else ""),
                     f"{criterion}. Every massive site set to its mean {mean_word} the perplexity "
                     f"({num(orig, 4)} -> {num(mean, 4)}; position 0 only: {num(first_only, 4)}); set to zero it "
                     f"becomes {num(zero, 4)} ({num(zero / orig)}x).{cut}{fixed}{draws}",
                     f"{claim_line(claim)}.")


def sun_criterion(claim: Claim, sites, *, on: str = "") -> str:
    """Sun et al.'s criterion and "a few": where it holds, layer by layer (``sites``: a
    :class:`~sinklib.interpretation.sun_sites.SunSites`), and the share of the tokens after position 0 meeting it.
    ``on`` defaults to the sites' own windows ("32 Bible windows of 64 tokens")."""
    if not on and sites is not None:
        on = windows(sites.n_seqs, "Bible windows", sites.seq_len)
    met = sites.met_layers if sites is not None else []
    if not met:
        return paragraph(_title("Sun et al.'s criterion", on), "No layer's output meets the criterion (|h| > 100 and > 1000x the "
                                                   "layer's median |h|).", f"{claim_line(claim)}.")
    worst, per_seq, share = sites.most_sites()
    first = sites.first_token_onset
    return paragraph(_title("Sun et al.'s criterion", on),
                     f"The criterion first holds in layer {met[0]}'s output"
                     + (f", at position 0 from layer {first}" if first is not None else ", never at position 0")
                     + f"; it holds in {num(len(met))} layers. Of the tokens after position 0, at most "
                     f"{pct(share, 2)} meet it in one layer (layer {worst}: {num(per_seq, 2)} of "
                     f"{num(sites.seq_len - 1)} per window); 'a few' allows 2 per window.",
                     f"{claim_line(claim)}.")


def implicit_bias(claim: Claim, n_sink_heads: int, medians: dict[str, tuple[float, float]],
                  auc: dict[str, float], *, on: str = "") -> str:
    """Section 7b: the first token's value and term in sink heads against the other heads."""
    if n_sink_heads == 0:
        return paragraph(_title("the sink as an implicit bias", on), "No sink head to compare.", f"{claim_line(claim)}.")
    v, s = medians["value_norm_ratio"], medians["sink_term_spread"]
    return paragraph(_title("the sink as an implicit bias", on),
                     f"In the {n_sink_heads} sink heads the first token's value is {num(v[0], 2)}x the other tokens' "
                     f"(median; other heads {num(v[1], 2)}x), {compare(v[0], v[1], 'larger', 'smaller', 'no smaller')}"
                     f" than in the other heads; its term's relative spread is {num(s[0], 2)} against {num(s[1], 2)}. "
                     f"A random sink head lies below a random other head with probability "
                     f"{num(auc['value_norm_ratio'], 2)} and {num(auc['sink_term_spread'], 2)} (Mann-Whitney AUCs, "
                     f"not ratios). In sink heads the term supplies {pct(medians['sink_share'][0], 2)} of the output "
                     f"norm. The spread falls with alpha partly by construction: a head that gives the first token "
                     f"most of every row leaves A_t0 little room to vary, so the second separation is not independent "
                     f"of the sink itself.",
                     f"{claim_line(claim)}.")


def controls(claims: dict[str, Claim], label: str, *, on: str = "") -> str:
    """The random-weight controls: which rules hold on noise, against what the paper predicts at initialisation."""
    held = [cid for cid, c in claims.items() if c.holds is True]
    failed = [cid for cid, c in claims.items() if c.holds is False]
    contradict = [cid for cid, c in claims.items() if c.holds is True and c.at_init is False]
    verdict = (f"Contradicting the paper's prediction: {', '.join(f'`{c}`' for c in contradict)} "
               f"hold{'s' if len(contradict) == 1 else ''} on noise." if contradict else
               "No rule for an effect that training makes holds on these weights.")
    return paragraph(_title("random-weight controls", on),
                     f"On {label}, {len(held)} of {len(claims)} rules hold"
                     f"{' (' + ', '.join(f'`{c}`' for c in held) + ')' if held else ''} and {len(failed)} fail.",
                     verdict)


def scorecard(claims: Sequence[Claim]) -> str:
    """The scorecard: which structures hold, which do not, and how the controls came out (its size: the number of
    claims)."""
    held = [c.id for c in claims if c.holds is True]
    failed = [c.id for c in claims if c.holds is False]
    unsettled = [c.id for c in claims if c.holds is None]
    noise = [c.id for c in claims if c.control_contradicts]
    parts = [f"The structure holds for {len(held)} of {len(claims)} claims"
             + (f" ({', '.join(f'`{c}`' for c in held)})" if held else "") + "."]
    if failed:
        parts.append(f"It does not hold for {', '.join(f'`{c}`' for c in failed)}.")
    if unsettled:
        parts.append(f"Cannot be judged or unsettled: {', '.join(f'`{c}`' for c in unsettled)}.")
    parts.append("Every learned effect fails on random weights." if not noise else
                 f"On random weights {', '.join(f'`{c}`' for c in noise)} still hold: read those with care.")
    return paragraph(f"scorecard, {windows(len(claims), 'claims')}", *parts)
