"""Figures of the mitigation notebook: sink emergence, loss curves, final metrics per variant, attention maps, learned
sinks through each attention kernel."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from sinklib.core.plotting import OUTLINE_COLOR, SINK_COLOR, VERDICT_COLOURS, outline_column, titled, to_numpy
from sinklib.mitigation.comparison import curve, rate_band


def emergence(runs: Sequence[dict], uniform: float, eps: float = 0.3, title: str = "") -> Figure:
    """Sink emergence in one variant over training: (a) alpha_0 of every layer/head (mean over seeds, band = range
    over seeds); (b) sink rate (mean over seeds, band = range over seeds, :func:`rate_band`: a proportion's band
    stays in [0, 1]) and validation loss. ``uniform`` marks alpha_0 under uniform attention."""
    steps = np.array([c["step"] for c in runs[0]["checkpoints"]])
    per_head = np.array([[c["alpha_by_head"] for c in r["checkpoints"]] for r in runs])  # (seeds, ckpt, L, H)
    L, H = per_head.shape[2:]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(9, 3.5), layout="constrained")
    colors = plt.cm.viridis(np.linspace(0, 0.85, L * H))
    for i, (layer, head) in enumerate((la, he) for la in range(L) for he in range(H)):
        y = per_head[:, :, layer, head]
        ax.plot(steps, y.mean(0), color=colors[i], lw=1.4, label=f"L{layer} H{head}")
        if len(runs) > 1:
            ax.fill_between(steps, y.min(0), y.max(0), color=colors[i], alpha=0.15, lw=0)
    ax.axhline(uniform, color="grey", ls=":", lw=1)
    ax.annotate("uniform attention", (steps[-1], uniform), fontsize=7, ha="right", va="bottom", color="grey")
    ax.axhline(eps, color=SINK_COLOR, ls="--", lw=1)
    ax.annotate(f"eps = {eps}", (steps[0], eps), fontsize=7, va="bottom", color=SINK_COLOR)
    ax.set_xlabel("training step"), ax.set_ylabel("alpha of the first token (BOS)")
    ax.set_title("(a) attention to BOS per head")
    ax.legend(fontsize=7, ncols=2 if L * H > 4 else 1)
    s, rate, rate_lo, rate_hi = rate_band(runs, "sink_rate")
    bx.plot(s, rate, color=SINK_COLOR, lw=1.5, label="sink rate")
    if len(runs) > 1:
        bx.fill_between(s, rate_lo, rate_hi, color=SINK_COLOR, alpha=0.2, lw=0)
    bx.set_ylim(-0.02, 1.02), bx.set_xlabel("training step"), bx.set_ylabel("sink rate (eps 0.3)", color=SINK_COLOR)
    cx = bx.twinx()
    s, loss, _ = curve(runs, "val_loss")
    cx.plot(s[1:] if len(loss) > 1 else s, loss[1:] if len(loss) > 1 else loss, color="k", lw=1.2,
            label="validation loss (from the first checkpoint after step 0)")
    cx.set_ylabel("validation loss (nats)"), cx.grid(False)
    cx.set_ylim(loss.min() - 0.05, loss[1:].max() + 0.05 if len(loss) > 1 else loss.max() + 0.05)
    if len(loss) > 1 and loss[0] > cx.get_ylim()[1]:  # the step-0 loss (uniform prediction) is far above the rest:
        cx.annotate(f"step 0: {loss[0]:.2f}", (s[1], cx.get_ylim()[1]), xytext=(4, -10), textcoords="offset points",
                    fontsize=7, ha="left", va="top")  # said, not a line that leaves the panel
    bx.set_title("(b) sink rate and loss")
    return titled(fig, title)


# one colour per variant in every figure of the notebook (softmax: black), so fig03, fig04 and fig05 agree
# one colour per variant in every mitigation figure, none pale on white (a yellow sink_logit and a grey kv_bias next to
# a light-blue off-by-one could not be told apart)
_PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#8C564B", "#882255", "#7F7F7F"]


def variant_color(name: str) -> str:
    """The colour of a variant in every mitigation figure; "headwise_rmsnorm g0=0.1" shares headwise_rmsnorm's."""
    from sinklib.mitigation.variants import VARIANTS

    base = name.split(" ")[0]
    if base == "softmax":
        return "black"
    order = [v for v in VARIANTS if v != "softmax"]
    return _PALETTE[order.index(base) % len(_PALETTE)] if base in order else "#999999"


def _style(name: str) -> dict:
    style = {"color": variant_color(name), "lw": 2.0 if name == "softmax" else 1.3}
    if name == "softmax":
        style["zorder"] = 5
    if " " in name:  # a variation of a variant (e.g. another initialisation): same colour, dashed
        style["ls"] = "--"
    return style


