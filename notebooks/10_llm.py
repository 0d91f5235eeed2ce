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
# # 10 · Dense language models side by side
#
# Is the attention sink a property of one model, or of causal language models in general? This notebook runs the
# same measurements on three families that ship offline -- **SmolLM2-135M** (Llama layout, no BOS),
# **Gemma-3-270M** (a BOS token, QK-norm, sliding-window layers) and **Qwen2.5-Coder-0.5B-Instruct** (QKV biases; its
# weights went through AWQ and then 4-bit GGUF quantisation, so they are close to, not the same as, the release).
# On a GPU the profile lists Gu et al.'s families by hub id (GPT-2 XL, Pythia, OPT, Llama-2/3, Mistral, Qwen2.5);
# `model=` replaces the list with one model.
#
# **Papers.** Gu et al., *When Attention Sink Emerges in Language Models*, arXiv 2410.10781 (the metric, Table 1,
# the first position). Xiao et al., *StreamingLLM*, arXiv 2309.17453 (the sink is the initial position). Sun et al.,
# *Massive Activations in Large Language Models*, arXiv 2402.17762 (massive activations at the first token and the
# first delimiter).
#
# **Words.** $\alpha_j = \frac{1}{T-j}\sum_{t\ge j} A_{t,j}$ is the attention key $j$ receives per query that sees
# it (Gu et al.'s $\alpha$; positions from 0); a **sink layer** is one whose $\alpha_0$, averaged over heads, exceeds
# $\epsilon = 0.3$; the **sink rate** is the fraction of (sequence, layer, head) triples with $\alpha_0 > \epsilon$.
# Layers differ in number between models, so curves are drawn against relative depth $l / (L-1)$.

# %% [markdown]
# **What you will learn.** how three model families (SmolLM2, Gemma-3, Qwen2.5) differ in where and how strongly they
# sink, whether the sink is a position or a token (BOS), and how far the structural-origin chain carries from one
# family to the next.
#
# **Prerequisites.** `00_tour` and `02_interpretation`.
#
# **Time.** about 10 min on the CPU profile (seconds when rerun unchanged: each model's results are kept); 45-60
# min to work through.

# %% tags=["parameters"]
profile = "cpu"  # smoke | cpu | gpu (sizes live in sinklib/architectures/llm/protocol.py)
model = ""  # empty: the profile's list of models; else one registry name or hub id
device = ""  # empty: the profile default; else cpu, cuda or auto
seed = 0
out_dir = "../figures/10_llm"

# %%
import gc
import time
from dataclasses import replace

import pandas as pd

from sinklib.architectures.llm import llm_survey, placement, placement_plots
from sinklib.architectures.llm import takeaways as llm_takeaways
from sinklib.core import plotting, takeaways
from sinklib.core.results import load_reference
from sinklib.core.takeaways import windows
from sinklib.models.load import load_model, require_family
from sinklib.models.random_init import random_weights
from sinklib.pipeline import notebook

nb = notebook.start("10_llm", profile, model, device, seed, out_dir, families=None, label="several models")
run, fig_dir, record = nb.run, nb.fig_dir, nb.record
names = [model] if model else list(run.models)
gu, origin_paper = load_reference("gu2024_sink_rates"), load_reference("structural_origin")
streaming_paper = load_reference("streamingllm")
print(f"models: {', '.join(names)}; {run.num_seqs} sequences x {run.seq_len} tokens per input kind")
# what each takeaway's numbers were measured on, from the run's sizes
on_windows = windows(run.placement_seqs, "Bible windows", run.seq_len)  # sections 3, 4 and 6 (per draw)

