"""Small builders the test modules share (not a test module: pytest collects ``test_*.py`` only)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from pathlib import Path

import nbformat


def write_notebook(path: Path, body: str) -> None:
    """A notebook as ``make figures`` runs it: a papermill parameters cell (profile, model, device, seed, out_dir),
    then ``body``."""
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell(
        'profile = "smoke"\nmodel = ""\ndevice = ""\nseed = 0\nout_dir = "x"', metadata={"tags": ["parameters"]})
    nb.cells = [params, nbformat.v4.new_code_cell(body)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)


def in_two_processes(target: Callable, *args) -> list:
    """Run ``target(*args, queue)`` in two forked processes at once; what each put on the queue, in arrival order."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, queue)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    return [queue.get(timeout=5) for _ in procs]