def loss_curves(runs: Mapping[str, Sequence[dict]], key: str = "val_loss", title: str = "",
                ylabel: str = "validation loss (nats)", skip_first: int = 1, note: str = "",
                floor: float | None = None, baseline: str = "softmax") -> Figure:
    """(a) ``key`` against training step per variant (mean over seeds, band +- 1 sd), with the task's entropy
    ``floor`` when known; (b) the difference to ``baseline``, paired by seed (variant seed s minus baseline seed s),
    mean +- sd -- differences of a few hundredths are invisible on (a). The first ``skip_first`` checkpoints are
    left out so the end stays readable."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11.0, 3.8), layout="constrained")
    lo, hi = np.inf, -np.inf
    dlo, dhi = 0.0, 0.0  # range of (b) over the last three quarters of training
    base = np.array([[c[key] for c in r["checkpoints"]] for r in runs[baseline]]) if baseline in runs else None
    for name, rs in runs.items():
        steps, mean, sd = curve(rs, key)
        steps, mean, sd = steps[skip_first:], mean[skip_first:], sd[skip_first:]
        style = _style(name)
        ax.plot(steps, mean, label=name, **style)
        ax.fill_between(steps, mean - sd, mean + sd, color=style["color"], alpha=0.12, lw=0)
        lo, hi = min(lo, (mean - sd).min()), max(hi, np.percentile(mean, 75))
        if base is not None and name != baseline:
            vals = np.array([[c[key] for c in r["checkpoints"]] for r in rs])
            n = min(len(vals), len(base))
            d = (vals[:n] - base[:n])[:, skip_first:]  # (seeds, ckpt) paired by seed
            dm, ds = d.mean(0), (d.std(0, ddof=1) if n > 1 else np.zeros(d.shape[1]))
            bx.plot(steps, dm, **style)
            bx.fill_between(steps, dm - ds, dm + ds, color=style["color"], alpha=0.12, lw=0)
            late = steps >= steps[-1] / 4
            dlo, dhi = min(dlo, (dm - ds)[late].min()), max(dhi, (dm + ds)[late].max())
    if floor is not None:
        ax.axhline(floor, color="grey", ls=":", lw=1.2)
        ax.annotate(f"task entropy floor {floor:.3f}", (0.99, floor), xycoords=("axes fraction", "data"),
                    ha="right", va="bottom", fontsize=7, color="dimgrey")
        lo = min(lo, floor)
    ax.set_ylim(lo - 0.01 * abs(lo), hi)
    ax.set_xlabel("training step"), ax.set_ylabel(ylabel), ax.set_title("(a) validation loss")
    bx.axhline(0, color="black", lw=1.2)
    pad = 0.1 * (dhi - dlo) or 0.01
    bx.set_ylim(dlo - pad, dhi + pad)  # early steps, where every curve is far from the others, may leave the axes
    bx.set_xlabel("training step"), bx.set_ylabel(f"loss - {baseline}'s (same seed)")
    bx.set_title(f"(b) difference to {baseline}")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside right center", fontsize=8)
    if note:
        fig.supxlabel(note, fontsize=7, color="dimgrey")  # below the axes; constrained layout keeps it clear
    return titled(fig, title)


# the final-table labels that are proportions (0 to 1): their +- sd bars are clipped to [0, 1] (:func:`proportion_bars`)
PROPORTIONS = ("first-token attention", "first-token share", "sink rate", "share sink rate")


def proportion_bars(mean: np.ndarray, sd: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper lengths of mean +- sd error bars of a proportion, clipped so that the bar stays in
    [0, 1]: low = mean - max(0, mean - sd), high = min(1, mean + sd) - mean."""
    mean, sd = np.asarray(mean, float), np.asarray(sd, float)
    return mean - np.clip(mean - sd, 0.0, 1.0), np.clip(mean + sd, 0.0, 1.0) - mean


