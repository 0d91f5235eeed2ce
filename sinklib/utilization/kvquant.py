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

import math

import torch
from transformers.cache_utils import Cache, DynamicLayer

from sinklib.core import quantities as q
from sinklib.core.claims import Claim
from sinklib.core.takeaways import pct


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
    """A growing cache layer whose keys/values are stored quantised, except ``keep_first`` tokens from position
    ``keep_from`` on (default: the first tokens, the sinks; ``keep_from`` > 0 keeps as many *non-initial* tokens exact,
    the position-matched control of :func:`sink_preservation_helps`). The kept tokens stay out of the quantiser's
    groups: the others are quantised as one contiguous run, as if the kept ones were not there (IntactKV prepends
    them)."""

    def __init__(self, bits: int, group_size: int = 32, keep_first: int = 0, key_axis: str = "channel",
                 keep_from: int = 0):
        super().__init__()
        if key_axis not in KEY_AXES:
            raise ValueError(f"key_axis must be one of {KEY_AXES}, got {key_axis!r}")
        if keep_from < 0 or keep_first < 0:
            raise ValueError(f"keep_first and keep_from must be >= 0, got {keep_first} and {keep_from}")
        self.bits, self.group_size, self.keep_first, self.key_axis = bits, group_size, keep_first, key_axis
        self.keep_from = keep_from

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start = self.get_seq_length()  # global position of the first new token
        pos = torch.arange(start, start + key_states.shape[-2], device=key_states.device)  # (n,)
        quantised = (pos < self.keep_from) | (pos >= self.keep_from + self.keep_first)  # (n,) not kept exact

        def quantize(x: torch.Tensor, per_channel: bool) -> torch.Tensor:
            fn = fake_quantize_tokens if per_channel else fake_quantize
            out = x.clone()
            out[..., quantised, :] = fn(x[..., quantised, :], self.bits, self.group_size)
            return out

        self.keys = torch.cat([self.keys, quantize(key_states, self.key_axis == "channel")], dim=-2)
        self.values = torch.cat([self.values, quantize(value_states, False)], dim=-2)
        return self.keys, self.values


class QuantizedKVCache(Cache):
    """``QuantizedKVCache.for_model(model, bits=4, keep_first=4)``: every layer quantised, sinks optionally intact;
    ``key_axis="channel"`` (KIVI's per-channel keys, the default) or ``"token"``; ``keep_from``: where the exact
    tokens start (0: the sinks)."""

    def __init__(self, bits: int, num_layers: int, group_size: int = 32, keep_first: int = 0,
                 key_axis: str = "channel", keep_from: int = 0):
        super().__init__(layers=[QuantizedKVLayer(bits, group_size, keep_first, key_axis, keep_from)
                                 for _ in range(num_layers)])

    @classmethod
    def for_model(cls, model: torch.nn.Module, bits: int, group_size: int = 32, keep_first: int = 0,
                  key_axis: str = "channel", keep_from: int = 0):
        cfg = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        return cls(bits, cfg.num_hidden_layers, group_size, keep_first, key_axis, keep_from)


def uniform_causal_share(n_kept: int, n_tokens: int, start: int = 0) -> float:
    """The share of all attention that keys ``start`` .. ``start + n_kept - 1`` get when every query attends uniformly
    over its causal prefix (what random weights come close to): (1/T) sum_{t=0}^{T-1} |[s, s+k) n [0, t]| / (t + 1).
    For the first k keys (s = 0) it is (1/T) sum_t min(1, k / (t + 1)) ~ k ln(T/k) / T, far above k / T: keeping the
    first tokens exact removes more than their share of the quantisation error on *any* causal model, sink or not.
    The next k keys (s = k) get nearly as much, which is why they are the position-matched control."""
    end = start + n_kept
    return sum(max(0, min(end, t + 1) - start) / (t + 1) for t in range(n_tokens)) / n_tokens


# IntactKV's KV-cache claim is made at INT4 (ruikangliu/IntactKV README "KV Cache Quantization": w3g128kv4 with AWQ;
# intactkv_quarot.py W4A4KV4), with an asymmetric per-token, per-head min/max quantiser
# (intactkv/inference_model.py:LlamaAttentionKVQuantized, utils/quantizer.py:UniformAffineQuantizer): of the
# notebook's settings, the 4-bit cache with keys per token. 2 bits is this project's stress test, reported beside.
PAPER_SETTING = "4-bit, keys per token"
N_KEPT = 4  # the first tokens kept exact (IntactKV's pivot: here the text's own first 4), and as many after them
SINKS = "4 sink tokens kept"  # the first 4 tokens exact
MATCHED = "tokens 4-7 kept"  # as many non-initial tokens exact: the position-matched control
ALL = "all tokens quantised"

