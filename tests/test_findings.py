"""What the run found (sinklib.reproduction.findings), read off hand-built scorecard rows: each sentence can fail."""

from __future__ import annotations

from sinklib.reproduction import findings
from sinklib.reproduction.scorecard_row import Row

SMOL, GEMMA = "SmolLM2-135M-Instruct (4-bit GGUF, dequantised)", "Gemma-3-270M (4-bit GGUF, dequantised)"


def _row(notebook: str, claim_id: str, verdict: str, model: str = SMOL, paper: str = "Gu et al., X (2410.10781)",
         kind: str = "pretrained", needs_gpu: bool = False) -> Row:
    return Row(notebook=notebook, id=claim_id, paper=paper, source="", statement="s", published=None, measured=None,
               model=model, profile="cpu", verdict=verdict, reason="", kind=kind, needs_gpu=needs_gpu)


def test_a_paper_reproduces_partly_or_not_by_its_judged_tests_and_a_stand_in_judges_nothing():
    rows = [_row("10_llm", "gu.a", "holds"), _row("10_llm", "gu.b", "unsettled"),
            _row("10_llm", "x.a", "holds", paper="Xiao et al., S (2309.17453)"),
            _row("10_llm", "x.b", "does NOT hold", paper="Xiao et al., S (2309.17453)"),
            _row("03_mitigation", "q.a", "does NOT hold", paper="Qiu et al., G (2505.06708)", kind="trained here"),
            _row("12_mllm", "k.a", "does NOT hold", paper="Kang et al., V (2503.03321)", kind="stand-in")]
    groups = {findings.short_paper(o.paper): o.group for o in findings.paper_outcomes(rows)}
    assert groups == {"Gu et al.": "reproduces", "Xiao et al.": "partly", "Qiu et al.": "does not reproduce",
                      "Kang et al.": "open"}  # a stand-in's failure refutes nothing
    found = dict(findings.found(rows))
    assert found["Reproduce here"] == "Gu et al. (1 of 2 hold)"
    assert found["Partly reproduce"] == "Xiao et al. (1 of 2 hold, 1 fail)"
    assert found["Open here"] == "Kang et al. (1 test open)"


def test_the_chain_breaks_at_each_models_first_link_that_does_not_hold():
    links = findings.CHAIN
    rows = [_row("02_interpretation", link, "holds") for link in links]
    rows += [_row("10_llm", f"{link}.gemma3-270m", v, model=GEMMA)
             for link, v in zip(links, ("holds", "does NOT hold", "holds", "holds"))]
    assert findings.chain_breaks(rows) == {"SmolLM2-135M-Instruct": None, "Gemma-3-270M": links[1]}
    text = dict(findings.found(rows))["The structural-origin chain"]
    assert "SmolLM2-135M-Instruct keeps every link" in text and "Gemma-3-270M breaks at the super neuron (link 2)" in text
    unsettled = [_row("10_llm", f"{links[0]}.gemma3-270m", "unsettled", model=GEMMA)]
    assert findings.chain_breaks(unsettled) == {"Gemma-3-270M": links[0]}  # not shown to hold is a break


def test_an_architecture_is_open_until_a_pretrained_model_judges_one_of_its_tests():
    rows = [_row("11_moe", "su.a", "cannot be judged here", kind="stand-in"),
            _row("13_vit", "d.a", "cannot be judged here", needs_gpu=True),
            _row("10_llm", "gu.a", "does NOT hold")]
    still = findings.open_architectures(rows)
    assert set(still) == {"11_moe", "13_vit"} and "stand-in" in still["11_moe"] and "GPU" in still["13_vit"]
    assert findings.open_architectures([*rows, _row("13_vit", "d.b", "holds")]).keys() == {"11_moe"}
