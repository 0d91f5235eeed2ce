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
# Section 8 adds **Qwen2.5-Coder-1.5B-Instruct** beside the 0.5B: one family at two sizes. On a GPU the profile lists
# Gu et al.'s families by hub id (GPT-2 XL, Pythia, OPT, Llama-2/3, Mistral, Qwen2.5) and Qwen2.5 at 0.5B, 1.5B and
# 7B for the rung; `model=` replaces the lists with one model.
#
# **Papers.** Gu et al., *When Attention Sink Emerges in Language Models*, arXiv 2410.10781 (the metric, Table 1,
# the first position). Xiao et al., *StreamingLLM*, arXiv 2309.17453 (the sink is the initial position). Sun et al.,
# *Massive Activations in Large Language Models*, arXiv 2402.17762 (massive activations at the first token and the
# first delimiter). Wong et al., *On the Existence and Behaviour of Secondary Attention Sinks*, arXiv 2512.22213
# (sinks after the first token, section 7).
#
# **Words.** $\alpha_j = \frac{1}{T-j}\sum_{t\ge j} A_{t,j}$ is the attention key $j$ receives per query that sees
# it (Gu et al.'s $\alpha$; positions from 0); a **sink layer** is one whose $\alpha_0$, averaged over heads, exceeds
# $\epsilon = 0.3$; the **sink rate** is the fraction of (sequence, layer, head) triples with $\alpha_0 > \epsilon$.
# Layers differ in number between models, so curves are drawn against relative depth $l / (L-1)$.

# %% [markdown]
# **What you will learn.** how three model families (SmolLM2, Gemma-3, Qwen2.5) differ in where and how strongly they
# sink, whether the sink is a position or a token (BOS), how far the structural-origin chain carries from one
# family to the next, whether keys after the first become sinks mid-sequence, and what changes within one family
# from 0.5B to 1.5B parameters.
#
# **Prerequisites.** `00_tour` and `02_interpretation`.
#
# **Time.** about 20-30 min on the CPU profile the first time, the 1.5B included (seconds when rerun unchanged: each
# model's results are kept); 45-60 min to work through.

# %% tags=["parameters"]
profile = "cpu"  # smoke | cpu | gpu (sizes live in sinklib/architectures/llm/protocol.py)
model = ""  # empty: the profile's list of models; else one registry name or hub id
device = ""  # empty: the profile default; else cpu, cuda or auto
seed = 0
out_dir = "../figures/10_llm"

# %%

import pandas as pd

from sinklib.architectures.llm import llm_survey, placement, placement_plots, scale_rung
from sinklib.architectures.llm.llm_survey import MID_COS_CUT, pooled_interval, uniform_share
from sinklib.architectures.llm.survey_chain import LINKS, POOLED_CUTS, RARE_SITES
from sinklib.core import plotting
from sinklib.core.analysis import SHAPE_CUTS
from sinklib.core.metrics import GU_EPS, SUN_MIN_ABS, SUN_MIN_RATIO
from sinklib.core.pooled import LEVEL
from sinklib.core.results import load_reference
from sinklib.core.takeaways import (
    against_cut,
    claim_line,
    compare,
    find,
    num,
    pct,
    say,
    span,
    which_models,
    windows,
)
from sinklib.models.load import load_model, require_family
from sinklib.pipeline import notebook

nb = notebook.start("10_llm", profile, model, device, seed, out_dir, families=None, label="several models")
run, fig_dir, record = nb.run, nb.fig_dir, nb.record
names = [model] if model else list(run.models)
gu, origin_paper = load_reference("gu2024_sink_rates"), load_reference("structural_origin")
streaming_paper = load_reference("streamingllm")
print(f"models: {', '.join(names)}; {run.num_seqs} sequences x {run.seq_len} tokens per input kind")
# what each takeaway's numbers were measured on, from the run's sizes
on_windows = windows(run.placement_seqs, "Bible windows", run.seq_len)  # sections 3, 4 and 6 (per draw)


def claim_of(claim_id: str, report):
    """A model's record of a claim: its id ends in the model's name."""
    return find(record.claims, f"{claim_id}.{report.name}")


def holders(claim_id: str, among=None) -> list[str]:
    """The models on which a claim holds."""
    return [r.label for r in (among or reports) if (c := claim_of(claim_id, r)) is not None and c.holds is True]


def verdicts(claim_id: str) -> str:
    """One verdict per model: "SmolLM2: `id` holds (...); Gemma-3: ..."."""
    return "; ".join(f"{r.label}: {claim_line(claim_of(claim_id, r), claim_id)}" for r in reports)


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
def load(name: str):
    """One model, float32 attention (Gu et al.'s protocol), on the run's device."""
    lm = nb.placed(load_model(name, device=run.device, dtype="float32"))
    require_family(lm, ("llm", "moe"), "10_llm")
    return lm


