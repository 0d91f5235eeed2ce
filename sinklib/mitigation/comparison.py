"""Compare attention variants trained from scratch: runs per variant and seed, final tables, heads to look at.

A *run* is the dict :func:`sinklib.mitigation.training.train` returns (config, checkpoints, seconds). ``runs``
below maps a variant name to its list of runs, one per seed, all with the same data, budget and model size. The
rules that judge the comparison live in :mod:`sinklib.mitigation.verdicts` (the sink) and
:mod:`sinklib.mitigation.convergence`; the claim records in :mod:`sinklib.mitigation.sink_claims`, recorded by
:func:`sinklib.mitigation.seed_claims.judge`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch

from sinklib.core.errors import InputError
from sinklib.core.metrics import GU_EPS
from sinklib.mitigation.training import TrainConfig, train
from sinklib.mitigation.training_data import BBC_TRIGGERS
from sinklib.mitigation.variant_lm import TinyConfig, TinyLM
from sinklib.mitigation.variants import VARIANTS

Runs = Mapping[str, Sequence[dict]]

# metric key in a checkpoint -> column label of the final table
FINAL_METRICS: dict[str, str] = {
    "val_loss": "val loss",
    "sink_rate": "sink rate",
    "first_attention": "first-token attention",
    "max_activation": "max activation",
    "kurtosis": "kurtosis",
    "dom_ratio_first": "DomRatio (first token)",
    "effective_rank": "effective rank",
    "row_mass": "attention row mass",
    "first_share": "first-token share",  # A_t0 / sum_j A_tj: alpha on row-normalised weights
    "share_sink_rate": "share sink rate",
}


def parse_variants(spec: str | Sequence[str] | None) -> list[str]:
    """``""``/None -> every variant; ``"softmax,softpick"`` or a list -> those, in the given order, checked."""
    names = list(VARIANTS) if not spec else [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec)]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise InputError(f"unknown attention variant(s) {', '.join(unknown)}; use some of {', '.join(VARIANTS)}")
    if "softmax" not in names:
        names.insert(0, "softmax")  # every comparison needs the baseline
    return names


def variant_config(base: TrainConfig, variant: str, seed: int) -> TrainConfig:
    """``base`` with its attention set to ``variant`` and its seed set to ``seed``; nothing else changes."""
    model: TinyConfig = replace(base.model, attention=variant)
    return replace(base, model=model, seed=seed)


def train_variants(base: TrainConfig, variants: Sequence[str], seeds: Sequence[int], device: str = "cpu",
                   progress: bool = True, use_cache: bool = True) -> dict[str, list[dict]]:
    """Train (or read from the cache) every variant x seed on the same data and budget: {variant: [run per seed]}."""
    return {v: train_seeds(variant_config(base, v, seeds[0]), seeds, device, progress, use_cache) for v in variants}


def train_seeds(cfg: TrainConfig, seeds: Sequence[int], device: str = "cpu", progress: bool = True,
                use_cache: bool = True) -> list[dict]:
    """``cfg`` trained once per seed (or read from the cache): [run per seed]."""
    return [train(replace(cfg, seed=s), use_cache=use_cache, progress=progress, device=device) for s in seeds]


def uniform_alpha(seq_len: int) -> float:
    """alpha_0 under uniform causal attention: (1/T) sum_{t=0}^{T-1} 1/(t+1) = H_T / T (harmonic number)."""
    return sum(1.0 / (t + 1) for t in range(seq_len)) / seq_len


def curve(runs: Sequence[dict], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean over seeds, sd over seeds) of checkpoint metric ``key``; seeds must share checkpoint steps."""
    steps = np.array([c["step"] for c in runs[0]["checkpoints"]])
    values = np.array([[c[key] for c in r["checkpoints"]] for r in runs], dtype=float)  # (seeds, checkpoints)
    if values.shape[1] != len(steps):
        raise ValueError("runs have different checkpoint steps; compare runs of one configuration only")
    sd = values.std(axis=0, ddof=1) if len(runs) > 1 else np.zeros(len(steps))
    return steps, values.mean(axis=0), sd


