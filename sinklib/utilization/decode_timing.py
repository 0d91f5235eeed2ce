"""Decode cost: greedy decoding of several KV caches in lockstep, the wall time and cache size of every step, and
the timing verdict read from paired per-step time ratios (01_utilization section 3, ``benchmarks/streaming_decode.py``).

A shared machine's load moves wall time; here it cannot make a verdict: the caches decode step by step side by side
(:func:`interleaved_decode`), each round gives the median per-step time ratio, and the rounds' disagreement sets the
resolution below which a difference is "no difference" (:func:`decode_timing`, :class:`DecodeTiming`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache

from sinklib.core.loaded import LoadedModel
from sinklib.utilization.sink_cache import cache_bytes


@dataclass
class DecodeCost:
    seconds: torch.Tensor  # (n,) wall time of each decoding step
    cache_bytes: torch.Tensor  # (n,) bytes of keys/values held after each step


@torch.inference_mode()
def decode_cost(lm: LoadedModel, prompt: torch.Tensor, n_tokens: int, make_cache: Callable[[], object] | None = None,
                desc: str = "decode", progress: bool = True) -> DecodeCost:
    """Greedy decoding token by token after a prompt; time and KV-cache size per generated token (on CUDA each step
    is timed after ``torch.cuda.synchronize``, so the time is the kernels', not their launch)."""
    return _lockstep(lm, prompt, n_tokens, {desc: make_cache}, desc, progress)[desc]


@torch.inference_mode()
def _lockstep(lm: LoadedModel, prompt: torch.Tensor, n_tokens: int,
              caches: Mapping[str, Callable[[], object] | None], desc: str, progress: bool) -> dict[str, DecodeCost]:
    """Greedy decoding of every cache in ``caches`` ({name: factory, None = dense}) in lockstep: step t of each
    cache in turn (the order reversed every step), each step timed alone, so that the load of the machine at step t
    falls on every cache alike."""
    sync = device_synchronizer(lm.device)
    state = {}
    for name, make in caches.items():
        cache = DynamicCache() if make is None else make()
        logits = lm.model(prompt.reshape(1, -1).to(lm.device), past_key_values=cache, use_cache=True).logits
        state[name] = {"cache": cache, "token": logits[:, -1:].argmax(-1), "secs": [], "sizes": []}
    sync()
    names = list(caches)
    for step in tqdm(range(n_tokens), desc=desc, disable=not progress, leave=False):
        for name in names if step % 2 == 0 else names[::-1]:
            st = state[name]
            start = time.perf_counter()
            logits = lm.model(st["token"], past_key_values=st["cache"], use_cache=True).logits
            st["token"] = logits[:, -1:].argmax(-1)
            sync()  # CUDA returns before the kernels finish: time the work, not its launch
            st["secs"].append(time.perf_counter() - start)
            st["sizes"].append(cache_bytes(st["cache"]))
    return {name: DecodeCost(torch.tensor(st["secs"]), torch.tensor(st["sizes"], dtype=torch.float64))
            for name, st in state.items()}


MIN_RESOLUTION = 0.05  # a relative time difference at or below this is "no difference", whatever the rounds say


@dataclass(frozen=True)
class DecodeTiming:
    """Decode time per token of several caches, timed so that the machine's load cannot make a verdict: in each of
    several rounds the caches decode in lockstep (:func:`interleaved_decode`: a slow spell hits every cache at the
    same step), each round gives the median over its last ``steps`` steps of the per-step time ratio of a cache to
    the first cache (the reference), and the verdict reads the median round (:func:`decode_timing`)."""

    ms: dict[str, float]  # per cache: the fastest round's median ms per token (for the reader; not the verdict)
    rounds_ms: dict[str, list[float]]  # per cache: each round's median ms per token
    ratios: dict[str, list[float]]  # per cache: each round's median of (this cache's step time / the reference's)
    steps: int  # the last decoding steps timed in each round
    resolution: float  # relative: a ratio within 1 +- this is "no difference"

    def ratio(self, a: str, b: str) -> float:
        """Time per token of cache ``a`` / cache ``b``: the median round's paired ratio (b is the reference)."""
        return statistics.median(self.ratios[a]) / statistics.median(self.ratios[b])

    def verdict(self, a: str, b: str) -> str:
        """"no difference", "slower" or "faster" for ``a`` against ``b`` (:func:`timing_verdict`)."""
        return timing_verdict(self.ratio(a, b), 1.0, self.resolution)

    def describe(self) -> str:
        """How it was timed, for captions and takeaways."""
        n = len(next(iter(self.rounds_ms.values())))
        return (f"{n} rounds, each decoding the caches in lockstep (one step of each in turn, the order alternating); "
                f"per round the median over the last {self.steps} steps of the per-step time ratio, the verdict on "
                f"the median round; resolution {100 * self.resolution:.0f}% (the larger of "
                f"{100 * MIN_RESOLUTION:.0f}% and the widest deviation of a round's ratio from the median round)")


def timing_verdict(a_ms: float, b_ms: float, resolution: float) -> str:
    """``a`` against ``b``: "no difference" when |a / b - 1| <= ``resolution``, else "slower" (a > b) or "faster"."""
    if abs(a_ms / b_ms - 1) <= resolution:
        return "no difference"
    return "slower" if a_ms > b_ms else "faster"


def decode_timing(seconds: Mapping[str, Sequence[torch.Tensor]], steps: int,
                  floor: float = MIN_RESOLUTION) -> DecodeTiming:
    """The timing verdict's numbers from lockstep rounds. ``seconds``: {cache: [per-step seconds (n,) of each
    round]}, the first cache the reference, step t of every cache measured side by side. Per round r and cache c:
    q_{c,r} = median over the last ``steps`` steps of s_{c,r,t} / s_{ref,r,t} (a spike of a few steps, or a load
    that changes between rounds, does not move it). Verdict ratio: median_r q_{c,r}. Resolution: max(``floor``,
    max_{c,r} |q_{c,r} - median_r q_{c,r}|): a difference the rounds disagree about by that much is not measured.
    ``ms``: per cache the fastest round's median step time, min_r median_t s_{c,r,t} (the load only adds time)."""
    ref = next(iter(seconds))
    tail = {name: [torch.as_tensor(r, dtype=torch.float64)[-steps:] for r in runs] for name, runs in seconds.items()}
    rounds = {name: [1000 * float(r.median()) for r in runs] for name, runs in tail.items()}
    ratios = {name: [float((r / d).median()) for r, d in zip(runs, tail[ref])] for name, runs in tail.items()}
    spread = max(abs(q - statistics.median(qs)) for qs in ratios.values() for q in qs)
    return DecodeTiming(ms={name: min(m) for name, m in rounds.items()}, rounds_ms=rounds, ratios=ratios,
                        steps=steps, resolution=max(floor, spread))


def evicting_steps(n_tokens: int, budget: int, prompt_tokens: int) -> int:
    """How many of ``n_tokens`` decoding steps after a ``prompt_tokens`` prompt run with a full sink + window cache of
    ``budget`` entries (step i leaves prompt_tokens + i + 1 entries in a dense cache, so the sink cache evicts from
    step budget - prompt_tokens on): n_tokens - (budget - prompt_tokens); where the cache never fills, the last
    quarter, max(1, n_tokens // 4). These are the steps the timing verdict reads: before them both caches hold the
    same keys and do the same work."""
    full = n_tokens - max(0, budget - prompt_tokens)
    return full if full > 0 else max(1, n_tokens // 4)


def interleaved_decode(lm: LoadedModel, prompt: torch.Tensor, n_tokens: int,
                       caches: Mapping[str, Callable[[], object] | None], rounds: int = 3,
                       progress: bool = True) -> dict[str, list[DecodeCost]]:
    """Greedy decoding of every cache in ``caches`` ({name: factory, None = dense}; the first is the reference of
    :func:`decode_timing`), ``rounds`` times, in lockstep within each round (step t of each cache in turn, as
    ``benchmarks/long_context.py`` interleaves its modes, at the finest grain): {name: [DecodeCost per round]}."""
    out: dict[str, list[DecodeCost]] = {name: [] for name in caches}
    for r in range(rounds):
        for name, cost in _lockstep(lm, prompt, n_tokens, caches, f"decode, round {r + 1}/{rounds}",
                                    progress).items():
            out[name].append(cost)
    return out


def device_synchronizer(device: torch.device) -> Callable[[], None]:
    """A function that waits for queued work: on CUDA ``torch.cuda.synchronize`` on every visible GPU (a model split
    over several runs on all of them), elsewhere nothing."""
    if torch.device(device).type == "cuda":
        def sync() -> None:
            for index in range(torch.cuda.device_count()):
                torch.cuda.synchronize(index)
        return sync
    return lambda: None
