"""The precision a model is *trained* in (measurements always read float32 weights outside it).

``"bf16"``: bfloat16 autocast for the forward -- matmuls in bfloat16, softmax, norms and the loss in float32 as
autocast lists them; weights, gradients and AdamW stay float32 (mixed precision, as the papers train). On a CPU
with AVX512-BF16 a step of 03's tiny LM or of the stand-in projector costs about half of float32's; the numbers
are reproducible on CPUs of one instruction set (``verify`` names the CPU capability when it differs).
"""

from __future__ import annotations

import torch

from sinklib.core.errors import InputError

PRECISIONS = ("float32", "bf16")


def autocast(precision: str, device: str | torch.device) -> torch.autocast:
    """``torch.autocast`` for a training forward in ``precision`` on ``device`` (disabled for ``"float32"``)."""
    if precision not in PRECISIONS:
        raise InputError(f"unknown training precision {precision!r}; use one of {', '.join(PRECISIONS)}.")
    kind = torch.device(device).type
    return torch.autocast(kind if kind in ("cuda", "cpu") else "cpu", dtype=torch.bfloat16,
                          enabled=precision == "bf16")
