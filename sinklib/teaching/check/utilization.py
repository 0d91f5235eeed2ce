"""Checks for ``notebooks/exercises/01_utilization``: the StreamingLLM cache (which tokens it keeps),
group-wise KV quantisation and ACT's redistribution."""

from __future__ import annotations

from collections.abc import Callable

import torch

from sinklib.teaching.check._core import Result, fresh_inputs, random_attention, run, same


def kept_positions(fn: Callable, quiet: bool = False) -> Result:
    """``fn(seen, n_sink, window) -> list[int]``: the token positions a StreamingLLM cache holds after ``seen``
    tokens: all of them while seen <= n_sink + window, else the first n_sink and the last window.

    By hand: seen 10, 2 sinks, window 3 -> [0, 1, 7, 8, 9]; seen 4 -> [0, 1, 2, 3]; no sinks, seen 6, window 2 ->
    [4, 5].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    return run("kept_positions", [
        ("seen 10, n_sink 2, window 3", lambda: same(fn(10, 2, 3), [0, 1, 7, 8, 9], "kept positions")),
        ("seen 4 (the cache is not full yet)", lambda: same(fn(4, 2, 3), [0, 1, 2, 3], "kept positions")),
        ("seen 5 (exactly full)", lambda: same(fn(5, 2, 3), [0, 1, 2, 3, 4], "kept positions")),
        ("window only: seen 6, n_sink 0, window 2", lambda: same(fn(6, 0, 2), [4, 5], "kept positions")),
        ("seen 3000, n_sink 4, window 252", lambda: same(fn(3000, 4, 252), [0, 1, 2, 3, *range(2748, 3000)],
                                                          "kept positions")),
    ], quiet)


def fake_quantize(fn: Callable, quiet: bool = False) -> Result:
    """``fn(x (..., d), bits, group_size) -> (..., d)``: group-wise asymmetric quantise-dequantise: per group of
    ``group_size`` channels, scale = (max - min)/(2^bits - 1), q = round((x - min)/scale), x_hat = q scale + min.

    By hand: [0, 1, 2, 3] with 2 bits in one group -> scale 1, exact. [0, 0.4, 1, 0.6] with 1 bit -> scale 1,
    q = round([0, 0.4, 1, 0.6]) = [0, 0, 1, 1] -> [0, 0, 1, 1]. Two groups of 2: [0, 2, 10, 11] at 1 bit -> exact.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.utilization import kvquant

    x = torch.randn(3, 4, 64, generator=torch.Generator().manual_seed(5))
    return run("fake_quantize", [
        ("[0, 1, 2, 3], 2 bits, one group", lambda: same(fn(torch.tensor([0.0, 1, 2, 3]), 2, 4),
                                                          torch.tensor([0.0, 1, 2, 3]), "x_hat")),
        ("[0, 0.4, 1, 0.6], 1 bit, one group", lambda: same(fn(torch.tensor([0.0, 0.4, 1, 0.6]), 1, 4),
                                                             torch.tensor([0.0, 0, 1, 1]), "x_hat")),
        ("[0, 2, 10, 11], 1 bit, groups of 2 (each group has its own min and max)",
         lambda: same(fn(torch.tensor([0.0, 2, 10, 11]), 1, 2), torch.tensor([0.0, 2, 10, 11]), "x_hat")),
        ("random (3, 4, 64), 4 bits, groups of 32", lambda: same(fn(x, 4, 32), kvquant.fake_quantize(x, 4, 32),
                                                                  "x_hat")),
        ("random (3, 4, 64), 2 bits, groups of 16", lambda: same(fn(x, 2, 16), kvquant.fake_quantize(x, 2, 16),
                                                                  "x_hat")),
    ], quiet)


def act_redistribute(fn: Callable, quiet: bool = False) -> Result:
    """``fn(weights (B, H, T, N), sink (B, H, N) bool, beta) -> (B, H, T, N)``: ACT's edit -- sink columns become
    beta A[t, j]; the removed mass goes to the other keys of the row in proportion to their weight:
    A[t, j] (1 - beta S_t)/(1 - S_t), S_t = sum over sink columns of A[t, j]. Rows still sum to 1.

    By hand: row [0.6, 0.3, 0.1], sink column 1, beta 0.4 -> S = 0.3, sink 0.12, the others scaled by
    (1 - 0.12)/0.7 = 1.2571: [0.7543, 0.12, 0.1257].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.utilization.calibration import act_redistribute as reference

    w = torch.tensor([0.6, 0.3, 0.1]).view(1, 1, 1, 3)
    s = torch.tensor([False, True, False]).view(1, 1, 3)
    A = random_attention(2, 2, 7, seed=6)
    sinks = torch.zeros(2, 2, 7, dtype=torch.bool)
    sinks[..., 2] = True
    sinks[1, 0, 4] = True
    return run("act_redistribute", [
        ("hand row [0.6, 0.3, 0.1], sink at 1, beta 0.4", lambda: same(
            fn(w, s, 0.4), torch.tensor([0.6 * 0.88 / 0.7, 0.12, 0.1 * 0.88 / 0.7]).view(1, 1, 1, 3), "row")),
        ("random (2, 2, 7, 7) attention, sinks differ by head", lambda: same(fn(A, sinks, 0.4),
                                                                              reference(A, sinks, 0.4), "weights")),
        ("rows still sum to 1", lambda: same(fn(A, sinks, 0.4).sum(-1), torch.ones(2, 2, 7), "row sums")),
    ], quiet)


def _identity_rope(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A RoPE that turns nothing (cos 1, sin 0), so the hand case can be read position by position."""
    return torch.ones(1, 1), torch.zeros(1, 1)


