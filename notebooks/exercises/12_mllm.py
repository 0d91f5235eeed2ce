# %% [markdown]
# # Exercises for 12 · MLLM -- visual sink tokens and attention redistribution
#
# **What you will practise.** Kang et al.'s visual attention sinks (*See What You Are Told: Visual Attention Sink in
# Large Multimodal Models*, ICLR 2025, arXiv 2503.03321) as three functions: $\phi$, which finds the image tokens that
# carry the language model's massive sink dimensions; the image-centric heads; and VAR, which hands the sinks'
# attention back to the rest of the image -- then all three on the **LLaVA-style stand-in** (SmolLM2-135M reading a
# small ViT's tokens through a projector trained here for a few minutes; `12_mllm` says what it can and cannot show).
# **Prerequisites:** `12_mllm` sections 1-3; massive activations (`00_tour` 4). **Time:** about 45 minutes; the last
# cells load the stand-in from the offline cache (its projector is trained the first time, about 5 minutes) and run
# 8 captioned digits.
#
# Each check runs your function on hand-worked cases (`help(check.var_redistribute)`) and against sinklib's code.
#
# > Generated from `solutions/12_mllm.py` by `python -m sinklib exercises`: edit the solution file, then regenerate.


# %%
import torch

from sinklib.teaching import check

# %% [markdown]
# ## Task 1 · phi, the visual-sink score
# The language model's sink dimensions $D$ are where its first token carries massive values. A token whose hidden
# state is dominated by them is a sink: $\phi(x) = \max_{d \in D} |x_d| / \mathrm{RMS}(x)$,
# $\mathrm{RMS}(x) = \sqrt{\tfrac{1}{d}\sum_j x_j^2 + 10^{-6}}$; Kang et al. call a token a sink when $\phi \ge 20$.
# `h` (..., d) -> (...).

# %%
def phi(h: torch.Tensor, dims: list[int]) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.phi(phi)

# %% [markdown]
# ## Task 2 · image-centric heads
# VAR only touches (head, text query) rows that look at the image: attention to the image tokens
# $I_t = \sum_{j \in \text{image}} A_{tj} \ge$ `summ` (0.2), of which the visual sinks take at most `rho` (0.5);
# only queries $t \ge$ `from_query` (the text after the image), and none in an image without visual sinks.
# `weights` (B, H, T, N); `visual_sinks`, `image` (B, N) bool -> (B, H, T) bool.

# %%
def image_centric_rows(weights, visual_sinks, image, from_query: int, rho: float, summ: float) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.image_centric_rows(image_centric_rows)

# %% [markdown]
# ## Task 3 · VAR, visual attention redistribution
# In the selected rows every sink key keeps a fraction $p$ (0.6) of its attention, $A'_{tj} = p A_{tj}$, and what it
# gives up, $(1 - p) S_t$ with $S_t = \sum_{j \in \text{sinks}} A_{tj}$, goes to the non-sink image keys in
# proportion to their attention: $A'_{tj} = A_{tj} + (1 - p) S_t A_{tj} / \sum_{j' \in \text{image, not sink}}
# A_{tj'}$. Everything else stays. `sinks`, `image` (B, N); `rows` (B, H, T) -> (B, H, T, N).

# %%
def var_redistribute(weights, sinks, image, rows, p: float) -> torch.Tensor:
    raise NotImplementedError  # your code here


check.var_redistribute(var_redistribute)

# %% [markdown]
# ## Try it on a real model
# The stand-in on 8 held-out digits with their captions. Your Task 1 on each layer's input hidden state over the
# two sink dimensions sinklib finds from the first token; your Tasks 2 and 3 on the attention of the layer with the
# most visual sinks. Predict, then run: do any image tokens reach $\phi \ge 20$? How much of the text queries'
# image attention moves off the sinks?

# %%
from sinklib.architectures.mllm import captions, visual_sinks  # noqa: E402
from sinklib.core.adapters import adapter_for  # noqa: E402
from sinklib.core.capture import Capture  # noqa: E402
from sinklib.models import stitch  # noqa: E402
from sinklib.models.load import load_model  # noqa: E402
from sinklib.teaching.exercises import try_it_model  # noqa: E402

lm = load_model(try_it_model("llava-standin"), device="cpu")  # make test: its smoke-size twin
print(lm)
digits, labels = stitch.heldout_digits(stitch.StitchConfig(), 8)
inputs, _ = captions.caption_inputs(lm, digits, [stitch.digit_caption(y) for y in labels])
image = adapter_for(lm.model).image_positions(inputs["input_ids"])  # (B, T) bool
with torch.no_grad(), Capture(lm.model, attentions=True, hidden_states=True) as cap:
    lm.model(**inputs)
hidden = cap.stack("hidden_states").float()  # (L, B, T, d) block outputs; block l reads block l-1's
dims = visual_sinks.sink_dimensions(hidden[:, :, 0].mean(1))
phis = torch.stack([phi(hidden[layer - 1], dims) for layer in range(2, len(hidden))])  # (L-2, B, T), layers 2..
visual = (phis >= 20) & image  # visual sink tokens per layer
print(f"sink dimensions {dims}; visual sinks per image, layers 2..{len(hidden) - 1}: "
      f"{[round(float(v.sum(-1).float().mean()), 1) for v in visual]}")
best = int(visual.sum(dim=(1, 2)).argmax())
layer, sinks = best + 2, (phis[best] >= 20)  # every sink token: the first token and the visual sinks
A = cap.get("attentions", layer).float()  # (B, H, T, T)
text_from = int(image[0].nonzero().max()) + 1
rows = image_centric_rows(A, visual[best], image, text_from, 0.5, 0.2)
after = var_redistribute(A, sinks, image, rows, 0.6)


def sink_share(w: torch.Tensor) -> float:
    """Mean attention the visual sinks get in the image-centric rows."""
    return float((w * visual[best][:, None, None]).sum(-1)[rows].mean())


print(f"layer {layer}: {int(rows.sum())} image-centric (head, text query) rows; the visual sinks' attention in them "
      f"{sink_share(A):.3f} before VAR, {sink_share(after):.3f} after; rows still sum to 1: "
      f"{torch.allclose(after.sum(-1), A.sum(-1), atol=1e-5)}")

# %% [markdown]
# ## Questions to try
# 1. Which image tokens become visual sinks -- look at their positions on the 6 x 6 patch grid: background or
#    stroke?
# 2. Set `p = 0` in Task 3 (all of the sinks' attention handed back): what happens to the caption loss in
#    `12_mllm` section 4's measure, and why might Kang et al. keep some?
# 3. The stand-in's language model never saw an image in training. What in its weights decides which image tokens
#    reach $\phi \ge 20$?
