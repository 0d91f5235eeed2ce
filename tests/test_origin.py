"""Origin-chain measurements and perplexity on the tiny random model: shapes, ranges, and known identities."""

import math

import pytest
import torch

from sinklib import evaluation, origin
from sinklib.errors import WrongFamilyError


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (6, 16), generator=torch.Generator().manual_seed(3))


def test_variance_by_position_first_layer(tiny, ids):
    var = origin.variance_by_position(tiny, ids, [0, 1])
    assert var["before_wo"].shape == var["after_wo"].shape == (2, 16)
    # layer 0, token 0: o_0 = v_0 exactly, so its variance is the variance of the value vectors
    assert (var["before_wo"] >= 0).all()
    assert var["before_wo"][0, 0] > var["before_wo"][0, -1]  # averaging t+1 random values shrinks the variance


def test_super_neuron_search_returns_consistent_records(tiny, ids):
    found = origin.find_super_neurons(tiny, ids, min_vs_median=0.0, min_selectivity=0.0)
    assert len(found) == 2 * 128  # thresholds off: every neuron of both layers
    s = found[0]
    assert s.first_abs >= found[-1].first_abs and 0 < s.write_share <= 1 and len(s.write_dims) == 2
    by_pos = origin.neuron_by_position(tiny, ids, s.layer, s.neuron)
    assert by_pos["activation"].shape == by_pos["cos_gate"].shape == (16,)
    assert by_pos["activation"][0] == pytest.approx(s.first_abs, rel=1e-5)
    assert (by_pos["cos_up"].abs() <= 1).all()


def test_super_neuron_criterion_needs_both_conditions():
    first = torch.tensor([500.0, 500.0, 50.0, 0.1])
    rest = torch.tensor([10.0, 100.0, 1.0, 0.001])
    # 0: 500x median and 50x its other positions -> super; 1: fires elsewhere too (5x); 2: not outsized (50x median);
    # 3: selective but tiny
    assert origin.select_super_neurons(first, rest, 1.0).tolist() == [0]
    assert origin.select_super_neurons(first, rest, 1.0, min_selectivity=5).tolist() == [0, 1]


def test_disparity_lock_in_bias_shapes(tiny, ids):
    chain = origin.disparity_by_layer(tiny, ids, batch_size=4)
    assert all(v.shape == (2,) for v in chain.values())
    assert (chain["dom_first"] >= 1).all() and (chain["alpha_first"] <= 1).all()
    lock = origin.lock_in(tiny, ids)
    assert lock["key_query_cos"].shape == (2, 4) and (lock["positive_fraction"] <= 1).all()
    bias = origin.sink_as_bias(tiny, ids)
    assert set(bias) == {"value_norm_ratio", "sink_share", "bias_deviation", "alpha_first"}
    torch.testing.assert_close(bias["alpha_first"], lock["alpha_first"], atol=1e-6, rtol=0)


def test_first_token_values_and_onsets(tiny, ids):
    vals = origin.first_token_values(tiny, ids, [1, 2], batch_size=4)
    assert vals.shape == (2, 2)
    assert origin.onset_layers(torch.tensor([[5.0], [150.0], [160.0], [900.0]])) == [1, 3]
    assert origin.onset_layers(torch.tensor([[5.0], [50.0]])) == []


def test_alpha_at_matches_alpha_definition(tiny, ids):
    a = origin.alpha_at(tiny, ids, 0, batch_size=4)
    assert a.shape == (2, 4)
    torch.testing.assert_close(a, origin.lock_in(tiny, ids)["alpha_first"], atol=1e-6, rtol=0)


def test_perplexity_equals_transformers_loss(tiny, ids):
    with torch.no_grad():
        loss = tiny.model(ids, labels=ids).loss.item()
    assert evaluation.perplexity(tiny, ids, batch_size=6) == pytest.approx(math.exp(loss), rel=1e-5)
    nll = evaluation.token_nll(tiny, ids, batch_size=4)
    assert nll.shape == (6, 15)


def test_gated_mlp_required(tiny):
    origin.require_gated_mlp(tiny, "02")
    from sinklib.models import load_model

    with pytest.raises(WrongFamilyError, match="gated MLP"):
        origin.require_gated_mlp(load_model("tiny-vit-random"), "02_interpretation")


def test_sink_vs_other_groups_heads():
    alpha = torch.tensor([[0.9, 0.1], [0.5, 0.0]])
    vals = {"x": torch.tensor([[1.0, 10.0], [3.0, 20.0]])}
    assert origin.sink_vs_other(vals, alpha) == {"x": (2.0, 15.0)}
    none_sink = origin.sink_vs_other(vals, torch.zeros(2, 2), stat="median")["x"]
    assert math.isnan(none_sink[0]) and none_sink[1] == 3.0  # torch's median: the lower middle of 1, 3, 10, 20
