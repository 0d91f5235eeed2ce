"""``10_llm``'s "What we saw" paragraphs, written from the run's reports and claims (one function per section).

Each function takes the notebook's :class:`~sinklib.architectures.llm.llm_survey.LlmReport` list and the recorded
claims (ids end in the model name) and returns Markdown built with :func:`sinklib.core.takeaways.paragraph`: every
number and every direction word ("holds", "falls", "above") is computed here, so the sentence stays true for any model
list, profile or seed. Each heading names what its numbers were measured on (``on``: the run's windows and tokens,
:func:`sinklib.interpretation.takeaways.windows`), and the chain's perplexities say their held-out windows in the
sentence.
"""

from __future__ import annotations

from collections.abc import Sequence

from sinklib.architectures.llm.placement import DELIMITER_CUT, POSITION_KEEP
from sinklib.core.analysis import SHAPE_CUTS
from sinklib.core.claims import Claim
from sinklib.core.metrics import GU_EPS
from sinklib.core.takeaways import claim_line, compare, find, num, paragraph, pct, span, windows
from sinklib.interpretation.origin_claims import DISPARITY_AT_SINK, VARIANCE_RATIO
from sinklib.interpretation.sun_claims import RARE_SITES

SUN_RATIO = 1000  # Sun et al.'s criterion: > 1000x the layer's median |h|
DELIMITER_RATIO = DELIMITER_CUT  # the first-delimiter rule's cut (placement.delimiter_claim)
LINKS = ("origin.variance_discrepancy", "origin.super_neuron", "origin.dimension_disparity", "origin.lock_in",
         "sun2024.massive_activations_are_bias")


def _title(title: str, on: str) -> str:
    """A heading with what it was measured on: "mass by token kind, on 16 Bible windows of 64 tokens"."""
    return f"{title}, on {on}" if on else title


def _claim(claims: Sequence[Claim], claim_id: str, report) -> Claim | None:
    return find(claims, f"{claim_id}.{report.name}")


def _who(names: Sequence[str], total: int) -> str:
    """"all three models" / "SmolLM2 and Qwen" / "none of the models"."""
    if not names:
        return "none of the models"
    if len(names) == total and total > 1:
        return f"all {num(total)} models" if total > 3 else f"all {('two', 'three')[total - 2]} models"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _holders(reports, claims: Sequence[Claim], claim_id: str) -> list[str]:
    return [r.label for r in reports if (c := _claim(claims, claim_id, r)) is not None and c.holds is True]


def _bounds(claim: Claim | None, name: str) -> tuple[float, float] | None:
    """The 95 % bootstrap interval of condition ``name`` of a claim judged on pooled windows
    (:func:`~sinklib.core.pooled.pooled_claim`), or None (not pooled, or no finite interval)."""
    spread = claim.spread if claim is not None and isinstance(claim.spread, dict) else {}
    b = (spread.get("intervals") or {}).get(name)
    return (float(b[0]), float(b[1])) if b and len(b) == 2 and b[0] is not None and b[0] == b[0] else None


def _against(value: float, bounds: tuple[float, float], cut: float, fmt=num, unit: str = "") -> str:
    """"0.79 (95% interval 0.75-0.82, above the 0.3 cut)": where the pooled interval lies against the cut."""
    lo, hi = bounds
    where = "above" if lo > cut else "below" if hi < cut else "across"
    return f"{fmt(value)}{unit} (95% interval {fmt(lo)}-{fmt(hi)}{unit}, {where} the {fmt(cut)}{unit} cut)"


def _verdicts(reports, claims: Sequence[Claim], claim_id: str) -> str:
    """One verdict per model: "SmolLM2: `id` holds (...); Gemma-3: ..."."""
    return "; ".join(f"{r.label}: {claim_line(_claim(claims, claim_id, r), claim_id)}" for r in reports)


