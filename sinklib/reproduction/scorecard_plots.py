"""Figures of ``90_scorecard``: each claim's within-run ratios against the paper's ratios of the same two
quantities (:func:`within_run_ratios`), and the verdicts per paper split by what the claims were measured on
(:func:`by_paper`)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from sinklib.core.plotting import VERDICT_COLOURS
from sinklib.reproduction.findings import short_model, short_paper

COLOURS = VERDICT_COLOURS
MARKERS = {"pretrained": "o", "stand-in": "s", "trained here": "^", "random weights": "x"}
KIND_HATCH = {"pretrained": "", "stand-in": "//", "trained here": "..", "random weights": "xx"}


def _rows_on_log_axis(ax, ys: list[float], labels: list[str], rows: list, values: list[float]) -> None:
    """One labelled row per entry (group headings -- the ``str`` rows -- in bold) on a log x-axis that shows 1 and
    every value with a factor of 2 to spare."""
    ax.set_yticks(ys, labels, fontsize=7)
    for tick, row in zip(ax.get_yticklabels(), rows, strict=False):
        if isinstance(row, str):
            tick.set_fontweight("bold")
    ax.set_xscale("log")
    if values:
        ax.set_xlim(min(min(values), 1.0) / 2, max(max(values), 1.0) * 2)


PAPER_MARKER = {"marker": "D", "s": 70, "facecolors": "white", "edgecolors": "black", "linewidths": 1.0}


def within_run_ratios(ratios: Sequence[dict], title: str = "") -> Figure:
    """One labelled row per like-for-like ratio (``ratios`` from :func:`sinklib.reproduction.scorecard.like_for_like`),
    named by its paper, the two quantities and the model: the run's ratio of two quantities measured in the same run
    (lower filled bar from 1: colour = the claim's verdict, end marker shape = pretrained / stand-in / trained here)
    under the paper's ratio of the same two quantities (upper open bar from 1, diamond), log x; rows grouped by
    quantity. Bars from 1 show the direction -- the side of 1 each ratio is on -- which is what the verdicts' cuts
    read; the distance between a run's and a paper's ratio is a difference of scale, not a verdict. Both points of a row are ratios within one model and
    one text or training: the figure never divides one model's number by another's."""
    groups: dict[str, list[dict]] = {}
    for r in ratios:
        groups.setdefault(r.get("quantity", "other"), []).append(r)
    order = [g for g in ("perplexity", "attention share or rate", "activation ratio", "other") if g in groups]
    order += sorted(set(groups) - set(order))
    rows: list[dict | str] = []
    for g in order:
        rows.append(g)
        rows += sorted(groups[g], key=lambda r: (r["id"], r["label"]))
    fig, ax = plt.subplots(figsize=(12, max(3.0, 0.3 * len(rows) + 1.8)), layout="constrained")
    labels, ys, values = [], [], []
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        ys.append(y)
        if isinstance(row, str):
            ax.axhline(y, color="black", lw=0.5, alpha=0.4)
            labels.append(row.upper())
            continue
        run, paper = row["measured"], row["published"]
        values += [run, paper]
        # each ratio as a bar from 1 (the two quantities equal): the side of 1 is the direction, which is what a
        # verdict's cut reads -- not the distance between the two ends, which spans orders of magnitude of scale
        ax.barh(y + 0.17, paper - 1.0, left=1.0, height=0.3, color="white", edgecolor="black", lw=0.7, zorder=2)
        ax.barh(y - 0.17, run - 1.0, left=1.0, height=0.3, color=COLOURS[row["verdict"]], edgecolor="black", lw=0.4,
                zorder=2)
        ax.scatter([paper], [y + 0.17], zorder=3, **{**PAPER_MARKER, "s": 30})
        ax.scatter([run], [y - 0.17], marker=MARKERS.get(row.get("kind", "pretrained"), "o"), s=30,
                   color=COLOURS[row["verdict"]], edgecolors="black", linewidths=0.4, zorder=4)
        model, who = short_model(row.get("model", "")), short_paper(row.get("paper", ""))
        labels.append(f"{who + ': ' if who else ''}{row['label']}" + (f" [{model}]" if model else ""))
    _rows_on_log_axis(ax, ys, labels, rows, values)
    ax.axvline(1.0, color="black", lw=0.6, ls=":")
    ax.set(xlabel="ratio of the two quantities the row names, each within one run (log scale)\n"
                  "upper open bar: the paper's; lower filled bar: this run's (colour: the claim's verdict)\n"
                  "both start at 1, where the two quantities are equal: the side of 1 is the direction",
           title=title or "Like with like: each run's ratio against the paper's, same two quantities",
           ylim=(-0.8, len(rows) - 0.2))
    handles = [Line2D([], [], ls="", marker="D", color="white", markeredgecolor="black",
                      label="the paper's ratio")]
    handles += [Line2D([], [], ls="", marker="o", color=c, markeredgecolor="black", label=f"this run's: {v}")
                for v, c in COLOURS.items()]
    handles += [Line2D([], [], ls="", marker=MARKERS.get(k, "o"), color="white", markeredgecolor="black",
                       label=f"run on: {k}") for k in sorted({r.get("kind", "pretrained") for r in ratios})]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)), fontsize=7)
    return fig


def by_paper(summary: Sequence[dict], title: str = "") -> Figure:
    """Horizontal stacked bars, one per paper and what its claims were measured on (``summary`` from
    :func:`sinklib.reproduction.scorecard.by_paper_and_kind`): claims that hold / do not hold / are unsettled / cannot
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
    ax.set(xlabel="tests (a test: one claim judged on one model)", xlim=(0, left.max() * 1.25 + 1),
           title=title or "Tests per paper and what they were measured on")
    ax.tick_params(axis="y", labelsize=8)
    handles = [Patch(facecolor=c, edgecolor="white", label=v) for v, c in COLOURS.items()]  # plain: a bar's
    # own handle would carry the hatch of its first bar
    order = list(KIND_HATCH)
    handles += kind_handles(sorted({e["kind"] for e in summary},
                                   key=lambda k: (order.index(k) if k in order else len(order), k)))
    fig.legend(handles=handles, loc="outside lower center", ncols=4, fontsize=8)
    return fig


def kind_handles(kinds: Sequence[str]) -> list[Patch]:
    """Legend entries for the bars' hatching (:data:`KIND_HATCH`): one white swatch per kind, hatched as its bars
    ("stand-in built here: hatched //"; a pretrained model's bars are plain)."""
    words = {"pretrained": "pretrained model: plain", "stand-in": "stand-in built here: hatched //",
             "trained here": "models trained here: dotted ..", "random weights": "random weights: crossed xx"}
    return [Patch(facecolor="white", edgecolor="0.25", hatch=KIND_HATCH.get(k, ""), label=words.get(k, k))
            for k in kinds]
