"""The scorecard: claims gathered from every notebook's claims.json, counted per paper, numeric pairs, the CLI."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest

from sinklib.core import quantities as q
from sinklib.core.claims import Claim
from sinklib.core.claims_file import Recorder
from sinklib.pipeline.cli import main
from sinklib.reproduction import scorecard, scorecard_plots


def _write(folder, notebook, model, claims):
    rec = Recorder(notebook, model, "smoke")
    for c in claims:
        rec.add(c, show=False)
    rec.write(folder / notebook)


def _claim(cid, source, holds, published=None, measured=None, **kw):
    kw.setdefault("follows", "Table 1")
    return Claim(id=cid, statement=f"statement {cid}", source=source, rule="a rule", published=published,
                 measured=measured, holds=holds, **kw)


def _figures(tmp_path):
    _write(tmp_path, "00_a", "SmolLM2-135M-Instruct", [
        _claim("a.one", "Xiao et al., arXiv 2309.17453, Table 2", True, {"ppl": 5.4, "layer": 2}, {"ppl": 34.5, "layer": 3},
               follows="Table 2; mit-han-lab/streaming-llm:streaming_llm/kv_cache.py:StartRecentKVCache",
               at_init=False, control=False, draws=(True, True, True), draws_of="3 seeds",
               quantities={"ppl": q.loss("ppl"), "layer": q.identity("layer")}),
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


def test_by_paper_counts(tmp_path):
    rows = scorecard.collect(_figures(tmp_path))
    papers = {e["paper"]: e for e in scorecard.by_paper(rows)}
    assert papers["Xiao et al., StreamingLLM (2309.17453)"] == {
        "paper": "Xiao et al., StreamingLLM (2309.17453)", "tested": 2, "holds": 1, "does NOT hold": 1,
        "unsettled": 0, "cannot be judged here": 0, "distinct": 2}
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
    assert out["counts"] == {"holds": 1, "does NOT hold": 1, "unsettled": 0, "cannot be judged here": 1}
    first = out["claims"][0]  # the record behind the verdict travels with it
    assert first["follows"].startswith("Table 2; mit-han-lab/streaming-llm") and first["at_init"] is False
    assert first["control"] is False and first["draws"]["n"] == 3 and first["draws"]["outcomes"] == [True] * 3
    assert out["claims"][1]["draws"]["n"] == 1  # judged once: still recorded as one evaluation
    assert out["controls_contradicting"] == []
    assert main(["scorecard", "--figures-dir", str(tmp_path / "empty")]) == 1  # nothing to show: says so
    assert "run `make figures` first" in capsys.readouterr().out


def test_table_shows_draws_and_control_and_flags_a_contradiction(tmp_path):
    _write(tmp_path, "02_c", "SmolLM2-135M-Instruct", [
        _claim("c.noise", "Sun et al., arXiv 2402.17762", None, at_init=False, control=True,
               draws=(True, False, True), draws_of="3 seeds", unsettled=True, control_note="kept: see the note")])
    rows = scorecard.collect(tmp_path)
    text = scorecard.format_table(rows)
    assert "unsettled: 2 of 3 draws hold" in text and "random-weight control: holds; paper: made by training -- CONTRADICTS the paper" in text
    assert scorecard.to_json(rows)["controls_contradicting"] == ["c.noise (SmolLM2-135M-Instruct)"]
    assert rows[0].verdict == "unsettled" and scorecard.to_json(rows)["unsettled"] == ["c.noise (SmolLM2-135M-Instruct)"]
    assert "4 draws" not in text and "1 distinct claims (1 records" in text


def test_a_control_that_contradicts_the_paper_is_not_counted_as_holding(tmp_path):
    """Issue 42 (4): Darcet et al.'s outliers hold on DINOv2-S *and* on random weights; the control_note explains
    why the record is kept, but the scorecard must not count it as the paper's one "holds"."""
    _write(tmp_path, "13_vit", "DINOv2-S/14", [
        _claim("darcet2023.outliers_only_in_large_models", "Darcet et al., arXiv 2309.16588", True, at_init=False,
               control=True, control_note="the rule is the paper's; a small ViT's outliers are noise-like")])
    rows = scorecard.collect(tmp_path)
    assert rows[0].verdict == "cannot be judged here"
    assert rows[0].reason.startswith("holds on random weights too: this rule cannot tell training from noise")
    summary = scorecard.to_json(rows)
    assert summary["counts"]["holds"] == 0 and summary["counts"]["cannot be judged here"] == 1
    assert scorecard.by_paper(rows)[0]["holds"] == 0


