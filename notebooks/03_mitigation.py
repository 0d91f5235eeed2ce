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
# # 03 · Removing the sink: eight attention variants trained side by side
#
# A sink is something softmax attention *learns*. This notebook trains the same small Llama-style decoder
# (`sinklib.mitigation.variant_lm`: RMSNorm, SwiGLU, a BOS token at position 0) from scratch with nine attention functions
# -- the softmax baseline and eight mitigations -- on the same data, seeds and budget, and measures what each does to
# the sink and to the loss:
#
# | variant | attention / head output | from |
# |---|---|---|
# | `softmax` | $A=\mathrm{softmax}(qk^\top/\sqrt{d})$, $o=Av$ | baseline |
# | `headwise_rmsnorm` | $\hat o = o/\mathrm{RMS}(o)\odot g$ per head | structural origin, arXiv 2605.06611 |
# | `gated_headwise` | $o' = o\,\sigma(x W_g)$, one gate per head | Qiu et al., arXiv 2505.06708 |
# | `gated_elementwise` | $o' = o \odot \sigma(x W_g)$, one gate per channel | Qiu et al. |
# | `sigmoid` | $A=\sigma(qk^\top/\sqrt{d} + b)$, no normalisation; $b$ learnable, initialised at $-\log T$ (Gu et al.'s 0.44% sink rate is for sigmoid attention *without* a bias) | sigmoid attention |
# | `softmax_off_by_one` | $A_{tj}=e^{l_{tj}}/(1+\sum_{j'} e^{l_{tj'}})$ | Miller 2023 (blog post "Attention is off by one") |
# | `softpick` | $A=\mathrm{ReLU}(e^{l}-1)/\sum\lvert e^{l}-1\rvert$ | arXiv 2504.20966 |
# | `sink_logit` | softmax over $[l_t, s_h]$, learned $s_h$ per head, sink column dropped | gpt-oss |
# | `kv_bias` | a learnable key $k'$ and value $v'$ per head, always visible | Sun et al., arXiv 2402.17762 |
#
# **The setting.** The CPU profile trains on **bigram-backcopy** (Guo et al., arXiv 2410.13835): tokens follow a fixed
# bigram chain, except that after one of three *trigger* tokens the next token copies the token before the trigger. An
# attention head is needed only on trigger queries; everywhere else it has nothing to do -- exactly the situation in
# which softmax parks attention on BOS. On the World English Bible as bytes, no sink grew within a CPU budget (section 6
# shows it; `sinklib/mitigation/protocol.py` lists the settings tried), so real text is the *check* here, not the main
# run. The GPU profile trains a Llama-2-style 12 x 768 model on text (`train_data="file:<path>"` for an OpenWebText
# dump); it has not been run here, because no accelerator was available.
#
# **Papers.** Qiu et al., *Gated Attention for Large Language Models: Non-linearity, Sparsity, and Attention-Sink-Free*,
# arXiv 2505.06708. Zuhri et al., *Softpick: No Attention Sink, No Massive Activations with Rectified Softmax*, arXiv
# 2504.20966. Gu et al., *When Attention Sink Emerges in Language Models: An Empirical View*, arXiv 2410.10781
# (sigmoid attention, the sink metric). Sun et al., *Massive Activations in Large Language Models*, arXiv 2402.17762
# (the KV bias). Guo et al., *Active-Dormant Attention Heads: Mechanistically Demystifying Extreme-Token Phenomena in
# LLMs*, arXiv 2410.13835 (bigram-backcopy). *The Structural Origin of Attention Sink*, arXiv 2605.06611 (head-wise
# RMSNorm).
#
# **Words.** Positions count from 0; position 0 holds **BOS**, a fixed beginning-of-sequence token. $\alpha_0$ is the
# attention the first token receives, averaged over the queries (`00_tour`, section 2); the **sink rate** is the
# fraction of (sequence, layer, head) triples with $\alpha_0 > \epsilon = 0.3$, as in every notebook. **RMSNorm**
# divides a vector by its root mean square and multiplies by a learned gain $g$; **SwiGLU** is the gated MLP
# $(\mathrm{SiLU}(x W_1) \odot x W_3) W_2$ with $\mathrm{SiLU}(z) = z\,\sigma(z)$. Losses are in **nats** (natural
# log) per token.

# %% [markdown]
# **What you will learn.** which of nine attention functions grow a first-token sink when trained from scratch, how a
# sink and an active-dormant head emerge in the softmax baseline, what each variant costs in loss, and what a small
# training run can and cannot say about the papers' claims.
#
# **Prerequisites.** `00_tour` and `02_interpretation`; a training loop; the softmax variants in docs/GLOSSARY.md.
#
# **Time.** under 1 min with warm caches, about 14 min from empty ones on 2 CPU cores (it trains 24 small models in
# bfloat16 autocast: 9 variants x 2 seeds and 3 Bible-byte runs x 2 seeds; the GPU profile 3 seeds a variant); 60-90
# min to work through (exercises: `exercises/03_mitigation`).

# %% tags=["parameters"]
profile = "cpu"  # smoke | cpu | gpu (training sizes live in sinklib/mitigation/protocol.py)
model = ""  # not used: this notebook trains its own small models from scratch
device = ""  # empty: the profile default; else cpu, cuda or auto
seed = 0  # seeds used: seed, seed + 1, ... (the profile sets how many)
out_dir = "../figures/03_mitigation"
variants = ""  # empty: all; else a comma-separated subset of sinklib.mitigation.variants.VARIANTS
train_data = ""  # empty: the profile default; else bible, bigram_backcopy or file:/path/to/text
train_steps = 0  # 0: the profile default

