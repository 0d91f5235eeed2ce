"""Issue 53 item 3 for 00_tour and 02_interpretation: a pretrained claim judged on every draw's sequences pooled with
a bootstrap interval over sequences, not by every draw agreeing -- holds / fails when the interval lies on one side of
its cut, unsettled only when it straddles it. 00's Gu et al. shape
(:func:`sinklib.core.gu_claims.llama_family_shape_pooled`) and 02's variance discrepancy
(:func:`sinklib.interpretation.chain.variance_pooled_over_draws`), each on hand-built draws that disagree."""

from types import SimpleNamespace

import pytest
import torch
from test_placement_pooled import _declared, _head_outputs, _noise

from sinklib.core import analysis, gu_claims
from sinklib.core.claims import over_draws
from sinklib.core.data import INPUT_KINDS, make_inputs
from sinklib.core.results import load_reference
from sinklib.interpretation import chain
from sinklib.models.random_init import random_weights
from sinklib.utilization import tour

GU = load_reference("gu2024_sink_rates")
MEASURED = {"natural": 0.7, "repeated": 0.0}


# ----------------------------------------------------------------------------------------------- 00: Gu et al.'s shape
def _profile(rates: list[float], layers: int = 4, heads: int = 5) -> analysis.SinkProfile:
    """A profile whose sequence n has round(rates[n] x L x H) of its (layer, head) pairs above eps (alpha 0.9, the
    rest 0.1)."""
    n, cells = len(rates), layers * heads
    alphas = torch.full((n, cells), 0.1)
    for i, r in enumerate(rates):
        alphas[i, : round(r * cells)] = 0.9
    return analysis.SinkProfile("m", "random", 0.3, alphas.view(n, layers, heads), torch.zeros(layers, 8),
                                torch.zeros(n, layers), torch.zeros(n, layers), [])


def _by_seed(*draws: tuple[float, int]) -> list[torch.Tensor]:
    """Per seed, (level, n sequences): each sequence's rate level plus a little noise."""
    return [level + _noise(n, seed) for seed, (level, n) in enumerate(draws)]


def test_a_profile_gives_each_sequences_rate_and_their_mean_is_the_sink_rate():
    p = _profile([0.5, 0.25, 0.0, 1.0])
    assert p.sink_rate_by_sequence.tolist() == pytest.approx([0.5, 0.25, 0.0, 1.0])
    assert float(p.sink_rate_by_sequence.mean()) == pytest.approx(p.sink_rate)


def test_tour_shape_holds_on_pooled_sequences_where_the_seeds_disagree():
    """Seed 0: 32 sequences at 0.35 (holds); seeds 1-2: 8 at 0.25 each (fail). Every draw agreeing: unsettled. Pooled
    over 48 sequences 0.317, its interval above 0.3 -- holds, each seed's verdict kept in ``draws``."""
    random = _by_seed((0.35, 32), (0.25, 8), (0.25, 8))
    per_draw = [gu_claims.llama_family_shape(MEASURED | {"random": float(r.mean())}, GU) for r in random]
    assert over_draws(per_draw, "3 seeds").verdict() == "unsettled"
    claim = gu_claims.llama_family_shape_pooled(MEASURED, random, GU, 0, "3 seeds of random tokens")
    lo, hi = claim.spread["interval"]
    assert claim.holds is True and not claim.unsettled and claim.draws == (True, False, False)
    assert 0.3 < lo < claim.measured["random"] < hi
    assert claim.measured["random"] == pytest.approx(float(torch.cat(random).mean()))
    assert claim.spread["values"] == pytest.approx([float(r.mean()) for r in random])
    assert claim.draws_of == "3 seeds of random tokens" and "48 random-token sequences pooled" in claim.note
    assert claim.margin["of"] == "random" and claim.margin["cut"] == 0.3
    _declared(claim)


def test_tour_shape_fails_on_pooled_sequences_where_the_seeds_disagree():
    """Seed 0: 8 sequences at 0.35 (holds); seeds 1-2: 32 at 0.25 each (fail). Pooled 0.26, interval below 0.3."""
    random = _by_seed((0.35, 8), (0.25, 32), (0.25, 32))
    claim = gu_claims.llama_family_shape_pooled(MEASURED, random, GU, 0, "3 seeds")
    assert claim.holds is False and not claim.unsettled and claim.draws == (True, False, False)
    assert claim.spread["interval"][1] < 0.3


