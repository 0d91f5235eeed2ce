"""The "What we saw" paragraphs of ``03_mitigation``, rendered from the run's runs, tables and claims.

One function per notebook section; each returns Markdown built with :func:`sinklib.core.takeaways.paragraph`. Every
number and every direction word comes from the inputs, so the text stays true on any profile, seed count or data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from sinklib.core.claims import OWN_QUESTION, Claim
from sinklib.core.takeaways import claim_line, compare, num, paragraph, pct, span
from sinklib.mitigation.comparison import strongest_head
from sinklib.mitigation.verdicts import RISING, grows_sink, late_slope


def _names(items: Sequence[str]) -> str:
    """"a", "a and b", "a, b and c"."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}" if items else "none"


def emergence(base_runs: Sequence[dict], seeds: Sequence[int], uniform: float, eps: float,
              claim: Claim | None, ads: Sequence[Mapping] | None = None, probe: str = "") -> str:
    """Section 1: every head's alpha_0 at step 0 against uniform attention (H_T / T), each seed's strongest head at
    the end, the first step above ``eps`` per seed, whether that head is still rising (:func:`late_slope` >
    ``RISING`` per 100 steps over the last quarter), and the ``softmax_grows_sink`` verdict; with ``ads`` (one
    :func:`~sinklib.mitigation.comparison.active_dormant` row per seed, measured on ``probe``, e.g. "64 held-out
    sequences of 64 tokens") the active-dormant probe of the same heads joins the one paragraph of section 1."""
    start = [a for r in base_runs for row in r["checkpoints"][0]["alpha_by_head"] for a in row]
    tops = [strongest_head(r)[2] for r in base_runs]
    crossed = [(s, c) for s, c in zip(seeds, [_first_above(r, eps) for r in base_runs]) if c is not None]
    rising = [s for s, r in zip(seeds, base_runs) if late_slope(r, key="alpha_by_head") > RISING]
    n = len(base_runs)
    return paragraph(
        f"softmax baseline, {n} seeds",
        f"At step 0 (untrained) the heads' first-token attention is {span(start)} against uniform attention's "
        f"{num(uniform)}: "
        + ("no head is above 1.5x uniform, the untrained model has no sink." if max(start) <= 1.5 * uniform else
           "some head is already above 1.5x uniform before training."),
        f"At the last step each seed's strongest head reaches {span(tops)};"
        f" {len(crossed)} of {n} seeds have a head above eps = {eps:g}"
        + (f" (first at step {', '.join(f'{c} in seed {s}' for s, c in crossed)})." if crossed else "."),
        (f"The strongest head is still rising over the last quarter of training in seed(s) "
         f"{_names([str(s) for s in rising])}: the budget catches the sink while it forms." if rising else
         "No seed's strongest head is still rising over the last quarter of training."),
        f"{claim_line(claim)}.",
        *([] if ads is None else active_dormant_sentences(ads, probe)),
    )


def _first_above(run: dict, eps: float) -> int | None:
    hit = [c["step"] for c in run["checkpoints"] if np.max(c["alpha_by_head"]) > eps]
    return int(hit[0]) if hit else None


def active_dormant(ads: Sequence[Mapping]) -> str:
    """Section 1, active-dormant probe alone (:func:`active_dormant_sentences` as one paragraph); the notebook joins
    these sentences to :func:`emergence`'s, so that section 1 carries one takeaway."""
    if not ads:
        return paragraph("active and dormant", *active_dormant_sentences(ads))
    return paragraph(f"active and dormant, {len(ads)} seeds", *active_dormant_sentences(ads))


def active_dormant_sentences(ads: Sequence[Mapping], probe: str = "") -> list[str]:
    """Per seed's strongest head, BOS and t-1 weight on trigger vs other queries (``holds``: BOS more than twice as
    much on other queries, t-1 more on triggers); ``probe`` names what it was measured on (held-out sequences)."""
    if not ads:
        return ["Active-dormant probe not measured: the training data has no trigger tokens."]
    held = sum(bool(a["holds"]) for a in ads)
    col = {k: [a[k] for a in ads] for k in ("bos_trigger", "bos_other", "prev_trigger", "prev_other",
                                            "trigger_fraction")}
    bos = compare(np.mean(col["bos_other"]), np.mean(col["bos_trigger"]), "more", "less", "as much")
    prev = compare(np.mean(col["prev_trigger"]), np.mean(col["prev_other"]), "more", "less", "as much")
    on = f", measured on {probe}" if probe else ""
    return [
        f"In {held} of {len(ads)} seeds the strongest head is active-dormant as Guo et al. describe{on}.",
        f"On trigger queries ({pct(float(np.mean(col['trigger_fraction'])))} of them) it gives BOS "
        f"{span(col['bos_trigger'])} and the token to copy (t-1) {span(col['prev_trigger'])}; on the other queries "
        f"BOS gets {span(col['bos_other'])} ({bos} than on triggers) and t-1 {span(col['prev_other'])} "
        f"(triggers give t-1 {prev}).",
    ]


