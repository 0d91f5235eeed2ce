"""Figure functions: take computed numbers, return a :class:`~matplotlib.figure.Figure`.

They never save, show or touch global rcParams; wrap calls in :func:`style` for the house style and write with
:func:`save`, which is atomic (temporary file, then rename) and writes the caption beside the image.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

if not os.environ.get("MPLBACKEND") and "ipykernel" not in sys.modules:
    matplotlib.use("Agg")  # scripts and tests draw headless; a notebook kernel keeps its inline backend
import matplotlib.collections  # noqa: E402
import matplotlib.patches  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.text  # noqa: E402
import matplotlib.ticker  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from sinklib.core.paths import STYLE, atomic_write_bytes  # noqa: E402

SINK_COLOR = "#D55E00"
VERDICT_COLOURS = {"holds": "#009E73", "does NOT hold": "#D55E00", "unsettled": "#E69F00",
                   "cannot be judged here": "#999999"}  # one colour per claim verdict, in every figure and the gallery
OUTLINE_COLOR = "#00C8FF"  # outlines on attention maps: a cyan that the magma colour map never takes


@contextlib.contextmanager
def style():
    """Apply sinklib's style sheet for the duration of a ``with`` block.

    The one rcParam kept from inside the block is ``interactive``: a notebook's inline backend loads with the first
    figure and switches it on, and restoring it would stop every later figure from being shown inline."""
    interactive = matplotlib.is_interactive()
    try:
        with plt.style.context(STYLE):
            try:
                yield
            finally:
                interactive = matplotlib.is_interactive()
    finally:
        matplotlib.interactive(interactive)


def save(fig: Figure, path: str | Path, caption: str = "", formats: Sequence[str] = ("png", "pdf")) -> list[Path]:
    """Write ``fig`` as ``path.{png,pdf}`` plus ``path.txt`` (the caption the gallery shows) and ``path.title.txt``
    (the figure's suptitle, else its first axes title: the gallery's heading for it), each atomically. (The smoke
    tests lint every saved figure's layout and caption: ``tests/figure_lint.py``.)"""
    path = Path(path)
    written = []
    for fmt in formats:
        target = path.with_suffix(f".{fmt}")
        with tempfile.SpooledTemporaryFile() as buf:
            fig.savefig(buf, format=fmt)
            buf.seek(0)
            atomic_write_bytes(target, buf.read())
        written.append(target)
    if caption:
        atomic_write_bytes(path.with_suffix(".txt"), caption.strip().encode() + b"\n")
    title = figure_title(fig)
    if title:
        atomic_write_bytes(path.with_name(path.name + ".title.txt"), title.encode() + b"\n")
    return written


def figure_title(fig: Figure) -> str:
    """The figure's suptitle, else the first non-empty axes title, on one line ("" when it has neither)."""
    texts = [fig.get_suptitle()] + [ax.get_title() for ax in fig.axes]
    return next((" ".join(t.split()) for t in texts if t and t.strip()), "")


def titled(fig: Figure, title: str, ax=None) -> Figure:
    """``fig`` with ``title`` on top -- the figure's suptitle, or ``ax``'s title when given -- unless it is empty."""
    if title:
        (ax.set_title if ax is not None else fig.suptitle)(title)
    return fig


def to_numpy(x) -> np.ndarray:
    """A tensor (any device, any dtype) or array-like as a float NumPy array, for matplotlib."""
    return x.detach().cpu().float().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=float)


def outline_column(ax, col: int, T: int, color: str, top: int | None = None) -> None:
    """Outline key column ``col`` of a (T, T) map from row ``top`` (default: ``col``, the first query that sees it)
    down, with a thin line drawn outside the column (on its neighbours' edges), so the outline never covers the
    column's own cells."""
    top = col if top is None else top
    pad = 0.3  # the outline's distance outside the column, in cells
    ax.add_patch(plt.Rectangle((col - 0.5 - pad, top - 0.5 - pad), 1 + 2 * pad, T - top + 2 * pad, fill=False,
                               ec=color, lw=0.8, clip_on=False))


