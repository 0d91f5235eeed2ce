"""13_vit against the authors' code (issue 43 item 15): the test-time register read at Jiang et al.'s
detect_outliers_layer, Sun et al.'s layer statistics averaged before the ratio, and DINOv2's heads after the final
LayerNorm."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sinklib.architectures.vit import register_means, registers, vit_sinks
from sinklib.architectures.vit.vit_sinks import VitProfile
from sinklib.models import tiny_random


def _profile(norms: torch.Tensor, n_prefix: int = 1, grid=(2, 2)) -> VitProfile:
    L, B, T = norms.shape
    return VitProfile(label="hand-built", n_prefix=n_prefix, grid=grid, cls_map=torch.full((L, B, *grid), 1 / T),
                      received=torch.full((L, B, T), 1 / T), entropy=torch.full((L,), float(np.log(T))), norms=norms)


def test_the_test_time_register_is_judged_at_the_authors_detection_layer():
    """DINOv2-L's config detects (and the authors evaluate) at block -2: a register that carries the outlier there
    and fades in the last block is a working recipe, not a failure."""
    before_norms = torch.ones(4, 2, 5)
    before_norms[-2, :, 1] = 10.0  # outliers at the detection layer
    after_norms = torch.ones(4, 2, 6)  # the register appended at the end
    after_norms[-2, :, -1] = 10.0  # carries them at block -2 ...
    after_norms[-1, :, -1] = 1.0  # ... not in the last block
    before, after = _profile(before_norms), _profile(after_norms)
    dinov2_large = registers.JIANG_CONFIGS["facebook/dinov2-large"]
    assert registers.detection_layer(dinov2_large) == -2 and registers.detection_layer(None) == -1
    claim = registers.test_time_register_claim(before, after, stand_in=False, config=dinov2_large)
    assert claim.holds is True and claim.measured["layer"] == -2
    assert claim.measured["register norm / median patch norm"] == pytest.approx(10.0)
    assert "detection layer (-2)" in claim.rule
    last = registers.test_time_register_claim(before, after, stand_in=False)  # no config: the last block
    assert last.holds is False and registers.register_norm_ratio(after, -1) == pytest.approx(1.0)


def test_massive_ratio_averages_the_top_value_and_the_median_separately():
    """locuslab/massive-activations main_vit.py (exp2) averages each image's top |h| and median over images, then
    compares them: mean top / mean median (505 / 0.5005 = 1009), not the mean of per-image ratios (5,500)."""
    L, B, T = 1, 2, 3
    prof = VitProfile("h", 1, (1, 2), torch.zeros(L, B, 1, 2), torch.full((L, B, T), 1 / 3), torch.zeros(L),
                      torch.ones(L, B, T), top_abs=torch.tensor([[[1000.0, 1, 1], [10.0, 1, 1]]]),
                      median_abs=torch.tensor([[1.0, 0.001]]), top_site=torch.tensor([1, 7]).repeat(L, B, 1))
    assert vit_sinks.massive_ratio(prof) == pytest.approx([505 / 0.5005])


def test_head_features_read_after_the_final_layernorm():
    """DINOv2's linear heads read x_norm_clstoken and the mean of x_norm_patchtokens: after the final LayerNorm,
    which transformers' Dinov2 models apply to last_hidden_state; registers are left out."""
    lm, inputs = tiny_random.loaded("dinov2_registers")
    pixels = next(iter(inputs.values()))
    n_prefix = 1 + register_means.n_registers(lm.model)
    with torch.inference_mode():
        out = lm.model(pixel_values=pixels).last_hidden_state  # (B, T, d), after model.layernorm
    expected = torch.cat([out[:, 0], out[:, n_prefix:].mean(1)], dim=-1)
    assert torch.allclose(register_means.head_features(lm, pixels, batch_size=1), expected, atol=1e-5)
    with pytest.raises(ValueError, match="final `layernorm`"):
        register_means.final_norm(torch.nn.Linear(2, 2))


def test_head_features_and_register_means_run_on_one_cuda_device():
    """On one GPU with device="cuda" (no accelerate hooks to move inputs), the captured last block comes back on the
    CPU: the final LayerNorm must be given it on its own device. 13_vit stopped there on an H200."""
    from tests.fake_cuda import fake_cuda

    lm, inputs = tiny_random.loaded("dinov2_registers")
    pixels = next(iter(inputs.values()))
    expected = register_means.head_features(lm, pixels, batch_size=1)
    with fake_cuda():
        lm.model.to("cuda")
        lm.device, on_gpu = torch.device("cuda"), pixels.to("cuda")
        means = register_means.register_input_means(lm, on_gpu, batch_size=1)
        got = register_means.head_features(lm, on_gpu, batch_size=1)
        fixed = register_means.head_features(lm, on_gpu, batch_size=1,
                                             extra=register_means.FixedRegisterMean(lm.model, means))
        got, fixed = got.cpu(), fixed.cpu()
    assert torch.allclose(got, expected, atol=1e-5) and fixed.shape == expected.shape
