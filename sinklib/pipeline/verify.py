"""Did this run reproduce ours? Compare a run's claims with the committed reference of the CPU profile.

``data/reference/cpu_profile_claims.json`` holds, for every claim of a clean ``make figures`` run (CPU profile,
seed 0, the locked environment): its verdict, its measured values (every number in ``measured``, flattened to
``path -> value``), each draw's outcome, and a stated tolerance; beside them the environment it was made in
(package versions, the lock's hash, torch's CPU capability, threads per notebook, commit).

A value is reproduced when ``|new - ref| <= abs_tol + rel_tol * |ref|``. The tolerance is stated per claim by what
produced it (:func:`tolerance`): 1e-4 relative for pretrained models (a forward is a fixed function of its
weights: another instruction set moves it at float rounding, ~1e-6), 5e-2 for stand-ins and models trained here
(hundreds of optimiser steps amplify a rounding difference), 1e-9 absolute for every value. On one machine kind with
the lock and the runner's one thread per notebook a rerun is bit-identical (``benchmarks/determinism.py``). A
verdict must be equal, whatever the tolerance.

    python -m sinklib verify                   # this run (figures/) against the reference; exit 1 if it differs
    python -m sinklib verify --write           # make the reference from this run (after a clean make figures)
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sinklib.core.paths import ROOT

REFERENCE = ROOT / "data" / "reference" / "cpu_profile_claims.json"
LOCK = ROOT / "requirements.lock"
SCHEMA = 1
TOLERANCES = {"pretrained": 1e-4, "stand-in": 5e-2, "trained here": 5e-2}  # relative, by what produced the claim
ABS_TOL = 1e-9


def tolerance(kind: str) -> float:
    """The relative tolerance a claim's values are checked with, by the kind of model it was measured on."""
    return TOLERANCES.get(kind, TOLERANCES["pretrained"])


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


def environment() -> dict:
    """What a run's numbers depend on besides the code: versions, the lock, the CPU and the threads."""
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
            "commit": commit}


def snapshot(figures_dir: str | Path) -> dict:
    """The reference record of a run: every claim's verdict, values, draws and tolerance, keyed by
    ``"<notebook>/<claim id> [<model>]"``."""
    from sinklib.pipeline import scorecard

    claims = {}
    for row in scorecard.collect(figures_dir):
        claims[f"{row.notebook}/{row.id} [{row.model}]"] = {  # one record per claim and model (the Recorder's rule)
            "verdict": row.verdict, "values": flatten(row.measured), "draws": list(row.draws),
            "kind": row.kind, "model": row.model, "profile": row.profile, "rel_tol": tolerance(row.kind),
        }
    return {"schema": SCHEMA, "environment": environment(), "claims": claims}


@dataclass(frozen=True)
class Difference:
    key: str
    what: str  # "verdict", "draws", "value", "missing", "new"
    detail: str

    def line(self) -> str:
        return f"{self.what.upper():<8} {self.key}: {self.detail}"


def _close(new: float, ref: float, rel: float) -> bool:
    if math.isnan(ref) or math.isnan(new):
        return math.isnan(ref) and math.isnan(new)
    if math.isinf(ref) or math.isinf(new):
        return new == ref
    return abs(new - ref) <= ABS_TOL + rel * abs(ref)


def compare(run: dict, reference: dict) -> list[Difference]:
    """Every claim whose verdict differs, whose value moved beyond its stated tolerance, or that only one side has."""
    diffs: list[Difference] = []
    ref_claims, run_claims = reference["claims"], run["claims"]
    for key, ref in ref_claims.items():
        new = run_claims.get(key)
        if new is None:
            diffs.append(Difference(key, "missing", f"in the reference ({ref['verdict']}), not in this run"))
            continue
        if new["verdict"] != ref["verdict"]:
            diffs.append(Difference(key, "verdict", f"{ref['verdict']} in the reference, {new['verdict']} here"))
        elif new["draws"] != ref["draws"]:
            diffs.append(Difference(key, "draws", f"draw outcomes {ref['draws']} in the reference, {new['draws']} here"))
        moved = []
        for path, ref_value in ref["values"].items():
            value = new["values"].get(path)
            if value is None:
                moved.append(f"{path} missing (reference {ref_value:.6g})")
            elif not _close(value, ref_value, ref["rel_tol"]):
                moved.append(f"{path} {value:.6g} vs {ref_value:.6g}")
        if moved:
            diffs.append(Difference(key, "value", f"beyond rel. tolerance {ref['rel_tol']:g}: " + "; ".join(moved[:4])
                                    + (f"; +{len(moved) - 4} more" if len(moved) > 4 else "")))
    for key, new in run_claims.items():
        if key not in ref_claims:
            diffs.append(Difference(key, "new", f"not in the reference ({new['verdict']} here)"))
    return diffs


def environment_notes(run: dict, reference: dict) -> list[str]:
    """Where this run's environment differs from the reference's (what could explain a value that moved)."""
    ref_env, env = reference.get("environment", {}), run.get("environment", {})
    return [f"{k}: {env.get(k)} here, {ref_env.get(k)} in the reference" for k in
            ("python", "torch", "transformers", "lock_sha256", "cpu_capability", "machine") if env.get(k) != ref_env.get(k)]


def report(run: dict, reference: dict) -> tuple[str, bool]:
    """The text ``make verify`` prints and whether the run reproduced the reference (no difference at all)."""
    diffs = compare(run, reference)
    n = len(reference["claims"])
    verdicts = sum(d.what in ("verdict", "draws", "missing", "new") for d in diffs)
    lines = [f"reference: {n} claims from commit {reference.get('environment', {}).get('commit')}"]
    lines += [f"note: {x}" for x in environment_notes(run, reference)]
    lines += [d.line() for d in diffs]
    if diffs:
        lines.append(f"NOT reproduced: {verdicts} claim(s) with another verdict, other draw outcomes or missing, "
                     f"{sum(d.what == 'value' for d in diffs)} with values beyond their tolerance")
    else:
        lines.append(f"reproduced: all {n} verdicts equal, every value within its stated tolerance")
    return "\n".join(lines), not diffs


def verify(figures_dir: str | Path = "figures", reference: str | Path = REFERENCE, write: bool = False) -> int:
    """Compare ``figures_dir``'s claims with ``reference`` and print the report (exit status 0 / 1); with ``write``,
    make the reference from this run instead."""
    from sinklib.core.errors import InputError

    run = snapshot(figures_dir)
    if not run["claims"]:
        raise InputError(f"no claims under {figures_dir}; run `make figures` first")
    if write:
        Path(reference).write_text(json.dumps(run, indent=1, sort_keys=True) + "\n")
        print(f"wrote {reference}: {len(run['claims'])} claims")
        return 0
    if not Path(reference).exists():
        raise InputError(f"no reference at {reference}; make one with `python -m sinklib verify --write`")
    text, ok = report(run, json.loads(Path(reference).read_text()))
    print(text)
    return 0 if ok else 1
