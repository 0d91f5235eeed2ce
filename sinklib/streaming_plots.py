"""Figures of the utilization notebook: streaming perplexity, sink-count sweep, decode cost, KV quantisation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from sinklib.plotting import _np


def streaming_curves(curves: Mapping[str, object], points: Mapping[str, tuple] | None = None, budget: int | None = None,
                     n_sink: int | None = None, title: str = "", note: str = "") -> Figure:
    """Running perplexity against tokens seen (log y), one line per method, StreamingLLM style.

    ``points``: methods evaluated on a subsample, as {name: (positions, running_ppl)}; ``budget``: the cache size,
    marked where eviction starts.
    """
    fig, ax = plt.subplots(figsize=(7.5, 3.4))
    for name, curve in curves.items():
        y = _np(curve)
        ax.semilogy(np.arange(1, len(y) + 1), y, lw=1.3, label=name)
    for name, (xs, ys) in (points or {}).items():
        ax.semilogy(np.asarray(xs) + 1, _np(ys), "k.", ms=3, label=name)
    if budget is not None:
        ax.axvline(budget, ls=":", color="grey", lw=1)
        ax.annotate(f"cache full ({budget})", (budget, ax.get_ylim()[1]), fontsize=7, va="top", ha="left")
    ax.set_xlabel("tokens seen"), ax.set_ylabel("running perplexity")
    ax.legend(loc="upper right", ncols=2)
    if note:
        ax.text(0.01, 0.02, note, transform=ax.transAxes, fontsize=7, color="dimgrey")
    if title:
        ax.set_title(title)
    return fig


def sink_sweep(n_sinks: Sequence[int], values: Sequence[float], reference: Mapping[str, Sequence[float]] | None = None,
               extra: Mapping[str, float] | None = None, title: str = "") -> Figure:
    """Perplexity against the number of sink tokens kept (log y), with published curves for comparison."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    ax.semilogy(range(len(n_sinks)), values, "o-", lw=2, label="measured")
    for name, ref in (reference or {}).items():
        ax.semilogy(range(len(ref)), ref, "s--", ms=3, alpha=0.6, label=name)
    for i, (name, val) in enumerate((extra or {}).items()):
        ax.axhline(val, ls=":", lw=1, color=f"C{4 + i}", label=name)
    ax.set_xticks(range(len(n_sinks)), [str(n) for n in n_sinks])
    ax.set_xlabel("sink tokens kept"), ax.set_ylabel("perplexity")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    return fig


def decode_cost(costs: Mapping[str, object], title: str = "", smooth: int = 32) -> Figure:
    """Per generated token: wall time (moving average over ``smooth`` steps) and KV-cache size, per method."""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.0), sharex=True)
    for name, cost in costs.items():
        secs = _np(cost.seconds) * 1000
        kernel = np.ones(min(smooth, len(secs))) / min(smooth, len(secs))
        axes[0].plot(np.convolve(secs, kernel, mode="valid"), label=name)
        axes[1].plot(_np(cost.cache_bytes) / 2**20, label=name)
    axes[0].set_ylabel(f"ms per token (mean of {smooth})"), axes[1].set_ylabel("KV cache (MiB)")
    for ax in axes:
        ax.set_xlabel("tokens generated")
    axes[0].legend()
    if title:
        fig.suptitle(title)
    return fig


def quantization_bars(table: Mapping[str, Mapping[str, float]], baseline: float, title: str = "") -> Figure:
    """Perplexity per bit-width, quantising everything vs keeping the sink tokens in full precision."""
    bits = list(table)
    kinds = list(next(iter(table.values())))
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    width = 0.8 / len(kinds)
    for i, kind in enumerate(kinds):
        xs = np.arange(len(bits)) + (i - (len(kinds) - 1) / 2) * width
        bars = ax.bar(xs, [table[b][kind] for b in bits], width, label=kind)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axhline(baseline, ls="--", color="grey", lw=1, label=f"full precision ({baseline:.2f})")
    ax.set_xticks(range(len(bits)), bits), ax.set_ylabel("perplexity"), ax.set_yscale("log")
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    return fig
