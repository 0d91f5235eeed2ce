"""make verify: a run compared with the committed reference, claim by claim."""

from __future__ import annotations

import json

import pytest

from sinklib.pipeline import verify


def _claim(verdict="holds", values=None, draws=(True, True), kind="pretrained"):
    return {"verdict": verdict, "values": values if values is not None else {"natural": 0.74, "ppl.dense": 23.8},
            "draws": list(draws), "kind": kind, "model": "m", "profile": "cpu", "rel_tol": verify.tolerance(kind)}


def _run(**claims):
    return {"schema": 1, "environment": {"torch": "2.14.1"}, "claims": claims}


def test_flatten_keeps_every_number_with_its_path():
    assert verify.flatten({"a": 1, "b": {"c": [2.5, True, "x", None]}, "d": 3.0}) == {"a": 1.0, "b.c.0": 2.5, "d": 3.0}
    assert verify.flatten(0.5) == {"value": 0.5}


def test_the_same_run_reproduces():
    ref = _run(a=_claim(), b=_claim("does NOT hold"))
    text, ok = verify.report(ref, ref)
    assert ok and "reproduced: all 2 verdicts equal" in text


def test_another_verdict_is_reported_even_with_equal_values():
    ref, new = _run(a=_claim("holds")), _run(a=_claim("cannot be judged here"))
    diffs = verify.compare(new, ref)
    assert [d.what for d in diffs] == ["verdict"]
    text, ok = verify.report(new, ref)
    assert not ok and "VERDICT  00" not in text and "holds in the reference, cannot be judged here here" in text


def test_values_are_checked_against_the_stated_tolerance():
    ref = _run(a=_claim(values={"x": 100.0}))
    inside = _run(a=_claim(values={"x": 100.0 + 0.9e-2}))  # 9e-5 relative < 1e-4
    outside = _run(a=_claim(values={"x": 100.0 + 2e-2}))  # 2e-4 relative
    assert verify.compare(inside, ref) == []
    diffs = verify.compare(outside, ref)
    assert [d.what for d in diffs] == ["value"] and "100.02 vs 100" in diffs[0].detail
    trained = _run(a=_claim(values={"x": 100.0}, kind="trained here"))
    assert verify.compare(_run(a=_claim(values={"x": 104.0}, kind="trained here")), trained) == []  # 4% < 5%


def test_draw_outcomes_missing_and_new_claims_are_reported():
    ref = _run(a=_claim(draws=(True, True, True)), b=_claim())
    new = _run(a=_claim(draws=(True, False, True)), c=_claim())
    assert sorted(d.what for d in verify.compare(new, ref)) == ["draws", "missing", "new"]


def test_nan_equals_nan_and_inf_must_match():
    ref = _run(a=_claim(values={"x": float("nan"), "y": float("inf")}))
    assert verify.compare(_run(a=_claim(values={"x": float("nan"), "y": float("inf")})), ref) == []
    assert len(verify.compare(_run(a=_claim(values={"x": 1.0, "y": 1e300})), ref)) == 1


def test_write_then_verify_a_figures_folder(tmp_path, capsys):
    from sinklib.core.claims import Claim, Recorder

    folder = tmp_path / "figures" / "00_tour"

    def record(holds: bool) -> None:
        rec = Recorder("00_tour", "SmolLM2", "cpu")
        rec.add(Claim(id="x.rate", statement="s", source="Gu et al., arXiv 2410.10781", rule="r", published=0.9,
                      measured={"natural": 0.5}, holds=holds), show=False)
        rec.write(folder)

    record(True)
    ref = tmp_path / "ref.json"
    assert verify.verify(tmp_path / "figures", ref, write=True) == 0
    assert json.loads(ref.read_text())["claims"]["00_tour/x.rate [SmolLM2]"]["values"] == {"natural": 0.5}
    assert verify.verify(tmp_path / "figures", ref) == 0
    record(False)
    assert verify.verify(tmp_path / "figures", ref) == 1
    assert "VERDICT" in capsys.readouterr().out


def test_no_claims_is_a_one_line_error(tmp_path):
    from sinklib.core.errors import InputError

    with pytest.raises(InputError, match="make figures"):
        verify.verify(tmp_path, tmp_path / "ref.json")
