"""The second setting of the cross-setting tests: a thread count and an ``ONEDNN_MAX_CPU_ISA`` cap under which
this host's bf16 matmul runs another oneDNN kernel than it does by default -- probed, not assumed, so that a test
comparing "another setting" changes the kernels on every kind of CPU (AMX, AVX512-BF16, AVX2), or says it cannot.
Test tooling: notebooks and the package never call it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping

from sinklib.reproduction.environment import thread_env

# The ONEDNN_MAX_CPU_ISA cap that makes oneDNN leave a bf16 matmul kernel (matched on the kernel's name, first match
# wins): measured on an AMD EPYC with avx512_bf16, 512x768 @ 768x3072 bf16, one thread -- brg_matmul:avx512_core_bf16
# 13 ms; capped to AVX512_CORE: gemm:jit:bf16 67 ms; to AVX2: ATen's own kernel, 2.8-3.8 s.
NEXT_ISA = (("amx", "AVX512_CORE_BF16"), ("avx512_core_bf16", "AVX512_CORE"), ("gemm:jit", "AVX2"),
            ("brg", "AVX2"))


_PROBE = ("import json; from sinklib.reproduction.environment import onednn_isa; "
          "print('BF16-KERNEL ' + json.dumps(onednn_isa()))")


def bf16_kernel(env: Mapping[str, str] | None = None) -> dict:
    """:func:`onednn_isa` in a fresh process whose environment is this one's plus ``env`` (the ISA cap is read once
    per process): ``{"onednn_isa", "onednn_bf16_matmul"}``, both None where the probe could not run."""
    try:
        child = subprocess.run([sys.executable, "-c", _PROBE], env={**os.environ, **(env or {})}, capture_output=True,
                               text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"onednn_isa": None, "onednn_bf16_matmul": None}
    line = next((x for x in child.stdout.splitlines() if x.startswith("BF16-KERNEL ")), None)
    return json.loads(line.split(" ", 1)[1]) if line else {"onednn_isa": None, "onednn_bf16_matmul": None}


def another_isa(kernel: str | None) -> str | None:
    """The ``ONEDNN_MAX_CPU_ISA`` cap that should move oneDNN off ``kernel`` (:data:`NEXT_ISA`); None when no cap
    is known to (no oneDNN, or already ATen's own kernel)."""
    if not kernel:
        return None
    return next((cap for part, cap in NEXT_ISA if part in kernel), None)


def second_setting(threads: int = 2) -> tuple[dict[str, str], dict, dict]:
    """A setting whose bf16 kernel differs from this host's: ``(env, kernel here, kernel there)`` -- ``threads``
    threads and the :func:`another_isa` cap of the kernel probed here, probed again under it. Raises RuntimeError
    when no cap moves the kernel (the comparison would prove nothing on this host)."""
    base = bf16_kernel()
    cap = another_isa(base["onednn_bf16_matmul"])
    env = {**thread_env(threads), **({"ONEDNN_MAX_CPU_ISA": cap} if cap else {})}
    other = bf16_kernel(env)
    if cap is None or other["onednn_bf16_matmul"] == base["onednn_bf16_matmul"]:
        raise RuntimeError(f"no ONEDNN_MAX_CPU_ISA cap changes the bf16 kernel here ({base['onednn_bf16_matmul']}, "
                           f"capped to {cap}: {other['onednn_bf16_matmul']})")
    return env, base, other
