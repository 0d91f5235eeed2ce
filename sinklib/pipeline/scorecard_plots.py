"""Figures of ``90_scorecard``: measured vs published for every numeric claim, and held / tested per paper."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

COLOURS = {"holds": "#009E73", "does NOT hold": "#D55E00", "cannot be judged here": "#999999"}


def measured_vs_published(pairs: Sequence[dict], title: str = "") -> Figure:
    """Each numeric claim value: published (x) vs measured (y), log-log when the values span decades, coloured by
    the claim's verdict; the diagonal is "measured = published"."""
    fig, ax = plt.subplots(figsize=(7.5, 6), layout="constrained")
    xs = np.array([abs(p["published"]) for p in pairs])
    ys = np.array([abs(p["measured"]) for p in pairs])
    for verdict, colour in COLOURS.items():
        chosen = [i for i, p in enumerate(pairs) if p["verdict"] == verdict]
        if chosen:
            ax.scatter(xs[chosen], ys[chosen], s=36, color=colour, label=f"{verdict} ({len(chosen)})",
                       edgecolors="black", linewidths=0.4, zorder=3)
    if len(pairs):
        lo, hi = min(xs.min(), ys.min()), max(xs.max(), ys.max())
        if hi / lo > 100:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, ls=":", zorder=1)
        ax.text(hi, hi, "measured = published", ha="right", va="bottom", fontsize=7)
    ax.set(xlabel="published value (|x|)", ylabel="measured here (|x|)",
           title=title or "Every numeric claim: measured vs published")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def by_paper(summary: Sequence[dict], title: str = "") -> Figure:
    """Horizontal stacked bars per paper: claims that hold / do not hold / cannot be judged here."""
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(summary) + 1.4), layout="constrained")
    names = [e["paper"] for e in summary][::-1]
    left = np.zeros(len(names))
    for verdict, colour in COLOURS.items():
        vals = np.array([e[verdict] for e in summary][::-1], dtype=float)
        ax.barh(names, vals, left=left, color=colour, label=verdict)
        for y, (v, x0) in enumerate(zip(vals, left)):
            if v:
                ax.text(x0 + v / 2, y, f"{int(v)}", ha="center", va="center", fontsize=8, color="white")
        left += vals
    for y, e in enumerate(summary[::-1]):
        ax.text(left[y] + 0.2, y, f"{e['holds']} / {e['tested']} hold", va="center", fontsize=8)
    ax.set(xlabel="claims tested", xlim=(0, left.max() * 1.25 + 1), title=title or "Claims per paper")
    fig.legend(loc="outside lower center", ncols=3, fontsize=8)
    return fig