# %% [markdown]
# ## Measure every model once
# One model at a time (so a GPU holds only one): Gu et al.'s protocol on natural text, random tokens and one token
# repeated (float32 attention), Sun et al.'s criterion, the attention each key receives by token kind, the
# position-or-token test, raw text vs the chat template, and $\alpha_0$ against the context length with the O(N)
# statistics. `llm_survey.measure` holds the recipe; every section below only reads its report.
#
# Two checks on every verdict. **Draws:** the verdicts that rest on a random draw -- Gu et al.'s shape (random
# tokens, fewer sequences in the extra draws), the first delimiter, position-or-token and every link of the chain
# with Sun et al.'s bias test (sampled Bible windows, the same number in every draw) -- are measured again on two more
# seeds. A pretrained model has no training noise: the draws differ only in which windows were read. So where the
# rule's number is a statistic of windows -- the random-token sink rate, the first delimiter's ratio, the four alphas
# of position-or-token, the chain's layer-0 variance ratio and its DomRatio -- the verdict is taken on every draw's
# windows pooled, with a 95% bootstrap interval over windows: it holds or fails when the interval lies on one side of
# the cut, and is *unsettled* only when it straddles it; each draw's own verdict is kept beside. The chain's other
# links (a neuron's identity, per-head statistics, perplexities under edits fitted on each draw's windows) hold or
# fail only when every draw agrees, and their notes say why they are not pooled. **Control:** every rule runs once
# more on `random_weights(lm)` -- the same configuration with freshly initialised weights, no training -- where a rule
# for an effect that training makes (a sink, a massive activation, a super neuron) must fail.

# %% [markdown]
# > **Predict, then run.** Before running: will all three families sink in the same layers? Will Gemma-3, which puts a
# > BOS first, sink on the BOS token or on position 0? Pass `model=` to add another model.

# %%
def measure_model(name: str):
    """One model's report, its claims as (claim, Recorder.add's keywords) and the seconds its draws and control took."""
    lm = nb.placed(load_model(name, device=run.device, dtype="float32"))  # Gu et al.'s protocol: float32 attention
    require_family(lm, ("llm", "moe"), "10_llm")
    report = llm_survey.measure(lm, num_seqs=run.num_seqs, seq_len=run.seq_len, batch_size=run.batch_size,
                                placement_seqs=run.placement_seqs, context_lengths=run.context_lengths,
                                context_windows=run.context_windows, paper=origin_paper, seed=run.seed,
                                draw_seqs=run.draw_seqs, n_draws=run.draws)
    model_claims = []
    if run.stream_tokens:  # Xiao et al.'s own position test (Table 1): the first 4 tokens replaced by line breaks
        report.xiao, xiao_claim = llm_survey.xiao_position_test(lm, run.stream_tokens, run.stream_budget,
                                                                run.stream_chunk, streaming_paper, run.seed)
    start = time.perf_counter()
    control = random_weights(lm, seed=run.seed)  # the negative control: same configuration, no training
    if run.stream_tokens:  # the same protocol on the random weights: no first token should matter there
        model_claims.append((replace(xiao_claim, id=f"{xiao_claim.id}.{report.name}"), {
            "control": llm_survey.xiao_control(control, report.name, run.stream_tokens, run.stream_budget,
                                               run.stream_chunk, streaming_paper, run.seed)}))
    del lm
    gc.collect()
    controls = llm_survey.control_claims(control, report.name, num_seqs=run.control_seqs, seq_len=run.seq_len,
                                         batch_size=run.batch_size, paper=origin_paper, gu=gu, seed=run.seed)
    del control
    gc.collect()
    seconds = {"draws": round(report.seconds["draws"], 1), "chain": round(report.seconds["chain"], 1),
               "control": round(time.perf_counter() - start, 1)}
    for claim in llm_survey.report_claims(report, gu):
        model_claims.append((claim, {"control": controls.get(claim.id), "control_note": "" if claim.id in controls
                                     else "no random-weight control here: 02_interpretation runs this rule's "
                                          "control on SmolLM2's configuration"}))
    return report, model_claims, seconds


reports, added_seconds = [], {}
for name in names:  # each model's results are kept as soon as it is measured; a rerun reads them
    report, model_claims, added_seconds[name] = nb.per_model(name, lambda name=name: measure_model(name))
    for claim, how in model_claims:
        record.add(claim, show=False, model=report.label, **how)
    reports.append(report)
labels = ", ".join(r.label for r in reports)
print("seconds of the extra draws, the chain (every draw) and the random-weight control:", added_seconds)

# %% [markdown]
# ## 1 · Every family sinks, at its own depth
# Gu et al. (Table 1) find that Llama-family models sink on natural text and on random tokens but not when one
# token is repeated (then every position is the same and no position can stand out). The rule: sink rate > 30% on
# natural and random input and < 5% on the repeated token.

