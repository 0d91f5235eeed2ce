"""Compare attention variants trained from scratch: runs per variant and seed, final tables, verdicts.

A *run* is the dict :func:`sinklib.mitigation.training.train` returns (config, checkpoints, seconds). ``runs`` below maps a
variant name to its list of runs, one per seed, all with the same data, budget and model size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

from sinklib.core.errors import InputError
from sinklib.core.metrics import GU_EPS
from sinklib.mitigation.tinylm import TinyConfig, TinyLM
from sinklib.mitigation.training import BBC_TRIGGERS, TrainConfig, train
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


def published_agreement(table: pd.DataFrame, reference: Mapping, baseline: str = "softmax",
                        metrics: Mapping[str, str] | None = None) -> list[str]:
    """Does each variant move a metric the way the paper reports? One line per variant and metric where the
    reference gives a number for both the variant and the baseline: published ratio variant/baseline beside the
    measured one, "agrees" when both are on the same side of 1.

    The published baseline is the variant's own (``baseline_<metric>`` in its reference entry, e.g. the 0.65 of the
    off-by-one report) where the paper gives one, else the shared softmax entry: a ratio never mixes two papers.
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
            verdict = "agrees" if (pr - 1) * (mr - 1) > 0 else "disagrees"
            lines.append(f"{variant}, {label} vs {baseline}: published {pv:g} / {pb:g} = {pr:.2f}x; here "
                         f"{ov:.3f} / {ob:.3f} = {mr:.2f}x -> {verdict}.")
    return lines


def steps_to_reach(run: dict, target: float, key: str = "val_loss") -> int | None:
    """First checkpoint step at which ``key`` <= ``target`` (None if never)."""
    for c in run["checkpoints"]:
        if c[key] <= target:
            return int(c["step"])
    return None


def grows_sink(table: pd.DataFrame, variant: str, uniform: float) -> bool:
    """A variant *grows a sink* when its sink rate is >= 5% and its alpha_0 >= 2x uniform attention's."""
    return bool(table.loc[variant, ("sink rate", "mean")] >= 0.05
                and table.loc[variant, ("first-token attention", "mean")] >= 2 * uniform)


