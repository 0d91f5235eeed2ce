"""Did this run reproduce ours? Compare a run's claims with the committed reference of the CPU profile.

``data/reference/cpu_profile_claims.json`` holds, for every claim of a clean ``make figures`` run (CPU profile,
seed 0, the locked environment), the whole record a verdict rests on: the verdict and its ``unsettled`` flag, each
draw's outcome, the random-weight control's verdict, the flags its note raises (:data:`NOTE_FLAGS`), and every
number of ``measured``, ``control_measured``, ``spread`` and ``margin`` (flattened to ``path -> value``), each with
the quantity it is (:func:`quantity`) and the tolerance it is checked with (:func:`tolerance`). Beside them the
environment it was made in (:func:`environment`): package versions, the lock's hash, the CPU (model, vendor, the
flags that move numbers), torch's CPU capability, the oneDNN ISA and its bf16 matmul kernel, the environment
variables that change kernels, torch's threads and the threads each notebook's kernel ran with, and the commit.

A value is reproduced when ``|new - ref| <= abs_tol + rel_tol * |ref|``, both from :data:`TOLERANCES` by what the
claim was measured on and what the number is (measured spreads across machines and settings); a value that names *which*
layer / dimension / head / position (an identity) must be equal. A verdict, a draw outcome, the control's verdict,
``unsettled`` and the note's flags must be equal, whatever the tolerance. Where something differs, the report first
names every environment difference (values here vs the reference) and which of them most plausibly moved which
claims (:func:`likely_causes`).

    python -m sinklib verify                   # this run (figures/) against the reference; exit 1 if it differs
    python -m sinklib verify --write           # make the reference from this run (after a clean make figures)
"""

from __future__ import annotations

import hashlib
import json
import math
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
from sinklib.pipeline.runner import KERNEL_ISA_VARIABLES, thread_env

REFERENCE = ROOT / "data" / "reference" / "cpu_profile_claims.json"
LOCK = ROOT / "requirements.lock"
CPUINFO = Path("/proc/cpuinfo")
SCHEMA = 3  # 3: (rel, abs) tolerances per kind and quantity; 2: the whole record (control, unsettled, note flags, control_measured, spread, margin), each value's
#              quantity and tolerance, the CPU's flags, the oneDNN ISA, kernel variables and threads per notebook

KINDS = ("pretrained", "stand-in", "trained here", "random weights")  # what a claim was measured on
VALUE, SHARE, LOSS, KV_RATIO, MARGIN, IDENTITY = ("value", "attention share or rate", "loss or perplexity",
                                                 "quantised-KV ratio", "margin", "identity")  # :func:`quantity`
QUANTITIES = (VALUE, SHARE, LOSS, KV_RATIO, MARGIN)

