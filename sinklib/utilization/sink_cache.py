"""StreamingLLM's attention-sink KV cache on transformers 5's cache interface (arXiv 2309.17453).

:class:`SinkWindowCache` keeps the first ``n_sink`` tokens' keys/values plus a window of the most recent ones, so a
model can stream far past its cache. StreamingLLM assigns positions *inside the cache*: the query at cache index i
sees its sinks at distances i, i-1, ... and the window keys at their distance in the cache, whatever has been
evicted. ``n_sink=0`` is the window-only baseline that collapses once the first tokens are gone.

With RoPE only distances matter, so this cache gets those distances without re-rotating the cache at every step
(StreamingLLM's own code re-rotates every key every step): queries and window keys keep their *absolute* positions
(the model rotates them as usual; a window key is stored as the layer handed it and never touched again), and the
sinks -- the only keys whose distance to the query is not their absolute one -- are rotated forward by the number
of evicted tokens, ``n_sink`` keys per step. Query at absolute position ``e + i`` (e evicted, i its cache index),
window key at ``e + c``: distance ``i - c``; sink j rotated to ``j + e``: distance ``i - j``. As transformers' own
sliding-window layer, :meth:`SinkWindowLayer.get_seq_length` counts every token seen (so ``model(...)`` loops and
``model.generate`` both number new tokens absolutely) and ``get_mask_sizes`` reports the evicted count as the key
offset. Models whose RoPE depends on the absolute position beyond training ("dynamic" scaling) would see a
different rotation than StreamingLLM's in-cache positions give them.

Like StreamingLLM's ``evict_for_space``, the cache stores at most ``n_sink + window - 1`` tokens between steps, so a
new token attends to at most ``n_sink + window`` keys including itself.

Evaluating a stream in steps of several tokens costs one forward per step; :meth:`SinkWindowCache.stepped` gives the
same attention in one forward of many steps: each step gets its own copy of the sinks, rotated by the evicted count
it would have seen, and a 4-D mask shows each query the window the cache would then have held.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from transformers.cache_utils import Cache, DynamicLayer

from sinklib.core.errors import InputError

RopeFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # positions (n,) -> cos, sin (n, head_dim)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE's pairing of the two halves of the head dimension: (x1, x2) -> (-x2, x1)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def has_rope(model: torch.nn.Module) -> bool:
    """Whether the model rotates queries and keys by position with a ``rotary_emb`` (what the sink cache re-applies
    inside the cache); GPT-2's learned absolute positions, for one, are not."""
    return getattr(getattr(model, "model", model), "rotary_emb", None) is not None


