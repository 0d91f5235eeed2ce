"""Load time of an offline GGUF model: first load (dequantise + cache) vs cached loads, each in a fresh process.

    python benchmarks/load_time.py [--model smollm2-135m] [--repeats 3]

The first load runs with an empty temporary ``SINKLIB_CACHE`` so it really converts; the cached loads then read
that cache. ``load_model`` is timed inside the process after the one-off library imports (torch, transformers and
its modeling modules, ~3 s that every process pays whatever it loads), which are reported in their own column; the
whole process is timed outside.
Target: a cached SmolLM2 load within 3 s on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, time
t0 = time.perf_counter()
from sinklib.models.load import load_model
import transformers.models.llama.modeling_llama, transformers.models.gemma3.modeling_gemma3  # one-off imports
t1 = time.perf_counter()
lm = load_model({model!r}, device="cpu")
t2 = time.perf_counter()
print(json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1}}))
"""


def measure(model: str, cache: str) -> dict:
    env = {**os.environ, "SINKLIB_CACHE": cache, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CHILD.format(model=model)], env=env, capture_output=True,
                          text=True, check=True)
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["process_s"] = time.perf_counter() - start
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sinklib-bench-") as cache:
        rows = [("first (converts)", measure(args.model, cache))]
        rows += [(f"cached #{i + 1}", measure(args.model, cache)) for i in range(args.repeats)]
    first = rows[0][1]["load_s"]
    cached = min(r["load_s"] for _, r in rows[1:])
    print(f"model {args.model}, {os.cpu_count()} CPU cores, torch threads default")
    print(f"{'run':<18}{'load_model s':>13}{'imports s':>11}{'process s':>11}   (imports: torch + transformers)")
    for name, r in rows:
        print(f"{name:<18}{r['load_s']:>13.2f}{r['import_s']:>11.2f}{r['process_s']:>11.2f}")
    print(f"first / cached load: {first:.1f} s / {cached:.2f} s = {first / cached:.0f}x faster once cached; "
          f"target cached <= 3 s: {'met' if cached <= 3 else 'NOT met'}")


if __name__ == "__main__":
    main()
