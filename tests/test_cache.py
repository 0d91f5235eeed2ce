"""StreamingLLM's sink + window cache on the tiny random Llama: equality, eviction order, positions, generate()."""

import pytest
import torch
from transformers import DynamicCache

from sinklib.utilization.sink_cache import (
    SinkWindowCache,
    rope_from_model,
    rotate,
    unrotate,
)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (1, 30), generator=torch.Generator().manual_seed(4))


def step_logits(model, ids, cache, chunk=1):
    with torch.no_grad():
        return torch.cat([model(ids[:, s:s + chunk], past_key_values=cache, use_cache=True).logits
                          for s in range(0, ids.shape[1], chunk)], dim=1)


def test_rotation_round_trip(tiny):
    rope = rope_from_model(tiny.model)
    cos, sin = rope(torch.arange(7))
    x = torch.randn(1, 2, 7, 16)
    torch.testing.assert_close(unrotate(rotate(x, cos, sin), cos, sin), x, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk", [1, 4])
def test_equals_dense_cache_until_eviction(tiny, ids, chunk):
    dense = step_logits(tiny.model, ids, DynamicCache(), chunk)
    cache = SinkWindowCache.for_model(tiny.model, n_sink=4, window=40)  # capacity 43 > 30 tokens: no eviction
    sink = step_logits(tiny.model, ids, cache, chunk)
    torch.testing.assert_close(sink, dense, atol=1e-5, rtol=1e-5)
    assert cache.evicted == 0 and cache.get_seq_length() == 30


def test_eviction_keeps_sinks_and_most_recent(tiny, ids):
    dense = DynamicCache()
    step_logits(tiny.model, ids, dense)
    cache = SinkWindowCache.for_model(tiny.model, n_sink=2, window=5)
    step_logits(tiny.model, ids, cache)
    kept = [0, 1, 26, 27, 28, 29]  # 2 sinks + the last window - 1 = 4 tokens
    layer, ref = cache.layers[0], dense.layers[0]
    assert layer.keys.shape[-2] == len(kept) and cache.evicted == 30 - len(kept)
    assert cache.get_seq_length() == 30  # every token seen: the next one is numbered 30, as in the dense cache
    # layer 0 keys/values depend only on the token and its absolute position: the stored ones are the dense cache's,
    # bit for bit (nothing is re-rotated in storage)
    torch.testing.assert_close(layer.values, ref.values[..., kept, :], atol=0, rtol=0)
    torch.testing.assert_close(layer.keys, ref.keys[..., kept, :], atol=0, rtol=0)


def test_positions_are_cache_indices(tiny, ids):
    """After eviction the new token attends as if [sinks, window, token] sat at positions 0..n-1 (layer 0, where
    keys, values and the query depend only on tokens and positions)."""
    from sinklib.core.capture import Capture

    cache = SinkWindowCache.for_model(tiny.model, n_sink=2, window=5)
    step_logits(tiny.model, ids[:, :29], cache)
    with torch.no_grad(), Capture(tiny.model, attentions=True, layers=[0]) as cap:
        tiny.model(ids[:, 29:], past_key_values=cache, use_cache=True)
    streamed = cap.get("attentions", 0)[0, :, -1]  # (H, 7)
    kept = [0, 1, 25, 26, 27, 28, 29]
    with torch.no_grad(), Capture(tiny.model, attentions=True, layers=[0]) as cap:
        tiny.model(ids[:, kept])
    fresh = cap.get("attentions", 0)[0, :, -1]
    torch.testing.assert_close(streamed, fresh, atol=1e-5, rtol=1e-5)


def test_window_only_and_generate(tiny):
    cache = SinkWindowCache.for_model(tiny.model, n_sink=0, window=8)
    prompt = tiny.tokenizer("In the beginning", return_tensors="pt").input_ids
    from sinklib.utilization.streaming import generate

    out = generate(tiny, prompt, cache, 20)
    assert out.shape[1] == prompt.shape[1] + 20
    seen = prompt.shape[1] + 19
    assert cache.layers[0].stored == 7 and cache.evicted == seen - 7 and cache.get_seq_length() == seen
    with pytest.raises(ValueError):
        SinkWindowCache.for_model(tiny.model, n_sink=2, window=0)


def manual_greedy(model, prompt, cache, n):
    """Greedy decoding by hand: the model numbers each new token from cache.get_seq_length()."""
    with torch.no_grad():
        logits = model(prompt, past_key_values=cache, use_cache=True).logits
        out = [logits[:, -1:].argmax(-1)]
        for _ in range(n - 1):
            out.append(model(out[-1], past_key_values=cache, use_cache=True).logits[:, -1:].argmax(-1))
    return torch.cat([prompt, *out], dim=1)


def test_generate_after_eviction_equals_the_manual_loop(tiny):
    from sinklib.utilization.streaming import generate

    prompt = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(9))
    manual = manual_greedy(tiny.model, prompt, SinkWindowCache.for_model(tiny.model, 2, 6), 30)
    cache = SinkWindowCache.for_model(tiny.model, 2, 6)
    got = generate(tiny, prompt, cache, 30)
    assert cache.evicted > 20  # far past the first eviction
    assert torch.equal(got, manual)
    from sinklib.core.capture import hooks_left

    assert hooks_left(tiny.model) == 0


def test_windowed_ppl_and_the_subsample_window():
    from sinklib.utilization import streaming

    nll = torch.log(torch.tensor([2.0, 2.0, 8.0, 8.0, 4.0]))
    centres, values = streaming.windowed_ppl(nll, 2)  # exp(mean log) per window of 2: (2, 2), (8, 8), (4)
    assert centres == [1, 3, 5] and values == pytest.approx([2.0, 8.0, 4.0])
    centres, values = streaming.windowed_ppl(nll[[0, 4]], 3, positions=[0, 4])  # measured at 2 positions only
    assert centres == [1, 4] and values == pytest.approx([2.0, 4.0])
    # the CPU profile's recompute baseline: 192 of 3,072 positions, windows of 128 -> 30 / (128 * 192 / 3072) = 3.75
    assert streaming.subsample_window(128, 3072, 192) == 4 * 128
    assert streaming.subsample_window(128, 100, 100) == 128  # dense enough already: never narrower than the window
