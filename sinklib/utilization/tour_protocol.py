"""00_tour's protocol: its sizes per profile, the model family it takes, its budget and the steps the dry run counts
(:class:`~sinklib.core.protocol.NotebookProtocol`; the tour's research code is :mod:`sinklib.core.analysis` and
this folder's ``tour``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sinklib.core.protocol import NotebookProtocol, Step, forwards


@dataclass(frozen=True)
class TourSizes:
    """00_tour's size knobs in one profile (a :class:`~sinklib.pipeline.profiles.Run` reads them through)."""

    num_seqs: int  # sequences per input type for sink statistics (Gu et al.: 100)
    seq_len: int  # T (Gu et al.: 64)
    batch_size: int
    map_seq_len: int  # tokens shown in attention-map figures
    context_lengths: tuple[int, ...]  # long-context sink statistics (O(N) memory path)
    context_windows: int  # natural windows per context length (~2 min each on 2 cores for SmolLM2 up to 8k tokens)
    control_seqs: int  # sequences per input type for the random-weight control (and per extra random-token draw)


SMOKE = TourSizes(num_seqs=8, seq_len=32, batch_size=8, map_seq_len=16, context_lengths=(64, 256),
                  context_windows=2, control_seqs=4)

SIZES: dict[str, TourSizes] = {
    "smoke": SMOKE,
    # 128..4096 tokens, 32-fold as the GPU profile's 1k..32k (an 8k passage cost ~60 s more per window)
    "cpu": TourSizes(num_seqs=100, seq_len=64, batch_size=20, map_seq_len=24,
                     context_lengths=(128, 256, 512, 1024, 2048, 4096), context_windows=2, control_seqs=25),
    "gpu": TourSizes(num_seqs=100, seq_len=64, batch_size=10, map_seq_len=32,
                     context_lengths=(512, 1024, 2048, 4096, 8192, 16384, 32768), context_windows=4,
                     control_seqs=100),
    "tiny-gpu": SMOKE,
}


def steps(run: Any, model: str = "") -> list[Step]:
    """Sink rates on the three input kinds and the random-weight control (attention maps), then the long-context
    sweep (O(N) statistics, one window at a time)."""
    r, m = run, model or run.profile.model
    return [Step("sink rates (attention maps)", m, r.batch_size, r.seq_len, maps=True,
                 calls=forwards(4 * (r.num_seqs + r.control_seqs), r.batch_size)),
            Step("long context (O(N) statistics)", m, 1, max(r.context_lengths), stats="first key",
                 call_tokens=tuple(n for n in r.context_lengths for _ in range(r.context_windows)))]


PROTOCOL = NotebookProtocol(
    name="00_tour", families=("llm",), sizes=SIZES, cpu_budget_s=90, first_run_s=148,
    dtype="float32",  # Gu et al.'s protocol: float32 attention on every device
    steps=steps,
)