def test_each_record_carries_its_own_paper(tmp_path):
    """Issue 42 (7): 03's shared source string names Qiu et al. first; a record's ``paper`` wins."""
    shared = "Qiu et al., arXiv 2505.06708; structural origin, arXiv 2605.06611; Softpick, arXiv 2504.20966"
    _write(tmp_path, "03_mitigation", "TinyLM trained here", [
        _claim("mitigation.headwise_rmsnorm_removes_sink", shared, False, paper="2605.06611"),
        _claim("mitigation.softpick_removes_sink", shared, True, paper="2504.20966"),
        _claim("mitigation.gated_headwise_removes_sink", shared, True)])
    papers = [r.paper for r in scorecard.collect(tmp_path)]
    assert papers == ["Structural origin of sinks (ICML 2026) (2605.06611)", "Softpick (2504.20966)",
                      "Qiu et al., Gated attention (2505.06708)"]
    assert {e["paper"] for e in scorecard.by_paper(scorecard.collect(tmp_path))} == set(papers)


def test_a_claim_judged_on_the_same_model_in_two_notebooks_counts_once(tmp_path):
    """Issue 42 (8): 00's sink shape on SmolLM2 is judged again in 10 (with the model in its id)."""
    smol = "SmolLM2-135M-Instruct (4-bit GGUF, dequantised)"
    _write(tmp_path, "00_tour", smol, [_claim("gu2024.llama_family_input_shape", "Gu et al., arXiv 2410.10781", True)])
    _write(tmp_path, "02_interpretation", smol, [_claim("origin.lock_in", "arXiv 2605.06611", True)])
    rec = Recorder("10_llm", smol, "smoke")
    rec.add(_claim("gu2024.llama_family_input_shape.smollm2-135m", "Gu et al., arXiv 2410.10781", True), show=False)
    rec.add(_claim("gu2024.llama_family_input_shape.qwen2.5-coder-0.5b", "Gu et al., arXiv 2410.10781", True),
            model="Qwen2.5-Coder-0.5B", show=False)
    rec.add(_claim("origin.lock_in.smollm2-135m", "arXiv 2605.06611", False), show=False)
    rec.write(tmp_path / "10_llm")
    rows = scorecard.collect(tmp_path)
    assert len(rows) == 5
    kept = scorecard.distinct(rows)
    assert [(r.notebook, r.id, r.also_in) for r in kept] == [
        ("00_tour", "gu2024.llama_family_input_shape", ("10_llm",)),
        ("02_interpretation", "origin.lock_in", ("10_llm (does NOT hold there)",)),
        ("10_llm", "gu2024.llama_family_input_shape.qwen2.5-coder-0.5b", ())]
    summary = scorecard.to_json(rows)
    assert summary["counts"]["holds"] == 3 and summary["records"] == 5 and len(summary["claims"]) == 3
    assert summary["claims"][0]["also_in"] == ["10_llm"]
    assert scorecard.base_id("gu2024.llama_family_input_shape.qwen2.5-coder-0.5b") == "gu2024.llama_family_input_shape"
    assert scorecard.base_id("origin.headwise_rmsnorm_converges_faster.bible_g0=0.1").endswith("bible_g0=0.1")


def test_hidden_folders_are_not_notebooks(tmp_path):
    root = _figures(tmp_path)
    (root / ".13_vit.old").mkdir()
    (root / ".13_vit.old" / "claims.json").write_text((root / "00_a" / "claims.json").read_text())
    assert {r.notebook for r in scorecard.collect(root)} == {"00_a", "11_b"}


def test_an_old_schema_claims_file_is_left_out_with_a_warning_not_a_crash(tmp_path, capsys):
    root = _figures(tmp_path)
    (root / "03_old").mkdir()
    (root / "03_old" / "claims.json").write_text(json.dumps({"schema": 1, "notebook": "03_old", "claims": []}))
    rows = scorecard.collect(root)
    assert [r.notebook for r in rows] == ["00_a", "00_a", "11_b"]
    assert "make figures NOTEBOOKS=03" in capsys.readouterr().err