# %%
with plotting.style():
    fig = placement_plots.alpha_by_depth(reports, title=f"The first-token sink across families ({run.seq_len} "
                                                        f"tokens, {run.num_seqs} sequences per input)")
    plotting.save(fig, fig_dir / "fig01_sink-by-depth",
                  placement_plots.alpha_by_depth_caption(reports, run.num_seqs, run.seq_len))
for r in reports:
    rates = ", ".join(f"{k} {v:.0%}" for k, v in r.sink_rate.items())
    onset = r.sink_layers[0] if r.sink_layers and max(r.alpha_by_layer) > 0.3 else None
    print(f"{r.label}: sink rate {rates}; first sink layer {onset} of {r.n_layers}")
record.show("gu2024.llama_family_input_shape")

# %%
takeaways.show(llm_takeaways.sink_by_depth(reports, record.claims,
                                           on=windows(run.num_seqs, "sequences", run.seq_len) + " per input"))

# %% [markdown]
# None of the offline models is in Gu et al.'s Table 1, so only the *shape* -- sinking on natural and random input,
# not on a repeated token -- is compared, never the rates themselves. The depth at which a family starts to sink is
# its own: the curves are drawn against relative depth so that models of different length line up.

# %% [markdown]
# ## 2 · Massive activations by Sun et al.'s criterion
# Sun et al. call an activation massive when $|h| > 100$ and $> 1000\times$ the median $|h|$ of the layer's output
# (over the whole sequence, as their code computes it); they find *a few* such activations in every model they
# study, at the starting token and the first delimiter. "A few" is part of the rule here: in every layer where the
# criterion is met, at most 2 positions after position 0 per window on average may meet it -- a criterion met by
# most tokens of a layer no longer singles out a few activations, however large they are. The share of the tokens
# after position 0 that meet it is reported layer by layer.

# %%
for r in reports:
    print(f"{r.label}: {r.massive.describe()}")
record.show("sun2024.massive_activations")

# %%
takeaways.show(llm_takeaways.massive(reports, record.claims, on=windows(run.num_seqs, "Bible windows", run.seq_len)))

# %% [markdown]
# A model that misses the 1000x cut may still have one activation far above the rest: the later sections use the
# stated fallback dimensions there, and say so. The offline SmolLM2 and Qwen weights went through 4-bit GGUF
# quantisation (Qwen's also AWQ); whether that lowered the ratio cannot be told offline.

# %% [markdown]
# ## 3 · Where the attention goes, by token kind
# The mass each key receives, $m_j = \sum_t A_{t,j} / \#\{t: t \ge j\}$, averaged over heads and the sink layers
# and grouped by what the key is: the first position, the first delimiter as Sun et al. name it (the first "." or
# line break), the other delimiters (later ones, and the ",", ";", ":", "!", "?" the project adds), weak-semantic tokens (articles, prepositions, conjunctions, other punctuation) and
# content words. The last 8 keys are left out: few queries see them, so their $m_j$ is large by construction.

# %%
with plotting.style():
    fig = placement_plots.mass_by_kind(reports, title=f"Attention per key by token kind ({run.placement_seqs} "
                                                      f"Bible windows of {run.seq_len} tokens)",
                                       cut=placement.DELIMITER_CUT)  # the first-delimiter claim's cut
    plotting.save(fig, fig_dir / "fig02_mass-by-kind",
                  placement_plots.mass_by_kind_caption(reports, run.placement_seqs, run.seq_len,
                                                       cut=placement.DELIMITER_CUT))
for r in reports:
    print(f"{r.label}: " + ", ".join(f"{k} {v:.3f}" for k, v in r.by_kind.items()))
    print("   most attended tokens after position 0:",
          ", ".join(f"{t!r} {m:.3f} (x{n})" for t, n, m in r.secondary))
record.show("sun2024.first_delimiter")

# %%
takeaways.show(llm_takeaways.mass_by_kind(reports, record.claims, on=on_windows))