def test_tour_shape_is_unsettled_only_where_the_pooled_interval_straddles_its_cut():
    """Sequences alternating 0.1 / 0.5 pool to 0.3: unsettled, though every seed holds on its own; a sinking repeated
    token fails it whatever the interval."""
    straddling = [torch.tensor([0.1, 0.5] * 16), torch.tensor([0.1, 0.5] * 4), torch.tensor([0.5, 0.1] * 4)]
    claim = gu_claims.llama_family_shape_pooled(MEASURED, straddling, GU, 0, "3 seeds",
                                               per_draw=[gu_claims.llama_family_shape(MEASURED | {"random": 0.31}, GU)]
                                               * 3)
    lo, hi = claim.spread["interval"]
    assert claim.verdict() == "unsettled" and lo < 0.3 < hi and claim.draws == (True, True, True)
    assert "straddles its cut" in claim.note and claim.margin["of"] == "random"
    sinking = gu_claims.llama_family_shape_pooled({"natural": 0.7, "repeated": 0.4}, straddling, GU, 0, "3 seeds")
    assert sinking.holds is False and not sinking.unsettled


def test_judge_input_shape_pools_the_notebooks_draws_and_runs_its_control(tiny):
    """00_tour's one call does what its cell did: the run's random batch and two more draws pooled, the same rule on
    random weights as the control; each seed's rate kept."""
    seq_len, n, extra = 12, 4, 2
    profiles = {kind: analysis.profile_sinks(tiny, make_inputs(tiny, kind, n, seq_len, 0), input_name=kind,
                                             batch_size=4, progress=False) for kind in INPUT_KINDS}
    judged = tour.judge_input_shape(tiny, profiles, GU, 0, seq_len, extra, batch_size=4)
    draws = [profiles["random"]] + [analysis.profile_sinks(tiny, make_inputs(tiny, "random", extra, seq_len, s),
                                                           input_name="random", batch_size=4, progress=False)
                                    for s in (1, 2)]
    assert judged.random_draws == pytest.approx([p.sink_rate for p in draws])
    expected = gu_claims.llama_family_shape_pooled({k: p.sink_rate for k, p in profiles.items()},
                                                  [p.sink_rate_by_sequence for p in draws], GU, 0,
                                                  "3 seeds of random tokens (4, 2, 2 sequences)")
    assert judged.claim.holds == expected.holds and judged.claim.draws == expected.draws
    assert judged.claim.draws_of == expected.draws_of and judged.claim.spread == expected.spread
    control = random_weights(tiny, 0)
    rates = {kind: analysis.profile_sinks(control, make_inputs(control, kind, extra, seq_len, 0), input_name=kind,
                                          batch_size=4, progress=False).sink_rate for kind in INPUT_KINDS}
    assert judged.control_rates == pytest.approx(rates)
    assert judged.control.id == judged.claim.id and judged.control.holds == gu_claims.llama_family_shape(rates, GU).holds
    assert judged.seconds > 0


# ----------------------------------------------------------------------------------------------- 02: link 1
def _draws_of_outputs(monkeypatch, x: torch.Tensor) -> None:
    """Link 1's forward hands back ``x`` (every draw's sequences, N x T x C) as layer 0's head outputs."""
    monkeypatch.setattr(chain, "random_tokens", lambda lm, n, t, seed: torch.zeros(n, t, dtype=torch.long))
    monkeypatch.setattr(chain, "head_outputs", lambda lm, ids, layers, bs: {0: x[: len(ids)]})


def _first(x: torch.Tensor, n: int) -> SimpleNamespace:
    """The run's own draw as :func:`chain.variance_link` measured it: the rule on its n sequences."""
    return SimpleNamespace(claim=chain.variance_claim({0: x[:n]}))


def test_variance_claim_is_the_links_rule():
    x = _head_outputs(3.0, n=16, c=32)
    quiet = _head_outputs(1.5, n=16, c=32, seed=1)
    quiet[:, 1] *= 3.0  # position 1 varies more than position 0
    claim = chain.variance_claim({0: x, 1: quiet})
    assert claim.measured["ratio_t0_to_second_half"] == pytest.approx([3.0, 1.5], rel=1e-4)
    assert claim.measured["t0_is_max"] == [True, False] and claim.holds is True  # the rule reads layer 0


