# %% [markdown]
# # Exercises for 10 · Dense LLMs -- one measurement, two families
#
# **What you will practise.** The measurements `10_llm` runs on every family, as your own functions: the attention
# each key receives (sink mass), its mean by token kind (is the first delimiter a second sink, as Sun et al. find?),
# and the rule that decides whether a sink belongs to the first *position* or to the first *token* -- a rule that
# can come out either way, which is what makes it a verdict. Then both on SmolLM2 (no BOS) and Gemma-3 (a BOS first).
# **Prerequisites:** `00_tour`; `10_llm` sections 3-4. **Time:** about 40 minutes; the last cells load SmolLM2-135M
# and Gemma-3-270M from the offline cache and run them on 8 windows each (about a minute on a CPU).
#
# Each check runs your function on hand-worked cases (`help(check.position_verdict)`) and against sinklib's code.
#
# > Generated from `solutions/10_llm.py` by `python -m sinklib exercises`: edit the solution file, then regenerate.


# %%
import torch

from sinklib.teaching import check

# %% [markdown]
# ## Task 1 · the attention every key receives
# $m_j = \frac{1}{T-j}\sum_{t \ge j} A_{tj}$: $\alpha_j$ for every key at once -- each column's sum divided by the
# number of queries that can see key $j$ under the causal mask. `attn` (..., T, T) -> (..., T).

# %%
def sink_mass(attn: torch.Tensor) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.sink_mass(sink_mass)

# %% [markdown]
# ## Task 2 · mass by token kind
# `kinds` gives every position's kind ("first", "first delimiter", "delimiter", "weak" or "content";
# `sinklib.architectures.llm.placement.KINDS`). Return `{kind: mean m_j}` over the keys of each kind, leaving out the
# last `skip_last` keys of every sequence (only a few queries see them, so their $m_j$ is large by construction);
# `None` for a kind with no key left (the mean of no key does not exist: not a number to plot or compare).

# %%
KINDS = ("first", "first delimiter", "delimiter", "weak", "content")


def mass_by_kind(mass: torch.Tensor, kinds: list[list[str]], skip_last: int) -> dict[str, float | None]:
    raise NotImplementedError  # your code here


check.mass_by_kind(mass_by_kind)

# %% [markdown]
# ## Task 3 · the position or the token?
# Four measurements of $\alpha$: at position 0 as the text has it (`own`), with another token put at position 0
# (`replaced`), with other text put in front (`moved_first`, position 0 again) and at the original first token, now
# moved back (`moved_original`). A **positional** sink: `replaced` and `moved_first` keep at least `keep` x `own`
# while `moved_original` keeps less -> `True`. A **token** sink: `replaced` keeps less and `moved_original` keeps at
# least `keep` x `own` -> `False`. Anything else -> `None` (the test cannot tell).

# %%
def position_verdict(own: float, replaced: float, moved_first: float, moved_original: float,
                     keep: float = 0.5) -> bool | None:
    raise NotImplementedError  # your code here


check.position_verdict(position_verdict)

# %% [markdown]
# ## Try it on two families
# SmolLM2-135M and Gemma-3-270M, 8 natural windows of 64 tokens each: your Task 1 on every layer's attention
# (float32, mean over layers and heads), your Task 2 with sinklib's token kinds, and your Task 3 on the four
# measurements `placement.position_or_token` takes in the sink layers ($\alpha_0 > 0.3$). Predict, then run: which
# model's sink belongs to the position, and which to its BOS token?

# %%
from sinklib.architectures.llm import placement  # noqa: E402
from sinklib.core.capture import Capture  # noqa: E402
from sinklib.core.data import make_inputs  # noqa: E402
from sinklib.models.load import load_model  # noqa: E402

for name in ("smollm2-135m", "gemma3-270m"):
    lm = load_model(name, device="cpu", dtype="float32")
    ids = make_inputs(lm, "natural", 8, 64, seed=0)
    with torch.no_grad(), Capture(lm.model, attentions=True) as cap:
        lm.model(ids, use_cache=False)
    attn = cap.stack("attentions").float()  # (L, N, H, T, T)
    alpha0 = attn[..., :, 0].mean(dim=(1, 2, 3))  # (L,)
    sink_layers = [i for i, a in enumerate(alpha0) if a > 0.3]
    mass = sink_mass(attn).mean(dim=(0, 2))  # (N, T)
    by_kind = mass_by_kind(mass, placement.token_kinds(lm.tokenizer, ids), skip_last=8)
    test = placement.position_or_token(lm, ids, sink_layers)
    verdict = position_verdict(test.own, test.replaced, test.moved_first, test.moved_original)
    print(f"{lm.label}: first token {ids[0, 0].item()} = {lm.tokenizer.decode(ids[0, :1])!r}; "
          f"{len(sink_layers)} sink layers of {len(alpha0)}")
    print("  mean mass by kind:", {k: None if v is None else round(v, 3) for k, v in by_kind.items()})
    print(f"  alpha own {test.own:.2f}, replaced {test.replaced:.2f}, moved first {test.moved_first:.2f}, "
          f"moved original {test.moved_original:.2f} -> "
          f"{ {True: 'the position', False: 'the token', None: 'cannot tell'}[verdict] }")
    del lm, cap, attn

# %% [markdown]
# ## Questions to try
# 1. In Task 2, set `skip_last=0`: which kind now looks like a sink, and why is that an artefact?
# 2. Gemma-3's verdict: what happens to its sink when its BOS is replaced, and when the BOS is moved to position 8?
#    What does that say about using StreamingLLM's "keep the first 4 tokens" rule on a BOS model?
# 3. Raise `keep` in Task 3 to 0.9: does either verdict change? How strict should a rule be before you call a claim
#    borne out?