# (relative, absolute) tolerance by (what the claim was measured on, what the number is): a value is reproduced when
# |new - ref| <= abs + rel * |ref|. From spreads measured across machines and settings (README, "Determinism"):
_FORWARD = (1e-4, 1e-9)  # a float32 forward of fixed weights: ATEN_CPU_CAPABILITY=avx2 / MKL_CBWR moved SmolLM2's
#                          logits by <= 7e-5 (benchmarks/determinism.py), a tiny LM's by 8e-7 on an Intel host
TOLERANCES: dict[tuple[str, str], tuple[float, float]] = {
    **{(kind, q): _FORWARD for kind in ("pretrained", "random weights") for q in (VALUE, SHARE, LOSS, MARGIN)},
    # 01's IntactKV ratios round keys / values to 2 or 4 bits: a 1e-5 difference moves an entry across a rounding
    # step. Another machine (Intel, AMX) moved SmolLM2's 2-bit ratio 0.946 -> 0.905 (4.3 %).
    ("pretrained", KV_RATIO): (0.08, 0.0), ("random weights", KV_RATIO): (0.08, 0.0),
    # 03's TinyLMs, every CPU-profile run trained here (AMD, avx512_core_bf16, torch 2.14.1) and on an Intel host
    # with AMX, oneDNN on AMX and capped to AVX512_CORE_BF16 (torch 2.11; benchmarks/cross_machine.py, committed in
    # data/reference/cross_machine_03.json): a final alpha_0 / share / sink rate moved
    # by up to 0.032 (a 2-seed mean 0.012), a validation loss by <= 0.7 %, the strongest head's late slope (a
    # verdict's margin) by up to 0.022 per 100 steps.
    ("trained here", VALUE): (0.1, 0.02), ("trained here", SHARE): (0.0, 0.05), ("trained here", LOSS): (0.02, 0.0),
    ("trained here", MARGIN): (0.0, 0.03), ("trained here", KV_RATIO): (0.1, 0.02),
    # Stand-ins (12's projector, 11's router) are trained here in bfloat16 from pretrained parts: on the Intel/AMX
    # machine 12's digit NLL moved 2.226 -> 2.091 (6 %) and its caption NLL 0.506 -> 0.457 (10 %), part of it from
    # the thread count, now fixed (sinklib.core.precision.training_threads).
    ("stand-in", VALUE): (0.15, 0.02), ("stand-in", SHARE): (0.0, 0.1), ("stand-in", LOSS): (0.15, 0.0),
    ("stand-in", MARGIN): (0.0, 0.05), ("stand-in", KV_RATIO): (0.15, 0.02),
}
ABS_TOL = 1e-9  # every non-identity value: zeros and denormals compare equal
# Words that make a number an identity (which layer / neuron / dimension / head / position), the first or last word
# of its key ("first_reading_layer", "write_dims", "dimension of the largest", "peak layer"): compared exactly.
IDENTITY_WORDS = ("layer", "neuron", "dim", "dims", "dimension", "head", "position", "index", "onset", "onsets")
IDENTITY_KEYS = ("super_experts",)  # whole keys that are identities although no word says so: (layer, expert) pairs
# Words in a claim id or value path that make a number a quantised-KV perplexity ratio; words of a value path that
# make it a loss / perplexity, or an attention share / rate.
KV_WORDS = ("intactkv", "kv_quant", "kv quant", "kv-quant", "2bit", "4bit", "-bit", "bits")
LOSS_WORDS = ("loss", "nll", "ppl", "perplexity")
SHARE_WORDS = ("attention", "alpha", "share", "rate", "mass", "fraction")
# Flags a note raises that change what a verdict means; the rest of a note (numbers, wording) is not compared: its
# numbers are in ``measured`` already and its wording changes with the code, not with the machine.
NOTE_FLAGS = ("cannot tell training from noise",)
GROUPS = ("measured", "control_measured", "spread", "margin")  # the numbers of a record, each compared by value
CPU_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512f", "avx512_vnni", "avx2", "fma")
ONEDNN_FLAGS = ("amx_bf16", "amx_int8", "amx_tile", "avx512_bf16", "avx512_vnni")  # pick oneDNN's bf16 / int8 kernels
ATEN_FLAGS = ("avx512f", "avx2", "fma")  # pick ATen's CPU capability (its float32 vector kernels)
KERNEL_VARIABLES = (*KERNEL_ISA_VARIABLES, *thread_env(1))  # what the runner records for each notebook's kernel


def tolerance(kind: str, quantity_name: str = VALUE) -> tuple[float, float]:
    """The (relative, absolute) tolerance of a number: exact for an identity, else :data:`TOLERANCES` of (``kind``,
    the quantity), (``kind``, "value") for a quantity without a row, and the pretrained row for an unknown kind."""
    if quantity_name == IDENTITY:
        return 0.0, 0.0
    kind = kind if kind in KINDS else "pretrained"
    return TOLERANCES.get((kind, quantity_name), TOLERANCES[(kind, VALUE)])


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^a-z0-9]+", text.lower()) if w]


def is_identity(path: str) -> bool:
    """Whether a flattened value names which layer / dimension / head / position: its last key that is not a list
    index is in :data:`IDENTITY_KEYS` or starts or ends with a word of :data:`IDENTITY_WORDS`."""
    keys = [k for k in path.split(".") if not k.isdigit()]
    if not keys:
        return False
    key, words = keys[-1], _words(keys[-1])
    return key in IDENTITY_KEYS or bool(words) and (words[0] in IDENTITY_WORDS or words[-1] in IDENTITY_WORDS)