def draw_attention(ax, A: np.ndarray, norm: LogNorm) -> object:
    """One causal (T, T) attention map on ``ax``: upper triangle blank, values clipped to ``norm``'s range, the
    first-key column outlined; returns the image (for a colour bar)."""
    T = A.shape[-1]
    masked = np.ma.masked_where(np.triu(np.ones((T, T), bool), 1), np.clip(A, norm.vmin, norm.vmax))
    im = ax.imshow(masked, norm=norm, interpolation="nearest")
    outline_column(ax, 0, T, OUTLINE_COLOR)
    ax.set_xticks([]), ax.set_yticks([]), ax.grid(False)
    return im


def token_label(token: str, width: int = 8) -> str:
    """A token as a readable tick label: a newline as "\\n", a tab as "\\t", a leading space as "_" (so " the"
    and "the" differ), a token of spaces only as that many "_" (never an empty label); cut to ``width`` characters."""
    text = token.replace("\n", "\\n").replace("\t", "\\t")
    if text and not text.strip(" "):
        return ("_" * len(text))[:width]
    return ("_" + text[1:] if text.startswith(" ") else text)[:width]


def attention_grid(
    maps, layers: Sequence[int], heads: Sequence[int], tokens: Sequence[str] | None = None, title: str = "",
    floor: float = 1e-3,
) -> Figure:
    """Grid of attention maps (rows: layers, columns: heads), log colour scale, first-key column outlined.

    maps: (len(layers), H, T, T) probabilities; ``heads`` picks the columns shown.
    """
    A = to_numpy(maps)
    T = A.shape[-1]
    labelled = tokens is not None and T <= 32
    # inches per panel: room for one readable 6-pt label per token (8.5 pt a row), at least 2.6
    side = max(2.6, T * 8.5 / 72 + 0.2) if labelled else 1.9
    fig, axes = plt.subplots(len(layers), len(heads), figsize=(side * len(heads) + 1.4, side * len(layers)),
                             squeeze=False, layout="constrained")
    norm = LogNorm(vmin=floor, vmax=1.0)
    im = None
    names = [token_label(t) for t in tokens] if labelled else None
    for r, layer in enumerate(layers):
        for c, head in enumerate(heads):
            ax = axes[r, c]
            im = draw_attention(ax, A[r, head], norm)
            if r == 0:
                ax.set_title(f"head {head}")
            if c == 0:
                ax.set_ylabel(f"layer {layer}\nquery")
                if labelled:
                    ax.set_yticks(range(T), names, fontsize=6)
            if r == len(layers) - 1:
                ax.set_xlabel("key")
                if labelled:
                    ax.set_xticks(range(T), names, rotation=90, fontsize=6)
    fig.colorbar(im, ax=axes, shrink=0.6, label="attention probability (log)")
    return titled(fig, title)


