"""What a run's numbers depend on besides the code, and which difference most plausibly moved a number.

:func:`environment` records package versions, the lock's hash, the CPU (model, vendor, the flags that move numbers),
torch's CPU capability, the oneDNN ISA and its bf16 matmul kernel, the BLAS / OpenMP libraries (threadpoolctl), the
environment variables that change kernels,
torch's threads and the threads each notebook's kernel ran with, and the commit. :func:`environment_differences`
lists where two runs' environments differ and :func:`likely_causes` names, for each kind of claim that changed, the
first setting of :data:`CAUSES` that differs and moves that kind.

:func:`bf16_kernel` probes the bf16 matmul kernel oneDNN runs under given environment variables, and
:func:`another_isa` picks an ``ONEDNN_MAX_CPU_ISA`` cap that makes oneDNN run a *different* kernel on this host:
a second setting that is a no-op on one CPU proves nothing there (AMX -> AVX512_CORE_BF16; AVX512_CORE_BF16 ->
AVX512_CORE's jit gemm; that -> AVX2, where torch runs bf16 matmuls in ATen).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sinklib.core.paths import ROOT
from sinklib.core.quantities import MEASURED_ON

KERNEL_ISA_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_CBWR")  # pick the instruction set's kernels


def thread_env(threads: int) -> dict[str, str]:
    """The environment that gives a kernel ``threads`` OpenMP/MKL threads (make figures: cores // notebooks at once)."""
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


LOCK = ROOT / "requirements.lock"
CPUINFO = Path("/proc/cpuinfo")
CPU_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512f", "avx512_vnni", "avx2", "fma")
ONEDNN_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni")  # pick oneDNN's bf16 / int8 kernels
ATEN_FLAGS = ("avx512f", "avx2", "fma")  # pick ATen's CPU capability (its float32 vector kernels)
KERNEL_VARIABLES = (*KERNEL_ISA_VARIABLES, *thread_env(1))  # what the runner records for each notebook's kernel

def cpu_info(path: str | Path = CPUINFO) -> dict:
    """The CPU's model name, vendor and which of :data:`CPU_FLAGS` it has (in that order), from ``/proc/cpuinfo``'s
    first processor; no file: None, None and no flags."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError:
        text = ""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    return {"cpu_model": fields.get("model name"), "cpu_vendor": fields.get("vendor_id"),
            "cpu_flags": [f for f in CPU_FLAGS if f in flags]}


def parse_onednn_verbose(text: str) -> dict:
    """oneDNN's verbose lines -> ``{"onednn_isa", "onednn_bf16_matmul"}``: the ISA of its header line (``...,info,
    cpu,isa:<ISA>``) and the implementation of the first bf16 matmul / inner product it ran (e.g.
    ``brg_matmul:avx512_core_bf16``); a header but no bf16 primitive: torch ran bf16 matmuls in ATen's own kernel."""
    lines = text.splitlines()
    isa = next((line.split("isa:", 1)[1].strip() for line in lines if ",info,cpu,isa:" in line), None)
    matmul = None
    for line in lines:
        found = re.search(r",exec,cpu,(?:matmul|inner_product),([^,]+),", line)
        if found and "src:bf16" in line:
            matmul = found.group(1)
            break
    if matmul is None and isa is not None:
        matmul = "ATen (not oneDNN)"
    return {"onednn_isa": isa, "onednn_bf16_matmul": matmul}


def fd_stdout(action: Callable[[], object]) -> str:
    """What ``action`` writes to file descriptor 1 (oneDNN prints its verbose lines there from C, past
    ``sys.stdout``); the descriptor is put back afterwards. What other threads print meanwhile (~20 ms) goes there
    too: call it where nothing else runs, as :func:`environment` does."""
    sys.stdout.flush()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(1)
        os.dup2(sink.fileno(), 1)
        try:
            action()
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        sink.seek(0)
        return sink.read().decode(errors="replace")