def quantity(claim_id: str, path: str, group: str = "measured") -> str:
    """What a number is, from its claim id, value path and group (:data:`GROUPS`): an identity
    (:func:`is_identity`), a verdict's margin (the ``margin`` group), a quantised-KV perplexity ratio (a word of
    :data:`KV_WORDS` in the id or path), a loss or perplexity / an attention share or rate (a word of
    :data:`LOSS_WORDS` / :data:`SHARE_WORDS` in the path), or a value."""
    if is_identity(path):
        return IDENTITY
    if group == "margin":
        return MARGIN
    text, words = f"{claim_id} {path}".lower(), _words(path)
    if any(w in text for w in KV_WORDS):
        return KV_RATIO
    if any(w.startswith(LOSS_WORDS) for w in words):
        return LOSS
    if any(w.startswith(SHARE_WORDS) for w in words):
        return SHARE
    return VALUE


def flatten(value, prefix: str = "") -> dict[str, float]:
    """Every finite-or-not number in a nested dict / list as ``"a.b.0" -> float`` (booleans and strings left out)."""
    out: dict[str, float] = {}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return out
    if isinstance(value, int | float):
        return {prefix or "value": float(value)}
    if isinstance(value, dict):
        for k, v in value.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            out |= flatten(v, f"{prefix}.{i}" if prefix else str(i))
    return out


def numbers(value, claim_id: str, kind: str, group: str = "measured") -> dict[str, dict]:
    """Every number of ``value`` as ``path -> {"value", "quantity", "rel_tol", "abs_tol"}``: what the reference
    stores, so a reader sees the tolerance each value is checked with."""
    out = {}
    for path, x in flatten(value).items():
        name = quantity(claim_id, path, group)
        rel, absolute = tolerance(kind, name)
        out[path] = {"value": x, "quantity": name, "rel_tol": rel, "abs_tol": absolute}
    return out


def claim_kind(model: str, kind: str) -> str:
    """What a claim was measured on: "random weights" when its model label says so, else the scorecard's kind."""
    return "random weights" if "random weights" in model else kind


def control_word(control: bool | None, control_measured) -> str:
    """The random-weight control's verdict: holds / fails / cannot be judged (run, nothing decided) / not run."""
    if control is None:
        return "not run" if control_measured is None else "cannot be judged"
    return "holds" if control else "fails"


def note_flags(note: str) -> list[str]:
    """The :data:`NOTE_FLAGS` a note raises."""
    return [flag for flag in NOTE_FLAGS if flag in (note or "")]


def record(row) -> dict:
    """The reference record of one scorecard row (:class:`sinklib.pipeline.scorecard.Row`): its verdicts, flags and
    numbers. ``margin`` and ``unsettled`` are read where the row has them (else: no margin, unsettled = the verdict
    is "unsettled")."""
    kind = claim_kind(row.model, row.kind)
    return {
        "verdict": row.verdict, "unsettled": bool(getattr(row, "unsettled", row.verdict == "unsettled")),
        "draws": list(row.draws), "control": control_word(row.control, row.control_measured), "at_init": row.at_init,
        "flags": note_flags(row.reason), "kind": kind, "model": row.model, "profile": row.profile,
        "measured": numbers(row.measured, row.id, kind),
        "control_measured": numbers(row.control_measured, row.id, "random weights"),  # the control: random weights
        "spread": numbers(row.spread, row.id, kind),
        "margin": numbers(getattr(row, "margin", None), row.id, kind, "margin"),
    }


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


def notebook_threads(figures_dir: str | Path) -> dict[str, dict | None]:
    """The kernel environment each notebook ran with -- its threads and the variables that pick the instruction set --
    as the runner recorded it beside its figures (``<notebook>/takeaways.json``'s ``kernel_env``; None: the runner
    recorded none)."""
    out: dict[str, dict | None] = {}
    for path in sorted(Path(figures_dir).glob("[!.]*/takeaways.json")):
        try:
            kept = json.loads(path.read_text(encoding="utf-8"))
            out[path.parent.name] = kept.get("kernel_env") or kept.get("threads")  # "threads": before the ISA vars
        except (OSError, ValueError):
            out[path.parent.name] = None
    return out


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
            "torch_threads": torch.get_num_threads(),
            "notebook_threads": notebook_threads(figures_dir) if figures_dir is not None else {},
            "commit": commit}


