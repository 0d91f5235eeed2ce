"""13_vit's library: ViT profiles, the outlier rule, neighbour similarity, the probe features, register neurons and
test-time registers -- hand-built cases, and the GPU-profile code path on tiny random models of the GPU models'
classes (DINOv2 with and without registers, ViT, CLIP vision, timm) in float32 and bfloat16."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sinklib.architectures.vit import registers, vit_sinks
from sinklib.core.capture import hooks_left
from sinklib.models import tiny

VIT_CLASSES = ["dinov2", "dinov2_registers", "vit", "clip_vision", "timm_vit"]


def test_outlier_mask_is_relative_to_the_image_median():
    norms = torch.tensor([[1.0, 1.0, 1.0, 1.0, 3.5], [10.0, 10.0, 10.0, 31.0, 29.0]])
    assert vit_sinks.outlier_mask(norms).tolist() == [[False] * 4 + [True], [False] * 3 + [True, False]]


def test_neighbour_similarity_hand_built():
    flat = torch.ones(1, 3, 4, 4)  # every patch identical -> similarity 1
    assert torch.allclose(vit_sinks.neighbour_similarity(flat, 2), torch.ones(1, 4))
    checker = torch.ones(1, 3, 4, 4)
    checker[..., :2, :2] = -1
    checker[..., 2:, 2:] = -1  # patches alternate sign -> every neighbour has cosine -1
    assert torch.allclose(vit_sinks.neighbour_similarity(checker, 2), -torch.ones(1, 4))


def test_top_patch_similarity_picks_the_most_attended():
    received = torch.tensor([[0.1, 0.7, 0.2, 0.0]])
    similarity = torch.tensor([[0.0, 1.0, 0.5, 0.5]])
    out = vit_sinks.top_patch_similarity(received, similarity, top_fraction=0.25)
    assert out == {"top": 1.0, "all": 0.5, "k": 1}


def _pixels(lm, inputs):
    return next(iter(inputs.values()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", VIT_CLASSES)
def test_vit_recipe_runs_on_tiny_models(name, dtype):
    lm, inputs = tiny.loaded(name)
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
    claims = vit_sinks.high_norm_claims(prof, large_model=False) + [
        registers.test_time_register_claim(prof, after, stand_in=True)]
    assert all(c.rule for c in claims) and claims[-1].holds is None
    assert set(vit_sinks.summary(prof)) >= {"max_norm_ratio", "outlier_fraction"}
    feats = vit_sinks.token_features(lm, pixels)
    assert all(f.shape == (B, lm.hidden_size) for f in feats.values())


def test_test_time_register_moves_the_neurons_max_onto_the_extra_token():
    lm, inputs = tiny.loaded("dinov2")
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
    assert torch.all(a[:, :-1, neurons] == 0)
    assert torch.equal(a[:, -1, neurons], r[:, :, neurons].amax(dim=1))
    other = [i for i in range(a.shape[-1]) if i not in neurons]
    assert torch.equal(a[..., other], r[..., other])


def test_register_neurons_needs_outlier_positions():
    lm, inputs = tiny.loaded("dinov2")
    pixels = inputs["pixel_values"]
    with pytest.raises(ValueError, match="no image has an outlier"):
        registers.register_neurons(lm, pixels, torch.zeros(len(pixels), 17, dtype=torch.bool))


def test_linear_probe_separates_separable_features():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(3), 40)
    good = torch.tensor(np.eye(3)[labels] * 5 + rng.normal(size=(120, 3)) * 0.1, dtype=torch.float32)
    noise = torch.tensor(rng.normal(size=(120, 3)), dtype=torch.float32)
    acc = vit_sinks.linear_probe({"good": good, "noise": noise}, labels)
    assert acc["good"] == 1.0 and acc["noise"] < 0.7


def test_outlier_positions_fall_back_to_the_highest_norm_patch():
    from types import SimpleNamespace

    norms = torch.ones(1, 2, 1 + 4)  # (L, B, T): CLS + 4 patches
    norms[0, 0, 3] = 10.0  # image 0: patch 2 is an outlier (> 3 x median)
    norms[0, 1, 2] = 1.5  # image 1: no outlier
    prof = SimpleNamespace(patch_norms=lambda: norms[..., 1:], n_tokens=5, n_prefix=1)
    positions, stand_in = registers.outlier_positions(prof, 0)
    assert not stand_in and positions.tolist() == [[False, False, False, True, False], [False] * 5]
    norms[0, 0, 3] = 1.2
    positions, stand_in = registers.outlier_positions(prof, 0)
    assert stand_in and positions.tolist() == [[False, False, False, True, False], [False, False, True, False, False]]


def test_register_scores_average_per_image_means_and_register_neurons_weight_batches_by_images():
    acts = torch.tensor([[[9.0, 9.0], [1.0, -3.0], [3.0, 1.0]],
                         [[4.0, 0.0], [7.0, 7.0], [7.0, 7.0]]])  # (B=2, T=3, F=2)
    where = torch.tensor([[False, True, True], [True, False, False]])
    # image 0: mean |a| over tokens 1, 2 = [2, 2]; image 1: token 0 = [4, 0]; mean of the two images = [3, 1]
    torch.testing.assert_close(registers.register_scores(acts, where), torch.tensor([3.0, 1.0]))
    torch.testing.assert_close(registers.register_scores(acts, torch.zeros(2, 3, dtype=torch.bool)), torch.zeros(2))
    lm, inputs = tiny.loaded("dinov2")
    pixels = inputs["pixel_values"].repeat(3, 1, 1, 1)[:5]  # 5 images, batches of 2 + 2 + 1
    T = vit_sinks.profile_vit(lm, pixels[:1]).n_tokens
    positions = torch.zeros(5, T, dtype=torch.bool)
    positions[0, 3] = positions[0, 5] = positions[3, 2] = positions[4, 7] = True  # images 1 and 2 have none
    batched = registers.register_neurons(lm, pixels, positions, top=4, batch_size=2)
    whole = registers.register_neurons(lm, pixels, positions, top=4, batch_size=5)
    assert [(a, b) for a, b, _ in batched] == [(a, b) for a, b, _ in whole]
    torch.testing.assert_close(torch.tensor([s for *_, s in batched]), torch.tensor([s for *_, s in whole]))
