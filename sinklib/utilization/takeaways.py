"""The "What we saw" paragraphs of ``00_tour`` and ``01_utilization``, rendered from the run.

One function per notebook section: it takes the section's results (plain numbers and dicts) and its recorded claims,
and returns Markdown that begins "**What we saw" (:func:`sinklib.core.takeaways.paragraph`). Every number and every
direction word is computed from the inputs, so the sentence stays true on another model, profile or seed. The
interpretation that carries no measured number stays in the notebooks' markdown.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sinklib.core.claims import Claim
from sinklib.core.takeaways import claim_line, compare, layer_ranges, num, paragraph, pct, span
from sinklib.utilization import kvquant
from sinklib.utilization.streaming import MIN_RESOLUTION, PAIRED, timing_verdict


# ------------------------------------------------------------------------------------------------------ 00_tour
def tour_maps(first_token: Mapping[int, float], n_tokens: int, model: str) -> str:
    """Section 1: mean attention of queries t >= 1 to the first token, per layer shown ({layer: share})."""
    layers = sorted(first_token)
    top = max(layers, key=lambda layer: first_token[layer])
    low = min(layers, key=lambda layer: first_token[layer])
    first, last = layers[0], layers[-1]
    return paragraph(
        f"{model}, one {num(n_tokens)}-token window",
        f"In the layers shown the later queries give the first token {span(list(first_token.values()), 2)} of "
        f"their attention: most in layer {top} ({num(first_token[top], 2)}), least in layer {low} "
        f"({num(first_token[low], 2)}).",
        f"The first layer shown, {first}, gives it {compare(first_token[first], first_token[last], 'more', 'less', 'as much')}"
        f" than the last, {last} ({num(first_token[first], 2)} against {num(first_token[last], 2)}).",
        "One window, so read the pattern, not the exact values; section 2 averages many.")


def tour_sink_rate(sink_rate: float, alpha_by_layer: Sequence[float], eps: float, uniform: float, onset: int | None,
                   n_seqs: int, seq_len: int, model: str, published: Mapping[str, float]) -> str:
    """Section 2: the natural-text sink rate, the layers whose mean alpha_0 stays at or below eps, and Gu et al.'s
    Llama-family rates (``published``: {model: natural-text rate})."""
    quiet = [i for i, a in enumerate(alpha_by_layer) if a <= eps]
    where = (f"The layer means first exceed {eps:g} at layer {onset}; " if onset is not None
             else f"No layer's mean alpha_0 exceeds {eps:g}; ")
    where += (f"{len(quiet)} of {len(alpha_by_layer)} layers stay at or below it (layers {quiet})." if quiet
              else "from there on every layer stays above it.")
    rates = list(published.values())
    return paragraph(
        f"{model}, {num(n_seqs)} natural windows of {num(seq_len)} tokens",
        f"The sink rate is {pct(sink_rate, 3)}: that share of (sequence, layer, head) triples gives the first token more "
        f"than {eps:g} of its attention, where uniform attention would give it {num(uniform, 2)} -- "
        f"{compare(uniform, eps, 'above', 'below', 'at')} the threshold.",
        where,
        f"Gu et al. report {pct(min(rates), 3)}-{pct(max(rates), 3)} for 7-8B Llama-family models; this rate is "
        f"{compare(sink_rate, min(rates), 'higher than', 'lower than', 'equal to')} the lowest of them.")


def _batch(model: str, n_seqs: int | None, seq_len: int | None, what: str = "natural windows", per: str = "") -> str:
    """A heading's measurement size: "M, 100 natural windows of 64 tokens" (+ ``per``, e.g. " per input type");
    just the model without sizes."""
    return f"{model}, {num(n_seqs)} {what} of {num(seq_len)} tokens{per}" if n_seqs and seq_len else model


def tour_input_shape(measured: Mapping[str, float], claim: Claim | None, model: str, gpt2_repeated: float,
                     random_draws: Sequence[float] = (), n_seqs: int | None = None, seq_len: int | None = None) -> str:
    """Section 3: the sink rate per input type (each on ``n_seqs`` windows of ``seq_len`` tokens), the Llama-family
    claim's verdict (with its draws and control), and GPT2-XL's repeated-token rate from Gu et al.'s table. Where the
    claim was judged on every draw's sequences pooled (:func:`sinklib.core.analysis.llama_family_shape_pooled`), the
    pooled rate and its 95% interval, which decide the verdict."""
    rnd = f"random tokens {pct(measured['random'], 3)}"
    spread = claim.spread if claim is not None and isinstance(claim.spread, dict) else {}
    bounds = (spread.get("intervals") or {}).get("random")
    if len(random_draws) > 1:
        pooled = (f"; {pct((claim.measured or {}).get('random', measured['random']), 3)} on all draws' sequences "
                  f"pooled, 95% interval "
                  f"{pct(bounds[0], 3)}-{pct(bounds[1], 3)}" if bounds and bounds[0] == bounds[0] else "")
        rnd += f" ({span([100 * d for d in random_draws], 3)}% over {len(random_draws)} draws{pooled})"
    shape = "not the Llama-family shape of Gu et al.'s Table 1"
    if claim is not None and claim.unsettled:
        shape = "whether this is the Llama-family shape of Gu et al.'s Table 1 is unsettled"
    elif claim is not None and claim.holds:
        shape = "the Llama-family shape of Gu et al.'s Table 1"
    return paragraph(
        _batch(model, n_seqs, seq_len, "windows", " per input type"),
        f"Natural text {pct(measured['natural'], 3)}, {rnd}, one token repeated {pct(measured['repeated'], 3)}: {shape}.",
        f"{claim_line(claim)}.",
        f"GPT2-XL keeps {pct(gpt2_repeated)} even on repeated tokens in that table; this model keeps "
        f"{compare(measured['repeated'], gpt2_repeated, 'more', 'less', 'as much')} there.")


def _dims_by_layer(dims: Sequence[int]) -> list[tuple[int, list[int]]]:
    """[(dimension, the layers whose largest entry it holds)], the dimension holding most layers first."""
    groups: dict[int, list[int]] = {}
    for layer, d in enumerate(dims):
        groups.setdefault(int(d), []).append(layer)
    return sorted(groups.items(), key=lambda g: (-len(g[1]), g[1][0]))


def massive_dims_caption(dims: Sequence[int]) -> str:
    """The part of the massive-activation figure's caption that says which dimension holds each layer's largest
    entry (``dims``: per layer), as the labels of :func:`sinklib.core.plotting.massive_by_layer` do: "labels: the
    dimension that holds it (507 in layers 1-29, 247 in layer 0)"."""
    parts = [f"{d} in layer {ls[0]}" if len(ls) == 1 else f"{d} in layers {layer_ranges(ls)}"
             for d, ls in _dims_by_layer(dims)]
    return (f"labels: the dimension that holds it, once per run of layers ({', '.join(parts)}; a run of one layer "
            f"between others may be left to the line)")


