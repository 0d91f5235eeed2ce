"""A run's hold on its folders, and publishing a notebook's figures so that no folder is ever half-written.

* :class:`FolderLock`: one ``make figures`` per figures folder and per build folder at a time -- an exclusive
  ``filelock`` (flock) on ``<folder>/.sinklib-run.lock`` held for the whole run (the file names the holder's PID;
  the kernel drops the lock when the process dies, so a killed run leaves no stale lock). A second run stops before anything
  runs, with one line naming the first run's PID.
* :func:`staging_dir`: a notebook writes into ``<figures>/.staging-<pid>/<notebook>`` -- private to the run, hidden,
  and on the figures folder's own filesystem, so :func:`publish` is two renames, never a copy.
* :func:`publish`: every staged file and folder is fsynced, then ``<figures>/<notebook>`` moves aside to
  ``.<notebook>.old``, the staging folder takes its name, the parent is fsynced, the old copy is removed. A crash
  at any point leaves either the old folder or the new one complete (or, between the two renames, the old one
  hidden as ``.<notebook>.old``, which :func:`recover` puts back at the next run).
* :func:`preflight`: every output folder exists, is writable and has room, checked before the first notebook runs.
* what readers (scorecard, gallery, verify) may read -- visible ``NN_name`` folders only -- and what an interrupted
  publish left behind: :mod:`sinklib.reproduction.figures_folder`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import filelock

from sinklib.core.errors import InputError

LOCK_NAME = ".sinklib-run.lock"
MIN_FREE_BYTES = 64 * 2**20  # per notebook, besides twice what its previous figures take


class RunBusy(InputError):
    """Another run holds the folder."""


class FolderLock:
    """``with FolderLock(folder, "figures folder"):`` -- this process's exclusive hold on ``folder`` (see the module
    docstring; a :class:`filelock.FileLock` that does not wait); raises :class:`RunBusy` (one line, the holder's PID)
    when another process holds it."""

    def __init__(self, folder: Path, what: str):
        self.folder, self.what = Path(folder), what
        self._lock: filelock.BaseFileLock | None = None

    def __enter__(self) -> FolderLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / LOCK_NAME
        lock = filelock.FileLock(path, timeout=0, is_singleton=False)
        try:
            lock.acquire()
        except filelock.Timeout:
            holder = path.read_text(errors="replace").strip() or "unknown"
            raise RunBusy(f"the {self.what} {self.folder} is in use by another run (PID {holder}); wait for it to "
                          f"finish, or give this run its own --figures-dir and --build-dir.") from None
        path.write_text(f"{os.getpid()}\n")  # the holder, named to a second run
        self._lock = lock
        return self

    def __exit__(self, *exc) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None


def staging_root(figures_dir: Path) -> Path:
    """This run's private staging area inside the figures folder (hidden; one filesystem with the targets)."""
    return Path(figures_dir) / f".staging-{os.getpid()}"


def staging_dir(figures_dir: Path, stem: str) -> Path:
    """A fresh, empty staging folder for notebook ``stem`` of this run."""
    folder = staging_root(figures_dir) / stem
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def _fsync_tree(folder: Path) -> None:
    """fsync every file under ``folder``, then every folder (so names and contents are on disk)."""
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for path in [folder, *sorted(p for p in folder.rglob("*") if p.is_dir())]:
        _fsync_dir(path)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(staging: Path, target: Path) -> None:
    """Replace ``target`` by ``staging`` (same filesystem): fsync, move the old folder aside, rename, fsync, drop the
    old one. Raises OSError (the previous figures intact under their name) if the staged files cannot be synced."""
    _fsync_tree(staging)
    old = target.with_name(f".{target.name}.old")
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        target.rename(old)
    try:
        staging.rename(target)
    except OSError:
        if old.exists() and not target.exists():
            old.rename(target)  # put the previous figures back under their name
        raise
    _fsync_dir(target.parent)
    if old.exists():
        shutil.rmtree(old)


def recover(figures_dir: Path) -> list[str]:
    """At the start of a run (holding the lock): put back every ``.<nb>.old`` whose ``<nb>`` is missing (a publish
    interrupted between its two renames), remove the others and any stale staging area. Returns one line per
    restored folder."""
    figures_dir = Path(figures_dir)
    if not figures_dir.is_dir():
        return []
    lines = []
    for old in sorted(figures_dir.glob(".*.old")):
        target = figures_dir / old.name[1:-len(".old")]
        if not target.exists():
            old.rename(target)
            lines.append(f"restored {target} from a publish that was interrupted")
        else:
            shutil.rmtree(old, ignore_errors=True)
    for stale in figures_dir.glob(".staging-*"):
        shutil.rmtree(stale, ignore_errors=True)
    return lines


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def require_folder(path: Path, what: str) -> None:
    """``path`` may be missing or a folder, not a file: one line otherwise (``what``: "figures folder",
    "--figures-dir", ...)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"the {what} {path} is a file, not a folder; point it at a folder, or move the file away.")


def preflight(folders: dict[str, Path], stems: list[str], figures_dir: Path) -> None:
    """Before the first notebook: each of ``folders`` (what -> path) can be created and written, and has at least
    ``MIN_FREE_BYTES`` per notebook plus twice what the notebooks' previous figures take. One line otherwise."""
    need = sum(MIN_FREE_BYTES + 2 * _folder_bytes(Path(figures_dir) / s) for s in stems)
    for what, folder in folders.items():
        folder = Path(folder)
        require_folder(folder, what)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".sinklib-probe-{os.getpid()}"
            probe.write_bytes(b"probe")
            probe.unlink()
        except OSError as err:
            raise InputError(f"the {what} {folder} cannot be written ({err.strerror or err}); fix its permissions or "
                             f"point the run elsewhere.") from None
        free = shutil.disk_usage(folder).free
        if free < need:
            raise InputError(f"the {what} {folder} has {free / 2**20:.0f} MiB free; {len(stems)} notebook(s) need "
                             f"about {need / 2**20:.0f} MiB -- free some space or point the run elsewhere.")
