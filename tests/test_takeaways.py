"""Takeaways rendered from the run, claims judged over draws and against random weights: the shared machinery."""

import json
from pathlib import Path

import pytest
import torch

from sinklib.core import claims, claims_file, takeaways
from sinklib.core.claims import Claim

ROOT = Path(__file__).resolve().parents[1]


def _claim(holds, measured=1.0, **kw):
    kw.setdefault("follows", "Eq. 1")
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
    rec = claims_file.Recorder("00_tour", "SmolLM2-135M", "cpu")
    learned = _claim(True, at_init=False)
    c = rec.add(learned, control=_claim(False, 0.1))
    assert c.control is False and c.control_measured == 0.1 and not c.control_contradicts
    assert "Random-weight control: fails (paper at init: fails)" in capsys.readouterr().out
    bad = rec.add(learned, control=_claim(True), model="other")
    assert bad.control_contradicts and "WARNING: x.y holds on random weights" in capsys.readouterr().out
    with pytest.raises(ValueError, match="not a control"):
        claims.with_control(learned, Claim("a.b", "s", "p", "r", None, 1.0, True))
    path = rec.write(tmp_path)
    assert claims_file.load(path) == rec.claims  # tuples survive JSON
    assert [x.measured_on for x in rec.claims] == ["pretrained", "pretrained"]
    assert claims.measured_on("SmolLM2 (random weights, seed 0)") == "random weights"
    assert claims.measured_on("SmolLM2-MoE (upcycled stand-in)") == "stand-in"


def test_verdict_words_carry_draws_and_control():
    c = claims.with_control(claims.over_draws([_claim(True), _claim(True), _claim(True)], "3 seeds"), _claim(False))
    assert takeaways.verdict(c) == "holds (3 of 3 draws hold over 3 seeds; on random weights it fails)"
    assert takeaways.verdict(_claim(None, note="no outliers; small model")) == "cannot be judged here (no outliers)"
    assert claims.draw_summary((None,)) == "no draw can be judged (1 draw)"
    assert claims.draw_summary((None, None, None)) == "no draw can be judged (3 draws)"
    assert claims.with_control(_claim(True), None, "control not run: too slow").control_note == "control not run: too slow"
    mixed = claims.over_draws([_claim(True), _claim(False), _claim(True)], "3 seeds")
    assert takeaways.verdict(mixed) == "is unsettled (2 of 3 draws hold (3 seeds))"
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


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py")), ids=lambda p: p.stem)
def test_each_notebook_writes_its_takeaways_in_its_own_cells_with_the_runs_numbers(path):
    """A notebook's conclusions are written in the notebook: its takeaways are say(...) calls in its cells, every
    number in them formatted from the run's values (no digit typed into one but a citation), and no package module
    writes the prose for it."""
    source = path.read_text(encoding="utf-8")
    assert takeaways.typed_numbers(source) == []
    assert "takeaways as saw" not in source and ".takeaways import show" not in source
    if path.stem != "90_scorecard":  # the scorecard shows tables, not takeaways
        assert "say(" in source


def test_typed_numbers_finds_digits_typed_into_a_takeaway_and_allows_citations():
    source = ('say(f"{model}, {num(n)} windows", f"The rate is {pct(rate)}, above the 0.3 cut (Table 1, 7B); "'
              '"alpha_0 and kang2025.visual_sinks_exist are names", f"{num(0.5)} and {3}")')
    problems = takeaways.typed_numbers(source)
    assert len(problems) == 3 and "['0.3']" in problems[0]
    assert "num(0.5)" in problems[1] + problems[2] and "literal 3" in problems[1] + problems[2]
    assert takeaways.listing(["a", "b", "c"]) == "a, b and c" and takeaways.listing(["a"]) == "a"


def test_a_takeaway_names_the_figures_saved_before_it():
    nb = {"cells": [{"cell_type": "markdown", "source": "## 1 · First"},
                    {"cell_type": "code", "source": 'plotting.save(fig, fig_dir / "fig01_a", "c")', "outputs": []},
                    {"cell_type": "code", "source": "say(...)", "outputs": [
                        {"data": {"text/markdown": "**What we saw (M, one window).** x"}}]},
                    {"cell_type": "code", "source": 'plotting.save(fig, fig_dir / "fig02_b", "c")\nsay(...)',
                     "outputs": [{"data": {"text/markdown": "**What we saw (M, two windows).** y"}}]},
                    {"cell_type": "code", "source": "say(...)", "outputs": [
                        {"data": {"text/markdown": "**What we saw (M, three windows).** z"}}]}]}
    kept = takeaways.collect(nb)
    assert [t["figures"] for t in kept] == [["fig01_a"], ["fig02_b"], []]
    assert [t["section"] for t in kept] == ["1 · First"] * 3


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


