"""A yardstick for this machine's speed today, against a recorded day, so that a budget can be read across days.

    python benchmarks/machine_speed.py                      # seconds now, ratios to the recorded day
    python benchmarks/machine_speed.py --record --cold-s 2068 --warm-s 640   # record today (after make figures)

The same 2-core machine has run the same code at different speeds on different days (03_mitigation from empty
caches, the same training sizes: 530 s at e6bf228 on 2026-11-26, 833 s on 2026-11-28, when its training loop ran at
the same speed at both commits). A `make figures` time therefore says little about a budget unless the day's speed is known. This script
times, on one thread as the notebooks run, the two kinds of work the cold run is made of:

* ``training``: 100 steps of 03_mitigation's CPU-profile TinyLM (bfloat16 autocast, bigram-backcopy), no cache;
* ``inference``: SmolLM2-135M's float32 forward of 16 x 64 Bible tokens (the shape 10_llm reads), median of 5
  after one warm-up.

It prints each one's seconds and its ratio to ``data/reference/machine_speed.json`` (the recorded day), and what
the recorded day's `make figures` times become at today's speed (scaled by the geometric mean of the two ratios).
Run it on an idle machine: a notebook running beside it slows both.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

RECORD = Path(__file__).resolve().parents[1] / "data" / "reference" / "machine_speed.json"


def time_training(steps: int = 100) -> float:
    """Seconds of ``steps`` training steps of 03's CPU TinyLM (evaluations at its eval_every included), no cache."""
    from sinklib.mitigation.protocol import TRAIN_CPU
    from sinklib.mitigation.training import train

    cfg = replace(TRAIN_CPU, steps=steps, eval_every=50)
    start = time.perf_counter()
    train(cfg, use_cache=False, progress=False)
    return time.perf_counter() - start


def time_inference(repeats: int = 5) -> float:
    """Median seconds of SmolLM2's float32 forward of 16 x 64 natural tokens (one warm-up first)."""
    import torch

    from sinklib.core.data import make_inputs
    from sinklib.models.load import load_model

    lm = load_model("smollm2-135m", device="cpu", dtype="float32")
    ids = make_inputs(lm, "natural", 16, 64, 0)
    seconds = []
    with torch.inference_mode():
        for i in range(repeats + 1):
            start = time.perf_counter()
            lm.model(ids, use_cache=False)
            if i:
                seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def scaled(recorded: dict, now: dict[str, float]) -> tuple[float, dict[str, float]]:
    """(speed factor, the recorded day's make-figures seconds at today's speed): the factor is the geometric mean of
    now / recorded over the workloads both have (> 1: slower today)."""
    ratios = [now[k] / recorded["seconds"][k] for k in now if k in recorded["seconds"]]
    factor = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return factor, {k: v * factor for k, v in recorded.get("make_figures_s", {}).items()}


def measure() -> dict[str, float]:
    """Both workloads, each in its own process on one thread (as the notebooks run)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    out = {}
    for name in ("training", "inference"):
        code = (f"import torch; torch.set_num_threads(1); import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                f"import machine_speed as m; print(m.time_{name}())")
        proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"the {name} workload failed: {proc.stderr.strip().splitlines()[-1]}")
        out[name] = float(proc.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", action="store_true", help="write today's seconds as the recorded day")
    ap.add_argument("--cold-s", type=float, help="with --record: today's make figures from empty caches, wall s")
    ap.add_argument("--warm-s", type=float, help="with --record: today's warm make figures, wall s")
    ap.add_argument("--commit", default="", help="with --record: the commit those make figures times are of")
    args = ap.parse_args()
    now = measure()
    print(f"{os.cpu_count()} CPU cores, one thread per workload")
    for k, v in now.items():
        print(f"  {k:<10} {v:7.2f} s")
    if args.record:
        record = {"recorded": time.strftime("%Y-%m-%d"), "commit": args.commit, "seconds": now,
                  "make_figures_s": {k: v for k, v in (("cold", args.cold_s), ("warm", args.warm_s)) if v}}
        RECORD.write_text(json.dumps(record, indent=1) + "\n")
        print(f"recorded in {RECORD}")
        return
    if not RECORD.exists():
        print(f"no recorded day ({RECORD}); run with --record after a make figures")
        return
    recorded = json.loads(RECORD.read_text())
    factor, then = scaled(recorded, now)
    for k, v in now.items():
        print(f"  {k:<10} now / {recorded['recorded']}: {v / recorded['seconds'][k]:.2f}")
    print(f"this machine runs {factor:.2f}x the recorded day's time ({'slower' if factor > 1 else 'faster'})")
    for k, v in then.items():
        print(f"  make figures, {k}: {recorded['make_figures_s'][k]:,.0f} s on {recorded['recorded']} "
              f"({recorded.get('commit') or 'commit not recorded'}) -> about {v:,.0f} s ({v / 60:.1f} min) today")


if __name__ == "__main__":
    main()