def sink_by_depth(reports, claims: Sequence[Claim], *, on: str = "") -> str:
    """Section 1: Gu et al.'s sink rate on natural / random / repeated input per model against Table 1's
    Llama family, the shape's verdict, and where the sink layers (mean alpha_0 > eps) start."""
    rates = "; ".join(f"{r.label} {pct(r.sink_rate['natural'], 2)} / {pct(r.sink_rate['random'], 2)} / "
                      f"{pct(r.sink_rate['repeated'], 2)}" for r in reports)
    shape = next((c for r in reports if (c := _claim(claims, "gu2024.llama_family_input_shape", r))), None)
    published = ""
    if shape is not None and isinstance(shape.published, dict) and shape.published:
        pub = list(shape.published.values())
        published = (f" Gu et al.'s Table 1 gives {span([p['natural'] for p in pub], 2)} / "
                     f"{span([p['random'] for p in pub], 2)} / {span([p['repeated'] for p in pub], 2)} for "
                     f"{', '.join(shape.published)} (as fractions).")
    holders = _holders(reports, claims, "gu2024.llama_family_input_shape")
    layers = []
    for r in reports:
        sinking = [i for i, a in enumerate(r.alpha_by_layer) if a > GU_EPS]
        layers.append(f"{r.label} from layer {sinking[0]} ({num(len(sinking))} of {num(r.n_layers)} layers)"
                      if sinking else f"{r.label} in no layer")
    pooled = []
    for r in reports:
        claim = _claim(claims, "gu2024.llama_family_input_shape", r)
        if (b := _bounds(claim, "random")) is not None:
            pooled.append(f"{r.label} {_against(claim.measured['random'], b, SHAPE_CUTS['random'], lambda x: pct(x, 2))}")
    return paragraph(
        _title("sink rate by input", on),
        f"Sink rate on natural text / random tokens / one repeated token: {rates}.{published}",
        f"On every seed's random-token sequences pooled, the random-token rate is {'; '.join(pooled)}: the shape's "
        f"random condition is judged on it." if pooled else "",
        f"Gu et al.'s Llama-family shape holds on {_who(holders, len(reports))} "
        f"({_verdicts(reports, claims, 'gu2024.llama_family_input_shape')}).",
        f"Mean alpha_0 passes eps {num(GU_EPS, 1)}: {'; '.join(layers)}.")


def massive(reports, claims: Sequence[Claim], *, on: str = "") -> str:
    """Section 2: which models meet Sun et al.'s criterion, how far the others' peak falls from 1000x, and whether it
    is "a few": the share of the tokens after position 0 that meet it, layer by layer where it is met."""
    met = [f"{r.label} (dimensions {', '.join(map(str, r.massive.dims))})" for r in reports if r.massive.strict]
    short = [f"{r.label} peaks at {num(r.massive.peak_ratio)}x its layer's median |h|, "
             f"{compare(r.massive.peak_ratio, SUN_RATIO, 'above', 'short of', 'at')} {num(SUN_RATIO)}x"
             for r in reports if not r.massive.strict]
    shares = [_share(r) for r in reports if r.massive.strict and getattr(r, "sun_sites", None) is not None]
    return paragraph(
        _title("Sun et al.'s criterion", on),
        f"The criterion is met on {_who(met, len(reports))}." if met else "No model meets the criterion.",
        f"{'; '.join(short)}." if short else "",
        f"Where it is met, the share of the tokens after position 0 that meet it, from its first layer on: "
        f"{'; '.join(shares)}. The rule asks for 'a few' (Sun et al.: the starting token and the first delimiter): "
        f"at most {num(RARE_SITES)} later positions per window, judged layer by layer (it holds where some layer "
        f"shows it)." if shares else "",
        f"The claim holds on {num(len(_holders(reports, claims, 'sun2024.massive_activations')))} of "
        f"{num(len(reports))} models ({_verdicts(reports, claims, 'sun2024.massive_activations')}).")