def measure_model(name: str):
    """One model's report, its claims as (claim, Recorder.add's keywords) and the seconds its draws and control took."""
    return llm_survey.measure_and_judge(lambda: load(name), run, gu=gu, paper=origin_paper, streaming=streaming_paper)


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
shape_id = "gu2024.llama_family_input_shape"
shape = next((c for r in reports if (c := claim_of(shape_id, r))), None)
table1 = list(shape.published.values()) if shape is not None and isinstance(shape.published, dict) else []
pooled_random = [f"{r.label} "
                 f"{against_cut(c.measured['random'], b, SHAPE_CUTS['random'], LEVEL, fmt=lambda x: pct(x, 2))}"
                 for r in reports if (b := pooled_interval(c := claim_of(shape_id, r), "random")) is not None]
sinking = {r.label: [i for i, a in enumerate(r.alpha_by_layer) if a > GU_EPS] for r in reports}
say(f"sink rate by input, on {windows(run.num_seqs, 'sequences', run.seq_len)} per input",
    "Sink rate on natural text / random tokens / one repeated token: "
    + "; ".join(f"{r.label} {pct(r.sink_rate['natural'], 2)} / {pct(r.sink_rate['random'], 2)} / "
                f"{pct(r.sink_rate['repeated'], 2)}" for r in reports) + "."
    + (" Gu et al.'s Table 1 gives " + " / ".join(span([p[kind] for p in table1], 2)
                                                   for kind in ("natural", "random", "repeated"))
       + f" for {', '.join(shape.published)} (as fractions)." if table1 else ""),
    f"On every seed's random-token sequences pooled, the random-token rate is {'; '.join(pooled_random)}: the shape's "
    "random condition is judged on it." if pooled_random else "",
    f"Gu et al.'s Llama-family shape holds on {which_models(holders(shape_id), len(reports))} "
    f"({verdicts(shape_id)}).",
    f"Mean alpha of the first token passes eps {num(GU_EPS, 1)}: "
    + "; ".join(f"{r.label} from layer {sinking[r.label][0]} ({num(len(sinking[r.label]))} of {num(r.n_layers)} "
                f"layers)" if sinking[r.label] else f"{r.label} in no layer" for r in reports) + ".")

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
massive_id = "sun2024.massive_activations"
met = [f"{r.label} (dimensions {', '.join(map(str, r.massive.dims))})" for r in reports if r.massive.strict]
short = [f"{r.label} peaks at {num(r.massive.peak_ratio)}x its layer's median |h|, "
         f"{compare(r.massive.peak_ratio, SUN_MIN_RATIO, 'above', 'short of', 'at')} {num(SUN_MIN_RATIO)}x"
         for r in reports if not r.massive.strict]
shares = []  # where the criterion is met: the share of later tokens meeting it in its first (up to three) layers
for r in reports:
    sites = r.sun_sites if r.massive.strict else None
    if sites is None:
        continue
    shown, (densest, per_window, _) = sites.met_layers[:3], sites.most_sites()
    shares.append(f"{r.label}: {' / '.join(pct(sites.later_share[i]) for i in shown)} in "
                  f"layer{'s' if len(shown) > 1 else ''} {' / '.join(map(str, shown))}"
                  f"{' ...' if len(sites.met_layers) > len(shown) else ''} (at most {num(per_window, 2)} of "
                  f"{num(sites.seq_len - 1)} later positions per window, layer {densest}); "
                  + (f"the first position from layer {sites.first_token_onset}"
                     if sites.first_token_onset is not None else "never at the first position"))
say(f"Sun et al.'s criterion, on {windows(run.num_seqs, 'Bible windows', run.seq_len)}",
    f"The criterion is met on {which_models(met, len(reports))}." if met else "No model meets the criterion.",
    f"{'; '.join(short)}." if short else "",
    f"Where it is met, the share of the tokens after the first position that meet it, from its first layer on: "
    f"{'; '.join(shares)}. The rule asks for 'a few' (Sun et al.: the starting token and the first delimiter): at "
    f"most {num(RARE_SITES)} later positions per window, judged layer by layer (it holds where some layer shows it)."
    if shares else "",
    f"The claim holds on {num(len(holders(massive_id)))} of {num(len(reports))} models ({verdicts(massive_id)}).")