# %% [markdown]
# Sun et al. find the second massive activation at the first delimiter of larger models and longer prompts; the
# rule here reads the attention it draws, in short windows, at their first "." or line break (see the claim's
# `adapted`). Where later tokens draw more than content words, they are weak-semantic ones -- articles and
# punctuation -- the pattern Gu et al. and Sun et al. describe for secondary sinks.

# %% [markdown]
# ## 4 · The position or the token?
# Xiao et al. (Section 3.1) replace the first four tokens by line breaks and the sink stays: it is the *initial
# position*. Here, in the sink layers: $\alpha_0$ as given; with position 0 replaced by a line break; with 8
# tokens of another window put in front (so position 0 holds another word); and $\alpha$ of the original first
# token once it sits at position 8. Position: the first two stay high and the moved token loses it. Token: the
# reverse -- which is what a model trained with a BOS token at position 0 may learn. For a model that adds a BOS, the
# same windows are also run with the BOS stripped (the first word at position 0).
#
# Beside it, Xiao et al.'s own protocol: held-out text streamed through 01's cache of 4 sinks + recent tokens, as it
# is, with its first four tokens replaced by line breaks (a BOS among them), and with no sink at all -- perplexity
# after the cache fills. Its control is the same protocol on each model's random weights, where no first token
# should matter and the rule must fail. Their test asks whether *any* first tokens work as sinks for streaming, ours which token the
# attention follows inside one window: the two can disagree on a BOS model, and both are shown.

# %%
with plotting.style():
    fig = placement_plots.position_or_token(reports, title="Is the sink the first position or the first token?")
    plotting.save(fig, fig_dir / "fig03_position-or-token",
                  f"alpha in the sink layers (mean over heads and {run.placement_seqs} windows) at position 0 as "
                  f"given, with position 0 replaced by a line break, with 8 tokens of another window in front, and at "
                  f"the original first token after it moved to position 8, for {labels}.")
record.show("xiao2023.sink_is_the_position")
streamed = {r.label: r.xiao for r in reports if r.xiao}
if streamed:
    display(pd.DataFrame(streamed).T.round(2).rename_axis(  # noqa: F821 (display: Jupyter's)
        f"perplexity, cache {run.stream_budget}, {run.stream_tokens} tokens"))
    record.show("xiao2023.sink_is_positional")
for r in reports:
    if r.bos_stripped:
        b = r.bos_stripped
        print(f"{r.label}, BOS stripped (the text's first word at position 0): alpha_0 {b['alpha_with_bos']:.3f} with "
              f"BOS -> {b['alpha_without_bos']:.3f} without; largest activations then at {b['largest_moved_to'][:4]}")

# %%
takeaways.show(llm_takeaways.position_or_token(reports, record.claims, on=on_windows))

# %% [markdown]
# How to read the answer: a model trained without a BOS sees a different word first in every window, so only the
# position can carry the sink; a model that always saw a BOS first can learn to put the sink on that token instead,
# and then the BOS carries it wherever it sits. Xiao et al.'s "initial position" is the first answer.

# %% [markdown]
# ## 5 · Longer contexts and the chat template
# (a) $\alpha_0$ in the sink layers at growing context lengths, with the O(N)-memory statistics (no $N \times N$
# matrix is kept; one forward of the longest passage gives every shorter length, as in `00_tour`). In a
# sliding-window layer (Gemma-3: five of every six, W = 512) the queries past the window cannot see the first token,
# so there $\alpha_0$ averages over the first $\min(N, W)$ queries only -- Gu et al.'s $T - k$ generalised to windows;
# counting the others would make $\alpha_0$ fall with $N$ by construction. (b) Gu et al. compare base and chat checkpoints; with one checkpoint we can compare the same text
# raw and wrapped as a user message in the model's chat template (whose first token is then a template token). The
# content is token-for-token the same in both (the template's default system prompt comes on top, not instead of
# part of the text), and both rates read $\alpha_0$ from the queries of the same content tokens (the second to the
# last): the difference is the format's, not the text's.

# %%
with plotting.style():
    fig = placement_plots.context_and_chat(reports, title="Context length and the chat template")
    plotting.save(fig, fig_dir / "fig04_context-and-chat",
                  f"(a) alpha_0 in the sink layers against context length ({run.context_windows} natural passage(s), "
                  f"each length read off the passage's first N queries" + (
                      "; band: range over passages" if run.context_windows > 1 else "") + "; dotted: uniform attention "
                  f"in the same layers). (b) sink rate (eps 0.3) on {run.placement_seqs} raw "
                  f"windows and on the same content tokens in the chat template (alpha_0 over the content tokens' "
                  f"queries in both), for models that have one. Models: {labels}.")
