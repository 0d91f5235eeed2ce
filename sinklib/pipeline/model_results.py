"""Work kept as it goes: a notebook over several models writes each model's results as soon as that model is done,
so a failure on model 4 (a gated id, memory, a network error) keeps models 1-3, and a rerun skips them.

>>> done = KeptWork.for_model(run, "meta-llama/Llama-2-7b-hf")
>>> if done.exists():
...     report, claims = done.load()
... else:
...     report, claims = measure(...)
...     done.save((report, claims))

Where: ``<cache>/kept/<notebook>/<model>-<key>.pt`` (``SINKLIB_CACHE``; delete that folder to measure every model again). The key
hashes everything the result depends on -- notebook, model, profile, seed, device, the notebook's sizes, the fake
CUDA and device-map settings, and the source of ``sinklib`` and of the notebook -- so any change of code or sizes
measures again instead of reading a stale result. Written atomically (a temporary file, then a rename), then its
manifest (:mod:`sinklib.core.manifest`, ``.<file>.sinklib-manifest.json`` beside it) last: a result without a
manifest, or one that does not match it (garbage, zeroed bytes, truncated), counts as missing -- measured again, with
a one-line note naming the file -- and one that cannot be read is one line naming the file.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch

from sinklib.core import manifest
from sinklib.core.manifest import CacheCorruptError
from sinklib.core.paths import ROOT, cache_dir
from sinklib.pipeline import profiles

RECIPE = "kept-v1"  # what a kept result's manifest records as its recipe
KEY_ENV = ("SINKLIB_FAKE_CUDA", "SINKLIB_DEVICE_MAP")  # settings that change where (and so how) a model ran


@cache
def source_digest(notebook: str) -> str:
    """sha256 over the source of ``sinklib`` and of ``notebooks/<notebook>.py`` (when present)."""
    digest = hashlib.sha256()
    files = sorted((ROOT / "sinklib").rglob("*.py")) + [ROOT / "notebooks" / f"{notebook}.py"]
    for path in files:
        if path.exists():
            digest.update(path.relative_to(ROOT).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def kept_code(notebook: str) -> str:
    """The code a notebook's kept results are for, short: the first 16 hex digits of :func:`source_digest` (written
    to its headline so the scheduler can tell a rerun that reads them from one that measures again)."""
    return source_digest(notebook)[:16]


@dataclass(frozen=True)
class KeptWork:
    """One model's results in one notebook run, on disk."""

    path: Path

    @classmethod
    def for_model(cls, run: profiles.Run, model: str) -> KeptWork:
        parts = [run.notebook, model, run.profile.name, str(run.seed), run.device, repr(run.sizes),
                 *(f"{k}={os.environ.get(k, '')}" for k in KEY_ENV), source_digest(run.notebook)]
        key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
        safe = model.replace("/", "--")
        return cls(cache_dir() / "kept" / run.notebook / f"{safe}-{key}.pt")

    @property
    def manifest_path(self) -> Path:
        """The result's manifest, beside it (hidden: a ``*.pt`` glob of the folder does not list it)."""
        return manifest.beside(self.path)

    def problem(self) -> str | None:
        """None when the result file matches its manifest, else what is wrong (naming the file)."""
        if not self.manifest_path.exists():
            return f"{self.path} has no manifest (written before manifests, or its save was interrupted)"
        return manifest.problem(self.manifest_path, self.path.parent, [self.path.name], RECIPE, refresh=True)

    def exists(self) -> bool:
        """True when a complete result is kept. A result file that does not match its manifest counts as missing:
        it is removed, with a one-line note naming it, and the caller measures again."""
        if not self.path.exists():
            return False
        problem = self.problem()
        if problem is None:
            return True
        manifest.note(f"{problem}; measuring it again")
        self.path.unlink(missing_ok=True)
        self.manifest_path.unlink(missing_ok=True)
        return False

    def load(self):
        """The saved result (sinklib's own pickle, written by :meth:`save` on this machine); a one-line
        :class:`~sinklib.core.manifest.CacheCorruptError` naming the file when it cannot be read."""
        try:
            return torch.load(self.path, weights_only=False)
        except Exception as err:  # torch raises several kinds (UnpicklingError, RuntimeError, EOFError) for one fault
            raise CacheCorruptError(f"the kept result {self.path} cannot be read ({manifest.first_line(err)}); "
                                    f"run `rm '{self.path}'` and run the notebook again") from None

    def save(self, result) -> None:
        """Write ``result`` atomically, its manifest last (an older manifest is removed first)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.manifest_path.unlink(missing_ok=True)
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        torch.save(result, tmp)
        tmp.replace(self.path)
        manifest.write(self.manifest_path, self.path.parent, [self.path.name], RECIPE)
