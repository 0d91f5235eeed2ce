"""Figures of the utilization notebook: streaming perplexity, sink-count sweep, decode cost, KV quantisation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from sinklib.core.figure_layout import describe_drawn
from sinklib.core.plotting import titled, to_numpy

# a fixed colour and style per method, so the dense reference is never hidden under another line
METHOD_STYLE = {"dense": dict(color="black", ls="--", lw=1.6, zorder=5),
                "window only": dict(color="#D55E00", lw=1.4),
                "recompute": dict(color="dimgrey", marker="o", ms=4, ls=":", lw=1.2)}


def _curves(ax, curves: Mapping[str, tuple[Sequence[int], Sequence[float]]], budget: int | None) -> None:
    for i, (name, (xs, ys)) in enumerate(curves.items()):
        style = next((v for k, v in METHOD_STYLE.items() if name.startswith(k)), dict(color=f"C{i}", lw=1.4))
        ax.semilogy(xs, ys, label=name, **{"marker": "o", "ms": 2.5, **style})
    if budget is not None:
        ax.axvspan(0, budget, color="grey", alpha=0.12, lw=0)
        ax.text(budget / 2, 0.97, "cache\nfilling", transform=ax.get_xaxis_transform(), ha="center", va="top",
                fontsize=7, color="dimgrey")
    ax.set_xlabel("position in the stream (tokens)")
    ax.set_xlim(0, None)


def streaming_curves(curves: Mapping[str, tuple[Sequence[int], Sequence[float]]], budget: int | None = None,
                     title: str = "", note: str = "", sampled: Mapping[str, tuple[Sequence[int], Sequence[float]]]
                     | None = None, sampled_window: int = 0) -> Figure:
    """Windowed perplexity against position in the stream (log y), one line per method.

    ``curves``: {method: (window centres, perplexity per window)} (:func:`sinklib.utilization.streaming.windowed_ppl`)
    over every token; ``budget``: the cache size, shaded up to where eviction starts. ``sampled``: the same kind of
    curves measured only at the positions a costly method (recompute) was evaluated at, per ``sampled_window``-token
    window -- drawn in a panel (b) of their own, so a method measured on other tokens and other windows is never
    joined to the full-stream curves of panel (a).
    """
    fig, axes = plt.subplots(1, 2 if sampled else 1, figsize=(11.5 if sampled else 7.5, 3.6), layout="constrained",
                             sharey=True, squeeze=False)
    ax = axes[0, 0]
    _curves(ax, curves, budget)
    ax.set_ylabel("perplexity per window")
    if note:
        ax.text(0.01, 0.02, note, transform=ax.transAxes, fontsize=7, color="dimgrey")
    if sampled:
        ax.set_title("(a) every token", fontsize=9)
        _curves(axes[0, 1], sampled, budget)
        axes[0, 1].set_title(f"(b) at the recompute positions only, {sampled_window}-token windows", fontsize=9)
    handles = {h.get_label(): h for a in axes.flat for h in a.get_lines() if not h.get_label().startswith("_")}
    fig.legend(handles=list(handles.values()), loc="outside right center", fontsize=8)
    return titled(fig, title)


def sink_sweep(n_sinks: Sequence[int], values: Sequence[float], reference: Mapping[str, Sequence[float]] | None = None,
               extra: Mapping[str, float] | None = None, title: str = "", relative_to: int = 4) -> Figure:
    """Perplexity relative to keeping ``relative_to`` sinks, against the number of sink tokens kept (log y).

    Dividing every curve by its own value at ``relative_to`` sinks puts models of very different perplexity on one
    scale: 1 = as good as four sinks. Published curves (same sink counts) are drawn the same way.
    """
    ref_i = list(n_sinks).index(relative_to)
    fig, ax = plt.subplots(figsize=(6.8, 3.4), layout="constrained")
    x = np.arange(len(n_sinks))
    ax.semilogy(x, np.asarray(values) / values[ref_i], "o-", lw=2, color="C0", label="measured", zorder=4)
    markers = ["s", "^", "D"]
    for i, (name, ref) in enumerate((reference or {}).items()):
        ref = np.asarray(ref, dtype=float)
        ax.semilogy(x[: len(ref)], ref / ref[ref_i], ls="--", marker=markers[i % 3], ms=4, lw=1, color=f"C{i + 1}",
                    label=name)
    for i, (name, val) in enumerate((extra or {}).items()):
        # beside the measured point it equals (a quarter step right, on top, outlined), never hidden under it
        ax.plot([x[ref_i] + 0.25], [val / values[ref_i]], marker="*", ms=13, ls="", color=f"C{4 + i}",
                markeredgecolor="black", markeredgewidth=0.6, zorder=6, label=name)
        ax.annotate(f"{val / values[ref_i]:.2f}x", (x[ref_i] + 0.25, val / values[ref_i]), xytext=(6, 6),
                    textcoords="offset points", fontsize=7)
    ax.axhline(1, color="grey", lw=0.8, ls=":")
    ax.set_xticks(x, [str(n) for n in n_sinks])
    ax.set_xlabel("sink tokens kept"), ax.set_ylabel(f"perplexity / perplexity with {relative_to} sinks")
    fig.legend(loc="outside right center", fontsize=8)
    return titled(fig, title)


def decode_cost(costs: Mapping[str, object], title: str = "", smooth: int = 32, timed_steps: int = 0) -> Figure:
    """Per generated token: wall time (moving average over ``smooth`` steps) and KV-cache size, per method.

    ``costs``: {method: DecodeCost, or a list of them, one per interleaved round
    (:func:`sinklib.utilization.decode_timing.interleaved_decode`)}; with rounds the time drawn is each step's median
    over the rounds (a slow spell of the machine in one round does not move it) and the cache size the first round's.
    ``timed_steps``: the last steps the timing verdict reads (:func:`sinklib.utilization.decode_timing.decode_timing`),
    shaded in the time panel.
    """
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.2), sharex=True, layout="constrained")
    n_rounds = 1
    for name, cost in costs.items():
        rounds = list(cost) if isinstance(cost, (list, tuple)) else [cost]
        n_rounds = len(rounds)
        secs = np.median(np.stack([to_numpy(c.seconds) for c in rounds]), axis=0) * 1000
        width = min(smooth, len(secs))
        # each mean drawn at the last step it covers: the x-axis counts steps as the cache-size panel does
        axes[0].plot(np.arange(width - 1, len(secs)), np.convolve(secs, np.ones(width) / width, mode="valid"),
                     label=name)
        axes[1].plot(to_numpy(rounds[0].cache_bytes) / 2**20, label=name)
        n_steps = len(secs)
    if timed_steps:
        axes[0].axvspan(n_steps - timed_steps, n_steps - 1, color="grey", alpha=0.12, lw=0,
                        label=f"timed: last {timed_steps} steps")
    # the mean over the last ``smooth`` steps belongs in the caption: a longer label is cut at the figure's edge
    axes[0].set_ylabel(f"ms per token (median of {n_rounds} rounds)" if n_rounds > 1 else "ms per token")
    axes[1].set_ylabel("KV cache (MiB)")
    for ax in axes:
        ax.set_xlabel("tokens generated")
    axes[0].legend()
    return titled(fig, title)


def quantization_bars(table: Mapping[str, Mapping[str, tuple[float, float, float]]], title: str = "") -> Figure:
    """Perplexity relative to full precision per bit-width (linear y), quantising everything vs keeping the sinks.

    ``table``: {bit-width: {kind: (ratio, low, high)}} with ratio = ppl / ppl(full precision) and its interval
    (:func:`sinklib.core.evaluation.ppl_ratio_interval`), drawn as error bars.
    """
    bits = list(table)
    kinds = list(next(iter(table.values())))
    fig, ax = plt.subplots(figsize=(7.0, 3.4), layout="constrained")
    width = 0.8 / len(kinds)
    for i, kind in enumerate(kinds):
        xs = np.arange(len(bits)) + (i - (len(kinds) - 1) / 2) * width
        r = np.array([table[b][kind] for b in bits])  # (bits, 3)
        bars = ax.bar(xs, r[:, 0], width, label=kind, color=f"C{i}", yerr=[r[:, 0] - r[:, 1], r[:, 2] - r[:, 0]],
                      capsize=3, error_kw=dict(lw=0.8))
        ax.bar_label(bars, labels=[f"{v:.3f}" for v in r[:, 0]], fontsize=7, padding=6)
    ax.axhline(1, ls="--", color="grey", lw=1, label="full precision")
    lows = min(v[1] for row in table.values() for v in row.values())
    highs = max(v[2] for row in table.values() for v in row.values())
    span = highs - min(lows, 1)
    ax.set_ylim(min(0.98, lows - 0.02), highs + 0.2 * span + 0.03)  # headroom for the value labels
    ax.set_xticks(range(len(bits)), bits), ax.set_ylabel("perplexity / full precision")
    fig.legend(loc="outside right center", fontsize=8)
    return titled(fig, title)


def key_mass_before_after(before, after, sink_keys: Sequence[int], title: str = "", min_queries: int = 1,
                          edge_keys: Sequence[int] = ()) -> Figure:
    """Attention each key receives per query that sees it, sum_t A[t, j] / (T - j), before and after an edit.

    before, after: (T, T) one head's attention; ``sink_keys``: the columns the edit treats as sinks (marked);
    ``edge_keys``: keys whose score passes the threshold but that fewer than ``min_queries`` queries see (the window's
    end: an average of a handful of weights), marked apart and not counted as sinks; the edge is shaded.
    One line per condition shows, at a glance, how much each key lost or gained -- a whole T x T map would not.
    """
    b, a = to_numpy(before), to_numpy(after)
    T = b.shape[-1]
    seen = T - np.arange(T)  # queries that see key j under a causal mask
    mb, ma = b.sum(0) / seen, a.sum(0) / seen
    fig, ax = plt.subplots(figsize=(7.5, 3.2), layout="constrained")
    if min_queries > 1:
        ax.axvspan(T - min_queries + 0.5, T - 0.5, color="grey", alpha=0.15, lw=0,
                   label=f"seen by < {min_queries} queries")
    ax.semilogy(mb, color="grey", lw=1.2, label="before")
    ax.semilogy(ma, color="C0", lw=1.2, label="after")
    ax.scatter([0], [mb[0]], color="black", zorder=5, s=18, label="first token")
    if len(sink_keys):
        ks = np.asarray(sink_keys)
        ax.scatter(ks, mb[ks], marker="v", color="#D55E00", zorder=5, s=22, label="treated as sinks (before)")
        ax.scatter(ks, ma[ks], marker="^", color="C0", zorder=5, s=22, label="same keys, after")
    if len(edge_keys):
        ks = np.asarray(edge_keys)
        ax.scatter(ks, mb[ks], marker="x", color="grey", zorder=5, s=22,
                   label=f"above the threshold, but < {min_queries} queries: not sinks")
    ax.set_xlabel("key position j"), ax.set_ylabel("sum_t A[t, j] / (T - j)")
    fig.legend(loc="outside right center", fontsize=8)
    return titled(fig, title)


# ------------------------------------------------------------------------------------ captions from what is drawn
def sink_sweep_caption(fig: Figure, budget: int, title: str, relative_to: int = 4) -> str:
    """The caption of :func:`sink_sweep`'s figure: what is on each axis (the y-axis normalised to ``relative_to``
    sinks) and, from :func:`describe_drawn`, every line and marker as drawn."""
    return (f"Perplexity after the cache fills ({budget} tokens) of {title} against the number of sink tokens kept, "
            f"each curve divided by its own perplexity with {relative_to} sinks (y-axis, log scale: 1 = as good as "
            f"{relative_to} sinks), beside StreamingLLM's Table 2 (PG19); the newline tokens are prepended to the "
            f"text and divided by the text's own {relative_to} sinks. Drawn: {describe_drawn(fig)}.")
