"""12_mllm's "What we saw" paragraphs, written from the run's results and claims (:mod:`sinklib.core.takeaways`).

One function per notebook section; every number and every direction word comes from the arguments, so the text
stays true on another model, profile or seed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from sinklib.core.claims import Claim
from sinklib.core.takeaways import claim_line, compare, num, paragraph, pct, span


def _finite(values: Sequence[float | None]) -> list[tuple[int, float]]:
    """(index, value) of the values that are numbers (not None, not NaN)."""
    return [(i, float(v)) for i, v in enumerate(values) if v is not None and not math.isnan(float(v))]


def training(losses: Sequence[float], seconds: float, accuracy: float | None, n_digits: int,
             chance: float = 0.1) -> str:
    """Section 0: the projector's caption loss (first -> last step) and its held-out digit accuracy against chance;
    the heading names the steps trained and the digits scored. ``accuracy`` None: not a stand-in (or no digits
    scored), nothing to say about a projector trained here."""
    if accuracy is None or not losses:
        return paragraph("projector", "This model's projector was not trained here, so there is no training curve "
                                      "or digit check to report.")
    fell = compare(losses[-1], losses[0], "rises", "falls", "stays")
    above = accuracy > chance
    strength = ("tell the language model which digit it is looking at" + (", though far from perfectly"
                if accuracy < 0.9 else "") if above else "do not tell the language model which digit it sees")
    return paragraph(
        f"projector, {len(losses):,} training steps, {n_digits:,} held-out digits scored",
        f"The caption loss {fell} from {num(losses[0])} to {num(losses[-1])} in {len(losses):,} steps "
        f"({num(seconds)} s on this machine), and the lowest-loss digit caption is the right one for "
        f"{num(accuracy)} of {n_digits:,} held-out digits (chance {num(chance)}): the projected image tokens "
        f"{strength}.")


def shares(layer_shares: Sequence[Sequence[float]], n_before: int, n_image: int, n_inputs: int) -> str:
    """Section 1: the text queries' attention on [before the image, image, text] per layer (L, 3): the mean over
    layers, which part takes the most, and where the before-image share is highest and lowest."""
    parts = ["the tokens before the image take", "the image tokens take", "the text takes"]
    mean = [sum(row[k] for row in layer_shares) / len(layer_shares) for k in range(3)]
    top = max(range(3), key=lambda k: mean[k])
    before = [row[0] for row in layer_shares]
    hi, lo = max(range(len(before)), key=before.__getitem__), min(range(len(before)), key=before.__getitem__)
    return paragraph(
        f"{n_inputs:,} held-out digits",
        f"Averaged over layers, text queries give {num(mean[0])} of their attention to the {n_before:,} tokens "
        f"before the image, {num(mean[1])} to the {n_image:,} image tokens and {num(mean[2])} to the text, so "
        f"{parts[top]} the largest share.",
        f"The before-image share is highest in layer {hi} ({num(before[hi])}) and lowest in layer {lo} "
        f"({num(before[lo])}).")


def sinks(dims: Sequence[int], fractions: Sequence[float], max_phi: Sequence[float], first_phi: Sequence[float],
          ratios: Sequence[float | None], claim: Claim | None, tau: float = 20.0,
          sensitivity: Mapping[float, Mapping] | None = None, n_digits: int | None = None,
          n_image: int | None = None) -> str:
    """Section 2: the sink dimensions, the layers where image tokens reach phi >= tau, how much attention those
    tokens receive, and the claim's verdict (over the stand-in seeds, with its random-weight control).
    Per-layer inputs: fractions (NaN before layer 2), max_phi (image tokens), first_phi (the first token), ratios.
    ``n_digits`` held-out digits of ``n_image`` image tokens each: what it was measured on, in the heading."""
    frac = _finite(fractions)
    with_sinks = [i for i, f in frac if f > 0]
    first_in = dict(_finite([None, *first_phi[:-1]]))  # layer l's input is block l - 1's output
    text = [f"The sink dimensions are {', '.join(str(d) for d in dims)}."]
    if with_sinks:
        peak = max(frac, key=lambda t: t[1])
        phis = [v for i, v in _finite(max_phi) if i in with_sinks]
        text.append(f"In {len(with_sinks)} of {len(frac)} layers (layers {span(with_sinks)}) image tokens reach "
                    f"phi >= {num(tau)}: at most {pct(peak[1])} of them (layer {peak[0]}), with a largest phi of "
                    f"{span(phis)} there against the first token's "
                    f"{span([first_in[i] for i in with_sinks if i in first_in])}.")
        got = [r for i, r in _finite(ratios) if i in with_sinks]
        if got:
            text.append(f"They receive {span(got)}x the attention of the other image tokens, "
                        f"{'more' if sum(got) / len(got) > 1 else 'less'} on average.")
    else:
        text.append(f"No image token reaches phi >= {num(tau)} in any layer from 2 on (largest phi "
                    f"{span([v for _, v in _finite(max_phi)])}; the first token's "
                    f"{span([v for i, v in first_in.items() if i >= 2])}).")
    others = {t: v for t, v in (sensitivity or {}).items() if t != tau}
    for t, v in others.items():
        every = v["max fraction"] >= 1.0
        text.append(f"At the width-matched tau = {num(t)} (the share of the squared norm that tau = {num(tau)} asks "
                    f"for at d = 4096) up to {pct(v['max fraction'])} of the image tokens in a layer pass "
                    f"({num(v['sinks per image'], 2)} per image in some layer)"
                    + (": a threshold every image token passes separates no sink from the rest, so the verdict "
                       f"uses the paper's tau = {num(tau)}." if every else "; the verdict uses the paper's tau = "
                       f"{num(tau)}."))
    if claim is not None:
        text.append(f"Claim {claim_line(claim)}.")
    size = (f", {n_digits:,} held-out digits" + (f" of {n_image:,} image tokens each" if n_image else "")
            if n_digits else "")
    return paragraph(f"visual sink tokens{size}", *text)


def edits(means: Mapping[str, float], random_means: Sequence[float], sinks_per_image: float, n_image: int,
          n_digits: int, masking: Claim | None, var: Claim | None, exist: Claim | None = None,
          scored: str = "caption NLL", var_rows: tuple[int, int] | None = None, more: Sequence[str] = ()) -> str:
    """Section 3: the NLL increase with the sinks hidden against each random draw's, VAR's change of the NLL, and
    the claims' verdicts (over the stand-in seeds and the random draws, with their random-weight controls);
    ``exist``: section 2's claim, judged here once every draw is in; ``more``: sentences joined to the same
    paragraph (:func:`seed_sentences`: the other stand-ins), so that section 3 carries one takeaway."""
    base = means["as is"]
    d_sink = means["sinks hidden"] - base
    d_rand = [r - base for r in random_means]
    if d_sink > max(d_rand):
        where = "more than any random draw"
    elif d_sink < min(d_rand):
        where = "less than every random draw"
    else:
        where = "inside the random draws' range"
    moved = compare(means["VAR"], base, "raises", "lowers", "leaves")
    var_text = (f"VAR {moved} the {scored} by {num(abs(means['VAR'] - base))} nats (from {num(base)})"
                if moved != "leaves" else f"VAR leaves the {scored} at {num(base)}")  # a change, not two rounded ends
    if var_rows is not None:
        var_text += (f", redistributing in {var_rows[0]:,} of the {var_rows[1]:,} (head, text query, layer) rows it "
                     f"could edit ({pct(var_rows[0] / var_rows[1] if var_rows[1] else 0.0)})")
    if sinks_per_image == 0:
        return paragraph(f"{n_digits:,} held-out digits", "No image token is a visual sink here, so there is nothing "
                         f"to hide or redistribute: hiding the sinks and VAR leave the {scored} as it is.",
                         f"Claim {claim_line(exist)}; " if exist is not None else "",
                         f"claim {claim_line(masking, 'kang2025.masking_sinks_is_harmless')}; "
                         f"claim {claim_line(var, 'kang2025.var_helps')}.", *more)
    unjudged = next((c.control_note for c in (masking, var) if c is not None and c.control is None
                     and c.control_note), "")
    return paragraph(
        f"{n_digits:,} held-out digits, {num(sinks_per_image, 2)} visual sinks per image of {n_image:,} image tokens",
        f"Hiding the visual sinks {compare(d_sink, 0, 'raises', 'lowers', 'leaves')} the {scored} by "
        f"{num(abs(d_sink))} nats; hiding as many random image tokens changes it by {span(d_rand)} "
        f"(mean {num(sum(d_rand) / len(d_rand))}, {len(d_rand)} draw{'s' if len(d_rand) > 1 else ''}): the sinks' "
        f"effect is {where}.",
        f"{var_text}.",
        (f"Claim {claim_line(exist)}; claim " if exist is not None else "Claim ")
        + f"{claim_line(masking, 'kang2025.masking_sinks_is_harmless')}; "
        f"claim {claim_line(var, 'kang2025.var_helps')}.",
        f"The edits' random-weight control: {unjudged[0].lower() + unjudged[1:]}." if unjudged else "", *more)


def seeds(runs: Mapping[int, Mapping[str, float]], tau: float = 20.0, ceiling: float | None = None) -> str:
    """:func:`seed_sentences` as a paragraph of its own ("" for fewer than two stand-ins)."""
    if len(runs) < 2:
        return ""
    return paragraph(f"{len(runs)} stand-ins", *seed_sentences(runs, tau, ceiling))


def seed_sentences(runs: Mapping[int, Mapping[str, float]], tau: float = 20.0, ceiling: float | None = None,
                   sizes: Mapping[int, str] | None = None) -> list[str]:
    """The stand-ins behind the draws: per projector seed, the NLL increase with the sinks hidden, the mean random
    draw's, and VAR's change; and, for a stand-in without visual sinks, how far its largest image-token phi stayed
    below ``tau`` (and where phi's ceiling sqrt(d), ``ceiling``, lies). runs: seed -> {"sinks", "random", "VAR"} (NLL
    changes against "as is"), optionally "max_phi"; ``sizes``: seed -> what that stand-in was measured on ("64
    digits, 5 draws"), said beside its numbers. No sentence for fewer than two stand-ins."""
    if len(runs) < 2:
        return []
    sizes = sizes or {}
    parts = [f"seed {s}{f' ({sizes[s]})' if s in sizes else ''}: sinks {'+' if r['sinks'] >= 0 else ''}{num(r['sinks'])}, random "
             f"{'+' if r['random'] >= 0 else ''}{num(r['random'])}, VAR {'+' if r['VAR'] >= 0 else ''}{num(r['VAR'])}"
             for s, r in runs.items()]
    below = {s: r["max_phi"] for s, r in runs.items() if "max_phi" in r and not math.isnan(r["max_phi"])
             and r["max_phi"] < tau}
    why = ""
    if below:
        why = ("No image token reaches phi >= " + num(tau) + " on "
               + ", ".join(f"seed {s} (largest phi {num(v)}, {num(tau - v)} below tau = {num(tau)}"
                           + (f", whose ceiling sqrt(d) is {num(ceiling)})" if ceiling else ")")
                           for s, v in below.items())
               + ": the same language model with a projector trained from another seed -- with nothing to hide, "
                 "its masking and VAR draws have no sink to act on.")
    return ["NLL changes per projector seed -- " + "; ".join(parts) + ".", why]


def kang_extras(background: Claim, per_seed: Mapping[int, Claim], same_across_prompts: float | None,
                across_images: float | None, n_prompts: int, has_sinks: bool, n_digits: int | None = None) -> str:
    """Section 4: where the visual sinks sit (on the digits' background or on the ink) per stand-in, and whether
    they keep their positions across prompts (the same images under other captions) and across images (the run's own
    stand-in's batch). per_seed: projector seed -> its :func:`~sinklib.architectures.mllm.kang_claims.background_claim`;
    ``n_digits``: the held-out digits per stand-in it was measured on, in the heading."""
    parts = []
    for seed, c in per_seed.items():
        m = c.measured
        parts.append(f"seed {seed}: {pct(m['share on background'])} of {m['visual sink tokens']:,} sinks on background "
                     f"(all image tokens: {pct(m['background share of all image tokens'])})"
                     if m["visual sink tokens"] else f"seed {seed}: no visual sink token")
    where = "Visual sink tokens on the plain background, per stand-in -- " + "; ".join(parts) + "."
    if has_sinks and across_images is not None:
        causal = ("a check of the code, not a finding: the image comes before the caption and attention is causal, "
                  "so the image tokens never see it and the overlap must be 1" if same_across_prompts == 1 else
                  "which causality forbids -- the image tokens never see the caption -- so something in the "
                  "pipeline leaks the caption into them")
        keep = (f"Two different digits share {num(across_images)} of their sink positions on average (Jaccard). The "
                f"same images under {n_prompts} other caption{'s' if n_prompts > 1 else ''} keep their sink set with a "
                f"Jaccard overlap of {num(same_across_prompts)}: {causal}.")
    else:
        keep = "The run's own stand-in has no visual sink token in this batch, so there are no positions to compare."
    size = f", {n_digits:,} held-out digits per stand-in" if n_digits else ""
    return paragraph(f"where the sinks sit{size}", where, keep, f"Claim {claim_line(background)}.")