# %% [markdown]
# A model that misses the 1000x cut may still have one activation far above the rest: the later sections use the
# stated fallback dimensions there, and say so. The offline SmolLM2 and Qwen weights went through 4-bit GGUF
# quantisation (Qwen's also AWQ); whether that lowered the ratio cannot be told offline.

# %% [markdown]
# ## 3 · Where the attention goes, by token kind
# The mass each key receives, $m_j = \sum_t A_{t,j} / \#\{t: t \ge j\}$, averaged over heads and the sink layers and
# grouped by what the key is: the first position, the first delimiter as Sun et al. name it (the first "." or line
# break), the other delimiters (later ones, and the ",", ";", ":", "!", "?" the project adds), weak-semantic tokens
# (articles, prepositions, conjunctions, other punctuation) and content words. The last 8 keys are left out: few
# queries see them, so their $m_j$ is large by construction.

# %%
with plotting.style():
    fig = placement_plots.mass_by_kind(reports, title=f"Attention per key by token kind ({run.placement_seqs} "
                                                      f"Bible windows of {run.seq_len} tokens)",
                                       cut=placement.DELIMITER_CUT)  # the first-delimiter claim's cut
    plotting.save(fig, fig_dir / "fig02_mass-by-kind",
                  placement_plots.mass_by_kind_caption(reports, run.placement_seqs, run.seq_len,
                                                       cut=placement.DELIMITER_CUT))
for r in reports:
    print(f"{r.label}: " + ", ".join(f"{k} {num(v)}" for k, v in r.by_kind.items()))
    print("   most attended tokens after position 0:",
          ", ".join(f"{t!r} {m:.3f} (x{n})" for t, n, m in r.secondary))
record.show("sun2024.first_delimiter")
delimiter_id = "sun2024.first_delimiter_draws_attention"
cut, delimiter = placement.DELIMITER_CUT, []  # the first delimiter's m_j over a content word's, per model
for r in reports:
    c = claim_of(delimiter_id, r)
    lo, hi = ((c.spread or {}).get("interval") if c is not None else None) or (float("nan"), float("nan"))
    if lo == lo:  # judged on every draw's windows pooled, with its interval
        pooled = against_cut(c.measured["first_delimiter_over_content"], (lo, hi), cut, LEVEL,
                             fmt=lambda x: num(x, 2), unit="x")
        delimiter.append(f"{r.label} {pooled} on all windows pooled")
    else:
        ratio = placement.over_content(r.by_kind, "first delimiter")
        delimiter.append(f"{r.label}: no first delimiter or no content word among the scored keys" if ratio is None
                         else f"{r.label} {num(ratio, 2)}x ({compare(ratio, cut, 'above', 'below', 'at')} the "
                              f"{num(cut)}x cut)")
top = "; ".join(f"{r.label}: {token!r} ({num(mass)} over {num(count)} occurrences, "
                f"{num(mass / r.by_kind['content'] if r.by_kind['content'] else None, 2)}x a content word)"
                for r in reports if r.secondary for token, count, mass in r.secondary[:1])
say(f"mass by token kind, on {on_windows}",
    f"The first position receives {span([r.by_kind['first'] for r in reports])} per query in the sink layers, "
    f"{span([placement.over_content(r.by_kind, 'first') for r in reports], 2)}x a content word "
    f"({span([r.by_kind['content'] for r in reports], 2)}).",
    f"The first delimiter against a content word: {'; '.join(delimiter)}. Sun et al.'s second sink: "
    f"{verdicts(delimiter_id)}.",
    f"The most attended token after the first position: {top}." if top else "")

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
# after the cache fills. Its control is the same protocol on each model's random weights, where no first token should
# matter and the rule must fail. Their test asks whether *any* first tokens work as sinks for streaming, ours which
# token the attention follows inside one window: the two can disagree on a BOS model, and both are shown.

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
position_id, keep = "xiao2023.sink_is_the_position", placement.POSITION_KEEP
pooled_position = []  # on every draw's windows pooled: the four alphas' intervals against the rule's cuts
for r in reports:
    c = claim_of(position_id, r)
    bounds = {name: pooled_interval(c, name) for name in ("sink", "replaced", "moved_original")}
    if all(b is not None for b in bounds.values()):
        m = c.measured
        kept, other = m["moved_original"] / m["own"], m["replaced"] / m["own"]  # of the first position's alpha
        pooled_position.append(
            f"{r.label} -- the {m['answer']}: alpha of the first position "
            f"{against_cut(m['own'], bounds['sink'], GU_EPS, LEVEL)}, "
            f"the moved first token keeps {against_cut(kept, bounds['moved_original'], keep, LEVEL, unit='x')} of it, another "
            f"first token {against_cut(other, bounds['replaced'], keep, LEVEL, unit='x')}")
