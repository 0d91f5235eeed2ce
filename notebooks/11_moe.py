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
# fitted on Bible text, top-6, as a real `MixtralForCausalLM` (`sinklib/models/upcycle.py`; its perplexity is higher
# than the dense model's). Its experts are slices of one dense MLP, not experts trained as such. Its router was
# *fitted*, not trained with the model, and kept near-uniform in its weights (each chosen expert gets about 1/6):
# what it shows about routing is which experts are *selected*, not how confident the
# router is, and nothing about what training with load balancing would do. The GPU profile runs the same code on
# OLMoE-1B-7B, and with `MODEL=` on Qwen1.5-MoE-A2.7B or DeepSeek-V2-Lite (Mixtral-8x7B needs more than one 80 GB
# GPU: `MODEL=mistralai/Mixtral-8x7B-v0.1 GPU_GB=141`, checked first by `make figures PROFILE=gpu DRYRUN=1`).

# %% [markdown]
# **What you will learn.** whether the sink token takes a route of its own through a mixture of experts, Su et al.'s
# super experts, and what pruning them does -- on a labelled stand-in, with what a stand-in cannot test.
#
# **Prerequisites.** `00_tour`, `10_llm`; top-k expert routing.
#
# **Time.** about 2 min on the CPU profile (about 5 min the first time: it builds the stand-ins); 30-45 min to
# work through.

# %% tags=["parameters"]
profile = "cpu"  # smoke | cpu | gpu (sizes live in sinklib/architectures/moe/protocol.py)
model = ""  # empty: the profile's MoE model(s); else one registry name or hub id of an MoE
device = ""  # empty: the profile default; else cpu, cuda or auto
seed = 0
out_dir = "../figures/11_moe"

# %%
import gc
import math
from dataclasses import replace

import pandas as pd

from sinklib.architectures.moe import moe_plots, moe_sinks, pruning, su_claims, trained_router
from sinklib.architectures.moe import takeaways as moe_takeaways
from sinklib.architectures.moe.super_experts import super_experts
from sinklib.core import analysis, plotting, takeaways
from sinklib.core.data import text_windows
from sinklib.models.load import load_model, require_family
from sinklib.models.random_init import random_weights
from sinklib.pipeline import notebook

nb = notebook.start("11_moe", profile, model, device, seed, out_dir, families=None, label="MoE")
run, fig_dir, record = nb.run, nb.fig_dir, nb.record
lm = nb.placed(load_model(model or run.models[0], device=run.device, dtype=run.dtype))
require_family(lm, "moe", "11_moe")
record.model, title = lm.label, f"{lm.label}"
ids = text_windows(lm.tokenizer, run.num_seqs, run.seq_len, run.seed, split="heldout")
held = text_windows(lm.tokenizer, run.eval_seqs, run.eval_seq_len, run.seed + 1, split="heldout")
standin = "stand-in" in lm.label
note = su_claims.STAND_IN_NOTE if standin else ""
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
route = moe_sinks.routing(lm, ids, batch_size=run.batch_size, first_token=True)  # + alpha_0 and |h_0| as is, for 3
with plotting.style():
    fig = moe_plots.routing(route.same_set_first, route.same_set_rest, route.load_first,
                            title=f"Routing of the first token, {title}", layers=route.moe_layers)
    plotting.save(fig, fig_dir / "fig01_routing",
                  f"{title}: (a) per layer, the share of {len(ids)} held-out windows whose first token gets the most "
                  f"common set of top-k experts, and the same for the middle token; (b) the share of the first "
                  f"token's top-k slots each expert takes.")
always = [layer for layer, s in zip(route.moe_layers, route.same_set_first) if s == 1.0]  # the model's layer index
print(f"layers where every window sends the first token to the same experts: {always}")
n_experts = route.load_first.shape[1]
print(f"router entropy (nats), mean over layers: first token {sum(route.entropy_first) / len(route.entropy_first):.3f}, "
      f"others {sum(route.entropy_rest) / len(route.entropy_rest):.3f}; uniform over {n_experts}: {math.log(n_experts):.3f}")

# %%
windows = moe_takeaways.windows(len(ids), run.seq_len)  # what sections 1-3 measured on
takeaways.show(moe_takeaways.routing(route.same_set_first, route.same_set_rest, route.entropy_first, route.entropy_rest,
                                     n_experts, title, layers=route.moe_layers, size=windows))

# %% [markdown]
# Where every window sends the first token to the same experts, the first token's route is as fixed as its hidden
# state. On the stand-in the router's scale keeps its probabilities near-uniform by construction, so only *which*
# experts are selected carries information, not the router's confidence.