def _where_massive(dims: Sequence[int], positions: Sequence[int]) -> str:
    """Which dimension holds each layer's largest entry and at which position, in words."""
    n = len(dims)
    parts = [f"dimension {d} in layer {ls[0]}" if len(ls) == 1 else
             f"dimension {d} in {len(ls)} of {n} layers ({layer_ranges(ls)})" for d, ls in _dims_by_layer(dims)]
    text = f"Per layer the largest entry is on {', '.join(parts[:-1]) + ' and on ' + parts[-1] if len(parts) > 1 else parts[0]}"
    if positions:
        first = sum(p == 0 for p in positions)
        away = [f"layer {i} (position {p})" for i, p in enumerate(positions) if p != 0]
        text += (f"; it sits at the first token in {first} of {len(positions)} layers"
                 + (f", elsewhere in {', '.join(away[:-1]) + ' and ' + away[-1] if len(away) > 1 else away[0]}" if away else ""))
    return text + "."


def tour_massive(value: float, dim: int, layer: int, position: int, ratio: float, strict: bool, model: str,
                 dims: Sequence[int] = (), positions: Sequence[int] = (), n_seqs: int | None = None,
                 seq_len: int | None = None) -> str:
    """Section 4: the largest activation, where it sits, which dimension holds each layer's largest entry (``dims``,
    ``positions``: per layer; the figure labels the same dimensions), and whether Sun et al.'s criterion (|h| > 100
    and > 1000x the median |h| of the layer's output) is met, on ``n_seqs`` natural windows of ``seq_len`` tokens."""
    absolute = abs(value) > 100
    return paragraph(
        _batch(model, n_seqs, seq_len),
        f"The largest entry is {num(value)} on dimension {dim} at position {position}, layer {layer}, "
        f"{num(ratio)}x the median |h| of the layer's output.",
        _where_massive(dims, positions) if dims else "",
        f"By the absolute rule (|h| > 100) it is {'massive' if absolute else 'not massive'}; by the relative one "
        f"(> 1000x the median) it is {'massive' if ratio > 1000 else 'not'}.",
        "Sun et al.'s criterion is met on this model." if strict else
        "Sun et al.'s full criterion is not met on this model; the notebooks say so wherever they use it.")