def test_draws_that_cannot_be_judged_are_reported_beside_not_counted_as_disagreement():
    """Issue 42 (2): a draw that cannot be judged is not a disagreement. 12's masking claim: the stand-in without
    visual sinks cannot be judged, the one with sinks contradicts the paper -- the claim does not hold."""
    masking = claims.over_draws([_claim(None, note="no visual sink to hide"), _claim(False, 0.133)], "2 stand-ins")
    assert masking.holds is False and not masking.unsettled and masking.verdict() == "does NOT hold"
    assert masking.draws == (None, False)
    assert masking.note.startswith("0 of 1 judgeable draw hold (1 of 2 cannot be judged) (2 stand-ins)")
    assert "no visual sink to hide" in masking.note
    held = claims.over_draws([_claim(True), _claim(None), _claim(True)], "3 seeds")
    assert held.holds is True and held.verdict() == "holds"
    split = claims.over_draws([_claim(True), _claim(None), _claim(False)], "3 seeds")
    assert split.holds is None and split.unsettled and split.verdict() == "unsettled"
    nothing = claims.over_draws([_claim(None, note="no outliers"), _claim(None)], "2 seeds")
    assert nothing.holds is None and not nothing.unsettled and nothing.verdict() == "cannot be judged here"
    # a draw that is itself unsettled (a value within its margin of the cut) makes the claim unsettled
    near = claims.over_draws([_claim(True), _claim(None, unsettled=True)], "2 seeds")
    assert near.verdict() == "unsettled"


def test_a_value_within_its_margin_of_the_cut_is_unsettled():
    assert claims.against_cut(0.5, 0.3, 0.05) == (True, False, {"value": 0.5, "cut": 0.3, "spread": 0.05})
    assert claims.against_cut(0.2, 0.3, 0.05)[:2] == (False, False)
    assert claims.against_cut(0.2, 0.3, 0.05, above=False)[:2] == (True, False)
    assert claims.against_cut(0.009, 0.01, 0.005)[:2] == (None, True)  # 03's softpick slope on another machine
    assert claims.against_cut(float("nan"), 0.3, 0.05)[:2] == (None, False)
    c = _claim(None, unsettled=True, margin=claims.against_cut(0.009, 0.01, 0.005)[2])
    assert c.verdict() == "unsettled" and takeaways.verdict(c) == "is unsettled (0.00900 is within 0.00500 of the cut 0.0100)"


def test_a_claim_that_cannot_be_judged_is_never_rendered_as_holding():
    """Issue 42 (3): 11_moe's super-expert claim is recorded as cannot be judged (a stand-in's super expert exists by
    construction) with three draws that hold: the takeaway states the reason, not "3 of 3 draws hold"."""
    c = _claim(None, note="a stand-in's super expert exists by construction; see 11", draws=(True, True, True),
               draws_of="3 stand-ins")
    text = takeaways.verdict(c)
    assert text == "cannot be judged here (a stand-in's super expert exists by construction)"
    assert "draws hold" not in text and "holds" not in text
    assert takeaways.verdict(_claim(None)) == "cannot be judged here"


def test_a_control_that_contradicts_the_paper_is_not_counted_as_holding():
    """Issue 42 (4): a rule that holds on random weights where the paper says training makes the effect cannot
    tell training from noise, whatever its control_note."""
    c = claims.with_control(_claim(True, at_init=False), _claim(True, 0.9), "kept: the paper's own threshold")
    assert c.holds is True and c.control_contradicts
    counted = c.without_noise()
    assert counted.holds is None and counted.verdict() == "cannot be judged here"
    assert counted.note.startswith("holds on random weights too: this rule cannot tell training from noise")
    assert "kept: the paper's own threshold" in counted.note
    fine = claims.with_control(_claim(True, at_init=False), _claim(False, 0.1))
    assert fine.without_noise() is fine


