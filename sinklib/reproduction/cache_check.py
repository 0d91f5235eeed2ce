"""``python -m sinklib verify-cache`` (``make verify-cache``; ``make verify`` runs it first): every cached build
checked in full -- each file hashed against its manifest whatever its mtime, and each weight checked finite.

A warm load hashes only a file whose size or mtime changed (:mod:`sinklib.core.manifest`), so bytes changed with
the size and mtime kept (``touch -d`` after an edit, bit rot under an unchanged inode) pass it; this check does not.
A weight that is NaN or infinite is a fault here, never a value: a run measured on it would report numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sinklib.core import manifest


@dataclass(frozen=True)
class CachedBuild:
    """One manifest and the files it covers: ``root`` / each of ``names``."""

    manifest: Path
    root: Path
    names: tuple[str, ...]


def cached_builds(cache: Path) -> list[CachedBuild]:
    """Every build under ``cache`` that carries a manifest: a folder's (``<folder>/.sinklib-manifest.json``, all the
    folder's files) or a file set's (``.<name>.sinklib-manifest.json`` beside them, the files it records)."""
    builds = []
    for path in sorted(Path(cache).rglob(f"*{manifest.MANIFEST}")):
        if path.name == manifest.MANIFEST:
            builds.append(CachedBuild(path, path.parent, tuple(manifest.folder_files(path.parent))))
        elif path.name.startswith("."):
            record = manifest.read(path)
            names = tuple(sorted(record["files"])) if record else ()
            builds.append(CachedBuild(path, path.parent, names))
    return builds


def nonfinite_weight(path: Path) -> str | None:
    """The first tensor of a ``.safetensors`` file or a ``.pt`` state dict with a NaN or infinite value, as "<file>:
    <tensor> holds N non-finite value(s)"; None when every floating tensor is finite (or the file holds no weights:
    a ``.pt`` that is not a state dict is left to the hash)."""
    import torch

    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            tensors = ((k, f.get_tensor(k)) for k in f.keys())
            return _first_nonfinite(path, tensors)
    if path.suffix == ".pt":
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # not a state dict (a kept result pickles records): its bytes were hashed, nothing to scan
            return None
        if isinstance(state, dict):
            return _first_nonfinite(path, state.items())
    return None


def _first_nonfinite(path: Path, tensors) -> str | None:
    import torch

    for name, t in tensors:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            bad = int((~torch.isfinite(t)).sum())
            if bad:
                return f"{path}: {name} holds {bad} non-finite value(s)"
    return None


def build_problem(build: CachedBuild) -> str | None:
    """None when every file of ``build`` hashes as its manifest records and holds finite weights; else the first
    fault, naming the file."""
    record = manifest.read(build.manifest)
    if record is None:
        return f"{build.manifest} is unreadable"
    problem = manifest.problem(build.manifest, build.root, build.names, record["recipe"], deep=True)
    if problem is not None:
        return problem
    for name in build.names:
        try:
            problem = nonfinite_weight(build.root / name)
        except Exception as err:  # torch / safetensors raise several kinds for one unreadable file
            problem = f"{build.root / name} cannot be read ({manifest.first_line(err)})"
        if problem is not None:
            return problem
    return None


def verify_cache(cache: Path, progress: bool = True) -> int:
    """Check every cached build under ``cache`` (:func:`build_problem`); print one line per fault and a summary.
    Returns 0 when all are sound, 1 otherwise (each faulty build is rebuilt by the next run that needs it, once its
    folder or files are removed: the line says which)."""
    from tqdm.auto import tqdm

    builds = cached_builds(cache)
    faults = []
    for build in tqdm(builds, desc="cache builds hashed", unit="build", disable=not progress):
        problem = build_problem(build)
        if problem is not None:
            faults.append((build, problem))
            print(f"FAULT {problem}; remove {_what_to_remove(build)} and rerun: it is rebuilt", flush=True)
    print(f"cache {cache}: {len(builds) - len(faults)} of {len(builds)} builds sound (every file hashed, every weight "
          f"finite)" + (f"; {len(faults)} faulty" if faults else ""))
    return 1 if faults else 0


def _what_to_remove(build: CachedBuild) -> str:
    if build.manifest.name == manifest.MANIFEST:
        return f"the folder {build.root}"
    return " and ".join(str(build.root / n) for n in build.names) or str(build.manifest)