# %% [markdown]
# > **Predict, then run.** Before running: which variants will grow a first-token sink, and which cannot by
# > construction? Set `variants` (a parameter) to a subset, e.g. `"softmax,softpick"`, to train fewer.

# %%
from dataclasses import replace

import numpy as np
import pandas as pd
import torch
from IPython.display import Markdown, display

from sinklib.core import plotting
from sinklib.core.claims import OWN_QUESTION
from sinklib.core.loaded import resolve_device
from sinklib.core.metrics import GU_EPS, SUN_MIN_ABS
from sinklib.core.results import load_reference
from sinklib.core.takeaways import claim_line, compare, num, pct, say, span, windows
from sinklib.mitigation import (
    comparison,
    comparison_plots,
    convergence,
    learned_sinks,
    training,
    training_data,
    variant_lm,
    verdicts,
)
from sinklib.mitigation.seed_claims import judge
from sinklib.models import tiny_random_hub
from sinklib.pipeline import notebook

nb = notebook.start("03_mitigation", profile, model, device, seed, out_dir, families=None, grad=True)
run, fig_dir = nb.run, nb.fig_dir
if model:
    print(f"model={model!r} is ignored: 03_mitigation trains small models from scratch "
          f"(sizes in sinklib/mitigation/protocol.py)")
dev = str(resolve_device(run.device))
base = run.train
if train_data:
    base = replace(base, data=train_data)
if train_steps:
    base = replace(base, steps=int(train_steps))
names = comparison.parse_variants(variants)
seeds = [run.seed + i for i in range(run.train_seeds)]
uniform = comparison.uniform_alpha(base.seq_len)
m = base.model
setting = (f"{base.data}, {m.n_layers} layers x {m.n_heads} heads, d={m.d_model}, "
           f"{'RoPE' if m.rope_theta else 'no positional encoding'}, T={base.seq_len}, batch {base.batch_size}, "
           f"{base.steps} steps, lr {base.lr:g}, {'bfloat16 autocast' if base.precision == 'bf16' else 'float32'}, "
           f"seeds {seeds}")
print(f"{len(names)} variants x {len(seeds)} seeds on {dev}: {setting}")
runs = comparison.train_variants(base, names, seeds, device=dev)
train_seconds = sum(r["seconds"] for rs in runs.values() for r in rs)
print(f"training time of these runs (cached runs report the time they took): {train_seconds:.0f} s")
record = nb.record
record.model = f"TinyLM trained here ({m.n_layers} x {m.n_heads} heads, d={m.d_model})"  # what the claims measured
headline = nb.headline
headline |= {"setting": setting, "seeds": seeds, "variants": names, "uniform_alpha": uniform}

# %% [markdown]
# ## 1 · A sink emerges in the softmax baseline
# $\alpha_0$ is the mean attention every query pays to position 0 (BOS), per layer and head (Gu et al.); uniform
# attention over $T$ causal keys gives $H_T/T$ (printed below for this run's $T$). The sink rate is the fraction of
# (sequence, layer, head) triples with $\alpha_0 > \epsilon = 0.3$.

# %%
base_runs = runs["softmax"]
crossing = comparison.first_crossing(base_runs, GU_EPS)
heads_by_seed = [comparison.strongest_head(r) for r in base_runs]  # each seed's own strongest head
layer, head, alpha_top = heads_by_seed[0]
with plotting.style():
    fig = comparison_plots.emergence(base_runs, uniform, GU_EPS,
                                     title=f"Sink emergence in the softmax baseline ({base.data}, {len(seeds)} seeds)")
    plotting.save(fig, fig_dir / "fig01_sink-emergence",
                  f"Sink emergence in the softmax baseline ({setting}), mean over {len(seeds)} seeds, band: range "
                  f"over seeds. (a) every head's attention to BOS; dotted: uniform ({uniform:.3f}); dashed: eps "
                  f"{GU_EPS}. (b) sink rate and validation loss (black, right axis).")
final = base_runs[-1]["checkpoints"][-1]
print(f"final alpha_0 per layer x head (seed {seeds[-1]}): "
      f"{[[round(a, 3) for a in r] for r in final['alpha_by_head']]}")
print("strongest head per seed (heads of different seeds are unrelated): "
      + "; ".join(f"seed {s}: layer {li} head {h}, alpha_0 {a:.3f}" for s, (li, h, a) in zip(seeds, heads_by_seed))
      + f" (uniform {uniform:.3f}); first step with a head above eps {GU_EPS} per seed: {crossing}")
headline["emergence"] = {"first_step_above_eps": crossing, "strongest_head_by_seed": heads_by_seed,
                         "final_alpha_by_head": [r["checkpoints"][-1]["alpha_by_head"] for r in base_runs],
                         "late_slope_per_100_steps": [verdicts.late_slope(r) for r in base_runs]}
start = [a for r in base_runs for row in r["checkpoints"][0]["alpha_by_head"] for a in row]  # every head at step 0
rising = [s for s, r in zip(seeds, base_runs) if verdicts.late_slope(r, key="alpha_by_head") > verdicts.RISING]
# The claim, judged on every training seed alone (then over the seeds); its random-weight control is the same
# TinyLM at step 0 -- seeded like each run, untrained -- judged by the same rule (Gu et al.: no sink before training).
paper = load_reference("mitigations")
[grows] = judge(record, "sink", runs, paper, seeds, variants=["softmax"], uniform=uniform, show=True)

