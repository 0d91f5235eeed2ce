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

import pandas as pd

from sinklib.architectures.moe import moe_plots, moe_sinks, pruning, su_claims, trained_router
from sinklib.architectures.moe.super_experts import EFFECT, super_experts
from sinklib.core import analysis, plotting
from sinklib.core.data import text_windows
from sinklib.core.takeaways import claim_line, compare, layer_ranges, num, pct, say, span, windows
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
measured_on = windows(len(ids), "held-out windows", run.seq_len)  # what sections 1-3 measured on
print(lm, f"\n{measured_on}; perplexity on {len(held)} x {run.eval_seq_len}")

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
    top_k = getattr(lm.model.config, "num_experts_per_tok", None) or round(1 / float(route.load_first.max()))
    n_exp = route.load_first.shape[1]
    entropy = sum(route.entropy_first) / len(route.entropy_first)  # mean router entropy on the first token (nats)
    fig = moe_plots.routing(route.same_set_first, route.same_set_rest, route.load_first,
                            title=f"Routing of the first token, {title}", layers=route.moe_layers, k=top_k,
                            note=f"router entropy on the first token {entropy:.3f} nats; "
                                 f"ln {n_exp} = {math.log(n_exp):.3f} is a uniform router")
    plotting.save(fig, fig_dir / "fig01_routing",
                  f"{title}, {measured_on}: (a) per layer, the share of windows whose first token gets its most "
                  f"common set of top-k experts, and the same for the middle token; (b) each expert's share of the "
                  f"first token's top-{top_k} slots, from 0 to 1/{top_k} (chosen for every input); under it, the "
                  f"router's mean entropy on the first token against ln {n_exp}, the entropy of a uniform router.")
always = [layer for layer, s in zip(route.moe_layers, route.same_set_first) if s == 1.0]  # the model's layer index
n_layers, n_experts = len(route.moe_layers), route.load_first.shape[1]
first, rest = sum(route.same_set_first) / n_layers, sum(route.same_set_rest) / n_layers  # mean over layers
h_first, h_rest = sum(route.entropy_first) / n_layers, sum(route.entropy_rest) / n_layers
uniform = math.log(n_experts)  # the entropy of a uniform router
near_uniform = abs(h_first - uniform) < 0.01 * uniform and abs(h_rest - uniform) < 0.01 * uniform
print(f"layers where every window sends the first token to the same experts: {always}")
print(f"router entropy (nats), mean over layers: first token {h_first:.3f}, others {h_rest:.3f}; "
      f"uniform over {n_experts}: {uniform:.3f}")

# %%
kind = "layers" if route.moe_layers == list(range(n_layers)) else "layers with routed experts"  # DeepSeek-V2: 0 dense
say(f"{title}, {measured_on}",
    f"In {len(always)} of the {n_layers} {kind} ({layer_ranges(always)}) every window sends the first token to the "
    f"same set of experts." if always else
    f"In none of the {n_layers} {kind} does every window send the first token to the same experts.",
    f"A token in the middle of the window gets its most common set in {pct(min(route.same_set_rest))}-"
    f"{pct(max(route.same_set_rest))} of the windows, depending on the layer; averaged over layers the first token "
    f"gets its most common set {compare(first, rest, 'more often than', 'less often than', 'as often as')} the "
    f"middle token ({pct(first)} of the windows against {pct(rest)}).",
    f"The router entropy is {num(h_first, 4)} nats on the first token and {num(h_rest, 4)} on the others, against "
    f"ln {n_experts} = {num(uniform, 4)}" + (": the router's probabilities are near-uniform, so the entropy cannot "
                                             "tell tokens apart here." if near_uniform else "."))

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
                  f"{title}, {measured_on}: each expert's largest |down_proj output| (log colour); circled: the "
                  f"super experts by Su et al.'s rule ({len(supers)} of {n_total}).")
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
se_claim = su_claims.record_super_experts(record, lm, route, control_route, len(ids), run.seed, run.draw_seqs,
                                          run.seq_len, run.batch_size, standin)
print(f"the authors' rule alone finds {len(supers)} super expert(s) here and {len(control_supers)} on random weights; "
      f"effect size {se_claim.measured['effect size']:,.1f} here, {se_claim.control_measured['effect size']:,.2f} on "
      f"random weights")