def tour_dom_ratio(first: Sequence[float], rest: Sequence[float], model: str, n_seqs: int | None = None,
                   seq_len: int | None = None) -> str:
    """Section 5: DomRatio of the first token against the other tokens, at the first token's peak layer, on
    ``n_seqs`` natural windows of ``seq_len`` tokens."""
    peak = max(range(len(first)), key=lambda i: first[i])
    return paragraph(
        _batch(model, n_seqs, seq_len),
        f"The first token's DomRatio peaks at {num(first[peak])} at layer {peak}; the other tokens reach "
        f"{num(rest[peak])} in that layer (first / other tokens = {num(first[peak] / rest[peak], 2)}x: "
        f"{compare(first[peak], rest[peak], 'larger', 'smaller', 'the same')}).",
        f"Across layers the first token's DomRatio spans {span(first)}, the others' {span(rest)}.")


def tour_context(lengths: Sequence[int], sink_layers: Sequence[float], uniform_last: float, n_windows: int,
                 model: str) -> str:
    """Section 6: alpha_0 in the sink layers at the shortest and the longest context, against uniform attention. The
    share kept, alpha_0(longest) / alpha_0(shortest), depends on the shortest length (the profile's), so the sentence
    names both lengths."""
    a, b = sink_layers[0], sink_layers[-1]
    short, long = num(lengths[0]), num(lengths[-1])
    move = compare(b, a, "rises", "falls", "stays", rel_tol=0.02)
    return paragraph(
        f"{model}, {num(n_windows)} passage{'s' if n_windows != 1 else ''}, read at {short} to {long} tokens",
        f"In the sink layers the first token's share {move} from {num(a, 2)} to {num(b, 2)} as the context grows "
        f"{num(lengths[-1] / lengths[0])}-fold, while uniform attention would give it {num(uniform_last, 2)} at "
        f"{num(lengths[-1])} tokens -- {num(max(b, uniform_last) / min(b, uniform_last))} times "
        f"{compare(b, uniform_last, 'less', 'more', 'as much')}.",
        f"Read at {long} tokens the sink keeps {pct(b / a)} of the share it has at {short} tokens (alpha_0 at {long} "
        f"/ alpha_0 at {short} tokens = {num(b / a, 2)}); uniform attention would keep "
        f"{pct(uniform_last / _uniform(lengths[0]))} between the same two lengths.")


def _uniform(n: int) -> float:
    """Uniform causal attention's share of the first token over n queries: (1/n) sum_t 1/(t+1)."""
    return sum(1 / (t + 1) for t in range(n)) / n


# ------------------------------------------------------------------------------------------------ 01_utilization
def stream_size(model: str, n_tokens: int, budget: int, step: str) -> str:
    """The heading of the streaming takeaways: "M, one held-out stream of 2,048 tokens, cache 256, <step>"."""
    return f"{model}, one held-out stream of {num(n_tokens)} tokens, cache {num(budget)}, {step}"


def streaming_ppl(post: Mapping[str, float], sinks_key: str, claim: Claim | None, model: str, n_tokens: int,
                  budget: int, step: str, paper_ratio: float) -> str:
    """Section 1: perplexity after the cache fills per method ("dense", "window only", ``sinks_key``, "recompute"),
    the claim's verdict, and the size of the collapse against the paper's (``paper_ratio``: window only / sinks)."""
    window, sinks, dense, recompute = post["window only"], post[sinks_key], post["dense"], post["recompute"]
    paired = post.get(sinks_key + PAIRED)  # the sinks on recomputation's own tokens, where it ran at a sample
    ratio = window / sinks
    return paragraph(
        stream_size(model, n_tokens, budget, step),
        f"Once the cache is full, the window-only cache reaches {num(window)} against {num(dense)} for the dense one "
        f"(window-only / dense perplexity = {num(window / dense, 2)}x); keeping the sinks gives {num(sinks)}"
        + (f" ({num(paired)} on the tokens where every window is recomputed from scratch), " if paired else ", ")
        + f"{compare(paired or sinks, recompute, 'above', 'below', 'the same as', rel_tol=0.005)} recomputing every window "
        f"from scratch ({num(recompute)}).",
        f"{claim_line(claim)}.",
        f"The collapse, window-only / sinks perplexity = {num(ratio)}x here against {num(paper_ratio)}x in the paper (Llama-2-13B, a 1,024-token "
        f"cache, a whole PG19 book): the direction can be compared, the size cannot.")


