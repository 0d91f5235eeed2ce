"""13_vit's library: ViT profiles, the outlier rule, neighbour similarity, the probe features, register neurons and
test-time registers -- hand-built cases, and the GPU-profile code path on tiny random models of the GPU models'
classes (DINOv2 with and without registers, ViT, CLIP vision, timm) in float32 and bfloat16."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sinklib.architectures.vit import darcet_claims, probe, registers, vit_massive_claims, vit_sinks
from sinklib.core.capture import hooks_left
from sinklib.models import tiny_random

VIT_CLASSES = ["dinov2", "dinov2_registers", "vit", "clip_vision", "timm_vit"]


def test_outlier_mask_is_relative_to_the_image_median():
    norms = torch.tensor([[1.0, 1.0, 1.0, 1.0, 3.5], [10.0, 10.0, 10.0, 31.0, 29.0]])
    assert vit_sinks.outlier_mask(norms).tolist() == [[False] * 4 + [True], [False] * 3 + [True, False]]


def test_grid_similarity_hand_built():
    flat = torch.ones(1, 2, 2, 3)  # every cell identical -> similarity 1
    assert torch.allclose(vit_sinks.grid_similarity(flat), torch.ones(1, 4))
    checker = torch.ones(1, 2, 2, 3)
    checker[0, 0, 0] = checker[0, 1, 1] = -1  # cells alternate sign -> every neighbour has cosine -1
    assert torch.allclose(vit_sinks.grid_similarity(checker), -torch.ones(1, 4))
    assert vit_sinks.patch_grid(torch.zeros(2, 6, 5), (2, 3)).shape == (2, 2, 3, 5)  # (B, P, d)
    assert vit_sinks.patch_grid(torch.zeros(2, 5, 2, 3), (2, 3)).shape == (2, 2, 3, 5)  # conv output (B, d, gh, gw)


def _profile_with_similarity(outlier: bool) -> vit_sinks.VitProfile:
    L, B, P = 2, 1, 4
    norms = torch.ones(L, B, 1 + P)
    norms[0, 0, 1] = 50.0  # an early high-norm patch: not what Darcet et al. select (output norm)
    if outlier:
        norms[-1, 0, 3] = 10.0  # the last layer's outlier sits on patch 2
    else:
        norms[-1, 0, 3] = 2.0  # the highest-norm patch, below the 3x cut
    return vit_sinks.VitProfile("h", 1, (2, 2), torch.zeros(L, B, 2, 2), torch.full((L, B, 1 + P), 0.2),
                                torch.zeros(L), norms, embed_similarity=torch.tensor([[0.1, 0.2, 0.9, 0.3]]))


def test_high_norm_similarity_takes_the_output_norm_outliers_in_embedding_space():
    """Darcet et al., Fig. 5a: tokens chosen by their norm at the output, compared in the patch embeddings -- not the
    most-attended patches at the layer where attention peaks, and not pixels."""
    out = vit_sinks.high_norm_similarity(_profile_with_similarity(True))
    assert out["outliers"] and out["k"] == 1 and out["selected"] == pytest.approx(0.9)
    assert out["normal"] == pytest.approx(0.2) and out["space"] == "patch embeddings"
    stand_in = vit_sinks.high_norm_similarity(_profile_with_similarity(False))
    assert not stand_in["outliers"] and stand_in["selected"] == pytest.approx(0.9) and "no outliers" in stand_in["label"]
    claim = darcet_claims.redundant_patches_claim(out)
    assert claim.holds is True and "patch embedding" in claim.follows
    assert darcet_claims.redundant_patches_claim(stand_in).holds is None


def test_profile_measures_similarity_on_the_patch_embeddings():
    lm, inputs = tiny_random.loaded("dinov2")
    pixels = _pixels(lm, inputs)
    prof = vit_sinks.profile_vit(lm, pixels, batch_size=1)
    with torch.inference_mode():
        embedded = lm.model.embeddings.patch_embeddings(pixels)  # (B, P, d), before CLS and position embeddings
    assert torch.allclose(prof.embed_similarity, vit_sinks.grid_similarity(embedded.reshape(len(pixels), 4, 4, -1)),
                          atol=1e-5)


def test_layer_statistics_follow_suns_whole_output_median():
    h = torch.ones(1, 1, 3, 4)
    h[0, 0, 2, 1] = -500.0  # token 2, dimension 1
    h[0, 0, 0, 3] = 7.0
    top, median, site = vit_sinks.layer_statistics(h)
    assert top[0, 0].tolist() == [500.0, 7.0, 1.0] and median[0, 0] == 1.0 and site[0, 0].tolist() == [2, 1]


def test_vit_massive_activations_claim():
    L, B, T = 2, 5, 3
    prof = vit_sinks.VitProfile("h", 1, (1, 2), torch.zeros(L, B, 1, 2), torch.full((L, B, T), 1 / 3),
                                torch.zeros(L), torch.ones(L, B, T),
                                top_abs=torch.tensor([500.0, 1.0, 1.0]).repeat(L, B, 1),
                                median_abs=torch.full((L, B), 0.1), top_site=torch.tensor([1, 7]).repeat(L, B, 1))
    sun = "openai/clip-vit-large-patch14"
    assert vit_massive_claims.vit_massive_activations_claim(prof, sun).holds is True  # 500 > 100, 5000 x the median
    assert vit_massive_claims.vit_massive_activations_claim(prof, "dinov2-s").holds is None  # not reported by Sun et al.
    prof.top_site[:, :3, 1] = torch.tensor([1, 2, 3])  # the peak layer's largest entry wanders over dimensions
    assert vit_massive_claims.vit_massive_activations_claim(prof, sun).holds is False
    prof.median_abs[:] = 1.0  # 500 x the median: not massive
    assert vit_massive_claims.vit_massive_activations_claim(prof, sun).holds is False


def test_fixed_register_mean_follows_suns_fix_reg_mean():
    """locuslab/massive-activations lib/eval_utils.py: fix_reg_mean -- at every block's input, registers 1..4 are set
    to a per-layer mean; CLS and patches are untouched. Checked on a tiny DINOv2 with registers."""
    from sinklib.architectures.vit import register_means
    from sinklib.core.adapters import adapter_for

    lm, inputs = tiny_random.loaded("dinov2_registers")
    pixels = _pixels(lm, inputs)
    r = register_means.n_registers(lm.model)
    means = register_means.register_input_means(lm, pixels, batch_size=1)
    assert means.shape == (lm.n_layers, r, lm.hidden_size)
    seen = {}
    parts = adapter_for(lm.model).layers
    with register_means.FixedRegisterMean(lm.model, means) as fix:  # observe after the edit's own pre-hooks
        handles = [p.block.register_forward_pre_hook(lambda m, a, k, i=i: seen.__setitem__(i, a[0].clone()),
                                                     with_kwargs=True) for i, p in enumerate(parts)]
        vit_sinks.vit_forward(lm, pixels)
        for h in handles:
            h.remove()
    assert fix.calls == lm.n_layers
    for i in range(lm.n_layers):
        assert torch.allclose(seen[i][:, 1:1 + r], means[i].expand(len(pixels), -1, -1))
    claim = register_means.fixed_bias_claim({"as is": 0.9, "fixed register mean": 0.89}, "m")
    assert claim.holds is True and "fix_reg_mean" in claim.follows
    assert register_means.fixed_bias_claim({"as is": 0.9, "fixed register mean": 0.8}).holds is False
    assert register_means.fixed_bias_claim(None).holds is None
    with pytest.raises(ValueError, match="no register tokens"):
        register_means.register_input_means(tiny_random.loaded("dinov2")[0], pixels)


def _pixels(lm, inputs):
    return next(iter(inputs.values()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", VIT_CLASSES)
def test_vit_recipe_runs_on_tiny_models(name, dtype):
    lm, inputs = tiny_random.loaded(name)
    lm.model.to(dtype)
    lm.dtype = dtype
    pixels = _pixels(lm, inputs)
    baseline = hooks_left(lm.model)
    prof = vit_sinks.profile_vit(lm, pixels, batch_size=1)
    L, B = lm.n_layers, len(pixels)
    assert prof.grid == (4, 4) and prof.cls_map.shape == (L, B, 4, 4)
    assert torch.allclose(prof.received.sum(-1), torch.ones(L, B), atol=2e-2)  # a distribution over keys
    assert prof.patch_norms().shape == (L, B, 16) and prof.n_tokens == prof.n_prefix + 16
    assert all(0 <= e <= np.log(prof.n_tokens) + 1e-3 for e in prof.entropy.tolist())
    pn = prof.patch_norms()[-1]
    positions = torch.zeros(B, prof.n_tokens, dtype=torch.bool)
    positions[torch.arange(B), prof.n_prefix + pn.argmax(-1)] = True
    found = registers.register_neurons(lm, pixels, positions, top=3)
    assert len(found) == 3 and found[0][2] >= found[1][2] >= found[2][2]
    with registers.TestTimeRegisters(lm.model, registers.neurons_by_layer(found), n_registers=2) as ttr:
        after = vit_sinks.profile_vit(lm, pixels, batch_size=B)
    assert ttr.calls > 0 and after.n_tokens == prof.n_tokens + 2
    assert hooks_left(lm.model) == baseline
    claims = darcet_claims.high_norm_claims(prof, "none", vit_sinks.high_norm_similarity(prof)) + [
        registers.test_time_register_claim(prof, after, stand_in=True)]
    assert all(c.rule for c in claims) and claims[-1].holds is None
    assert set(vit_sinks.summary(prof)) >= {"max_norm_ratio", "outlier_fraction"}
    feats, is_outlier = probe.token_features(lm, pixels)
    assert all(f.shape == (B, lm.hidden_size) for f in feats.values()) and is_outlier.shape == (B,)


def test_test_time_register_follows_the_authors_recipe_inside_the_model():
    """Against a transcription of nickjiang2378/test-time-registers (shared/hook_fn.py: activate_on_registers with
    normal_values="zero", shared/utils.py: sign_max, vision_transformer.py: torch.zeros register): the extra token
    enters as zeros; at the listed layer one signed maximum over all tokens and listed neurons (per image) is written
    into the register's listed neurons; patches get 0 there; CLS and other neurons keep their values."""
    lm, inputs = tiny_random.loaded("dinov2")
    layer, neurons = 1, [3, 7]
    seen = {}
    proj = lm.model.encoder.layer[layer].mlp.fc2
    with torch.no_grad():
        raw = proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("raw", a[0].clone()))  # runs first
        with registers.TestTimeRegisters(lm.model, {layer: neurons}, n_registers=1):
            edited = proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("edited", a[0].clone()))
            out = lm.model(**inputs).last_hidden_state
            edited.remove()
        raw.remove()
        plain = lm.model(**inputs).last_hidden_state
    a, r = seen["edited"], seen["raw"]  # (B, T + 1, d_ff) after / before the edit, same forward
    assert out.shape[1] == plain.shape[1] + 1
    ref = r.clone()
    for b in range(len(ref)):  # the authors' hook, which edits output[0]: one image at a time
        block = ref[b, :, neurons]
        hi, lo = torch.max(block), torch.min(block)
        value = hi if abs(hi) > abs(lo) else lo
        ref[b, -1:, neurons] = value
        ref[b, 1:-1, neurons] = 0
    torch.testing.assert_close(a, ref, rtol=0, atol=0)
    assert torch.equal(a[:, 0, neurons], r[:, 0, neurons])  # CLS untouched
    other = [i for i in range(a.shape[-1]) if i not in neurons]
    assert torch.equal(a[..., other], r[..., other])