# %% [markdown]
# Every variant is compared at the same step; where the baseline's sink is still forming at the last checkpoint,
# section 5 says where that matters (a variant may only *delay* the sink).

# %% [markdown]
# **Active and dormant.** On bigram-backcopy the strongest sink head should be *active* on trigger queries (attend
# to $t-1$, the token to copy) and *dormant* elsewhere (attend to BOS). Measured on held-out sequences with each
# seed's final model, on that model's own strongest head:

# %%
val_ids = training_data.make_batch(base, "heldout", 64, torch.Generator().manual_seed(4321))
probe = f"{val_ids.shape[0]} held-out sequences of {val_ids.shape[1]} tokens"
ads = []
if base.data == "bigram_backcopy":
    for s, (li, h, _) in zip(seeds, heads_by_seed):
        ad = comparison.active_dormant(training.load_trained(comparison.variant_config(base, "softmax", s)),
                                       val_ids, li, h)
        ads.append({"seed": s, "layer": li, "head": h, **ad})
        print(f"Verdict, seed {s}: layer {li} head {h} is {'' if ad['holds'] else 'NOT '}active-dormant: BOS weight "
              f"{ad['bos_other']:.2f} on other queries vs {ad['bos_trigger']:.2f} on triggers; weight on t-1 "
              f"{ad['prev_trigger']:.2f} on triggers vs {ad['prev_other']:.2f} elsewhere.")
    display(pd.DataFrame(ads).set_index("seed").round(3))
    headline["active_dormant"] = ads
# section 1's one takeaway: the emergence above and, where the data has triggers, the active-dormant probe
cut = verdicts.REMOVES_UNIFORM  # "no sink": every head at most this many times uniform attention
crossed = [f"{c} in seed {s}" for s, c in zip(seeds, crossing) if c is not None]
probed = {k: [a[k] for a in ads] for k in ("bos_trigger", "bos_other", "prev_trigger", "prev_other",
                                           "trigger_fraction")}
mean = {k: np.mean(v) for k, v in probed.items() if v}  # empty where the data has no triggers
final = [a for _, _, a in heads_by_seed]  # each seed's strongest head at the last step
say(f"softmax baseline, {len(seeds)} seeds",
    f"First, the sink every variant below is compared with: the softmax baseline's strongest head ends at "
    f"{span(final)} of its attention on the first token ({num(max(final) / uniform)}x uniform)"
    + ("; it is still rising, or not above eps in every seed -- a weak sink caught while it forms, and every "
       "comparison below is against that." if rising or len(crossed) < len(seeds) else "; a settled sink."),
    f"Before training, the heads' first-token attention is {span(start)} against uniform attention's "
    f"{num(uniform)}: " + (f"no head is above {cut:g}x uniform, the untrained model has no sink."
                           if max(start) <= cut * uniform else
                           f"some head is already above {cut:g}x uniform before training."),
    f"At the last step each seed's strongest head reaches {span([a for _, _, a in heads_by_seed])}; "
    f"{len(crossed)} of {len(seeds)} seeds have a head above eps = {GU_EPS:g}"
    + (f" (first at step {', '.join(crossed)})." if crossed else "."),
    (f"The strongest head is still rising over the last quarter of training in seed(s) "
     f"{', '.join(str(s) for s in rising)}: the budget catches the sink while it forms." if rising else
     "No seed's strongest head is still rising over the last quarter of training."),
    f"{claim_line(grows)}.",
    (f"In {sum(a['holds'] for a in ads)} of {len(ads)} seeds the strongest head is active-dormant as Guo et al. "
     f"describe, measured on {probe}. On trigger queries ({pct(mean['trigger_fraction'])} of them) it gives BOS "
     f"{span(probed['bos_trigger'])} and the token to copy (the previous one) {span(probed['prev_trigger'])}; on "
     f"the other queries BOS gets {span(probed['bos_other'])} "
     f"({compare(mean['bos_other'], mean['bos_trigger'], 'more', 'less', 'as much')} than on triggers) and the "
     f"previous token {span(probed['prev_other'])} (triggers give it "
     f"{compare(mean['prev_trigger'], mean['prev_other'], 'more', 'less', 'as much')})."
     if ads else "Active-dormant probe not measured: the training data has no trigger tokens."))

# %% [markdown]
# Read as Guo et al. do: the sink is the head's way of doing nothing when there is nothing to copy.

# %% [markdown]
# ## 2 · Each variant's strongest first-token head
# Independently trained models share no heads: head 0 of one model has nothing to do with head 0 of another. So
# each panel shows *that* model's own head with the largest row-normalised first-token share
# $A_{t,0}/\sum_j A_{t,j}$ (first seed's final model, one held-out sequence). The outlined column is BOS. Variants
# whose rows need not sum to one (sigmoid, softpick, off-by-one, sink logit, KV bias) show the weights on real tokens
# as they are.

# %%
show = min(32, base.seq_len)
maps, own_heads, missing = {}, {}, {}
row, triggers = training_data.most_triggers(val_ids[:, :show], base.data)  # the sequence with the most triggers
with torch.no_grad():
    for v in names:
        li, h, share = comparison.strongest_head(runs[v][0], key="share_by_head")
        net = training.load_trained(comparison.variant_config(base, v, seeds[0]))
        _, A, _ = net(val_ids[row:row + 1, :show], record=True)  # (L, 1, H, T, T)
        name = f"{v}\nL{li} H{h}, share {share:.2f}"
        maps[name] = A[li, 0, h]
        missing[name] = {"sink_logit": "sink logit", "kv_bias": "KV bias", "softmax_off_by_one": "zero logit",
                         "sigmoid": "nowhere (unnormalised)", "softpick": "nowhere (rectified)"}.get(v, "")
        own_heads[v] = [li, h, share]