def why_no_sink_cache(model: torch.nn.Module) -> str:
    """Why the sink cache cannot run on ``model`` ("" when it can): it re-rotates cached keys to positions inside the
    cache, so it needs rotary positions applied to full keys. GPT-2's learned absolute positions cannot be
    re-assigned; multi-head latent attention (DeepSeek-V2: ``kv_lora_rank``) caches a compressed latent and the
    rotary part of the key separately, with complex rotary factors."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(cfg, "kv_lora_rank", None):
        return (f"{type(model).__name__} uses multi-head latent attention (its cache holds a compressed latent, not "
                f"the rotated keys the sink cache re-rotates)")
    if not has_rope(model):
        return (f"{type(model).__name__} has no rotary position embedding (learned absolute positions cannot be "
                f"re-assigned inside the cache)")
    return ""


def rope_from_model(model: torch.nn.Module, layer_type: str | None = None) -> RopeFn:
    """cos/sin for given positions from the model's own rotary embedding (Llama/Mistral/Qwen-style models).

    Models with one RoPE per attention type (Gemma-3: base 10k for "sliding_attention", 1M for "full_attention";
    the rotary module lists them in ``layer_types``) need ``layer_type``; a model with a single type takes it.
    """
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if rotary is None:
        raise TypeError(f"{type(model).__name__} has no single `model.rotary_emb`; the sink cache needs RoPE.")
    types = getattr(rotary, "layer_types", None)  # only the per-type rotary modules carry it
    if types is not None:
        if layer_type is None and len(types) == 1:
            layer_type = types[0]
        if layer_type not in types:
            raise ValueError(f"{type(model).__name__} has one RoPE per attention type {list(types)}: pass "
                             f"layer_type= one of them (got {layer_type!r})")
    extra = () if types is None else (layer_type,)

    def rope(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        probe = torch.zeros(1, device=positions.device, dtype=torch.float32)
        cos, sin = rotary(probe, positions[None], *extra)  # (1, n, head_dim)
        # a model split over GPUs keeps its rotary module on one of them: hand the angles to the caller's device
        return cos[0].float().to(positions.device), sin[0].float().to(positions.device)

    return rope


def ropes_by_layer(model: torch.nn.Module) -> list[RopeFn]:
    """One :func:`rope_from_model` per decoder layer: the layer's own RoPE where the model has one per attention
    type (``config.layer_types``), else the model's single RoPE for every layer."""
    cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    rotary = getattr(getattr(model, "model", model), "rotary_emb", None)
    if getattr(rotary, "layer_types", None) is None:
        return [rope_from_model(model)] * cfg.num_hidden_layers
    by_type = {t: rope_from_model(model, t) for t in set(cfg.layer_types)}
    return [by_type[t] for t in cfg.layer_types]


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply RoPE: x cos + rotate_half(x) sin. x (B, H, n, hd); cos, sin (n, hd)."""
    return x * cos + rotate_half(x) * sin


def unrotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`rotate` (also when cos/sin carry an attention scaling s: cos^2 + sin^2 = s^2)."""
    return (x * cos - rotate_half(x) * sin) / (cos * cos + sin * sin)