def sink_verdict(variant: str, table: pd.DataFrame, uniform: float, eps: float = GU_EPS,
                 baseline: str = "softmax", runs: Sequence[dict] | None = None) -> str:
    """One line from the numbers: does ``variant`` grow, keep, reduce or remove the first-token sink?

    Rules (alpha_0 = first-token attention, mean over sequences, layers and heads; U = ``uniform``):
    the baseline *grows a sink* when its sink rate >= 5% and alpha_0 >= 2U; another variant *removes* it when its
    sink rate < 2% and alpha_0 <= 1.5U **and** the same holds for the row-normalised share A_t0 / sum_j A_tj (a small
    alpha_0 in a row that carries little mass is not a removal: such a variant only *shrinks the rows*), *reduces*
    it when alpha_0 <= half the baseline's, *keeps* it when within 0.5x-1.5x, and *strengthens* it above 1.5x; with
    no sink in the baseline nothing can be judged. **Seeds first:** when alpha_0 lies within 2 pooled seed sd's of
    the cut that decides (1.5U, 0.5x or 1.5x the baseline's), the verdict names *both* sides ("removes or reduces")
    instead of one -- two variants on either side of a cut by less than their seed spread are not different.
    **Removed or delayed:** given the variant's ``runs``, a removal or reduction whose strongest head is still
    rising at the end of training (:func:`late_slope` > ``RISING``) says that the budget cannot tell a removed sink
    from a delayed one. Where rows sum to < 0.95 (a learned sink, the off-by-one zero logit) the missing mass is
    reported; validation loss is compared with the baseline in seed sd's.
    """
    fa = table.loc[variant, ("first-token attention", "mean")]
    rate = table.loc[variant, ("sink rate", "mean")]
    share, share_rate = (table.loc[variant, (lab, "mean")] for lab in ("first-token share", "share sink rate"))
    base_fa = table.loc[baseline, ("first-token attention", "mean")]
    nums = f"alpha_0 {fa:.3f}, sink rate {rate:.0%} (uniform attention: {uniform:.3f}; eps {eps})"
    if abs(share - fa) > 0.005:
        nums += f"; row-normalised share of the first token {share:.3f} (sink rate on shares {share_rate:.0%})"
    base_grows = grows_sink(table, baseline, uniform)
    if variant == baseline:
        head = "grows a first-token sink" if base_grows else "does NOT grow a first-token sink in this setting"
        return f"{variant}: {head}: {nums}."
    if not base_grows:
        head = "cannot be judged (the baseline grew no sink to remove)"
    elif rate < 0.02 and fa <= 1.5 * uniform and share_rate < 0.02 and share <= 1.5 * uniform:
        head = "removes the first-token sink"
    elif rate < 0.02 and fa <= 1.5 * uniform:
        head = ("shrinks the rows, not the sink (little mass per row, but most of what is left goes to the first "
                "token)" if share > 0.5 * base_fa else "reduces the first-token sink")
    elif fa <= 0.5 * base_fa:
        head = "reduces the first-token sink"
    elif fa < 1.5 * base_fa:
        head = "keeps the first-token sink"
    else:
        head = "strengthens the first-token sink"
    unsettled = _too_close(table, variant, baseline, fa, base_fa, uniform) if base_grows else ""
    if unsettled and not head.startswith("shrinks"):
        head = _both_sides(head, fa, base_fa, uniform, rate)
    line = f"{variant}: {head}: {nums}; baseline alpha_0 {base_fa:.3f}" + unsettled
    if runs and base_grows and head.startswith(("removes", "reduces")):
        slopes = [late_slope(r) for r in runs]
        if max(slopes) > RISING:
            line += (f"; its strongest head is still rising at the end of training (+{max(slopes):.3f} per 100 steps "
                     f"over the last quarter, in seed {slopes.index(max(slopes))}): removed or only delayed cannot "
                     f"be told at this budget")
    mass = table.loc[variant, ("attention row mass", "mean")]
    if variant == "sigmoid":
        line += f"; sigmoid rows are not normalised (mean row sum {mass:.2f})"
    elif mass < 0.95:
        line += f"; {1 - mass:.0%} of each query's attention goes to {_MISSING_MASS.get(variant, 'no token')}"
    d = table.loc[variant, ("val loss", "mean")] - table.loc[baseline, ("val loss", "mean")]
    sd = _pooled_sd(table, variant, baseline, "val loss")
    line += f"; val loss {d:+.3f} vs baseline" + ("" if math.isnan(sd) else f" (seed sd {sd:.3f})")
    return line + "."


RISING = 0.01  # per 100 steps: a strongest-head share still climbing faster than this has not settled