def attention_maps(own_heads: Mapping[str, Sequence], table: pd.DataFrame) -> str:
    """Section 2: each variant's strongest head by row-normalised BOS share (first seed), and where rows that sum
    to less than one send the rest (1 - mean row mass; sigmoid rows are unnormalised)."""
    shares = {v: float(h[2]) for v, h in own_heads.items()}
    hi, lo = max(shares, key=shares.get), min(shares, key=shares.get)
    mass = {v: float(table.loc[v, ("attention row mass", "mean")]) for v in own_heads}
    short = [f"{v} {num(1 - m)}" for v, m in mass.items() if v != "sigmoid" and m < 0.95]
    n = int(table[("seeds", "")].min())
    return paragraph(
        f"each variant's own strongest head, {n} seed{'s' if n > 1 else ''}",
        f"In the first seed, the strongest head's first-token share ranges from {num(shares[lo])} ({lo}) to {num(shares[hi])} ({hi}).",
        (f"Averaged over seeds, rows that sum to less than one give part of each query's attention to no token: "
         f"{_names(short)} (mean share of the row)." if short else "Every normalised variant's rows sum to about one."),
        (f"Sigmoid rows are unnormalised: their mean row sum is {num(mass['sigmoid'])}." if "sigmoid" in mass
         else ""),
    )


def loss_curves(table: pd.DataFrame, floor: float | None, baseline: str = "softmax") -> str:
    """Section 3: softmax's final loss against the entropy floor, and every variant against softmax in pooled
    seed sd's (above / within / below 2 sd's)."""
    b = float(table.loc[baseline, ("val loss", "mean")])
    groups: dict[str, list[str]] = {"above": [], "within": [], "below": []}
    for v in table.index:
        if v == baseline:
            continue
        d = float(table.loc[v, ("val loss", "mean")]) - b
        sd = math.sqrt((table.loc[v, ("val loss", "sd")] ** 2 + table.loc[baseline, ("val loss", "sd")] ** 2) / 2)
        sd = 0.0 if math.isnan(sd) else sd
        side = "within" if abs(d) <= 2 * sd else "above" if d > 0 else "below"
        groups[side].append(f"{v} ({d:+.3f})")
    seeds = int(table.loc[baseline, ("seeds", "")])
    return paragraph(
        f"{seeds} seeds",
        (f"Softmax ends {num(b - floor)} nats {compare(b, floor, 'above', 'below', 'at')} the task's entropy floor "
         f"({num(b)} vs {num(floor)}): that gap is all any variant could win." if floor is not None else
         f"Softmax ends at {num(b)} nats."),
        f"More than 2 seed sd's above softmax at the end: {_names(groups['above'])}."
        f" Within 2 sd's: {_names(groups['within'])}. More than 2 sd's below: {_names(groups['below'])}.",
    )


def final_metrics(table: pd.DataFrame, uniform: float, agreement: Sequence[str]) -> str:
    """Section 4: which variants leave the first token the least / most attention, whether the model has massive
    activations at all (Sun et al.: |h| > 100), and how many published directions the run agrees with."""
    fa = table[("first-token attention", "mean")].astype(float)
    lo, hi = fa.idxmin(), fa.idxmax()
    act = table[("max activation", "mean")].astype(float)
    agrees = sum(line.endswith("-> agrees.") for line in agreement)
    return paragraph(
        f"{int(table[('seeds', '')].iloc[0])} seeds",
        f"First-token attention ranges from {num(fa[lo])} ({lo}) to {num(fa[hi])} ({hi}); uniform attention gives "
        f"{num(uniform)}.",
        f"The largest |h| is {span(act.tolist())} across variants: this model "
        f"{'has' if act.max() > 100 else 'has no'} massive activations in Sun et al.'s sense (above 100)"
        + ("" if act.max() > 100 else ", so the activation columns cannot test the papers' claims about outliers")
        + ".",
        (f"Against the published directions: {agrees} of {len(agreement)} comparisons agree." if agreement else
         "No published number to compare a direction with."),
    )


