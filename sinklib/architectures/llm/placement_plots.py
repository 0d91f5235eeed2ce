"""Figures of ``10_llm``: several models side by side (one colour per model throughout)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from sinklib.architectures.llm.placement import DELIMITER_CUT, KINDS, over_content
from sinklib.core.plotting import titled


def wrap_label(name: str, width: int = 14) -> str:
    """A model name broken after its hyphens into lines of at most about ``width`` characters, so that
    side-by-side tick labels do not run into each other: "Qwen2.5-Coder-0.5B-Instruct" -> "Qwen2.5-Coder-" and
    "0.5B-Instruct" on two lines."""
    parts = re.split(r"(?<=-)", name)
    lines, line = [], ""
    for part in parts:
        if line and len(line) + len(part) > width:
            lines.append(line)
            line = ""
        line += part
    return "\n".join([*lines, line])


def _colors(reports: Sequence) -> dict[str, str]:
    return {r.name: f"C{i}" for i, r in enumerate(reports)}


def sink_rate_bars(ax, reports: Sequence, colors: Sequence[str], eps: float, panel: str,
                   hatches: Sequence[str | None] | None = None) -> None:
    """Each model's sink rate per input kind (Gu et al. Table 1) as grouped bars on ``ax``, one colour (and hatch) per
    model; a rate under 1% is labelled "0", since a bar of height 0 cannot be seen. ``panel``: the title's "(b)"."""
    kinds = list(reports[0].sink_rate)
    width = 0.8 / len(reports)
    for i, r in enumerate(reports):
        x = np.arange(len(kinds)) + (i - (len(reports) - 1) / 2) * width
        rates = [r.sink_rate[k] for k in kinds]
        ax.bar(x, rates, width, color=colors[i], hatch=None if hatches is None else hatches[i],
               edgecolor="white" if hatches is not None else None)
        for xi, rate in zip(x, rates):
            if rate < 0.01:
                ax.text(xi, 0.01, "0", ha="center", va="bottom", fontsize=8, color=colors[i])
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set(ylabel=f"sink rate (eps {eps:g})", ylim=(0, 1), title=f"{panel} sink rate by input (Gu et al. Table 1)")


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
        ax.plot(depth, alpha, marker="o", ms=3, color=colors[r.name], label=f"{r.label.split(' (')[0]} (L={r.n_layers})")
        # the sink layers (alpha_0 above eps), shaded under each model's own curve
        ax.fill_between(depth, eps, alpha, where=alpha > eps, color=colors[r.name], alpha=0.18, lw=0,
                        interpolate=True)
    ax.axhline(eps, color="grey", ls="--", lw=1, label=f"eps = {eps} (shaded: the sink layers)")
    ax.set(xlabel="relative depth l / (L - 1)", ylabel="alpha_0 (mean over heads)", ylim=(0, 1),
           title="(a) attention to the first token by depth, natural text")
    sink_rate_bars(bx, reports, [colors[r.name] for r in reports], eps, "(b)")
    if curves:
        cx = axes[2]
        for r in curves:
            cx.plot(r.eps_curve["eps"], r.eps_curve["rate"], color=colors[r.name])
        cx.axvline(eps, color="grey", ls="--", lw=1)
        cx.set(xlabel="threshold eps", ylabel="sink rate, natural text", xlim=(0, 1), ylim=(0, 1),
               title="(c) sink rate against eps (dashed: 0.3)")
    handles, labels = ax.get_legend_handles_labels()  # short names below the panels: the models' full labels
    fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=8)  # are in the caption
    return titled(fig, title)


def _labels(reports: Sequence) -> str:
    return ", ".join(r.label for r in reports)


def alpha_by_depth_caption(reports: Sequence, num_seqs: int, seq_len: int, eps: float = 0.3) -> str:
    """The caption of :func:`alpha_by_depth`: one sentence per panel it draws -- (c) only where a report has its
    sink rate against eps."""
    caption = (f"(a) alpha_0 per layer on natural text, mean over heads and {num_seqs} sequences of {seq_len} tokens, "
               f"against relative depth, for {_labels(reports)}; dashed: eps {eps:g}; shaded: the sink layers. (b) Gu "
               f"et al.'s sink rate (eps {eps:g}) on natural text, random tokens and one token repeated ({num_seqs} "
               f"sequences of {seq_len} tokens each).")
    if any(getattr(r, "eps_curve", None) for r in reports):
        caption += (f" (c) the sink rate on natural text against the threshold eps (the share of (sequence, layer, "
                    f"head) with alpha_0 > eps); dashed: eps {eps:g}, the value (b) uses.")
    return caption