for r in reports:
    chat = ", ".join(f"{k} {v:.0%}" for k, v in r.raw_vs_chat.items()) if r.raw_vs_chat else "no chat template"
    print(f"{r.label}: alpha_0 {[round(a, 3) for a in r.context['alpha_first']]} at {r.context['lengths']}; {chat}")
    if r.chat_top:
        print("   in the chat template the most attended tokens are",
              ", ".join(f"{t!r} {m:.3f} (x{k})" for t, k, m in r.chat_top))

# %%
takeaways.show(llm_takeaways.context_and_chat(
    reports, on=f"(a) {windows(run.context_windows, 'passages')} of up to {max(run.context_lengths):,} tokens, (b) "
                f"{windows(run.placement_seqs, 'windows', run.seq_len)}"))

# %% [markdown]
# An even spread of each query's attention gives the first key less and less as the context grows, so a first
# token that keeps a steady share stands out more at long contexts. In the chat template the first position holds a
# template token, not the text's first word; whether one template token takes over the sink or the mass spreads over
# the template differs between families. A base checkpoint without a template is skipped in (b).

# %% [markdown]
# ## 6 · The structural-origin chain on each family
# `02_interpretation` follows one model through the chain of arXiv 2605.06611: (1) the first position's head output
# varies most across inputs; (2) an early MLP *super neuron* fires on the first token only and writes the massive
# dimension; (3) the first token's DomRatio jumps with it and the sink follows within two layers of the first
# attention that reads it; (4) in sink heads every query scores the first token's key positively (lock-in). The same
# calls (`sinklib.interpretation.chain`) on each family, with the same rules (`origin_claims`), each link measured on
# three equal-sized draws of windows -- links 1 and 3 judged on the draws' windows pooled with a bootstrap interval,
# the others where every draw agrees; the table reads which links hold where.
#
# Two onsets are kept apart. The chain's link 3 rests on the **first token's value onset**: the first layer whose
# output holds a first-token value above 100 on a massive dimension, doubling -- *not* Sun et al.'s criterion, which
# also asks for 1000x the layer's median. The layer where **Sun et al.'s criterion** first holds is recorded beside
# it, and the takeaway says which of the two the sink follows.

# %%
links = ("origin.variance_discrepancy", "origin.super_neuron", "origin.dimension_disparity", "origin.lock_in")
chain_table = pd.DataFrame({r.label: {link.split(".")[1]: next((c.verdict() for c in record.claims
                                                                 if c.id == f"{link}.{r.name}"), "not run")
                                      for link in links} for r in reports})
display(chain_table)  # noqa: F821
for r in reports:
    print(f"{r.label}: {r.chain_numbers}")

# %%
takeaways.show(llm_takeaways.chain(reports, record.claims, on=f"{on_windows} per draw",
                                   heldout=windows(run.placement_seqs, "held-out windows", run.seq_len)))

# %% [markdown]
# Read how a link holds, not only that it does. Where the massive value and the sink are already there at layer 0,
# before any super neuron, the first token's embedding (a BOS) carries the state from the start, and the chain does
# not start with a neuron. Where other heads also score the first key positively almost always, the sign alone does
# not tell sink heads apart. The DomRatio is compared with the paper's value for Llama-2-7B in each claim's note.

# %% [markdown]
# ## Scorecard

# %%
display(record.table())  # noqa: F821
takeaways.show(llm_takeaways.controls(record.claims))
nb.headline |= {"models": names, "reports": [r.as_dict() for r in reports], "holds_all": record.all_hold,
                "added_seconds": added_seconds}
nb.close()

# %% [markdown]
# ## Questions to try
# 1. Add a fourth model with `model=`: does it follow its family's pattern?
# 2. Section 4: why does removing Gemma-3's BOS move the sink while SmolLM2 has none to remove?
# 3. Section 6: which link of the chain fails first on which family?