def _share(report) -> str:
    """"GEMMA-3: 83% / 54% / 27% in layers 1 / 2 / 3 (at most 52.3 of 63 later positions per window); position 0
    from layer 4"."""
    sites = report.sun_sites
    met = sites.met_layers
    shown = met[:3]
    worst, per_seq, _ = sites.most_sites()
    first = sites.first_token_onset
    return (f"{report.label}: {' / '.join(pct(sites.later_share[i]) for i in shown)} in layer"
            f"{'s' if len(shown) > 1 else ''} {' / '.join(map(str, shown))}{' ...' if len(met) > 3 else ''} (at "
            f"most {num(per_seq, 2)} of {num(sites.seq_len - 1)} later positions per window, layer {worst}); "
            + (f"position 0 from layer {first}" if first is not None else "never at position 0"))


def _delimiter(report, claims: Sequence[Claim]) -> str:
    """One model's first-delimiter ratio: on every draw's windows pooled, with its bootstrap interval, where the
    claim was judged so (:func:`~sinklib.architectures.llm.placement.delimiter_pooled`); else the run's own draw."""
    claim = next((c for c in claims if c.id == f"sun2024.first_delimiter_draws_attention.{report.name}"), None)
    interval = ((claim.spread or {}).get("interval") if claim is not None else None) or []
    if len(interval) == 2 and interval[0] == interval[0]:
        ratio, (lo, hi) = claim.measured["first_delimiter_over_content"], interval
        where = ("above" if lo > DELIMITER_RATIO else "below" if hi < DELIMITER_RATIO else "across")
        return (f"{report.label} {num(ratio, 2)}x on all windows pooled (95% interval {num(lo, 2)}-{num(hi, 2)}x, "
                f"{where} the {num(DELIMITER_RATIO)}x cut)")
    ratio = report.by_kind["first delimiter"] / report.by_kind["content"]
    return (f"{report.label} {num(ratio, 2)}x ({compare(ratio, DELIMITER_RATIO, 'above', 'below', 'at')} the "
            f"{num(DELIMITER_RATIO)}x cut)")


def mass_by_kind(reports, claims: Sequence[Claim], *, on: str = "") -> str:
    """Section 3: the first position's mass against content words, the first delimiter's ratio to content words
    against the 2x cut (over the window draws), and the most attended later token per model."""
    first = [r.by_kind["first"] for r in reports]
    over = [r.by_kind["first"] / r.by_kind["content"] for r in reports]
    delim = "; ".join(_delimiter(r, claims) for r in reports)
    top = "; ".join(f"{r.label}: {r.secondary[0][0]!r} ({num(r.secondary[0][2])} over {num(r.secondary[0][1])} "
                    f"occurrences, {num(r.secondary[0][2] / r.by_kind['content'], 2)}x a content word)"
                    for r in reports if r.secondary)
    return paragraph(
        _title("mass by token kind", on),
        f"The first position receives {span(first)} per query in the sink layers, {span(over, 2)}x a content word "
        f"({span([r.by_kind['content'] for r in reports], 2)}).",
        f"The first delimiter against a content word: {delim}. Sun et al.'s second sink: "
        f"{_verdicts(reports, claims, 'sun2024.first_delimiter_draws_attention')}.",
        f"The most attended token after position 0: {top}." if top else "")


