"""Figures of ``10_llm``: several models side by side (one colour per model throughout)."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from sinklib.architectures.llm.placement import KINDS


def _colors(reports: Sequence) -> dict[str, str]:
    return {r.name: f"C{i}" for i, r in enumerate(reports)}


def alpha_by_depth(reports: Sequence, eps: float = 0.3, title: str = "") -> Figure:
    """alpha_0 per layer (natural text) against relative depth l / (L - 1), with each model's sink rate per input
    and, where measured, the sink rate on natural text against the threshold eps."""
    curves = [r for r in reports if getattr(r, "eps_curve", None)]
    fig, axes = plt.subplots(1, 3 if curves else 2, figsize=(15 if curves else 11, 3.8),
                             gridspec_kw={"width_ratios": [1.6, 1, 1] if curves else [1.6, 1]}, layout="constrained")
    ax, bx = axes[0], axes[1]
    colors = _colors(reports)
    for r in reports:
        depth = np.linspace(0, 1, r.n_layers)
        alpha = np.asarray(r.alpha_by_layer, float)
        ax.plot(depth, alpha, marker="o", ms=3, color=colors[r.name], label=f"{r.label} (L={r.n_layers})")
        # the sink layers (alpha_0 above eps), shaded under each model's own curve
        ax.fill_between(depth, eps, alpha, where=alpha > eps, color=colors[r.name], alpha=0.18, lw=0,
                        interpolate=True)
    ax.axhline(eps, color="grey", ls="--", lw=1, label=f"eps = {eps} (shaded: the sink layers)")
    ax.set(xlabel="relative depth l / (L - 1)", ylabel="alpha_0 (mean over heads)", ylim=(0, 1),
           title="(a) attention to the first token by depth, natural text")
    kinds = list(reports[0].sink_rate)
    width = 0.8 / len(reports)
    for i, r in enumerate(reports):
        x = np.arange(len(kinds)) + (i - (len(reports) - 1) / 2) * width
        rates = [r.sink_rate[k] for k in kinds]
        bx.bar(x, rates, width, color=colors[r.name])
        for xi, rate in zip(x, rates):
            if rate < 0.01:  # a bar of height 0 is invisible: say it
                bx.text(xi, 0.01, "0", ha="center", va="bottom", fontsize=8, color=colors[r.name])
    bx.set_xticks(range(len(kinds)), kinds)
    bx.set(ylabel="sink rate (eps 0.3)", ylim=(0, 1), title="(b) sink rate by input (Gu et al. Table 1)")
    if curves:
        cx = axes[2]
        for r in curves:
            cx.plot(r.eps_curve["eps"], r.eps_curve["rate"], color=colors[r.name])
        cx.axvline(eps, color="grey", ls="--", lw=1)
        cx.set(xlabel="threshold eps", ylabel="sink rate, natural text", xlim=(0, 1), ylim=(0, 1),
               title="(c) sink rate against eps (dashed: 0.3)")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right center", fontsize=8)
    if title:
        fig.suptitle(title)
    return fig


def mass_by_kind(reports: Sequence, title: str = "") -> Figure:
    """Each key kind's mean sink mass m_j divided by a content word's, one group of bars per kind, one bar per model,
    on a linear axis (bars on a cut log axis make their heights meaningless); the first position's ratio, far above
    the others, is written on its bar and the axis is cut at the largest other ratio."""
    fig, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
    colors = _colors(reports)
    width = 0.8 / len(reports)
    ratios = {r.name: [r.by_kind[k] / r.by_kind["content"] for k in KINDS] for r in reports}
    rest = [v for rs in ratios.values() for k, v in zip(KINDS, rs) if k != "first" and np.isfinite(v)]
    top = 1.25 * max(rest + [1.0])
    for i, r in enumerate(reports):
        x = np.arange(len(KINDS)) + (i - (len(reports) - 1) / 2) * width
        heights = [min(v, top) if np.isfinite(v) else 0.0 for v in ratios[r.name]]
        ax.bar(x, heights, width, color=colors[r.name], label=r.label)
        for xi, v in zip(x, ratios[r.name]):
            if np.isfinite(v) and v > top:  # the first position: its value, on a bar cut at the axis
                ax.text(xi, top * 0.98, f"{v:,.0f}x", ha="center", va="top", rotation=90, fontsize=7, color="white")
            elif not np.isfinite(v):
                ax.text(xi, 0.02 * top, "none", ha="center", va="bottom", rotation=90, fontsize=7)
    ax.axhline(1.0, color="grey", ls="--", lw=1, label="a content word (1x)")
    ax.set_xticks(range(len(KINDS)), KINDS)
    ax.set_ylim(0, top)
    ax.set(ylabel="m_j / content word's m_j (sink layers)",
           title=title or "Where the attention goes, by token kind, relative to a content word")
    fig.legend(loc="outside right center", fontsize=8)
    return fig


def position_or_token(reports: Sequence, title: str = "") -> Figure:
    """alpha (sink layers) at position 0 as given, with another first token, with another text in front, and at
    the original first token after it moved -- per model."""
    cases = ("own", "replaced", "moved_first", "moved_original")
    names = ("position 0,\nas given", "position 0,\nanother token", "position 0,\nanother text in front",
             "original first token,\nmoved later")
    fig, ax = plt.subplots(figsize=(9.5, 3.8), layout="constrained")
    colors = _colors(reports)
    width = 0.8 / len(reports)
    for i, r in enumerate(reports):
        x = np.arange(len(cases)) + (i - (len(reports) - 1) / 2) * width
        ax.bar(x, [getattr(r.position, c) for c in cases], width, color=colors[r.name],
               label=f"{r.label}{' (BOS)' if r.adds_bos else ''}")
    ax.set_xticks(range(len(cases)), names, fontsize=8)
    ax.set(ylabel="alpha (sink layers)", ylim=(0, 1), title=title or "Is the sink the position or the token?")
    fig.legend(loc="outside right center", fontsize=8)
    return fig


def context_and_chat(reports: Sequence, title: str = "") -> Figure:
    """(a) alpha_0 (sink layers) against context length, band: range over windows; (b) sink rate on raw text vs
    the same text in the chat template (models with a template)."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    colors = _colors(reports)
    for r in reports:
        c = r.context
        ax.plot(c["lengths"], c["alpha_first"], marker="o", color=colors[r.name], label=r.label)
        if c["low"] != c["high"]:  # a band only when there are several passages
            ax.fill_between(c["lengths"], c["low"], c["high"], color=colors[r.name], alpha=0.15, lw=0)
        if c.get("uniform"):
            ax.plot(c["lengths"], c["uniform"], ls=":", lw=1, color=colors[r.name])
    ax.plot([], [], ls=":", lw=1, color="grey", label="uniform attention (same layers)")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="context length N (tokens)", ylabel="alpha_0 (sink layers)", ylim=(0, 1),
           title="(a) the first token's share as the context grows")
    chat = [r for r in reports if r.raw_vs_chat]
    for i, r in enumerate(chat):
        bx.bar([i - 0.2, i + 0.2], list(r.raw_vs_chat.values()), 0.38, color=colors[r.name],
               hatch=[None, "//"], edgecolor="white")
    bx.set_xticks(range(len(chat)), [r.label.split(" (")[0] for r in chat], fontsize=8)
    without = [r.label.split(" (")[0] for r in reports if not r.raw_vs_chat]
    if without:
        bx.text(0.98, 0.97, "no chat template: " + ", ".join(without), transform=bx.transAxes, ha="right",
                va="top", fontsize=8, color="dimgrey")
    bx.set(ylabel="sink rate (eps 0.3)", ylim=(0, 1), title="(b) raw text (plain) vs chat template (hatched)")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right center", fontsize=8)
    if title:
        fig.suptitle(title)
    return fig