with plotting.style():
    fig = comparison_plots.attention_maps(maps, "each model's own strongest head", trigger_rows=triggers,
                                          missing=missing,
                                          title="Final attention of each variant's strongest first-token head")
    plotting.save(fig, fig_dir / "fig02_attention-maps",
                  f"Each variant's strongest first-token head after training ({setting}; seed {seeds[0]}), on the "
                  f"first {show} tokens of a held-out sequence, log colour scale; outlined: BOS; 'rest' strip: the "
                  f"weight a query gives to no token; green triangles: trigger queries {triggers}.")
headline["strongest_head_by_variant"] = own_heads
table = comparison.final_table(runs)
mass = table[("attention row mass", "mean")]  # mean row sum over seeds
short = [f"{v} {num(1 - m)}" for v, m in mass.items() if v != "sigmoid" and m < verdicts.FULL_ROW]
lo, hi = min(own_heads, key=lambda v: own_heads[v][2]), max(own_heads, key=lambda v: own_heads[v][2])
n_seeds = int(table[("seeds", "")].min())
say(f"each variant's own strongest head, {n_seeds} seed{'s' if n_seeds > 1 else ''}",
    f"In the first seed, the strongest head's first-token share ranges from {num(own_heads[lo][2])} ({lo}) to "
    f"{num(own_heads[hi][2])} ({hi}).",
    (f"Averaged over seeds, rows that sum to less than one give part of each query's attention to no token: "
     f"{', '.join(short)} (mean share of the row)." if short else "Every normalised variant's rows sum to about one."),
    f"Sigmoid rows are unnormalised: their mean row sum is {num(mass['sigmoid'])}." if "sigmoid" in mass else "")

# %% [markdown]
# **How to read the maps.** A softmax sink head shows the active-dormant pattern row by row: on the trigger rows
# (green triangles) the BOS cell is dark and the $t-1$ cell bright; on the other rows BOS takes the largest share.
# A variant whose rows need not sum to one can instead leave a row nearly empty (a bright "rest" strip): a query
# with nothing to do then gives weight to no token. Variants with an extra slot (off-by-one, sink logit, KV bias)
# send part of each row there.

# %% [markdown]
# ## 3 · Loss curves
# (a) Validation loss of every variant (mean over seeds, band $\pm$ 1 sd) with the task's **entropy floor**: the loss of
# a model that knows the data process exactly (`training_data.bigram_backcopy_entropy`), below which no model can go;
# (b) each variant's loss minus softmax's, seed by seed. The step-0 checkpoint is left out so the end stays readable.
# Each variant keeps its colour in every figure of this notebook.

# %%
floor = training_data.bigram_backcopy_entropy(base.seq_len) if base.data == "bigram_backcopy" else None
with plotting.style():
    fig = comparison_plots.loss_curves(runs, title=f"Validation loss per variant ({base.data})", note=setting,
                                       floor=floor)
    plotting.save(fig, fig_dir / "fig03_loss-curves",
                  f"(a) Validation loss against training step for every attention variant ({setting}); mean over "
                  f"{len(seeds)} seeds, band +- 1 sd" + (f"; dotted: the task's entropy floor {floor:.3f} nats" if floor
                                                         else "") + "; (b) the difference to softmax, paired by seed.")
if floor is not None:
    sm = comparison.final_table({"softmax": runs["softmax"]}).loc["softmax", ("val loss", "mean")]
    print(f"softmax ends {sm - floor:.3f} nats above the entropy floor ({sm:.3f} vs {floor:.3f}): that gap is all "
          f"any variant could win; the differences between variants below are measured against it.")
headline["entropy_floor"] = floor
b = table.loc["softmax", ("val loss", "mean")]
sds = comparison.LOSS_GAP_SDS  # a gap counts beyond this many pooled seed sd's
gaps = {side: ", ".join(f"{v} ({d:+.3f})" for v, d in group.items()) or "none"
        for side, group in comparison.loss_against_baseline(table, "softmax", sds).items()}
say(f"{int(table.loc['softmax', ('seeds', '')])} seeds",
    (f"Softmax ends {num(b - floor)} nats {compare(b, floor, 'above', 'below', 'at')} the task's entropy floor "
     f"({num(b)} vs {num(floor)}): that gap is all any variant could win." if floor is not None else
     f"Softmax ends at {num(b)} nats."),
    f"More than {sds:g} seed sd's above softmax at the end: {gaps['above']}. Within {sds:g} sd's: "
    f"{gaps['within']}. More than {sds:g} sd's below: {gaps['below']}.")

# %% [markdown]
# Panel (b) shows whether a gap is still *widening* at the last step; a small model on a synthetic task says what a
# mitigation costs at this scale, not at the papers'.

# %% [markdown]
# ## 4 · Final table, beside the published numbers
# Last checkpoint, mean $\pm$ sd over seeds. *First-token attention* is $\alpha_0$ averaged over sequences, layers
# and heads; *max activation* the largest $|h|$ in the residual stream; *kurtosis* that of all residual entries
# (3 for a Gaussian); *DomRatio* the first token's largest $|h_i|$ over its mean $|h|$; *row mass* the mean row sum
# of the attention weights (1 for softmax; < 1 where mass goes to a learned sink); *first-token share* $\alpha_0$ of
# the row-normalised weights $A_{t,0}/\sum_j A_{t,j}$ (equal to $\alpha_0$ for softmax; for unnormalised rows it
# tells a small row from a row that ignores BOS) and *share sink rate* the sink rate on those shares. The
# published numbers come from
# models of 150M-15B parameters trained on billions of tokens (`data/reference/mitigations.json`, with sources);
# compare directions, not values. **What these columns may not test here:** a model this small may grow no massive
# activations (the papers' are in the hundreds to thousands); the takeaway below says whether this run's did. Where
# it did not, the *max activation*, *kurtosis* and *DomRatio* columns cannot confirm or refute the published claims
# about outliers -- only the attention columns and the loss can.