Interval = tuple[float, float, float]  # (ratio, low, high), :func:`sinklib.core.evaluation.ppl_ratio_interval`

# ppl(first 4 kept) / ppl(other cache), its interval's ends included: a ratio of two perplexities of a quantised cache
KV_RATIO = q.Quantity(kind=q.Kind.RATIO, rel_tol=0.08, abs_tol=0.0,
                      why="the cache rounds keys and values to 2 or 4 bits: a 1e-5 difference moves an entry across "
                          "a rounding step; another machine (Intel, AMX) moved SmolLM2's 2-bit ratio 0.946 -> 0.905 "
                          "(4.3 %)")
INTACTKV_QUANTITIES = {"vs all quantised": KV_RATIO, "vs tokens 4-7 kept": KV_RATIO}  # {setting: [ratio, low, high]}


# How many times a run's tokens a rerun could read within the budgets (make figures <= 30 min cold, section 4 of 01 is
# a small part of it): beyond this, a note says the measurement that would tell was not made.
AFFORDABLE_TOKENS = 8


def tokens_to_tell(iv: Interval, n_tokens: int) -> int | None:
    """About how many tokens would put 1 outside the interval ``iv`` = (ratio, low, high) measured on ``n_tokens``,
    were the ratio the same: a bootstrap interval's half-width w shrinks as 1/sqrt(tokens), so it needs
    n_tokens (w / |ratio - 1|)^2 (None when the ratio is 1, or 1 is already outside)."""
    ratio, low, high = iv
    if low > 1 or high < 1 or ratio == 1:
        return None
    half = (high - low) / 2
    return int(math.ceil(n_tokens * (half / abs(ratio - 1)) ** 2))


def _side(iv: Interval) -> str:
    return "below 1" if iv[2] < 1 else "above 1" if iv[1] > 1 else "contains 1"


def change_interval(iv: Interval) -> str:
    """A perplexity ratio and its interval as signed changes, for a takeaway: (0.91, 0.85, 0.98) -> "-9.0% [-15%,
    -2.0%], an interval below 1" (the side of 1 as :func:`sink_preservation_helps` reads it)."""
    def signed(x: float) -> str:
        return f"{'+' if x >= 0 else '-'}{pct(abs(x))}"

    side = _side(iv).replace("contains", "containing")
    return f"{signed(iv[0] - 1)} [{signed(iv[1] - 1)}, {signed(iv[2] - 1)}], an interval {side}"


def _needs(iv: Interval, n_tokens: int) -> str:
    """The note's clause on how many tokens would tell (:func:`tokens_to_tell`)."""
    need = tokens_to_tell(iv, n_tokens)
    if need is None:
        return ""
    told = (f"; at the measured ratio {iv[0]:.3f} ([{iv[1]:.3f}, {iv[2]:.3f}]) about {need:,} tokens would put 1 "
            f"outside the interval (its half-width shrinks as 1/sqrt(tokens))")
    if need <= n_tokens * AFFORDABLE_TOKENS:
        return told
    return (told + f"; not measured on that many: {need / n_tokens:,.0f}x this run's {n_tokens:,} tokens, beyond "
                   f"the {AFFORDABLE_TOKENS}x a profile can afford -- the GPU profile's longer stream narrows it")