def test_the_test_time_register_enters_as_zeros():
    lm, inputs = tiny_random.loaded("dinov2")
    seen = {}
    first = lm.model.encoder.layer[0]
    with torch.no_grad(), registers.TestTimeRegisters(lm.model, {1: [0]}, n_registers=2):
        hook = first.register_forward_pre_hook(lambda m, a: seen.__setitem__("h", a[0].clone()))
        lm.model(**inputs)
        hook.remove()
    assert torch.equal(seen["h"][:, -2:], torch.zeros_like(seen["h"][:, -2:]))


def test_register_neurons_follow_the_authors_selection():
    """find_register_neurons + the notebook's filter_layers / top_k, transcribed: outliers are the tokens (CLS too)
    above the absolute norm cut at detect_outliers_layer; the score is mean |a| there times the per-image sparsity
    mask (>= half the tokens below 0.5); images without outliers are skipped; layers above highest_layer drop."""
    # (B=2, T=4, F=3), image 1 has no outlier: its activations must not count
    acts = torch.tensor([[[0.0, 2.0, 0.0], [4.0, 2.0, 0.0], [2.0, 2.0, 3.0], [0.0, 2.0, 0.0]],
                         [[9.0, 9.0, 9.0], [9.0, 9.0, 9.0], [9.0, 9.0, 9.0], [9.0, 9.0, 9.0]]])
    where = torch.tensor([[False, True, True, False], [False, False, False, False]])
    plain = registers.register_scores(acts, where)
    torch.testing.assert_close(plain, torch.tensor([3.0, 2.0, 1.5]))
    cfg = registers.JiangConfig(-2, 150.0, 0, 1, "test")
    # neuron 1 is 2.0 on every token: not sparse (0 of 4 below 0.5) -> 0; neurons 0 and 2 have 2 of 4 below 0.5
    torch.testing.assert_close(registers.register_scores(acts, where, cfg), torch.tensor([3.0, 0.0, 1.5]))
    assert registers.sparse_neurons(acts[:1]).tolist() == [[True, False, True]]

    class Prof:  # the two fields jiang_outlier_positions reads
        n_prefix, grid = 1, (1, 3)
        norms = torch.tensor([[[1.0, 1, 1, 1]], [[200.0, 100, 151, 149]], [[0.0, 0, 0, 0]]])  # (L=3, B=1, T=4)

    assert registers.jiang_outlier_positions(Prof, cfg).tolist() == [[True, False, True, False]]  # CLS counts
    assert registers.JIANG_CONFIGS["facebook/dinov2-large"] == registers.JiangConfig(
        -2, 150.0, 17, 50, "nickjiang2378/test-time-registers:configs/dinov2_large.yaml")
    assert registers.sign_max(torch.tensor([[1.0, -3.0], [2.0, 0.5]])).tolist() == [-3.0, 2.0]  # per image