# %%
verdict_lines = {v: verdicts.sink_verdict(v, table, uniform, runs=runs[v]).line for v in names}  # printed in section 5
shown = comparison.format_table(table)
display(shown)
reference = comparison.reference_table(paper, names)
display(Markdown(f"**Published** ({paper['source']})\n\n{comparison.markdown(reference)}"))
table.to_csv(fig_dir / "final_table.csv")
(fig_dir / "final_table.md").write_text(f"Setting: {setting}\n\n{comparison.markdown(shown)}\n\nPublished "
                                        f"({paper['source']}):\n\n{comparison.markdown(reference)}\n")
headline["final"] = {v: {k: table.loc[v, (lab, "mean")] for k, lab in comparison.FINAL_METRICS.items()}
                     for v in names}
directions = comparison.published_directions(table, paper, runs=runs)  # each direction judged seed by seed
agreement = [d.line for d in directions]
fa = table[("first-token attention", "mean")].astype(float)
act = table[("max activation", "mean")].astype(float)
massive = act.max() > SUN_MIN_ABS  # Sun et al.'s |h| > 100
agrees = sum(d.verdict == "agrees" for d in directions)
unsettled_directions = sum(d.verdict.startswith("unsettled") for d in directions)
say(f"{int(table[('seeds', '')].iloc[0])} seeds",
    f"First-token attention ranges from {num(fa.min())} ({fa.idxmin()}) to {num(fa.max())} ({fa.idxmax()}); "
    f"uniform attention gives {num(uniform)}.",
    f"The largest |h| is {span(act.tolist())} across variants: this model {'has' if massive else 'has no'} massive "
    f"activations in Sun et al.'s sense (above {SUN_MIN_ABS:g})"
    + ("" if massive else ", so the activation columns cannot test the papers' claims about outliers") + ".",
    (f"Against the published directions: {agrees} of {len(agreement)} comparisons agree in every seed"
     + (f", {unsettled_directions} split across seeds" if unsettled_directions else "") + "." if agreement else
     "No published number to compare a direction with."))

# %% [markdown]
# ## 5 · Verdicts, computed from the table
# Rules in `sinklib.mitigation.verdicts.sink_verdict`: a variant *removes* the sink when its sink rate is under 2% and
# $\alpha_0 \le 1.5\times$ uniform **both** on the weights and on the row-normalised shares (a small $\alpha_0$ in rows
# that carry little mass only *shrinks the rows*); *reduces* it at $\le 0.5\times$ the baseline's $\alpha_0$; *keeps* it
# within $0.5$-$1.5\times$. Four verdicts: *holds*, *does NOT hold*, *unsettled* (the seeds disagree, or a number sits
# within its stated margin of a cut) and *cannot be judged here*. **Seeds first:** every claim is judged on each
# training seed alone (the variant's run against the softmax run of the same seed) and holds, or fails, only when every
# seed agrees; otherwise it is unsettled, with "k of n draws hold". Each record's measured values are the means over the
# seeds (the table of section 4), the seeds' own values beside them, and it names its own paper. The printed lines below
# are the pooled verdicts (mean over seeds): when $\alpha_0$ lies within two seed sd's of the cut that decides -- or
# within `verdicts.ALPHA_MARGIN`, how far the same seeds' mean moved when trained on another CPU -- they name both sides
# ("removes or reduces"), and a removal left open that way is unsettled. **Removed or delayed:** the softmax sink forms
# late in training (section 1), so a variant with no sink at the last step may only be slower to grow one. A *removal*
# whose strongest head is still rising over the last quarter of training (faster than `verdicts.RISING` per 100 steps in
# any seed, `verdicts.late_slope`) cannot be judged at this budget; a slope within `verdicts.SLOPE_MARGIN` of that cut
# (how far bfloat16 training on another CPU moved it: docs/reproducibility.md, "Determinism") leaves the removal
# unsettled. A *reduction* whose head still rises is moving away from removal: it does not hold. The new figure shows
# every variant's strongest head over training. All runs train with weight decay on weight matrices only (gains, biases,
# sink logits and the KV bias are not decayed toward zero, i.e. toward the baseline). Convergence
# (`sinklib.mitigation.convergence.convergence`): head-wise RMSNorm is *faster* only if both the mean validation loss
# over training and the final loss are lower than softmax's -- each a difference paired by training seed -- by more than
# its margin (2 sd of the paired differences, at least the 0.029 nats a loss difference moved across machines); *slower*
# (the claim fails) if either is higher by more; else unsettled. **Controls:** each rule is also applied to the step-0
# checkpoints -- the same TinyLM at initialisation, untrained. "Grows a sink" must fail there (Gu et al.: the sink is
# learned); "removes" cannot be judged there (an untrained softmax has no sink to remove), and convergence has no
# untrained counterpart. Where `mitigations.json` gives a number for a variant and for softmax, the measured ratio is
# set beside the published one.

# %%
for line in verdict_lines.values():
    print("-", line)
