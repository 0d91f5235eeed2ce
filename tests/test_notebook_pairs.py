"""Every notebook is stored without outputs, has a `parameters` cell, and matches its py:percent twin."""

import json
from pathlib import Path

import jupytext
import pytest
from papermill.translators import PythonTranslator

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
PARAMETERS = {"profile", "model", "device", "seed", "out_dir"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean_and_paired(path):
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert not any(c.get("outputs") or c.get("execution_count") for c in code), "strip outputs before committing"
    params = [c for c in code if "parameters" in c["metadata"].get("tags", [])]
    assert len(params) == 1 and params[0] is code[0], "the first code cell must be the only one tagged parameters"
    inferred = PythonTranslator.inspect({"source": "".join(params[0]["source"])})  # what papermill will see
    assert PARAMETERS <= {p.name for p in inferred}  # the five every notebook takes, plus its own
    twin = path.with_suffix(".py")
    assert twin.exists(), f"{twin.name} missing: run `make sync`"
    ours = [c.source for c in jupytext.read(path).cells]
    theirs = [c.source for c in jupytext.read(twin).cells]
    assert ours == theirs, f"{path.name} and {twin.name} differ: run `make sync`"


def test_there_is_a_tour():
    assert "00_tour" in [p.stem for p in NOTEBOOKS]