def sink_count(ppl_by_sinks: Mapping[int, float], newline_ppl: float, few: Claim | None, positional: Claim | None,
               paper_llama: Sequence[float], paper_n: Sequence[int], measured_on: str = "same stream") -> str:
    """Section 2: perplexity by number of sinks kept, newline sinks, and both claims; ``paper_llama`` the paper's
    Llama-2-7B row of Table 2 for ``paper_n`` sinks; ``measured_on``: the heading (:func:`stream_size`)."""
    n = sorted(ppl_by_sinks)
    own = ppl_by_sinks[4]
    one = ppl_by_sinks[1]
    gained = (ppl_by_sinks[0] - one) / (ppl_by_sinks[0] - own) if ppl_by_sinks[0] != own else float("nan")
    paper = dict(zip(paper_n, paper_llama))
    return paragraph(
        measured_on,
        f"With {', '.join(str(k) for k in n)} sinks the perplexity is "
        f"{', '.join(num(ppl_by_sinks[k]) for k in n)}: one sink recovers {pct(gained)} of what four recover.",
        f"Four newline tokens placed before the text give {num(newline_ppl)} (newline sinks / the text's own first "
        f"four, perplexity = {num(newline_ppl / own, 3)}x).",
        f"{claim_line(few)}; {claim_line(positional)}.",
        f"StreamingLLM's Llama-2-7B gives {num(paper[1])} with one sink and {num(paper[4])} with four; here one sink "
        f"is {compare(one, own, 'worse than', 'better than', 'as good as', rel_tol=0.01)} four.")


def decode_cost(ms: Mapping[str, float], mib: Mapping[str, float], sinks_key: str, claim: Claim | None,
                n_tokens: int, resolution: float = MIN_RESOLUTION, timed: str = "", model: str = "",
                prompt_tokens: int = 0, ratio: float | None = None) -> str:
    """Section 3: final cache size and time per token, dense vs sinks + window. ``ms``: per cache, ms per token
    (:class:`sinklib.utilization.streaming.DecodeTiming`'s ``ms``); ``ratio``: the sink / dense time the verdict
    reads (:meth:`DecodeTiming.ratio`, paired step by step; default ms[sinks] / ms[dense]); ``resolution``: the
    relative difference at or below which the verdict is "no difference" (:func:`timing_verdict`); ``timed``: how
    it was timed (:meth:`DecodeTiming.describe`)."""
    ratio = ms[sinks_key] / ms["dense"] if ratio is None else ratio
    verdict = timing_verdict(ratio, 1.0, resolution)
    word = "about the same" if verdict == "no difference" else verdict
    res = pct(resolution)
    reading = (f"no difference, within the {res} resolution" if verdict == "no difference"
               else f"a difference beyond the {res} resolution")
    size = f"{num(n_tokens)} generated tokens" + (f" after a {num(prompt_tokens)}-token prompt" if prompt_tokens else "")
    return paragraph(
        f"{model}, {size}" if model else size,
        f"The sink cache ends at {num(mib[sinks_key])} MiB against {num(mib['dense'])} MiB for the dense cache, "
        f"which keeps growing; {claim_line(claim)}.",
        f"Per token the sink cache takes {num(ms[sinks_key])} ms against {num(ms['dense'])} ms for dense (each its "
        f"fastest round), paired step by step sink / dense "
        f"time = {num(ratio, 3)}x ({word}): {reading}"
        + (f" (timed in {timed})." if timed else "."))


