"""Test tooling for the notebook kernels papermill starts: an IPython profile whose startup file, run before the
first cell, installs what the test asks for -- the fake CUDA device (:mod:`tests.fake_cuda`) and the figure lint
(:mod:`tests.figure_lint`). The shipped package knows nothing of either."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STARTUP = """import os, sys
sys.path.insert(0, {root!r})
if os.environ.get("SINKLIB_FIGURE_REPORTS"):
    from tests import figure_lint
    figure_lint.install()
if os.environ.get("SINKLIB_FAKE_CUDA"):
    from tests import fake_cuda
    fake_cuda.install_from_environment()
"""


def kernel_env(ipython_dir: Path, *, fake_cuda: int = 0, figure_reports: Path | None = None) -> dict[str, str]:
    """The environment for kernels that start with ``fake_cuda`` fake CUDA devices (0: none) and, with
    ``figure_reports``, every saved figure linted into that folder: an IPython profile in ``ipython_dir``."""
    startup = Path(ipython_dir) / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-sinklib-tests.py").write_text(STARTUP.format(root=str(ROOT)), encoding="utf-8")
    env = {"IPYTHONDIR": str(ipython_dir)}
    if fake_cuda:
        env["SINKLIB_FAKE_CUDA"] = str(fake_cuda)
    if figure_reports is not None:
        env["SINKLIB_FIGURE_REPORTS"] = str(Path(figure_reports).resolve())
    return env