def snapshot(figures_dir: str | Path) -> dict:
    """The reference record of a run: every claim's :func:`record`, keyed by ``"<notebook>/<claim id> [<model>]"``,
    and the :func:`environment`."""
    from sinklib.pipeline import scorecard

    claims = {f"{row.notebook}/{row.id} [{row.model}]": record(row)  # one per claim and model (the Recorder's rule)
              for row in scorecard.collect(figures_dir)}
    return {"schema": SCHEMA, "environment": environment(figures_dir), "claims": claims}


@dataclass(frozen=True)
class Difference:
    key: str
    what: str  # "verdict", "unsettled", "draws", "control", "flags", "value", "missing", "new"
    detail: str

    def line(self) -> str:
        return f"{self.what.upper():<9} {self.key}: {self.detail}"


def _close(new: float, ref: float, rel: float, abs_tol: float = ABS_TOL) -> bool:
    if math.isnan(ref) or math.isnan(new):
        return math.isnan(ref) and math.isnan(new)
    if math.isinf(ref) or math.isinf(new):
        return new == ref
    return abs(new - ref) <= abs_tol + rel * abs(ref)


def moved_numbers(ref: Mapping[str, dict], new: Mapping[str, dict]) -> list[str]:
    """The values of one group (:data:`GROUPS`) that moved beyond the reference's tolerance for them (an identity:
    any change), that this run lacks or that only this run has."""
    moved = []
    for path, entry in ref.items():
        got = new.get(path)
        if got is None:
            moved.append(f"{path} missing (reference {entry['value']:.6g})")
            continue
        exact = entry["quantity"] == IDENTITY
        absolute = 0.0 if exact else max(ABS_TOL, entry.get("abs_tol", 0.0))
        if not _close(got["value"], entry["value"], entry["rel_tol"], absolute):
            tol = "exact" if exact else f"{entry['quantity']}, tol {entry['rel_tol']:g} rel + {absolute:g} abs"
            moved.append(f"{path} {got['value']:.6g} vs {entry['value']:.6g} ({tol})")
    moved += [f"{path} {got['value']:.6g} (not in the reference)" for path, got in new.items() if path not in ref]
    return moved


def compare_record(key: str, ref: dict, new: dict) -> list[Difference]:
    """Every way one claim's record differs from the reference's: the verdict, ``unsettled`` (where the verdict is
    equal), the draws, the control's verdict (one that now holds on random weights where the paper says training
    makes the effect is named so), the note's flags, and each group of numbers beyond its tolerance."""
    diffs = []
    if new["verdict"] != ref["verdict"]:
        diffs.append(Difference(key, "verdict", f"{ref['verdict']} in the reference, {new['verdict']} here"))
    elif new["unsettled"] != ref["unsettled"]:
        diffs.append(Difference(key, "unsettled", f"unsettled={ref['unsettled']} in the reference, "
                                                  f"{new['unsettled']} here"))
    if new["draws"] != ref["draws"]:
        diffs.append(Difference(key, "draws", f"draw outcomes {ref['draws']} in the reference, {new['draws']} here"))
    if new["control"] != ref["control"]:
        noise = (" -- it now holds on random weights, where the paper says training makes the effect: the rule "
                 "cannot tell training from noise" if new["control"] == "holds" and new.get("at_init") is False
                 else "")
        diffs.append(Difference(key, "control", f"random-weight control {ref['control']} in the reference, "
                                                f"{new['control']} here{noise}"))
    if new["flags"] != ref["flags"]:
        diffs.append(Difference(key, "flags", f"note flags {ref['flags']} in the reference, {new['flags']} here"))
    for group in GROUPS:
        moved = moved_numbers(ref[group], new[group])
        if moved:
            diffs.append(Difference(key, "value", f"{group}: " + "; ".join(moved[:4])
                                    + (f"; +{len(moved) - 4} more" if len(moved) > 4 else "")))
    return diffs


