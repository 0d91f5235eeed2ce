"""Issue 45's faults of a run and its publishing, injected: two runs at once, a failed and an interrupted publish, a
full or unusable output folder, a partial run made into the reference, Ctrl-C, a forced-ASCII locale. Each asserts
that nothing published is lost or half-written, no wrong result comes with exit 0, and every error is one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers import write_notebook

from sinklib.core.errors import InputError
from sinklib.pipeline import publish, runner
from sinklib.reproduction import figures_folder

ROOT = Path(__file__).resolve().parents[1]


FIGURE = ("from pathlib import Path\nimport time\ntime.sleep({sleep})\n"
          "(Path(out_dir) / 'fig01_new.png').write_bytes(b'new figure ' * 200)\n"
          "(Path(out_dir) / 'fig01_new.txt').write_text('new caption')")


def _books(tmp_path: Path, sleep: float = 0) -> Path:
    books = tmp_path / "notebooks"
    books.mkdir(exist_ok=True)
    write_notebook(books / "00_demo.ipynb", FIGURE.format(sleep=sleep))
    return books


def _previous(figures: Path) -> Path:
    """A complete previous publish of 00_demo."""
    old = figures / "00_demo"
    old.mkdir(parents=True)
    (old / "fig01_old.png").write_bytes(b"previous good figure")
    (old / "claims.json").write_text("{}")
    return old


HOLD = textwrap.dedent("""
    import sys, time
    from sinklib.pipeline.publish import FolderLock
    with FolderLock(sys.argv[1], "figures folder"):
        print("held", flush=True)
        time.sleep(60)
""")


def test_a_second_run_on_the_same_folders_stops_naming_the_first(tmp_path):
    """Item 1: two runs sharing build/staging destroyed each other's figures and both said ok."""
    figures = tmp_path / "figures"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(figures)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(publish.RunBusy, match=f"PID {holder.pid}") as err:
            runner.run_all(profile="smoke", figures_dir=figures, build_dir=tmp_path / "build",
                           notebook_dir=_books(tmp_path))
        assert "\n" not in str(err.value) and "--figures-dir" in str(err.value)
        assert not (tmp_path / "build" / "notebooks").exists()  # nothing ran
    finally:
        holder.kill()
        holder.wait()
    with publish.FolderLock(figures, "figures folder"):  # a killed holder leaves no stale lock
        pass


def test_each_run_stages_privately_on_the_figures_filesystem(tmp_path):
    figures = tmp_path / "figures"
    staging = publish.staging_dir(figures, "00_demo")
    assert staging.parent.name == f".staging-{os.getpid()}" and staging.parent.parent == figures


def test_a_failed_publish_keeps_the_previous_figures_whole(tmp_path, monkeypatch):
    """Item 2: a full disk while publishing left zero-byte figures in place of the good ones."""
    figures = tmp_path / "figures"
    old = _previous(figures)
    staging = publish.staging_dir(figures, "00_demo")
    (staging / "fig01_new.png").write_bytes(b"")

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(publish.os, "fsync", full)
    with pytest.raises(OSError, match="No space"):
        publish.publish(staging, figures / "00_demo")
    assert sorted(p.name for p in old.iterdir()) == ["claims.json", "fig01_old.png"]
    assert (old / "fig01_old.png").read_bytes() == b"previous good figure"


def test_a_publish_killed_between_its_renames_is_restored_and_never_read_as_a_notebook(tmp_path, capsys):
    """Item 2: a kill between the two renames left only ``.13_vit.old``, which the scorecard read as a notebook."""
    from sinklib.pipeline import gallery
    from sinklib.reproduction import scorecard

    figures = tmp_path / "figures"
    old = _previous(figures)
    old.rename(figures / ".00_demo.old")  # what the kill left
    (figures / ".staging-999999" / "00_demo").mkdir(parents=True)
    assert scorecard.collect(figures) == []
    assert not figures_folder.notebook_folders(figures)
    gallery.build_gallery(figures)
    assert "hidden by an interrupted publish" in capsys.readouterr().out
    assert publish.recover(figures) == [f"restored {figures / '00_demo'} from a publish that was interrupted"]
    assert (figures / "00_demo" / "fig01_old.png").read_bytes() == b"previous good figure"
    assert not list(figures.glob(".*"))


def test_a_full_or_unusable_output_folder_is_found_before_the_first_notebook(tmp_path, monkeypatch):
    """Item 7: an unwritable or full --figures-dir was found only after the notebooks ran."""
    books = _books(tmp_path)
    afile = tmp_path / "not-a-folder"
    afile.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        runner.run_all(profile="smoke", figures_dir=afile, build_dir=tmp_path / "build", notebook_dir=books)
    monkeypatch.setattr(publish.shutil, "disk_usage", lambda p: type("Usage", (), {"free": 2**20})())
    with pytest.raises(InputError, match="MiB free") as err:
        runner.run_all(profile="smoke", figures_dir=tmp_path / "figures", build_dir=tmp_path / "build",
                       notebook_dir=books)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "build" / "notebooks").exists()  # refused before any kernel started