def verdicts(claims: Sequence[Claim]) -> str:
    """Section 5: the ``removes_sink`` claims grouped by their four verdicts (holds / does not / unsettled / cannot be
    judged here, :meth:`~sinklib.core.claims.Claim.verdict`), and what the untrained control said."""
    removes = [c for c in claims if c.id.endswith("_removes_sink")]
    grows = next((c for c in claims if c.id.endswith("_grows_sink")), None)
    parity = next((c for c in claims if c.id == "origin.headwise_rmsnorm_restores_parity"), None)
    table = next((c for c in claims if c.id == "origin.headwise_rmsnorm_lowers_disparity_raises_rank"), None)

    def name(c: Claim) -> str:  # a removal no paper claims is marked as this project's own question
        own = " (our own question, not its paper's claim)" if c.paper == OWN_QUESTION else ""
        return c.id.split(".")[1].removesuffix("_removes_sink") + own

    by = {v: [name(c) for c in removes if c.verdict() == v]
          for v in ("holds", "does NOT hold", "unsettled", "cannot be judged here")}
    n = len(grows.draws) if grows and grows.draws else 1
    return paragraph(
        f"{n} training seeds",
        f"{claim_line(grows)}.",
        f"Removes the sink in every seed: {_names(by['holds'])}.",
        f"Does not, in every seed: {_names(by['does NOT hold'])}.",
        (f"Unsettled (the seeds disagree, or a number sits within its margin of a cut): {_names(by['unsettled'])}."
         if by["unsettled"] else ""),
        (f"Cannot be judged here (e.g. a removal whose strongest head is still rising): "
         f"{_names(by['cannot be judged here'])}." if by["cannot be judged here"] else ""),
        "On the untrained model (step 0) the softmax rule "
        + ({True: "holds -- see its control note", False: "fails, as it should: the sink is learned",
            None: "was not judged"}[grows.control if grows else None]) + ".",
        _parity(parity, table) if parity or table else "",
    )


def _parity(parity: Claim | None, table: Claim | None) -> str:
    """The sentences of :func:`verdicts` on arXiv 2605.06611's two claims of head-wise RMSNorm
    (:mod:`sinklib.mitigation.parity`): parity across positions on its direct measure, then the two numbers of the
    paper's table, each said where it is read."""
    out = []
    if parity is not None and "variance_ratio" in parity.measured:
        m = parity.measured
        out.append(f"What arXiv 2605.06611 claims of head-wise RMSNorm, statistical parity across positions: layer "
                   f"{m.get('layer', 0) + 1}'s attention outputs vary {num(m['variance_ratio'][1])}x as much over a "
                   f"batch at position 0 as at the later positions, against softmax's {num(m['variance_ratio'][0])}x "
                   f"(1 = parity; {m['over']}); {claim_line(parity)}.")
        c = parity.control_measured if isinstance(parity.control_measured, dict) else {}
        if parity.control is True and "variance_ratio" in c:
            out.append(f"On the weights training started from it is already {num(c['variance_ratio'][1])}x against "
                       f"softmax's {num(c['variance_ratio'][0])}x: the norm sets every head output's RMS to 1 by "
                       f"construction, so the parity is the architecture's, not learned.")
    if table is not None:
        m = table.measured
        where = f" after the RMSNorm that reads layer {m['layer'] + 1}'s output" if "layer" in m else ""
        out.append(f"The two numbers of its pre-training table: first-token DomRatio {num(m['dom_ratio'][1])} against "
                   f"softmax's {num(m['dom_ratio'][0])}{where}, effective rank {num(m['effective_rank'][1])} against "
                   f"{num(m['effective_rank'][0])} in the last layer's states ({m['over']}); {claim_line(table)}.")
    return " ".join(out)


def bible_check(text_table: pd.DataFrame, text_uniform: float, claims: Sequence[Claim]) -> str:
    """Section 6: does softmax grow a sink on Bible bytes (:func:`grows_sink`), and the convergence claims."""
    fa = float(text_table.loc["softmax", ("first-token attention", "mean")])
    grew = grows_sink(text_table, "softmax", text_uniform)
    losses = ", ".join(f"{v} {num(float(text_table.loc[v, ('val loss', 'mean')]))}" for v in text_table.index)
    return paragraph(
        f"Bible bytes, {int(text_table.loc['softmax', ('seeds', '')])} seeds",
        f"Softmax {'grows a' if grew else 'grows no'} first-token sink here: first-token attention {num(fa)}, "
        f"{compare(fa, text_uniform, 'above', 'below', 'at')} the uniform {num(text_uniform)}, sink rate "
        f"{pct(float(text_table.loc['softmax', ('sink rate', 'mean')]))}.",
        f"Final validation loss: {losses}.",
        " ".join(f"{claim_line(c)}." for c in claims),
    )