def compare(run: dict, reference: dict) -> list[Difference]:
    """Every claim whose record differs (:func:`compare_record`), or that only one side has."""
    diffs: list[Difference] = []
    ref_claims, run_claims = reference["claims"], run["claims"]
    for key, ref in ref_claims.items():
        new = run_claims.get(key)
        if new is None:
            diffs.append(Difference(key, "missing", f"in the reference ({ref['verdict']}), not in this run"))
        else:
            diffs += compare_record(key, ref, new)
    for key, new in run_claims.items():
        if key not in ref_claims:
            diffs.append(Difference(key, "new", f"not in the reference ({new['verdict']} here)"))
    return diffs


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
              "onednn_isa", "onednn_bf16_matmul", "torch_threads"):
        unknown = k.startswith("onednn") and (env.get(k) is None or ref_env.get(k) is None)
        if env.get(k) != ref_env.get(k) and not unknown:
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


def environment_notes(run: dict, reference: dict) -> list[str]:
    """Where this run's environment differs from the reference's, one line each (:func:`environment_differences`)."""
    return [d.text for d in environment_differences(run, reference)]


# Settings that move numbers, most plausible first: (name, environment fields, kinds of claims it moves, why).
CAUSES: tuple[tuple[str, tuple[str, ...], tuple[str, ...], str], ...] = (
    ("the package versions", ("python", "torch", "transformers", "lock_sha256"), KINDS,
     "another build of the libraries can move any number; rerun with the lock before reading the rest"),
    ("the oneDNN ISA", ("onednn_isa", "onednn_bf16_matmul", "cpu_flags_onednn", "ONEDNN_MAX_CPU_ISA"),
     ("trained here", "stand-in"),
     "bf16 training runs move with the oneDNN ISA (autocast's matmuls run its kernel for that ISA, and every "
     "optimiser step builds on the last one's rounding)"),
    ("ATen's CPU capability", ("cpu_capability", "ATEN_CPU_CAPABILITY", "cpu_flags_aten"), KINDS,
     "ATen's vector kernels round float32 forwards differently (ATEN_CPU_CAPABILITY=avx2 moved SmolLM2's logits by "
     "4e-5 and 4 projector steps by 6e-3, benchmarks/determinism.py)"),
    ("MKL's code path", ("MKL_CBWR",), KINDS,
     "MKL_CBWR picks another code path (forwards moved by 7e-5, 4 projector steps by 6e-3, benchmarks/determinism.py)"),
    ("the CPU", ("machine", "cpu_vendor", "cpu_model"), KINDS,
     "another CPU with the same flags can still pick other kernel blockings"),
    ("the threads", ("torch_threads", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "notebook_threads"), KINDS,
     "a weak lead: 1 and 2 threads were bit-identical in benchmarks/determinism.py, so the code or a step that is "
     "not deterministic is as likely"),
)