def position_or_token(reports, claims: Sequence[Claim], *, on: str = "") -> str:
    """Section 4: per model the answer (position / token / neither / no sink) with the four alphas, the BOS-stripped
    run where there is a BOS, and Xiao et al.'s verdict."""
    rows = []
    for r in reports:
        p = r.position
        rows.append(f"{r.label} -- the {p.answer}: alpha at position 0 {num(p.own)} as given, {num(p.replaced)} with "
                    f"{p.other_token} there, {num(p.moved_first)} with another text in front; the original first token "
                    f"moved to position {num(p.shift)} gets {num(p.moved_original)}")
    stripped = [f"{r.label} without its BOS: alpha_0 "
                f"{compare(r.bos_stripped['alpha_without_bos'], r.bos_stripped['alpha_with_bos'], 'rises', 'falls', 'stays')}"
                f" from {num(r.bos_stripped['alpha_with_bos'])} to {num(r.bos_stripped['alpha_without_bos'])}"
                for r in reports if r.bos_stripped]
    position = _holders(reports, claims, "xiao2023.sink_is_the_position")
    pooled = [p for r in reports if (p := _position_pooled(r, claims))]
    return paragraph(
        _title("position or token", on),
        f"{'; '.join(rows)}.",
        f"On every draw's windows pooled: {'; '.join(pooled)}." if pooled else "",
        f"{'; '.join(stripped)}." if stripped else "",
        f"Xiao et al.'s initial position holds on {_who(position, len(reports))} "
        f"({_verdicts(reports, claims, 'xiao2023.sink_is_the_position')}).")


def _position_pooled(report, claims: Sequence[Claim]) -> str:
    """One model's pooled position-or-token numbers with their intervals: "A -- the position: alpha_0 0.54 (95%
    interval ...), the moved first token keeps 0.02x of it (...), another first token 0.98x (...)"; empty when the
    claim was not judged on pooled windows (:func:`~sinklib.architectures.llm.placement.position_pooled`)."""
    claim = _claim(claims, "xiao2023.sink_is_the_position", report)
    bounds = {name: _bounds(claim, name) for name in ("sink", "replaced", "moved_original")}
    if any(b is None for b in bounds.values()):
        return ""
    m = claim.measured
    own = m["own"]
    keep = POSITION_KEEP
    return (f"{report.label} -- the {m['answer']}: alpha_0 {_against(own, bounds['sink'], GU_EPS)}, the moved first "
            f"token keeps {_against(m['moved_original'] / own, bounds['moved_original'], keep, unit='x')} of it, "
            f"another first token {_against(m['replaced'] / own, bounds['replaced'], keep, unit='x')}")


def uniform_share(n: int) -> float:
    """alpha_0 if every query t spread its attention evenly over its t + 1 keys: (1/N) sum_t 1/(t+1) = H_N / N."""
    return sum(1 / k for k in range(1, n + 1)) / n


def context_and_chat(reports, *, on: str = "") -> str:
    """Section 5: alpha_0 in the sink layers from the shortest to the longest context (direction and the ratio to
    an even spread), and the sink rate raw vs in the chat template with its most attended token."""
    ctx = []
    for r in reports:
        lengths, alpha = r.context["lengths"], r.context["alpha_first"]
        if not lengths:
            continue
        a0, a1, n0, n1 = alpha[0], alpha[-1], lengths[0], lengths[-1]
        even = r.context.get("uniform") or [uniform_share(n) for n in lengths]
        sliding = r.context.get("sliding_layers") or []
        window = (f"; its {len(sliding)} sliding-window layers (W = {num(r.context['window'])}) count only the "
                  f"queries that see the first token" if sliding else "")
        ctx.append(f"{r.label} {compare(a1, a0, 'rises', 'falls', 'stays')} from {num(a0)} at {num(n0)} tokens to "
                   f"{num(a1)} at {num(n1)} ({num(a0 / even[0], 2)}x -> {num(a1 / even[-1], 2)}x "
                   f"an even spread{window})")
    chat = []
    for r in reports:
        if not r.raw_vs_chat:
            chat.append(f"{r.label} has no chat template")
            continue
        raw, templ = r.raw_vs_chat["raw"], r.raw_vs_chat["chat template"]
        top = f"; there the most attended token is {r.chat_top[0][0]!r} ({num(r.chat_top[0][2])})" if r.chat_top else ""
        chat.append(f"{r.label}'s sink rate {compare(templ, raw, 'rises', 'falls', 'stays')} from {pct(raw, 2)} raw "
                    f"to {pct(templ, 2)} in its template{top}")
    return paragraph(_title("context length and chat template", on),
                     f"(a) alpha_0 in the sink layers: {'; '.join(ctx)}." if ctx else "",
                     f"(b) {'; '.join(chat)}.")