stripped = [f"{r.label} without its BOS: alpha of the first position "
            f"{compare(without, with_bos, 'rises', 'falls', 'stays')} from {num(with_bos)} to {num(without)}"
            for r in reports if r.bos_stripped
            for with_bos, without in [(r.bos_stripped["alpha_with_bos"], r.bos_stripped["alpha_without_bos"])]]
say(f"position or token, on {on_windows}",
    "; ".join(f"{r.label} -- the {r.position.answer}: alpha at the first position {num(r.position.own)} as given, "
              f"{num(r.position.replaced)} with {r.position.other_token} there, {num(r.position.moved_first)} with "
              f"another text in front; the original first token moved to position {num(r.position.shift)} gets "
              f"{num(r.position.moved_original)}" for r in reports) + ".",
    f"On every draw's windows pooled: {'; '.join(pooled_position)}." if pooled_position else "",
    f"{'; '.join(stripped)}." if stripped else "",
    f"Xiao et al.'s initial position holds on {which_models(holders(position_id), len(reports))} "
    f"({verdicts(position_id)}).")

# %% [markdown]
# How to read the answer: a model trained without a BOS sees a different word first in every window, so only the
# position can carry the sink; a model that always saw a BOS first can learn to put the sink on that token instead,
# and then the BOS carries it wherever it sits. Xiao et al.'s "initial position" is the first answer.

# %% [markdown]
# ## 5 · Longer contexts and the chat template
# (a) $\alpha_0$ in the sink layers at growing context lengths, with the O(N)-memory statistics (no $N \times N$
# matrix is kept; one forward of the longest passage gives every shorter length, as in `00_tour`). In a sliding-window
# layer (Gemma-3: five of every six, W = 512) the queries past the window cannot see the first token, so there
# $\alpha_0$ averages over the first $\min(N, W)$ queries only -- Gu et al.'s $T - k$ generalised to windows; counting
# the others would make $\alpha_0$ fall with $N$ by construction. (b) Gu et al. compare base and chat checkpoints;
# with one checkpoint we can compare the same text raw and wrapped as a user message in the model's chat template
# (whose first token is then a template token). The content is token-for-token the same in both (the template's
# default system prompt comes on top, not instead of part of the text), and both rates read $\alpha_0$ from the
# queries of the same content tokens (the second to the last): the difference is the format's, not the text's.

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
by_length, chat = [], []  # (a) alpha of the first token from the shortest to the longest context; (b) raw vs chat
for r in reports:
    lengths, alpha = r.context["lengths"], r.context["alpha_first"]
    if lengths:
        even = r.context.get("uniform") or [uniform_share(n) for n in lengths]  # an even spread of attention
        sliding = r.context.get("sliding_layers") or []
        by_length.append(
            f"{r.label} {compare(alpha[-1], alpha[0], 'rises', 'falls', 'stays')} from {num(alpha[0])} at "
            f"{num(lengths[0])} tokens to {num(alpha[-1])} at {num(lengths[-1])} ({num(alpha[0] / even[0], 2)}x -> "
            f"{num(alpha[-1] / even[-1], 2)}x an even spread"
            + (f"; its {len(sliding)} sliding-window layers (W = {num(r.context['window'])}) count only the queries "
               "that see the first token" if sliding else "") + ")")
    if not r.raw_vs_chat:
        chat.append(f"{r.label} has no chat template")
        continue
    raw, templ = r.raw_vs_chat["raw"], r.raw_vs_chat["chat template"]
    chat.append(f"{r.label}'s sink rate {compare(templ, raw, 'rises', 'falls', 'stays')} from {pct(raw, 2)} raw to "
                f"{pct(templ, 2)} in its template"
                + "".join(f"; there the most attended token is {token!r} ({num(mass)})"
                          for token, _, mass in (r.chat_top or [])[:1]))