# softmax's "grows a sink" was recorded in section 1; every other variant's "removes it", with its step-0 control
removes = judge(record, "sink", runs, paper, seeds, variants=[v for v in names if v != "softmax"], uniform=uniform)
claim_verdict = {c.id.split(".")[1].removesuffix("_removes_sink").removesuffix("_grows_sink"): str(c.verdict())
                 for c in record.claims if c.id.startswith("mitigation.")}  # softmax: "grows a sink"; others: "removes"
with plotting.style():
    # the outlier columns test nothing where no variant grew a massive activation (Sun et al.'s |h| > 100)
    labels = ["val loss", "first-token attention", "first-token share", "sink rate"] + (
        ["max activation", "kurtosis"] if massive else [])
    fig = comparison_plots.final_bars(table, labels, uniform=uniform, title=f"Final metrics per variant ({base.data})",
                                      verdicts=claim_verdict)
    plotting.save(fig, fig_dir / "fig04_final-metrics",
                  f"Final metrics per attention variant ({setting}): {', '.join(labels)}; mean over {len(seeds)} "
                  f"seeds, bars +- 1 sd (proportions clipped to [0, 1]); colour: the verdict of the variant's claim "
                  f"judged seed by seed (softmax: grows a sink; the others: remove it); dotted: uniform attention "
                  f"({uniform:.3f}). Table: final_table.md."
                  + ("" if massive else f" Max activation and kurtosis are left out: no variant's max |h| reaches "
                                        f"Sun et al.'s {SUN_MIN_ABS:g} (largest {act.max():.3g}), so they test nothing."))
with plotting.style():
    fig = comparison_plots.strongest_head_over_training(runs, GU_EPS, uniform,
                                                        title=f"Removed or delayed? The strongest head per variant "
                                                              f"({base.data})")
    plotting.save(fig, fig_dir / "fig06_strongest-head",
                  f"The strongest head's row-normalised first-token share against training step, per variant "
                  f"({setting}); mean over {len(seeds)} seeds, band: range over seeds; dashed: eps = {GU_EPS}; "
                  f"dotted: uniform attention ({uniform:.3f}).")
headline["verdicts"] = verdict_lines
headline["baseline_grows_sink"] = verdicts.grows_sink(table, "softmax", uniform)
print("\nAgainst the published direction (paper-scale models; only where both numbers exist). A direction is not "
      "the claim: a variant can lower first-token attention in every seed and still leave its removal unsettled.")
for d in directions:
    removal = d.variant in claim_verdict and d.metric == "first-token attention"  # the claim this metric judges
    print("-", d.line, f"[its removal claim: {claim_verdict[d.variant]}]" if removal else "")
headline["published_agreement"] = agreement
parity_claim = table_claim = None
if "headwise_rmsnorm" in runs:
    conv = convergence.convergence(runs["headwise_rmsnorm"], runs["softmax"])
    print("-", convergence.convergence_line("head-wise RMSNorm", conv, base.data))
    judge(record, "convergence", runs, paper, seeds, setting=base.data)
    # the paper's other claim: parity across positions -- the first layer's attention outputs at position 0 vary as
    # the later ones' (random tokens), the first token's DomRatio after the second layer's input norm falls, the last
    # layer's effective rank rises -- measured on the final weights, its control on the weights each run started
    # from; "removes the sink" above is this project's own question for head-wise RMSNorm (the record says so)
    parity_claim, table_claim = judge(record, "parity", runs, paper, seeds, device=dev, show=True)
    headline["rmsnorm_convergence"] = conv
by_verdict = {v: [] for v in ("holds", "does NOT hold", "unsettled", "cannot be judged here")}
for c in removes:  # a removal no paper claims is marked as this project's own question
    by_verdict[c.verdict()].append(c.id.split(".")[1].removesuffix("_removes_sink")
                                   + (" (our own question, not its paper's claim)" if c.paper == OWN_QUESTION else ""))
listed = {v: ", ".join(items) or "none" for v, items in by_verdict.items()}
parity_said = []
if parity_claim is not None and "variance_ratio" in parity_claim.measured:
    m = parity_claim.measured
    parity_said.append(
        f"What arXiv 2605.06611 claims of head-wise RMSNorm, statistical parity across positions: layer "
        f"{m.get('layer', 0) + 1}'s attention outputs vary {num(m['variance_ratio'][1])}x as much over a batch at the "
        f"first position as at the later positions, against softmax's {num(m['variance_ratio'][0])}x (parity: equal "
        f"variance; {m['over']}); {claim_line(parity_claim)}.")
    c = parity_claim.control_measured if isinstance(parity_claim.control_measured, dict) else {}
    if parity_claim.control is True and "variance_ratio" in c:
        parity_said.append(f"On the weights training started from it is already {num(c['variance_ratio'][1])}x "
                           f"against softmax's {num(c['variance_ratio'][0])}x: the norm sets every head output's RMS "
                           f"to one by construction, so the parity is the architecture's, not learned.")
if table_claim is not None:
    m = table_claim.measured
    where = f" after the RMSNorm that reads layer {m['layer'] + 1}'s output" if "layer" in m else ""
    parity_said.append(
        f"The two numbers of its pre-training table: first-token DomRatio {num(m['dom_ratio'][1])} against softmax's "
        f"{num(m['dom_ratio'][0])}{where}, effective rank {num(m['effective_rank'][1])} against "
        f"{num(m['effective_rank'][0])} in the last layer's states ({m['over']}); {claim_line(table_claim)}.")