def final_bars(table: pd.DataFrame, labels: Sequence[str], uniform: float | None = None, title: str = "",
               verdicts: Mapping[str, str] | None = None) -> Figure:
    """Small multiples, one per metric label of :func:`sinklib.mitigation.comparison.final_table`: mean per variant
    (dot) with +- 1 sd error bars (no bars from zero, so close values stay apart; a proportion's bar,
    :data:`PROPORTIONS`, is clipped to [0, 1]); with ``verdicts`` ({variant: its claim's verdict, "holds" / "does NOT
    hold" / "unsettled" / "cannot be judged here"}) each variant is coloured by that verdict
    (:data:`~sinklib.core.plotting.VERDICT_COLOURS`, a legend names them), else by its own colour; log scale where
    values span > 100x."""
    n = len(labels)
    cols = 2 if n == 4 else min(3, n)  # four panels as 2 x 2, not a row of three and one alone
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols + 1.8, 2.6 * rows), squeeze=False,
                             layout="constrained")
    names = list(table.index)
    verdicts = verdicts or {}
    colour = {v: VERDICT_COLOURS.get(verdicts.get(v), variant_color(v)) for v in names}
    for ax, label in zip(axes.flat, labels):
        mean = table[(label, "mean")].to_numpy(float)
        sd = np.nan_to_num(table[(label, "sd")].to_numpy(float))
        low, high = proportion_bars(mean, sd) if label in PROPORTIONS else (sd, sd)
        for y, (v, mu, lo, hi) in enumerate(zip(names, mean, low, high)):
            ax.errorbar(mu, y, xerr=[[lo], [hi]], fmt="o", color=colour[v], ms=5, capsize=2, lw=1)
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        positive = mean[mean > 0]
        if len(positive) and positive.max() / max(positive.min(), 1e-9) > 100:
            ax.set_xscale("log")
        if uniform is not None and label == "first-token attention":
            ax.axvline(uniform, color="grey", ls=":", lw=1)
        ax.set_title(label, fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    shown = [w for w in VERDICT_COLOURS if w in {verdicts.get(v) for v in names}]
    if shown:
        handles = [plt.Line2D([], [], marker="o", ls="", color=VERDICT_COLOURS[w], label=w) for w in shown]
        fig.legend(handles=handles, loc="outside right center", fontsize=8, title="the variant's claim",
                   title_fontsize=8)
    return titled(fig, title)


def attention_maps(maps: Mapping[str, object], head_label: str, floor: float = 1e-3, title: str = "",
                   trigger_rows: Sequence[int] = (), missing: Mapping[str, str] | None = None) -> Figure:
    """One (T, T) attention map per variant on the same input, log colour scale, BOS column outlined.

    Beside each map a one-column strip shows 1 - sum_j A[t, j], the weight a row does *not* give to any token
    (the sink logit, the KV bias, the zero logit of off-by-one; for sigmoid and softpick, weight given nowhere);
    ``missing`` names where it goes per panel. ``trigger_rows``: query positions whose token is a trigger (the
    rows where the head has work to do), marked with a triangle on the left edge.
    """
    n = len(maps)
    cols = min(5, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols + 1.2, 3.3 * rows), squeeze=False,
                             layout="constrained")
    norm, im = LogNorm(vmin=floor, vmax=1.0), None
    for ax, (name, A) in zip(axes.flat, maps.items()):
        A = to_numpy(A)
        T = A.shape[-1]
        rest = np.clip(1 - np.tril(A).sum(-1), 0, 1)  # (T,)
        wide = np.full((T, T + 2), np.nan)
        wide[:, :T] = np.where(np.tril(np.ones((T, T), bool)), np.clip(A, floor, 1), np.nan)
        wide[:, T + 1] = np.clip(rest, floor, 1)
        im = ax.imshow(np.ma.masked_invalid(wide), norm=norm, interpolation="nearest")
        outline_column(ax, 0, T, OUTLINE_COLOR)
        ticks = list(range(0, T, 8))
        ax.set_xticks([*ticks, T + 1], [*map(str, ticks), "rest"], fontsize=6)
        ax.set_yticks(ticks, list(map(str, ticks)), fontsize=6)
        ax.grid(False)
        for t in trigger_rows:
            if t < T:
                ax.plot(-1.6, t, marker=">", color="#33A02C", ms=4, clip_on=False)
        sub = f"\nrest: {missing[name]}" if missing and missing.get(name) else ""
        ax.set_title(name + sub, fontsize=8.5)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes[-1, 0].set_xlabel("key (rest: 1 - row sum)", fontsize=7), axes[-1, 0].set_ylabel("query", fontsize=7)
    fig.colorbar(im, ax=axes, shrink=0.6, label=f"attention weight (log), {head_label}")
    return titled(fig, title)


def _spread_labels(ys: Sequence[float], gap: float) -> list[float]:
    """Label heights at least ``gap`` apart, each as near its own y as that allows (order kept): ys sorted, pushed
    up where they crowd, then the whole stack shifted down by the mean push so no label drifts far one way."""
    order = np.argsort(ys)
    own = np.array([ys[i] for i in order], dtype=float)
    placed = own.copy()
    for k in range(1, len(placed)):
        placed[k] = max(placed[k], placed[k - 1] + gap)
    placed -= np.mean(placed - own)
    out = np.empty(len(ys))
    out[order] = placed
    return out.tolist()