def test_implementation_checks_and_own_questions_are_no_papers_claims(tmp_path):
    """Issue 43 item 10: xiao2023.bounded_cache checks the code; a removal 2605.06611 does not claim is our question.
    Both are listed, never counted per paper nor in the verdict counts -- and the table says so."""
    _write(tmp_path, "01_u", "SmolLM2-135M-Instruct", [
        _claim("xiao2023.sinks_rescue_window", "Xiao et al., arXiv 2309.17453, Table 1", True),
        _claim("xiao2023.bounded_cache", "Xiao et al., arXiv 2309.17453, Section 3", True,
               paper=scorecard.IMPLEMENTATION_CHECK)])
    _write(tmp_path, "03_m", "TinyLM trained here", [
        _claim("mitigation.headwise_rmsnorm_removes_sink", "own question; arXiv 2605.06611", False,
               paper=scorecard.OWN_QUESTION),
        _claim("origin.headwise_rmsnorm_restores_parity", "arXiv 2605.06611", True, paper="2605.06611")])
    rows = scorecard.collect(tmp_path)
    papers = {e["paper"]: e for e in scorecard.by_paper(rows)}
    assert papers["Xiao et al., StreamingLLM (2309.17453)"]["tested"] == 1
    assert papers["Structural origin of sinks (ICML 2026) (2605.06611)"]["tested"] == 1
    assert not any("check" in p or "own question" in p for p in papers)
    summary = scorecard.to_json(rows)
    assert summary["paper_claims"] == 2 and summary["counts"] == {"holds": 2, "does NOT hold": 0, "unsettled": 0,
                                                                 "cannot be judged here": 0}
    others = summary["not_paper_claims"]
    assert others[scorecard.NOT_A_PAPER[scorecard.IMPLEMENTATION_CHECK]] == ["xiao2023.bounded_cache (holds)"]
    assert others[scorecard.NOT_A_PAPER[scorecard.OWN_QUESTION]] == \
        ["mitigation.headwise_rmsnorm_removes_sink (does NOT hold)"]
    assert all(e["paper"] in papers for e in scorecard.by_paper_and_kind(rows))
    text = scorecard.format_table(rows)
    assert "2 distinct claims (4 records" in text and "papers' claims only" in text and "not counted as a paper's claim" in text
    assert "xiao2023.bounded_cache" in text.splitlines()[-1]


def test_bounded_cache_is_recorded_as_an_implementation_check():
    from sinklib.utilization import streaming

    c = streaming.bounded_cache({"dense": 12.0, "4 sinks + window": 3.0}, "4 sinks + window")
    assert c.paper == scorecard.IMPLEMENTATION_CHECK


def _ratio_figures(tmp_path):
    """Issue 46 (2): SmolLM2 on Bible text against Llama-2-13B on PG19 (Xiao et al. Table 1), and a gated variant
    trained here beside its own softmax baseline (Qiu et al. Table 4's 0.467 -> 0.073)."""
    xiao, qiu = "Xiao et al., arXiv 2309.17453, Table 1", "Qiu et al. arXiv 2505.06708, Table 4"
    _write(tmp_path, "01_u", "SmolLM2-135M-Instruct", [
        _claim("xiao2023.sinks_rescue_window", xiao, True, {"window only": 5158.07, "4 sinks + window": 5.4},
               {"window only": 68.0, "4 sinks + window": 34.0, "recompute": 31.0})])
    _write(tmp_path, "02_i", "SmolLM2-135M-Instruct", [
        _claim("sun2024.massive_activations_are_bias", "Sun et al., arXiv 2402.17762, Table 3", True,
               {"original": 5.47, "set_to_mean": 5.47, "set_to_zero": "inf"},
               {"original": 30.0, "set to mean": 30.3, "set to zero": 3000.0})])
    _write(tmp_path, "03_m", "TinyLM trained here", [
        _claim("mitigation.softmax_grows_sink", qiu, True, {"first_attention": 0.467}, {"first_attention": 0.25}),
        _claim("mitigation.gated_headwise_removes_sink", qiu, False, {"first_attention": 0.073},
               {"first_attention": 0.1})])
    _write(tmp_path, "13_v", "DINOv2-S/14", [_claim("darcet2023.high_norm", "arXiv 2309.16588", None, "yes", 0.0)])
    return tmp_path


def test_fig01_plots_within_run_ratios_against_the_papers_not_one_model_over_another(tmp_path):
    rows = scorecard.collect(_ratio_figures(tmp_path))
    found = scorecard.like_for_like(rows)
    got = {(r["id"], r["label"]): (r["measured"], r["published"]) for r in found["ratios"]}
    assert got == {
        ("xiao2023.sinks_rescue_window", "window only / 4 sinks + window"): (68.0 / 34.0, 5158.07 / 5.4),
        ("sun2024.massive_activations_are_bias", "set to mean / original"): (30.3 / 30.0, 5.47 / 5.47),
        ("mitigation.gated_headwise_removes_sink", "head-wise gate / softmax"): (0.1 / 0.25, 0.073 / 0.467)}
    assert found["not_finite"] == [{"id": "sun2024.massive_activations_are_bias", "label": "set to zero / original",
                                    "why": "paper inf / 5.47"}]
    assert found["without"] == ["mitigation.softmax_grows_sink", "darcet2023.high_norm"]
    fig = scorecard_plots.within_run_ratios(found["ratios"])
    ax = fig.axes[0]
    xs = sorted(float(x) for c in ax.collections for x in c.get_offsets()[:, 0])
    assert xs == pytest.approx(sorted([2.0, 5158.07 / 5.4, 1.01, 1.0, 0.4, 0.073 / 0.467]))
    assert "1 = the paper's value" not in ax.get_xlabel() and "within one run" in ax.get_xlabel()
    assert "the paper's ratio" in [t.get_text() for t in fig.legends[0].get_texts()]
    plt.close(fig)


