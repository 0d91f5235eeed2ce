"""Figures of the interpretation notebook (the structural-origin chain and the bias view).

Same rules as :mod:`sinklib.core.plotting`: numbers in, a Figure out, nothing saved or shown here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from sinklib.core.plotting import OUTLINE_COLOR, SINK_COLOR, outline_column, titled, to_numpy


def variance_by_position(before, after, layers: Sequence[int], title: str = "") -> Figure:
    """Per-position variance of head outputs before W_O (left) and after W_O (right), one line per layer, each
    divided by its value at t = 0, with the 1/(t+1) an average of t+1 independent values would give (dashed)."""
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.2), sharex=True, sharey=True, layout="constrained")
    for ax, data, name in zip(axes, (to_numpy(before), to_numpy(after)), ("before W_O (head outputs)", "after W_O")):
        T = data.shape[-1]
        for row, layer in zip(data, layers):
            ax.semilogy(row / row[0], label=f"layer {layer}")
        ax.semilogy(1.0 / (np.arange(T) + 1), "--", color="black", lw=1, label="1/(t+1)")
        ax.set_title(name), ax.set_xlabel("position t")
    axes[0].set_ylabel("Var at t / Var at t = 0")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center", fontsize=8)
    return titled(fig, title)


def super_neuron(by_position: Mapping[str, object], w_down, label: str, massive_dims: Sequence[int] = (),
                 top: int = 3) -> Figure:
    """A super neuron: |activation| by position, cosine of the normalised input with its gate/up rows by position,
    and its W_down column by residual dimension (largest entries labelled; massive dimensions marked)."""
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 3.0))
    act = to_numpy(by_position["activation"])
    axes[0].semilogy(act, "o-", ms=2.5, color=SINK_COLOR)
    axes[0].set_xlabel("position t"), axes[0].set_ylabel("mean |activation|"), axes[0].set_title("activation")
    for key, name in (("cos_gate", "gate row"), ("cos_up", "up row")):
        if key in by_position:
            axes[1].plot(to_numpy(by_position[key]), "o-", ms=2.5, label=name)
    axes[1].axhline(0, color="grey", lw=0.8)
    axes[1].set_xlabel("position t"), axes[1].set_ylabel("cos(x_t, w)"), axes[1].set_title("alignment")
    axes[1].legend()
    w = np.abs(to_numpy(w_down))
    axes[2].plot(w, lw=0.7, color="grey")
    for rank, d in enumerate(np.argsort(-w)[:top]):
        color = SINK_COLOR if d in massive_dims else "black"
        axes[2].annotate(f"dim {d}", (d, w[d]), textcoords="offset points", xytext=(4, -2 + 9 * rank), fontsize=7,
                         color=color)
        axes[2].plot([d], [w[d]], "o", ms=3, color=color)
    axes[2].set_xlabel("residual dimension"), axes[2].set_ylabel("|W_down[:, n]|"), axes[2].set_title("write")
    fig.suptitle(label)
    return fig


def disparity_chain(chain: Mapping[str, object], onset: Sequence[int] = (), title: str = "",
                    super_layer: int | None = None) -> Figure:
    """Three aligned panels per layer l (0-based): DomRatio of h^l (the residual after layer l) and of RMSNorm(h^l)
    (the same state as layer l+1's attention reads it), the residual norm |h^l|, and alpha of the first token in
    layer l; dotted lines at the layers where the massive activation appears or jumps; a solid line at the super
    neuron's layer, when given."""
    fig, axes = plt.subplots(3, 1, figsize=(7.5, 6.5), sharex=True)
    c = {k: to_numpy(v) for k, v in chain.items()}
    axes[0].semilogy(c["dom_first"], "o-", ms=3, color=SINK_COLOR, label="first token: $h^l$")
    axes[0].semilogy(c["dom_normed_first"], "^--", ms=3, color=SINK_COLOR, alpha=0.6,
                     label="first token: RMSNorm($h^l$), input of layer l+1")
    (rest,) = axes[0].semilogy(c["dom_rest"], "s-", ms=3, label="other tokens: $h^l$")
    axes[0].semilogy(c["dom_normed_rest"], "v--", ms=3, alpha=0.6, color=rest.get_color(),
                     label="other tokens: RMSNorm($h^l$)")
    axes[0].set_ylabel("DomRatio")
    axes[0].legend(ncols=2, fontsize="small", loc="lower left", bbox_to_anchor=(0, 1.0), frameon=False)
    if super_layer is not None:
        for ax in axes:
            ax.axvline(super_layer, color=SINK_COLOR, lw=1.5, alpha=0.35)
        axes[0].annotate(" super neuron", (super_layer, 1), xycoords=("data", "axes fraction"), va="top",
                         color=SINK_COLOR, fontsize="small")
    axes[1].semilogy(c["norm_first"], "o-", ms=3, color=SINK_COLOR, label="first token")
    axes[1].semilogy(c["norm_rest"], "s-", ms=3, label="other tokens")
    axes[1].set_ylabel("|h| (residual norm)"), axes[1].legend()
    axes[2].plot(c["alpha_first"], "o-", ms=3, color=SINK_COLOR)
    axes[2].axhline(0.3, ls="--", lw=1, color="grey")
    axes[2].set_ylabel("alpha of the first token"), axes[2].set_xlabel("layer l (0-based; $h^l$ = residual after it)")
    axes[2].set_ylim(0, 1)
    for ax in axes:
        for layer in onset:
            ax.axvline(layer, ls=":", color="black", lw=1)
    for i, layer in enumerate(onset):  # say what the dotted lines are, once, in the bottom panel
        axes[2].annotate("massive value\nappears" if i == 0 else "jumps", (layer, 0.97 - 0.3 * (i % 3)),
                         xycoords=("data", "axes fraction"), xytext=(3, 0), textcoords="offset points", va="top",
                         fontsize=7, color="black")
    return titled(fig, title)


def lock_in(cos, positive, alpha, title: str = "") -> Figure:
    """Per head: |cos(top query direction, k_0)| and the fraction of positive q_t . k_0 against the head's alpha_0."""
    a, c, p = to_numpy(alpha).ravel(), to_numpy(cos).ravel(), to_numpy(positive).ravel()
    layers = np.repeat(np.arange(to_numpy(alpha).shape[0]), to_numpy(alpha).shape[1])
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.2), sharex=True)
    for ax, y, name in zip(axes, (c, p), ("|cos(top query direction, k_0)|", "fraction of q_t . k_0 > 0")):
        sc = ax.scatter(a, y, c=layers, s=10, cmap="viridis")
        ax.axvline(0.3, ls="--", lw=1, color="grey")  # eps: heads to the right are sink heads
        ax.set_xlabel("alpha of the first token (head)"), ax.set_ylabel(name)
    fig.colorbar(sc, ax=axes, label="layer")
    return titled(fig, title)