def kv_quant(quant: Mapping[str, Mapping[str, float]], fp_ppl: float, kept_vs_all: Mapping[str, Sequence[float]],
             kept_vs_matched: Mapping[str, Sequence[float]], claim: Claim | None, n_tokens: int, model: str,
             control_measured: Mapping[str, Sequence[float]] | None = None) -> str:
    """Section 4: perplexity per setting with every token quantised vs the sinks kept, the paired interval of their
    ratio per setting, then the setting IntactKV's claim is judged at (:data:`kvquant.PAPER_SETTING`) against the
    position-matched control (tokens 4-7 kept), the claim, and why random weights gain too
    (:func:`kvquant.control_explanation`, with the control's interval ``control_measured``: {setting: (r, lo, hi)})."""
    rows = [f"{name}: {_interval(iv)}" for name, iv in kept_vs_all.items()]
    at = kvquant.PAPER_SETTING
    worst = max(quant, key=lambda b: quant[b][kvquant.ALL])
    control = ""
    if control_measured and at in control_measured:
        control = (f" On random weights of the same architecture keeping the first 4 exact changes perplexity by "
                   f"{_interval(control_measured[at])}: {kvquant.control_explanation(n_tokens)}.")
    return paragraph(
        f"{model}, one held-out stream of {num(n_tokens)} tokens",
        f"Full precision gives {num(fp_ppl)}. Keeping the 4 sink tokens exact changes perplexity by " + "; ".join(rows)
        + " (95% paired intervals).",
        f"The hardest setting, {worst}, stays at {num(quant[worst][kvquant.ALL] / fp_ppl, 3)}x full precision with "
        f"every token quantised and {num(quant[worst][kvquant.SINKS] / fp_ppl, 3)}x with the sinks kept.",
        f"IntactKV's KV-cache claim is made at INT4, so it is judged at {at}: there keeping the first 4 tokens exact "
        f"instead of tokens 4-7 (the position-matched control) changes perplexity by {_interval(kept_vs_matched[at])}.",
        f"{claim_line(claim)}." + control)


def _interval(iv: Sequence[float]) -> str:
    """A ratio and its interval as signed changes: "-9.0% [-15%, -2.0%], an interval below 1"."""
    ratio, lo, hi = iv
    side = "below 1" if hi < 1 else "above 1" if lo > 1 else "containing 1"
    return f"{_signed(ratio - 1)} [{_signed(lo - 1)}, {_signed(hi - 1)}], an interval {side}"


def _signed(x: float) -> str:
    return f"{'+' if x >= 0 else '-'}{pct(abs(x))}"


def act(act_ppl: Mapping[str, float | None], n_heads: int, total_heads: int, claim: Claim | None, n_windows: int,
        seq_len: int, model: str, min_queries: int = 1, figure: Mapping[str, object] | None = None) -> str:
    """Section 5: how many heads the proxy picks (a later key above 0.1, seen by at least ``min_queries`` queries)
    and what calibrating them does to held-out perplexity; ``figure``: the shown head's {"layer", "head",
    "sink_keys", "edge_keys"} (keys above 0.1 that fewer than ``min_queries`` queries see: the window's end)."""
    head = f"{model}, {num(n_windows)} held-out windows of {num(seq_len)} tokens"
    seen = f", seen by at least {num(min_queries)} queries," if min_queries > 1 else ""
    if act_ppl.get("ACT") is None:
        return paragraph(head, f"No head has a later key above the threshold{seen} on the calibration text, so "
                               f"nothing was calibrated; {claim_line(claim)}.")
    before, after = act_ppl["original"], act_ppl["ACT"]
    shown = ""
    if figure:
        sinks, edge = list(figure["sink_keys"]), list(figure["edge_keys"])
        shown = (f"In the head shown (layer {figure['layer']}, head {figure['head']}) {num(len(sinks))} keys count as "
                 f"sinks" + (f" (positions {', '.join(str(k) for k in sinks[:8])}{', ...' if len(sinks) > 8 else ''})"
                             if sinks else "")
                 + (f"; {num(len(edge))} more pass 0.1 only at the window's end (positions "
                    f"{', '.join(str(k) for k in edge)}), on fewer than {num(min_queries)} queries, and are left out"
                    if edge else "") + ".")
    iv = claim.measured.get("ACT / original") if claim is not None and isinstance(claim.measured, dict) else None
    if iv:  # judged by its paired block-bootstrap interval: a change only when it excludes 1
        word = "lowers" if iv[2] < 1 else "raises" if iv[1] > 1 else "does not measurably change"
        change = (f"calibrating all of them {word} perplexity ({num(before)} -> {num(after)}; ratio {num(iv[0], 3)}, "
                  f"95% interval {num(iv[1], 3)}-{num(iv[2], 3)}).")
    else:
        change = (f"calibrating all of them {compare(after, before, 'raises', 'lowers', 'leaves')} perplexity from "
                  f"{num(before)} to {num(after)} ({_signed(after / before - 1)}).")
    return paragraph(
        head,
        f"{num(n_heads)} of {num(total_heads)} heads have a later key above 0.1{seen} on the calibration text; "
        + change,
        shown,
        f"{claim_line(claim)}.")
