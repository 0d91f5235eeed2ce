"""Origin-chain measurements and perplexity on the tiny random model: shapes, ranges, and known identities."""

import math

import pytest
import torch

from sinklib.core import evaluation
from sinklib.core.errors import WrongFamilyError
from sinklib.interpretation import intervention_effects, massive_activations, origin


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (6, 16), generator=torch.Generator().manual_seed(3))


def test_variance_by_position_first_layer(tiny, ids):
    var = origin.variance_by_position(tiny, ids, [0, 1])
    assert var["before_wo"].shape == var["after_wo"].shape == (2, 16)
    assert (var["before_wo"] >= 0).all()
    assert var["before_wo"][0, 0] > var["before_wo"][0, -1]  # averaging t+1 random values shrinks the variance
    # layer 0, token 0 attends only to itself: o_0 = v_0 exactly, head by head
    from sinklib.core.capture import Capture

    with torch.no_grad(), Capture(tiny.model, kinds=("head_outputs", "values"), layers=[0]) as cap:
        tiny.model(ids, use_cache=False)
    o0 = cap.get("head_outputs", 0)[:, 0]  # (N, H, hd)
    v0 = cap.get("values", 0)[:, :, 0].repeat_interleave(tiny.n_heads // tiny.n_kv_heads, dim=1)  # (N, H, hd)
    torch.testing.assert_close(o0, v0, atol=1e-5, rtol=0)


def test_variance_needs_inputs_whose_first_token_varies(tiny):
    """A BOS model puts the same token at position 0 of every random sequence: Var at t = 0 is exactly 0 there."""
    from sinklib.core.data import make_inputs

    assert tiny.adds_bos
    with_bos = make_inputs(tiny, "random", 6, 16, seed=1)
    assert (with_bos[:, 0] == with_bos[0, 0]).all()
    assert origin.variance_by_position(tiny, with_bos, [0])["before_wo"][0, 0] == 0.0
    varying = make_inputs(tiny, "random", 6, 16, seed=1, bos=False)
    assert len(set(varying[:, 0].tolist())) > 1
    var = origin.variance_by_position(tiny, varying, [0])["before_wo"][0]
    assert var[0] > 0 and var[0] == var.max()


def test_super_neuron_search_returns_consistent_records(tiny, ids):
    found = origin.find_super_neurons(tiny, ids, min_vs_median=0.0, min_selectivity=0.0)
    assert len(found) == 2 * 128  # thresholds off: every neuron of both layers
    s = found[0]
    assert s.first_abs >= found[-1].first_abs and 0 < s.write_share <= 1 and len(s.write_dims) == 2
    by_pos = origin.neuron_by_position(tiny, ids, s.layer, s.neuron)
    assert by_pos["activation"].shape == by_pos["cos_gate"].shape == (16,)
    assert by_pos["activation"][0] == pytest.approx(s.first_abs, rel=1e-5)
    assert (by_pos["cos_up"].abs() <= 1).all()


def test_super_neuron_survives_firing_on_the_first_delimiter():
    """Sun et al.: the massive dims also fire on the first delimiter, once per window. With 8 windows of 63 later
    positions, a neuron at 500 on the first token and 600 on one delimiter per window is still a super neuron under
    the 0.95 quantile; under the old maximum its selectivity would be 500 / 600 < 1."""
    rest = torch.full((8, 63, 3), 0.5)
    rest[torch.arange(8), torch.randint(0, 63, (8,), generator=torch.Generator().manual_seed(0)), 0] = 600.0
    rest[:, :, 2] = 400.0  # neuron 2 fires everywhere
    pooled = rest.flatten(0, 1)  # (504, 3)
    level = origin.rest_level(pooled)
    assert level[0] == 0.5 and level[2] == 400.0
    first = torch.tensor([500.0, 500.0, 500.0])
    assert origin.select_super_neurons(first, level, 1.0).tolist() == [0, 1]
    assert origin.select_super_neurons(first, pooled.amax(0), 1.0).tolist() == [1]  # the old rule drops neuron 0


def test_massive_dimensions_say_when_sun_criterion_is_not_met():
    from sinklib.core.analysis import SinkProfile, massive_dimensions
    from sinklib.core.metrics import Extreme

    def prof(extremes, strict):
        return SinkProfile("m", "natural", 0.3, torch.zeros(1, 2, 1), torch.zeros(2, 4), torch.zeros(1, 2),
                           torch.zeros(1, 2), extremes, strict)

    smol = prof([Extreme(507, 970.0, 1.9, 0, 0), Extreme(507, 29578.0, 57.5, 0, 0)], [[], []])  # ~514x at most
    md = massive_dimensions(smol)
    assert not md.strict and md.dims == [507] and md.min_ratio == 100.0 and "NOT met" in md.describe()
    assert round(md.peak_ratio) == 514
    met = massive_dimensions(prof([Extreme(1415, 2000.0, 0.5, 0, 0), Extreme(2533, 700, 0.5, 0, 0)], [[], [2533]]))
    assert met.strict and met.dims == [2533] and "is met" in met.describe()
    assert massive_dimensions(prof([Extreme(3, 50.0, 0.01, 0, 0)] * 2, [[], []])).dims == []  # nothing over 100


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
    # aligned: entry l of the normalised curve is layer l+1's RMSNorm applied to h^l, the state of entry l
    from sinklib.core import metrics
    from sinklib.core.capture import Capture

    with torch.no_grad(), Capture(tiny.model, hidden_states=True) as cap:
        tiny.model(ids, use_cache=False)
        normed = tiny.model.model.layers[1].input_layernorm(cap.get("hidden_states", 0))
    torch.testing.assert_close(chain["dom_normed_first"][0], metrics.dom_ratio(normed[:, 0]).mean(), atol=1e-4,
                               rtol=1e-5)
    assert torch.isnan(chain["dom_normed_first"][1])  # no attention reads the last layer's output
    lock = origin.lock_in(tiny, ids)
    assert lock["key_query_cos"].shape == (2, 4) and (lock["positive_fraction"] <= 1).all()
    bias = massive_activations.sink_as_bias(tiny, ids)
    assert set(bias) == {"value_norm_ratio", "sink_share", "sink_term_spread", "alpha_first"}
    torch.testing.assert_close(bias["alpha_first"], lock["alpha_first"], atol=1e-6, rtol=0)
    # v_0 is one vector per sequence, so the term's spread is the relative spread of A_t0 over the queries t >= 1
    from sinklib.core.capture import Capture

    with torch.no_grad(), Capture(tiny.model, kinds=("attentions",)) as cap:
        tiny.model(ids, use_cache=False)
    a = cap.get("attentions", 1).float()[..., 1:, 0]  # (N, H, T-1)
    spread = ((a - a.mean(-1, keepdim=True)).abs().mean(-1) / a.mean(-1)).mean(0)
    torch.testing.assert_close(bias["sink_term_spread"][1], spread, atol=1e-5, rtol=1e-4)


def test_separation_is_the_mann_whitney_auc():
    alpha = torch.tensor([[0.9, 0.8, 0.1], [0.0, 0.2, 0.5]])  # sink heads: 0.9, 0.8, 0.5
    vals = torch.tensor([[0.1, 0.4, 0.3], [0.5, 0.2, 0.2]])  # sink: 0.1, 0.4, 0.2; other: 0.3, 0.5, 0.2
    # pairs (sink < other): 0.1 beats 3, 0.4 beats 1 (0.5), 0.2 beats 2 (0.3, 0.5) and ties 1 (0.2) -> 6.5 / 9
    assert massive_activations.separation(vals, alpha) == pytest.approx(6.5 / 9)
    assert massive_activations.separation(vals, torch.zeros(2, 3)) is None  # no sink head: no pair to compare
    assert massive_activations.separation_interval(vals, torch.ones(2, 3)) is None  # no other head
    assert massive_activations.separation(-alpha, alpha) == 1.0 and massive_activations.separation(alpha, alpha) == 0.0


def test_first_token_values_and_onsets(tiny, ids):
    vals = massive_activations.first_token_values(tiny, ids, [1, 2], batch_size=4)
    assert vals.shape == (2, 2)
    assert massive_activations.onset_layers(torch.tensor([[5.0], [150.0], [160.0], [900.0]])) == [1, 3]
    assert massive_activations.onset_layers(torch.tensor([[5.0], [50.0]])) == []


def test_alpha_at_matches_alpha_definition(tiny, ids):
    a = intervention_effects.alpha_at(tiny, ids, 0, batch_size=4)
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
    from sinklib.models.load import load_model

    with pytest.raises(WrongFamilyError, match="gated MLP"):
        origin.require_gated_mlp(load_model("tiny-vit-random"), "02_interpretation")


def test_sink_vs_other_groups_heads():
    alpha = torch.tensor([[0.9, 0.1], [0.5, 0.0]])
    vals = {"x": torch.tensor([[1.0, 10.0], [3.0, 20.0]])}
    assert massive_activations.sink_vs_other(vals, alpha) == {"x": (2.0, 15.0)}
    none_sink = massive_activations.sink_vs_other(vals, torch.zeros(2, 2), stat="median")["x"]
    assert none_sink[0] is None and none_sink[1] == 3.0  # torch's median: the lower middle of 1, 3, 10, 20


def test_massive_means_per_site(tiny, ids):
    vals = massive_activations.first_token_values(tiny, ids, [1, 2], batch_size=4)
    mm = massive_activations.massive_means(tiny, ids, [0, 1], [1, 2], min_ratio=0.0, batch_size=4)
    torch.testing.assert_close(mm.first, vals, atol=1e-5, rtol=1e-5)  # the first-token mean, as before
    assert (mm.first_sd > 0).all()  # random first tokens vary
    # a tiny random model has no |h| > 100: no entry elsewhere meets the criterion, so t >= 1 falls back to the mean
    assert (mm.other_count == 0).all() and torch.isnan(mm.other).all() and mm.other_tokens == {}
    torch.testing.assert_close(mm.other_or_first(), mm.first)
    fixed = ids.clone()
    fixed[:, 0] = 5  # one BOS-like first token in every sequence: its value cannot vary
    assert float(massive_activations.massive_means(tiny, fixed, [0], [1], batch_size=4).first_sd.max()) < 1e-5
    assert massive_activations.massive_means(tiny, fixed, [0], [1], batch_size=4).first_is_fixed and not mm.first_is_fixed


def test_token_state_compares_token_k_with_the_first(tiny, ids):
    same = intervention_effects.token_state(tiny, ids, 0)
    torch.testing.assert_close(same["dom_k"], same["dom_0"])
    torch.testing.assert_close(same["key_cos"], torch.ones(2), atol=1e-5, rtol=0)
    st = intervention_effects.token_state(tiny, ids, 5)
    assert all(v.shape == (2,) for v in st.values())
    assert (st["key_cos"].abs() < 0.999).all()  # a different token has a different key


def test_takes_first_token_state_rule():
    state = {"dom_k": torch.tensor([10.0, 200.0, 220.0]), "dom_0": torch.tensor([20.0, 230.0, 230.0]),
             "key_cos": torch.tensor([0.2, 0.97, 0.99])}
    assert intervention_effects.takes_first_token_state(state, [1, 2])["holds"] is True  # SmolLM2-like after the self-only edit
    gemma_like = {**state, "dom_k": torch.tensor([10.0, 60.0, 70.0]), "key_cos": torch.tensor([0.2, 0.3, 0.4])}
    out = intervention_effects.takes_first_token_state(gemma_like, [1, 2])
    assert out["holds"] is False and out["key_cos"] == pytest.approx(0.35)
    assert intervention_effects.takes_first_token_state(state, []) == {"dom_k": None, "dom_0": None, "key_cos": None,
                                                                        "holds": None}  # no layer: nothing exists


def test_without_bos_compares_the_same_windows(tiny):
    out = intervention_effects.without_bos(tiny, 3, 12, seed=0, batch_size=3)
    assert set(out) == {"with_bos", "without_bos"}
    for run in out.values():
        assert len(run["alpha_first_by_layer"]) == 2 and len(run["largest"]) == 2
    assert out["with_bos"]["alpha_first_by_layer"] != out["without_bos"]["alpha_first_by_layer"]  # BOS removed


def test_sink_follows_bos_rule():
    res = {"with_bos": {"alpha_first_by_layer": [0.1, 0.6, 0.5], "largest": []},
           "without_bos": {"alpha_first_by_layer": [0.1, 0.05, 0.04],
                           "largest": [{"position": 27, "token": "\n"}, {"position": 0, "token": "In"}]}}
    gemma = intervention_effects.sink_follows_bos(res, [1, 2])
    assert gemma["holds"] is True and gemma["largest_moved_to"] == [(27, "\n")]
    res["without_bos"]["alpha_first_by_layer"] = [0.1, 0.5, 0.45]  # position 0 keeps it: a positional sink
    assert intervention_effects.sink_follows_bos(res, [1, 2])["holds"] is False
    no_layer = intervention_effects.sink_follows_bos(res, [])
    assert no_layer["holds"] is None and no_layer["alpha_with_bos"] is None and no_layer["alpha_without_bos"] is None