def test_register_neurons_needs_outlier_positions():
    lm, inputs = tiny_random.loaded("dinov2")
    pixels = inputs["pixel_values"]
    with pytest.raises(ValueError, match="no image has an outlier"):
        registers.register_neurons(lm, pixels, torch.zeros(len(pixels), 17, dtype=torch.bool))


def test_linear_probe_separates_separable_features():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 40)
    good = torch.tensor(np.eye(3)[labels] * 5 + rng.normal(size=(120, 3)) * 0.1, dtype=torch.float32)
    noise = torch.tensor(rng.normal(size=(120, 3)), dtype=torch.float32)
    acc = probe.linear_probe({"good": good, "noise": noise}, labels)
    assert acc["good"] == 1.0 and acc["noise"] < 0.7


def test_outlier_positions_fall_back_to_the_highest_norm_patch():
    from types import SimpleNamespace

    norms = torch.ones(2, 2, 1 + 4)  # (L, B, T): CLS + 4 patches; detection at layer -2 = 0
    norms[0, 0, 3] = 10.0  # image 0: patch 2 is above the cut
    norms[0, 1, 2] = 1.5  # image 1: nothing above it
    prof = SimpleNamespace(norms=norms, patch_norms=lambda: norms[..., 1:], n_prefix=1, grid=(2, 2))
    cfg = registers.JiangConfig(-2, 5.0, 1, 2, "test")
    positions, stand_in = registers.positions_for(prof, cfg)
    assert not stand_in and positions.tolist() == [[False, False, False, True, False], [False] * 5]
    norms[0, 0, 3] = 1.2
    positions, stand_in = registers.positions_for(prof, cfg)
    assert stand_in and positions.tolist() == [[False, False, False, True, False], [False, False, True, False, False]]