def mass_by_kind_caption(reports: Sequence, windows: int, seq_len: int, cut: float = DELIMITER_CUT) -> str:
    """The caption of :func:`mass_by_kind`, naming the first-delimiter rule's cut it draws."""
    return (f"Mean attention each key receives per query that sees it (m_j), sink layers, mean over heads and {windows} "
            f"windows of {seq_len} tokens, by token kind (first delimiter: the first '.' or newline; delimiter: a "
            f"later one or one of , ; : ! ?; weak: an article, preposition, conjunction or other punctuation; content: "
            f"any other word), divided by a content word's, for {_labels(reports)}; grey "
            f"dashed: a content word (1x); black dash-dotted: the first-delimiter rule's cut ({cut:g}x a content word: the "
            f"claim holds where the first delimiter's bar is above it); linear axis cut above the largest ratio after "
            f"the first position, whose value is written on its bar.")


def mass_by_kind(reports: Sequence, title: str = "", cut: float = DELIMITER_CUT) -> Figure:
    """Each key kind's mean sink mass m_j divided by a content word's, one group of bars per kind, one bar per model,
    on a linear axis (bars on a cut log axis make their heights meaningless); the first position's ratio, far above
    the others, is written on its bar and the axis is cut at the largest other ratio (or above ``cut``). ``cut``: the
    first-delimiter rule's (:data:`~sinklib.architectures.llm.placement.DELIMITER_CUT`), drawn as a black dash-dotted
    line."""
    fig, ax = plt.subplots(figsize=(9, 3.8), layout="constrained")
    colors = _colors(reports)
    width = 0.8 / len(reports)
    ratios = {r.name: [np.nan if (v := over_content(r.by_kind, k)) is None else v for k in KINDS]  # NaN: no key
              for r in reports}
    rest = [v for rs in ratios.values() for k, v in zip(KINDS, rs) if k != "first" and np.isfinite(v)]
    top = 1.25 * max(rest + [1.0, cut])
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
    ax.axhline(cut, color="black", ls="-.", lw=1.2, label=f"first-delimiter cut ({cut:g}x)")
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
    """(a) alpha_0 (sink layers) against context length, band: range over windows, on a log y axis so uniform
    attention's share (1/N, dotted) is a line, not the axis; each model its own marker and line style, so two
    models with the same values are both seen; (b) sink rate on raw text vs the same text in the chat template
    (models with a template). The legend names each model once, short, below the panels."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    colors = _colors(reports)
    marks = [("o", "-"), ("s", "--"), ("^", "-."), ("D", (0, (5, 1))), ("v", (0, (3, 1, 1, 1)))]
    for i, r in enumerate(reports):
        c = r.context
        marker, ls = marks[i % len(marks)]
        ax.plot(c["lengths"], c["alpha_first"], marker=marker, ls=ls, ms=5, mfc="white", color=colors[r.name],
                label=r.label.split(" (")[0])
        if c["low"] != c["high"]:  # a band only when there are several passages
            ax.fill_between(c["lengths"], c["low"], c["high"], color=colors[r.name], alpha=0.15, lw=0)
        if c.get("uniform"):
            ax.plot(c["lengths"], c["uniform"], ls=":", lw=1.4, color=colors[r.name])
    ax.plot([], [], ls=":", lw=1.4, color="grey", label="uniform attention, same layers (dotted)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set(xlabel="context length N (tokens)", ylabel="alpha_0 (sink layers, log)", ylim=(None, 1),
           title="(a) the first token's share as the context grows")
    chat = [r for r in reports if r.raw_vs_chat]
    for i, r in enumerate(chat):
        bx.bar([i - 0.2, i + 0.2], list(r.raw_vs_chat.values()), 0.38, color=colors[r.name],
               hatch=[None, "//"], edgecolor="white")
    bx.set_xticks(range(len(chat)), [wrap_label(r.label.split(" (")[0]) for r in chat], fontsize=8)
    without = [r.label.split(" (")[0] for r in reports if not r.raw_vs_chat]
    if without:
        bx.text(0.98, 0.97, "no chat template: " + ", ".join(without), transform=bx.transAxes, ha="right",
                va="top", fontsize=8, color="dimgrey")
    bx.set(ylabel="sink rate (eps 0.3)", ylim=(0, 1), title="(b) raw text (plain) vs chat template (hatched)")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=8)
    return titled(fig, title)


def mid_sequence_sinks(reports: Sequence, eps: float = 0.3, cos_cut: float = 0.9, title: str = "") -> Figure:
    """Mid-sequence sinks (``report.mid_sequence``, :mod:`sinklib.interpretation.secondary_sinks`), against relative
    depth, first window: (a) the BOS sink's m_j per layer (solid) and the strongest other key's (dashed; the window's
    last keys left out), the random-weight control's strongest other key dotted, with the eps cut; (b) how far the
    keys' block outputs point along the BOS sink's: the 90% quantile of |cos(h_j, h_bos)| over the keys (solid) and
    the median (dashed), with the authors' 0.9; keys found by their mass marked where they drew it."""
    shown = [r for r in reports if getattr(r, "mid_sequence", None)]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 4.2), layout="constrained")
    colors = _colors(reports)
    for r in shown:
        w = r.mid_sequence["windows"][0]["by_layer"]
        depth = np.linspace(0, 1, r.n_layers)
        name = r.label.split(" (")[0]
        ax.plot(depth, w["bos_mass"], color=colors[r.name], lw=1.8, label=f"{name} (L={r.n_layers})")
        ax.plot(depth, w["strongest_other"], color=colors[r.name], ls="--", lw=1.2)
        if r.mid_sequence.get("control"):
            ax.plot(depth, r.mid_sequence["control"][0]["by_layer"]["strongest_other"], color=colors[r.name],
                    ls=":", lw=1.2)
        bx.plot(depth, w["p90"], color=colors[r.name], lw=1.8)
        bx.plot(depth, w["median"], color=colors[r.name], ls="--", lw=1.2)
        for window in r.mid_sequence["windows"]:
            for key in window["mass_sinks"]:
                layers = np.asarray(key["layers"])
                ax.scatter(layers / max(r.n_layers - 1, 1), [key["mass"]] * len(layers), marker="*", s=60,
                           color=colors[r.name], zorder=3)
                bx.scatter(layers / max(r.n_layers - 1, 1), [key["alignment"]] * len(layers), marker="*", s=60,
                           color=colors[r.name], zorder=3)
    ax.axhline(eps, color="grey", ls="-.", lw=1)
    ax.plot([], [], color="grey", lw=1.8, label="the BOS sink's key (solid)")
    ax.plot([], [], color="grey", ls="--", lw=1.2, label="strongest other key (dashed)")
    ax.plot([], [], color="grey", ls=":", lw=1.2, label="... on random weights (dotted)")
    ax.scatter([], [], marker="*", s=60, color="grey", label=f"a key found by its mass (m_j > {eps:g})")
    ax.set_yscale("log")
    ax.set(xlabel="relative depth l / (L - 1)", ylabel="m_j, mean over heads (log)", ylim=(1e-3, 1.2),
           title=f"(a) attention drawn per key (dash-dot: eps = {eps:g})")
    bx.axhline(cos_cut, color="grey", ls="-.", lw=1)
    bx.set(xlabel="relative depth l / (L - 1)", ylabel="|cos(h_j, h_bos)| over the keys", ylim=(0, 1.02),
           title=f"(b) alignment with the BOS sink's state: 90% quantile (solid), median (dashed); dash-dot {cos_cut:g}")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=8)
    return titled(fig, title)