say(f"{len(grows.draws) if grows.draws else 1} training seeds",
    f"{claim_line(grows)}.",
    f"Removes the sink in every seed: {listed['holds']}.",
    f"Does not, in every seed: {listed['does NOT hold']}.",
    (f"Unsettled (the seeds disagree, or a number sits within its margin of a cut): {listed['unsettled']}."
     if by_verdict["unsettled"] else ""),
    (f"Cannot be judged here (e.g. a removal whose strongest head is still rising): "
     f"{listed['cannot be judged here']}." if by_verdict["cannot be judged here"] else ""),
    "On the untrained model (before the first step) the softmax rule "
    + {True: "holds -- see its control note", False: "fails, as it should: the sink is learned",
       None: "was not judged"}[grows.control] + ".",
    *parity_said)

# %% [markdown]
# **Removed or delayed? Try twice the budget.** Figure 6 shows which removals are still rising at the last step; this
# run does not train longer, so no verdict here rests on a longer run. To see whether a delayed sink arrives, run
# `cd notebooks && papermill 03_mitigation.ipynb /tmp/03-long.ipynb -p out_dir /tmp/03-long -p train_steps 1200 -p
# variants gated_headwise,softmax_off_by_one,sink_logit,kv_bias,sigmoid,softpick` and compare its figure 6 with this
# one. Qiu et al. report element-wise gating removing the sink (first-token attention 0.048 against 0.467, their
# Table 4) in models far larger and longer trained than these.

# %% [markdown]
# ## 6 · Check on real text: the World English Bible
# The same model and budget on Bible bytes (BOS + a random window; on the CPU the first two of the seeds above):
# softmax against head-wise RMSNorm, twice -- with the gain $g$ initialised at 1 (as any RMSNorm) and at 0.1. The
# second run asks whether a gap comes from the method or from its start: unit-RMS head outputs times $W_O$ (std 0.02)
# put entries of about
# $0.02\sqrt{d}$ into a residual stream whose embeddings start at 0.02. Does a sink grow, and does the head-wise norm
# converge faster on natural data at this scale?

# %%
text_cfg = run.text_check
if text_cfg is not None and not train_data and "headwise_rmsnorm" in names:
    if train_steps:
        text_cfg = replace(text_cfg, steps=int(train_steps))
    small_gain = replace(text_cfg.model, attention="headwise_rmsnorm", options=(("gain_init", 0.1),))
    text_seeds = seeds[:run.text_seeds or len(seeds)]
    text_runs = comparison.train_variants(text_cfg, ["softmax", "headwise_rmsnorm"], text_seeds, device=dev)
    text_runs["headwise_rmsnorm g0=0.1"] = comparison.train_seeds(replace(text_cfg, model=small_gain), text_seeds,
                                                                  dev)
    text_table = comparison.final_table(text_runs)
    display(comparison.format_table(text_table))
    text_uniform = comparison.uniform_alpha(text_cfg.seq_len)
    print("-", verdicts.sink_verdict("softmax", text_table, text_uniform).line)
    gains = ["headwise_rmsnorm", "headwise_rmsnorm g0=0.1"]
    text_conv = {name: convergence.convergence(text_runs[name], text_runs["softmax"]) for name in gains}
    for name in gains:
        print("-", convergence.convergence_line(name.replace("headwise_rmsnorm", "head-wise RMSNorm"),
                                                text_conv[name], "Bible bytes"))
    # the convergence and parity claims on real text, each gain recorded under its own setting ("bible g0=0.1")
    text_claims = (judge(record, "convergence", text_runs, paper, text_seeds, variants=gains, setting="bible")
                   + judge(record, "parity", text_runs, paper, text_seeds, variants=gains, setting="bible",
                           device=dev))
    with plotting.style():
        fig = comparison_plots.loss_curves(text_runs, title="Bible bytes: softmax vs head-wise RMSNorm",
                                           note=setting.replace(base.data, "bible"))
        plotting.save(fig, fig_dir / "fig05_bible-check",
                      f"(a) Validation loss on World English Bible bytes: softmax vs head-wise RMSNorm, gain "
                      f"initialised at 1 and at 0.1 ({len(text_seeds)} seeds, band +- 1 sd); (b) the difference to "
                      f"softmax, paired by seed.")
    headline["bible_check"] = {"final": {v: {k: text_table.loc[v, (lab, "mean")]
                                              for k, lab in comparison.FINAL_METRICS.items()} for v in text_runs},
                               "rmsnorm_convergence": text_conv}
    text_fa = text_table.loc["softmax", ("first-token attention", "mean")]
    losses = ", ".join(f"{v} {num(loss)}" for v, loss in text_table[("val loss", "mean")].items())
    say(f"Bible bytes, {int(text_table.loc['softmax', ('seeds', '')])} seeds",
        f"Softmax {'grows a' if verdicts.grows_sink(text_table, 'softmax', text_uniform) else 'grows no'} "
        f"first-token sink here: first-token attention {num(text_fa)}, "
        f"{compare(text_fa, text_uniform, 'above', 'below', 'at')} the uniform {num(text_uniform)}, sink rate "
        f"{pct(text_table.loc['softmax', ('sink rate', 'mean')])}.",
        f"Final validation loss: {losses}.",
        " ".join(f"{claim_line(c)}." for c in text_claims))

# %% [markdown]
# The second gain initialisation separates the method from its start: if head-wise RMSNorm with a small gain lands
# where softmax does, the gap of the unit-gain run came from the initialisation, not from the normalisation. The
# paper's faster convergence (arXiv 2605.06611, 152M parameters, 20B tokens) is neither confirmed nor refuted by a
# model this small.

