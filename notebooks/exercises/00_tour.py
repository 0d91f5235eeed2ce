# %% [markdown]
# # Exercises for 00 · Hello, sink -- measuring a sink
#
# **What you will practise.** Turning attention probabilities into Gu et al.'s numbers (alpha_k, the sink rate),
# the uniform baseline that tells a sink from ordinary attention, DomRatio and Sun et al.'s massive-activation test.
# **Prerequisites:** `00_tour` sections 1-5; tensors and broadcasting in PyTorch. **Time:** about 45 minutes; every
# cell runs in seconds on a CPU (the last one loads SmolLM2-135M from the offline cache).
#
# Each task: a question with its formula, a function for you to write, and a check cell. `check.<task>(fn)` runs your
# function on a case worked out by hand (in the check's docstring: `help(check.alpha)`) and on random cases against
# sinklib's own code, and prints PASS or the first thing that is wrong.
#
# > Generated from `solutions/00_tour.py` by `python -m sinklib exercises`: edit the solution file, then regenerate.


# %%
import torch

from sinklib.teaching import check

# %% [markdown]
# ## Task 1 · alpha_k from an attention tensor
# $\alpha_k = \frac{1}{T-k}\sum_{t \ge k} A_{t,k}$: the mean attention key $k$ receives from the queries that can
# see it (causal: queries $t \ge k$). `attn` is (..., T, T), rows are queries; return one value per leading index.

# %%
def alpha(attn: torch.Tensor, k: int) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.alpha(alpha)

# %% [markdown]
# ## Task 2 · the sink rate
# $\mathrm{Sink}^\epsilon$ = the fraction of (sequence, layer, head) entries whose $\alpha_0$ is **strictly** above
# $\epsilon$ (Gu et al.: 0.3). `alphas` is (N, L, H). It counts heads, not attention mass.

# %%
def sink_rate(alphas: torch.Tensor, eps: float) -> float:
    raise NotImplementedError  # your code here


check.sink_rate(sink_rate)

# %% [markdown]
# ## Task 3 · what would no sink look like?
# If every query spread its attention evenly over the $t+1$ keys it sees, key 0 would get $1/(t+1)$ from query $t$,
# so $\alpha_0 = \frac{1}{T}\sum_{t=0}^{T-1}\frac{1}{t+1} = H_T/T$. Predict first: at $T = 64$, is it above or below
# Gu et al.'s $\epsilon = 0.3$?

# %%
def uniform_alpha(T: int) -> float:
    raise NotImplementedError  # your code here


check.uniform_alpha(uniform_alpha)

# %% [markdown]
# ## Task 4 · DomRatio
# $\mathrm{DomRatio}(h) = \max_j |h_j| \,/\, \mathrm{mean}_j |h_j|$ over the last dimension: about 3-4 for a Gaussian
# vector of a few hundred entries, $d$ for a one-hot vector.

# %%
def dom_ratio(h: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.dom_ratio(dom_ratio)

# %% [markdown]
# ## Task 5 · massive activations (Sun et al.)
# An entry is massive when $|h_{t,j}| > 100$ **and** $|h_{t,j}| > 1000 \times \mathrm{median}_{t',j'} |h_{t',j'}|$,
# the median over the sequence's whole layer output: all $T \times d$ entries, as the authors' code takes
# `torch.median(feat.abs())` of the $(1, T, d)$ output. `h` is $(\ldots, T, d)$ (one median per sequence); return a
# boolean tensor shaped like `h`.

# %%
def massive(h: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.massive(massive)

# %% [markdown]
# ## Try it on a real model
# Your functions on SmolLM2-135M's attention and hidden states for 8 natural-text windows of 64 tokens (the model
# comes from the offline cache). Predict, then run: which layers will have $\alpha_0$ far above the uniform baseline?

# %%
from sinklib.core.capture import Capture  # noqa: E402
from sinklib.core.data import make_inputs  # noqa: E402
from sinklib.models.load import load_model  # noqa: E402

lm = load_model("smollm2-135m", device="cpu", dtype="float32")
ids = make_inputs(lm, "natural", 8, 64, seed=0)
with torch.no_grad(), Capture(lm.model, attentions=True, hidden_states=True) as cap:
    lm.model(ids, use_cache=False)
A = cap.stack("attentions")  # (L, N, H, T, T)
h = cap.stack("hidden_states")  # (L, N, T, d)
a0 = alpha(A, 0)  # (L, N, H)
print(f"sink rate {sink_rate(a0.permute(1, 0, 2), 0.3):.1%}; uniform alpha_0 at T=64: {uniform_alpha(64):.3f}")
print("mean alpha_0 per layer:", [round(float(v), 2) for v in a0.mean(dim=(1, 2))])
print("largest DomRatio of the first token:", round(float(dom_ratio(h[:, :, 0]).max()), 1),
      "| massive entries:", int(massive(h).sum()))

# %% [markdown]
# ## Questions to try
# 1. Change $\epsilon$ from 0.3 to 0.1 and 0.5: which heads does the sink rate gain or lose?
# 2. Replace `"natural"` by `"repeated"` in `make_inputs`: what happens to $\alpha_0$, and why (00_tour section 3)?
# 3. Which layer's first token has the largest DomRatio? Is it the layer where the massive entries appear?
