"""10_llm reads several statistics off one forward: each shared path against the separate forwards it replaces."""

import pytest
import torch

from sinklib.architectures.llm import first_key_rates, llm_survey
from sinklib.architectures.llm import placement as pl
from sinklib.core import analysis, metrics
from sinklib.core.attnstats import AttentionStats
from sinklib.core.data import make_inputs, text_windows
from sinklib.interpretation import intervention_effects


def _key_mass_separately(lm, ids, layers, batch_size):
    """The former placement.key_mass: one forward per batch, mean over the chosen layers' heads."""
    out = []
    for start in range(0, len(ids), batch_size):
        with AttentionStats(lm.model) as st:
            lm.model(ids[start:start + batch_size], use_cache=False, logits_to_keep=1)
        out.append(torch.stack([st.key_mass(i) for i in layers]).mean(dim=(0, 2)))
    return torch.cat(out)


def test_profile_with_mass_equals_the_profile_and_a_forward_of_its_own(tiny):
    ids = make_inputs(tiny, "natural", 6, 16, seed=0)
    profile, mass = llm_survey.profile_with_mass(tiny, ids, batch_size=4)
    alone = analysis.profile_sinks(tiny, ids, input_name="natural", batch_size=4, progress=False)
    for name in ("alphas", "key_mass", "dom_first", "dom_rest"):
        torch.testing.assert_close(getattr(profile, name), getattr(alone, name), rtol=1e-6, atol=1e-7)
    assert profile.massive_dims == alone.massive_dims and profile.sink_rate == alone.sink_rate
    assert mass.shape == (6, tiny.n_layers, tiny.n_heads, 16)
    torch.testing.assert_close(mass, pl.layer_mass(tiny, ids, batch_size=4), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(mass[..., 0], alone.alphas, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(pl.over_layers(mass, [1]), _key_mass_separately(tiny, ids, [1], 4),
                               rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(pl.key_mass(tiny, ids, None, 4), _key_mass_separately(tiny, ids, [0, 1], 4),
                               rtol=1e-5, atol=1e-7)


def test_placement_windows_are_the_first_natural_windows(tiny):
    natural = make_inputs(tiny, "natural", 6, 16, seed=3)
    values = torch.arange(6.0)[:, None].expand(6, 2)
    assert torch.equal(llm_survey.rows_of(text_windows(tiny.tokenizer, 4, 16, 3), natural, values), values[:4])
    assert llm_survey.rows_of(text_windows(tiny.tokenizer, 4, 16, 4), natural, values) is None  # another seed
    assert llm_survey.rows_of(text_windows(tiny.tokenizer, 8, 16, 3), natural, values) is None  # more than measured


def test_sink_rate_from_layer_mass_equals_the_profile(tiny):
    ids = make_inputs(tiny, "random", 5, 16, seed=1)
    mass = pl.layer_mass(tiny, ids, batch_size=2)
    rate = analysis.profile_sinks(tiny, ids, batch_size=2, progress=False).sink_rate
    assert metrics.sink_rate(mass[..., 0]) == pytest.approx(rate, abs=1e-12)
    assert first_key_rates.sink_rate(tiny, ids, batch_size=2, progress="random") == pytest.approx(rate, abs=1e-12)
    for eps in (0.05, 0.1, 0.2):  # the same alphas, not only the same rate at one cut
        assert metrics.sink_rate(mass[..., 0], eps) == pytest.approx(
            analysis.profile_sinks(tiny, ids, eps=eps, batch_size=2, progress=False).sink_rate, abs=1e-12)


@pytest.mark.parametrize("given", [True, False])
def test_position_or_token_in_one_stack_equals_separate_forwards(tiny, given):
    ids, layers, shift = text_windows(tiny.tokenizer, 3, 24, 0), [0, 1], 8
    other = tiny.tokenizer("\n", add_special_tokens=False).input_ids[-1]
    replaced = ids.clone()
    replaced[:, 0] = other
    moved = torch.cat([ids.roll(1, dims=0)[:, 1:shift + 1], ids], dim=1)[:, :ids.shape[1]]
    own = _key_mass_separately(tiny, ids, layers, 2)
    rep, mov = _key_mass_separately(tiny, replaced, layers, 2), _key_mass_separately(tiny, moved, layers, 2)
    r = pl.position_or_token(tiny, ids, layers, shift=shift, batch_size=2, mass=own if given else None)
    expected = (own[:, 0].mean(), rep[:, 0].mean(), mov[:, 0].mean(), mov[:, shift].mean())
    assert (r.own, r.replaced, r.moved_first, r.moved_original) == pytest.approx(
        [float(x) for x in expected], rel=1e-5)


def test_bos_stripped_equals_without_bos(tiny):
    assert tiny.adds_bos
    natural = make_inputs(tiny, "natural", 6, 16, seed=0)
    alphas = analysis.profile_sinks(tiny, natural, batch_size=4, progress=False).alphas[:3]  # the first 3 windows
    shared = llm_survey.bos_stripped(tiny, alphas, 3, 16, 0, batch_size=4)
    alone = intervention_effects.without_bos(tiny, 3, 16, 0, batch_size=4)
    assert shared["with_bos"]["alpha_first_by_layer"] == pytest.approx(alone["with_bos"]["alpha_first_by_layer"],
                                                                      rel=1e-5)
    assert shared["without_bos"] == alone["without_bos"]
    a, b = (intervention_effects.sink_follows_bos(r, [0, 1]) for r in (shared, alone))
    assert a["alpha_with_bos"] == pytest.approx(b["alpha_with_bos"], rel=1e-5)
    assert {k: v for k, v in a.items() if k != "alpha_with_bos"} == {k: v for k, v in b.items() if k != "alpha_with_bos"}
