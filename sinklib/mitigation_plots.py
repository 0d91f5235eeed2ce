"""Figures of the mitigation notebook: sink emergence, loss curves, final metrics per variant, attention maps."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from sinklib.mitigation import curve
from sinklib.plotting import SINK_COLOR, _np, draw_attention


def emergence(runs: Sequence[dict], uniform: float, eps: float = 0.3, title: str = "") -> Figure:
    """Sink emergence in one variant over training: (a) alpha_0 of every layer/head (mean over seeds, band = range
    over seeds); (b) sink rate and validation loss. ``uniform`` marks alpha_0 under uniform attention."""
    steps = np.array([c["step"] for c in runs[0]["checkpoints"]])
    per_head = np.array([[c["alpha_by_head"] for c in r["checkpoints"]] for r in runs])  # (seeds, ckpt, L, H)
    L, H = per_head.shape[2:]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.3))
    colors = plt.cm.viridis(np.linspace(0, 0.85, L * H))
    for i, (layer, head) in enumerate((la, he) for la in range(L) for he in range(H)):
        y = per_head[:, :, layer, head]
        ax.plot(steps, y.mean(0), color=colors[i], lw=1.4, label=f"L{layer} H{head}")
        if len(runs) > 1:
            ax.fill_between(steps, y.min(0), y.max(0), color=colors[i], alpha=0.15, lw=0)
    ax.axhline(uniform, color="grey", ls=":", lw=1)
    ax.annotate("uniform attention", (steps[-1], uniform), fontsize=7, ha="right", va="bottom", color="grey")
    ax.axhline(eps, color=SINK_COLOR, ls="--", lw=1)
    ax.annotate(f"eps = {eps}", (steps[0], eps), fontsize=7, va="bottom", color=SINK_COLOR)
    ax.set_xlabel("training step"), ax.set_ylabel("alpha of the first token (BOS)")
    ax.set_title("(a) attention to BOS per head")
    ax.legend(fontsize=7, ncols=2 if L * H > 4 else 1)
    s, rate, rate_sd = curve(runs, "sink_rate")
    bx.plot(s, rate, color=SINK_COLOR, lw=1.5, label="sink rate")
    bx.fill_between(s, rate - rate_sd, rate + rate_sd, color=SINK_COLOR, alpha=0.2, lw=0)
    bx.set_ylim(-0.02, 1.02), bx.set_xlabel("training step"), bx.set_ylabel("sink rate (eps 0.3)", color=SINK_COLOR)
    cx = bx.twinx()
    s, loss, _ = curve(runs, "val_loss")
    cx.plot(s, loss, color="k", lw=1.2, label="validation loss")
    cx.set_ylabel("validation loss (nats)"), cx.grid(False)
    cx.set_ylim(loss.min() - 0.05, np.percentile(loss, 90) + 0.05)
    bx.set_title("(b) sink rate and loss")
    if title:
        fig.suptitle(title)
    return fig


def loss_curves(runs: Mapping[str, Sequence[dict]], key: str = "val_loss", title: str = "",
                ylabel: str = "validation loss (nats)", skip_first: int = 1, note: str = "") -> Figure:
    """``key`` against training step for every variant: mean over seeds, band = +- 1 sd. The first ``skip_first``
    checkpoints are left out so the differences at the end stay visible."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    lo, hi = np.inf, -np.inf
    others = itertools.cycle(plt.cm.tab10(np.arange(10)))  # distinct colours, none of them the baseline's black
    for name, rs in runs.items():
        steps, mean, sd = curve(rs, key)
        steps, mean, sd = steps[skip_first:], mean[skip_first:], sd[skip_first:]
        style = {"color": "k", "lw": 2.0, "zorder": 5} if name == "softmax" else {"color": next(others), "lw": 1.2}
        line, = ax.plot(steps, mean, label=name, **style)
        ax.fill_between(steps, mean - sd, mean + sd, color=line.get_color(), alpha=0.15, lw=0)
        lo, hi = min(lo, (mean - sd).min()), max(hi, np.percentile(mean, 75))
    ax.set_ylim(lo - 0.01 * abs(lo), hi)
    ax.set_xlabel("training step"), ax.set_ylabel(ylabel)
    ax.legend(fontsize=7, ncols=2, loc="upper right")
    if note:
        ax.text(0.01, 0.02, note, transform=ax.transAxes, fontsize=7, color="dimgrey")
    if title:
        ax.set_title(title)
    return fig


def final_bars(table: pd.DataFrame, labels: Sequence[str], uniform: float | None = None, title: str = "") -> Figure:
    """Small multiples, one per metric label of :func:`sinklib.mitigation.final_table`: mean per variant (dot) with
    +- 1 sd error bars (no bars from zero, so close values stay apart); the baseline (softmax) in the sink colour; log scale where values span > 100x."""
    n = len(labels)
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False)
    names = list(table.index)
    colors = [SINK_COLOR if v == "softmax" else "#4C72B0" for v in names]
    for ax, label in zip(axes.flat, labels):
        mean = table[(label, "mean")].to_numpy(float)
        sd = np.nan_to_num(table[(label, "sd")].to_numpy(float))
        for y, (mu, err, col) in enumerate(zip(mean, sd, colors)):
            ax.errorbar(mu, y, xerr=err, fmt="o", color=col, ms=4, capsize=2, lw=1)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        positive = mean[mean > 0]
        if len(positive) and positive.max() / max(positive.min(), 1e-9) > 100:
            ax.set_xscale("log")
        if uniform is not None and label == "first-token attention":
            ax.axvline(uniform, color="grey", ls=":", lw=1)
        ax.set_title(label, fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    return fig


def attention_maps(maps: Mapping[str, object], head_label: str, floor: float = 1e-3, title: str = "") -> Figure:
    """One (T, T) attention map per variant on the same input and head, log colour scale, BOS column outlined."""
    n = len(maps)
    cols = min(5, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.0 * cols + 1.0, 2.1 * rows), squeeze=False)
    norm, im = LogNorm(vmin=floor, vmax=1.0), None
    for ax, (name, A) in zip(axes.flat, maps.items()):
        im = draw_attention(ax, _np(A), norm)
        ax.set_title(name, fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.colorbar(im, ax=axes, shrink=0.6, label=f"attention weight (log), {head_label}")
    if title:
        fig.suptitle(title)
    return fig
