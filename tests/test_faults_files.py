"""One bad file never sinks a run (issue "faults, round two", item 2): a notebook that is not JSON (a merge conflict,
a truncated file) is one warning and one FAILED row while the others run and publish; a ``claims.json`` that is a
folder is one warning in the gallery and the scorecard; a ``.py`` twin edited after its ``.ipynb`` is named."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from helpers import write_notebook

from sinklib.pipeline import gallery, runner
from sinklib.reproduction import scorecard

FIGURE = ("from pathlib import Path\n"
          "(Path(out_dir) / 'fig01_new.png').write_bytes(b'new figure ' * 200)\n"
          "(Path(out_dir) / 'fig01_new.txt').write_text('new caption')")


def _books(tmp_path: Path) -> Path:
    books = tmp_path / "notebooks"
    books.mkdir()
    write_notebook(books / "00_demo.ipynb", FIGURE)
    good = (books / "00_demo.ipynb").read_text()
    (books / "01_conflict.ipynb").write_text(f"<<<<<<< HEAD\n{good}=======\n{good}>>>>>>> theirs\n")
    (books / "02_truncated.ipynb").write_text(good[: len(good) // 2])
    return books


@pytest.mark.notebook
def test_a_notebook_that_is_not_json_is_one_failed_row_and_the_others_run(tmp_path, capsys):
    books = _books(tmp_path)
    status = runner.run_all(profile="smoke", figures_dir=tmp_path / "figures", build_dir=tmp_path / "build",
                            notebook_dir=books, jobs=1)
    out = capsys.readouterr().out
    assert status == 1 and "Traceback" not in out
    assert sorted(p.name for p in (tmp_path / "figures" / "00_demo").glob("fig01_*")) == ["fig01_new.png",
                                                                                          "fig01_new.txt"]
    for stem in ("01_conflict", "02_truncated"):
        warning = [line for line in out.splitlines() if line.startswith("warning:") and stem in line]
        assert len(warning) == 1 and "is not a readable notebook" in warning[0] and "git checkout" in warning[0]
        row = [line for line in out.splitlines() if line.startswith(stem)]
        assert row and "FAILED" in row[0], out
    assert "gallery: " in out.splitlines()[-1]


def test_a_twin_edited_after_its_notebook_is_named(tmp_path, capsys):
    import jupytext

    books = tmp_path / "notebooks"
    books.mkdir()
    write_notebook(books / "00_demo.ipynb", FIGURE)
    twin = books / "00_demo.py"
    jupytext.write(jupytext.read(books / "00_demo.ipynb"), twin, fmt="py:percent")
    later = time.time() + 10
    os.utime(twin, (later, later))
    assert runner.unreadable_notebooks([books / "00_demo.ipynb"]) == {}
    assert capsys.readouterr().out == ""  # newer, but the same cells: nothing to say
    twin.write_text(twin.read_text() + "\n# %%\nprint('an edit')\n")
    os.utime(twin, (later, later))
    runner.unreadable_notebooks([books / "00_demo.ipynb"])
    out = capsys.readouterr().out
    assert out.startswith("warning: 00_demo.py was edited after 00_demo.ipynb") and "jupytext --sync" in out


def test_a_claims_json_that_is_a_folder_is_one_warning(tmp_path, capsys):
    folder = tmp_path / "figures" / "00_tour"
    (folder / "claims.json").mkdir(parents=True)
    (folder / "fig01_demo.png").write_bytes(b"\x89PNG")
    (folder / "headline.json").write_text("[1, 2]")  # not an object: shown without it
    assert scorecard.collect(tmp_path / "figures") == []
    err = capsys.readouterr().err
    assert "claims.json: not a claims file" in err and "left out of the scorecard" in err and "Traceback" not in err
    page = gallery.build_gallery(tmp_path / "figures").read_text(encoding="utf-8")
    assert "not a claims file" in page