say(f"context length and chat template, on (a) {windows(run.context_windows, 'passages')} of up to "
    f"{max(run.context_lengths):,} tokens, (b) {windows(run.placement_seqs, 'windows', run.seq_len)}",
    f"(a) alpha of the first token in the sink layers: {'; '.join(by_length)}." if by_length else "",
    f"(b) {'; '.join(chat)}.")

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
gated = [r for r in reports if r.chain_numbers]
heldout = windows(run.placement_seqs, "held-out windows", run.seq_len)  # where the perplexities were measured
rows = []  # per model: each link's number, the two onsets and the bias test
for r in gated:
    n, sites = r.chain_numbers, r.sun_sites
    sn, pos, bias = n["super_neuron"], n["positive_sink_vs_other"], n.get("massive_bias")
    value = n.get("first_token_value_onset", n.get("massive_onset")) or []
    onset, sun, sink = (value[0] if value else None), n.get("sun_onset"), n["sink_onset"]
    if onset is None:
        onsets = f"no first-token value onset (no value above {SUN_MIN_ABS:g} on a massive dimension)"
    else:
        onsets = (f"the first token's value onset (|v| > {SUN_MIN_ABS:g} on a massive dimension) in layer {onset}'s "
                  "output" + ("" if sites is None else
                              f" ({num(sites.first_ratio[onset])}x its layer median at the first position, "
                              f"{compare(sites.first_ratio[onset], SUN_MIN_RATIO, 'above', 'under', 'at')} "
                              f"Sun et al.'s {num(SUN_MIN_RATIO)}x)"))
    onsets += "; " + (f"Sun et al.'s criterion first met in layer {sun}'s output" if sun is not None
                      else "Sun et al.'s criterion met in no layer")
    if sink is None:
        onsets += "; no sink layer"
    else:
        lags = [(name, sink - (layer + 1)) for name, layer in (("the value onset", onset), ("Sun's onset", sun))
                if layer is not None]  # block l's attention reads h^(l-1)
        follows = n.get("sink_follows")
        onsets += (f"; sink at layer {sink}"
                   + (": " + ", ".join(f"{num(abs(lag))} layer{'s' if abs(lag) != 1 else ''} "
                                       f"{'after' if lag >= 0 else 'before'} the first attention that reads {name}"
                                       for name, lag in lags) if lags else "")
                   + (f" -- it follows {follows}" if follows else ""))
    sun_test = ""
    if bias:
        p, sd = bias["ppl"], bias.get("first_token_relative_sd")
        sun_test = (f"; perplexity on {heldout}: {num(p['original'], 3)} as is, {num(p['set to mean'], 3)} with the "
                    f"massive sites set to their mean, {num(p['set to zero'], 3)} set to zero")
        if sd is not None:
            sun_test += (f" (the first token's massive values vary by at most {pct(sd, 2)} of their mean across "
                         f"windows; {num(bias['later_sites'])} later sites"
                         + (f", mostly {', '.join(map(repr, list(bias['later_tokens'])[:3]))}"
                            if bias["later_tokens"] else "") + ")"
                         + (": the first position is the same BOS state in every window, so setting it to its mean "
                            "rewrites it with itself and only the later sites can fail the mean edit"
                            if sd < 1e-3 else ""))
    pooled_links = []  # the links judged on every draw's windows pooled, against their cuts
    for link, words in (("origin.variance_discrepancy", "first-layer variance ratio"),
                        ("origin.dimension_disparity", "DomRatio where the sink layer reads")):
        c = claim_of(link, r)
        condition, link_cut = POOLED_CUTS[link]
        if (b := pooled_interval(c, condition)) is not None:
            number = (c.measured["ratio_t0_to_second_half"][0] if condition == "ratio"
                      else c.measured["dom_first_over_rest_at_sink"])
            pooled_links.append(f"{words} {against_cut(number, b, link_cut, LEVEL, unit='x')}")
    rows.append(f"{r.label}: first-layer variance ratio {num(n['variance_ratio_t0'], 2)}x; "
                + (f"super neuron {sn['neuron']} of layer {sn['layer']}" if sn else "no super neuron")
                + f"; {onsets}; DomRatio after the super neuron {num(n['dom_after_super'])} (of at most d = "
                f"{num(n.get('width', float('nan')))}); positive first-key scores {pct(pos[0], 2)} in sink heads vs "
                f"{pct(pos[1], 2)} in the others{sun_test}"
                + (f"; on all draws' windows pooled: {', '.join(pooled_links)}" if pooled_links else ""))
short_name = {link: link.split(".")[1].replace("_", " ") for link in LINKS}
drawn = next((c.draws_of for r in gated for link in LINKS if (c := claim_of(link, r)) and c.draws_of), "")
pooled = [link for link in LINKS if any(pooled_interval(claim_of(link, r), POOLED_CUTS.get(link, ("",))[0])
                                        is not None for r in gated)]
how = (f" (measured on {drawn}; "
       + (f"{' and '.join(short_name[link] for link in pooled)} judged on every draw's windows pooled, with "
          f"{pct(LEVEL)} bootstrap intervals; " if pooled else "")
       + f"{', '.join(short_name[link] for link in LINKS if link not in pooled)} hold or fail only where every draw "
       "agrees)") if drawn else ""