def sink_preservation_helps(kept_vs_all: dict[str, Interval], kept_vs_matched: dict[str, Interval], n_tokens: int,
                            setting: str = PAPER_SETTING) -> Claim:
    """IntactKV / KVSink: keeping the sink tokens' keys and values in full precision lowers the perplexity of a
    quantised KV cache -- because they are the sinks, not because they are early.

    Judged at ``setting``, the bit-width and layout the paper's KV-cache claim is made at (:data:`PAPER_SETTING`), on
    two paired block-bootstrap intervals: a = ppl(first 4 kept) / ppl(all quantised) and, the position-matched
    control, b = ppl(first 4 kept) / ppl(tokens 4-7 kept) -- as many *non-initial* tokens exact, which uniform causal
    attention would weigh almost as much (:func:`uniform_causal_share`). Holds when both intervals lie below 1; does
    not hold when either lies above 1; cannot be judged when a contains 1 (no measurable gain), or when a lies below
    1 but b contains 1 (a gain, but not told apart from keeping any early tokens exact). ``kept_vs_all`` /
    ``kept_vs_matched``: {setting:
    (ratio, low, high)}; every setting's numbers are recorded, only ``setting`` is judged."""
    if setting not in kept_vs_all or setting not in kept_vs_matched:
        raise ValueError(f"the judged setting {setting!r} is missing; measured {sorted(kept_vs_all)}")
    a, b = kept_vs_all[setting], kept_vs_matched[setting]
    if a[1] > 1 or b[1] > 1:
        holds = False
        note = ("keeping the first 4 tokens exact raises perplexity" if a[1] > 1 else
                "keeping tokens 4-7 exact does better than keeping the first 4: the gain is not the sinks'")
    elif a[2] < 1 and b[2] < 1:
        holds, note = True, ""
    elif a[2] < 1:
        holds = None
        note = (f"at {setting} keeping the first 4 tokens exact lowers perplexity (interval below 1), but no more "
                f"measurably than keeping tokens 4-7 exact (interval contains 1): on {n_tokens} tokens of one text "
                f"the gain cannot be told from the gain of keeping any early tokens" + _needs(b, n_tokens))
    else:
        holds = None
        note = (f"at {setting} the interval of ppl(sinks kept) / ppl(all quantised) contains 1: not measurable on "
                f"{n_tokens} tokens of one text" + _needs(a, n_tokens))
    return Claim(id="intactkv.keep_sinks_full_precision",
                 source="Liu et al., IntactKV, arXiv 2403.01241; Su and Yuan, KVSink, arXiv 2508.04257",
                 paper="2403.01241",
                 statement="keeping the first (sink) tokens' KV in full precision lowers a quantised cache's "
                           "perplexity",
                 rule=f"at {setting} (IntactKV's INT4 KV cache): the 95% intervals of ppl(first 4 kept) / ppl(all "
                      f"quantised) and of ppl(first 4 kept) / ppl(tokens 4-7 kept, the position-matched control) "
                      f"both lie below 1; either above 1 does not hold",
                 published=None,
                 measured={"judged at": setting, "vs all quantised": {k: list(v) for k, v in kept_vs_all.items()},
                           "vs tokens 4-7 kept": {k: list(v) for k, v in kept_vs_matched.items()},
                           "sides": {"vs all quantised": _side(a), "vs tokens 4-7 kept": _side(b)}},
                 quantities=INTACTKV_QUANTITIES, holds=holds, note=note,
                 follows="IntactKV Sec. 3 (the pivot tokens' KV cache -- [BOS] and the first tokens -- kept intact in "
                         "full precision while the rest is quantised) and its INT4 KV-cache results (README: "
                         "w3g128kv4; W4A4KV4 with QuaRot); ruikangliu/IntactKV:intactkv/inference_model.py:"
                         "IntactKVLlamaForCausalLM (pivot KV prepended) and LlamaAttentionKVQuantized (asymmetric "
                         "per-token min/max KV quantiser, utils/quantizer.py:UniformAffineQuantizer); KVSink Sec. 4",
                 adapted="fake quantisation of the KV cache only (weights kept; the paper also quantises weights), "
                         "per token over the whole head as the authors' quantiser; the text's own first 4 tokens kept "
                         "as the pivot (SmolLM2 adds no BOS; IntactKV's pivot is [BOS] and the first tokens); "
                         "judged by "
                         "paired block-bootstrap intervals and against keeping tokens 4-7 exact (our control), not by "
                         "a point difference",
                 at_init=False,  # the pivot tokens matter because training made them sinks with massive activations
                 draws_of=f"95% paired block-bootstrap interval over 64-token blocks of {n_tokens} tokens")


def control_explanation(n_tokens: int, n_kept: int = N_KEPT) -> str:
    """Why keeping the first tokens exact helps on random weights too: near-uniform causal attention already gives
    the first ``n_kept`` keys :func:`uniform_causal_share` of all attention (far above n_kept / T), and the next
    ``n_kept`` almost as much -- so the rule compares with those, not with nothing."""
    first, nxt = uniform_causal_share(n_kept, n_tokens), uniform_causal_share(n_kept, n_tokens, n_kept)
    return (f"attention close to uniform over each causal prefix gives the first {n_kept} keys {first:.1%} of all "
            f"attention over {n_tokens} tokens ({n_kept / n_tokens:.1%} of the keys) and tokens {n_kept}-"
            f"{2 * n_kept - 1} {nxt:.1%}: exact copies of early keys remove quantisation error whether or not they "
            f"are sinks, so the rule asks that the first {n_kept} beat tokens {n_kept}-{2 * n_kept - 1}")


def control_note(control: Claim, n_tokens: int) -> str:
    """The note the claim carries beside its random-weight ``control`` (:meth:`sinklib.core.claims_file.Recorder.add`):
    where the rule holds on random weights too, why (:func:`control_explanation` over ``n_tokens``); else ""."""
    return f"on random weights the rule holds too: {control_explanation(n_tokens)}" if control.holds else ""
