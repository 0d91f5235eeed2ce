"""Metrics on hand-built tensors with answers worked out by hand."""

import pytest
import torch

from sinklib.core import metrics


def causal_uniform(T: int) -> torch.Tensor:
    """Row t spreads 1/(t+1) over keys 0..t."""
    A = torch.tril(torch.ones(T, T))
    return A / A.sum(dim=-1, keepdim=True)


def sink_matrix(T: int, p: float) -> torch.Tensor:
    """Every query t >= 1 sends p to key 0 and spreads 1-p over keys 1..t; query 0 attends to itself."""
    A = torch.zeros(T, T)
    A[0, 0] = 1.0
    for t in range(1, T):
        A[t, 0] = p
        A[t, 1:t + 1] = (1 - p) / t
    return A


def test_alpha_first_token_of_sink_matrix():
    A = sink_matrix(5, 0.8)
    # queries 0..4 see key 0 with 1, .8, .8, .8, .8 -> mean 0.84
    assert metrics.alpha(A, 0).item() == pytest.approx(0.84)


def test_alpha_later_key_uses_only_queries_that_see_it():
    A = causal_uniform(4)
    # key 2 is seen by queries 2, 3 with 1/3 and 1/4
    assert metrics.alpha(A, 2).item() == pytest.approx((1 / 3 + 1 / 4) / 2)
    with pytest.raises(ValueError):
        metrics.alpha(A, 4)


def test_alpha_keeps_leading_dims():
    A = torch.stack([sink_matrix(6, 0.9), causal_uniform(6)]).unsqueeze(0)  # (1, 2, T, T)
    out = metrics.alpha(A, 0)
    assert out.shape == (1, 2)
    assert out[0, 0] > 0.9 and out[0, 1] == pytest.approx(sum(1 / (t + 1) for t in range(6)) / 6)


def test_sink_rate_counts_heads_above_eps():
    alphas = torch.tensor([[[0.1, 0.31, 0.9]], [[0.3, 0.5, 0.2]]])  # (N=2, L=1, H=3)
    assert metrics.sink_rate(alphas, 0.3) == pytest.approx(3 / 6)  # 0.3 itself is not above eps


def test_sink_mass_normalises_by_visible_queries():
    A = causal_uniform(3)  # columns: [1+1/2+1/3, 1/2+1/3, 1/3]
    mass = metrics.sink_mass(A)
    assert mass.tolist() == pytest.approx([(1 + 1 / 2 + 1 / 3) / 3, (1 / 2 + 1 / 3) / 2, 1 / 3])
    assert torch.allclose(mass[0], metrics.alpha(A, 0))


def test_dom_ratio_one_hot_and_flat():
    one_hot = torch.zeros(8)
    one_hot[3] = 5.0
    assert metrics.dom_ratio(one_hot).item() == pytest.approx(8.0)  # max / mean = 5 / (5/8)
    assert metrics.dom_ratio(torch.full((8,), -2.0)).item() == pytest.approx(1.0)


def test_position_variance():
    x = torch.zeros(4, 3, 2)
    x[:, 0, :] = torch.tensor([[1.0], [-1.0], [1.0], [-1.0]])  # variance 1 at position 0
    x[:, 2, 0] = torch.tensor([2.0, 0.0, 2.0, 0.0])  # variance 1 in one of two features -> 0.5
    assert metrics.position_variance(x).tolist() == pytest.approx([1.0, 0.0, 0.5])
    with pytest.raises(ValueError):
        metrics.position_variance(x[:1])


def test_massive_criterion_needs_both_thresholds():
    h = torch.full((2, 2, 2000), 0.1)
    h[0, 0, 7] = 500.0  # > 100 and 5000x its layer's median (0.1): massive
    h[0, 1, 9] = 50.0  # 500x the median but below 100: not massive
    h[1] = 1.0  # another sequence, whose layer median is 1.0
    h[1, 0, 11] = 150.0  # > 100 but only 150x that median: not massive
    mask = metrics.massive_mask(h)
    assert mask.sum() == 1 and mask[0, 0, 7]
    rep = metrics.find_massive(h)
    assert rep.dims == [7] and rep.positions == [0] and rep.count == 1
    assert rep.fraction_tokens == pytest.approx(1 / 4)


def test_massive_median_is_the_layer_output_median_as_sun_et_al_code():
    """locuslab/massive-activations main_llm.py --exp2 divides by torch.median(feat_abs) of the whole (1, T, d)
    layer output. A first token whose other entries are large (5.0, the rest of the layer 0.5) holds an entry of
    2,000: 4,000x the layer's median (massive, theirs) but only 400x its own token's median (not massive)."""
    h = torch.full((1, 4, 100), 0.5)
    h[0, 0] = 5.0
    h[0, 0, 7] = 2000.0
    feat_abs = h.abs()  # their line, transcribed
    assert metrics.layer_median(h).item() == torch.median(feat_abs).item() == 0.5
    assert metrics.massive_mask(h)[0, 0, 7] and metrics.massive_mask(h).sum() == 1
    assert not metrics.massive_mask(h, median="token").any()  # the per-token extra misses it
    ext = metrics.largest_activation(h)
    assert ext.median == 0.5 and ext.token_median == 5.0 and ext.ratio == 4000.0 and ext.is_massive
    # one median per sequence: a second sequence of larger entries does not move the first one's
    two = torch.cat([h, torch.full((1, 4, 100), 50.0)])
    assert metrics.massive_mask(two)[0].equal(metrics.massive_mask(h)[0])
    with pytest.raises(ValueError, match="median must be"):
        metrics.massive_mask(h, median="row")


def test_largest_activation_and_top_dims():
    h = torch.randn(2, 4, 16) * 0.01
    h[1, 2, 5] = -300.0
    ext = metrics.largest_activation(h)
    assert (ext.seq, ext.position, ext.dim, ext.value) == (1, 2, 5, -300.0)
    assert ext.is_massive and ext.ratio > 1000
    assert metrics.top_dims(h, 1)[0][0] == 5