def _claims_folder(figures: Path, notebook: str, profile: str, ids: list[str]) -> None:
    from sinklib.core import claims, claims_file

    rec = claims_file.Recorder(notebook=notebook, model="m", profile=profile)
    for cid in ids:
        rec.add(claims.Claim(id=cid, statement="a hand-built claim", source="Gu et al. (arXiv 2410.10781), Table 1",
                             rule="x >= 1", published={"x": 1.0}, measured={"x": 1.0}, holds=True,
                             follows="Table 1", paper="2410.10781"), show=False)
    folder = figures / notebook
    folder.mkdir(parents=True, exist_ok=True)
    rec.write(folder)


def test_make_reference_refuses_a_partial_or_smoke_run_and_verify_says_why_first(tmp_path, capsys):
    """Item 3: a smoke run of four notebooks replaced the 70-claim reference, and verify then said "reproduced"."""
    from sinklib.reproduction import verify

    full, partial = tmp_path / "full", tmp_path / "partial"
    _claims_folder(full, "00_tour", "cpu", ["gu.a", "gu.b"])
    _claims_folder(full, "10_llm", "cpu", ["gu.c"])
    reference = tmp_path / "reference.json"
    assert verify.verify(full, reference, write=True) == 0
    written = reference.read_bytes()
    _claims_folder(partial, "00_tour", "smoke", ["gu.a", "gu.b"])
    with pytest.raises(InputError, match="smoke run, not a CPU-profile one; notebooks 10_llm did not run") as err:
        verify.verify(partial, reference, write=True)
    assert "FORCE=1" in str(err.value) and reference.read_bytes() == written
    capsys.readouterr()
    assert verify.verify(partial, reference) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("FIRST: profiles differ: this run is smoke, the reference cpu")
    assert verify.verify(partial, reference, write=True, force=True) == 0  # asked for explicitly


INTERRUPT = textwrap.dedent("""
    import sys
    from pathlib import Path
    from sinklib.pipeline import runner
    sys.exit(runner.run_all(profile="smoke", figures_dir=Path(sys.argv[1]), build_dir=Path(sys.argv[2]),
                            notebook_dir=Path(sys.argv[3]), jobs=1))
""")


def test_ctrl_c_stops_the_run_at_once_publishes_nothing_and_exits_130(tmp_path):
    """Item 6: notebooks in flight ran to the end and were published; a prompt exit took three Ctrl-Cs."""
    figures = tmp_path / "figures"
    old = _previous(figures)
    books = _books(tmp_path, sleep=120)
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPT, str(figures), str(tmp_path / "build"), str(books)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 180  # start-up is slow beside other runs (a full make test): the stop is what is timed
    while time.time() < deadline and not list(figures.glob(".staging-*/00_demo")):
        time.sleep(0.2)  # the notebook's child has started
    assert list(figures.glob(".staging-*/00_demo")), "the notebook never started"
    time.sleep(3)  # ... and its kernel
    started = time.time()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert time.time() - started < 40  # not the notebook's 120 s
    assert "Traceback" not in err and "Traceback" not in out
    assert "interrupted" in out and "00_demo" in out
    assert sorted(p.name for p in old.iterdir()) == ["claims.json", "fig01_old.png"]  # nothing half-done published
    assert not list(figures.glob(".staging-*/00_demo"))


ASCII_GALLERY = textwrap.dedent("""
    import sys
    from sinklib.pipeline.gallery import build_gallery
    build_gallery(sys.argv[1])
    print("ok")
""")


def test_a_forced_ascii_locale_still_builds_the_gallery(tmp_path):
    """Item 7: with an ASCII locale the gallery crashed with UnicodeDecodeError on a caption."""
    figures = tmp_path / "figures"
    folder = figures / "00_demo"
    folder.mkdir(parents=True)
    (folder / "fig01_demo.png").write_bytes(b"\x89PNG")
    (folder / "fig01_demo.txt").write_text("alpha_0 = 0.5 \u2014 \u03b1 \u00d7 2", encoding="utf-8")
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}
    proc = subprocess.run([sys.executable, "-c", ASCII_GALLERY, str(figures)], capture_output=True, text=True,
                          env=env, cwd=ROOT)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-800:]
    assert "\u03b1" in (figures / "index.html").read_text(encoding="utf-8")