def test_recorder_refuses_a_claim_the_scorecard_could_not_trust():
    """Issue 42 (6): no ``follows``, or ``at_init`` with neither a control nor a note, is refused at run time."""
    rec = claims_file.Recorder("00_tour", "m", "cpu")
    with pytest.raises(ValueError, match="has no `follows`"):
        rec.add(_claim(True, follows=""))
    with pytest.raises(ValueError, match="no random-weight control and no control_note"):
        rec.add(_claim(True, at_init=False))
    rec.add(_claim(True, at_init=False), control_note="no control: the paper's model is not offline", show=False)
    rec.add(_claim(True, at_init=False), control=_claim(False), model="other", show=False)
    with pytest.raises(ValueError, match="marked unsettled"):
        rec.add(_claim(True, unsettled=True), model="third")


def test_a_record_names_a_paper_by_its_arxiv_id_or_says_it_is_no_papers_claim():
    """Issue 43 (10): ``paper`` is an arXiv id, or an implementation check / this project's own question (which the
    scorecard keeps out of the papers' counts); anything else is refused."""
    rec = claims_file.Recorder("00_tour", "m", "cpu")
    rec.add(_claim(True, paper="2309.17453"), show=False)
    rec.add(_claim(True, paper=claims.IMPLEMENTATION_CHECK), model="b", show=False)
    rec.add(_claim(True, paper=claims.OWN_QUESTION), model="c", show=False)
    with pytest.raises(ValueError, match="give an arXiv id"):
        rec.add(_claim(True, paper="Xiao et al."), model="d")


def test_a_number_in_a_takeaway_carries_its_measurement_size():
    measured = takeaways.paragraph("SmolLM2-135M, 16 held-out windows of 256 tokens", "Perplexity 31.4.")
    assert takeaways.measurement_size(measured) == "16 held-out windows"
    assert not takeaways.unmeasured(measured)
    assert takeaways.measurement_size(takeaways.paragraph("one 24-token window", "x")) == "one 24-token window"
    assert takeaways.measurement_size(takeaways.paragraph("softmax baseline, 2 seeds", "x")) == "2 seeds"
    bare = takeaways.paragraph("SmolLM2-135M (4-bit GGUF, dequantised)", "The sink keeps 66 % of the mass.")
    assert takeaways.heading_of(bare) == "SmolLM2-135M (4-bit GGUF, dequantised)"
    assert takeaways.measurement_size(bare) is None and takeaways.unmeasured(bare)  # "4-bit" is not a size
    assert not takeaways.unmeasured(takeaways.paragraph("lock-in", "No number here."))
    assert takeaways.unmeasured(takeaways.paragraph("", "A bare 0.5."))


def test_takeaway_sections_are_unique_and_consecutive():
    assert takeaways.section_problems(["1 · A", "2 · B", "3b · where", "Scorecard", "3 · C"]) == []
    assert takeaways.section_problems(["0 · control", "1 · A"]) == []
    assert takeaways.section_problems(["1 · A", "1 · A", "2 · B"]) == ["section 1 carries 2 takeaways"]
    assert takeaways.section_problems(["1 · A", "2 · B", "4 · D"]) == ["sections jump from 2 to 4"]
    assert takeaways.section_problems(["2 · B"]) == ["the first numbered section is 2, not 0 or 1"]


def test_which_models_names_them_or_counts_all_or_none():
    assert takeaways.which_models([], 3) == "none of the models"
    assert takeaways.which_models(["SmolLM2", "Qwen", "Gemma"], 3) == "all three models"
    assert takeaways.which_models(["a", "b"], 2) == "all two models"
    assert takeaways.which_models(list("abcd"), 4) == "all 4 models"
    assert takeaways.which_models(["SmolLM2", "Qwen"], 3) == "SmolLM2 and Qwen"
    assert takeaways.which_models(["Qwen"], 1) == "Qwen"  # one of one is named, not "all one models"


@pytest.mark.parametrize("bounds, side", [((0.75, 0.82), "above"), ((0.1, 0.2), "below"), ((0.2, 0.4), "across")])
def test_against_cut_says_which_side_the_whole_interval_lies_on(bounds, side):
    text = takeaways.against_cut(0.79, bounds, 0.3, 0.95, unit="x")
    assert text == f"0.790x (95% interval {takeaways.num(bounds[0])}-{takeaways.num(bounds[1])}x, {side} the 0.300x cut)"
    assert takeaways.against_cut(0.5, bounds, 0.3, 0.9, fmt=takeaways.pct).startswith("50% (90% interval")
