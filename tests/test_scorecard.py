"""The scorecard: claims gathered from every notebook's claims.json, counted per paper, numeric pairs, the CLI."""

from __future__ import annotations

import json

from sinklib.core.claims import Claim, Recorder
from sinklib.pipeline import scorecard
from sinklib.pipeline.cli import main


def _write(folder, notebook, model, claims):
    rec = Recorder(notebook, model, "smoke")
    for c in claims:
        rec.add(c, show=False)
    rec.write(folder / notebook)


def _claim(cid, source, holds, published=None, measured=None, **kw):
    return Claim(id=cid, statement=f"statement {cid}", source=source, rule="a rule", published=published,
                 measured=measured, holds=holds, **kw)


def _figures(tmp_path):
    _write(tmp_path, "00_a", "SmolLM2-135M-Instruct", [
        _claim("a.one", "Xiao et al., arXiv 2309.17453, Table 2", True, {"ppl": 5.4, "layer": 2}, {"ppl": 34.5, "layer": 3},
               follows="Table 2; mit-han-lab/streaming-llm:streaming_llm/kv_cache.py:StartRecentKVCache",
               at_init=False, control=False, draws=(True, True, True), draws_of="3 seeds"),
        _claim("a.two", "Xiao et al., arXiv 2309.17453", False, 0.5, 0.1)])
    _write(tmp_path, "11_b", "SmolLM2-MoE (upcycled stand-in, not a trained MoE)", [
        _claim("b.one", "Some workshop paper, Fig. 1", None, note="needs a large model", needs_gpu=True)])
    return tmp_path


def test_collect_keeps_every_claim_with_its_verdict_kind_and_paper(tmp_path):
    rows = scorecard.collect(_figures(tmp_path))
    assert [r.id for r in rows] == ["a.one", "a.two", "b.one"]
    assert [r.verdict for r in rows] == ["holds", "does NOT hold", "cannot be judged here"]
    assert rows[0].paper == "Xiao et al., StreamingLLM (2309.17453)" and rows[2].paper == "Some workshop paper"
    assert [r.kind for r in rows] == ["pretrained", "pretrained", "stand-in"]
    assert rows[2].needs_gpu and rows[2].reason == "needs a large model"


def test_by_paper_counts_and_numeric_pairs(tmp_path):
    rows = scorecard.collect(_figures(tmp_path))
    papers = {e["paper"]: e for e in scorecard.by_paper(rows)}
    assert papers["Xiao et al., StreamingLLM (2309.17453)"] == {
        "paper": "Xiao et al., StreamingLLM (2309.17453)", "tested": 2, "holds": 1, "does NOT hold": 1,
        "cannot be judged here": 0, "distinct": 2}
    pairs = scorecard.numeric_pairs(rows)  # "layer" names which one, not how much: left out
    assert [(p["id"], p["key"], p["published"], p["measured"], p["quantity"]) for p in pairs] == [
        ("a.one", "ppl", 5.4, 34.5, "perplexity"), ("a.two", "", 0.5, 0.1, "other")]
    split = scorecard.by_paper_and_kind(rows)
    assert [(e["paper"][:5], e["kind"], e["tested"]) for e in split] == [("Xiao ", "pretrained", 2),
                                                                        ("Some ", "stand-in", 1)]
    assert scorecard.base_id("origin.lock_in.gemma3-270m") == "origin.lock_in"
    assert scorecard.base_id("origin.headwise_rmsnorm_converges_faster.bible") == \
        "origin.headwise_rmsnorm_converges_faster.bible"


def test_cli_scorecard_json_lists_every_claim(tmp_path, capsys):
    assert main(["scorecard", "--json", "--figures-dir", str(_figures(tmp_path))]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in out["claims"]] == ["a.one", "a.two", "b.one"]
    assert out["counts"] == {"holds": 1, "does NOT hold": 1, "cannot be judged here": 1}
    first = out["claims"][0]  # the record behind the verdict travels with it
    assert first["follows"].startswith("Table 2; mit-han-lab/streaming-llm") and first["at_init"] is False
    assert first["control"] is False and first["draws"]["n"] == 3 and first["draws"]["outcomes"] == [True] * 3
    assert out["claims"][1]["draws"]["n"] == 1  # judged once: still recorded as one evaluation
    assert out["controls_contradicting"] == []
    assert main(["scorecard", "--figures-dir", str(tmp_path / "empty")]) == 1  # nothing to show: says so
    assert "run `make figures` first" in capsys.readouterr().out


def test_table_shows_draws_and_control_and_flags_a_contradiction(tmp_path):
    _write(tmp_path, "02_c", "SmolLM2-135M-Instruct", [
        _claim("c.noise", "Sun et al., arXiv 2402.17762", True, at_init=False, control=True,
               draws=(True, False, True), draws_of="3 seeds")])
    rows = scorecard.collect(tmp_path)
    text = scorecard.format_table(rows)
    assert "unsettled: 2 of 3 draws hold" in text and "holds (paper: fails) -- CONTRADICTS the paper" in text
    assert scorecard.to_json(rows)["controls_contradicting"] == ["c.noise (SmolLM2-135M-Instruct)"]


def test_an_old_schema_claims_file_is_left_out_with_a_warning_not_a_crash(tmp_path, capsys):
    root = _figures(tmp_path)
    (root / "03_old").mkdir()
    (root / "03_old" / "claims.json").write_text(json.dumps({"schema": 1, "notebook": "03_old", "claims": []}))
    rows = scorecard.collect(root)
    assert [r.notebook for r in rows] == ["00_a", "00_a", "11_b"]
    assert "make figures NOTEBOOKS=03" in capsys.readouterr().err
