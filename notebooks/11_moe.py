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
# # 11 · Mixture-of-experts models: routers, super experts and the sink
#
# In a mixture-of-experts (MoE) decoder each token's MLP is replaced by $k$ of $E$ experts that a router picks. Does
# the first token -- the sink -- take a route of its own, and do a few experts produce the massive activation that
# makes it a sink? Su et al. (*Unveiling Super Experts in Mixture-of-Experts LLMs*, arXiv 2507.23279) find a handful
# of **super experts** whose down-projection output carries the massive activation; pruning them collapses the sink
# and the model, pruning as many random experts does nothing.
#
# **A stand-in, said plainly.** No pretrained MoE ships offline, so the CPU profile uses **SmolLM2-MoE (upcycled
# stand-in, not a trained MoE)**: SmolLM2-135M's FFN neurons split into 8 experts of co-activating neurons, a router
# fitted on Bible text, top-6, as a real `MixtralForCausalLM` (`sinklib/models/upcycle.py`; perplexity 39.5 against
# 23.8 dense). Its router was *fitted*, not trained with the model, and kept near-uniform in its weights (each
# chosen expert gets about 1/6): what it shows about routing is which experts are *selected*, not how confident the
# router is, and nothing about what training with load balancing would do. The GPU profile runs the same code on
# OLMoE-1B-7B, and with `MODEL=` on Qwen1.5-MoE-A2.7B or DeepSeek-V2-Lite (Mixtral-8x7B needs more than one 80 GB
# GPU: `MODEL=mistralai/Mixtral-8x7B-v0.1 GPU_GB=141`, checked first by `make figures PROFILE=gpu DRYRUN=1`).

# %% [markdown]
# **What you will learn.** whether the sink token takes a route of its own through a mixture of experts, Su et al.'s
# super experts, and what pruning them does -- on a labelled stand-in, with what a stand-in cannot test.
#
# **Prerequisites.** `00_tour`, `10_llm`; top-k expert routing.
#
# **Time.** about 1 min on the CPU profile; 30-45 min to work through.

# %% tags=["parameters"]
profile = "cpu"  # smoke | cpu | gpu (sizes live in sinklib/pipeline/profiles.py)
model = ""  # empty: the profile's MoE model(s); else one registry name or hub id of an MoE
device = ""  # empty: the profile default; else cpu, cuda or auto
seed = 0
out_dir = "../figures/11_moe"

# %%
import math

from sinklib.architectures.moe import moe_plots, moe_sinks
from sinklib.architectures.moe.super_experts import super_experts
from sinklib.core import plotting
from sinklib.core.data import text_windows
from sinklib.models.load import load_model, require_family
from sinklib.pipeline import notebook

nb = notebook.start("11_moe", profile, model, device, seed, out_dir, families=None, label="MoE")
run, fig_dir, record = nb.run, nb.fig_dir, nb.record
lm = load_model(model or run.models[0], device=run.device, dtype=run.dtype)
require_family(lm, "moe", "11_moe")
record.model, title = lm.label, f"{lm.label}"
ids = text_windows(lm.tokenizer, run.num_seqs, run.seq_len, run.seed, split="heldout")
held = text_windows(lm.tokenizer, run.eval_seqs, run.eval_seq_len, run.seed + 1, split="heldout")
print(lm, f"\n{len(ids)} held-out windows of {run.seq_len} tokens; perplexity on {len(held)} x {run.eval_seq_len}")

# %% [markdown]
# ## 1 · Does the sink token take a route of its own?
# For every MoE layer: how often the first token is sent to the *same* set of $k$ experts across different inputs
# (the most common set's share), against a token in the middle of the window; and which experts take the first
# token's slots. (The router entropy $H = -\sum_e p_e \log p_e$ is also measured: on the stand-in it is $\ln 8$ at
# every token by construction, so it says nothing here.)

# %% [markdown]
# > **Predict, then run.** Before running: will the first token be routed to the same experts in every sequence, more
# > often than other positions are?

# %%
route = moe_sinks.routing(lm, ids, batch_size=run.batch_size)
with plotting.style():
    fig = moe_plots.routing(route.same_set_first, route.same_set_rest, route.load_first,
                            title=f"Routing of the first token, {title}")
    plotting.save(fig, fig_dir / "fig01_routing",
                  f"{title}: (a) per layer, the share of {len(ids)} held-out windows whose first token gets the most "
                  f"common set of top-k experts, and the same for the middle token; (b) the share of the first "
                  f"token's top-k slots each expert takes.")
always = [i for i, s in enumerate(route.same_set_first) if s == 1.0]
print(f"layers where every window sends the first token to the same experts: {always}")
n_experts = route.load_first.shape[1]
print(f"router entropy (nats), mean over layers: first token {sum(route.entropy_first) / len(route.entropy_first):.3f}, "
      f"others {sum(route.entropy_rest) / len(route.entropy_rest):.3f}; uniform over {n_experts}: {math.log(n_experts):.3f}")

# %% [markdown]
# **What we saw (stand-in, CPU profile: 32 held-out windows of 64 tokens).** In 20 of the 30 layers (3-8, 13, 15
# and 18-29) every window sends the first token to the same six experts; a token in the middle of the window gets
# its most common set in 16-75% of the windows (97% in the last layer). The first token's route is fixed, like its
# hidden state. The router entropy is 2.079 nats = ln 8 at every token: the stand-in's router scale makes the
# probabilities near-uniform by construction, so the entropy cannot tell anything apart here.

