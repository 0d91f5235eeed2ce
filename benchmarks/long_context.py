"""Memory and time of sink statistics at long context on SmolLM2, each measurement in a fresh process.

    python benchmarks/long_context.py [--lengths 512 1024 2048 4096 8192] [--model smollm2-135m]
    python benchmarks/long_context.py --device cuda [--dtypes float32 bfloat16] [--lengths 1024 4096 16384 32768]

On CUDA (``--device cuda``; see :func:`cuda_main`) one process times, per length and dtype, a plain sdpa forward,
the first key's statistics, every key's, and eager maps where they fit, on random weights of SmolLM2's shape
(``--model random-smollm2``, the default there) or a model id: synchronised, the median of up to ``--rounds``, with
peak CUDA memory -- how a GPU run reports. Targets: first key <= 1.5x sdpa in bfloat16 and <= 1.1x in float32 from
4k to 32k tokens, every key <= 3x, 131,072 tokens at O(N) memory on an 80 GB GPU. Without a CUDA device it
says so and runs the CPU rows below; ``--fake`` rehearses the CUDA rows on the fake device (CPU transcriptions of
the CUDA kernels, Triton's interpreter), for the code path only.

On the CPU:

(a) a plain sdpa forward; (b) eager attention with ``output_attentions=True`` (the way other attention-sink code
gets its statistics), skipped where its estimated memory does not fit; (c) sinklib's statistics of the first token
as the long-context sweeps take them (:class:`sinklib.core.attnstats.AttentionStats` with ``keys=[0]``: torch's CPU
flash kernel gives the output and each query's log-sum-exp in one pass, alpha_0 follows from one extra column);
(d) the statistics of every key (``keys=None``: one blocked pass computing the output and the per-key mass). All
skip the full logits (``logits_to_keep=1``) so the attention path is what is compared. Peak RSS is the child's
ru_maxrss. The three sdpa-loaded modes are timed in one more process, interleaved
(a, c, d, a, c, d, ...: a slow spell of the machine hits all of them), the fastest of 3 rounds up to N=2048 and of
one above; eager's time is its own process's.

Prints a table with the ratios (c)/(a) and (d)/(a) time and (b)/(c) peak memory, and writes it with a plot to
``figures/benchmarks/``. Targets (2-core CPU): (c)/(a) time <= 1.2 at every N up to 8192 with (c) <= 2 GiB at
8192; at N=2048 (b)/(c) memory >= 3.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = r"""
import json, resource, sys, time, torch
from sinklib.models.load import load_model
from sinklib.core.attnstats import AttentionStats
mode, n, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lm = load_model(model, device="cpu", attn_implementation="eager" if mode == "eager" else "sdpa")
ids = torch.randint(0, lm.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))


def run(x):
    if mode == "sdpa":
        lm.model(x, use_cache=False, logits_to_keep=1)
        return None
    if mode == "eager":
        out = lm.model(x, use_cache=False, logits_to_keep=1, output_attentions=True)
        return [float(a[0, :, :, 0].mean()) for a in out.attentions]
    with AttentionStats(lm.model, keys=[0] if mode == "stats" else None) as st:
        lm.model(x, use_cache=False, logits_to_keep=1)
    return [float(st.key_mass(i)[0, :, 0].mean()) for i in st.layers]


with torch.inference_mode():
    run(ids[:, :64])  # warm-up of the same code path: kernels, allocator, registry
    start = time.perf_counter()
    first = run(ids)
    seconds = time.perf_counter() - start
    rounds = {}
    if len(sys.argv) > 4:  # timing: the given modes interleaved, the fastest of each over several rounds
        for _ in range(int(sys.argv[4])):
            for m in ("sdpa", "stats", "stats_all"):
                mode = m
                start = time.perf_counter()
                run(ids)
                rounds.setdefault(m, []).append(time.perf_counter() - start)
