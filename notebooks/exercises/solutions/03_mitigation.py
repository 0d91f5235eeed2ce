# %% [markdown]
# # Exercises for 03 · Mitigation -- attention functions without a sink
#
# **What you will practise.** Writing the attention functions `03_mitigation` trains -- softmax-off-by-one, Softpick,
# head-wise RMSNorm -- and plugging one into a pretrained model through transformers' attention registry.
# **Prerequisites:** `03_mitigation` sections 1-2; softmax and its numerical stability. **Time:** about 45 minutes;
# the last cells load SmolLM2-135M from the offline cache (seconds).
#
# Each check runs your function on hand-worked cases (`help(check.softpick)`) and against sinklib's variants.

# %%
import math

import torch

from sinklib.teaching import check

# %% [markdown]
# ## Task 1 · softmax-off-by-one
# $p_j = \dfrac{e^{l_j}}{1 + \sum_{j'} e^{l_{j'}}}$ over the last dimension; masked logits are $-\infty$ and get 0.
# A query can now put its attention "nowhere" (on an implicit zero logit) instead of on a sink token. Write it so that
# logits of 1000 do not overflow (hint: append a zero logit and use `torch.softmax`).

# %%
def softmax_off_by_one(logits: torch.Tensor) -> torch.Tensor:
    # BEGIN SOLUTION
    zero = torch.zeros_like(logits[..., :1])
    return torch.softmax(torch.cat([logits, zero], dim=-1), dim=-1)[..., :-1]
    # END SOLUTION


check.softmax_off_by_one(softmax_off_by_one)

# %% [markdown]
# ## Task 2 · Softpick
# $p_j = \dfrac{\mathrm{relu}(e^{l_j} - 1)}{\sum_{j'} |e^{l_{j'}} - 1|}$ over the visible keys (masked: $-\infty$,
# left out of the denominator too). Negative logits get no weight; rows may sum to less than 1. For stability,
# multiply numerator and denominator by $e^{-m}$, $m = \max(\max_j l_j, 0)$.

# %%
def softpick(logits: torch.Tensor) -> torch.Tensor:
    # BEGIN SOLUTION
    visible = torch.isfinite(logits)
    m = logits.masked_fill(~visible, 0.0).amax(dim=-1, keepdim=True).clamp_min(0.0)
    e = torch.exp(logits - m) - torch.exp(-m)  # (e^l - 1) e^{-m}
    num = torch.relu(e).masked_fill(~visible, 0.0)
    den = e.abs().masked_fill(~visible, 0.0).sum(dim=-1, keepdim=True)
    return num / (den + 1e-6 * torch.exp(-m))
    # END SOLUTION


check.softpick(softpick)

# %% [markdown]
# ## Task 3 · head-wise RMSNorm (the structural-origin paper's fix)
# $\hat o = o \,/\, \sqrt{\mathrm{mean}_c\, o_c^2 + \epsilon} \cdot g$, per head over its $hd$ channels, with a gain
# $g \in \mathbb{R}^{hd}$ shared by the heads. `o` is (B, H, T, hd).