def likely_causes(env_diffs: list[EnvDifference], diffs: list[Difference], run: dict, reference: dict) -> list[str]:
    """For each kind of claim that changed (anything but a claim only one side has), the first setting of
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


def report(run: dict, reference: dict) -> tuple[str, bool]:
    """The text ``make verify`` prints and whether the run reproduced the reference (no difference at all): the
    environment differences first, then which setting most plausibly explains what changed, then each difference."""
    diffs = compare(run, reference)
    env_diffs = environment_differences(run, reference)
    n = len(reference["claims"])
    records = sum(d.what != "value" for d in diffs)
    lines = [f"reference: {n} claims from commit {reference.get('environment', {}).get('commit')}"]
    lines += [f"environment: {d.text}" for d in env_diffs]
    lines += [f"likely cause: {x}" for x in likely_causes(env_diffs, diffs, run, reference)]
    lines += [d.line() for d in diffs]
    if diffs:
        lines.append(f"NOT reproduced: {records} difference(s) in verdicts, unsettled flags, draw outcomes, controls, "
                     f"note flags or claims present; {sum(d.what == 'value' for d in diffs)} group(s) of values beyond "
                     f"their tolerance")
    else:
        lines.append(f"reproduced: all {n} verdicts, draws and controls equal, every value within its stated tolerance")
    return "\n".join(lines), not diffs


def load_reference(path: str | Path) -> dict:
    """The reference at ``path``; one written by another verify schema is refused with a one-line message that says
    how to regenerate it."""
    from sinklib.core.errors import InputError

    if not Path(path).exists():
        raise InputError(f"no reference at {path}; make one with `python -m sinklib verify --write`")
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if data.get("schema") != SCHEMA:
        raise InputError(f"{path}: verify schema {data.get('schema')!r}, this sinklib reads {SCHEMA}; regenerate it "
                         f"from a clean run: `make figures`, then `make reference` (python -m sinklib verify --write)")
    return data


def _profiles(records: Mapping[str, dict]) -> list[str]:
    return sorted({r.get("profile") or "?" for r in records.values()})


def _notebooks(records: Mapping[str, dict]) -> list[str]:
    return sorted({key.split("/", 1)[0] for key in records})


def scope_differences(run: dict, reference: dict) -> list[str]:
    """What makes the two runs incomparable before any verdict is read: other profiles, notebooks missing on either
    side (one line each; empty when both are the same kind of run)."""
    lines = []
    here, there = _profiles(run["claims"]), _profiles(reference["claims"])
    if here != there:
        lines.append(f"profiles differ: this run is {', '.join(here)}, the reference {', '.join(there)} -- sizes "
                     f"and models differ, so verdicts and values below may differ for that reason alone")
    missing = sorted(set(_notebooks(reference["claims"])) - set(_notebooks(run["claims"])))
    extra = sorted(set(_notebooks(run["claims"])) - set(_notebooks(reference["claims"])))
    if missing:
        lines.append(f"notebooks in the reference but not in this run: {', '.join(missing)} (their claims show as "
                     f"MISSING below)")
    if extra:
        lines.append(f"notebooks in this run but not in the reference: {', '.join(extra)}")
    return lines


def reference_problems(run: dict, previous: dict | None) -> list[str]:
    """Why ``run`` cannot replace the reference: it is not a CPU-profile run, or it lacks notebooks or claims the
    previous reference has (a partial or smoke run). Empty when it may."""
    problems = []
    if _profiles(run["claims"]) != ["cpu"]:
        problems.append(f"it is a {', '.join(_profiles(run['claims']))} run, not a CPU-profile one")
    if previous is not None:
        missing_books = sorted(set(_notebooks(previous["claims"])) - set(_notebooks(run["claims"])))
        missing = sorted(set(previous["claims"]) - set(run["claims"]))
        if missing_books:
            problems.append(f"notebooks {', '.join(missing_books)} did not run")
        elif missing:
            problems.append(f"{len(missing)} of the reference's {len(previous['claims'])} claims are missing "
                            f"(e.g. {missing[0]})")
    return problems


def verify(figures_dir: str | Path = "figures", reference: str | Path = REFERENCE, write: bool = False,
           force: bool = False) -> int:
    """Compare ``figures_dir``'s claims with ``reference`` and print the report (exit status 0 / 1); with ``write``,
    make the reference from this run instead -- refused (one line) when the run is not a complete CPU-profile run
    holding every notebook and claim of the reference it replaces, unless ``force``."""
    from sinklib.core.errors import InputError
    from sinklib.pipeline import publish

    for line in publish.leftovers(figures_dir):
        print(f"note: {line}")
    run = snapshot(figures_dir)
    if not run["claims"]:
        raise InputError(f"no claims under {figures_dir}; run `make figures` first")
    if write:
        previous = load_reference(reference) if Path(reference).exists() else None
        problems = reference_problems(run, previous)
        if problems and not force:
            raise InputError(f"not replacing {reference}: {'; '.join(problems)}. Run a complete `make figures` "
                             f"(PROFILE=cpu, every notebook) first, or `make reference FORCE=1` to replace it anyway.")
        from sinklib.core.paths import atomic_write_bytes

        atomic_write_bytes(Path(reference), (json.dumps(run, indent=1, sort_keys=True) + "\n").encode())
        print(f"wrote {reference}: {len(run['claims'])} claims" + (f" (forced: {'; '.join(problems)})"
                                                                     if problems else ""))
        return 0
    ref = load_reference(reference)
    for line in scope_differences(run, ref):
        print(f"FIRST: {line}")
    text, ok = report(run, ref)
    print(text)
    return 0 if ok else 1
