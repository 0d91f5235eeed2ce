"""How a run stops (:mod:`sinklib.pipeline.stopping`), injected: SIGTERM stops the run's notebooks as Ctrl-C does and
leaves no process behind; a run killed outright takes its notebooks with it; a stop that reaches a child through
another thread never splits a publish. Each checks processes by PID and the figures folder file by file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest
from helpers import write_notebook
from test_faults_publish import _previous

from sinklib.pipeline import stopping

ROOT = Path(__file__).resolve().parents[1]
SLOW = ("from pathlib import Path\nimport time\ntime.sleep({sleep})\n"
        "(Path(out_dir) / 'fig01_new.png').write_bytes(b'new figure ' * 200)\n"
        "(Path(out_dir) / 'fig01_new.txt').write_text('new caption')")
RUN = textwrap.dedent("""
    import sys
    from pathlib import Path
    from sinklib.pipeline import runner
    sys.exit(runner.run_all(profile="smoke", figures_dir=Path(sys.argv[1]), build_dir=Path(sys.argv[2]),
                            notebook_dir=Path(sys.argv[3]), jobs=1))
""")


def _start_run(tmp_path: Path, sleep: float) -> tuple[subprocess.Popen, Path, list[psutil.Process]]:
    """A run of one notebook that sleeps ``sleep`` s, started and waited for until its kernel runs: (the run, the
    figures folder, the run's descendants -- the notebook's child and its kernel)."""
    figures, books = tmp_path / "figures", tmp_path / "notebooks"
    _previous(figures)
    books.mkdir()
    write_notebook(books / "00_demo.ipynb", SLOW.format(sleep=sleep))
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(figures), str(tmp_path / "build"), str(books)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 180  # start-up is slow beside other runs (a full make test)
    family: list[psutil.Process] = []
    while time.time() < deadline:
        family = psutil.Process(proc.pid).children(recursive=True)
        if any("ipykernel" in " ".join(p.cmdline()) for p in family if p.is_running()):
            break
        time.sleep(0.2)
    assert any("ipykernel" in " ".join(p.cmdline()) for p in family), "the notebook's kernel never started"
    time.sleep(2)  # the kernel runs the notebook's cell
    return proc, figures, family


def _alive(procs: list[psutil.Process], within_s: float) -> list[int]:
    """The PIDs of ``procs`` still running after ``within_s`` seconds."""
    gone, alive = psutil.wait_procs(procs, timeout=within_s)
    return [p.pid for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@pytest.mark.notebook
def test_sigterm_stops_the_run_like_ctrl_c_exits_143_and_leaves_no_process(tmp_path):
    """Item 1: the children and kernels of a SIGTERMed run ran on to the end, with no summary and no exit code."""
    proc, figures, family = _start_run(tmp_path, sleep=120)
    started = time.time()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    assert time.time() - started < 40  # not the notebook's 120 s
    assert "Traceback" not in err + out
    assert "terminated: stopping 1 running notebook(s)" in out and "00_demo" in out.split("terminated")[1]
    assert not _alive(family, within_s=10), "a notebook's process outlived its run"
    assert sorted(p.name for p in (figures / "00_demo").iterdir()) == ["claims.json", "fig01_old.png"]
    assert not list(figures.glob(".staging-*/00_demo"))


@pytest.mark.notebook
def test_a_killed_run_takes_its_notebooks_with_it(tmp_path):
    """Item 1: after SIGKILL of the run, its notebooks ran on in sessions of their own (up to ~14 min each)."""
    proc, figures, family = _start_run(tmp_path, sleep=120)
    proc.kill()
    proc.communicate(timeout=30)
    assert not _alive(family, within_s=15), "a notebook's process outlived its run"
    assert sorted(p.name for p in (figures / "00_demo").iterdir()) == ["claims.json", "fig01_old.png"]
    assert not list(figures.glob(".staging-*/00_demo"))  # the child cleaned its staging up as it stopped


# A child of a run (runner._run_from_json) whose publish is slowed between its two renames; the test's SIGTERM
# reaches it through another of its threads (pthread_kill), as the operating system may deliver a process's signal.
SLOW_PUBLISH = textwrap.dedent("""
    import json, signal, sys, threading, time
    from pathlib import Path
    from sinklib.pipeline import runner

    args = json.loads(sys.argv[1])
    target = Path(args["figures_dir"]) / "00_demo"
    other = threading.Thread(target=time.sleep, args=(60,), daemon=True)
    other.start()
    rename = Path.rename

    def slow_rename(self, new):
        out = rename(self, new)
        if self == target:  # the previous figures just moved aside: the publish is half-way
            signal.pthread_kill(other.ident, signal.SIGTERM)
            time.sleep(1.5)
        return out

    Path.rename = slow_rename
    runner._run_from_json(sys.argv[1])
""")


@pytest.mark.notebook
def test_a_stop_through_another_thread_waits_for_the_publish(tmp_path):
    """Item 3: signals were blocked in the child's main thread only; one taken by another thread ran the stop
    mid-publish -- the notebook's folder vanished, its previous copy left hidden, the new one deleted."""
    figures, books = tmp_path / "figures", tmp_path / "notebooks"
    _previous(figures)
    books.mkdir()
    write_notebook(books / "00_demo.ipynb", SLOW.format(sleep=0))
    args = {"path": str(books / "00_demo.ipynb"), "profile": "smoke", "model": "", "device": "", "seed": 0,
            "figures_dir": str(figures), "build_dir": str(tmp_path / "build"), "progress_bar": False}
    child = subprocess.run([sys.executable, "-c", SLOW_PUBLISH, json.dumps(args)], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)
    assert child.returncode == 130, child.stderr[-2000:]  # the stop came, after the publish
    assert sorted(p.name for p in (figures / "00_demo").iterdir()) == [
        "00_demo.html", "fig01_new.png", "fig01_new.txt", "takeaways.json"]
    assert not list(figures.glob(".*.old")) and not list(figures.glob(".staging-*"))


def test_a_guarded_stop_waits_for_the_publish_and_runs_once_after_it():
    stops: list[str] = []
    guard = stopping.StopGuard(lambda: stops.append("stopped"))
    with guard.publishing():
        guard.request()
        threading.Thread(target=guard.request).start()  # the run's death, seen by the watching thread
        time.sleep(0.2)
        assert stops == []
    assert stops == ["stopped"]
    guard.request()  # outside a publish: at once
    assert stops == ["stopped", "stopped"]


def test_a_guarded_publish_that_fails_still_stops():
    stops: list[str] = []
    guard = stopping.StopGuard(lambda: stops.append("stopped"))
    with pytest.raises(OSError), guard.publishing():
        guard.request()
        raise OSError("disk full")
    assert stops == ["stopped"]


def test_the_parent_watch_calls_back_once_the_parent_is_gone():
    called = threading.Event()
    stopping.watch_parent(os.getpid(), called.set, poll_s=0.05)  # this process is not its own parent: "gone"
    assert called.wait(5)
    quiet = threading.Event()
    stopping.watch_parent(os.getppid(), quiet.set, poll_s=0.05)
    assert not quiet.wait(0.3)


def test_sigterm_raises_terminated_only_inside_the_block():
    with pytest.raises(stopping.Terminated), stopping.terminate_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
