"""How far do 03's trained models move on another machine? Train every run of 03_mitigation's CPU profile into a
cache (in parallel processes, one thread each), then compare caches trained on different machines or settings.

    python benchmarks/cross_machine.py train CACHE [--workers 8]     # on each machine / setting (SINKLIB_CACHE=CACHE)
    python benchmarks/cross_machine.py finals CACHE FINALS.json                # what to copy back from another machine
    python benchmarks/cross_machine.py compare NAME=CACHE NAME=FINALS.json ... [--write data/reference/cross_machine_03.json]

``compare`` prints, per run, the final validation loss, alpha_0, the row-normalised first-token share, sink rate and
the strongest head's late slope (:func:`sinklib.mitigation.verdicts.late_slope`) on every cache, and their spread --
per run, and of each configuration's mean over its seeds; the largest spreads are what ``verdicts``' margins
(SLOPE_MARGIN, SEED_ALPHA_MARGIN / ALPHA_MARGIN, SEED_SHARE_MARGIN / SHARE_MARGIN; held to them by
tests/test_mitigation_verdicts.py) and ``sinklib.core.quantities.TOLERANCES`` ("trained here") rest on. The committed
measurement (``data/reference/cross_machine_03.json``): this 2-core AMD EPYC (oneDNN avx512_core_bf16, torch 2.14.1)
and an Intel Xeon with AMX (torch 2.11) with oneDNN on AMX and capped to AVX512_CORE_BF16.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

QUANTITIES = ("val_loss", "first_attention", "first_share", "sink_rate", "share_sink_rate", "late_slope")


def configs() -> list:
    """Every TrainConfig 03_mitigation's CPU profile trains (seed 0): 9 variants x 2 seeds on bigram-backcopy and the
    Bible-byte check (softmax, head-wise RMSNorm, head-wise RMSNorm with gain 0.1) x 2 seeds."""
    from sinklib.mitigation import comparison
    from sinklib.mitigation.protocol import TRAIN_CPU
    from sinklib.mitigation.variants import VARIANTS

    out = [comparison.variant_config(TRAIN_CPU, v, s) for v in VARIANTS for s in (0, 1)]
    text = replace(TRAIN_CPU, data="bible")
    small = replace(text.model, attention="headwise_rmsnorm", options=(("gain_init", 0.1),))
    for s in (0, 1):
        out += [comparison.variant_config(text, "softmax", s), comparison.variant_config(text, "headwise_rmsnorm", s),
                replace(text, model=small, seed=s)]
    return out


def _train_one(cfg) -> str:
    from sinklib.mitigation import training

    training.train(cfg, progress=False)  # one thread: sinklib.core.precision.training_threads
    return cfg.key()


def train(cache: str, workers: int) -> None:
    os.environ["SINKLIB_CACHE"] = cache
    with ProcessPoolExecutor(workers) as pool:
        for key in pool.map(_train_one, configs()):
            print("trained", key, flush=True)


def final(path: Path) -> dict[str, float]:
    from sinklib.mitigation.verdicts import late_slope

    run = json.loads(path.read_text())
    last = run["checkpoints"][-1]
    out = {"val_loss": last["val_loss"], "first_attention": last["first_attention"], "sink_rate": last["sink_rate"],
           "late_slope": late_slope(run)}
    return out | {k: last[k] for k in ("first_share", "share_sink_rate") if k in last}  # an older run has neither


def finals(source: Path) -> dict[str, dict[str, float]]:
    """Run key -> :func:`final` of every training run in a cache (``<cache>/training/*.json`` holding checkpoints), or
    the same mapping read from a JSON file that ``finals`` wrote on another machine (a cache's runs are too large to
    copy back from it)."""
    if source.suffix == ".json":
        return json.loads(source.read_text())
    out = {}
    for path in sorted((source / "training").glob("*.json")):
        run = json.loads(path.read_text())
        if isinstance(run, dict) and "checkpoints" in run:
            out[path.stem] = final(path)
    return out


def compare(sources: dict[str, Path]) -> dict:
    """Per run key (found in every source: a cache or a ``finals`` JSON file): each quantity on every source and its
    spread (max - min); and per quantity the largest spread over the runs, with the run it came from."""
    names = list(sources)
    values = {n: finals(p) for n, p in sources.items()}
    keys = sorted(set.intersection(*(set(v) for v in values.values())))
    runs = {}
    for key in keys:  # a quantity a source did not record (an older finals file) is compared over the others
        runs[key] = {}
        for q in QUANTITIES:
            got = {n: values[n][key][q] for n in names if q in values[n][key]}
            runs[key][q] = {"values": got, "spread": max(got.values()) - min(got.values()) if len(got) > 1 else None}
    largest = {q: max(((r[q]["spread"], k) for k, r in runs.items() if r[q]["spread"] is not None),
                      default=(None, None)) for q in QUANTITIES}
    means = {}  # the spread of each configuration's mean over its seeds (what a verdict on seed means reads)
    for group in seed_groups():
        if all(k in runs for k in group):
            got = {q: [m for n in names if (m := _mean(values, group, n, q)) == m] for q in QUANTITIES}
            means[" + ".join(group)] = {q: max(v) - min(v) if len(v) > 1 else None for q, v in got.items()}
    largest_mean = {q: max(((m[q], k) for k, m in means.items() if m[q] is not None), default=(None, None))
                    for q in QUANTITIES}
    return {"settings": names, "runs": runs,
            "largest_spread": {q: {"spread": s, "run": k} for q, (s, k) in largest.items()},
            "largest_mean_spread": {q: {"spread": s, "runs": k} for q, (s, k) in largest_mean.items()}}


def _mean(values: dict, group: tuple[str, ...], name: str, q: str) -> float:
    return sum(values[name][k][q] for k in group) / len(group) if all(q in values[name][k] for k in group) \
        else float("nan")


def seed_groups() -> list[tuple[str, ...]]:
    """The run keys of each configuration of :func:`configs` over its seeds (seed 0's config with every seed)."""
    groups: dict[str, list[str]] = {}
    for cfg in configs():
        groups.setdefault(replace(cfg, seed=0).key(), []).append(cfg.key())
    return [tuple(keys) for keys in groups.values() if len(keys) > 1]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("cache")
    t.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 1)))
    f = sub.add_parser("finals")
    f.add_argument("cache")
    f.add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("caches", nargs="+", help="NAME=CACHE_DIR or NAME=FINALS.json")
    c.add_argument("--write", default="")
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args.cache, args.workers)
        return
    if args.command == "finals":
        Path(args.out).write_text(json.dumps(finals(Path(args.cache)), indent=1) + "\n")
        return
    result = compare({n: Path(p) for n, p in (x.split("=", 1) for x in args.caches)})
    for key, r in result["runs"].items():
        print(f"{key:<40}" + "  ".join(f"{q} " + "/".join(f"{v:.4f}" for v in r[q]["values"].values())
                                          + (f" (±{r[q]['spread']:.4f})" if r[q]["spread"] is not None else "")
                                          for q in QUANTITIES))
    print("largest spread:", json.dumps(result["largest_spread"]))
    if args.write:
        Path(args.write).write_text(json.dumps(result, indent=1) + "\n")
        print("wrote", args.write)


if __name__ == "__main__":
    main(sys.argv[1:])
