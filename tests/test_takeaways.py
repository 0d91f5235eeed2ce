"""Takeaways rendered from the run, claims judged over draws and against random weights: the shared machinery."""

import json
from pathlib import Path

import pytest
import torch

from sinklib.core import claims, takeaways
from sinklib.core.claims import Claim

ROOT = Path(__file__).resolve().parents[1]


def _claim(holds, measured=1.0, **kw):
    return Claim(id="x.y", statement="s", source="p", rule="r", published=None, measured=measured, holds=holds, **kw)


def test_number_words():
    assert takeaways.num(22406.3) == "22,406" and takeaways.num(0.14336) == "0.143" and takeaways.num(3.0) == "3"
    assert takeaways.num(float("nan")) == "n/a" and takeaways.pct(0.0213) == "2.1%"
    assert takeaways.span([0.35, 0.32]) == "0.320-0.350" and takeaways.span([0.5]) == "0.500"
    assert takeaways.compare(2.0, 1.0) == "higher than" and takeaways.compare(1.0, 2.0) == "lower than"
    assert takeaways.compare(1.01, 1.0, rel_tol=0.05) == "the same as"


def test_over_draws_holds_only_when_every_draw_agrees():
    assert claims.over_draws([_claim(True, 1.0), _claim(True, 2.0), _claim(True, 3.0)], "3 seeds").holds is True
    failed = claims.over_draws([_claim(False), _claim(False), _claim(False)], "3 seeds")
    assert failed.holds is False and failed.draws == (False, False, False)
    mixed = claims.over_draws([_claim(True, 1.0), _claim(False, 5.0), _claim(True, 2.0)], "3 seeds of random tokens")
    assert mixed.holds is None and mixed.note.startswith("unsettled: 2 of 3 draws hold (3 seeds of random tokens)")
    assert mixed.spread == {"min": 1.0, "max": 5.0, "values": [1.0, 5.0, 2.0]} and mixed.measured == 1.0
    with pytest.raises(ValueError, match="different claims"):
        claims.over_draws([_claim(True), Claim("a.b", "s", "p", "r", None, 1.0, True)], "x")


def test_control_is_recorded_and_a_contradiction_is_flagged(tmp_path, capsys):
    rec = claims.Recorder("00_tour", "SmolLM2-135M", "cpu")
    learned = _claim(True, at_init=False, follows="Eq. 1")
    c = rec.add(learned, control=_claim(False, 0.1))
    assert c.control is False and c.control_measured == 0.1 and not c.control_contradicts
    assert "Random-weight control: fails (paper at init: fails)" in capsys.readouterr().out
    bad = rec.add(learned, control=_claim(True), model="other")
    assert bad.control_contradicts and "WARNING: x.y holds on random weights" in capsys.readouterr().out
    with pytest.raises(ValueError, match="not a control"):
        claims.with_control(learned, Claim("a.b", "s", "p", "r", None, 1.0, True))
    path = rec.write(tmp_path)
    assert claims.load(path) == rec.claims  # tuples survive JSON
    assert [x.measured_on for x in rec.claims] == ["pretrained", "pretrained"]
    assert claims.measured_on("SmolLM2 (random weights, seed 0)") == "random weights"
    assert claims.measured_on("SmolLM2-MoE (upcycled stand-in)") == "stand-in"


def test_verdict_words_carry_draws_and_control():
    c = claims.with_control(claims.over_draws([_claim(True), _claim(True), _claim(True)], "3 seeds"), _claim(False))
    assert takeaways.verdict(c) == "holds (3 of 3 draws hold over 3 seeds; on random weights it fails)"
    assert takeaways.verdict(_claim(None, note="no outliers; small model")) == "cannot be judged here (no outliers)"
    assert claims.draw_summary((None,)) == "not judged in 1 draw"
    assert claims.draw_summary((None, None, None)) == "not judged in 3 draws"
    assert claims.with_control(_claim(True), None, "control not run: too slow").control_note == "control not run: too slow"
    mixed = claims.over_draws([_claim(True), _claim(False), _claim(True)], "3 seeds")
    assert takeaways.verdict(mixed) == "is unsettled: 2 of 3 draws hold (3 seeds)"
    assert takeaways.paragraph("stand-in", "A.", "", "B.") == "**What we saw (stand-in).** A. B."


def test_audit_finds_hand_typed_numbers_and_counts_rendered_takeaways():
    planted = {"cells": [
        {"cell_type": "markdown", "source": ["**What we saw.** alpha_0 falls to 0.143 at 2,048 tokens."]},
        {"cell_type": "markdown", "source": ["**What we saw, read on.** Why the sink forms: see above."]},
        {"cell_type": "code", "source": "show(...)", "outputs": [
            {"output_type": "display_data", "data": {"text/markdown": "**What we saw (x).** 0.143"}}]},
    ]}
    problems, rendered = takeaways.audit(planted)
    assert problems == ["hand-typed number in: **What we saw.** alpha_0 falls to 0.143 at 2,048 tokens."]
    assert rendered == 1


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")), ids=lambda p: p.stem)
def test_no_notebook_types_a_measured_number_into_what_we_saw(path):
    problems, _ = takeaways.audit(json.loads(path.read_text()))
    assert not problems, problems


def test_random_weights_keep_the_configuration_and_change_the_weights():
    from sinklib.models.load import load_model
    from sinklib.models.random_init import random_weights

    lm = load_model("tiny-llama-random", device="cpu", dtype="float32", seed=3)
    a, b, c = random_weights(lm, 0), random_weights(lm, 0), random_weights(lm, 1)
    assert a.label.endswith("(random weights, seed 0)") and a.n_layers == lm.n_layers and a.model is not lm.model
    same = lambda x, y: ({**x.model.config.to_dict(), "dtype": 0} == {**y.model.config.to_dict(), "dtype": 0})  # noqa: E731
    assert same(a, lm)
    wa, wb, wc = (x.model.model.layers[0].mlp.down_proj.weight for x in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)
    assert not torch.equal(wa, lm.model.model.layers[0].mlp.down_proj.weight)
    vit = load_model("tiny-vit-random", device="cpu", dtype="float32", seed=3)
    assert same(random_weights(vit, 0), vit)