def attention_before_after(before, after, key: int, title: str = "", floor: float = 1e-3) -> Figure:
    """One head's attention map before and after an intervention; columns 0 and ``key`` outlined."""
    fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.8), layout="constrained")
    norm = LogNorm(vmin=floor, vmax=1.0)
    for ax, A, name in zip(axes, (to_numpy(before), to_numpy(after)), ("before", "after")):
        T = A.shape[-1]
        masked = np.ma.masked_where(np.triu(np.ones((T, T), bool), 1), np.clip(A, floor, 1))
        im = ax.imshow(masked, norm=norm, interpolation="nearest")
        for col, color in ((0, OUTLINE_COLOR), (key, "#7CFC00")):  # cyan / lime: colours magma never takes
            outline_column(ax, col, T, color)
        ax.set_title(name), ax.set_xlabel("key"), ax.set_ylabel("query"), ax.grid(False)
    fig.colorbar(im, ax=axes, shrink=0.8, label="attention (log)")
    return titled(fig, title)


def alpha_before_after(series: Mapping[str, Sequence[float]], key: int, title: str = "") -> Figure:
    """alpha_key per layer (mean over heads) for several conditions (before / after interventions)."""
    fig, ax = plt.subplots(figsize=(7.0, 3.0))
    for name, vals in series.items():
        ax.plot(to_numpy(vals), "o-", ms=3, label=name)
    ax.axhline(0.3, ls="--", lw=1, color="grey", label="eps = 0.3")
    ax.set_xlabel("layer"), ax.set_ylabel(f"alpha of position {key}\n(mean over heads)"), ax.set_ylim(0, 1)
    ax.legend()
    return titled(fig, title, ax)


def lambda_sweep(lambdas: Sequence[float], curves: Mapping[str, Sequence[float]], key: int, title: str = "") -> Figure:
    """Sink score at position ``key`` against the amplification lambda (log x), one line per mode."""
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    for name, vals in curves.items():
        ax.semilogx(lambdas, vals, "o-", ms=4, label=name, base=2)
    ax.axhline(0.3, ls="--", lw=1, color="grey", label="eps = 0.3 (a sink head)")
    ax.set_xlabel("lambda"), ax.set_ylabel(f"attention of later queries to position {key}\n(mean over heads of "
                                            "later layers)")
    ax.legend()
    return titled(fig, title, ax)