print(json.dumps({"seconds": seconds, "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                  "alpha_first": first, "rounds": rounds}))
"""


def measure(mode: str, n: int, model: str, rounds: int = 0) -> dict | None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    extra = [str(rounds)] if rounds else []
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(n), model, *extra], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        print(f"  {mode} N={n} failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr else proc.returncode}")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def eager_fits(model: str, n: int) -> tuple[bool, float]:
    from sinklib.core.memory import GiB, available_bytes, forward_bytes
    from sinklib.models.load import load_model

    lm = load_model(model, device="cpu")
    need = forward_bytes(lm, 1, n, eager_attentions=True) + 2 * GiB  # + weights and the interpreter
    return need < 0.8 * available_bytes(lm.device), need / GiB


CUDA_MODES = ("sdpa", "first key", "every key", "eager")


def random_smollm2(layers: int, max_len: int):
    """Random weights of SmolLM2-135M's shape (30 x 576, 9 query / 3 key heads of 64), sdpa attention."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=576, intermediate_size=1536, num_hidden_layers=layers, num_attention_heads=9,
                      num_key_value_heads=3, vocab_size=49152, max_position_embeddings=max_len, rope_theta=100000.0,
                      tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def _cuda_forward(model, mode: str, ids) -> None:
    """One forward of ``mode`` (see :data:`CUDA_MODES`), the full logits skipped."""
    from sinklib.core.attnstats import AttentionStats

    if mode == "sdpa":
        model(ids, use_cache=False, logits_to_keep=1)
    elif mode == "eager":
        model.config._attn_implementation = "eager"
        try:
            model(ids, use_cache=False, logits_to_keep=1, output_attentions=True)
        finally:
            model.config._attn_implementation = "sdpa"
    else:
        with AttentionStats(model, keys=[0] if mode == "first key" else None):
            model(ids, use_cache=False, logits_to_keep=1)


def _cuda_time(model, mode: str, ids, rounds: int, budget_s: float) -> dict:
    """Median seconds of up to ``rounds`` synchronised forwards (stopping after ``budget_s``) and the peak memory."""
    import statistics
    import time

    import torch

    _cuda_forward(model, mode, ids[:, :256])  # warm-up: kernels chosen, Triton compiled, allocator grown
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    times, deadline = [], time.perf_counter() + budget_s
    for _ in range(rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        _cuda_forward(model, mode, ids)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        if time.perf_counter() > deadline:
            break
    return {"seconds": statistics.median(times), "rounds": len(times),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30}


def cuda_main(args) -> None:
    """The CUDA rows: per length and dtype, sdpa / first key / every key / eager, ratios to sdpa, and the targets."""
    import contextlib

    import torch

    from sinklib.core.results import write_json
    from sinklib.pipeline.plan_calibration import STATS_TARGETS as CUDA_TARGETS  # the path's targets

    fake = contextlib.nullcontext()
    if args.fake:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' fake device: a rehearsal only
        from tests.fake_cuda import fake_cuda

        fake = fake_cuda()
    rows = []
    with fake, torch.inference_mode():
        device = torch.cuda.get_device_name(0)
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            if args.model == "random-smollm2":
                model = random_smollm2(args.layers, max(args.lengths)).to("cuda", dtype)
            else:
                from sinklib.models.load import load_model

                model = load_model(args.model, device="cuda", dtype=dtype).model
            cfg = model.config
            for n in args.lengths:
                ids = torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(0)).to("cuda")
                row = {"N": n, "dtype": dtype_name}
                free = torch.cuda.mem_get_info()[0]
                maps = cfg.num_hidden_layers * cfg.num_attention_heads * n * n * dtype.itemsize
                for mode in CUDA_MODES:
                    if mode == "eager" and 1.3 * maps > free:
                        row[mode] = {"skipped": f"maps need {maps / 2**30:.0f} GiB"}
                        continue
                    print(f"N={n} {dtype_name}: {mode} ...", flush=True)
                    try:
                        row[mode] = _cuda_time(model, mode, ids, args.rounds, args.budget)
                    except torch.OutOfMemoryError:
                        row[mode] = {"skipped": "out of memory"}
                        torch.cuda.empty_cache()
                rows.append(row)
            del model
    header = (f"{'N':>7} {'dtype':>9} {'sdpa s':>8} {'first key':>10} {'every key':>10} {'eager':>8} "
              f"{'sdpa GiB':>9} {'first GiB':>10} {'every GiB':>10} {'targets':>8}")
    lines = [header]
    for r in rows:
        base = r["sdpa"].get("seconds")
        ratio = {m: (r[m]["seconds"] / base if base and "seconds" in r[m] else float("nan")) for m in CUDA_MODES}
        gib = {m: r[m].get("peak_gib", float("nan")) for m in CUDA_MODES}
        first_cut = CUDA_TARGETS["first key"][r["dtype"]]
        met = ratio["first key"] <= first_cut and ratio["every key"] <= CUDA_TARGETS["every key"]
        lines.append(f"{r['N']:>7} {r['dtype']:>9} {base or float('nan'):>8.3f} {ratio['first key']:>9.2f}x "
                     f"{ratio['every key']:>9.2f}x {ratio['eager']:>7.2f}x {gib['sdpa']:>9.2f} "
                     f"{gib['first key']:>10.2f} {gib['every key']:>10.2f} {'met' if met else 'MISSED':>8}")
    table = "\n".join(lines)
    print(f"\n{args.model} on {device}{' (fake: code path only, no timing meaning)' if args.fake else ''}, "
          f"batch 1, median of up to {args.rounds} synchronised forwards; targets: first key <= "
          f"{CUDA_TARGETS['first key']['bfloat16']}x (bf16) / {CUDA_TARGETS['first key']['float32']}x (fp32), "
          f"every key <= {CUDA_TARGETS['every key']}x\n{table}")
    out = Path(args.out)
    write_json(out / "long_context_cuda.json", {"model": args.model, "device": device, "fake": args.fake,
                                                "rows": rows})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=None)
    ap.add_argument("--model", default=None, help="smollm2-135m on the CPU; random-smollm2 (its shape) on CUDA")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], help="CUDA rows: the dtypes")
    ap.add_argument("--rounds", type=int, default=3, help="CUDA rows: forwards per measurement (median)")
    ap.add_argument("--budget", type=float, default=60.0, help="CUDA rows: seconds per measurement at most")
    ap.add_argument("--layers", type=int, default=30, help="CUDA rows, random-smollm2: layers (30 = SmolLM2)")
    ap.add_argument("--fake", action="store_true", help="rehearse the CUDA rows on the fake device (code path only)")
    ap.add_argument("--out", default=str(ROOT / "figures" / "benchmarks"))
    args = ap.parse_args()
    if args.device == "cuda":
        import torch

        if args.fake or torch.cuda.is_available():
            args.model = args.model or "random-smollm2"
            args.lengths = args.lengths or [1024, 4096, 16384, 32768, 131072]
            cuda_main(args)
            return
        print("no CUDA device here: running the CPU rows instead", flush=True)
    args.model = "smollm2-135m" if args.model in (None, "random-smollm2") else args.model
    args.lengths = args.lengths or [512, 1024, 2048, 4096, 8192]
    rows = []
    for n in args.lengths:
        print(f"N={n}: sdpa ...", flush=True)
        a = measure("sdpa", n, args.model)
        fits, need = eager_fits(args.model, n)
        print(f"N={n}: eager output_attentions " + ("..." if fits else f"skipped (needs ~{need:.0f} GiB)"), flush=True)
        b = measure("eager", n, args.model) if fits else None
        print(f"N={n}: sinklib stats ...", flush=True)
        c = measure("stats", n, args.model)
        print(f"N={n}: sinklib stats, every key ...", flush=True)
        d = measure("stats_all", n, args.model)
        rounds = 3 if n <= 2048 else 1
        print(f"N={n}: timing (a), (c), (d) interleaved, {rounds} round(s) ...", flush=True)
        timing = measure("sdpa", n, args.model, rounds=rounds)
        for run, key in ((a, "sdpa"), (c, "stats"), (d, "stats_all")):
            if run and timing:
                run["seconds"] = min(timing["rounds"][key])
        rows.append({"N": n, "sdpa": a, "eager": b, "stats": c, "stats_all": d, "eager_estimate_gib": need})

    gib = 2**30
    header = (f"{'N':>6} {'(a) sdpa s':>11} {'(b) eager s':>12} {'(c) key 0 s':>12} {'(c)/(a) time':>13} "
              f"{'(d) all keys s':>15} {'(d)/(a) time':>13} "
              f"{'(a) GiB':>8} {'(b) GiB':>8} {'(c) GiB':>8} {'(d) GiB':>8} {'(b)/(c) mem':>12}")
    lines = [header]
    for r in rows:
        a, b, c, d = r["sdpa"], r["eager"], r["stats"], r["stats_all"]
        t_ratio = c["seconds"] / a["seconds"] if a and c else float("nan")
        d_ratio = d["seconds"] / a["seconds"] if a and d else float("nan")
        m_ratio = b["peak_rss"] / c["peak_rss"] if b and c else float("nan")
        fmt = lambda x, k, s=1: f"{x[k] / s:.2f}" if x else "-"  # noqa: E731
        lines.append(f"{r['N']:>6} {fmt(a, 'seconds'):>11} {fmt(b, 'seconds'):>12} {fmt(c, 'seconds'):>12} "
                     f"{t_ratio:>13.2f} {fmt(d, 'seconds'):>15} {d_ratio:>13.2f} {fmt(a, 'peak_rss', gib):>8} "
                     f"{fmt(b, 'peak_rss', gib):>8} {fmt(c, 'peak_rss', gib):>8} {fmt(d, 'peak_rss', gib):>8} "
                     f"{m_ratio:>12.2f}")
    table = "\n".join(lines)
    print(f"\nmodel {args.model}, {os.cpu_count()} CPU cores, batch 1, peak RSS of each fresh process\n{table}")

    sys.path.insert(0, str(ROOT))
    from sinklib.core import plotting
    from sinklib.core.paths import atomic_write_bytes
    from sinklib.core.results import write_json

    out = Path(args.out)
    write_json(out / "long_context.json", {"model": args.model, "rows": rows})
    atomic_write_bytes(out / "long_context.txt.md", (table + "\n").encode())
    with plotting.style():
        fig = plotting.long_context_benchmark(rows, args.model)
        plotting.save(fig, out / "long_context", caption=(
            f"Peak RSS and forward time of {args.model} (batch 1, 2-core CPU) vs context length: plain sdpa, eager "
            f"with output_attentions (where it fits), and sinklib's O(N) attention statistics (first token; every key). "
            f"Produced by benchmarks/long_context.py."))
    from sinklib.pipeline.gallery import build_gallery

    build_gallery(out.parent)
    print(f"wrote {out}/long_context.{{json,png,pdf}}")


if __name__ == "__main__":
    main()