def rate_band(runs: Sequence[dict], key: str = "sink_rate") -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(steps, mean, low, high) of a checkpoint *proportion* ``key`` over seeds, the band being the seeds' range
    (min-max), clipped to [0, 1]: a proportion's band never leaves [0, 1], as mean +- sd of two seeds would (a rate of
    0 and 0.5 gives 0.25 +- 0.35). One seed: low = high = its value."""
    steps = np.array([c["step"] for c in runs[0]["checkpoints"]])
    values = np.array([[c[key] for c in r["checkpoints"]] for r in runs], dtype=float)  # (seeds, checkpoints)
    if values.shape[1] != len(steps):
        raise ValueError("runs have different checkpoint steps; compare runs of one configuration only")
    return (steps, values.mean(axis=0), np.clip(values.min(axis=0), 0.0, 1.0),
            np.clip(values.max(axis=0), 0.0, 1.0))


def final_table(runs: Runs, metrics: Mapping[str, str] = FINAL_METRICS) -> pd.DataFrame:
    """One row per variant; for each metric its mean and sd over seeds at the last checkpoint (columns
    ``(label, "mean")`` and ``(label, "sd")``), plus the number of seeds and the mean training seconds."""
    rows = {}
    for variant, rs in runs.items():
        row = {}
        for key, label in metrics.items():
            vals = np.array([r["checkpoints"][-1][key] for r in rs], dtype=float)
            row[(label, "mean")] = vals.mean()
            row[(label, "sd")] = vals.std(ddof=1) if len(vals) > 1 else float("nan")
        row[("seeds", "")] = len(rs)
        row[("train s", "")] = float(np.mean([r["seconds"] for r in rs]))
        rows[variant] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    return table


def _fmt(mean: float, sd: float) -> str:
    digits = 3 if abs(mean) < 10 else 1 if abs(mean) < 1000 else 0
    return f"{mean:.{digits}f}" + ("" if math.isnan(sd) else f" ± {sd:.{digits}f}")


def format_table(table: pd.DataFrame) -> pd.DataFrame:
    """``final_table`` as strings "mean ± sd", one column per metric (for display and the markdown export)."""
    labels = [c for c in dict.fromkeys(table.columns.get_level_values(0)) if c not in ("seeds", "train s")]
    out = pd.DataFrame({lab: [_fmt(m, s) for m, s in zip(table[(lab, "mean")], table[(lab, "sd")])]
                        for lab in labels}, index=table.index)
    out["seeds"] = table[("seeds", "")].astype(int)
    out["train s"] = table[("train s", "")].round(0).astype(int)
    return out


def markdown(table: pd.DataFrame) -> str:
    """A DataFrame as a GitHub markdown table (index as the first column), without extra dependencies."""
    head = ["", *map(str, table.columns)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join([str(i), *map(str, row)]) + " |" for i, row in zip(table.index, table.to_numpy())]
    return "\n".join(lines)


def reference_table(reference: Mapping, variants: Sequence[str]) -> pd.DataFrame:
    """The published numbers of ``data/reference/mitigations.json`` for ``variants``: one "published" column of
    "metric: value" pairs per variant (blank where the literature gives none)."""
    rows = {v: "; ".join(f"{k.replace('_', ' ')}: {val}" for k, val in reference["variants"].get(v, {}).items())
            for v in variants}
    return pd.DataFrame({"published": pd.Series(rows)})


def _number(value) -> float | None:
    """A published value as a float: 0.467 -> 0.467, "2.7812 +- 0.0109" -> 2.7812, a note -> None."""
    try:
        return float(str(value).split()[0])
    except (ValueError, IndexError):
        return None


@dataclass(frozen=True)
class Direction:
    """One variant's move of one metric against the baseline, beside the paper's (:func:`published_directions`)."""

    variant: str
    metric: str  # the table's label, e.g. "first-token attention"
    verdict: str  # "agrees", "disagrees" or "unsettled (k of n seeds agree)"
    line: str  # the whole comparison in words


def published_agreement(table: pd.DataFrame, reference: Mapping, baseline: str = "softmax",
                        metrics: Mapping[str, str] | None = None, runs: Runs | None = None) -> list[str]:
    """:func:`published_directions` as lines."""
    return [d.line for d in published_directions(table, reference, baseline, metrics, runs)]


def published_directions(table: pd.DataFrame, reference: Mapping, baseline: str = "softmax",
                         metrics: Mapping[str, str] | None = None, runs: Runs | None = None) -> list[Direction]:
    """Does each variant move a metric the way the paper reports? One record per variant and metric where the
    reference gives a number for both the variant and the baseline: published ratio variant/baseline beside the
    measured one, "agrees" when both are on the same side of 1.

    The published baseline is the variant's own (``baseline_<metric>`` in its reference entry, e.g. the 0.65 of the
    off-by-one report) where the paper gives one, else the shared softmax entry: a ratio never mixes two papers.
    With ``runs`` (seed by seed, as :func:`final_table` reads them) the direction is judged per seed, the variant's
    i-th run against the baseline's i-th: "agrees" or "disagrees" only when every seed does, else "unsettled (k of n
    seeds agree)" -- a mean on the paper's side from one seed of two is no agreement.
    """
    metrics = metrics or {"first_attention": "first-token attention", "val_loss": "val loss"}
    ref = reference["variants"]
    lines = []
    for variant in table.index:
        if variant == baseline:
            continue
        for key, label in metrics.items():
            own = ref.get(variant, {})
            pv, pb = _number(own.get(key)), _number(own.get(f"baseline_{key}", ref.get(baseline, {}).get(key)))
            if pv is None or pb is None:
                continue
            ov, ob = table.loc[variant, (label, "mean")], table.loc[baseline, (label, "mean")]
            pr, mr = pv / pb, ov / ob
            sides = [(pr - 1) * (mr - 1) > 0]  # one draw: the means
            if runs is not None:
                sides = [(pr - 1) * (v["checkpoints"][-1][key] / b["checkpoints"][-1][key] - 1) > 0
                         for v, b in zip(runs[variant], runs[baseline])]
            verdict = ("agrees" if all(sides) else "disagrees" if not any(sides) else
                       f"unsettled ({sum(sides)} of {len(sides)} seeds agree)")
            lines.append(Direction(variant, label, verdict,
                                   f"{variant}, {label} vs {baseline}: published {pv:g} / {pb:g} = {pr:.2f}x; here "
                                   f"{ov:.3f} / {ob:.3f} = {mr:.2f}x -> {verdict}."))
    return lines


LOSS_GAP_SDS = 2.0  # a final loss differs from the baseline's when the gap exceeds this many pooled seed sd's


def loss_against_baseline(table: pd.DataFrame, baseline: str = "softmax",
                          sds: float = LOSS_GAP_SDS) -> dict[str, dict[str, float]]:
    """Each variant's final validation loss minus ``baseline``'s, d = mean_v - mean_b, grouped by where it lies:
    "above" (d > ``sds`` x sd), "below" (d < -``sds`` x sd) or "within", with sd = sqrt((sd_v^2 + sd_b^2) / 2) the
    pooled seed sd (0 for one seed). Returns {"above": {variant: d}, "within": {...}, "below": {...}}, variants in
    the table's order."""
    b = float(table.loc[baseline, ("val loss", "mean")])
    groups: dict[str, dict[str, float]] = {"above": {}, "within": {}, "below": {}}
    for v in table.index:
        if v == baseline:
            continue
        d = float(table.loc[v, ("val loss", "mean")]) - b
        sd = math.sqrt((table.loc[v, ("val loss", "sd")] ** 2 + table.loc[baseline, ("val loss", "sd")] ** 2) / 2)
        sd = 0.0 if math.isnan(sd) else sd
        groups["within" if abs(d) <= sds * sd else "above" if d > 0 else "below"][v] = d
    return groups