def alpha_heatmap(alphas, title: str = "", eps: float | None = 0.3, key_label: str = "first token") -> Figure:
    """Layer x head heatmap of alpha_k (mean attention to key k); cells above ``eps`` are dotted."""
    a = to_numpy(alphas)  # (L, H)
    L, H = a.shape
    fig, ax = plt.subplots(figsize=(min(1.0 + 0.45 * H, 8), 1.2 + 0.17 * L))
    im = ax.imshow(a, aspect="auto", vmin=0, vmax=1, cmap="viridis", interpolation="nearest")
    if eps is not None:
        ys, xs = np.nonzero(a > eps)
        ax.scatter(xs, ys, s=4, c="white", marker="o", lw=0)
    ax.set_xlabel("head" + (f"   (white dots: alpha > {eps})" if eps is not None else "")), ax.set_ylabel("layer")
    ax.grid(False)
    ax.set_xticks(range(H)), ax.set_yticks(range(0, L, max(1, L // 10)))
    fig.colorbar(im, ax=ax, label=f"alpha of the {key_label}")
    return titled(fig, title, ax)


def sink_rate_bars(measured: Mapping[str, float], label: str, references: Mapping[str, Mapping[str, float]] | None = None,
                   title: str = "", eps: float = 0.3) -> Figure:
    """Sink rate per input type: the measured model beside published references (grouped bars, in %)."""
    kinds = list(measured)
    groups = {label: measured, **(references or {})}
    width = 0.8 / len(groups)
    fig, ax = plt.subplots(figsize=(3.2 + 1.6 * len(kinds), 3.2), layout="constrained")
    for i, (name, rates) in enumerate(groups.items()):
        xs = np.arange(len(kinds)) + (i - (len(groups) - 1) / 2) * width
        vals = [100 * rates.get(k, np.nan) for k in kinds]
        bars = ax.bar(xs, vals, width, label=name, alpha=1.0 if i == 0 else 0.6,
                      edgecolor="black" if i == 0 else "none", lw=0.8)
        # every bar gets its number, and a zero is written as 0 (a bar of height 0 is otherwise invisible)
        ax.bar_label(bars, labels=["0" if v == 0 else f"{v:.0f}" for v in vals], fontsize=6, padding=1,
                     fontweight="bold" if i == 0 else "normal")
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel(f"sink rate (%, alpha > {eps})"), ax.set_ylim(0, 112)
    fig.legend(loc="outside right center", fontsize=8)
    return titled(fig, title)


def massive_by_layer(values: Sequence[float], medians: Sequence[float], dims: Sequence[int], title: str = "",
                     min_abs: float = 100.0, min_ratio: float = 1000.0) -> Figure:
    """Largest |activation| per layer vs the median |activation| of its layer's output (Sun et al.'s median, over
    the sequence that holds it), labelled with its dimension.

    Dashed lines: Sun et al.'s thresholds (|h| > 100, and ``min_ratio`` x median as a per-layer marker).
    """
    v, m = np.abs(np.asarray(values, float)), np.asarray(medians, float)
    layers = np.arange(len(v))
    fig, ax = plt.subplots(figsize=(8.5, 3.4), layout="constrained")
    ax.semilogy(layers, v, "o-", ms=3, label="largest |h| in the layer")
    ax.semilogy(layers, m, "s-", ms=3, label="median |h| of the layer, on the sequence\nthat holds its largest |h|")
    ax.semilogy(layers, m * min_ratio, ":", lw=1, color="grey", label=f"{min_ratio:g} x median")
    ax.axhline(min_abs, ls="--", lw=1, color="grey", label=f"|h| = {min_abs:g}")
    # one label per run of layers that share the dimension, at the run's largest value; runs of one layer between
    # others are left to the legend's colour so that labels never sit on top of each other
    runs, start = [], 0
    for i in range(1, len(dims) + 1):
        if i == len(dims) or dims[i] != dims[start]:
            runs.append((start, i))
            start = i
    last_x = -10.0
    for a, b in runs:
        i = a + int(np.argmax(v[a:b]))
        if b - a < 2 and len(runs) > 3 or i - last_x < 2.5:
            continue
        side = "left" if i == 0 else "right" if i == len(v) - 1 else "center"  # clear of the axes' frame
        ax.annotate(f"dim {dims[i]}", (i, v[i]), textcoords="offset points",
                    xytext={"left": (3, 7), "right": (-3, 7), "center": (0, 7)}[side], fontsize=7, ha=side,
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8), zorder=5)
        last_x = i
    ax.set_ylim(top=ax.get_ylim()[1] * 4)  # headroom for the labels
    ax.set_xlabel("layer (residual stream after the block)"), ax.set_ylabel("|activation|")
    fig.legend(loc="outside right center", fontsize=8)
    return titled(fig, title)


def dom_ratio_by_layer(first: Sequence[float], rest: Sequence[float], title: str = "") -> Figure:
    """DomRatio = max|h| / mean|h| per layer for the first token vs the mean over the other tokens (log y)."""
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    ax.semilogy(first, "o-", ms=3, color=SINK_COLOR, label="first token")
    ax.semilogy(rest, "s-", ms=3, label="other tokens (mean)")
    ax.set_xlabel("layer"), ax.set_ylabel("DomRatio = max|h| / mean|h|")
    ax.legend()
    return titled(fig, title, ax)


def alpha_by_layer(series: Mapping[str, Sequence[float]], title: str = "", eps: float | None = 0.3,
                   uniform: float | None = None) -> Figure:
    """Mean alpha of the first token per layer, one line per input type (or model); dashed: eps; dotted: what uniform
    causal attention would give the first token (``uniform``, e.g. H_T / T)."""
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    for name, vals in series.items():
        ax.plot(vals, "o-", ms=3, label=name)
    if eps is not None:
        ax.axhline(eps, ls="--", lw=1, color="grey", label=f"eps = {eps}")
    if uniform is not None:
        ax.axhline(uniform, ls=":", lw=1, color="black", label=f"uniform attention ({uniform:.3f})")
    ax.set_xlabel("layer"), ax.set_ylabel("alpha of the first token\n(mean over heads, sequences)"), ax.set_ylim(0, 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)  # beside the axes, never over the data
    return titled(fig, title, ax)


def long_context_benchmark(rows: Sequence[Mapping], model: str, target_ratio: float = 1.2) -> Figure:
    """Peak memory (left) and forward time relative to plain sdpa (right) against context length for eager
    output_attentions and sinklib's statistics (first token only; every key); a dotted line marks the time target.
    rows as written by ``benchmarks/long_context.py``."""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.2), layout="constrained")
    series = (("sdpa", "(a) sdpa forward", "o"), ("eager", "(b) eager output_attentions", "s"),
              ("stats", "(c) sinklib, first token", "^"), ("stats_all", "(d) sinklib, every key", "v"))
    for i, (key, name, marker) in enumerate(series):
        pts = [(r["N"], r[key], r["sdpa"]) for r in rows if r.get(key) and r.get("sdpa")]
        if not pts:
            continue
        ns = [n for n, _, _ in pts]
        axes[0].loglog(ns, [m["peak_rss"] / 2**30 for _, m, _ in pts], marker + "-", ms=4, label=name, base=2,
                       color=f"C{i}")
        axes[1].semilogx(ns, [m["seconds"] / a["seconds"] for _, m, a in pts], marker + "-", ms=4, label=name,
                         base=2, color=f"C{i}")
    axes[1].axhline(target_ratio, ls=":", color="grey", label=f"target {target_ratio}x")
    axes[0].set_ylabel("peak RSS (GiB)"), axes[1].set_ylabel("forward time / sdpa's")
    for ax in axes:
        ax.set_xlabel("context length N")
    axes[0].legend(fontsize=7), axes[1].legend(fontsize=7)
    fig.suptitle(f"Sink statistics at long context, {model}")
    return fig


