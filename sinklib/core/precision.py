"""The precision a model is *trained* in (measurements always read float32 weights outside it).

``"bf16"``: bfloat16 autocast for the forward -- matmuls in bfloat16, softmax, norms and the loss in float32 as
autocast lists them; weights, gradients and AdamW stay float32 (mixed precision, as the papers train). On a CPU
with AVX512-BF16 a step of 03's tiny LM or of the stand-in projector costs about half of float32's.

What moves a CPU training run (measured: docs/reproducibility.md, "Determinism"; ``benchmarks/determinism.py``): the
oneDNN kernel the bfloat16 matmuls run on (AMX vs AVX512-BF16 vs AVX2: ~4e-5 on the tiny LM's loss after 120 steps, growing with
training), ATen's and MKL's instruction set (ATEN_CPU_CAPABILITY, MKL_CBWR: ~2-4e-5), and -- on some CPUs and
shapes -- the number of threads (an Intel/AMX host: the tiny LM bit-identical at 1 and 2 threads, not at 4; 12's
projector not at 2). The threads are fixed here (:func:`training_threads`: every CPU training loop runs on one
thread, whatever the notebook was given); the instruction set cannot be without a large cost, so the verdicts that
rest on trained models state their margin instead (:func:`sinklib.core.claims.against_cut`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from sinklib.core.errors import InputError

PRECISIONS = ("float32", "bf16")
TRAINING_THREADS = 1  # CPU threads of every training loop: a run then does not depend on JOBS or the machine's cores


def autocast(precision: str, device: str | torch.device) -> torch.autocast:
    """``torch.autocast`` for a training forward in ``precision`` on ``device`` (disabled for ``"float32"``)."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown training precision {precision!r}; use one of {', '.join(PRECISIONS)}.")
    kind = torch.device(device).type
    return torch.autocast(kind if kind in ("cuda", "cpu") else "cpu", dtype=torch.bfloat16,
                          enabled=precision == "bf16")


@contextmanager
def training_threads(device: str | torch.device = "cpu", threads: int = TRAINING_THREADS) -> Iterator[None]:
    """Run a CPU training loop on ``threads`` intra-op threads and put the caller's number back afterwards (even on
    an error). A kernel's partition of a matmul across threads can change its summation order, so a run trained
    with 2 threads need not equal one trained with 1 (measured on an Intel CPU with AMX): fixing the number makes
    ``make figures JOBS=1`` (two threads a notebook) train the same models as the default (one thread each).
    Nothing changes on a GPU."""
    if torch.device(device).type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
