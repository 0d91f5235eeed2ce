"""Figures of ``12_mllm``: the stand-in's training, where text queries look, visual sink tokens, masking and VAR."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from sinklib.architectures.mllm.image_layout import ImageLayout
from sinklib.core.images import display
from sinklib.core.plotting import OUTLINE_COLOR


def standin_training(losses: Sequence[float], accuracy: float, chance: float, n: int, title: str = "") -> Figure:
    """Did the projector learn? (a) caption loss per projector step; (b) held-out digit accuracy from caption
    likelihood vs chance."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained", width_ratios=(2, 1))
    ax.plot(np.arange(len(losses)), losses, color="#0072B2")
    ax.set(xlabel="projector step", ylabel="caption cross-entropy (nats)", title="(a) training the projector",
           ylim=(0, None))
    bars = bx.bar(["stand-in", "chance"], [accuracy, chance], color=["#0072B2", "grey"])
    bx.bar_label(bars, labels=[f"{v:.2f}" for v in (accuracy, chance)], padding=3, fontsize=8)
    bx.set(ylim=(0, 1.2), yticks=np.linspace(0, 1, 6), ylabel="accuracy",
           title=f"(b) {n} held-out digits: best of 10 captions")
    fig.suptitle(f"Did the projector learn? {title}".strip(), fontsize=10)
    return fig


def attention_shares(shares: torch.Tensor, n_before: int, n_image: int, title: str = "") -> Figure:
    """Per layer, where text queries' attention goes: the tokens before the image, the image tokens, the text."""
    fig, ax = plt.subplots(figsize=(9, 3.6), layout="constrained")
    layers = np.arange(len(shares))
    s = shares.numpy()
    ax.stackplot(layers, s[:, 0], s[:, 1], s[:, 2], colors=["#D55E00", "#0072B2", "#BBBBBB"],
                 labels=[f"before the image ({n_before} tokens, first token included)", f"image ({n_image} tokens)",
                         "text after the image (the queries themselves included)"])
    ax.set(xlabel="language-model layer", ylabel="share of text queries' attention", ylim=(0, 1),
           xlim=(0, len(layers) - 1), title=title or "Where text queries put their attention")
    fig.legend(loc="outside right center", fontsize=8)
    return fig


def _shown(picture: np.ndarray | torch.Tensor) -> np.ndarray:
    """An image for ``imshow``: normalised (3, S, S) pixels un-normalised (:func:`display`), an RGB array as is."""
    if isinstance(picture, torch.Tensor) and picture.dim() == 3 and picture.shape[0] == 3:
        return display(picture)
    return np.asarray(picture.cpu() if isinstance(picture, torch.Tensor) else picture)


def _measured(phi: torch.Tensor) -> list[int]:
    """Layers of phi (L, B, P) with at least one value measured."""
    return [i for i in range(phi.shape[0]) if not torch.isnan(phi[i]).all()]


def _below() -> dict:
    """Legend keywords: under the axes (below the x label), so it never covers data."""
    return dict(loc="upper center", bbox_to_anchor=(0.5, -0.2), fontsize=8, ncols=1)