def perplexity_label(value: float) -> str:
    """A perplexity as a bar label: 4 significant digits, thousands separators past 1,000, never an exponent
    (31.35, 1,368,146); "inf (off scale)" for an infinite one, "" for a missing one (NaN)."""
    if np.isnan(value):
        return ""
    if np.isinf(value):
        return "inf (off scale)"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def perplexities(values: Mapping[str, float], title: str = "", reference: Mapping[str, float] | None = None,
                 reference_label: str = "paper") -> Figure:
    """Perplexity per condition relative to the original model (log y), measured beside a published reference.

    ``values`` must contain "original"; ``reference`` maps the same condition names to published perplexities
    (conditions it lacks get no bar). Ratios put a 7B model on WikiText and a small model on other text on one axis;
    the bar labels print the perplexities themselves (:func:`perplexity_label`). An infinite perplexity has no height
    on any axis: its bar is clipped at the axis top -- the axis ends 8x above the largest finite ratio -- and marked
    by an upward arrow and "inf (off scale)", so it never reads as a finite value.
    """
    names = list(values)
    groups = {"measured": values, **({reference_label: reference} if reference else {})}
    ratios = {g: [v.get(n, np.nan) / v["original"] for n in names] for g, v in groups.items()}
    finite = [r for rs in ratios.values() for r in rs if np.isfinite(r)]
    top = max(finite) * 8 if finite else 10.0
    fig, ax = plt.subplots(figsize=(7.8, 3.4), layout="constrained")
    width = 0.8 / len(groups)
    clipped = False
    for i, (g, rs) in enumerate(ratios.items()):
        xs = np.arange(len(names)) + (i - (len(groups) - 1) / 2) * width
        heights = [top if np.isinf(r) else r for r in rs]
        bars = ax.bar(xs, heights, width, label=g, color="#0072B2" if i == 0 else "#BBBBBB",
                      hatch=None if i == 0 else "//", edgecolor="white")
        raw = [groups[g].get(n, np.nan) for n in names]
        ax.bar_label(bars, labels=["" if np.isinf(v) else perplexity_label(v) for v in raw], fontsize=7)
        for x, v in zip(xs, raw):
            if np.isinf(v):  # the clipped bar: an arrow past the axis top and its label below it, inside the axes
                clipped = True
                ax.plot([x], [top], marker="^", ms=8, color="black", clip_on=False, zorder=5)
                ax.annotate(perplexity_label(v), xy=(x, top), xytext=(0, -12), textcoords="offset points",
                            ha="center", va="top", fontsize=7, rotation=90,
                            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "none", "alpha": 0.85})
    if clipped:
        ax.plot([], [], ls="none", marker="^", ms=6, color="black", label="infinite: bar clipped at the axis top")
    ax.axhline(1, color="grey", lw=0.8, ls=":")
    ax.set_yscale("log"), ax.set_ylabel("perplexity / original (log)\n(labels: the perplexities)")
    ax.set_ylim(top=top)
    ax.set_xticks(range(len(names)), [n.replace(", ", ",\n") for n in names], fontsize=8)
    fig.legend(loc="outside right center", fontsize=8)
    return titled(fig, title)


def sink_as_bias(value_norm_ratio, sink_term_spread, alpha, title: str = "") -> Figure:
    """Per head against alpha_0: the sink's value norm relative to other tokens', and the spread of its term
    c_t = A_t0 v_0 over queries relative to the term's size (0 = a constant vector, an exact bias)."""
    a = to_numpy(alpha).ravel()
    sink = a > 0.3
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.4), sharex=True, layout="constrained")
    panels = ((value_norm_ratio, "|v_0| / mean_j |v_j|", 1.0), (sink_term_spread, "spread of c_t / |c_t|  (c_t = A_t0 v_0)",
                                                                None))
    for ax, (vals, label, ref) in zip(axes, panels):
        v = to_numpy(vals).ravel()
        ax.scatter(a[~sink], v[~sink], s=10, color="grey", alpha=0.6, label="other heads")
        ax.scatter(a[sink], v[sink], s=10, color=SINK_COLOR, label="sink heads (alpha > 0.3)")
        if ref is not None:
            ax.axhline(ref, color="grey", lw=0.8, ls=":")
        ax.set_ylabel(label)
        ax.set_xlabel("alpha of the first token (head)")
        ax.axvline(0.3, ls="--", lw=1, color="grey")  # eps: heads to the right are sink heads
    axes[1].legend(loc="best", fontsize=8)
    return titled(fig, title)