say(f"the structural-origin chain, on {on_windows} per draw",
    f"By its rule each link holds: "
    f"{'; '.join(f'{short_name[link]} on {which_models(holders(link, gated), len(gated))}' for link in LINKS)}{how}."
    if gated else "",
    f"No gated MLP, chain not run: {', '.join(r.label for r in reports if not r.chain_numbers)}."
    if len(gated) < len(reports) else "",
    "Per model:\n\n" + "\n".join(f"- {row}." for row in rows) if rows else "")  # a bullet each, not one block

# %% [markdown]
# Read how a link holds, not only that it does. Where the massive value and the sink are already there at layer 0,
# before any super neuron, the first token's embedding (a BOS) carries the state from the start, and the chain does
# not start with a neuron. Where other heads also score the first key positively almost always, the sign alone does
# not tell sink heads apart. The DomRatio is compared with the paper's value for Llama-2-7B in each claim's note.

# %% [markdown]
# ## 7 · Mid-sequence sinks
# Wong et al. (arXiv 2512.22213) find *secondary* sinks: tokens after the first that become sinks in the middle
# layers, live for some layers and draw less attention than the first token. Their code finds them by hidden states:
# a later token whose block output points along the BOS sink's ($|\cos(h_j, h_{bos})| > 0.9$) in the layers where the
# BOS sink is on, labelled by how many layers it lasts (`sinklib.interpretation.secondary_sinks`; their margins, set
# for 28-48 layers, leave a 19-layer model no room for a secondary sink, so the lifetime cut is also read at half the
# depth). Here the search also runs the other way, from attention: on the longest windows this notebook reads, the
# O(N) statistics give every key's mass $m_j$ in every layer, and a key $j \ge 1$ with $m_j > 0.3$ (Gu et al.'s
# $\epsilon$) in some layer is a sink there. Where are they, how long do they live, and do their states point along
# the first token's, as the authors find -- better than an ordinary key's do? The same search on random weights is
# the control.

# %%
mid_reports = [r for r in reports if r.mid_sequence]
mid_tokens = next((r.mid_sequence["tokens"] for r in mid_reports), 0)
mid_windows = len(mid_reports[0].mid_sequence["windows"]) if mid_reports else 0
if mid_reports:
    with plotting.style():
        fig = placement_plots.mid_sequence_sinks(mid_reports, title=f"Mid-sequence sinks ({mid_tokens:,} tokens)")
        plotting.save(fig, fig_dir / "fig05_mid-sequence-sinks",
                      f"Mid-sequence sinks on the first of {mid_windows} Bible window(s) of {mid_tokens:,} tokens per "
                      f"model ({', '.join(r.label for r in mid_reports)}). (a) m_j (attention per query that sees the "
                      f"key, mean over heads) of the BOS sink's key and of the strongest other key per layer (the "
                      f"last 8 keys left out), dotted: the same on random weights; stars: keys with m_j > {GU_EPS:g} "
                      f"in a layer, every window. (b) |cos| between each key's block output and the BOS sink's: the "
                      f"90% quantile and the median over keys; stars: the keys found in (a).")
mid_rows, mid_seen = [], {}
for r in mid_reports:
    seen = mid_seen[r.name] = llm_survey.mid_sequence_seen(r)
    control = llm_survey.mid_sequence_seen(r, "control")
    found, peak = seen["found"], seen["strongest"]
    row = f"{r.label}: " + (
        f"{num(len(found))} key(s) beyond the first pass m_j > {GU_EPS:g}: "
        + "; ".join(f"{k['token']!r} at {num(k['position'])} in layer(s) {', '.join(map(str, k['layers']))} "
                    f"(m_j {num(k['mass'])} against the BOS sink's {num(k['bos_mass'])}; |cos| with its state "
                    f"{num(k['alignment'])}, an ordinary key's {num(k['typical_alignment'])})" for k in found[:4])
        + ("; ..." if len(found) > 4 else "")
        if found else f"no key beyond the first passes m_j > {GU_EPS:g} in any layer")
    if peak is not None:
        row += (f"; the strongest other key draws m_j = {num(peak['mass'])} (position {num(peak['position'])}, layer "
                f"{peak['layer']} of {r.n_layers})")
    row += (f". The authors' hidden-state detection labels {seen['secondary']} secondary sink(s) under their margins "
            f"and {seen['secondary_adapted']} with the lifetime cut at half the depth; {pct(seen['share_aligned'])} "
            f"of the later positions pass |cos| > {MID_COS_CUT:g} in some layer")
    if control["strongest"] is not None:
        row += (f". On random weights the strongest other key draws at most {num(control['strongest']['mass'])} and "
                f"the detection labels {control['secondary']} secondary sink(s)")
    mid_rows.append(row)
    print(row)