class SinkWindowLayer(DynamicLayer):
    """One layer of the sink + window cache: keys stored as rotated by the model at their absolute positions."""

    def __init__(self, n_sink: int, window: int, rope: RopeFn):
        super().__init__()
        if n_sink < 0 or window < 1:
            raise ValueError(f"need n_sink >= 0 and window >= 1, got {n_sink} and {window}")
        self.n_sink, self.window, self.rope = n_sink, window, rope
        self.evicted = 0
        self.step: int | None = None  # set: one update computes consecutive updates of ``step`` tokens (see below)

    @property
    def capacity(self) -> int:
        """Tokens kept between steps (a new token then attends to ``capacity + 1`` keys)."""
        return self.n_sink + self.window - 1

    @property
    def stored(self) -> int:
        """Tokens held now (sinks + window)."""
        return super().get_seq_length()

    def update(self, key_states, value_states, *args, **kwargs):
        """Append the new keys (rotated by the model at their absolute positions); return every key with the sinks
        rotated forward by the evicted count, so each sits at its StreamingLLM distance from the queries."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self.step is not None:
            return self._update_in_steps(key_states, value_states)
        keys = torch.cat([self.keys, key_states], dim=-2)  # (B, H_kv, stored + q, hd)
        values = torch.cat([self.values, value_states], dim=-2)
        out_keys = keys
        sinks = min(self.n_sink, keys.shape[-2])
        if self.evicted and sinks:  # only the n_sink sink keys move; the window keeps the model's own rotation
            cos, sin = self.rope(torch.tensor([self.evicted], device=keys.device))  # (1, hd)
            moved = rotate(keys[..., :sinks, :].float(), cos, sin).to(keys.dtype)
            out_keys = torch.cat([moved, keys[..., sinks:, :]], dim=-2)
        self._keep(keys, values)
        return out_keys, values

    def _update_in_steps(self, key_states, value_states):
        """One update of q new tokens that gives every query what ``ceil(q / step)`` consecutive updates of ``step``
        tokens would have shown it, under the mask of :func:`stepped_mask` (:meth:`SinkWindowCache.stepped`).

        Step g (first token at position s_g) sees the sinks rotated forward by e_g = max(0, s_g - capacity), the
        evicted count before it: the returned keys are [one copy of the sinks per step with e_g > 0 (each rotated
        by its e_g), stored keys, new keys]; values likewise (sink values copied unrotated). The cache keeps what the
        last of those updates would leave: the sinks and the most recent ``capacity - n_sink`` tokens.
        """
        keys = torch.cat([self.keys, key_states], dim=-2)  # (B, H_kv, stored + q, hd)
        values = torch.cat([self.values, value_states], dim=-2)
        shifts = [e for _, e in _steps(self.stored + self.evicted, key_states.shape[-2], self.step, self.capacity)
                  if e > 0]
        if self.n_sink and shifts:  # e_g > 0 means s_g > capacity >= n_sink: every sink is stored
            cos, sin = self.rope(torch.tensor(shifts, device=keys.device))  # (S, hd)
            sinks = keys[..., :self.n_sink, :].float()  # (B, H_kv, n, hd)
            moved = rotate(sinks[:, :, None], cos[:, None], sin[:, None]).to(keys.dtype)  # (B, H_kv, S, n, hd)
            copies = values[..., :self.n_sink, :][:, :, None].expand(-1, -1, len(shifts), -1, -1)
            out_keys = torch.cat([moved.flatten(2, 3), keys], dim=-2)
            out_values = torch.cat([copies.flatten(2, 3), values], dim=-2)
        else:
            out_keys, out_values = keys, values
        self._keep(keys, values)  # what the last step leaves
        return out_keys, out_values

    def _keep(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Store (B, H_kv, n, hd) keys / values, evicting the oldest window tokens (never the sinks) past capacity."""
        drop = keys.shape[-2] - self.capacity
        if drop > 0:
            self.evicted += drop
            keys = torch.cat([keys[..., :self.n_sink, :], keys[..., self.n_sink + drop:, :]], dim=-2)
            values = torch.cat([values[..., :self.n_sink, :], values[..., self.n_sink + drop:, :]], dim=-2)
        self.keys, self.values = keys, values

    def stepped_mask(self, q: int, device: torch.device | None = None) -> torch.Tensor:
        """Which keys each of the next ``q`` queries may see when they are fed in one update emulating steps of
        ``self.step`` tokens: (q, S n_sink + stored + q) bool, columns laid out as :meth:`_update_in_steps` returns
        the keys.

        Query p of step g (first position s_g, e_g evicted before it) sees, as the step-by-step cache shows it:
        with e_g = 0 every key at position <= p (nothing evicted yet); with e_g > 0 its own copy of the sinks and
        the keys at positions in [max(n_sink, s_g - capacity + n_sink), p] (the window the cache then holds, and
        the step's own tokens up to p)."""
        seen, n, cap = self.stored + self.evicted, self.n_sink, self.capacity
        steps = _steps(seen, q, self.step, cap)
        if self.evicted:  # stored: the sinks, then the most recent tokens
            stored = torch.cat([torch.arange(n), torch.arange(seen - (self.stored - n), seen)])
        else:
            stored = torch.arange(self.stored)
        pos = torch.cat([stored, torch.arange(seen, seen + q)])  # (K,) position of each stored or new key
        query = torch.arange(seen, seen + q)  # (q,)
        first = torch.zeros(q, dtype=torch.long)  # lowest window position each query sees
        copy = torch.full((q,), -1)  # index of the query's sink copy (-1: none)
        n_copies = 0
        for g, (lo, e) in enumerate(steps):
            hi = steps[g + 1][0] if g + 1 < len(steps) else q
            if e > 0:
                first[lo:hi] = max(n, seen + lo - cap + n)
                copy[lo:hi] = n_copies
                n_copies += 1
        own = (pos[None] <= query[:, None]) & (pos[None] >= first[:, None])  # (q, K)
        sinks = torch.zeros(q, n_copies * n, dtype=torch.bool)
        if n and n_copies:
            cols = torch.arange(n_copies * n) // n  # copy of each sink column
            sinks = cols[None] == copy[:, None]
        return torch.cat([sinks, own], dim=1).to(device)

    def get_seq_length(self) -> int:
        """Every token seen (stored + evicted): the position the next token gets, as in a sliding-window layer."""
        return self.stored + self.evicted

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(keys attended, position of the first): key j sits at ``evicted + j``, so the causal mask only has to
        order the new chunk's tokens (the sinks and the window are all earlier)."""
        return self.stored + query_length, self.evicted

    def get_max_length(self) -> int:
        return self.n_sink + self.window