def strongest_head(run: dict, key: str = "alpha_by_head") -> tuple[int, int, float]:
    """(layer, head, alpha_0) of the head with the largest final first-token attention in ONE run.

    Heads of independently trained models are unrelated (head 0 of one seed is not head 0 of another), so the
    strongest head is picked per run -- per seed and per variant -- never from an average over runs.
    ``key``: "alpha_by_head" (absolute weights) or "share_by_head" (row-normalised shares).
    """
    a = np.asarray(run["checkpoints"][-1][key], dtype=float)  # (L, H)
    layer, head = np.unravel_index(int(a.argmax()), a.shape)
    return int(layer), int(head), float(a[layer, head])


def first_crossing(runs: Sequence[dict], eps: float = GU_EPS) -> list[int | None]:
    """Per seed, the first checkpoint step at which some head's alpha_0 exceeds ``eps`` (None if never)."""
    out = []
    for r in runs:
        hit = [c["step"] for c in r["checkpoints"] if np.max(c["alpha_by_head"]) > eps]
        out.append(int(hit[0]) if hit else None)
    return out


@torch.no_grad()
def active_dormant(model: TinyLM, ids: torch.Tensor, layer: int, head: int,
                   triggers: Sequence[int] = BBC_TRIGGERS) -> dict[str, float]:
    """Attention of one head by query type on bigram-backcopy data (Guo et al.'s active-dormant test).

    On a trigger query t the head has work to do -- copy x_{t-1} -- and should attend to position t-1 (*active*);
    elsewhere the MLP's bigram suffices and the head is *dormant*: a sink head parks its attention on BOS.
    Returns the mean weight on BOS and on t-1 for trigger queries and for the others (queries t >= 2), and
    ``holds``: BOS gets over twice the weight on other queries that it gets on triggers, and t-1 more on triggers.
    ids: (N, T) with BOS at position 0.
    """
    _, A, _ = model(ids, record=True)
    a = A[layer, :, head]  # (N, T, T)
    is_trig = torch.isin(ids, torch.tensor(list(triggers), device=ids.device))[:, 2:]  # (N, T-2): queries t >= 2
    bos = a[:, 2:, 0]  # (N, T-2)
    prev = torch.diagonal(a, offset=-1, dim1=-2, dim2=-1)[:, 1:]  # A[t, t-1] for t >= 2: (N, T-2)
    out = {"bos_trigger": float(bos[is_trig].mean()), "bos_other": float(bos[~is_trig].mean()),
           "prev_trigger": float(prev[is_trig].mean()), "prev_other": float(prev[~is_trig].mean()),
           "trigger_fraction": float(is_trig.float().mean())}
    out["holds"] = out["bos_other"] > 2 * out["bos_trigger"] and out["prev_trigger"] > out["prev_other"]
    return out