def _feed(layer, keys: torch.Tensor, values: torch.Tensor, chunks: list[int]):
    """Feed (1, H, T, hd) keys/values to a cache layer in chunks; yield (returned keys, values, seen so far)."""
    start = 0
    for size in chunks:
        k, v = layer.update(keys[:, :, start:start + size], values[:, :, start:start + size])
        start += size
        yield k, v, start


def sink_window_layer(cls: type, quiet: bool = False) -> Result:
    """``cls(n_sink, window, rope)``: one layer of a StreamingLLM cache on transformers' cache interface (a
    ``transformers.cache_utils.DynamicLayer``). ``update(keys, values)`` (B, H, q, hd) appends the new tokens and
    returns every key/value the new queries attend to, then stores at most ``n_sink + window - 1`` tokens (the first
    ``n_sink`` and the most recent), so the next token sees ``n_sink + window`` keys with itself. Keys arrive rotated
    at their absolute positions; the returned sink keys are turned forward by the number of evicted tokens,
    ``rotate(k, *rope(torch.tensor([evicted])))``, so every key sits at its in-cache distance from the queries
    (StreamingLLM Sec. 3.2). ``get_seq_length()`` = tokens seen (stored + evicted: the next token's position);
    ``get_mask_sizes(q)`` = (stored + q, evicted).

    By hand (n_sink 2, window 3, RoPE that turns nothing, key of token t = [t, t], one token per step): the step
    that adds token t returns keys of tokens ``kept_positions(t + 1, 2, 3)`` -- [0, 1, 2, 3, 4] at t = 4, then
    [0, 1, 3, 4, 5], [0, 1, 4, 5, 6]; after 7 tokens 3 were evicted, ``get_seq_length()`` = 7 and
    ``get_mask_sizes(1)`` = (5, 3). Then: a real RoPE (a tiny Llama's), chunks of several tokens, and the tiny Llama
    itself reading 24 tokens through your cache, compared with :class:`sinklib.utilization.sink_cache.SinkWindowLayer`.
    """
    from transformers.cache_utils import Cache

    from sinklib.models import tiny_random
    from sinklib.utilization.sink_cache import SinkWindowLayer, rope_from_model

    steps = torch.arange(7.0).view(1, 1, 7, 1).expand(1, 1, 7, 2)  # key = value = [t, t]

    def hand():
        layer = cls(2, 3, _identity_rope)
        for k, v, seen in _feed(layer, steps, steps, [1] * 7):
            want = [0, 1, 2, 3, 4, 5, 6][:seen] if seen <= 5 else [0, 1, *range(seen - 3, seen)]
            same([int(x) for x in k[0, 0, :, 0]], want, f"positions of the keys returned with token {seen - 1}")
            same([int(x) for x in v[0, 0, :, 0]], want, f"positions of the values returned with token {seen - 1}")
            same(layer.get_seq_length(), seen, f"get_seq_length() after {seen} tokens")
        same(list(layer.get_mask_sizes(1)), [5, 3], "get_mask_sizes(1) after 7 tokens (stored + 1, evicted)")

    torch.manual_seed(0)
    model, _ = tiny_random.llama()
    model.eval()
    rope = rope_from_model(model)
    hd = model.config.hidden_size // model.config.num_attention_heads
    keys = torch.randn(1, 2, 20, hd, generator=torch.Generator().manual_seed(15))
    values = torch.randn(1, 2, 20, hd, generator=torch.Generator().manual_seed(16))

    def against_reference(chunks: list[int]):
        def case():
            mine, ref = cls(2, 4, rope), SinkWindowLayer(2, 4, rope)
            for (k, v, seen), (rk, rv, _) in zip(_feed(mine, keys, values, chunks), _feed(ref, keys, values, chunks)):
                same(k, rk, f"keys returned after {seen} tokens (are the sinks turned by the evicted count?)")
                same(v, rv, f"values returned after {seen} tokens")
                same(mine.get_seq_length(), ref.get_seq_length(), f"get_seq_length() after {seen} tokens")
                same(list(mine.get_mask_sizes(3)), list(ref.get_mask_sizes(3)), f"get_mask_sizes(3) after {seen}")
        return case

    def on_model():
        ids = torch.randint(0, model.config.vocab_size, (1, 24), generator=torch.Generator().manual_seed(17))
        layers = model.config.num_hidden_layers

        def logits_with(make):
            cache = Cache(layers=[make(2, 6, rope) for _ in range(layers)])
            with torch.no_grad():
                return torch.cat([model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits
                                  for t in range(ids.shape[1])], dim=1)
        same(logits_with(cls), logits_with(SinkWindowLayer), "the model's logits", atol=1e-4)

    return run("sink_window_layer", [
        ("hand case: 2 sinks, window 3, one token per step", hand),
        ("a tiny Llama's RoPE, one token per step", against_reference([1] * 20)),
        ("a tiny Llama's RoPE, a 7-token chunk then 1, 3, 1, ... tokens", against_reference([7, 1, 3, 1, 3, 1, 4])),
        ("a tiny Llama reading 24 tokens one by one through a cache of your layers (2 sinks, window 6)", on_model),
    ], quiet)