def _onednn_probe() -> None:
    """A reorder (always oneDNN: it prints its header, with the ISA, the first time verbose is on in a process) and a
    bf16 matmul (the kernel bf16 autocast training runs) under oneDNN's verbose mode."""
    import torch

    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):
        torch.ones(2, 8).to_mkldnn().to_dense()
        a = torch.ones(16, 32, dtype=torch.bfloat16)
        _ = a @ a.T


def onednn_isa() -> dict:
    """The oneDNN ISA in use and its bf16 matmul kernel (:func:`parse_onednn_verbose` of :func:`_onednn_probe`, in
    this process: ~20 ms). oneDNN prints its header once per process, so a second call (or a process run with
    ONEDNN_VERBOSE set) gets None for the ISA; no oneDNN at all: both None."""
    import torch

    if not torch.backends.mkldnn.is_available():
        return {"onednn_isa": None, "onednn_bf16_matmul": None}
    try:
        return parse_onednn_verbose(fd_stdout(_onednn_probe))
    except (RuntimeError, OSError, AttributeError):
        return {"onednn_isa": None, "onednn_bf16_matmul": None}


def kernel_variables(environ: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    """The :data:`KERNEL_VARIABLES` as set in ``environ`` (None: unset)."""
    return {k: environ.get(k) for k in KERNEL_VARIABLES}


def _run_records(figures_dir: str | Path) -> dict[str, dict]:
    """What the runner recorded beside each notebook's figures (``<notebook>/takeaways.json``; {} when unreadable)."""
    out: dict[str, dict] = {}
    for path in sorted(Path(figures_dir).glob("[!.]*/takeaways.json")):
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = {}
        out[path.parent.name] = kept if isinstance(kept, dict) else {}
    return out


def notebook_threads(figures_dir: str | Path) -> dict[str, dict | None]:
    """The kernel environment each notebook ran with -- its threads and the variables that pick the instruction set --
    as the runner recorded it beside its figures (``<notebook>/takeaways.json``'s ``kernel_env``; None: the runner
    recorded none)."""
    return {name: kept.get("kernel_env") or kept.get("threads") or None  # "threads": before the ISA variables
            for name, kept in _run_records(figures_dir).items()}


def notebook_seeds(figures_dir: str | Path) -> dict[str, int | None]:
    """The seed each notebook ran with, as the runner recorded it (None: not recorded)."""
    return {name: kept.get("seed") for name, kept in _run_records(figures_dir).items()}


def thread_pools() -> str:
    """The BLAS and OpenMP libraries loaded in this process, as threadpoolctl finds them, with their threads:
    "openmp libgomp x2; openblas 0.3.31 (SkylakeX) x2" -- another BLAS build or architecture can round differently."""
    import numpy  # noqa: F401  -- both loaded first, so the record does not depend on what ran before
    import torch  # noqa: F401
    from threadpoolctl import threadpool_info

    return "; ".join(sorted(f"{p['internal_api']} {p.get('version') or p['prefix']}"  # sorted: not load order
                            + (f" ({p['architecture']})" if p.get("architecture") else "") + f" x{p['num_threads']}"
                            for p in threadpool_info()))


def environment(figures_dir: str | Path | None = None) -> dict:
    """What a run's numbers depend on besides the code: versions, the lock, the CPU and its flags, torch's CPU
    capability, the oneDNN ISA, the variables that change kernels, torch's threads here and (with
    ``figures_dir``) the threads each notebook ran with."""
    import torch
    import transformers

    lock = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16] if LOCK.exists() else None
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return {"python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "lock_sha256": lock,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
            **cpu_info(), **onednn_isa(), "kernel_variables": kernel_variables(),
            "torch_threads": torch.get_num_threads(), "thread_pools": thread_pools(),
            "notebook_threads": notebook_threads(figures_dir) if figures_dir is not None else {},
            "notebook_seeds": notebook_seeds(figures_dir) if figures_dir is not None else {},
            "commit": commit}



