# %% [markdown]
# # Exercises for 01 · Utilization -- putting the sink to work
#
# **What you will practise.** The bookkeeping of a StreamingLLM cache (which tokens it keeps), group-wise KV
# quantisation, and ACT's redistribution of attention away from non-first sinks.
# **Prerequisites:** `01_utilization` sections 1, 4 and 5; what a KV cache stores. **Time:** about 40 minutes; the
# last cells load SmolLM2-135M from the offline cache and stream 512 tokens (under a minute on a CPU).
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
# ## Try it on a real model
# Stream 512 held-out tokens through SmolLM2-135M with a 64-token cache, evicting the first tokens or keeping 4
# sinks (sinklib's `SinkWindowCache`, which keeps exactly your Task 1 positions). Predict, then run: how much worse
# is the window-only cache once it is full?

# %%
from sinklib.core.data import text_windows  # noqa: E402
from sinklib.core.models import load_model  # noqa: E402
from sinklib.utilization import streaming  # noqa: E402
from sinklib.utilization.sink_cache import SinkWindowCache  # noqa: E402

lm = load_model("smollm2-135m", device="cpu")
stream = text_windows(lm.tokenizer, 1, 512, 0, split="heldout")[0]
budget = 64
for n_sink in (0, 4):
    cache = SinkWindowCache.for_model(lm.model, n_sink=n_sink, window=budget - n_sink)
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