def test_fig02_hatching_has_a_legend_entry():
    split = [{"paper": "P", "kind": "pretrained", "tested": 2, "holds": 1, "does NOT hold": 1, "unsettled": 0,
              "cannot be judged here": 0, "models": 1},
             {"paper": "P", "kind": "stand-in", "tested": 1, "holds": 0, "does NOT hold": 0, "unsettled": 0,
              "cannot be judged here": 1, "models": 1},
             {"paper": "Q", "kind": "trained here", "tested": 1, "holds": 1, "does NOT hold": 0, "unsettled": 0,
              "cannot be judged here": 0, "models": 1}]
    fig = scorecard_plots.by_paper(split)
    legend = fig.legends[0]
    hatched = {h.get_label(): h.get_hatch() for h in legend.legend_handles if h.get_hatch()}
    assert hatched == {"stand-in built here: hatched //": "//", "models trained here: dotted ..": ".."}
    assert "pretrained model: plain" in [t.get_text() for t in legend.get_texts()]
    plt.close(fig)


def test_every_claim_that_neither_holds_nor_fails_says_what_would_settle_it(tmp_path):
    """The scorecard JSON carries, for each claim that is not "holds" or "does NOT hold", what would settle it, read
    from its own record: a stand-in names the trained models of the GPU profile; an unsettled value its distance
    from the cut and its margin; disagreeing draws how many hold; a claim not judged here its note's reason."""
    _write(tmp_path, "03_m", "TinyLM (trained here)", [
        _claim("m.close", "Qiu et al., arXiv 2505.06708", None, unsettled=True, draws=(None, None),
               draws_of="2 training seeds", margin={"value": 0.121, "cut": 0.111, "spread": 0.033}),
        _claim("m.held", "Qiu et al., arXiv 2505.06708", True)])
    _write(tmp_path, "10_l", "SmolLM2-135M-Instruct", [
        _claim("l.draws", "Sun et al., arXiv 2402.17762", None, unsettled=True, draws=(True, False, False),
               draws_of="3 draws"),
        _claim("l.note", "Sun et al., arXiv 2402.17762", None, note="no later site met the criterion; more text")])
    _write(tmp_path, "11_b", "SmolLM2-MoE (upcycled stand-in, not a trained MoE)", [
        _claim("b.one", "Su et al., arXiv 2507.23279", None, note="not judgeable on the stand-in")])
    out = {c["id"]: c["settle"] for c in scorecard.to_json(scorecard.collect(tmp_path))["claims"]}
    assert out["m.held"] == ""
    assert out["m.close"].startswith("a value clear of its margin: 0.121 lies 0.01 from the cut 0.111, within its "
                                     "margin 0.033; more training seeds than 2")
    assert out["l.draws"].startswith("draws that agree (now 1 of 3 judgeable draws hold)")
    assert out["l.note"] == "what keeps it from being judged here: no later site met the criterion"
    assert out["b.one"].startswith("a trained MoE in place of the stand-in: the GPU profile's allenai/OLMoE")
    apart = scorecard.to_json(scorecard.collect(tmp_path))["not_testable_here"]
    assert [a["claim"].split(" ")[0] for a in apart] == ["l.note", "b.one"] and apart[1]["settle"] == out["b.one"]


def test_a_record_on_random_weights_is_not_counted_as_pretrained():
    """03's learned-sink check on a tiny random gpt-oss says "random weights" in its model: the scorecard's row says
    so (it was listed as pretrained)."""
    from sinklib.reproduction.scorecard_row import kind_of

    assert kind_of("03_mitigation", "gpt-oss, tiny, random weights") == "random weights"
    assert kind_of("03_mitigation", "TinyLM sink_logit, trained here (seed 0)") == "trained here"
    assert kind_of("10_llm", "SmolLM2-135M-Instruct (4-bit GGUF, dequantised)") == "pretrained"