@dataclass(frozen=True)
class EnvDifference:
    field: str  # an environment key, a kernel variable, "cpu_flags_onednn" / "cpu_flags_aten", "notebook_threads"
    text: str  # "cpu flags differ: amx_bf16 here, not in the reference"


def _shown(value) -> str:
    return "unset" if value is None else str(value)


def flag_differences(here: list[str], there: list[str]) -> list[EnvDifference]:
    """The CPU flags only one side has, as one difference for the flags that pick oneDNN's kernels
    (:data:`ONEDNN_FLAGS`, field "cpu_flags_onednn") and one for those that pick ATen's (:data:`ATEN_FLAGS`,
    "cpu_flags_aten"): "cpu flags differ: amx_bf16 here, not in the reference"."""
    out = []
    for field, group in (("cpu_flags_onednn", ONEDNN_FLAGS), ("cpu_flags_aten", ATEN_FLAGS)):
        only_here = [f for f in group if f in here and f not in there]
        only_there = [f for f in group if f in there and f not in here]
        parts = ([f"{', '.join(only_here)} here, not in the reference"] if only_here else []) + (
            [f"{', '.join(only_there)} in the reference, not here"] if only_there else [])
        if parts:
            out.append(EnvDifference(field, "cpu flags differ: " + "; ".join(parts)))
    return out


def _threads_text(threads: dict | None) -> str:
    if not threads:
        return "not recorded"
    return ", ".join(f"{k}={_shown(v)}" for k, v in sorted(threads.items()))


