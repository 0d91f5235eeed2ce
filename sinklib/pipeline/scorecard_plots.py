"""Figures of ``90_scorecard``: each numeric claim value measured against its published value, grouped by what
the number is, and the verdicts per paper split by what the claims were measured on."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

COLOURS = {"holds": "#009E73", "does NOT hold": "#D55E00", "unsettled": "#E69F00", "cannot be judged here": "#999999"}
MARKERS = {"pretrained": "o", "stand-in": "s", "trained here": "^", "random weights": "x"}
KIND_HATCH = {"pretrained": "", "stand-in": "//", "trained here": ".."}


def measured_over_published(pairs: Sequence[dict], title: str = "") -> Figure:
    """One labelled row per numeric claim value: measured / published (log x; 1 = the paper's number), grouped by
    quantity (perplexity, attention share or rate, activation ratio, other), coloured by the claim's verdict,
    marker shape = what it was measured on (pretrained, stand-in, trained here). A ratio far from 1 with a "holds"
    colour is a claim whose structure holds at another scale (a 135M model's perplexity against Llama-2-7B's)."""
    groups: dict[str, list[dict]] = {}
    for p in pairs:
        groups.setdefault(p.get("quantity", "other"), []).append(p)
    order = [g for g in ("perplexity", "attention share or rate", "activation ratio", "other") if g in groups]
    rows: list[dict | str] = []
    for g in order:
        rows.append(g)
        rows += sorted(groups[g], key=lambda p: (p["id"], p["key"]))
    height = 0.28 * len(rows) + 1.6
    fig, ax = plt.subplots(figsize=(9, max(3.0, height)), layout="constrained")
    labels, ys, ratios = [], [], []
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        if isinstance(row, str):
            ax.axhline(y, color="black", lw=0.5, alpha=0.4)
            labels.append(row.upper())
        else:
            ratio = abs(row["measured"]) / abs(row["published"])
            ratios.append(ratio)
            ax.scatter([ratio], [y], marker=MARKERS.get(row.get("kind", "pretrained"), "o"), s=40,
                       color=COLOURS[row["verdict"]], edgecolors="black", linewidths=0.4, zorder=3)
            labels.append(row["id"] + (f" · {row['key']}" if row["key"] else ""))
        ys.append(y)
    ax.set_yticks(ys, labels, fontsize=7)
    for tick, row in zip(ax.get_yticklabels(), rows):
        if isinstance(row, str):
            tick.set_fontweight("bold")
    ax.set_xscale("log")
    if ratios:
        ax.set_xlim(min(min(ratios), 1.0) / 2, max(max(ratios), 1.0) * 2)
    ax.axvline(1.0, color="black", lw=0.8, ls=":")
    ax.set(xlabel="measured here / published (log scale; 1 = the paper's value)",
           title=title or "Every numeric claim value against the paper's", ylim=(-0.8, len(rows) - 0.2))
    handles = [Line2D([], [], ls="", marker="o", color=c, markeredgecolor="black", label=v)
               for v, c in COLOURS.items()]
    kinds = sorted({p.get("kind", "pretrained") for p in pairs})
    handles += [Line2D([], [], ls="", marker=MARKERS.get(k, "o"), color="white", markeredgecolor="black", label=k)
                for k in kinds]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(handles)), fontsize=7)
    return fig


def by_paper(summary: Sequence[dict], title: str = "") -> Figure:
    """Horizontal stacked bars, one per paper and what its claims were measured on (``summary`` from
    :func:`sinklib.pipeline.scorecard.by_paper_and_kind`): claims that hold / do not hold / are unsettled / cannot
    be judged here, each claim and model once; the text after each bar says how many models the records repeat over
    (the same claim judged on three models is three records)."""
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(summary) + 1.6), layout="constrained")
    names = [f"{e['paper']} -- {e['kind']}" for e in summary][::-1]
    left = np.zeros(len(names))
    for verdict, colour in COLOURS.items():
        vals = np.array([e[verdict] for e in summary][::-1], dtype=float)
        hatches = [KIND_HATCH.get(e["kind"], "") for e in summary][::-1]
        bars = ax.barh(names, vals, left=left, color=colour, label=verdict, edgecolor="white")
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)
        for y, (v, x0) in enumerate(zip(vals, left)):
            if v:
                ax.text(x0 + v / 2, y, f"{int(v)}", ha="center", va="center", fontsize=8, color="white")
        left += vals
    for y, e in enumerate(summary[::-1]):
        models = f", on {e['models']} models" if e.get("models", 1) > 1 else ""
        ax.text(left[y] + 0.2, y, f"{e['holds']} / {e['tested']} hold{models}", va="center", fontsize=8)
    ax.set(xlabel="claims (each claim and model once)", xlim=(0, left.max() * 1.4 + 1),
           title=title or "Claims per paper and what they were measured on")
    ax.tick_params(axis="y", labelsize=8)
    fig.legend(loc="outside lower center", ncols=4, fontsize=8)
    return fig