def mass_vs_context(lengths: Sequence[int], series: Mapping[str, Sequence[float]],
                    baseline: Sequence[float] | None = None, title: str = "",
                    spread: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None) -> Figure:
    """First-token attention mass against context length (log x, log y), one line per series (e.g. layer groups).

    ``baseline`` (dashed) is what uniform causal attention would give -- on a linear axis it would sit on zero;
    ``spread``: {series: (lowest, highest)} over the windows measured at each length, drawn as a band.
    """
    fig, ax = plt.subplots(figsize=(7.2, 3.4), layout="constrained")
    for i, (name, vals) in enumerate(series.items()):
        ax.loglog(lengths, vals, "o-", ms=4, label=name, base=2, color=f"C{i}")
        if spread and name in spread:
            lo, hi = spread[name]
            ax.fill_between(lengths, lo, hi, color=f"C{i}", alpha=0.2, lw=0)
    if baseline is not None:
        ax.loglog(lengths, baseline, "--", color="grey", label="uniform attention, ~ln N / N", base=2)
    ax.set_xlabel("context length N (tokens)"), ax.set_ylabel("alpha of the first token (log)")
    ax.set_xticks(list(lengths), [str(n) for n in lengths])
    ax.set_yscale("log", base=10)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.set_ylim(top=1.0)
    fig.legend(loc="outside right center", fontsize=8)
    return titled(fig, title)