# %% [markdown]
# ## 2 · Super experts
# Su et al.'s rule, as their code applies it: for every expert, $a$ = its largest $|$down_proj output$|$ over the
# calibration tokens; keep the first 75% of the layers; a super expert has $a$ above the 99.5th percentile of all
# kept $a$ **and** above $\max a \,/\!/\, 10$. (On the stand-in each expert's down projection is scaled by $k = 6$,
# so its $a$ is 6x its contribution at weight 1/6.)

# %%
supers = super_experts(route.output_max)
n_total = route.output_max.numel()
with plotting.style():
    fig = moe_plots.expert_maxima(route.output_max, supers,
                                  title=f"Largest expert output per layer, {title} (circled: super experts)")
    plotting.save(fig, fig_dir / "fig02_expert-maxima",
                  f"{title}: largest |down_proj output| of each expert over {len(ids)} held-out windows (log colour); "
                  f"circled: the super experts by Su et al.'s rule ({len(supers)} of {n_total}).")
for layer, e, a in supers:
    print(f"super expert: layer {layer}, expert {e}, a = {a:,.0f}")
record.add(moe_sinks.super_experts_claim(supers, n_total))

# %% [markdown]
# **What we saw.** One super expert of 240: expert 0 of layer 11, with a = 133,436 (at its routing weight of about
# 1/6, about 22,000 -- the size of the first token's largest activation, 22,406). Layer 11 is one of the layers
# where SmolLM2's massive activation on dimension 507 jumps (02 finds onsets at layers 1, 2 and 11): the stand-in's
# expert split put the neurons that write it into one expert. A trained MoE may place it anywhere; that the stand-in
# has exactly one is a consequence of how it was built, not evidence about trained MoEs.

# %% [markdown]
# ## 3 · Prune them, or as many random experts
# Zero the super experts' weights (the router may still pick them; their output is then 0), measure $\alpha_0$
# per layer, the first token's largest $|h|$ and perplexity; then the same with as many random experts from the
# same layers (never a super expert), several draws.

# %%
chosen = [(layer, e) for layer, e, _ in supers]
runs = moe_sinks.compare_pruning(lm, chosen, ids, held, run.random_draws, run.seed, run.batch_size)
summary = {name: r.summary() for name, r in runs.items()}
with plotting.style():
    fig = moe_plots.pruning({k: r.alpha_first for k, r in runs.items()}, {k: r.max_abs_first for k, r in runs.items()},
                            {k: r.ppl for k, r in runs.items()},
                            title=f"Pruning super experts vs random experts, {title}")
    plotting.save(fig, fig_dir / "fig03_pruning",
                  f"{title}: (a) alpha_0 per layer (mean over heads and {len(ids)} windows) and (b) the first token's "
                  f"largest |h| per layer (mean over windows, log scale) as is, with the super experts "
                  f"{chosen} pruned, and with as many random experts of the same layers pruned "
                  f"({run.random_draws} draws); perplexity on {len(held)} held-out windows of {run.eval_seq_len} tokens "
                  f"in the legend.")
for name, s in summary.items():
    print(f"{name}: alpha_0 {s['alpha']:.3f}, first token max |h| {s['max_abs_first']:,.0f}, perplexity {s['ppl']:.1f}")
if chosen:
    record.add(moe_sinks.pruning_claim(summary["as is"], summary["super experts pruned"],
                                       [v for k, v in summary.items() if k.startswith("random")]))

# %% [markdown]
# **What we saw.** (b) The first token carries a first massive value of about 770 in layers 2-7 (written by the
# dense model's early neurons) and a second of about 22,400 from layer 11, the super expert's layer, on. Pruning
# the one super expert removes the second (the first token's largest |h| stays at 60-290 from layer 11 on; its
# maximum over all layers falls from 22,406 to 770), and (a) with it the sink of every later layer: alpha_0 in layers 12-29 drops from 0.38-0.79 to
# 0.03-0.32 (about 0.05 from layer 16 on), 0.479 -> 0.167 averaged over all layers, and perplexity rises from 39.5 to 146.0 (3.7x). The sink of
# layers 3-9 stays (0.39-0.44): it rests on the massive value written in layers 1-2, before the super expert. Three
# random experts of layer 11 change alpha_0 by less than 0.5% and perplexity by at most 1.5% (39.2-40.1). Su et al.'s
# claim holds on the stand-in, for the reason they give: the super expert writes the massive activation, and the
# sink needs it.

# %% [markdown]
# ## What the stand-in cannot test
# Load balancing, router confidence and how super experts *form* in training all need a trained MoE: the stand-in's
# experts are slices of one dense MLP and its router a regression fitted afterwards. Those claims are left to the
# GPU profile's real MoE models; none is recorded here as holding or failing.

# %%
display(record.table())  # noqa: F821
nb.headline |= {"model": lm.name, "label": lm.label, "same_set_first": route.same_set_first,
                "same_set_rest": route.same_set_rest, "entropy_first": route.entropy_first,
                "super_experts": supers, "pruning": summary, "holds_all": record.all_hold}
nb.close()

# %% [markdown]
# ## Questions to try
# 1. Which claims can the upcycled stand-in not test, and what would a trained MoE (GPU profile) add?
# 2. Prune twice as many random experts: does the sink survive?