def test_interpretation_variance_holds_on_pooled_sequences_where_the_draws_disagree(monkeypatch):
    """Three draws of 16 sequences at 1.9x / 2.8x / 2.8x the second half's variance (fails / holds / holds): every
    draw agreeing, unsettled. Pooled over 48 sequences about 2.5x, its interval above 2 -- holds."""
    x = torch.cat([_head_outputs(r, n=16, c=64, seed=i) for i, r in enumerate((1.9, 2.8, 2.8))])
    _draws_of_outputs(monkeypatch, x)
    claim = chain.variance_pooled_over_draws(SimpleNamespace(n_layers=1), _first(x, 16), 16, 16, seed=0)
    assert over_draws([chain.variance_claim({0: x[i:i + 16]}) for i in (0, 16, 32)], "3").verdict() == "unsettled"
    lo, hi = claim.spread["interval"]
    assert claim.holds is True and not claim.unsettled and claim.draws == (False, True, True)
    assert 2.0 < lo < claim.measured["ratio_t0_to_second_half"][0] < hi
    assert claim.spread["values"] == pytest.approx([1.9, 2.8, 2.8], rel=1e-4)
    assert claim.draws_of == "3 seeds of random tokens (seeds 0-2)" and "48 random-token sequences" in claim.note
    _declared(claim)


def test_interpretation_variance_fails_on_pooled_sequences_where_the_draws_disagree(monkeypatch):
    """Draws at 2.3x / 1.3x / 1.3x: the first holds, the others fail; pooled about 1.6x, interval below 2 -- fails."""
    x = torch.cat([_head_outputs(r, n=16, c=64, seed=i) for i, r in enumerate((2.3, 1.3, 1.3))])
    _draws_of_outputs(monkeypatch, x)
    claim = chain.variance_pooled_over_draws(SimpleNamespace(n_layers=1), _first(x, 16), 16, 16, seed=0)
    assert claim.holds is False and not claim.unsettled and claim.draws == (True, False, False)
    assert claim.spread["interval"][1] < 2.0


def test_interpretation_variance_is_unsettled_only_where_the_pooled_interval_straddles_its_cut(monkeypatch):
    x = _head_outputs(2.0, n=48, c=64)  # pooled exactly 2x: on the cut
    _draws_of_outputs(monkeypatch, x)
    claim = chain.variance_pooled_over_draws(SimpleNamespace(n_layers=1), _first(x, 16), 16, 16, seed=0)
    lo, hi = claim.spread["intervals"]["ratio"]
    assert claim.verdict() == "unsettled" and lo < 2.0 < hi and claim.margin["of"] == "ratio"
    assert len(claim.draws) == 3 and "straddles its cut" in claim.note


def test_interpretation_variance_pools_the_draws_of_a_real_model(tiny):
    """On the tiny model: one forward of every draw's sequences; the first draw's verdict is the run's own
    (:func:`chain.variance_link`), the others' are the rule on their slices of the pooled head outputs."""
    first = chain.variance_link(tiny, chain.random_tokens(tiny, 4, 12, 0))
    claim = chain.variance_pooled_over_draws(tiny, first, 4, 12, seed=0, n_draws=2, batch_size=3)
    assert len(claim.draws) == 2 and claim.draws[0] == first.claim.holds
    assert claim.spread["values"][0] == pytest.approx(first.ratio_t0[0])
    second = chain.variance_link(tiny, chain.random_tokens(tiny, 4, 12, 1))
    assert claim.spread["values"][1] == pytest.approx(second.ratio_t0[0], rel=1e-4)
    assert "8 random-token sequences" in claim.note
    layers = chain.variance_layers(tiny)
    ids = chain.random_tokens(tiny, 4, 12, 0)
    same = chain.variance_claim(chain.head_outputs(tiny, ids, layers, batch_size=3))  # what variance_link reads
    assert same.measured["ratio_t0_to_second_half"] == pytest.approx(first.ratio_t0, rel=1e-4)