def late_slope(run: dict, key: str = "share_by_head", fraction: float = 0.25) -> float:
    """Slope per 100 steps of the strongest head's ``key`` (max over layers and heads) over the last ``fraction``
    of training: a least-squares line through the checkpoints in that span (at least the last two)."""
    ck = run["checkpoints"]
    last = ck[-1]["step"]
    span = [c for c in ck if c["step"] >= last - fraction * last] or ck[-2:]
    span = span if len(span) >= 2 else ck[-2:]
    x = np.array([c["step"] for c in span], dtype=float)
    y = np.array([max(max(row) for row in c[key]) for c in span], dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        return 0.0
    return float(np.polyfit(x, y, 1)[0] * 100)


def _both_sides(head: str, fa: float, base_fa: float, uniform: float, rate: float) -> str:
    """The two verdicts on either side of the cut alpha_0 is closest to (used when the seeds cannot settle it)."""
    cuts = [(abs(fa - 1.5 * uniform), "removes or reduces the first-token sink (the seeds cannot tell which)")
            if rate < 0.02 else (math.inf, ""),
            (abs(fa - 0.5 * base_fa), "reduces or keeps the first-token sink (the seeds cannot tell which)"),
            (abs(fa - 1.5 * base_fa), "keeps or strengthens the first-token sink (the seeds cannot tell which)")]
    return min(cuts)[1] or head


def _too_close(table: pd.DataFrame, variant: str, baseline: str, fa: float, base_fa: float, uniform: float) -> str:
    """A caveat when alpha_0 sits within 2 pooled seed sd's of a cut the verdict depends on (1.5U, 0.5x / 1.5x the
    baseline): with that few seeds the side of the cut is not settled."""
    sd = _pooled_sd(table, variant, baseline, "first-token attention")
    if math.isnan(sd) or sd == 0:
        return ""
    cuts = {"1.5x uniform": 1.5 * uniform, "half the baseline": 0.5 * base_fa, "1.5x the baseline": 1.5 * base_fa}
    near = [name for name, c in cuts.items() if abs(fa - c) < 2 * sd]
    return (f" (within 2 seed sd's ({sd:.3f}) of {', '.join(near)}: with {int(table.loc[variant, ('seeds', '')])} "
            f"seeds the side of that cut is not settled)") if near else ""


_MISSING_MASS = {"sink_logit": "the learned sink logit", "kv_bias": "the learned key/value bias",
                 "softmax_off_by_one": "the zero logit", "softpick": "no token (rectified: rows may sum to < 1)"}


def _pooled_sd(table: pd.DataFrame, a: str, b: str, label: str) -> float:
    return float(math.sqrt((table.loc[a, (label, "sd")] ** 2 + table.loc[b, (label, "sd")] ** 2) / 2))


def convergence(candidate: Sequence[dict], baseline: Sequence[dict], key: str = "val_loss",
                margin_sds: float = 2.0) -> dict:
    """Does ``candidate`` converge faster than ``baseline`` (same configuration but attention, several seeds)?

    Two measures, each compared with the seed-to-seed spread (sd over seeds, pooled over the two variants):
    * ``auc``: mean validation loss over all checkpoints after step 0 (lower = faster convergence overall);
    * ``final``: validation loss at the last checkpoint.
    Also the step at which each first reaches the baseline's final mean loss. Verdict: "faster" when both measures
    are lower by more than ``margin_sds`` pooled sd's, "slower" when both are higher by more, else "no difference".
    """
    def per_seed(runs, fn):
        return np.array([fn([c[key] for c in r["checkpoints"][1:]]) for r in runs], dtype=float)

    out: dict = {}
    for name, fn in (("auc", np.mean), ("final", lambda xs: xs[-1])):
        c, b = per_seed(candidate, fn), per_seed(baseline, fn)
        sd = math.sqrt((c.var(ddof=1) + b.var(ddof=1)) / 2) if len(c) > 1 and len(b) > 1 else float("nan")
        out[name] = {"candidate": float(c.mean()), "baseline": float(b.mean()), "diff": float(c.mean() - b.mean()),
                     "sd": sd}
    target = out["final"]["baseline"]
    out["steps_to_baseline_final"] = {"candidate": [steps_to_reach(r, target, key) for r in candidate],
                                      "baseline": [steps_to_reach(r, target, key) for r in baseline]}
    def beyond(m: str, sign: float) -> bool:  # diff past margin_sds sd's in the direction of ``sign``
        sd = 0.0 if math.isnan(out[m]["sd"]) else out[m]["sd"]
        return sign * out[m]["diff"] > margin_sds * sd

    out["verdict"] = ("faster" if beyond("auc", -1) and beyond("final", -1) else
                      "slower" if beyond("auc", 1) and beyond("final", 1) else "no difference")
    return out


def convergence_line(name: str, conv: dict, setting: str) -> str:
    """A one-line statement of :func:`convergence`'s result."""
    a, f = conv["auc"], conv["final"]
    head = {"faster": f"{name} converges faster than softmax",
            "slower": f"{name} converges slower than softmax",
            "no difference": f"no difference in convergence between {name} and softmax at this scale"}[conv["verdict"]]
    return (f"{head} ({setting}): mean val loss over training {a['candidate']:.3f} vs {a['baseline']:.3f} "
            f"(diff {a['diff']:+.3f}, seed sd {a['sd']:.3f}); final {f['candidate']:.3f} vs {f['baseline']:.3f} "
            f"(diff {f['diff']:+.3f}, sd {f['sd']:.3f}); steps to reach the baseline's final loss "
            f"{conv['steps_to_baseline_final']['candidate']} vs {conv['steps_to_baseline_final']['baseline']}.")


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
