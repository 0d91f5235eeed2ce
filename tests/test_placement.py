"""Where the sink sits: token kinds, mass by kind, secondary sinks, the position-or-token rule, on hand-built cases."""

import pytest
import torch

from sinklib.architectures.llm import placement as pl


class Words:
    """A stand-in tokenizer: id i decodes to WORDS[i]."""

    WORDS = ["<s>", " the", " Lord", ".", " said", "\n", " of", " Moses", ",", "!!"]

    def decode(self, ids):
        return "".join(self.WORDS[i] for i in ids)


def test_token_kinds_mark_the_first_position_and_the_first_delimiter():
    assert [pl.token_kind(w) for w in (" the", " Lord", ".", "\n", " of", ",", "!!", " ")] == \
        ["weak", "content", "delimiter", "delimiter", "weak", "delimiter", "weak", "weak"]
    ids = torch.tensor([[0, 1, 2, 3, 4, 5, 8], [2, 4, 7, 6, 1, 2, 9]])
    assert pl.token_kinds(Words(), ids) == [
        ["first", "weak", "content", "first delimiter", "content", "delimiter", "delimiter"],
        ["first", "content", "content", "weak", "weak", "content", "weak"],
    ]


def test_mass_by_kind_and_secondary_sinks():
    kinds = [["first", "content", "first delimiter", "content", "weak", "content"]]
    mass = torch.tensor([[0.9, 0.02, 0.2, 0.04, 0.05, 1.0]])  # the last key: seen by one query only
    by = pl.mass_by_kind(mass, kinds, skip_last=1)
    assert by["first"] == pytest.approx(0.9) and by["content"] == pytest.approx(0.03)
    assert by["first delimiter"] == pytest.approx(0.2) and by["delimiter"] != by["delimiter"]  # none: NaN
    claim = pl.delimiter_claim(by, "m")
    assert claim.holds is True and claim.measured["first_delimiter_over_content"] == pytest.approx(20 / 3)
    assert pl.delimiter_claim({**by, "first delimiter": 0.05}, "m").holds is False
    ids = torch.tensor([[0, 2, 3, 2, 3, 2], [0, 2, 3, 2, 3, 2]])
    rows = pl.secondary_sinks(torch.tensor([[0.9, 0.1, 0.3, 0.1, 0.3, 0.9]] * 2), ids, Words(), skip_last=1,
                              min_count=3)
    assert rows == [(".", 4, pytest.approx(0.3)), (" Lord", 4, pytest.approx(0.1))]


@pytest.mark.parametrize("values, expected", [
    ((0.6, 0.6, 0.58, 0.02), True),  # SmolLM2-like: the position keeps it, the moved token loses it
    ((0.5, 0.06, 0.06, 0.52), False),  # Gemma-like: the BOS token carries it wherever it goes
    ((0.5, 0.1, 0.5, 0.1), None),  # neither cleanly
])
def test_position_or_token_rule(values, expected):
    r = pl.PositionOrToken(*values, shift=8, other_token="'\\n'", layers=[3])
    assert r.verdict() is expected and pl.position_claim(r, "m").holds is expected


def test_position_or_token_and_key_mass_on_a_tiny_model(tiny):
    ids = torch.randint(3, 200, (3, 20), generator=torch.Generator().manual_seed(0))
    mass = pl.key_mass(tiny, ids, batch_size=2)
    visible = 20 - torch.arange(20)  # key j is seen by T - j queries; every row sums to 1, so sum_j m_j (T - j) = T
    assert mass.shape == (3, 20) and torch.allclose((mass * visible).sum(1), torch.full((3,), 20.0))
    r = pl.position_or_token(tiny, ids, layers=[0, 1], shift=4)
    assert r.shift == 4 and 0 < r.own <= 1 and 0 < r.moved_original <= 1
    assert pl.chat_windows(tiny, ids) is None  # the byte tokenizer has no chat template


@pytest.mark.parametrize("family", ["gpt2", "opt", "gpt_neox", "byte_llama"])
def test_llm_survey_runs_on_the_gpu_profiles_classes(family):
    """10_llm's GPU list (GPT-2 XL, OPT, Pythia, Llama, ...): the whole recipe on tiny random models of the same
    classes, so a GPU user's first run does not die on a layout, shape or dtype."""
    from sinklib.architectures.llm import llm_survey
    from sinklib.core.adapters import adapter_for
    from sinklib.core.results import load_reference
    from sinklib.models import tiny
    from sinklib.pipeline import profiles

    assert len(profiles.SIZES["10_llm"]["gpu"].models) >= 6
    lm, _ = tiny.loaded(family)
    assert adapter_for(lm.model).family == "llm"
    report = llm_survey.measure(lm, num_seqs=2, seq_len=24, batch_size=2, placement_seqs=2, context_lengths=(32,),
                                context_windows=1, paper=load_reference("structural_origin"), progress=False)
    assert set(report.sink_rate) == {"natural", "random", "repeated"} and len(report.alpha_by_layer) == 2
    claims = llm_survey.report_claims(report, load_reference("gu2024_sink_rates"))
    gated = family == "byte_llama"  # the chain needs a gated MLP: GPT-2, OPT and GPT-NeoX skip it, saying so
    assert (report.chain is not None) == gated and len(claims) == (8 if gated else 4)
    assert all(c.id.endswith(f".tiny-{family}") for c in claims)
    assert report.as_dict()["position"]["shift"] == 8
