"""Headline numbers in and out: atomic JSON writing and the published reference numbers in ``data/reference``."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from sinklib.core.paths import REFERENCE_DIR, atomic_write_bytes


def to_builtin(obj):
    """Tensors, numpy values, paths and dataclass-like objects -> JSON-friendly Python values (NaN -> None)."""
    torch = sys.modules.get("torch")  # not imported here: reading and writing results needs no torch
    if torch is not None and isinstance(obj, torch.Tensor):
        return to_builtin(obj.tolist())
    if isinstance(obj, np.ndarray | np.generic):
        return to_builtin(obj.tolist())
    if isinstance(obj, dict):
        return {str(k): to_builtin(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_builtin(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


def non_finite_paths(obj, path: str = "") -> list[str]:
    """Where ``obj`` (a headline: dicts, lists, numbers, arrays) holds a NaN or an infinite float, as key paths
    (``reports[1].chain.ratio``); ``None`` -- a value that does not exist -- is not one."""
    plain = _plain(obj)
    if isinstance(plain, dict):
        return [p for k, v in plain.items() for p in non_finite_paths(v, f"{path}.{k}" if path else str(k))]
    if isinstance(plain, list):
        return [p for i, v in enumerate(plain) for p in non_finite_paths(v, f"{path}[{i}]")]
    return [path or "(the value)"] if isinstance(plain, float) and not math.isfinite(plain) else []


def _plain(obj):
    """A tensor or numpy value as the Python value :func:`to_builtin` would start from (NaN kept); else ``obj``."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor) or isinstance(obj, np.ndarray | np.generic):
        return obj.tolist()
    if isinstance(obj, tuple):
        return list(obj)
    return obj


def write_json(path: str | Path, obj) -> Path:
    atomic_write_bytes(path, (json.dumps(to_builtin(obj), indent=2) + "\n").encode())
    return Path(path)


def load_reference(name: str) -> dict:
    """A published-numbers file from ``data/reference/<name>.json`` (each carries its source)."""
    path = REFERENCE_DIR / f"{name}.json"
    if not path.exists():
        known = ", ".join(p.stem for p in sorted(REFERENCE_DIR.glob("*.json")))
        raise FileNotFoundError(f"no reference {name!r} in {REFERENCE_DIR}; available: {known}")
    return json.loads(path.read_text(encoding="utf-8"))


def sink_rate_table(measured: dict[str, float], label: str, reference: dict):
    """Measured sink rates (%) per input type beside a reference file's models (Gu et al. Table 1 layout).

    ``reference`` is :func:`load_reference("gu2024_sink_rates")`; its ``llama_family`` models are listed.
    """
    import pandas as pd

    rows = {f"{label} (measured)": measured}
    for name in reference.get("llama_family", reference["models"]):
        rows[f"{name} (Gu et al.)"] = reference["models"][name]
    return (100 * pd.DataFrame(rows).T[list(measured)]).round(2)


def number_matches(published: float, measured: float, factor: float = 2.0) -> tuple[bool, str]:
    """Does a measured number match a published one? Rule: within ``factor`` of it on either side.

    Returns (matches, text), e.g. (False, "no: 60 vs 263 (0.23x)"). A claim's *structure* (a jump, an ordering, a
    sign) can hold on any model while its *number* only can on the paper's model; the scorecards keep the two apart.
    """
    if not (math.isfinite(published) and math.isfinite(measured)) or published == 0:
        raise ValueError(f"cannot compare {measured!r} with the published {published!r}: both must be finite and "
                         f"the published value non-zero")
    ratio = measured / published
    ok = 1 / factor <= ratio <= factor
    return ok, f"{'yes' if ok else 'no'}: {measured:.3g} vs {published:.3g} ({ratio:.2f}x)"
