"""Decode cost per token at a context of N tokens: a dense KV cache against StreamingLLM's sink + window cache.

    python benchmarks/streaming_decode.py [--lengths 1024 2048 4096 8192] [--budget 256] [--tokens 32]

For each N, both caches first take N tokens of Bible text (dense: one prefill; sink cache: chunks of ``budget``, so
it holds only 4 sinks + the window), then greedily decode ``--tokens`` tokens one at a time; the table gives the
median ms per decoded token, the ratio sink / dense, and the bytes each cache holds. The sink cache should be flat
in N (it never holds more than its budget, and it no longer re-rotates its window at every step: only its 4 sinks
move, see ``sinklib/utilization/sink_cache.py``) and below dense once N is a few times the budget, as in the
paper's Figure 10. One process, batch 1, float32, the CPU's threads; writes ``figures/benchmarks/streaming_decode.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def decode_ms(model, cache, first: torch.Tensor, tokens: int) -> list[float]:  # noqa: F821
    import torch

    times, nxt = [], first
    with torch.inference_mode():
        for _ in range(tokens):
            start = time.perf_counter()
            logits = model(nxt, past_key_values=cache, use_cache=True).logits
            nxt = logits[:, -1:].argmax(-1)
            times.append(1000 * (time.perf_counter() - start))
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    p.add_argument("--budget", type=int, default=256, help="sink cache size: 4 sinks + window")
    p.add_argument("--tokens", type=int, default=32, help="tokens decoded per measurement")
    p.add_argument("--model", default="smollm2-135m")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    import torch
    from transformers import DynamicCache

    from sinklib.core.data import text_windows
    from sinklib.models.load import load_model
    from sinklib.utilization.sink_cache import SinkWindowCache, cache_bytes

    lm = load_model(args.model, device="cpu")
    text = text_windows(lm.tokenizer, 1, max(args.lengths) + 1, 0, split="heldout")[0].tolist()
    rows = []
    for n in args.lengths:
        ids = torch.tensor(text[:n])[None]
        dense = DynamicCache()
        sink = SinkWindowCache.for_model(lm.model, n_sink=4, window=args.budget - 4)
        with torch.inference_mode():
            lm.model(ids, past_key_values=dense, use_cache=True, logits_to_keep=1)
            for s in range(0, n, args.budget):
                lm.model(ids[:, s:s + args.budget], past_key_values=sink, use_cache=True, logits_to_keep=1)
        first = torch.tensor([[text[n]]])
        d = statistics.median(decode_ms(lm.model, dense, first, args.tokens))
        k = statistics.median(decode_ms(lm.model, sink, first, args.tokens))
        rows.append((n, d, k, cache_bytes(dense) / 2**20, cache_bytes(sink) / 2**20))
        print(f"N={n}: dense {d:.1f} ms/token, sink cache {k:.1f} ms/token ({k / d:.2f}x)", flush=True)
    lines = ["| N | dense ms/token | sink + window ms/token | sink / dense | dense cache MiB | sink cache MiB |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {n} | {d:.1f} | {k:.1f} | {k / d:.2f} | {dm:.1f} | {km:.1f} |" for n, d, k, dm, km in rows]
    table = "\n".join(lines)
    print(table)
    out = ROOT / "figures" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    (out / "streaming_decode.md").write_text(
        f"Decode cost at context N ({lm.label}, CPU, batch 1, median of {args.tokens} tokens; sink cache: 4 sinks + "
        f"{args.budget - 4} window)\n\n{table}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
