"""Manifests of cached builds: what a complete, uncorrupted cache entry looks like, written last.

A cached build (a converted model folder, a training run's JSON + ``.pt``, a kept per-model result) is a set of files
under one ``root`` folder. Its manifest is a JSON file that records, for every file, its size, its sha256 and its
``mtime_ns``, plus the ``recipe`` that made it (the code and recipe version; a changed recipe is a stale build)::

    {"format": 1, "recipe": "...", "files": {"model.safetensors": {"size": ..., "sha256": ..., "mtime_ns": ...}}}

Contract:

* :func:`write` is the build's **last** step, and atomic (a temporary file, then a rename): a build interrupted
  before it has no manifest, so it counts as absent, never as complete.
* :func:`problem` returns ``None`` when the files on disk are the ones recorded, else one short sentence naming the
  first file that differs (missing, unexpected, another size, another sha256) or the recipe that differs.

The cost trade-off (hashing a 540 MB file takes ~0.5 s; a warm load must stay fast): sizes are compared always, the
full sha256 only for a file whose ``mtime_ns`` differs from the one recorded at write time or at its last
verification. Any write to a file -- zeroing bytes in place included -- gives it a new mtime, so it is hashed and
caught; a copy of the cache made without preserving times is hashed once, and the new mtimes are recorded
(:func:`problem` with ``refresh=True``). What this cannot catch: bytes changed with the mtime put back by hand
(``touch -d``) or by the filesystem itself (bit rot under an unchanged inode) -- a ``deep`` check hashes everything.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from sinklib.core.errors import SinklibError
from sinklib.core.paths import atomic_write_bytes

MANIFEST = ".sinklib-manifest.json"  # the manifest's name inside a build folder
FORMAT = 1  # the manifest's own layout; bump when it changes (older manifests then read as stale builds)
_CHUNK = 16 * 2**20


class CacheCorruptError(SinklibError):
    """A cache entry does not match its manifest and cannot be rebuilt here; the message names the file and the
    command that fixes it, on one line."""


@dataclass(frozen=True)
class Entry:
    """What the manifest records of one file."""

    size: int
    sha256: str
    mtime_ns: int


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 16 MB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def entry_of(path: Path) -> Entry:
    """Size, sha256 and mtime of ``path`` now (the mtime read before hashing, so a write meanwhile shows up later)."""
    st = path.stat()
    return Entry(st.st_size, sha256_of(path), st.st_mtime_ns)


def folder_files(folder: Path) -> list[str]:
    """The files under ``folder`` as sorted relative POSIX paths, without manifests and their temporary files."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and not _is_manifest(p.name))


def _is_manifest(name: str) -> bool:
    """A manifest (``.sinklib-manifest.json``, ``.<file>.sinklib-manifest.json``) or one being written."""
    return MANIFEST in name


def beside(path: Path) -> Path:
    """The manifest of a single-file (or file-set) entry named after ``path``: ``.<name>.sinklib-manifest.json``
    beside it (hidden, so a ``*.pt`` or ``*.json`` glob of the folder never lists it)."""
    return path.with_name(f".{path.name}{MANIFEST}")


def write(manifest: Path, root: Path, names: Iterable[str], recipe: str) -> None:
    """Record ``names`` (relative to ``root``) with their sizes, hashes and mtimes, atomically; call it last."""
    files = {name: asdict(entry_of(root / name)) for name in sorted(names)}
    _store(manifest, {"format": FORMAT, "recipe": recipe, "files": files})


def _store(manifest: Path, record: dict) -> None:
    atomic_write_bytes(manifest, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())


def read(manifest: Path) -> dict | None:
    """The manifest's record, or None when it is missing or not a manifest (garbage, another format)."""
    try:
        record = json.loads(manifest.read_text())
        if not isinstance(record, dict) or record.get("format") != FORMAT:
            return None
        entries = {name: Entry(**fields) for name, fields in record["files"].items()}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return {"recipe": record.get("recipe"), "files": entries}


def problem(manifest: Path, root: Path, names: Iterable[str], recipe: str, *, hash_changed: bool = True,
            refresh: bool = False, deep: bool = False) -> str | None:
    """None when the files ``names`` under ``root`` are exactly those ``manifest`` records, made by ``recipe``; else
    the first difference, as a short sentence naming the file.

    ``hash_changed``: hash a file whose mtime differs from the recorded one (False: such a file is itself a
    difference -- the cheap check, no reading). ``deep``: hash every file. ``refresh``: when hashed files all matched,
    record their new mtimes (best effort: a read-only cache is left as it is), so they are not hashed again.
    """
    record = read(manifest)
    if record is None:
        return f"{manifest} is missing or unreadable"
    if record["recipe"] != recipe:
        return f"{root} was built by recipe {record['recipe']!r}, not the current {recipe!r}"
    recorded: dict[str, Entry] = record["files"]
    wanted = set(names)
    missing, unexpected = sorted(set(recorded) - wanted), sorted(wanted - set(recorded))
    if missing:
        return f"{root / missing[0]} is missing"
    if unexpected:
        return f"{root / unexpected[0]} is not in its manifest {manifest}"
    rehashed: dict[str, Entry] = {}
    for name, entry in sorted(recorded.items()):
        path = root / name
        try:
            st = path.stat()
        except OSError:
            return f"{path} is missing"
        if st.st_size != entry.size:
            return f"{path} has {st.st_size} bytes, its manifest {entry.size}"
        if st.st_mtime_ns == entry.mtime_ns and not deep:
            continue
        if not (hash_changed or deep):
            return f"{path} was modified after its manifest was written (not hashed)"
        if sha256_of(path) != entry.sha256:
            return f"{path} differs from its manifest (sha256)"
        rehashed[name] = Entry(entry.size, entry.sha256, st.st_mtime_ns)
    if refresh and any(rehashed[n].mtime_ns != recorded[n].mtime_ns for n in rehashed):
        files = {name: asdict(rehashed.get(name, entry)) for name, entry in recorded.items()}
        try:
            _store(manifest, {"format": FORMAT, "recipe": recipe, "files": files})
        except OSError:
            pass  # a read-only cache: verified, only not recorded (hashed again next time)
    return None


def note(text: str) -> None:
    """A one-line note on stderr about the cache (a notebook shows it in the cell's output): ``[sinklib] text``."""
    print(f"[sinklib] {text}", file=sys.stderr, flush=True)


def first_line(err: BaseException) -> str:
    """An exception's message cut to its first line (its class name when it has none), for one-line errors."""
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
