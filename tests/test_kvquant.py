"""Group-wise KV quantiser and the sink-preserving quantised cache."""

import pytest
import torch
from transformers import DynamicCache

from sinklib.utilization.kvquant import QuantizedKVCache, fake_quantize, fake_quantize_tokens


def test_error_is_at_most_half_a_step():
    x = torch.randn(3, 5, 64)
    for bits in (2, 4, 8):
        q = fake_quantize(x, bits, 32)
        g = x.unflatten(-1, (2, 32))
        step = (g.amax(-1) - g.amin(-1)) / (2**bits - 1)  # (3, 5, 2)
        err = (q - x).abs().unflatten(-1, (2, 32)).amax(-1)
        assert (err <= step / 2 + 1e-6).all()
        assert len(torch.unique(q[0, 0, :32])) <= 2**bits


def test_group_extremes_survive_and_bad_arguments():
    x = torch.randn(4, 32)
    q = fake_quantize(x, 2, 32)
    torch.testing.assert_close(q.amax(-1), x.amax(-1))
    torch.testing.assert_close(q.amin(-1), x.amin(-1))
    with pytest.raises(ValueError):
        fake_quantize(x, 4, 24)
    with pytest.raises(ValueError):
        fake_quantize(x, 0, 32)


def test_cache_keeps_sinks_exact_and_quantises_the_rest(tiny):
    ids = torch.randint(0, 256, (1, 20), generator=torch.Generator().manual_seed(5))
    dense = DynamicCache()
    quant = QuantizedKVCache.for_model(tiny.model, bits=2, group_size=8, keep_first=4, key_axis="token")
    with torch.no_grad():
        for s in range(0, 20, 6):  # chunks that straddle the sink boundary
            tiny.model(ids[:, s:s + 6], past_key_values=dense, use_cache=True)
            tiny.model(ids[:, s:s + 6], past_key_values=quant, use_cache=True)
    ref, got = dense.layers[0], quant.layers[0]  # layer 0 depends only on tokens: comparable entry by entry
    torch.testing.assert_close(got.values[..., :4, :], ref.values[..., :4, :], atol=0, rtol=0)
    torch.testing.assert_close(got.keys[..., :4, :], ref.keys[..., :4, :], atol=0, rtol=0)
    torch.testing.assert_close(got.values[..., 4:, :], fake_quantize(ref.values[..., 4:, :], 2, 8), atol=1e-6, rtol=0)
    assert not torch.allclose(got.values[..., 4:, :], ref.values[..., 4:, :])


def test_per_channel_keys_share_a_range_per_channel_and_token_group():
    x = torch.randn(2, 3, 40, 16)  # (B, H, n tokens, d)
    x[..., 5] *= 50  # an outlier channel, as key outliers are (KIVI): per-token groups would smear it
    q = fake_quantize_tokens(x, 2, 16)
    assert q.shape == x.shape
    for s in (0, 16, 32):  # groups of 16 tokens, the last one 8 long
        g, qg = x[..., s:s + 16, :], q[..., s:s + 16, :]
        torch.testing.assert_close(qg.amax(-2), g.amax(-2))  # each channel's extremes survive in its group
        torch.testing.assert_close(qg.amin(-2), g.amin(-2))
        assert len(torch.unique(qg[0, 0, :, 0])) <= 4
    err_channel = (fake_quantize_tokens(x, 2, 16) - x)[..., [0, 1, 2]].abs().mean()
    err_token = (fake_quantize(x, 2, 16) - x)[..., [0, 1, 2]].abs().mean()
    assert err_channel < err_token  # the outlier channel no longer sets the step of the normal channels


def test_per_channel_key_cache_quantises_keys_over_tokens(tiny):
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(5))
    dense = DynamicCache()
    quant = QuantizedKVCache.for_model(tiny.model, bits=2, group_size=8, keep_first=4)  # key_axis="channel"
    with torch.no_grad():
        tiny.model(ids, past_key_values=dense, use_cache=True)
        tiny.model(ids, past_key_values=quant, use_cache=True)
    ref, got = dense.layers[0], quant.layers[0]
    torch.testing.assert_close(got.keys[..., :4, :], ref.keys[..., :4, :], atol=0, rtol=0)
    torch.testing.assert_close(got.keys[..., 4:, :], fake_quantize_tokens(ref.keys[..., 4:, :], 2, 8), atol=1e-6,
                               rtol=0)
    torch.testing.assert_close(got.values[..., 4:, :], fake_quantize(ref.values[..., 4:, :], 2, 8), atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match="key_axis"):
        QuantizedKVCache.for_model(tiny.model, bits=2, key_axis="rows")


def test_asymmetric_min_max_quantiser_on_a_hand_worked_group():
    """IntactKV's KV quantiser (asymmetric, min/max): scale = (max - min) / (2^b - 1), x_hat = min + scale *
    round((x - min) / scale). Worked by hand at 2 bits: scale = 1 for both groups."""
    x = torch.tensor([[0.0, 0.4, 0.6, 3.0, -1.0, 0.2, 1.9, 2.0]])
    torch.testing.assert_close(fake_quantize(x, 2, 4), torch.tensor([[0.0, 0.0, 1.0, 3.0, -1.0, 0.0, 2.0, 2.0]]))


def test_uniform_causal_share_of_the_first_keys():
    """Hand case, T = 4, k = 1: queries see 1, 2, 3, 4 keys -> key 0 gets 1, 1/2, 1/3, 1/4 -> mean 25/48."""
    from sinklib.utilization.kvquant import uniform_causal_share

    assert abs(uniform_causal_share(1, 4) - (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4) < 1e-12
    assert uniform_causal_share(4, 4) == 1.0 and uniform_causal_share(4, 256) > 4 * 4 / 256