if mid_reports:
    say(f"mid-sequence sinks, on {windows(mid_windows, 'Bible windows', mid_tokens)} per model",
        "Per model:\n\n" + "\n".join(f"- {row}." for row in mid_rows),
        f"By its rule: {verdicts('wong2025.mass_sinks_align_with_bos')}.")
nb.headline["mid_sequence"] = {name: {"found": len(seen["found"]), "strongest_other": seen["strongest"]["mass"]}
                               for name, seen in mid_seen.items()}

# %% [markdown]
# A key found by its attention can point along the first token's state or not; a criterion on the states alone can
# fire where every state shares one direction, as the median line in (b) shows when it sits near the 0.9 line. The
# authors' models have 28-48 layers and billions of parameters, and they report secondary sinks more often and more
# regularly as models grow: what these small models show (or do not) is not a verdict on theirs.

# %% [markdown]
# ## 8 · A scale rung within one family
# Every comparison above crosses families. Here one family is read at two sizes: **Qwen2.5-Coder-0.5B** and
# **-1.5B-Instruct** (28 layers, d = 1,536, 12 query / 2 KV heads; both from 4-bit GGUF files, dequantised). Both are
# measured by the same recipe as above on the same windows, each with its random-weight control; what changes with
# size -- the sink rate, Sun et al.'s criterion and its sites, the super neuron, the chain's layers, Xiao et al.'s
# position test, the mid-sequence search? The 1.5B costs about 3.4x the 0.5B per token here, so on the CPU profile the
# rung runs a **cut protocol**, printed below and stated on every record the 1.5B adds to the scorecard; on a GPU
# the profile lists Qwen2.5 0.5B, 1.5B and 7B at its full sizes.

# %%
rung_names = [] if model else list(run.rung)  # MODEL= replaces the lists with one model
rung_reports, rung_verdicts = [], {}
rung_cut = ", ".join(f"{k} {v}" for k, v in run.rung_cut)
if rung_names:
    rung = scale_rung.rung_run(run)
    print(f"scale rung: {', '.join(rung_names)}; cut: {rung_cut or 'none (the profile sizes)'}")
for name in rung_names:
    if not run.rung_cut and name in names:  # the same sizes as above: its report is already measured
        report = next(r for r in reports if r.name == name)
        model_claims = [(c, {}) for c in record.claims if c.id.endswith(f".{name}")]
    else:
        report, model_claims, _ = nb.per_model(  # a model whose records are kept above needs no second control
            name, lambda name=name: llm_survey.measure_and_judge(lambda: load(name), rung, gu=gu, paper=origin_paper,
                                                                 streaming=streaming_paper, control=name not in names),
            kept_as="@rung")
        if name not in names:  # measured only on the rung: its verdicts join the record, marked with the cut
            for claim, how in model_claims:
                record.add(scale_rung.under_cut(claim, rung_cut) if rung_cut else claim, show=False,
                           model=report.label, **how)
    rung_reports.append(report)
    rung_verdicts[report.label] = {c.id[: -len(name) - 1]: c.verdict() for c, _ in model_claims}
if rung_reports:
    rung_table = pd.DataFrame({r.label: scale_rung.rung_numbers(r) for r in rung_reports})
    display(rung_table.round(3))  # noqa: F821
    changed = pd.DataFrame(rung_verdicts).dropna()
    changed = changed[changed.nunique(axis=1) > 1]  # the rules whose verdict differs between the sizes
    display(changed if len(changed) else "every rule gives the same verdict at each size")  # noqa: F821
    nb.headline["scale_rung"] = {"models": rung_names, "cut": rung_cut,
                                 "numbers": {r.name: scale_rung.rung_numbers(r) for r in rung_reports}}

