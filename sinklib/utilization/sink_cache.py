"""StreamingLLM's attention-sink KV cache on transformers 5's cache interface (arXiv 2309.17453).

:class:`SinkWindowCache` keeps the first ``n_sink`` tokens' keys/values plus a window of the most recent ones, so a
model can stream far past its cache. As in StreamingLLM, positions are assigned *inside the cache*: keys are stored
before the rotary rotation (the layer's rotated key is rotated back by the position it was given) and re-rotated by
their current index in the cache at every step, so the query at cache index i sees its sinks at distance i, i-1, ...
whatever has been evicted. ``n_sink=0`` is the window-only baseline that collapses once the first tokens are gone.

Like StreamingLLM's ``evict_for_space``, the cache stores at most ``n_sink + window - 1`` tokens between steps, so a
new token attends to at most ``n_sink + window`` keys including itself.

Positions of the *queries* must be in-cache too. A manual loop (``model(ids, past_key_values=cache)``) gets that for
free: Llama-style models number new tokens from ``cache.get_seq_length()``. ``model.generate`` does not: it passes
absolute, growing ``position_ids``, so after the first eviction the query would sit at its absolute position while
its keys sit at cache indices. Wrap generate in :class:`InCachePositions` (or call
:func:`sinklib.utilization.streaming.generate`), which hands the model in-cache positions through a forward pre-hook.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.cache_utils import Cache, DynamicLayer

from sinklib.core.switch import Patch

RopeFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # positions (n,) -> cos, sin (n, head_dim)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's pairing of the two halves of the head dimension: (x1, x2) -> (-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_from_model(model: torch.nn.Module) -> RopeFn:
    """cos/sin for given positions from the model's own rotary embedding (Llama/Mistral/Qwen-style models)."""
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if rotary is None:
        raise TypeError(f"{type(model).__name__} has no single `model.rotary_emb`; the sink cache needs RoPE.")

    def rope(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probe = torch.zeros(1, device=positions.device, dtype=torch.float32)
        cos, sin = rotary(probe, positions[None])  # (1, n, head_dim)
        return cos[0].float(), sin[0].float()

    return rope


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply RoPE: x cos + rotate_half(x) sin. x (B, H, n, hd); cos, sin (n, hd)."""
    return x * cos + rotate_half(x) * sin


def unrotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rotate` (also when cos/sin carry an attention scaling s: cos^2 + sin^2 = s^2)."""
    return (x * cos - rotate_half(x) * sin) / (cos * cos + sin * sin)


class SinkWindowLayer(DynamicLayer):
    """One layer of the sink + window cache (keys stored un-rotated)."""

    def __init__(self, n_sink: int, window: int, rope: RopeFn):
        super().__init__()
        if n_sink < 0 or window < 1:
            raise ValueError(f"need n_sink >= 0 and window >= 1, got {n_sink} and {window}")
        self.n_sink, self.window, self.rope = n_sink, window, rope
        self.evicted = 0

    @property
    def capacity(self) -> int:
        """Tokens kept between steps (a new token then attends to ``capacity + 1`` keys)."""
        return self.n_sink + self.window - 1

    def update(self, key_states, value_states, *args, **kwargs):
        """Take the new (rotated) keys at cache indices stored..stored+q-1; return all keys rotated by cache index."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        stored, q = self.get_seq_length(), key_states.shape[-2]
        dev = key_states.device
        cos, sin = self.rope(torch.arange(stored, stored + q, device=dev))
        raw = unrotate(key_states.float(), cos, sin).to(key_states.dtype)
        keys = torch.cat([self.keys, raw], dim=-2)  # (B, H_kv, stored + q, hd), un-rotated
        values = torch.cat([self.values, value_states], dim=-2)
        n = keys.shape[-2]
        cos, sin = self.rope(torch.arange(n, device=dev))
        out_keys = rotate(keys.float(), cos, sin).to(key_states.dtype)  # positions = cache indices 0..n-1
        if n > self.capacity:  # evict the oldest window tokens, never the sinks
            recent = torch.arange(n - (self.window - 1), n, device=dev)
            keep = torch.cat([torch.arange(self.n_sink, device=dev), recent])
            self.evicted += n - len(keep)
            self.keys, self.values = keys[..., keep, :], values[..., keep, :]
        else:
            self.keys, self.values = keys, values
        return out_keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def get_max_length(self) -> int:
        return self.n_sink + self.window


class SinkWindowCache(Cache):
    """Sink + window KV cache for every layer of a model: ``SinkWindowCache.for_model(model, n_sink=4, window=252)``.

    Works with ``model(ids, past_key_values=cache)`` token by token or in chunks, and with ``model.generate(...,
    past_key_values=cache)`` inside ``with InCachePositions(model):`` (see the module docstring).
    ``n_sink=0`` gives the window-only cache.
    """

    def __init__(self, n_sink: int, window: int, rope: RopeFn, num_layers: int):
        super().__init__(layers=[SinkWindowLayer(n_sink, window, rope) for _ in range(num_layers)])
        self.n_sink, self.window = n_sink, window

    @classmethod
    def for_model(cls, model: torch.nn.Module, n_sink: int, window: int) -> SinkWindowCache:
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        return cls(n_sink, window, rope_from_model(model), cfg.num_hidden_layers)

    @property
    def evicted(self) -> int:
        return self.layers[0].evicted if self.layers else 0


class InCachePositions(Patch):
    """Context manager: while active, every forward of ``model`` that uses a :class:`SinkWindowCache` gets
    ``position_ids`` = its cache indices (stored .. stored + q - 1) instead of whatever the caller passed -- the
    positions StreamingLLM assigns. Needed for ``model.generate``, which passes absolute positions."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def _install(self) -> None:
        self._handles.append(self.model.register_forward_pre_hook(self._positions, with_kwargs=True))

    @staticmethod
    def _positions(module, args, kwargs):
        cache = kwargs.get("past_key_values")
        if not isinstance(cache, SinkWindowCache):
            return None
        ids = kwargs.get("input_ids", args[0] if args else None)
        ref = ids if ids is not None else kwargs["inputs_embeds"]
        stored, q = cache.get_seq_length(), ref.shape[1]
        kwargs["position_ids"] = torch.arange(stored, stored + q, device=ref.device)[None].expand(ref.shape[0], -1)
        return args, kwargs


def cache_bytes(cache: Cache) -> int:
    """Bytes held by the stored keys and values of every layer of a transformers cache."""
    return sum(t.numel() * t.element_size() for layer in cache.layers if getattr(layer, "is_initialized", False)
               for t in (layer.keys, layer.values))