def test_register_neurons_keep_the_configs_layers_and_top_k():
    lm, inputs = tiny_random.loaded("dinov2")
    pixels = inputs["pixel_values"]
    positions = torch.zeros(len(pixels), 17, dtype=torch.bool)
    positions[:, 5] = True
    cfg = registers.JiangConfig(-2, 0.0, 0, 4, "test", apply_sparsity_filter=False)
    found = registers.register_neurons(lm, pixels, positions, config=cfg)
    assert len(found) == 4 and {layer for layer, _, _ in found} == {0}
    wider = registers.register_neurons(lm, pixels, positions, config=registers.JiangConfig(-2, 0.0, 1, 40, "t"))
    assert len(wider) == 40 and {layer for layer, _, _ in wider} <= {0, 1}


def test_register_scores_average_per_image_means_and_register_neurons_weight_batches_by_images():
    acts = torch.tensor([[[9.0, 9.0], [1.0, -3.0], [3.0, 1.0]],
                         [[4.0, 0.0], [7.0, 7.0], [7.0, 7.0]]])  # (B=2, T=3, F=2)
    where = torch.tensor([[False, True, True], [True, False, False]])
    # image 0: mean |a| over tokens 1, 2 = [2, 2]; image 1: token 0 = [4, 0]; mean of the two images = [3, 1]
    torch.testing.assert_close(registers.register_scores(acts, where), torch.tensor([3.0, 1.0]))
    torch.testing.assert_close(registers.register_scores(acts, torch.zeros(2, 3, dtype=torch.bool)), torch.zeros(2))
    lm, inputs = tiny_random.loaded("dinov2")
    pixels = inputs["pixel_values"].repeat(3, 1, 1, 1)[:5]  # 5 images, batches of 2 + 2 + 1
    T = vit_sinks.profile_vit(lm, pixels[:1]).n_tokens
    positions = torch.zeros(5, T, dtype=torch.bool)
    positions[0, 3] = positions[0, 5] = positions[3, 2] = positions[4, 7] = True  # images 1 and 2 have none
    batched = registers.register_neurons(lm, pixels, positions, top=4, batch_size=2)
    whole = registers.register_neurons(lm, pixels, positions, top=4, batch_size=5)
    assert [(a, b) for a, b, _ in batched] == [(a, b) for a, b, _ in whole]
    torch.testing.assert_close(torch.tensor([s for *_, s in batched]), torch.tensor([s for *_, s in whole]))


def test_cls_attention_split_before_and_after_a_register():
    """Jiang et al.'s before / after: the CLS query's attention to the outlier patches, the other patches and the
    appended register. CLS + 2 x 2 patches + 1 register; patch 1 is the outlier."""
    row = torch.tensor([[[0.1, 0.0, 0.5, 0.1, 0.1, 0.2]]])  # (L=1, B=1, T=6)
    prof = vit_sinks.VitProfile("h", 1, (2, 2), torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 6), torch.zeros(1),
                                torch.ones(1, 1, 6), cls_row=row)
    split = vit_sinks.cls_attention_split(prof, torch.tensor([[False, True, False, False]]))
    assert split["extra"] == [pytest.approx(0.2)] and split["chosen"] == [pytest.approx(0.5)]
    assert split["other patches"] == [pytest.approx(0.2)]
    from sinklib.architectures.vit import vit_plots
    from tests.figure_lint import layout_problems

    fig = vit_plots.cls_split(split, split, stand_in=False, title="t")
    assert layout_problems(fig) == []
