"""Figures of ``13_vit``: CLS attention maps, where all queries' attention goes, token norms, registers."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from sinklib.core.images import display


def _overlay(ax, image: np.ndarray, heat: torch.Tensor, title: str = ""):
    """Image with a heat map (normalised to its own max) upsampled over it; returns the heat map's image."""
    size = image.shape[0]
    h = torch.nn.functional.interpolate(heat[None, None].float(), size=(size, size), mode="nearest")[0, 0].numpy()
    ax.imshow(image)
    im = ax.imshow(h / max(h.max(), 1e-12), cmap="inferno", alpha=0.6, vmin=0, vmax=1)
    ax.set_xticks([])
    ax.set_yticks([])
    if title:
        ax.set_title(title, fontsize=8)
    return im


def cls_maps(pixels: torch.Tensor, maps: torch.Tensor, names: Sequence[str], layers: Sequence[int],
             title: str = "", norm: tuple | None = None) -> Figure:
    """Rows: images; columns: the photo, then the CLS query's attention over the patches at each chosen layer
    (each map scaled to its own maximum; one shared colour bar). pixels: (B, 3, S, S), normalised with ``norm``
    (:func:`sinklib.core.images.to_pixels`); maps: (L, B, gh, gw)."""
    rows, cols = len(names), len(layers) + 1
    fig, axes = plt.subplots(rows, cols, figsize=(1.7 * cols, 1.75 * rows + 0.6), layout="constrained",
                             squeeze=False)
    im = None
    for r, name in enumerate(names):
        image = display(pixels[r], norm)
        axes[r, 0].imshow(image)
        axes[r, 0].set_xticks([])
        axes[r, 0].set_yticks([])
        axes[r, 0].set_ylabel(name, fontsize=8)
        for c, layer in enumerate(layers, start=1):
            im = _overlay(axes[r, c], image, maps[layer, r], f"layer {layer}" if r == 0 else "")
    if im is not None:
        fig.colorbar(im, ax=axes, location="bottom", shrink=0.6, aspect=30,
                     label="attention relative to the map's maximum")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def where_attention_goes(prefix_share: Sequence[float], top_ratio: Sequence[float], entropy: Sequence[float],
                         n_tokens: int, title: str = "") -> Figure:
    """(a) attention all queries give to CLS, and (b) the most-attended patch's share over the uniform share 1/T,
    per layer; (c) attention entropy per layer against the uniform maximum log T."""
    fig, (ax, bx, cx) = plt.subplots(1, 3, figsize=(13, 3.6), layout="constrained")
    layers = np.arange(len(prefix_share))
    ax.plot(layers, prefix_share, marker="o", color="#0072B2")
    ax.axhline(1 / n_tokens, color="grey", ls=":")
    ax.text(len(layers) - 1, 1 / n_tokens, " uniform 1/T", va="bottom", ha="right", fontsize=8, color="grey")
    ax.set(xlabel="layer", ylabel="share of all attention", title="(a) attention to CLS", ylim=(0, None))
    bx.bar(layers, top_ratio, color="#D55E00")
    bx.axhline(1, color="grey", ls=":")
    bx.set(xlabel="layer", ylabel="x uniform share", title="(b) the most-attended patch")
    for x, y in zip(layers, top_ratio):
        bx.text(x, y, f"{y:.0f}" if y >= 10 else f"{y:.1f}", ha="center", va="bottom", fontsize=7)
    bx.set_ylim(0, max(top_ratio) * 1.15)
    cx.plot(layers, entropy, marker="o", color="#009E73")
    cx.axhline(np.log(n_tokens), color="grey", ls=":")
    cx.text(0, np.log(n_tokens), f"uniform: log T = {np.log(n_tokens):.2f}", va="top", fontsize=8, color="grey")
    cx.set(xlabel="layer", ylabel="entropy (nats)", title="(c) attention entropy", ylim=(0, np.log(n_tokens) * 1.08))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def token_norms(patch_norms: torch.Tensor, layers: Sequence[int], max_ratio: Sequence[float], factor: float,
                title: str = "") -> Figure:
    """(a) histograms of patch-token norms at chosen layers, each divided by its image's median (so a cut of
    ``factor`` x median is one vertical line); (b) the largest / median patch norm per layer vs that cut."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 3.8), layout="constrained")
    colours = plt.cm.viridis(np.linspace(0, 0.9, len(layers)))
    for layer, colour in zip(layers, colours):
        pn = patch_norms[layer]  # (B, P)
        rel = (pn / pn.median(dim=-1, keepdim=True).values).flatten().numpy()
        ax.hist(rel, bins=60, range=(0, factor * 1.3), histtype="step", lw=1.5, color=colour, label=f"layer {layer}")
    ax.axvline(factor, color="#D55E00", ls="--")
    ax.text(factor, ax.get_ylim()[1] * 0.95, f" outlier cut {factor:g}x", color="#D55E00", fontsize=8, va="top",
            ha="right")
    ax.set_yscale("log")
    ax.set(xlabel="patch norm / the image's median patch norm", ylabel="patch tokens",
           title="(a) patch-token norms")
    ax.legend(fontsize=7, loc="upper left")
    layers_all = np.arange(len(max_ratio))
    bx.plot(layers_all, max_ratio, marker="o", color="black", label="largest / median patch norm")
    bx.axhline(factor, color="#D55E00", ls="--", label=f"outlier cut ({factor:g}x)")
    bx.set(xlabel="layer", ylabel="ratio", ylim=(0, max(factor, max(max_ratio)) * 1.2),
           title="(b) the largest patch norm, worst image")
    bx.legend(fontsize=8, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def probe_and_redundancy(probe: Mapping[str, float], chance: float, similarity: Mapping[str, float | int | str],
                         title: str = "") -> Figure:
    """(a) linear-probe accuracy of the digit label per token (e.g. CLS / highest-norm / median-norm patch) vs
    chance -- one accuracy, or one per train / test split (bar: their mean; dots: each split; error bar: their
    range); (b) mean cosine similarity to the 4 neighbours of the selected tokens vs all patches. similarity:
    {"selected", "all": float, "k": count, "label": what the selected tokens are, "space" (optional): what is
    compared, default "patch embeddings"}."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    names = list(probe)
    splits = {n: np.atleast_1d(np.asarray(probe[n], float)) for n in names}
    means = [float(splits[n].mean()) for n in names]
    low = [m - splits[n].min() for n, m in zip(names, means)]
    high = [splits[n].max() - m for n, m in zip(names, means)]
    many = max(len(v) for v in splits.values()) > 1
    x = np.arange(len(names))
    ax.bar(x, means, color=["#0072B2", "#D55E00", "grey"][:len(names)],
           yerr=[low, high] if many else None, capsize=4 if many else 0, ecolor="black")
    for i, n in enumerate(names):
        if many:
            ax.scatter(np.full(len(splits[n]), i) + np.linspace(-0.12, 0.12, len(splits[n])), splits[n], s=10,
                       color="black", zorder=3, label="each split" if i == 0 else None)
        ax.text(i, means[i] + high[i] + 0.03, f"{means[i]:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [textwrap.fill(n, 16) for n in names])
    if many:
        ax.legend(loc="upper right", fontsize=7)
    ax.axhline(chance, color="black", ls=":")
    ax.text(1.01, chance, f"chance\n{chance:.2f}", transform=ax.get_yaxis_transform(), ha="left", va="center",
            fontsize=8)
    ax.set(ylim=(0, 1.15), ylabel="held-out accuracy" + (" (mean over splits)" if many else ""),
           title="(a) linear probe of the digit label")
    values = [float(similarity["selected"]), float(similarity["all"])]
    labels = [textwrap.fill(str(similarity["label"]), 22), "all patches"]
    bars = bx.bar(labels, values, color=["#D55E00", "grey"])
    bx.bar_label(bars, labels=[f"{v:.2f}" for v in values], padding=2, fontsize=8)
    bx.axhline(0, color="black", lw=0.8)
    space = similarity.get("space", "patch embeddings")
    bx.set(ylim=(min(0.0, min(values) - 0.15), 1.1), ylabel=textwrap.fill(f"cosine similarity to 4 neighbours ({space})", 34),
           title="(b) are the high-norm patches redundant?")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def change_limit(before: torch.Tensor, after: torch.Tensor) -> float:
    """The symmetric colour limit of a before / after difference map: max |after - before| over every panel (a
    floor of 1e-12 keeps an unchanged map drawable)."""
    return max(float((after.float() - before.float()).abs().max()), 1e-12)


def registers_before_after(pixels: torch.Tensor, before: torch.Tensor, after: torch.Tensor, names: Sequence[str],
                           layer: int, title: str = "", norm: tuple | None = None) -> Figure:
    """One column per image, two rows: the CLS query's attention map at ``layer`` as is (top, over a faint grey copy
    of the photo), and its change with the test-time register (bottom, after - before; red: more attention with it)
    on one symmetric scale set by the data (:func:`change_limit`: the largest |change| over the panels), so a change
    of 0.002 is not a blank panel. The change row's colour bar states that limit as a share of the top row's largest
    value: a register that takes almost nothing reads as "small against the attention itself", not as an empty
    figure. pixels: (B, 3, S, S); before / after: (L, B, gh, gw)."""
    n = len(names)
    fig, axes = plt.subplots(2, n, figsize=(min(12.0, 2.4 * n + 0.8), 5.4), layout="constrained", squeeze=False)
    lim = change_limit(before[layer, :n], after[layer, :n])
    peak = float(before[layer, :n].max())
    shown = changed = None
    for r, name in enumerate(names):
        image = display(pixels[r], norm)
        size = image.shape[0]
        as_is = before[layer, r].float()
        diff = (after[layer, r] - before[layer, r]).float()
        for row, (grid, cmap, lo, hi) in enumerate(((as_is, "magma", 0.0, peak), (diff, "coolwarm", -lim, lim))):
            ax = axes[row, r]
            ax.imshow(0.55 + 0.45 * image.mean(-1), cmap="gray", vmin=0, vmax=1)  # the photo, faint
            up = torch.nn.functional.interpolate(grid[None, None], size=(size, size), mode="nearest")[0, 0].numpy()
            im = ax.imshow(up, cmap=cmap, vmin=lo, vmax=hi, alpha=0.75)
            shown, changed = (im, changed) if row == 0 else (shown, im)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.grid(False)
            ax.spines[:].set_visible(False)
        axes[0, r].set_title(f"{name}: as is", fontsize=8)
        axes[1, r].set_title(f"with the register: max |change| {float(diff.abs().max()):.3f}", fontsize=8)
    fig.colorbar(shown, ax=axes[0], location="right", shrink=0.8, label="CLS attention as is")
    label = (f"change (after - before); limits +-{lim:.2g}, {lim / peak:.0%} of the top row's largest value "
             f"({peak:.2g})" if peak > 0 else f"change (after - before); limits +-{lim:.2g}")
    fig.colorbar(changed, ax=axes[1], location="right", shrink=0.8, label=textwrap.fill(label, 40))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def models_compared(summaries: Mapping[str, Mapping], factor: float, title: str = "") -> Figure:
    """(a) largest / median patch norm and (b) outlier fraction per layer (x: relative depth 0..1) for each model."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 3.8), layout="constrained")
    for name, s in summaries.items():
        ratio = s["max_norm_ratio"]
        depth = np.linspace(0, 1, len(ratio))
        ax.plot(depth, ratio, marker="o", ms=3, label=f"{name} ({s['n_prefix']} prefix)")
        bx.plot(depth, s["outlier_fraction"], marker="o", ms=3)
    ax.axhline(factor, color="#D55E00", ls="--")
    ax.set(xlabel="relative depth (layer / last layer)", ylabel="largest / median patch norm",
           title="(a) the largest patch norm", ylim=(0, None))
    bx.set(xlabel="relative depth (layer / last layer)", ylabel="fraction of patch tokens",
           title=f"(b) outliers (> {factor:g}x the median)", ylim=(0, max(0.05, *(max(s["outlier_fraction"])
                                                                                   for s in summaries.values())) * 1.2))
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", fontsize=8, ncols=min(3, len(summaries)))
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def cls_split(before: Mapping[str, Sequence[float]], after: Mapping[str, Sequence[float]], stand_in: bool,
              title: str = "") -> Figure:
    """Jiang et al.'s before / after view of the CLS query, per layer: (a) as is, its attention to the outlier
    patches (or their stand-in) and to the other patches, on a log scale (a share of 0.001 is a line, not the
    axis); (b) what the test-time register changes: after - before for each destination, and the register's own
    share -- where the register's attention comes from. before / after:
    :func:`sinklib.architectures.vit.vit_sinks.cls_attention_split` (lists over layers)."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12, 3.6), layout="constrained")
    chosen = "highest-norm patch (stand-in)" if stand_in else "outlier patches"
    styles = {"chosen": (chosen, "#D55E00", "o"), "other patches": ("other patches", "grey", "s"),
              "extra": ("test-time register", "#0072B2", "^")}
    layers = np.arange(len(before["chosen"]))
    for key, (label, colour, marker) in styles.items():
        if key != "extra":
            ax.plot(layers, np.clip(np.asarray(before[key], float), 1e-5, None), marker=marker, ms=3, color=colour,
                    label=label)
            bx.plot(layers, np.asarray(after[key], float) - np.asarray(before[key], float), marker=marker, ms=3,
                    color=colour)
        elif any(after[key]):
            bx.plot(layers, after[key], marker=marker, ms=3, color=colour, label=label)
    ax.set_yscale("log")
    ax.set(xlabel="layer", ylabel="share of the CLS query's attention (log)", title="(a) as is")
    bx.axhline(0, color="black", lw=0.8)
    bx.set(xlabel="layer", ylabel="change with the register (after - before)",
           title="(b) with the test-time register: what moves")
    handles = ax.get_legend_handles_labels()[0] + bx.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="outside right center", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
