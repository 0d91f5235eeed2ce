"""Smoke runs: every notebook executed by papermill with the smoke profile, then its headline JSON checked."""

import json
from pathlib import Path

import pytest

from sinklib import runner

pytestmark = pytest.mark.notebook
NOTEBOOKS = runner.discover()


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """Run every notebook once (smoke profile); map stem -> (result, figures folder)."""
    root = tmp_path_factory.mktemp("smoke")
    out = {}
    for path in NOTEBOOKS:
        res = runner.run_notebook(path, profile="smoke", model="", device="", seed=0,
                                  figures_dir=root / "figures", build_dir=root / "build")
        out[path.stem] = (res, root / "figures" / path.stem)
    return out


@pytest.mark.parametrize("stem", [p.stem for p in NOTEBOOKS])
def test_notebook_runs_and_writes_figures(executed, stem):
    res, folder = executed[stem]
    assert res.ok, res.message
    pngs = list(folder.glob("*.png"))
    assert pngs and all(p.with_suffix(".txt").exists() and p.with_suffix(".pdf").exists() for p in pngs)
    assert json.loads((folder / "headline.json").read_text())["profile"] == "smoke"


def test_tour_headline_numbers(executed):
    res, folder = executed["00_tour"]
    assert res.ok, res.message
    h = json.loads((folder / "headline.json").read_text())
    rates = h["sink_rate"]
    assert set(rates) == {"natural", "random", "repeated"} and all(0 <= v <= 1 for v in rates.values())
    assert rates["natural"] > 0.5 and rates["random"] > 0.5 and rates["repeated"] < 0.05  # SmolLM2's shape
    assert h["llama_family_shape_holds"] is True
    assert all(len(v) == 30 for v in h["alpha_first_by_layer"].values())
    assert h["massive"]["dim"] == 507 and h["massive"]["position"] == 0 and h["massive"]["value"] > 1000
    assert h["dom_ratio_first_peak"] > 4 * h["dom_ratio_rest_at_peak"]
    assert {p.stem for p in Path(folder).glob("*.png")} == {
        "fig01_attention-maps", "fig02_alpha-heatmap", "fig03_sink-rates", "fig04_alpha-by-layer",
        "fig05_massive-activations", "fig06_dom-ratio"}