# %% [markdown]
# ## 2 · Super experts
# Su et al.'s rule, as their code applies it: for every expert, $a$ = its largest $|$down_proj output$|$ over the
# calibration tokens; keep the first 75% of the layers; a super expert has $a$ above the 99.5th percentile of all
# kept $a$ **and** above $\max a \,/\!/\, 10$. With few layer-experts that rank rule always passes the largest one
# (the 99.5th percentile of fewer than 200 values lies between the two largest), whatever the weights; so the claim
# that a few experts carry *extreme* outputs also asks for an effect size: each super expert's $a$ must be at least
# 10x the median $a$ of the other routed experts. The same analysis runs on random weights of the same
# configuration (forwards only, fewer windows) as the control. (On the stand-in each expert's down projection is
# scaled by $k = 6$, so its $a$ is 6x its contribution at weight 1/6.)

# %%
supers = super_experts(route.output_max, shared=route.shared_max)  # rows: the model's layers; -1: a shared expert
n_total = su_claims.candidate_count(route)
with plotting.style():
    fig = moe_plots.expert_maxima(route.output_max, supers,
                                  title=f"Largest expert output per layer, {title} (circled: super experts)")
    plotting.save(fig, fig_dir / "fig02_expert-maxima",
                  f"{title}: largest |down_proj output| of each expert over {len(ids)} held-out windows (log colour); "
                  f"circled: the super experts by Su et al.'s rule ({len(supers)} of {n_total}).")
for layer, e, a in supers:
    print(f"super expert: layer {layer}, expert {e}, a = {a:,.0f}")
# the authors' hook keeps output[0].abs().max() per expert call -- on transformers' 2-D expert calls the earliest
# routed token's row (super_experts.first_routed_max); the same rule on that a:
as_hooked = super_experts(route.first_routed_max, shared=route.shared_max)
# Su et al.: a super expert's extreme output sits in the channel of the residual's massive activation
massive = analysis.massive_dimensions(analysis.profile_sinks(lm, ids[:run.batch_size], batch_size=run.batch_size,
                                                              progress=False))
channels = pruning.expert_channels(lm, ids, [(layer, e) for layer, e, _ in supers], run.batch_size)
for (layer, e), (channel, value) in channels.items():
    print(f"{moe_sinks.expert_name(layer, e)}: largest output {value:,.0f} in channel {channel} -- "
          f"{'a' if channel in massive.dims else 'not a'} massive dimension of the residual {massive.dims}")
print(f"with a as the authors' hook records it: {[(layer, e) for layer, e, _ in as_hooked]} "
      f"({'the same' if [s[:2] for s in as_hooked] == [s[:2] for s in supers] else 'a different'} set)")
control = random_weights(lm, seed=run.seed)
control_ids = ids[:run.control_seqs]
control_route = moe_sinks.routing(control, control_ids, batch_size=run.batch_size)
control_supers = super_experts(control_route.output_max, shared=control_route.shared_max)
se_claim = su_claims.super_experts_over_draws(lm, route.output_max, len(ids), run.seed, run.draw_seqs, run.seq_len,
                                              run.batch_size, note, shared=route.shared_max)
se_claim = record.add(su_claims.standin_verdict(se_claim) if standin else se_claim,
                      control=su_claims.super_experts_claim(control_route.output_max, note=note,
                                                            shared=control_route.shared_max))
print(f"the authors' rule alone finds {len(supers)} super expert(s) here and {len(control_supers)} on random weights; "
      f"effect size {se_claim.measured['effect size']:,.1f} here, {se_claim.control_measured['effect size']:,.2f} on "
      f"random weights")

# %%
takeaways.show(moe_takeaways.super_experts(se_claim, n_total, title, size=windows))

# %% [markdown]
# On the stand-in, the expert split put the neurons that write SmolLM2's massive activation into one expert, in a
# layer where that activation jumps. A trained MoE may place it anywhere: that the stand-in has a super expert is a
# consequence of how it was built (slices of a dense MLP), not evidence about trained MoEs. On random weights the
# rank rule still names an expert, but nothing stands out.

# %% [markdown]
# ## 3 · Prune them, or as many random experts
# Zero the super experts' weights (the router may still pick them; their output is then 0), measure $\alpha_0$
# per layer, the first token's largest $|h|$ and perplexity; then the same with as many random experts from the
# same layers (never a super expert), several draws.

# %%
chosen = [(layer, e) for layer, e, _ in supers]
runs = pruning.compare_pruning(lm, chosen, ids, held, run.random_draws, run.seed, run.batch_size,
                                 as_is=route.first_state)  # the model as is was measured while routing
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
if chosen:  # Su et al. (Sec. 4): the attention sink decays by about 90% or more in every layer
    drop = pruning.sink_drop_by_layer(runs["as is"].alpha_first, runs["super experts pruned"].alpha_first)
    first_super = min(layer for layer, _ in chosen)
    after = [d for layer, d in enumerate(drop) if layer > first_super and d == d]  # d == d: not NaN
    print("sink drop per layer after pruning the super experts (1 - alpha_pruned / alpha_as_is):",
          [round(d, 2) for d in drop])
    print(f"layers after the super expert: median drop {sorted(after)[len(after) // 2]:.0%} "
          f"(Su et al.: about 90% or more)" if after else "no layer after the super expert")
