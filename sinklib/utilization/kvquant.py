"""Sink-preserving KV-cache quantisation (the IntactKV / KVSink idea), simulated on transformers 5's cache.

Keys and values are quantised group-wise (asymmetric min/max) to ``bits`` bits and immediately dequantised ("fake
quantisation": the numbers the model sees are exactly those a real low-bit cache would give back). The first
``keep_first`` tokens -- the attention sinks -- can be kept in full precision.

Two layouts for the keys (``key_axis``):

* ``"channel"`` (default; KIVI arXiv 2402.02750, KVQuant arXiv 2401.18079): each key channel is quantised over a
  group of ``group_size`` consecutive tokens, because key outliers sit on fixed channels; values stay per token;
* ``"token"``: groups of ``group_size`` channels of each token's head vector, for keys as for values.

Simplification: token groups are formed within each cache update (a chunk of new tokens), not carried across
updates with a full-precision residual as KIVI does; with the notebook's 64-token steps and 32-token groups every
group is complete.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, DynamicLayer

from sinklib.core.claims import Claim


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


def fake_quantize_tokens(x: torch.Tensor, bits: int, group_size: int = 32) -> torch.Tensor:
    """Per-channel quantisation over token groups: for each channel, groups of ``group_size`` consecutive tokens
    (the last group may be shorter) share one min/max. x (..., n, d): tokens on dim -2."""
    parts = [fake_quantize(x[..., s:s + group_size, :].transpose(-1, -2), bits, min(group_size, x.shape[-2] - s))
             for s in range(0, x.shape[-2], group_size)]
    return torch.cat([p.transpose(-1, -2) for p in parts], dim=-2) if parts else x


KEY_AXES = ("channel", "token")


class QuantizedKVLayer(DynamicLayer):
    """A growing cache layer whose keys/values are stored quantised, except the first ``keep_first`` tokens."""

    def __init__(self, bits: int, group_size: int = 32, keep_first: int = 0, key_axis: str = "channel"):
        super().__init__()
        if key_axis not in KEY_AXES:
            raise ValueError(f"key_axis must be one of {KEY_AXES}, got {key_axis!r}")
        self.bits, self.group_size, self.keep_first, self.key_axis = bits, group_size, keep_first, key_axis

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()  # global position of the first new token
        n_full = max(0, min(self.keep_first - start, key_states.shape[-2]))  # new tokens that stay full precision

        def quantize(x: torch.Tensor, per_channel: bool) -> torch.Tensor:
            fn = fake_quantize_tokens if per_channel else fake_quantize
            return torch.cat([x[..., :n_full, :], fn(x[..., n_full:, :], self.bits, self.group_size)], dim=-2)

        self.keys = torch.cat([self.keys, quantize(key_states, self.key_axis == "channel")], dim=-2)
        self.values = torch.cat([self.values, quantize(value_states, False)], dim=-2)
        return self.keys, self.values


class QuantizedKVCache(Cache):
    """``QuantizedKVCache.for_model(model, bits=4, keep_first=4)``: every layer quantised, sinks optionally intact;
    ``key_axis="channel"`` (KIVI's per-channel keys, the default) or ``"token"``."""

    def __init__(self, bits: int, num_layers: int, group_size: int = 32, keep_first: int = 0,
                 key_axis: str = "channel"):
        super().__init__(layers=[QuantizedKVLayer(bits, group_size, keep_first, key_axis) for _ in range(num_layers)])

    @classmethod
    def for_model(cls, model: torch.nn.Module, bits: int, group_size: int = 32, keep_first: int = 0,
                  key_axis: str = "channel"):
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        return cls(bits, cfg.num_hidden_layers, group_size, keep_first, key_axis)


def uniform_causal_share(n_kept: int, n_tokens: int) -> float:
    """The share of all attention that the first ``n_kept`` keys get when every query attends uniformly over its
    causal prefix (what random weights come close to): (1/T) sum_{t=0}^{T-1} min(1, k / (t + 1)). It is far above
    k / T -- ~4 ln(T/4) / T for k = 4 -- so keeping the first tokens exact removes more than their share of the
    quantisation error on *any* causal model, sink or not: the random-weight control of the IntactKV rule."""
    return sum(min(1.0, n_kept / (t + 1)) for t in range(n_tokens)) / n_tokens


def sink_preservation_helps(kept_vs_all: dict[str, tuple[float, float, float]], n_tokens: int) -> Claim:
    """IntactKV / KVSink: keeping the sink tokens' keys and values in full precision lowers the perplexity of a
    quantised KV cache.

    Rule, per bit-width, on the paired block-bootstrap interval of ppl(sinks kept) / ppl(all quantised)
    (:func:`sinklib.core.evaluation.ppl_ratio_interval`): holds when every interval lies below 1; does not hold when any
    lies above 1; cannot be judged when an interval contains 1 and none is above (the change is not measurable on
    this text). ``kept_vs_all``: {bit-width: (ratio, low, high)}."""
    below = [hi < 1 for _, _, hi in kept_vs_all.values()]
    above = [lo > 1 for _, lo, _ in kept_vs_all.values()]
    holds = True if all(below) else False if any(above) else None
    note = "" if holds is not None else f"the 95% intervals contain 1: not measurable on {n_tokens} tokens of one text"
    return Claim(id="intactkv.keep_sinks_full_precision",
                 source="Liu et al., IntactKV, arXiv 2403.01241; Su and Yuan, KVSink, arXiv 2508.04257",
                 statement="keeping the first (sink) tokens' KV in full precision lowers a quantised cache's perplexity",
                 rule="every bit-width's 95% interval of ppl(sinks kept) / ppl(all quantised) lies below 1",
                 published=None, measured={b: list(r) for b, r in kept_vs_all.items()}, holds=holds, note=note,
                 follows="IntactKV Sec. 3 (the pivot tokens' KV cache -- [BOS] and the first tokens -- kept intact in "
                         "full precision while the rest is quantised); ruikangliu/IntactKV:intactkv/inference_model.py:"
                         "IntactKVLlamaForCausalLM (pivot KV prepended) and LlamaAttentionKVQuantized (asymmetric KV "
                         "quantiser); KVSink Sec. 4",
                 adapted="group-wise fake quantisation of the KV cache only (weights kept), the text's own first 4 "
                         "tokens kept (SmolLM2 adds no BOS), judged by a paired block-bootstrap interval instead of "
                         "a point difference",
                 at_init=False,  # the pivot tokens matter because training made them sinks with massive activations
                 draws_of=f"95% paired block-bootstrap interval over 64-token blocks of {n_tokens} tokens")
