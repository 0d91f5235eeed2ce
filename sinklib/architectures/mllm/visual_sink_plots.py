"""Figures of ``12_mllm``: the stand-in's training, where text queries look, visual sink tokens, masking and VAR."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from sinklib.core.images import display


def standin_training(losses: Sequence[float], accuracy: float, chance: float, n: int, title: str = "") -> Figure:
    """(a) caption loss per projector step; (b) held-out digit accuracy from caption likelihood vs chance."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained", width_ratios=(2, 1))
    ax.plot(np.arange(len(losses)), losses, color="#0072B2")
    ax.set(xlabel="projector step", ylabel="caption cross-entropy (nats)", title="(a) training the projector",
           ylim=(0, None))
    bx.bar(["stand-in", "chance"], [accuracy, chance], color=["#0072B2", "grey"])
    for i, v in enumerate((accuracy, chance)):
        bx.text(i, v, f"{v:.2f}", ha="center", va="bottom", fontsize=8)
    bx.set(ylim=(0, 1.1), ylabel="accuracy", title=f"(b) {n} held-out digits: best of 10 captions")
    if title:
        fig.suptitle(title, fontsize=10)
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


def visual_sinks(phi: torch.Tensor, tau: float, ratio: Sequence[float | None], pixels: torch.Tensor,
                 example_phi: torch.Tensor, example_layer: int, title: str = "") -> Figure:
    """(a) the largest phi of any image token per layer against tau, and the fraction of image tokens at or
    above it; (b) attention a sink receives over a non-sink image token, per layer; (c) one image with its tokens'
    phi at ``example_layer``. phi: (L, B, P) (NaN where not measured)."""
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(14, 3.8), layout="constrained", width_ratios=(1.3, 1.3, 1))
    layers = np.arange(phi.shape[0])
    peak = [float(torch.nan_to_num(p, nan=0).max()) if not torch.isnan(p).all() else np.nan for p in phi]
    frac = [float((p >= tau).float().mean()) if not torch.isnan(p).all() else np.nan for p in phi]
    ax.plot(layers, peak, marker="o", color="black", label="largest phi of an image token")
    ax.axhline(tau, color="#D55E00", ls="--", label=f"tau = {tau:g}")
    ax.set(xlabel="layer", ylabel="phi", title="(a) image tokens' sink-dimension ratio",
           ylim=(0, max(tau, np.nanmax(peak)) * 1.15))
    ax2 = ax.twinx()
    ax2.bar(layers, frac, alpha=0.3, color="#0072B2")
    ax2.set(ylabel="fraction of image tokens >= tau", ylim=(0, 1))
    ax.legend(fontsize=8, loc="center left")
    vals = [np.nan if r is None else r for r in ratio]
    bx.bar(layers, vals, color="#0072B2")
    bx.axhline(1, color="grey", ls=":")
    bx.set(xlabel="layer", ylabel="sink / non-sink", title="(b) attention a visual sink token receives")
    image = display(pixels)
    g = int(round(example_phi.numel() ** 0.5))
    heat = torch.nn.functional.interpolate(example_phi.reshape(1, 1, g, g).float(), size=image.shape[:2],
                                           mode="nearest")[0, 0].numpy()
    cx.imshow(image)
    im = cx.imshow(heat, cmap="magma", alpha=0.5)
    cx.set_xticks([])
    cx.set_yticks([])
    cx.set_title(f"(c) phi per image token, layer {example_layer}", fontsize=9)
    fig.colorbar(im, ax=cx, shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def masking_and_var(nll: Mapping[str, float], random_runs: Sequence[float], title: str = "") -> Figure:
    """Mean caption NLL as is, with the visual sinks hidden, with as many random image tokens hidden (each random
    draw a dot), and with VAR."""
    fig, ax = plt.subplots(figsize=(7.5, 3.6), layout="constrained")
    names = list(nll)
    colours = {"as is": "black", "sinks hidden": "#D55E00", "random hidden": "grey", "VAR": "#009E73"}
    ax.bar(names, [nll[n] for n in names], color=[colours.get(n, "#0072B2") for n in names], alpha=0.8)
    if "random hidden" in names and random_runs:
        i = names.index("random hidden")
        ax.scatter([i] * len(random_runs), random_runs, color="black", s=12, zorder=3, label="each random draw")
        ax.legend(fontsize=8, loc="lower right")
    for i, n in enumerate(names):
        ax.text(i, nll[n], f"{nll[n]:.3f}", ha="center", va="bottom", fontsize=8)
    top = max(max(nll.values()), max(random_runs, default=0))
    ax.set(ylabel="caption NLL (nats / token)", ylim=(0, top * 1.15), title=title or "Masking and VAR")
    return fig