def _steps(seen: int, q: int, step: int, capacity: int) -> list[tuple[int, int]]:
    """(offset in the update, tokens evicted before it) of each step of ``step`` tokens among ``q`` new tokens fed
    after ``seen``: step g starts at s_g = seen + g step, when the cache holds min(s_g, capacity) tokens."""
    return [(lo, max(0, seen + lo - capacity)) for lo in range(0, q, step)]


class SinkWindowCache(Cache):
    """Sink + window KV cache for every layer of a model: ``SinkWindowCache.for_model(model, n_sink=4, window=252)``.

    Works with ``model(ids, past_key_values=cache)`` token by token or in chunks, and with ``model.generate(...,
    past_key_values=cache)``: both number a token from ``cache.get_seq_length()``, which counts every token seen.
    ``n_sink=0`` gives the window-only cache.
    """

    def __init__(self, n_sink: int, window: int, rope: RopeFn | Sequence[RopeFn], num_layers: int):
        ropes = list(rope) if isinstance(rope, Sequence) else [rope] * num_layers  # one per layer
        if len(ropes) != num_layers:
            raise ValueError(f"{len(ropes)} RoPE functions for {num_layers} layers")
        super().__init__(layers=[SinkWindowLayer(n_sink, window, r) for r in ropes])
        self.n_sink, self.window = n_sink, window

    @classmethod
    def for_model(cls, model: torch.nn.Module, n_sink: int, window: int) -> SinkWindowCache:
        why = why_no_sink_cache(model)
        if why:
            raise InputError(f"StreamingLLM's sink cache cannot run here: {why}; use a model with RoPE on full keys "
                             f"(Llama, Mistral, Qwen, Gemma, OLMoE, Mixtral).")
        ropes = ropes_by_layer(model)
        return cls(n_sink, window, ropes, len(ropes))

    @property
    def evicted(self) -> int:
        return self.layers[0].evicted if self.layers else 0

    def stepped(self, step: int) -> Stepped:
        """``with cache.stepped(16) as mask_for:`` while active, a forward of many tokens gives exactly the
        attention that feeding them ``step`` at a time would (StreamingLLM's evaluation in chunks), at the cost of
        one forward: ``model(ids, past_key_values=cache, attention_mask=mask_for(len(ids)))``. Each forward must
        start at a step boundary (a multiple of ``step`` tokens after the previous one)."""
        return Stepped(self, step)


class Stepped:
    """Context of :meth:`SinkWindowCache.stepped`: sets ``step`` on every layer and builds the additive 4-D mask,
    (1, 1, q, K) in the model's dtype (0 where a query may look, the dtype's minimum elsewhere)."""

    def __init__(self, cache: SinkWindowCache, step: int):
        if step < 1:
            raise ValueError(f"step must be >= 1, got {step}")
        self.cache, self.step = cache, step

    def __enter__(self) -> Callable[..., torch.Tensor]:
        for layer in self.cache.layers:
            layer.step = self.step
        return self.mask

    def __exit__(self, *exc) -> None:
        for layer in self.cache.layers:
            layer.step = None

    def mask(self, q: int, dtype: torch.dtype = torch.float32, device: torch.device | None = None) -> torch.Tensor:
        allowed = self.cache.layers[0].stepped_mask(q, device)  # every layer holds the same positions
        zero = torch.zeros((), dtype=dtype, device=device)
        return torch.where(allowed, zero, torch.finfo(dtype).min)[None, None]


def cache_bytes(cache: Cache) -> int:
    """Bytes held by the stored keys and values of every layer of a transformers cache."""
    return sum(t.numel() * t.element_size() for layer in cache.layers if getattr(layer, "is_initialized", False)
               for t in (layer.keys, layer.values))