def visual_sinks(phi: torch.Tensor, taus: Mapping[str, float], verdict_tau: float, ratio: Sequence[float | None],
                 picture: np.ndarray | torch.Tensor, example_phi: torch.Tensor, example_layer: int, title: str = "",
                 layout: ImageLayout | None = None,
                 others: Mapping[str, tuple[torch.Tensor, Sequence[float | None]]] | None = None,
                 ceiling: float | None = None, label: str = "this model") -> Figure:
    """(a) the largest phi of an image token per layer against each tau (dashed); (b) the fraction of image tokens
    with phi >= tau per layer, one line per tau; (c) attention a visual sink token (phi >= ``verdict_tau``)
    receives over a non-sink image token, per layer; (d) one image and (e) its tokens' phi at ``example_layer`` on
    the picture (:meth:`ImageLayout.picture`: tiles in place, a global view to the right), cells >= ``verdict_tau``
    outlined. phi: (L, B, P), all-NaN for layers not measured (skipped); taus: label -> threshold; ratio: (L,), None
    where not measured; picture: the image as handed to the model, RGB (H, W, 3) (uint8, or floats in [0, 1]), or
    normalised (3, S, S) pixels (:func:`sinklib.core.images.display`); example_phi: (P,); layout: where the P tokens
    lie (default: one square tile, P = g^2). ``others``: further models (e.g. the other stand-in seeds), label ->
    (phi (L, B', P), ratio (L,)), drawn beside ``label``'s in (a)-(c) (in (b) at ``verdict_tau``); ``ceiling``: the
    largest phi the width allows (sqrt(d)), a line in (a). Panel (c) says so when no model has a visual sink."""
    fig, axd = plt.subplot_mosaic([["a", "a", "b", "b", "c", "c"], [".", "d", "d", "e", "e", "."]],
                                  figsize=(14, 7.6), layout="constrained", height_ratios=(1, 1.1))
    ax, bx, cx, dx, ex = (axd[k] for k in "abcde")
    models = {label: (phi, ratio), **(others or {})}
    markers = ["o", "s", "^", "D", "v", "P"]
    colours = ["#D55E00", "#0072B2", "#009E73", "#CC79A7", "#E69F00", "#56B4E9"]
    tops = []
    for (name, (ph, _)), marker in zip(models.items(), markers):
        layers = _measured(ph)
        peak = [float(torch.nan_to_num(ph[i], nan=-np.inf).max()) for i in layers]
        tops += peak
        ax.plot(layers, peak, marker=marker, ms=4, color="black", alpha=1.0 if name == label else 0.55,
                label=f"largest phi of an image token, {name}")
    for (tau_label, tau), colour in zip(taus.items(), colours):
        verdict = " (verdict)" if tau == verdict_tau else ""
        ax.axhline(tau, color=colour, ls="--", lw=1.5 if verdict else 1, label=tau_label + verdict)
    if ceiling is not None:
        ax.axhline(ceiling, color="grey", ls=":", lw=1, label=f"ceiling sqrt(d) = {ceiling:.3g}")
    top = max([*taus.values(), *tops, ceiling or 0.0], default=1.0)
    ax.set(xlabel="layer", ylabel="phi", title="(a) image tokens' largest phi", ylim=(0, top * 1.1))
    ax.legend(**_below())
    layers = _measured(phi)
    for (tau_label, tau), colour in zip(taus.items(), colours):
        frac = [float((phi[i][~torch.isnan(phi[i])] >= tau).float().mean()) for i in layers]
        verdict = " (verdict)" if tau == verdict_tau else ""
        bx.plot(layers, frac, marker="o", ms=4, color=colour, label=f"{tau_label}{verdict}, {label}", clip_on=False)
    for (name, (ph, _)), marker in zip(list(models.items())[1:], markers[1:]):
        measured = _measured(ph)
        frac = [float((ph[i][~torch.isnan(ph[i])] >= verdict_tau).float().mean()) for i in measured]
        bx.plot(measured, frac, marker=marker, ms=4, ls=":", color=colours[0], label=f"tau = {verdict_tau:g}, {name}",
                clip_on=False)
    bx.set(xlabel="layer", ylabel="fraction of image tokens", ylim=(0, 1),
           title="(b) image tokens with phi >= tau")
    bx.legend(**_below())
    width = 0.8 / len(models)
    drawn = 0
    for k, ((name, (_, rat)), colour) in enumerate(zip(models.items(), colours[1:] + colours[:1])):
        shown = [(i, r) for i, r in enumerate(rat) if r is not None and np.isfinite(r)]
        drawn += len(shown)
        cx.bar([i + (k - (len(models) - 1) / 2) * width for i, _ in shown], [r for _, r in shown], width=width,
               color=colour, label=f"sink / non-sink image token, {name}")
    cx.axhline(1, color="black", ls=":", label="1 = as much as a non-sink image token")
    if not drawn:
        cx.text(0.5, 0.5, f"no visual sink token (phi >= {verdict_tau:g})\nin any layer of "
                          f"{'any of the ' + str(len(models)) + ' models' if len(models) > 1 else label}",
                transform=cx.transAxes, ha="center", va="center", fontsize=9)
    cx.set(xlabel="layer", ylabel="attention received, sink / non-sink", ylim=(0, None),
           title=f"(c) attention to a visual sink (phi >= {verdict_tau:g})")
    for axis in (ax, bx, cx):
        axis.set_xlim(-0.5, phi.shape[0] - 0.5)
    cx.legend(**_below())
    dx.imshow(_shown(picture))
    dx.set_title("(d) the image", fontsize=9)
    layout = layout or ImageLayout.square(example_phi.numel())
    grid = layout.picture(example_phi)
    im = ex.imshow(np.ma.masked_invalid(grid), cmap="magma", interpolation="nearest")
    rows, cols = np.nonzero(np.nan_to_num(grid, nan=-np.inf) >= verdict_tau)
    for r, c in zip(rows, cols):
        ex.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec=OUTLINE_COLOR, lw=1.5))
    passed = f"outlined: phi >= {verdict_tau:g}" if len(rows) else f"none >= tau = {verdict_tau:g}"
    tiles = [f"{layout.crops[0]} x {layout.crops[1]} crops"] if layout.crops != (1, 1) else []
    tiles += ["global view (right)"] if layout.overview else []
    tiles = " + ".join(tiles) + "\n" if tiles else ""
    ex.set_title(f"(e) phi per image token, layer {example_layer}\n{tiles}({passed})", fontsize=9)
    fig.colorbar(im, ax=ex, shrink=0.85, label="phi")
    for axis in (dx, ex):
        axis.set_xticks([])
        axis.set_yticks([])
        axis.grid(False)
        axis.spines[:].set_visible(False)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def masking_and_var(nll: Mapping[str, float], random_runs: Sequence[float], title: str = "",
                    ylabel: str = "caption NLL (nats / token)") -> Figure:
    """Mean NLL per condition (bars: as is, sinks hidden, random hidden, VAR, ...), each random draw a dot beside
    the "random hidden" bar. The y axis starts at 0 unless all values lie within 10% of the largest: then it is
    zoomed to the data and the title says so."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
    names = list(nll)
    colours = {"as is": "black", "sinks hidden": "#D55E00", "random hidden": "grey", "VAR": "#009E73"}
    ax.bar(names, [nll[n] for n in names], width=0.6, color=[colours.get(n, "#0072B2") for n in names], alpha=0.8)
    tops = {n: nll[n] for n in names}
    runs = [float(v) for v in random_runs]
    if "random hidden" in names and runs:
        i = names.index("random hidden")
        jitter = np.random.default_rng(0).uniform(-0.05, 0.05, len(runs))
        ax.scatter(i + 0.4 + jitter, runs, color="black", s=12, zorder=3, label="each random draw")
        tops["random hidden"] = max(tops["random hidden"], *runs)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    for i, n in enumerate(names):
        ax.annotate(f"{nll[n]:.3f}", (i, tops[n]), xytext=(0, 3), textcoords="offset points", ha="center",
                    va="bottom", fontsize=8)
    values = [*nll.values(), *runs]
    hi, lo = max(values, default=0.0), min(values, default=0.0)
    heading = title or "Masking and VAR"
    if hi > 0 and lo > 0 and hi - lo < 0.1 * hi:
        span = max(hi - lo, 1e-3 * hi)
        ax.set_ylim(lo - 0.4 * span, hi + 0.4 * span)
        heading += "\n(y axis does not start at 0)"
    else:
        ax.set_ylim(0, hi * 1.15 if hi > 0 else 1.0)
    ax.set(ylabel=ylabel, title=heading)
    return fig


def changes_per_model(changes: Mapping[str, Mapping[str, float]], random_draws: Mapping[str, Sequence[float]],
                      title: str = "", ylabel: str = "NLL change against as is (nats)",
                      verdicts: Sequence[str] = ()) -> Figure:
    """Every model's (e.g. every stand-in seed's) NLL change against its own "as is": with the visual sinks hidden,
    with as many random image tokens hidden (bar: mean of the draws; dots: each draw) and with VAR, grouped by model,
    each bar labelled with its value above the bar and its draws (no dot covers a label). changes: label ->
    {"sinks", "random", "VAR"}; random_draws: label -> each draw's change. ``verdicts``: the claims these numbers
    judge, one line each ("masking sinks is harmless: unsettled"), printed beside the legend so the figure never
    reads as a verdict it does not carry."""
    fig, ax = plt.subplots(figsize=(max(6.0, 2.6 * len(changes) + 2), 3.8), layout="constrained")
    kinds = [("sinks", "visual sinks hidden", "#D55E00"), ("random", "as many random image tokens hidden", "grey"),
             ("VAR", "VAR", "#009E73")]
    width = 0.26
    rng = np.random.default_rng(0)
    values = [0.0]
    labels = []  # (x, value, the highest / lowest thing drawn at x)
    for m, (name, change) in enumerate(changes.items()):
        draws = [float(v) for v in random_draws.get(name, [])]
        for k, (key, label, colour) in enumerate(kinds):
            x = m + (k - 1) * width
            ax.bar(x, change[key], width=width * 0.9, color=colour, alpha=0.85, label=label if m == 0 else None)
            at = [change[key], *(draws if key == "random" else [])]
            labels.append((x, change[key], max(at) if change[key] >= 0 else min(at)))
            values.append(change[key])
        if draws:
            ax.scatter(m + rng.uniform(-0.04, 0.04, len(draws)), draws, color="black", s=10, zorder=3,
                       label="each random draw" if m == 0 else None)
            values += draws
    lo, hi = min(values), max(values)
    pad = 0.15 * max(hi - lo, 1e-3)
    for x, value, edge in labels:
        ax.text(x, edge + (0.02 if value >= 0 else -0.02) * (hi - lo + 1e-9), f"{value:+.3g}", ha="center",
                va="bottom" if value >= 0 else "top", fontsize=7)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(range(len(changes)), list(changes), fontsize=8)
    ax.set(ylabel=ylabel, ylim=(lo - pad, hi + pad), title=title or "Hiding visual sinks vs random, and VAR, per model")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    if verdicts:
        ax.text(1.02, 0.45, "The claims these bars judge:\n" + "\n".join(verdicts), transform=ax.transAxes,
                fontsize=7.5, va="top", ha="left", wrap=True)
    return fig