def chain(reports, claims: Sequence[Claim], *, on: str = "", heldout: str = "") -> str:
    """Section 6: which links hold where, and the numbers behind them per model; ``heldout`` names the held-out
    windows the perplexities were measured on ("16 held-out windows of 64 tokens"), in their sentence."""
    gated = [r for r in reports if r.chain_numbers]
    holds = [f"{link.split('.')[1].replace('_', ' ')} on {_who(_holders(gated, claims, link), len(gated))}"
             for link in LINKS]
    rows = []
    for r in gated:
        n = r.chain_numbers
        sn = n["super_neuron"]
        neuron = f"super neuron {sn['neuron']} of layer {sn['layer']}" if sn else "no super neuron"
        order = _onsets(r, n)
        pos = n["positive_sink_vs_other"]
        bias = n.get("massive_bias")
        sun = ""
        if bias:
            p = bias["ppl"]
            sun = (f"; perplexity{' on ' + heldout + ':' if heldout else ''} {num(p['original'], 3)} as is, {num(p['set to mean'], 3)} with the massive sites set "
                   f"to their mean, {num(p['set to zero'], 3)} set to zero")
            if bias.get("first_token_relative_sd") is not None:
                sun += (f" (the first token's massive values vary by at most {pct(bias['first_token_relative_sd'], 2)}"
                        f" of their mean across windows; {num(bias['later_sites'])} later sites"
                        + (f", mostly {', '.join(map(repr, list(bias['later_tokens'])[:3]))}"
                           if bias["later_tokens"] else "") + ")")
                if bias["first_token_relative_sd"] < 1e-3:
                    sun += (": position 0 is the same BOS state in every window, so setting it to its mean rewrites "
                            "it with itself and only the later sites can fail the mean edit")
        rows.append(f"{r.label}: layer-0 variance ratio {num(n['variance_ratio_t0'], 2)}x; {neuron}; {order}; "
                    f"DomRatio after the super neuron {num(n['dom_after_super'])} (of at most d = "
                    f"{num(n.get('width', float('nan')))}); positive first-key scores "
                    f"{pct(pos[0], 2)} in sink heads vs {pct(pos[1], 2)} in the others{sun}{_chain_pooled(r, claims)}")
    skipped = [r.label for r in reports if not r.chain_numbers]
    drawn = next((c.draws_of for r in gated for link in LINKS if (c := _claim(claims, link, r)) and c.draws_of), "")
    pooled = [link for link in LINKS if any(_bounds(_claim(claims, link, r), POOLED_LINKS.get(link, "")) is not None
                                           for r in gated)]
    over = [link.split(".")[1].replace("_", " ") for link in LINKS if link not in pooled]
    how = (f" (measured on {drawn}; "
           + (f"{' and '.join(link.split('.')[1].replace('_', ' ') for link in pooled)} judged on every draw's "
              f"windows pooled, with 95% bootstrap intervals; " if pooled else "")
           + f"{', '.join(over)} hold or fail only where every draw agrees)") if drawn else ""
    return paragraph(_title("the structural-origin chain", on),
                     f"By its rule each link holds: {'; '.join(holds)}{how}." if gated else "",
                     f"{'. '.join(rows)}." if rows else "",
                     f"No gated MLP, chain not run: {', '.join(skipped)}." if skipped else "")


POOLED_LINKS = {"origin.variance_discrepancy": "ratio", "origin.dimension_disparity": "disparity"}  # the number cut


