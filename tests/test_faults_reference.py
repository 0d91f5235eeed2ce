"""The reference and verify, faulted (issue "faults, round two", item 5): a run with another seed is refused as the
reference and named first by verify; a truncated, empty, list-shaped or conflicted reference file is one line, and
``--force`` replaces it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults_publish import _claims_folder

from sinklib.core.errors import InputError
from sinklib.reproduction import verify

ROOT = Path(__file__).resolve().parents[1]


def _run(figures: Path, seed: int | None) -> Path:
    """A complete two-notebook CPU run whose runner recorded ``seed`` beside each notebook's figures."""
    _claims_folder(figures, "00_tour", "cpu", ["gu.a", "gu.b"])
    _claims_folder(figures, "10_llm", "cpu", ["gu.c"])
    for stem in ("00_tour", "10_llm"):
        (figures / stem / "takeaways.json").write_text(json.dumps({"notebook": stem, "seed": seed, "takeaways": []}))
    return figures


def test_a_run_with_another_seed_is_refused_as_the_reference_and_named_first_by_verify(tmp_path, capsys):
    reference = tmp_path / "reference.json"
    assert verify.verify(_run(tmp_path / "seed0", 0), reference, write=True) == 0
    written = reference.read_bytes()
    assert json.loads(written)["environment"]["notebook_seeds"] == {"00_tour": 0, "10_llm": 0}
    seed1 = _run(tmp_path / "seed1", 1)
    with pytest.raises(InputError, match="it ran with seed 1 \\(00_tour, 10_llm\\), the reference is made with seed 0"):
        verify.verify(seed1, reference, write=True)
    assert reference.read_bytes() == written
    capsys.readouterr()
    verify.verify(seed1, reference)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("FIRST: seeds differ: this run is seed 1 (00_tour, 10_llm), the reference seed 0 "
                            "(00_tour, 10_llm)") and "not the CPU's" in first


def test_a_run_without_recorded_seeds_is_compared_as_before(tmp_path, capsys):
    reference = tmp_path / "reference.json"
    assert verify.verify(_run(tmp_path / "a", 0), reference, write=True) == 0
    capsys.readouterr()
    assert verify.verify(_run(tmp_path / "b", None), reference) == 0
    assert "seeds differ" not in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["truncated", "empty", "list", "conflict"])
def test_a_damaged_reference_is_one_line_and_force_replaces_it(tmp_path, damage):
    figures = _run(tmp_path / "figures", 0)
    reference = tmp_path / "reference.json"
    verify.verify(figures, reference, write=True)
    good = reference.read_text()
    reference.write_text({"truncated": good[: len(good) // 2], "empty": "", "list": "[]",
                          "conflict": f"<<<<<<< HEAD\n{good}=======\n{good}>>>>>>> other\n"}[damage])
    for kwargs in ({}, {"write": True}):
        with pytest.raises(InputError) as err:
            verify.verify(figures, reference, **kwargs)
        assert "\n" not in str(err.value) and str(reference) in str(err.value) and "FORCE=1" in str(err.value)
    assert verify.verify(figures, reference, write=True, force=True) == 0
    assert verify.verify(figures, reference) == 0  # replaced, and reproduced by the run it was made from


def test_the_command_line_says_it_in_one_line(tmp_path):
    figures = _run(tmp_path / "figures", 0)
    reference = tmp_path / "reference.json"
    reference.write_text("[]")
    run = subprocess.run([sys.executable, "-m", "sinklib", "verify", "--figures-dir", str(figures), "--reference",
                          str(reference)], capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 2 and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
