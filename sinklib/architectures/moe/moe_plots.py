"""Figures of ``11_moe``: routing on the first token, the experts' largest outputs, pruning super experts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from sinklib.core.plotting import titled


def routing(same_first: Sequence[float], same_rest: Sequence[float], load_first: torch.Tensor,
            title: str = "", layers: Sequence[int] | None = None, k: int | None = None, note: str = "") -> Figure:
    """(a) fraction of inputs whose position-0 token gets the most common expert set, vs a middle token; (b) the
    share of position 0's top-k slots each expert takes, per layer, on a scale from 0 to 1/k (an expert chosen for
    every input; ``k``: the router's top-k, read off the shares when not given). One entry per MoE layer; ``layers``:
    their indices in the model (default 0, 1, ...; DeepSeek-V2's dense first layer has no entry). ``note``: what the
    reader must know to read (b), e.g. that the router is uniform, under its axis."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    layers = np.arange(len(same_first)) if layers is None else np.asarray(layers)
    ax.plot(layers, same_first, marker="o", label="first token")
    ax.plot(layers, same_rest, marker="s", color="grey", label="middle token")
    ax.set(xlabel="layer", ylabel="inputs with the most common expert set", ylim=(0, 1.05),
           title="(a) does the first token always get the same experts?")
    ax.legend(loc="lower right", fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    k = k or max(1, round(1 / max(float(load_first.max()), 1e-9)))
    im = bx.imshow(load_first.T.numpy(), aspect="auto", cmap="viridis", vmin=0, vmax=1 / k)  # column i: layers[i]
    bx.xaxis.set_major_locator(MaxNLocator(integer=True))
    bx.xaxis.set_major_formatter(FuncFormatter(lambda x, _: str(layers[int(x)]) if 0 <= x < len(layers) else ""))
    bx.set(xlabel="layer" + (f"\n{note}" if note else ""), ylabel="expert",
           title=f"(b) each expert's share of the first token's top-{k} slots")
    bar = fig.colorbar(im, ax=bx, shrink=0.85, label=f"share of the top-{k} slots (1/{k}: chosen for every input)")
    bar.set_ticks([0, 1 / (2 * k), 1 / k], labels=["0", f"1/{2 * k}", f"1/{k}"])
    return titled(fig, title)


def expert_maxima(output_max: torch.Tensor, supers: Sequence[tuple[int, int, float]], title: str = "",
                  include_layers: float = 0.75) -> Figure:
    """Largest |down_proj output| per (layer, expert), log colour; super experts circled; the layers Su et al.'s
    rule leaves out (l >= round(L x include_layers)) hatched and labelled, so a bright expert there is seen to be
    outside the rule, not missed by it."""
    fig, ax = plt.subplots(figsize=(10, 3.6), layout="constrained")
    vals = output_max.T.numpy().clip(min=1e-3)  # NaN columns (dense layers) stay blank
    im = ax.imshow(vals, aspect="auto", cmap="magma", norm=LogNorm(vmin=np.nanmin(vals), vmax=np.nanmax(vals)))
    kept = round(output_max.shape[0] * include_layers)
    if kept < output_max.shape[0]:
        ax.add_patch(plt.Rectangle((kept - 0.5, -0.5), output_max.shape[0] - kept, output_max.shape[1], fill=False,
                                   hatch="//", edgecolor="white", lw=0))
        ax.text(kept - 0.3, output_max.shape[1] - 0.7,  # inside the hatched band, clear of the title
                f"layers >= {kept}:\noutside the rule\n(first {include_layers:.0%})", fontsize=7, va="bottom",
                ha="left", color="white", bbox={"facecolor": "black", "alpha": 0.6, "lw": 0, "pad": 1.5})
    for layer, e, _ in supers:
        ax.scatter([layer], [e], s=160, facecolors="none", edgecolors="#00C8FF", linewidths=2)
    ax.set(xlabel="layer", ylabel="expert", title=title or "Largest expert output per layer (circled: super experts)")
    fig.colorbar(im, ax=ax, shrink=0.85, label="max |down_proj output|")
    return fig


def pruning(curves: Mapping[str, Sequence[float]], peaks: Mapping[str, Sequence[float]], ppl: Mapping[str, float],
            title: str = "") -> Figure:
    """(a) alpha_0 per layer and (b) the first token's largest |h| per layer (log scale), for the model as is (a wide
    pale line underneath), with its super experts pruned, and with random experts pruned (dashed, on top)."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 3.8), layout="constrained")
    # "as is" wide and pale underneath: a random pruning that changes nothing lies on it and stays visible
    styles = {"as is": dict(color="black", lw=4, alpha=0.3, zorder=1),
              "super experts pruned": dict(color="#D55E00", lw=2, zorder=2)}
    for name, values in curves.items():
        style = styles.get(name, dict(color="#0072B2", lw=1, ls="--", zorder=3))
        ax.plot(np.arange(len(values)), values, label=f"{name} (ppl {ppl[name]:.1f})", **style)
        bx.plot(np.arange(len(peaks[name])), peaks[name], **style)
    ax.set(xlabel="layer", ylabel="alpha_0 (mean over heads)", ylim=(0, 1), title="(a) attention to the first token")
    bx.set_yscale("log")
    bx.set(xlabel="layer", ylabel="max |h| of the first token", title="(b) the first token's massive activation")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right center", fontsize=8)
    return titled(fig, title)
