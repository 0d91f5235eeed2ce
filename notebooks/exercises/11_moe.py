# %% [markdown]
# # Exercises for 11 · MoE -- routers, expert outputs and super experts
#
# **What you will practise.** Reading a mixture-of-experts layer from its router and its experts: how sure the router
# is (its entropy), each expert's largest output, and Su et al.'s rule for **super experts** (*Unveiling Super
# Experts in Mixture-of-Experts LLMs*, arXiv 2507.23279) as their code applies it -- then running your functions on
# **SmolLM2-MoE (upcycled stand-in, not a trained MoE**: SmolLM2-135M's MLP split into 8 experts with a fitted
# router; `11_moe` says what it can and cannot show).
# **Prerequisites:** `11_moe` sections 1-2; top-k routing; percentiles. **Time:** about 40 minutes; the last cells
# load the stand-in from the offline cache (built from SmolLM2 the first time, a few minutes) and route 16 windows.
#
# Each check runs your function on hand-worked cases (`help(check.super_experts)`) and against sinklib's code.
#
# > Generated from `solutions/11_moe.py` by `python -m sinklib exercises`: edit the solution file, then regenerate.


# %%
import torch

from sinklib.teaching import check

# %% [markdown]
# ## Task 1 · how sure is the router?
# The router gives logits over the $E$ experts; with $p = \mathrm{softmax}(\text{logits})$ its entropy is
# $H = -\sum_e p_e \log p_e$ (nats): $\log E$ when it cannot choose, 0 when it is certain. `logits` (..., E) ->
# (...). A logit far above the rest must give 0, not nan (hint: `torch.log_softmax`).

# %%
def router_entropy(logits: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.router_entropy(router_entropy)

# %% [markdown]
# ## Task 2 · each expert's largest output
# Every token sends its hidden state to the $k$ experts in `choice` (B, T, k); `outputs` (B, T, k, d) are what those
# experts returned. For each of the `n_experts` experts return the largest $|y|$ over every token that chose it and
# every channel -- 0 for an expert nobody chose. (Hint: `Tensor.scatter_reduce` with `reduce="amax"`, or a loop.)

# %%
def expert_output_max(choice: torch.Tensor, outputs: torch.Tensor, n_experts: int) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.expert_output_max(expert_output_max)

# %% [markdown]
# ## Task 3 · Su et al.'s super experts
# `output_max` (L, E): Task 2 for every layer. Keep the first `round(L * include_layers)` layers; an expert is super
# when its value $a$ is above the `quantile`-th percentile of all kept values (`torch.quantile(..., quantile / 100)`)
# **and** above `floor(max a / times)`. Return `[(layer, expert), ...]`, largest $a$ first. Why the second
# condition? With few experts the percentile alone always picks someone.

# %%
def super_experts(output_max: torch.Tensor, include_layers: float, quantile: float, times: int) -> list:
    raise NotImplementedError  # your code here


check.super_experts(super_experts)

# %% [markdown]
# ## Try it on a real model
# Route 16 held-out windows of 64 tokens through the stand-in: your Task 1 on the first token and on the rest, your
# Task 2 per layer (only each token's largest |y| is kept, so memory stays small), your Task 3 with the authors'
# defaults (0.75, 99.5, 10). Predict, then run: is the router surer about the first token? (This stand-in's router
# was fitted and kept near-uniform in its weights -- what does that predict?) Which layer holds the super experts --
# the one where `02_interpretation` found SmolLM2's massive activation appear?

# %%
from sinklib.core.capture import Capture  # noqa: E402
from sinklib.core.data import text_windows  # noqa: E402
from sinklib.models.load import load_model  # noqa: E402
from sinklib.teaching.exercises import try_it_model  # noqa: E402

lm = load_model(try_it_model("smollm2-moe"), device="cpu")  # make test: its smoke-size twin
print(lm)
ids = text_windows(lm.tokenizer, 16, 64, 0, split="heldout")
keep_max = {"expert_outputs": lambda y, layer: y.abs().amax(dim=-1, keepdim=True)}  # (B, T, k, d) -> (B, T, k, 1)
with torch.no_grad(), Capture(lm.model, kinds=["router_logits", "expert_choice", "expert_outputs"],
                              reduce=keep_max) as cap:
    lm.model(ids, use_cache=False, logits_to_keep=1)
logits, choice, peaks = (cap.stack(k) for k in ("router_logits", "expert_choice", "expert_outputs"))
layers = cap.layers_of("router_logits")  # the layer of each row: those with routed experts (all 30 on the stand-in)
n_experts = logits.shape[-1]
H = router_entropy(logits.float())  # (L, B, T)
print(f"router entropy (log E = {torch.log(torch.tensor(float(n_experts))):.2f}), mean over layers: "
      f"first token {H[:, :, 0].mean():.3f}, others {H[:, :, 1:].mean():.3f}")
a = torch.stack([expert_output_max(choice[i], peaks[i].float(), n_experts) for i in range(len(choice))])  # (L, E)
found = super_experts(a, 0.75, 99.5, 10)
print(f"super experts (layer, expert): {[(layers[row], e) for row, e in found]}; their largest output "
      f"{[round(float(a[le]), 1) for le in found]} "
      f"vs the median expert's {a.median():.2f}")

# %% [markdown]
# ## Questions to try
# 1. Which tokens produce each super expert's largest output -- the first token? (Keep `choice` and the per-token
#    maxima, and look where the maximum sits.)
# 2. Task 3 without the `floor(max / times)` condition: how many "super experts" do you get now, and why is that
#    condition there?
# 3. This router was fitted to an already-trained dense model. What would you expect to change in a MoE trained from
#    scratch with a load-balancing loss (the GPU profile's OLMoE)?