# %%
def head_rmsnorm(o: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    # BEGIN SOLUTION
    return o * torch.rsqrt(o.pow(2).mean(dim=-1, keepdim=True) + eps) * gain
    # END SOLUTION


check.head_rmsnorm(head_rmsnorm)

# %% [markdown]
# ## Task 4 · an attention function for transformers
# transformers 5 calls every attention implementation as `fn(module, query, key, value, attention_mask, scaling=...,
# dropout=..., **kwargs)` and expects `(output (B, T, H, hd), weights)`. Write softmax-off-by-one in that form:
# repeat key/value heads for grouped-query attention, scale, add the mask (or apply the causal mask when it is
# None), use your Task 1 function, multiply by the values, transpose back.

# %%
def attention_function(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    # BEGIN SOLUTION
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    logits = query @ key.transpose(-1, -2) * (scaling or query.shape[-1] ** -0.5)  # (B, H, T, N)
    T, N = logits.shape[-2:]
    if attention_mask is None:
        logits = logits.masked_fill(torch.ones(T, N, dtype=torch.bool).triu(N - T + 1), float("-inf"))
    else:
        logits = logits + attention_mask[..., :N]
    weights = softmax_off_by_one(logits)
    return (weights @ value).transpose(1, 2).contiguous(), weights
    # END SOLUTION


check.attention_function(attention_function)

# %% [markdown]
# ## Task 5 · one training step
# 03 trains every variant from scratch with the same loop. Write its step: `train_step(model, ids, optimizer)` with
# `ids` a (B, T) batch of token ids and `model(ids)` the (B, T, V) logits. The logits at position $t$ predict token
# $t + 1$, so the loss is the cross-entropy of `logits[:, :-1]` against `ids[:, 1:]`, averaged over the $B(T-1)$
# predictions. Clear the old gradients, backpropagate, step, and return the loss (a float) from before the step.

# %%
def train_step(model, ids, optimizer) -> float:
    # BEGIN SOLUTION
    logits = model(ids)  # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach())
    # END SOLUTION


check.train_step(train_step)

# %% [markdown]
# ## Train a sink, then train one away
# Your step trains two tiny language models on 03's bigram-backcopy data (Guo et al.: the setting in which 03's
# softmax baseline grows a first-token sink on a CPU), one with softmax and one with your Softpick from Task 2, from
# the same weights and batches. Predict, then run: after training, which one gives the first token more than uniform
# attention? 03 measures the same thing on two seeds per variant; one seed here, so read it as a demonstration
# (about two minutes on two CPU cores: 600 steps each, 03's CPU sizes, a constant learning rate).

# %%
import os  # noqa: E402

from sinklib.core.metrics import alpha  # noqa: E402
from sinklib.mitigation import variants  # noqa: E402
from sinklib.mitigation.comparison import uniform_alpha  # noqa: E402
from sinklib.mitigation.protocol import TRAIN_CPU, TRAIN_SMOKE  # noqa: E402
from sinklib.mitigation.training import training_batches  # noqa: E402
from sinklib.mitigation.variant_lm import TinyLM  # noqa: E402


class YourSoftpick(variants.Softmax):
    """03's attention block with your Task 2 function in place of softmax."""

    fusable = False

    def weights(self, q, k):
        return softpick(variants.causal_logits(q, k))  # (B, H, T, T), masked logits -inf


setting = TRAIN_SMOKE if os.environ.get("SINKLIB_EXERCISES_SMOKE") == "1" else TRAIN_CPU  # 03's own sizes
batches = training_batches(setting)  # (steps, B, T): the same batches for both models
T = setting.seq_len
uniform = uniform_alpha(T)  # every visible key alike: H_T / T
for name in ("softmax", "your softpick"):
    torch.manual_seed(0)  # the same starting weights
    model = TinyLM(setting.model)
    if name != "softmax":
        for block in model.blocks:
            block.attn = YourSoftpick(setting.model.d_model, setting.model.n_heads, block.hd)
    optimizer = torch.optim.AdamW(model.parameters(), lr=setting.lr)
    losses = [train_step(model, batch.long(), optimizer) for batch in batches]
    with torch.no_grad():
        _, maps, _ = model(batches[-1].long(), record=True)  # (L, B, H, T, T)
    heads = alpha(maps, 0).mean(1)  # (L, H): each head's attention to the first token
    print(f"{name}: last-10-step loss {sum(losses[-10:]) / 10:.3f}; first-token attention of the strongest head "
          f"{heads.max():.3f}, mean over heads {heads.mean():.3f} (uniform attention: {uniform:.3f})")

# %% [markdown]
# ## Try it on a real model
# SmolLM2-135M was trained with softmax. Predict, then run: if every layer's softmax becomes off-by-one (one extra
# unit in each row's denominator), does its perplexity move a little or a lot? What does that say about the size of
# $\sum_j e^{l_j}$ in a model with a sink?

# %%
from sinklib.core.attention_switch import AttentionSwitch  # noqa: E402
from sinklib.core.data import text_windows  # noqa: E402
from sinklib.models.load import load_model  # noqa: E402

lm = load_model("smollm2-135m", device="cpu", dtype="float32")
ids = text_windows(lm.tokenizer, 4, 128, seed=0, split="heldout")


def perplexity() -> float:
    with torch.no_grad():
        return math.exp(float(lm.model(ids, labels=ids).loss))


before = perplexity()
with AttentionSwitch(lm.model, "exercise", attention_function):
    after = perplexity()
print(f"perplexity with softmax {before:.2f}, with your softmax-off-by-one {after:.2f}")

# %% [markdown]
# ## Questions to try
# 1. Swap Task 1 for your Softpick inside `attention_function` (rows may sum to far less than 1): how much does the
#    perplexity move now, and why is this model not a fair test of Softpick (see `03_mitigation`: trained from scratch)?
# 2. In Task 2, what does a row of all-negative logits give? What would a model learn to do with that?
# 3. Head-wise RMSNorm keeps every head's output at unit RMS: which of the chain's steps in `02_interpretation` does
#    that break?
