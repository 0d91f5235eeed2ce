"""stream_nll and recompute_nll in few forwards equal their step-by-step definitions (tiny random Llama, float32).

The block paths of :mod:`sinklib.utilization.streaming` feed many steps of a stream in one forward; these tests
compare them with the plain loop they replace -- ``chunk`` tokens per ``model(...)`` call through the same cache --
for the dense cache and the sink + window cache (window only, 1 and 4 sinks, sizes where eviction starts inside a
block and steps straddle blocks); the quantised cache keeps the loop.
"""

import pytest
import torch
import torch.nn.functional as F
from transformers import DynamicCache

from sinklib.utilization import streaming
from sinklib.utilization.kvquant import QuantizedKVCache
from sinklib.utilization.sink_cache import SinkWindowCache, cache_bytes


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (75,), generator=torch.Generator().manual_seed(3))


def step_nll(model, ids, cache, chunk):
    """The reference: ``chunk`` tokens per forward through ``cache`` (stream_nll's own loop)."""
    out = []
    with torch.no_grad():
        for start in range(0, len(ids) - 1, chunk):
            block = ids[start:start + chunk]
            logits = model(block[None], past_key_values=cache, use_cache=True).logits[0].float()
            targets = ids[start + 1:start + 1 + len(block)]
            out.append(F.cross_entropy(logits[:len(targets)], targets, reduction="none"))
    return torch.cat(out)