# %%
found, a_found, effect = (se_claim.measured[k] for k in ("super_experts", "a of the super experts", "effect size"))
where = "; ".join(f"{'the shared expert' if e == -1 else f'expert {e}'} of layer {layer} (a = {num(a)})"
                  for (layer, e), a in zip(found, a_found))
say(f"{title}, {measured_on}",
    f"The authors' rule finds {len(found)} super expert{'s' if len(found) > 1 else ''} of {num(n_total)}: {where}."
    if found else f"The authors' rule finds no super expert among {num(n_total)} experts.",
    f"{'The smallest of them' if len(found) > 1 else 'It'} is {num(effect)} x the median a of the other routed "
    f"experts, {compare(effect, EFFECT, 'above', 'below', 'at')} the cut of {num(EFFECT)} x that makes an output "
    f"extreme." if found else "",
    f"{claim_line(se_claim)}.")

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
ppl_on = windows(len(held), "held-out windows", run.eval_seq_len)
with plotting.style():
    fig = moe_plots.pruning({k: r.alpha_first for k, r in runs.items()}, {k: r.max_abs_first for k, r in runs.items()},
                            {k: r.ppl for k, r in runs.items()},
                            title=f"Pruning super experts vs random experts, {title}")
    plotting.save(fig, fig_dir / "fig03_pruning",
                  f"{title}, {measured_on}: (a) alpha_0 per layer (mean over heads) and (b) the first token's "
                  f"largest |h| per layer (log scale) as is, with the super experts {chosen} pruned, and with as "
                  f"many random experts pruned ({run.random_draws} draws); the legend: perplexity on {ppl_on}.")
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
prune_claim = su_claims.record_pruning(record, summary, control, [(layer, e) for layer, e, _ in control_supers],
                                       control_ids, held, run.seed, run.batch_size, standin)  # None: nothing pruned
del control, control_route
gc.collect()

# %%
base, pruned = summary["as is"], summary.get("super experts pruned")
draws = [v for k, v in summary.items() if k.startswith("random")]  # each random-expert draw
heading = f"{title}, α₀ and |h| on {measured_on}, perplexity on {ppl_on}"
if pruned is None or prune_claim is None:
    say(heading, "No super expert was found, so nothing was pruned.")
else:
    moved = compare(pruned["alpha"], base["alpha"], "a rise", "a fall", "no change")
    say(heading,
        f"Pruning the super experts moves α₀ (the attention on the first token) averaged over layers from "
        f"{num(base['alpha'])} to {num(pruned['alpha'])} ({moved} of "
        f"{pct(abs(pruned['alpha'] / base['alpha'] - 1))}), perplexity from {num(base['ppl'])} to "
        f"{num(pruned['ppl'])} ({num(pruned['ppl'] / base['ppl'], 2)}x), and the first token's largest |h| over "
        f"layers from {num(base['max_abs_first'])} to {num(pruned['max_abs_first'])}.",
        f"{len(draws)} draw{'s' if len(draws) > 1 else ''} of as many random experts of the same layers "
        f"change{'' if len(draws) > 1 else 's'} α₀ by at most "
        f"{pct(max(abs(d['alpha'] / base['alpha'] - 1) for d in draws))} and perplexity by at most "
        f"{pct(max(abs(d['ppl'] / base['ppl'] - 1) for d in draws))} (perplexity {span([d['ppl'] for d in draws])})."
        if draws else "No random-expert draw was run.",
        f"{claim_line(prune_claim)}.")

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
    n = len(routers)
    each_on = windows(trained_router.HELDOUT_SEQS, "held-out sequences", run.router_train.seq_len)
    say(f"{trained_router.LABEL}, {n} seed{'s' if n != 1 else ''}, each on {each_on}",
        "; ".join(f"seed {r.seed}: sink rate {pct(r.sink_rate)}, first token on its most common expert set in "
                  f"{pct(min(r.same_set_first))}-{pct(max(r.same_set_first))} of sequences by layer, a middle token "
                  f"in {pct(min(r.same_set_middle))}-{pct(max(r.same_set_middle))}" for r in routers) + ".",
        f"A sink (sink rate above {pct(trained_router.SINK_RATE)}) formed in {num(sum(r.formed_sink for r in routers))}"
        f" of {num(n)} seeds; the first token took a fixed route (the same expert set in over "
        f"{pct(trained_router.FIXED_FIRST)} of sequences in every layer, a middle token under "
        f"{pct(trained_router.LOOSE_MIDDLE)}) in {num(sum(r.fixed_route for r in routers))} of {num(n)}.")
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