# %% [markdown]
# ## 7 · Learned sinks: does every attention kernel keep them?
# A learned sink logit is only a mitigation while the kernel computing attention keeps it:
# $p_{tj} = e^{l_{tj}} / (e^{s_h} + \sum_k e^{l_{tk}})$. A kernel that ignores $s_h$ normalises over the real keys
# alone, and nothing raises an error -- training and serving stacks have shipped exactly that. The check runs one
# forward through each kernel available here and compares the next-token log-probs (and, where the kernel returns
# its probabilities, the sink's mass and $\alpha_0$) with the formula written out in float64. Two models: the
# sink-logit TinyLM trained above, whose two paths are this project's own (the materialised softmax of the CPU and
# the fused SDPA path of a GPU), and a tiny gpt-oss with random weights, run through transformers' kernels and
# sinklib's statistics path. The same transcription with the sinks left out is the control: a kernel that drops them
# has to land there. `python -m sinklib check-sinks MODEL` runs this on any model with learned sinks.

# %%
sink_checks, sink_controls = [], {}
if "sink_logit" in names:
    sink_cfg = comparison.variant_config(base, "sink_logit", seeds[0])
    sink_net = training.load_trained(sink_cfg).eval()
    sink_ids = val_ids[:4].to(next(sink_net.parameters()).device)
    sink_checks.append(learned_sinks.check_tiny_lm(sink_net, sink_ids,
                                                   f"TinyLM sink_logit, trained here (seed {seeds[0]})"))
    torch.manual_seed(run.seed)  # its control: the same configuration, random weights (sink logits at their init, 0)
    fresh = variant_lm.TinyLM(sink_cfg.model).to(sink_ids.device).eval()
    sink_controls[sink_checks[-1].model] = learned_sinks.kernel_claim(
        learned_sinks.check_tiny_lm(fresh, sink_ids, "TinyLM sink_logit, random weights"))
torch.manual_seed(run.seed)  # the tiny gpt-oss's random weights
oss_model, _ = tiny_random_hub.gpt_oss()
oss_window = learned_sinks.shortest_window(oss_model)  # every query sees the first key within the window
sink_checks.append(learned_sinks.check_model(oss_model.eval(), val_ids[:4, :oss_window].cpu(),
                                             "gpt-oss, tiny, random weights"))
for check in sink_checks:
    print("\n".join(check.lines()))
with plotting.style():
    fig = comparison_plots.learned_sink_kernels(sink_checks,
                                                title="Learned sinks through each attention kernel")
    plotting.save(fig, fig_dir / "fig07_learned-sinks-kernels",
                  "Each attention kernel's largest next-token log-prob error against the float64 transcription of "
                  "p_tj = exp(l_tj) / (exp(s_h) + sum_k exp(l_tk)) (log axis; green: keeps the sinks, red: drops "
                  "them, hatched grey: not run here, with its reason in the text); dashed: the tolerance; dotted: "
                  "the error of the transcription with the sinks left out (the control). Left: 03's sink-logit "
                  "TinyLM; right: a tiny gpt-oss with random weights, byte windows of the held-out data.")
# the gpt-oss is random weights itself: a kernel keeps or drops the sinks whatever the weights, which is why the
# TinyLM's control on random weights is expected to hold too
kernel_claims = [record.add(learned_sinks.kernel_claim(check), show=False, model=check.model,
                            control=sink_controls.get(check.model),
                            control_note="" if check.model in sink_controls else
                            "measured on random weights itself: whether a kernel keeps the sinks does not depend on "
                            "training") for check in sink_checks]
headline["learned_sinks"] = [check.headline() for check in sink_checks]
seen = []
for check, claim in zip(sink_checks, kernel_claims):
    kept = [k.kernel for k in check.kernels if k.keeps]
    dropped = [f"{k.kernel} (off by up to {num(k.logp_max, 2)} nats)" for k in check.kernels if k.keeps is False]
    refused = [f"{k.kernel}: {k.why}" for k in check.kernels if not k.ran]
    seen.append(
        f"{check.model}, on {windows(check.windows, 'windows', check.tokens)}: the sinks take "
        f"{pct(sum(check.reference_sink_mass) / len(check.reference_sink_mass))} of the attention on average over the "
        f"layers, and leaving them out moves the next-token log-probs by up to {num(check.drop_effect, 2)} nats "
        f"(tolerance {check.tolerance:g}). Within the tolerance: {', '.join(kept) or 'none'}."
        + (f" Dropping the sinks: {'; '.join(dropped)}." if dropped else "")
        + (f" Not run here: {'; '.join(refused)}." if refused else "") + f" {claim_line(claim)}.")
say(f"learned sinks through each kernel, {windows(max(c.windows for c in sink_checks), 'windows')} per model", *seen)

# %% [markdown]
# **Reading it.** transformers declares that gpt-oss cannot run under `sdpa` and refuses it; forced through the
# attention registry, its sdpa function never reads `s_aux` and lands on the control -- the silent drop a framework
# gets when it hands such a model to a generic fused kernel. Flex attention refuses sinks on a CPU, and the flash /
# cuDNN backends need a GPU: on `device="cuda"` the same check gives them their own rows.

# %%
nb.close()

# %% [markdown]
# ## Questions to try
# 1. Train `variants="softmax,headwise_rmsnorm"` with 4 seeds: does the loss gap survive?
# 2. Which variants' rows sum to less than 1, and where does the rest of the attention go?
# 3. The bigram-backcopy task has trigger tokens. Why does the active-dormant head need them?