def _chain_pooled(report, claims: Sequence[Claim]) -> str:
    """"; on all draws' windows pooled: layer-0 variance ratio 18.3x (95% interval ...), DomRatio where the sink
    layer reads 3.12x (...)" -- the pooled links' numbers against their cuts; empty where none was pooled."""
    parts = []
    for link, name, words, cut in (("origin.variance_discrepancy", "ratio", "layer-0 variance ratio", VARIANCE_RATIO),
                                   ("origin.dimension_disparity", "disparity", "DomRatio where the sink layer reads",
                                    DISPARITY_AT_SINK)):
        claim = _claim(claims, link, report)
        if (b := _bounds(claim, name)) is not None:
            value = (claim.measured["ratio_t0_to_second_half"][0] if name == "ratio"
                     else claim.measured["dom_first_over_rest_at_sink"])
            parts.append(f"{words} {_against(value, b, cut, unit='x')}")
    return f"; on all draws' windows pooled: {', '.join(parts)}" if parts else ""


def _onsets(report, numbers: dict) -> str:
    """The chain's two onsets and which one the sink follows: "the first token's value onset in layer 1's output
    (169, 210x its layer median: under Sun et al.'s 1000x), Sun et al.'s criterion from layer 11; sink at layer 3:
    2 layers after the first attention that reads the value onset, 8 layers before the first that reads Sun's -- it
    follows the value onset"."""
    value = numbers.get("first_token_value_onset", numbers.get("massive_onset")) or []
    onset, sun, sink = (value[0] if value else None), numbers.get("sun_onset"), numbers["sink_onset"]
    sites = getattr(report, "sun_sites", None)
    if onset is None:
        first = "no first-token value onset (no value above 100 on a massive dimension)"
    else:
        ratio = (f" ({num(sites.first_ratio[onset])}x its layer median at position 0, "
                 f"{compare(sites.first_ratio[onset], SUN_RATIO, 'above', 'under', 'at')} Sun et al.'s "
                 f"{num(SUN_RATIO)}x)" if sites is not None else "")
        first = f"the first token's value onset (|v| > 100 on a massive dimension) in layer {onset}'s output{ratio}"
    sun_text = (f"Sun et al.'s criterion first met in layer {sun}'s output" if sun is not None else
                "Sun et al.'s criterion met in no layer")
    if sink is None:
        return f"{first}; {sun_text}; no sink layer"
    gaps = []
    for name, layer in (("the value onset", onset), ("Sun's onset", sun)):
        if layer is not None:
            lag = sink - (layer + 1)  # block l's attention reads h^(l-1)
            gaps.append(f"{num(abs(lag))} layer{'s' if abs(lag) != 1 else ''} "
                        f"{'after' if lag >= 0 else 'before'} the first attention that reads {name}")
    follows = numbers.get("sink_follows")
    return (f"{first}; {sun_text}; sink at layer {sink}" + (f": {', '.join(gaps)}" if gaps else "")
            + (f" -- it follows {follows}" if follows and follows != "neither" else
               " -- it follows neither" if follows else ""))


def controls(claims: Sequence[Claim]) -> str:
    """Scorecard: how many verdicts were judged over draws and settled, and the random-weight controls -- which
    rules hold on noise, and whether the paper predicts that (``at_init``)."""
    drawn = [c for c in claims if len(c.draws) > 1]
    unsettled = [c.id for c in drawn if c.holds is None]
    run = [c for c in claims if c.control is not None]
    on_noise = [c for c in run if c.control]
    contradict = [c.id for c in on_noise if c.at_init is False]
    expected = [c.id for c in on_noise if c.at_init is True]
    return paragraph(
        f"draws and controls, {windows(len(claims), 'verdicts')}",
        f"{num(len(drawn))} of {num(len(claims))} verdicts were judged over several draws; unsettled among them: "
        + (f"{num(len(unsettled))} ({', '.join(unsettled)})." if unsettled else "none."),
        f"On random weights {num(len(on_noise))} of {num(len(run))} controlled rules hold"
        + (f"; where the paper predicts it (an architectural effect): {', '.join(expected)}" if expected else "")
        + (f"; where the paper says training makes the effect: {', '.join(contradict)}" if contradict else "")
        + ".")
