# %% [markdown]
# # Exercises for 01 · Utilization -- putting the sink to work
#
# **What you will practise.** The bookkeeping of a StreamingLLM cache (which tokens it keeps), group-wise KV
# quantisation, ACT's redistribution of attention away from non-first sinks, and a sink + window cache of your own
# on transformers' cache interface, which then runs SmolLM2.
# **Prerequisites:** `01_utilization` sections 1, 4 and 5; what a KV cache stores; RoPE (keys are rotated by their
# position). **Time:** about 60 minutes; the last cells load SmolLM2-135M from the offline cache and stream 512
# tokens through your cache (under a minute on a CPU).
#
# Each check runs your function on hand-worked cases (`help(check.kept_positions)`) and against sinklib's code.
#
# > Generated from `solutions/01_utilization.py` by `python -m sinklib exercises`: edit the solution file, then regenerate.


# %%
import torch

from sinklib.teaching import check

# %% [markdown]
# ## Task 1 · which tokens does a sink + window cache keep?
# After `seen` tokens a cache of `n_sink` sinks and a `window` of recent tokens holds every token while
# `seen <= n_sink + window`, and afterwards tokens $0..n_{sink}-1$ plus the last `window`. Return the positions in
# increasing order.

# %%
def kept_positions(seen: int, n_sink: int, window: int) -> list[int]:
    raise NotImplementedError  # your code here


check.kept_positions(kept_positions)

# %% [markdown]
# ## Task 2 · group-wise asymmetric quantisation
# For each group of `group_size` consecutive channels: $s = (\max - \min)/(2^{b} - 1)$,
# $q = \mathrm{round}((x - \min)/s)$, $\hat x = q s + \min$. Return $\hat x$ (quantise, then dequantise), shaped like
# `x`. Hint: `x.unflatten(-1, (d // group_size, group_size))`. Guard $s = 0$ (a constant group).

# %%
def fake_quantize(x: torch.Tensor, bits: int, group_size: int) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.fake_quantize(fake_quantize)

# %% [markdown]
# ## Task 3 · ACT's calibration
# In a calibrated head every sink column $j$ becomes $\beta A_{t,j}$ and the other keys of row $t$ share the removed
# mass in proportion to their weight: $A_{t,j}(1 - \beta S_t)/(1 - S_t)$, $S_t = \sum_{j \in \text{sinks}} A_{t,j}$.
# `weights` (B, H, T, N), `sink` (B, H, N) booleans.

# %%
def act_redistribute(weights: torch.Tensor, sink: torch.Tensor, beta: float) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.act_redistribute(act_redistribute)

# %% [markdown]
# ## Task 4 · a sink + window cache on transformers' cache interface
# A transformers `Cache` is a list of layers; each layer's `update(key_states, value_states)` receives the new
# tokens' keys and values (B, H, q, hd) and returns everything the new queries attend to. Write one layer of
# StreamingLLM's cache as a `DynamicLayer`:
#
# * `update`: append the new keys/values to `self.keys`/`self.values` (`torch.cat` on dim -2); return them, then
#   keep at most `n_sink + window - 1` tokens (the first `n_sink` and the most recent), adding what you drop to
#   `self.evicted`. Your Task 1 gives the positions the returned keys must hold.
# * RoPE: keys arrive rotated at their absolute positions. StreamingLLM numbers positions *inside the cache*, so
#   after `e` evictions the window keys are all `e` closer to the queries than their absolute positions say -- which
#   is only wrong for the sinks. Return the sinks turned forward by `e`: `rotate(k, *self.rope(torch.tensor([e])))`.
#   Store them unturned.
# * `get_seq_length()`: tokens seen (stored + evicted) -- the position the next token gets.
#   `get_mask_sizes(q)`: `(stored + q, evicted)` -- how many keys the mask spans and the position of the first.
#   `DynamicLayer.get_seq_length(self)` counts the stored tokens (0 before the first update).

# %%
from transformers.cache_utils import Cache, DynamicLayer  # noqa: E402

from sinklib.utilization.sink_cache import rope_from_model, rotate  # noqa: E402, F401 (rotate: for Task 4)


class SinkWindowLayer(DynamicLayer):
    def __init__(self, n_sink: int, window: int, rope):
        super().__init__()
        self.n_sink, self.window, self.rope = n_sink, window, rope  # rope(positions (n,)) -> cos, sin (n, hd)
        self.evicted = 0  # window tokens dropped so far

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)  # self.keys, self.values: empty tensors
        raise NotImplementedError  # your code here

    def get_seq_length(self) -> int:
        raise NotImplementedError  # your code here

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        raise NotImplementedError  # your code here


check.sink_window_layer(SinkWindowLayer)

# %% [markdown]
# ## Try it on a real model
# Stream 512 held-out tokens through SmolLM2-135M with a 64-token cache made of **your** Task 4 layers, evicting the
# first tokens or keeping 4 sinks. Predict, then run: how much worse is the window-only cache once it is full?

# %%
from sinklib.core.data import text_windows  # noqa: E402
from sinklib.models.load import load_model  # noqa: E402
from sinklib.utilization import streaming  # noqa: E402

lm = load_model("smollm2-135m", device="cpu")
stream = text_windows(lm.tokenizer, 1, 512, 0, split="heldout")[0]
budget, rope = 64, rope_from_model(lm.model)
for n_sink in (0, 4):
    cache = Cache(layers=[SinkWindowLayer(n_sink, budget - n_sink, rope)
                          for _ in range(lm.model.config.num_hidden_layers)])
    nll = streaming.stream_nll(lm, stream, cache, chunk=8, progress=False)
    print(f"{n_sink} sinks + window: perplexity after the cache fills {float(nll[budget:].mean().exp()):.1f}; "
          f"the cache holds positions {kept_positions(len(stream), n_sink, budget - n_sink)[:6]} ...")

# %% [markdown]
# ## Questions to try
# 1. Set `n_sink = 1`: how much of the rescue does one sink give (StreamingLLM Table 2; `01_utilization` section 2)?
# 2. In Task 2, quantise a vector with one outlier 100x larger than the rest at 4 bits: what happens to the error of
#    the small entries? Why does that argue for keeping the sink tokens (which carry massive values) in full precision?
# 3. With $\beta = 1$ ACT changes nothing and with $\beta = 0$ the sink columns are emptied: what should a row whose
#    only visible key is a sink give, and what does your function give?
# 4. In Task 4, return the sinks without turning them (as stored): every check but the hand case fails. How much does
#    SmolLM2's perplexity above change -- is the sink's *position* or its *content* what the model needs?
