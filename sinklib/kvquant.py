"""Sink-preserving KV-cache quantisation (the IntactKV / KVSink idea), simulated on transformers 5's cache.

Keys and values are quantised group-wise (asymmetric min/max over groups of ``group_size`` channels of each
token's head vector) to ``bits`` bits and immediately dequantised ("fake quantisation": the numbers the model sees
are exactly those a real low-bit cache would give back). The first ``keep_first`` tokens -- the attention sinks --
can be kept in full precision.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer


def fake_quantize(x: torch.Tensor, bits: int, group_size: int = 32) -> torch.Tensor:
    """Group-wise asymmetric quantise-dequantise along the last dimension.

    For each group g of ``group_size`` channels: scale = (max g - min g) / (2^bits - 1), q = round((x - min) / scale),
    x_hat = q * scale + min. |x - x_hat| <= scale / 2. x (..., d) with d divisible by ``group_size``.
    """
    if bits < 1 or bits > 16:
        raise ValueError(f"bits must be in 1..16, got {bits}")
    d = x.shape[-1]
    if d % group_size:
        raise ValueError(f"last dimension {d} is not divisible by group_size {group_size}")
    g = x.float().unflatten(-1, (d // group_size, group_size))  # (..., groups, group_size)
    lo, hi = g.amin(dim=-1, keepdim=True), g.amax(dim=-1, keepdim=True)
    scale = ((hi - lo) / (2**bits - 1)).clamp_min(1e-12)
    q = torch.round((g - lo) / scale).clamp_(0, 2**bits - 1)
    return (q * scale + lo).flatten(-2).to(x.dtype)


class QuantizedKVLayer(DynamicLayer):
    """A growing cache layer whose keys/values are stored quantised, except the first ``keep_first`` tokens."""

    def __init__(self, bits: int, group_size: int = 32, keep_first: int = 0):
        super().__init__()
        self.bits, self.group_size, self.keep_first = bits, group_size, keep_first

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()  # global position of the first new token
        n_full = max(0, min(self.keep_first - start, key_states.shape[-2]))  # new tokens that stay full precision

        def quantize(x: torch.Tensor) -> torch.Tensor:
            return torch.cat([x[..., :n_full, :], fake_quantize(x[..., n_full:, :], self.bits, self.group_size)],
                             dim=-2)

        self.keys = torch.cat([self.keys, quantize(key_states)], dim=-2)
        self.values = torch.cat([self.values, quantize(value_states)], dim=-2)
        return self.keys, self.values


class QuantizedKVCache(Cache):
    """``QuantizedKVCache.for_model(model, bits=4, keep_first=4)``: every layer quantised, sinks optionally intact."""

    def __init__(self, bits: int, num_layers: int, group_size: int = 32, keep_first: int = 0):
        super().__init__(layers=[QuantizedKVLayer(bits, group_size, keep_first) for _ in range(num_layers)])

    @classmethod
    def for_model(cls, model: torch.nn.Module, bits: int, group_size: int = 32, keep_first: int = 0):
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        return cls(bits, cfg.num_hidden_layers, group_size, keep_first)