def strongest_head_over_training(runs: Mapping[str, Sequence[dict]], eps: float = 0.3, uniform: float | None = None,
                                 key: str = "share_by_head", title: str = "") -> Figure:
    """Removed or delayed? The strongest head's row-normalised first-token share (max over layers and heads) against
    training step, per variant: mean over seeds, band = range over seeds; dashed: eps. Each line is named at its
    end with the answer: "still rising" when any seed's late slope (:func:`~sinklib.mitigation.verdicts.late_slope`)
    is above :data:`~sinklib.mitigation.verdicts.RISING` per 100 steps, else "flat" -- a curve still climbing at
    the last step has not shown that the sink is gone, only that it has not formed yet. Labels are spread so lines
    that end together stay readable."""
    from sinklib.mitigation.verdicts import RISING, late_slope

    fig, ax = plt.subplots(figsize=(9.5, 3.8), layout="constrained")
    ends = {}
    for name, rs in runs.items():
        steps = np.array([c["step"] for c in rs[0]["checkpoints"]])
        y = np.array([[max(max(row) for row in c[key]) for c in r["checkpoints"]] for r in rs])  # (seeds, ckpt)
        style = _style(name)
        ax.plot(steps, y.mean(0), **style)
        if len(rs) > 1:
            ax.fill_between(steps, y.min(0), y.max(0), color=style["color"], alpha=0.12, lw=0)
        slope = max(late_slope(r, key) for r in rs)
        ends[name] = (float(steps[-1]), float(y.mean(0)[-1]), style["color"],
                      f"still rising (+{slope:.2f})" if slope > RISING else "flat")
    lo, hi = ax.get_ylim()
    heights = _spread_labels([e[1] for e in ends.values()], 0.08 * (hi - lo))
    for (name, (x, y, colour, answer)), h in zip(ends.items(), heights):
        ax.plot([x], [y], marker="o", ms=3, color=colour)
        ax.text(x * 1.02, h, f"{name}: {answer}", fontsize=7, va="center", color=colour, clip_on=False)
    ax.axhline(eps, color="grey", ls="--", lw=1)
    ax.annotate(f"eps = {eps}", (0.01, eps), xycoords=("axes fraction", "data"), va="bottom", fontsize=7)
    if uniform is not None:
        ax.axhline(uniform, color="grey", ls=":", lw=1)
        ax.annotate("uniform attention", (0.01, uniform), xycoords=("axes fraction", "data"), va="top",
                    fontsize=7, color="grey", xytext=(0, -2), textcoords="offset points")
    ax.set_xlabel("training step"), ax.set_ylabel("strongest head's first-token share")
    ax.set_title(f"at each line's end: its slope over the last quarter, per 100 steps (rising: > {RISING:g})",
                 fontsize=7, color="dimgrey", loc="right")
    return titled(fig, title)


def learned_sink_kernels(checks: Sequence, title: str = "") -> Figure:
    """One panel per :class:`~sinklib.mitigation.learned_sinks.SinkCheck` (03 section 7): each kernel's largest next-token log-prob error against the transcription (log axis;
    hatched where the kernel refused to run), the tolerance (dashed) and what dropping the sinks does (dotted)."""
    fig, axes = plt.subplots(1, len(checks), figsize=(4.6 * len(checks), 3.6), layout="constrained", squeeze=False)
    for ax, check in zip(axes[0], checks):
        names = [k.kernel for k in check.kernels]
        floor = check.tolerance * 1e-4
        heights = [max(k.logp_max, floor) if k.ran else floor for k in check.kernels]
        colors = ["#2a9d8f" if k.keeps else "#e76f51" if k.keeps is False else "#bbbbbb" for k in check.kernels]
        bars = ax.barh(range(len(names)), heights, color=colors)
        for bar, k in zip(bars, check.kernels):
            if not k.ran:
                bar.set_hatch("//")
                ax.text(floor * 2, bar.get_y() + bar.get_height() / 2, "not run here", va="center", fontsize=7)
        ax.axvline(check.tolerance, color="black", ls="--", lw=1, label=f"tolerance {check.tolerance:g}")
        ax.axvline(check.drop_effect, color="#e76f51", ls=":", lw=1.4, label=f"sinks dropped: {check.drop_effect:.2g}")
        ax.set_xscale("log")
        ax.set_yticks(range(len(names)), [n.replace(" (", "\n(") for n in names], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("max |log p - log p (transcription)|, nats")
        ax.set_title(check.model, fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title)
    return fig