def environment_differences(run: dict, reference: dict) -> list[EnvDifference]:
    """Where this run's environment differs from the reference's, each with both values: versions, the CPU and its
    flags, the oneDNN ISA, each kernel variable, torch's threads and each notebook's threads (a notebook only one
    side ran is not a difference here: :func:`compare` reports its claims; neither is a oneDNN field one side could
    not read, :func:`onednn_isa`)."""
    ref_env, env = reference.get("environment", {}), run.get("environment", {})
    out = []
    for k in ("python", "torch", "transformers", "lock_sha256", "machine", "cpu_vendor", "cpu_model", "cpu_capability",
              "onednn_isa", "onednn_bf16_matmul", "thread_pools", "torch_threads"):
        unknown = k.startswith(("onednn", "thread_pools")) and (env.get(k) is None or ref_env.get(k) is None)
        same = (env.get(k) == ref_env.get(k) or k == "thread_pools" and not unknown  # the pools in any order
                and sorted(env[k].split("; ")) == sorted(ref_env[k].split("; ")))
        if not same and not unknown:
            out.append(EnvDifference(k, f"{k}: {_shown(env.get(k))} here, {_shown(ref_env.get(k))} in the reference"))
    out += flag_differences(env.get("cpu_flags", []), ref_env.get("cpu_flags", []))
    here_vars, ref_vars = env.get("kernel_variables", {}), ref_env.get("kernel_variables", {})
    for k in KERNEL_VARIABLES:
        if here_vars.get(k) != ref_vars.get(k):
            out.append(EnvDifference(k, f"{k}: {_shown(here_vars.get(k))} here, {_shown(ref_vars.get(k))} in the "
                                        f"reference"))
    here_nb, ref_nb = env.get("notebook_threads", {}), ref_env.get("notebook_threads", {})
    for name in sorted(here_nb.keys() & ref_nb.keys()):
        here, there = here_nb[name] or {}, ref_nb[name] or {}
        if not here or not there:
            if here != there:
                out.append(EnvDifference("notebook_threads", f"kernel environment of {name}: {_threads_text(here)} "
                                                             f"here, {_threads_text(there)} in the reference"))
            continue
        threads = [k for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS") if here.get(k) != there.get(k)]
        if threads:
            out.append(EnvDifference("notebook_threads", f"threads of {name}: "
                                     f"{_threads_text({k: here.get(k) for k in threads})} here, "
                                     f"{_threads_text({k: there.get(k) for k in threads})} in the reference"))
        for k in sorted((here.keys() | there.keys()) - {"OMP_NUM_THREADS", "MKL_NUM_THREADS"}):
            if here.get(k) != there.get(k):  # an instruction-set variable: its own cause (CAUSES)
                out.append(EnvDifference(k, f"{k} of {name}: {_shown(here.get(k))} here, {_shown(there.get(k))} in "
                                            f"the reference"))
    return out


# Settings that move numbers, most plausible first: (name, environment fields, kinds of claims it moves, why).
CAUSES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    ("the package versions", ("python", "torch", "transformers", "lock_sha256"), MEASURED_ON,
     "another build of the libraries can move any number; rerun with the lock before reading the rest"),
    ("the oneDNN ISA", ("onednn_isa", "onednn_bf16_matmul", "cpu_flags_onednn", "ONEDNN_MAX_CPU_ISA"),
     ("trained here", "stand-in"),
     "bf16 training runs move with the oneDNN ISA (autocast's matmuls run its kernel for that ISA, and every "
     "optimiser step builds on the last one's rounding)"),
    ("ATen's CPU capability", ("cpu_capability", "ATEN_CPU_CAPABILITY", "cpu_flags_aten"), MEASURED_ON,
     "ATen's vector kernels round float32 forwards differently (ATEN_CPU_CAPABILITY=avx2 moved SmolLM2's logits by "
     "4e-5 and 4 projector steps by 6e-3, benchmarks/determinism.py)"),
    ("MKL's code path", ("MKL_CBWR",), MEASURED_ON,
     "MKL_CBWR picks another code path (forwards moved by 7e-5, 4 projector steps by 6e-3, benchmarks/determinism.py)"),
    ("the CPU", ("machine", "cpu_vendor", "cpu_model", "thread_pools"), MEASURED_ON,
     "another CPU with the same flags can still pick other kernel blockings"),
    ("the threads", ("torch_threads", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "notebook_threads"), MEASURED_ON,
     "a weak lead: 1 and 2 threads were bit-identical in benchmarks/determinism.py, so the code or a step that is "
     "not deterministic is as likely"),
)


def likely_causes(env_diffs: list[EnvDifference], diffs: list, run: dict, reference: dict) -> list[str]:
    """For each kind of claim that changed (``diffs``: :class:`sinklib.reproduction.verify.Difference` s; anything but a
    claim only one side has), the first setting of
    :data:`CAUSES` that differs here and moves that kind -- with the difference and why; no setting differs: the
    code (the commits) or a step that is not deterministic."""
    differing = {d.field for d in env_diffs}
    changed: dict[str, list[str]] = {}
    for d in diffs:
        if d.what in ("missing", "new"):
            continue
        kind = (run["claims"].get(d.key) or reference["claims"][d.key])["kind"]
        notebook = d.key.split("/", 1)[0]
        if notebook not in changed.setdefault(kind, []):
            changed[kind].append(notebook)
    lines = []
    for kind, notebooks in changed.items():
        where = f"{kind} claims ({', '.join(notebooks)})"
        cause = next((c for c in CAUSES if kind in c[2] and differing & set(c[1])), None)
        if cause is None:
            commits = (run.get("environment", {}).get("commit"), reference.get("environment", {}).get("commit"))
            lines.append(f"{where} changed with no setting that moves them differing: the code (commit {commits[0]} "
                         f"here, {commits[1]} in the reference) or a step that is not deterministic")
            continue
        name, fields, _, why = cause
        seen = "; ".join(d.text for d in env_diffs if d.field in fields)
        lines.append(f"{where} changed: most plausibly {name} -- {seen} -- {why}")
    return lines
