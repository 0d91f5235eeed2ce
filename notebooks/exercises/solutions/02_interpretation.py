# %% [markdown]
# # Exercises for 02 · Interpretation -- why a sink forms
#
# **What you will practise.** The first steps of the structural-origin chain as code: the variance discrepancy of
# the first position, finding a super neuron, and the mask edit that makes a sink at any position.
# **Prerequisites:** `02_interpretation` sections 1-5; a SwiGLU MLP. **Time:** about 40 minutes; the last cells load
# SmolLM2-135M from the offline cache and run it on 8 short windows, with and without your mask edit (seconds).
#
# Each check runs your function on hand-worked cases (`help(check.self_only_mask)`) and against sinklib's code.

# %%
import torch

from sinklib.teaching import check

# %% [markdown]
# ## Task 1 · variance per position
# For x of shape (N, T, d) (N sequences): $v_t = \mathrm{mean}_f \mathrm{Var}_n[x_{n,t,f}]$, the population variance
# (divide by N). Under a causal mask token 0's head output is its own value vector, a later token's a mix of many:
# predict which end of $v_t$ is larger.

# %%
def position_variance(x: torch.Tensor) -> torch.Tensor:
    # BEGIN SOLUTION
    return x.float().var(dim=0, unbiased=False).flatten(1).mean(dim=1)
    # END SOLUTION


check.position_variance(position_variance)

# %% [markdown]
# ## Task 2 · the candidate super neuron
# `acts` (N, T, F) are a layer's MLP activations $\mathrm{SiLU}(x W_{gate}) \odot (x W_{up})$ (the input of
# $W_{down}$). Return the neuron whose largest $|a|$ on the **first** token (over the N sequences) is the largest.

# %%
def super_neuron(acts: torch.Tensor) -> int:
    # BEGIN SOLUTION
    return int(acts[:, 0].abs().amax(dim=0).argmax())
    # END SOLUTION


check.super_neuron(super_neuron)

# %% [markdown]
# ## Task 3 · make a sink at position k
# Edit an additive attention mask (T, T) so that token k attends only to itself: row k is 0 at column k and
# $-\infty$ elsewhere; the other rows are unchanged; do not modify the mask you are given.

# %%
def self_only_mask(mask: torch.Tensor, k: int) -> torch.Tensor:
    # BEGIN SOLUTION
    out = mask.clone()
    out[k] = float("-inf")
    out[k, k] = 0.0
    return out
    # END SOLUTION


check.self_only_mask(self_only_mask)

# %% [markdown]
# ## Try it on a real model
# SmolLM2-135M, 8 natural windows of 32 tokens: your Task 1 on layer 0's head outputs (captured before $W_O$) and
# your Task 2 on layer 1's MLP activations; then your Task 3 edit in every layer (`MaskEdit` hands it each sequence's
# (T, T) mask). Predict, then run: is position 0's variance the largest? Does the neuron you find fire on later
# tokens too? Will later queries start attending to token k once it attends only to itself?

# %%
from sinklib.core.capture import Capture  # noqa: E402
from sinklib.core.data import make_inputs  # noqa: E402
from sinklib.interpretation.intervention_effects import alpha_at  # noqa: E402
from sinklib.interpretation.interventions import MaskEdit  # noqa: E402
from sinklib.models.load import load_model  # noqa: E402

lm = load_model("smollm2-135m", device="cpu")
ids = make_inputs(lm, "natural", 8, 32, seed=0)
with torch.no_grad(), Capture(lm.model, head_outputs=True, mlp_activations=True, layers=[0, 1]) as cap:
    lm.model(ids, use_cache=False)
v = position_variance(cap.get("head_outputs", 0))
print("variance of layer-0 head outputs at positions 0..4:", [round(float(x), 4) for x in v[:5]])
acts = cap.get("mlp_activations", 1)  # (N, T, F)
n = super_neuron(acts)
print(f"layer 1: neuron {n}, first token max |a| {float(acts[:, 0, n].abs().max()):.1f}, "
      f"elsewhere max {float(acts[:, 1:, n].abs().max()):.1f}")

k = 10
before = alpha_at(lm, ids, k, later_only=True)  # (L, H): mean attention of queries t > k on key k
after = alpha_at(lm, ids, k, MaskEdit(lm.model, lambda mask: self_only_mask(mask, k)), later_only=True)
print(f"alpha_{k} (queries after k), mean over heads, by layer:")
print("  before:", [round(float(x), 2) for x in before.mean(1)])
print("  after: ", [round(float(x), 2) for x in after.mean(1)])

# %% [markdown]
# ## Questions to try
# 1. Replace `"natural"` by `"random"`: does the variance discrepancy need natural text (the paper uses random tokens)?
# 2. Change `k` to 1, 2 and 40, and edit only some layers (`MaskEdit(..., layers=[0, 1, 2])`): where does the new
#    sink form, and from which layer on? Compare with `02_interpretation` section 5.
# 3. Your super neuron: which residual dimension does its row of $W_{down}$ write into? Is it a massive dimension?