def scale_rung(reports: Sequence, eps: float = 0.3, sun_ratio: float = 1000.0, title: str = "") -> Figure:
    """One family at several sizes, each its own line style (smallest solid): (a) alpha_0 per layer against relative
    depth, natural text; (b) Sun et al.'s ratio at the first position per layer (max |h| over the layer median, log),
    with the 1000x cut, the super neuron's layer (triangle) and the first sink layer (circle) on each curve; (c) the
    sink rate per input kind."""
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained",
                                     gridspec_kw={"width_ratios": [1.3, 1.3, 1]})
    styles = ["-", "--", "-.", ":"]
    for i, r in enumerate(reports):
        ls, color = styles[i % len(styles)], f"C{i}"
        depth = np.linspace(0, 1, r.n_layers)
        name = f"{r.label.split(' (')[0]} (L={r.n_layers})"
        ax.plot(depth, r.alpha_by_layer, ls=ls, color=color, marker="o", ms=3, label=name)
        if r.sun_sites is not None:
            ratio = np.asarray(r.sun_sites.first_ratio, float)
            bx.plot(depth, ratio, ls=ls, color=color)
            n = r.chain_numbers or {}
            marks = [((n.get("super_neuron") or {}).get("layer"), "^"), (n.get("sink_onset"), "o")]
            for layer, marker in marks:
                if layer is not None and 0 <= layer < r.n_layers:
                    bx.scatter(depth[layer], ratio[layer], marker=marker, s=70, color=color, zorder=3,
                               edgecolor="black", lw=0.6)
    ax.axhline(eps, color="grey", ls="-.", lw=1)
    ax.set(xlabel="relative depth l / (L - 1)", ylabel="alpha_0 (mean over heads)", ylim=(0, 1),
           title=f"(a) attention to the first token (dash-dot: eps = {eps:g})")
    bx.axhline(sun_ratio, color="grey", ls="-.", lw=1)
    bx.scatter([], [], marker="^", s=50, color="grey", edgecolor="black", lw=0.6, label="super neuron's layer")
    bx.scatter([], [], marker="o", s=50, color="grey", edgecolor="black", lw=0.6, label="first sink layer")
    bx.set_yscale("log")
    bx.set(xlabel="relative depth l / (L - 1)", ylabel="max |h| at position 0 / layer median (log)",
           title=f"(b) Sun et al.'s ratio at the first token (dash-dot: {sun_ratio:g}x)")
    bx.legend(fontsize=8, loc="lower right")
    sink_rate_bars(cx, reports, [f"C{i}" for i in range(len(reports))], eps, "(c)",
                   hatches=[[None, "//", "..", "xx"][i % 4] for i in range(len(reports))])
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=8)
    return titled(fig, title)