# %%
if len(rung_reports) > 1:
    with plotting.style():
        fig = placement_plots.scale_rung(rung_reports, title=f"One family at {len(rung_reports)} sizes")
        plotting.save(fig, fig_dir / "fig06_scale-rung",
                      f"{' and '.join(r.label for r in rung_reports)} measured by the same recipe"
                      + (f" under the rung's cut ({rung_cut})" if rung_cut else "")
                      + f": (a) alpha_0 per layer, {rung.num_seqs} natural sequences of {rung.seq_len} tokens; (b) "
                      f"max |h| at the first position over its layer median, with the super neuron's layer and the "
                      f"first sink layer marked; (c) the sink rate per input kind.")
    small, large = (scale_rung.rung_numbers(r) for r in (rung_reports[0], rung_reports[-1]))

    def moved(key: str, digits: int = 3, as_pct: bool = False) -> str:
        """'a -> b' for one row of the table, smallest model first."""
        show = (lambda v: pct(v, 2)) if as_pct else (lambda v: num(v, digits))
        return f"{show(small[key])} -> {show(large[key])}" if None not in (small[key], large[key]) else (
            f"{small[key]} -> {large[key]}")

    rows = [
        f"sink rate on natural text {moved('sink rate, natural', as_pct=True)}, on random tokens "
        f"{moved('sink rate, random', as_pct=True)}, on one repeated token {moved('sink rate, repeated', as_pct=True)}",
        f"sink layers {moved('sink layers (alpha_0 > eps)')} of {moved('layers')}, the first at relative depth "
        f"{moved('first sink layer, relative depth', 2)}",
        f"Sun et al.'s ratio peaks at {moved('peak |h| / layer median', 0)}x; their criterion first met at the first "
        f"token in layer {moved('Sun criterion, first layer at position 0')}, with "
        f"{moved('later Sun sites per sequence (max over layers)', 2)} later sites per sequence",
        f"the super neuron sits in layer {moved('super neuron, layer')}, the first-token value onset in layer "
        f"{moved('first-token value onset (layer)')}, the first sink layer is {moved('sink onset (layer)')}",
        f"Xiao et al.'s window-only / own-first-4 perplexity {moved('Xiao: window only / own first 4', 2)}x, line "
        f"breaks / own first 4 {moved('Xiao: 4 newlines / own first 4', 3)}x",
    ]
    if small["strongest other key, m_j"] is not None:  # the mid-sequence search ran on the rung
        rows.append(f"mid-sequence keys with m_j > {GU_EPS:g}: {moved('mid-sequence keys with m_j > eps')}; the "
                    f"strongest other key draws {moved('strongest other key, m_j')}")
    say(f"the scale rung, {' -> '.join(r.label.split(' (')[0] for r in rung_reports)}, on "
        f"{windows(rung.num_seqs, 'sequences', rung.seq_len)} per input and {windows(rung.placement_seqs, 'windows')}"
        + (" (a cut protocol)" if rung_cut else ""),
        "From the smaller to the larger model:\n\n" + "\n".join(f"- {row}." for row in rows),
        "Verdicts that differ between the sizes: "
        + ("; ".join(f"`{rule}` {' -> '.join(str(v) for v in changed.loc[rule])}" for rule in changed.index)
           if len(changed) else "none") + ".")
elif rung_names:
    print("the rung needs two sizes of one family; this profile lists", rung_names)

# %% [markdown]
# One family, two sizes, one recipe: what moves here moves with scale (and with the one-draw cut), not with the
# tokenizer, the positional scheme or the training data. Both checkpoints went through 4-bit quantisation, and the
# 0.5B also through AWQ, so small differences in activation sizes may be the quantisation's.

# %% [markdown]
# ## Scorecard

# %%
display(record.table())  # noqa: F821
claims = record.claims
drawn = [c for c in claims if len(c.draws) > 1]
unsettled = [c.id for c in drawn if c.holds is None]
controlled = [c for c in claims if c.control is not None]
on_noise = [c for c in controlled if c.control]  # rules that hold on random weights
expected = [c.id for c in on_noise if c.at_init is True]  # the paper predicts it: an architectural effect
contradict = [c.id for c in on_noise if c.at_init is False]  # the paper says training makes the effect
say(f"draws and controls, {windows(len(claims), 'verdicts')}",
    f"{num(len(drawn))} of {num(len(claims))} verdicts were judged over several draws; unsettled among them: "
    + (f"{num(len(unsettled))} ({', '.join(unsettled)})." if unsettled else "none."),
    f"On random weights {num(len(on_noise))} of {num(len(controlled))} controlled rules hold"
    + (f"; where the paper predicts it (an architectural effect): {', '.join(expected)}" if expected else "")
    + (f"; where the paper says training makes the effect: {', '.join(contradict)}" if contradict else "") + ".")
nb.headline |= {"models": names, "reports": [r.as_dict() for r in reports], "holds_all": record.all_hold,
                "added_seconds": added_seconds}
nb.close()

# %% [markdown]
# ## Questions to try
# 1. Add a fourth model with `model=`: does it follow its family's pattern?
# 2. Section 4: why does removing Gemma-3's BOS move the sink while SmolLM2 has none to remove?
# 3. Section 6: which link of the chain fails first on which family?