def same_state(a, b):
    for la, lb in zip(a.layers, b.layers):
        torch.testing.assert_close(la.keys, lb.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(la.values, lb.values, atol=1e-5, rtol=1e-5)
    assert a.get_seq_length() == b.get_seq_length()


@pytest.mark.parametrize("chunk,block", [(1, 8), (4, 16), (4, 12), (5, 40), (8, 512)])
def test_dense_blocks_equal_steps(tiny, ids, chunk, block):
    ref_cache, cache = DynamicCache(), DynamicCache()
    ref = step_nll(tiny.model, ids, ref_cache, chunk)
    got = streaming.stream_nll(tiny, ids, cache, chunk, progress=False, block=block)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert cache_bytes(cache) == cache_bytes(ref_cache)  # the same tokens were fed


@pytest.mark.parametrize("n_sink", [0, 1, 4])
@pytest.mark.parametrize("chunk,block,budget", [(1, 8, 12), (4, 16, 20), (4, 12, 17), (3, 30, 10), (8, 512, 24)])
def test_sink_cache_blocks_equal_steps(tiny, ids, n_sink, chunk, block, budget):
    def make():
        return SinkWindowCache.for_model(tiny.model, n_sink=n_sink, window=budget - n_sink)

    ref_cache, cache = make(), make()
    ref = step_nll(tiny.model, ids, ref_cache, chunk)
    got = streaming.stream_nll(tiny, ids, cache, chunk, progress=False, block=block)
    assert ref_cache.evicted > 0  # eviction happened, inside the blocks
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    same_state(cache, ref_cache)
    assert all(layer.step is None for layer in cache.layers)  # the stepped mode is switched off again
    # the cache goes on token by token afterwards as the step-by-step one does
    nxt = torch.tensor([[7]])
    with torch.no_grad():
        torch.testing.assert_close(tiny.model(nxt, past_key_values=cache).logits,
                                   tiny.model(nxt, past_key_values=ref_cache).logits, atol=1e-5, rtol=1e-5)


def test_sink_cache_prepended_newlines_and_a_used_cache(tiny, ids):
    """A stream whose length is no multiple of the step, on a cache that has already seen a step-aligned prefix."""
    ref_cache = SinkWindowCache.for_model(tiny.model, n_sink=4, window=12)
    cache = SinkWindowCache.for_model(tiny.model, n_sink=4, window=12)
    ref = step_nll(tiny.model, ids[:24], ref_cache, 4)
    got = streaming.stream_nll(tiny, ids[:24], cache, 4, progress=False, block=8)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    ref = step_nll(tiny.model, ids[24:], ref_cache, 4)  # 24 tokens seen: the next steps start on a boundary
    got = streaming.stream_nll(tiny, ids[24:], cache, 4, progress=False, block=20)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    same_state(cache, ref_cache)


def test_quantized_cache_keeps_the_step_loop(tiny, ids):
    """The quantised cache is fed step by step (its low-bit rounding would amplify another GEMM shape's rounding):
    bit for bit the loop's numbers."""
    def make():
        return QuantizedKVCache.for_model(tiny.model, bits=2, group_size=8, keep_first=4)

    ref = step_nll(tiny.model, ids, make(), 8)
    got = streaming.stream_nll(tiny, ids, make(), 8, progress=False)
    torch.testing.assert_close(got, ref, atol=0, rtol=0)


def test_other_caches_keep_the_step_loop(tiny, ids):
    """A cache of another type (here a subclass, as an exercise's own layers would be) is fed step by step."""

    class Mine(SinkWindowCache):
        pass

    calls = []
    handle = tiny.model.register_forward_pre_hook(lambda m, a, k: calls.append(1), with_kwargs=True)
    try:
        streaming.stream_nll(tiny, ids[:33], Mine(2, 6, SinkWindowCache.for_model(tiny.model, 2, 6).layers[0].rope,
                                                   len(tiny.model.model.layers)), 4, progress=False)
    finally:
        handle.remove()
    assert len(calls) == 8  # ceil(32 / 4) forwards


def test_recompute_equals_one_window_at_a_time(tiny, ids):
    window, positions = 12, [0, 3, 10, 11, 12, 30, 50, 73, 74]  # short prefixes, full windows, and t = T - 1 dropped
    got = streaming.recompute_nll(tiny, ids, window, positions, batch_size=3, progress=False)
    ref = []
    with torch.no_grad():
        for t in positions[:-1]:
            logits = tiny.model(ids[None, max(0, t + 1 - window):t + 1], use_cache=False).logits[0, -1]
            ref.append(F.cross_entropy(logits[None].float(), ids[t + 1:t + 2]))
    torch.testing.assert_close(got, torch.stack(ref), atol=1e-5, rtol=1e-5)


def test_sink_cache_gives_each_layer_its_own_rope_where_the_model_has_one_per_attention_type(ids):
    """Gemma-3 rotates sliding layers with base 10k and global layers with 1M (``rotary_emb(x, pos, layer_type)``):
    the cache re-rotates each layer's evicted keys with that layer's RoPE, and streaming a tiny Gemma-3 through it
    before any eviction equals the dense cache (10_llm's Xiao test stopped on Gemma-3 without it)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from sinklib.utilization.sink_cache import rope_from_model

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=64,
                              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=128)
    model = Gemma3ForCausalLM(config).eval()
    rotary, pos = model.model.rotary_emb, torch.arange(5, 9)
    cache = SinkWindowCache.for_model(model, n_sink=2, window=62)
    for layer, kind in zip(cache.layers, config.layer_types):
        cos, sin = layer.rope(pos)
        ref_cos, ref_sin = rotary(torch.zeros(1), pos[None], kind)
        torch.testing.assert_close(cos, ref_cos[0].float())
        torch.testing.assert_close(sin, ref_sin[0].float())
    assert not torch.allclose(cache.layers[0].rope(pos)[0], cache.layers[1].rope(pos)[0])  # two bases
    with pytest.raises(ValueError, match="layer_type"):
        rope_from_model(model)
    got = step_nll(model, ids[:40], cache, 4)
    torch.testing.assert_close(got, step_nll(model, ids[:40], DynamicCache(config=config), 4), atol=1e-5, rtol=1e-5)
    evicting = SinkWindowCache.for_model(model, n_sink=2, window=10)
    assert torch.isfinite(step_nll(model, ids[:40], evicting, 4)).all() and evicting.evicted > 0


@pytest.mark.parametrize("n_sink,window,chunk,block", [(2, 10, 4, 16), (4, 28, 8, 512), (0, 12, 4, 12)])
def test_sink_cache_blocks_equal_steps_on_sliding_window_layers(tiny, ids, n_sink, window, chunk, block):
    """Gemma-3's sliding layers (window 48 here) with a sink cache whose capacity + chunk fits the window: the block
    path (10_llm's Xiao test on Gemma-3) equals the step loop, eviction included."""
    from dataclasses import replace

    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=48,
                              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=128,
                              attn_implementation="eager")
    lm = replace(tiny, model=Gemma3ForCausalLM(config).eval())

    def make():
        return SinkWindowCache.for_model(lm.model, n_sink=n_sink, window=window)

    assert streaming._blockwise_ok(lm, make(), len(ids), chunk)
    ref_cache, cache = make(), make()
    ref = step_nll(lm.model, ids, ref_cache, chunk)
    got = streaming.stream_nll(lm, ids, cache, chunk, progress=False, block=block)
    assert ref_cache.evicted > 0
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    same_state(cache, ref_cache)


def test_a_sliding_window_narrower_than_the_cache_keeps_the_step_loop(tiny, ids):
    from dataclasses import replace

    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=16,
                              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=128)
    lm = replace(tiny, model=Gemma3ForCausalLM(config).eval())
    assert not streaming._blockwise_ok(lm, SinkWindowCache.for_model(lm.model, n_sink=4, window=12), 64, 4)
    assert streaming._blockwise_ok(lm, SinkWindowCache.for_model(lm.model, n_sink=4, window=9), 64, 4)
    assert not streaming._blockwise_ok(lm, DynamicCache(config=config), 64, 4)  # the dense cache: the window bites