prune_claim = None
if chosen:
    control_chosen = [(layer, e) for layer, e, _ in control_supers]
    control_prune = None
    if control_chosen:  # the same comparison on random weights: fewer and shorter windows, one draw
        control_runs = pruning.compare_pruning(control, control_chosen, control_ids[:max(1, run.control_seqs // 2)],
                                                 held[:1, :run.eval_seq_len // 2], 1, run.seed, run.batch_size)
        control_prune = su_claims.pruning_over_draws({k: r.summary() for k, r in control_runs.items()}, note)
    why = "" if control_prune else "control not run: the authors' rule found no expert on random weights"
    prune_claim = replace(su_claims.pruning_over_draws(summary, note), control_note=why)
    prune_claim = record.add(su_claims.standin_verdict(prune_claim) if standin else prune_claim,
                             control=control_prune, control_note=why)
del control, control_route
gc.collect()

# %%
takeaways.show(moe_takeaways.pruning(summary, prune_claim, title, size=windows,
                                     ppl_size=moe_takeaways.windows(len(held), run.eval_seq_len)))

# %% [markdown]
# Where the super-expert prune removes the first token's late massive value, the sink of the later layers goes with
# it: Su et al.'s mechanism -- the super expert writes the massive activation, and the sink needs it. A sink in the
# layers *before* the super expert rests on massive values written earlier (by the dense model's early neurons on
# the stand-in) and survives.

# %% [markdown]
# ## 4 · A router trained, not fitted
# Whether the first token takes a fixed route is a question about what a router *learns*; the stand-in's was fitted
# after the fact. So a small Mixtral-class model is **trained here** from scratch with 03's harness (the same tiny
# decoder, data and budget as 03's runs; its FFN is 4 experts of half the dense width, top-2, with Mixtral's
# load-balancing loss), one run per seed, and measured on held-out sequences: does a sink form, and does position 0
# take one expert set in every sequence while a middle token does not? Reported as measured, sink or none.

# %%
if run.router_train is not None:
    routers = trained_router.measure_seeds(run.router_train, list(range(run.seed, run.seed + run.router_seeds)))
    table = pd.DataFrame([{"seed": r.seed, "val loss": r.val_loss, "sink rate": r.sink_rate,
                           "alpha_0 by layer": [round(a, 3) for a in r.alpha_by_layer],
                           "first token: most common expert set": [round(s, 2) for s in r.same_set_first],
                           "middle token: most common expert set": [round(s, 2) for s in r.same_set_middle],
                           "first / other tokens' max |h|": round(r.max_abs_first / r.max_abs_rest, 2)}
                          for r in routers])
    display(table)  # noqa: F821 (display: Jupyter's)
    takeaways.show(moe_takeaways.trained_router(routers, trained_router.LABEL, moe_takeaways.windows(
        trained_router.HELDOUT_SEQS, run.router_train.seq_len, "held-out sequences")))
    nb.headline["trained_router"] = table.to_dict(orient="records")

# %% [markdown]
# ## What the stand-in cannot test
# The stand-in's experts are slices of one dense MLP and its router a regression fitted afterwards. Every claim below
# needs a trained MoE (the GPU profile's real ones); the two measured above keep their numbers and are recorded as
# "cannot be judged here", with what the rule gave on the stand-in.

# %%
if standin:
    display(pd.DataFrame([{"claim": k, "why the stand-in cannot test it": v}  # noqa: F821 (display: Jupyter's)
                          for k, v in su_claims.STANDIN_CANNOT_TEST.items()]))

# %%
display(record.table())  # noqa: F821
nb.headline |= {"model": lm.name, "label": lm.label, "moe_layers": route.moe_layers,
                "same_set_first": route.same_set_first,
                "super_expert_channels": {f"{k[0]},{k[1]}": v for k, v in channels.items()},
                "massive_dims": massive.dims,
                "same_set_rest": route.same_set_rest, "entropy_first": route.entropy_first,
                "super_experts": supers, "super_experts_as_hooked": as_hooked, "pruning": summary,
                "holds_all": record.all_hold}
nb.close()

# %% [markdown]
# ## Questions to try
# 1. Which claims can the upcycled stand-in not test, and what would a trained MoE (GPU profile) add?
# 2. Prune twice as many random experts: does the sink survive?
