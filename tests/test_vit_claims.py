"""13_vit's claims against the papers' definitions on hand-built profiles, the probe draws, and the rendered
takeaways (numbers and direction words from the inputs)."""

from __future__ import annotations

import numpy as np
import torch

from sinklib.architectures.vit import darcet_claims, probe, registers
from sinklib.architectures.vit.vit_sinks import VitProfile


def _profile(norms: torch.Tensor, n_prefix: int = 1, grid=(2, 2)) -> VitProfile:
    """A profile with the given (L, B, T) norms and uniform attention."""
    L, B, T = norms.shape
    return VitProfile(label="hand-built", n_prefix=n_prefix, grid=grid, cls_map=torch.full((L, B, *grid), 1 / T),
                      received=torch.full((L, B, T), 1 / T), entropy=torch.full((L,), float(np.log(T))), norms=norms)


def _norms(outlier: float) -> torch.Tensor:
    """3 layers, 2 images, CLS + 4 patches at norm 1; the last layer's first patch of image 0 at ``outlier``."""
    n = torch.ones(3, 2, 5)
    n[-1, 0, 1] = outlier
    return n


def test_outliers_only_in_large_models_transcribes_darcet():
    """Darcet et al., Fig. 3-4: a small model has no high-norm patch; a large one has a few (here: 1 of 8 patches in
    the last third = 12.5%, above the 10% band; 1 of 40 with more images would hold)."""
    small = darcet_claims.outliers_only_claim(_profile(_norms(1.0)), expect="none")
    assert small.holds is True and small.at_init is False and "no public code" in small.follows
    assert "instead of the paper's absolute cut" in small.adapted  # the adaptation is recorded
    assert darcet_claims.outliers_only_claim(_profile(_norms(10.0)), expect="none").holds is False  # 10 > 3 x 1
    assert darcet_claims.outliers_only_claim(_profile(_norms(10.0)), expect="outliers").holds is False  # 12.5% > 10%
    many = torch.ones(3, 10, 5)
    many[-1, 0, 1] = 10.0  # 1 of 40 last-layer patches: 2.5%, Darcet's ~2.4%
    assert darcet_claims.outliers_only_claim(_profile(many), expect="outliers").holds is True
    assert small.measured["first layer with outliers"] is None
    assert darcet_claims.outliers_only_claim(_profile(many), "outliers").measured["first layer with outliers"] == 2
    assert "can test" in small.statement  # worded as the half a small model tests


def test_each_model_gets_darcets_expectation():
    """Not 'large = 24 layers': registers -> none on the patches; the models Darcet / Jiang et al. find outliers in
    (12-layer CLIP ViT-B/16 included) -> outliers; a small DINOv2 -> none."""
    assert darcet_claims.expectation("facebook/dinov2-with-registers-large", 24, 5) == "registers"
    assert darcet_claims.expectation("openai/clip-vit-base-patch16", 12, 1) == "outliers"
    assert darcet_claims.expectation("facebook/dinov2-large", 24, 1) == "outliers"
    assert darcet_claims.expectation("dinov2-s", 12, 1) == "none"


def test_calibration_sets_the_relative_cut_beside_jiangs_absolute_one():
    norms = torch.ones(3, 2, 5) * 10
    norms[1, 0, 1] = 200.0  # layer -2: one patch of 8 over 150 and over 3 x the median 10
    cal = registers.calibration(_profile(norms), registers.JIANG_CONFIGS["facebook/dinov2-large"])
    assert cal["absolute cut / median patch norm"] == 15.0 and cal["fraction over the absolute cut"] == 1 / 8
    assert cal["fraction over 3 x the median"] == 1 / 8 and cal["layer"] == -2
    claim = darcet_claims.outliers_only_claim(_profile(norms), "outliers", cal)
    assert claim.measured["calibration"]["absolute cut"] == 150.0


def _sim(selected: float, normal: float, outliers: bool) -> dict:
    return {"selected": selected, "normal": normal, "all": normal, "k": 1, "label": "x", "outliers": outliers}


def test_outlier_claims_are_judged_only_with_outliers():
    probe_accuracy = {"CLS": 0.9, "highest-norm patch": 0.85, "median-norm patch": 0.3}
    none = darcet_claims.high_norm_claims(_profile(_norms(1.0)), "none", _sim(0.9, 0.5, False), probe_accuracy)
    assert [c.holds for c in none] == [True, None, None]
    some = darcet_claims.high_norm_claims(_profile(_norms(10.0)), "outliers", _sim(0.9, 0.5, True), probe_accuracy,
                                      outlier_share=1.0)
    assert [c.holds for c in some[1:]] == [True, True]  # Fig. 5a and Table 1 transcribed
    assert all(c.follows and c.adapted and c.at_init is False for c in some)
    worse = darcet_claims.high_norm_claims(_profile(_norms(10.0)), "outliers", _sim(0.2, 0.5, True),
                                       probe_accuracy | {"highest-norm patch": 0.35}, outlier_share=1.0)
    assert [c.holds for c in worse[1:]] == [False, False]


def test_the_probe_is_judged_only_where_the_probe_images_highest_norm_patch_is_an_outlier():
    """Darcet et al.'s Table 1 probes outlier tokens: outliers on other images (the photos) do not make the digits'
    highest-norm patch one; the share is measured on the probe images themselves."""
    probe_accuracy = {"CLS": 0.9, "highest-norm patch": 0.85, "median-norm patch": 0.3}
    [*_, few] = darcet_claims.high_norm_claims(_profile(_norms(10.0)), "outliers", None, probe_accuracy,
                                               outlier_share=0.2)
    assert few.holds is None and "20%" in few.note
    [*_, most] = darcet_claims.high_norm_claims(_profile(_norms(1.0)), "none", None, probe_accuracy, outlier_share=0.8)
    assert most.holds is True
    assert most.measured["probe images whose highest-norm patch is an outlier"] == 0.8


def test_global_information_is_judged_over_the_probe_splits():
    good = {"CLS": 0.9, "highest-norm patch": 0.85, "median-norm patch": 0.3}
    bad = good | {"highest-norm patch": 0.35}
    [*_, held] = darcet_claims.high_norm_claims(_profile(_norms(10.0)), "outliers", None, [good, good, good],
                                            outlier_share=1.0)
    assert held.holds is True and held.draws == (True, True, True) and held.spread["min"] == 0.85 - 0.3
    [*_, mixed] = darcet_claims.high_norm_claims(_profile(_norms(10.0)), "outliers", None, [good, bad, good],
                                             outlier_share=1.0)
    assert mixed.holds is None and "unsettled: 2 of 3" in mixed.note
    [*_, unjudged] = darcet_claims.high_norm_claims(_profile(_norms(1.0)), "none", None, [good, bad, good], "3 splits")
    assert unjudged.holds is None and unjudged.draws == (None, None, None) and "ordinary patch" in unjudged.note


def test_probe_over_splits_uses_one_split_per_seed():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(2), 20)
    feats = {"CLS": torch.tensor(rng.normal(size=(40, 3)) + labels[:, None] * 5, dtype=torch.float32)}
    probes = probe.probe_over_splits(feats, labels, [0, 1, 2])
    assert len(probes) == 3 and all(p["CLS"] == 1.0 for p in probes)


def test_test_time_register_claim_records_the_definition():
    before = _profile(_norms(10.0))
    after_norms = torch.ones(3, 2, 6)  # one extra token at the end, carrying the outlier
    after_norms[:, :, -1] = 10.0
    after = _profile(after_norms)
    claim = registers.test_time_register_claim(before, after, stand_in=False)
    assert claim.holds is True and "find_register_neurons" in claim.follows and claim.at_init is False
    stuck = after_norms.clone()
    stuck[-1, 0, 1] = 10.0  # the outlier stays on its patch
    assert registers.test_time_register_claim(before, _profile(stuck), stand_in=False).holds is False


def test_a_model_trained_with_registers_is_expected_to_have_no_outlier_patches():
    """Darcet et al., Sec. 3 / Fig. 7: DINOv2 with registers has no high-norm patch -- a faithful run on it is a
    success, not a failure to reproduce; and the paired claim "registers remove the outliers" over with / without."""
    clean = torch.ones(3, 10, 4 + 5)  # CLS + 4 registers + 4 patches, nothing above the cut
    with_reg = _profile(clean, n_prefix=5)
    claim = darcet_claims.outliers_only_claim(with_reg, expect="registers")
    assert claim.holds is True and "registers" in claim.note
    dirty = clean.clone()
    dirty[-1, :4, 5] = 10.0  # outliers on 4 of 40 patches
    assert darcet_claims.outliers_only_claim(_profile(dirty, n_prefix=5), expect="registers").holds is False
    many = torch.ones(3, 10, 5)
    many[-1, 0, 1] = 10.0  # without registers: 2.5% late outliers
    pair = darcet_claims.registers_remove_outliers_claim({"dinov2-l": (_profile(many), with_reg)})
    assert pair.holds is True and pair.measured["dinov2-l"]["without registers"] > 0.005
    still = darcet_claims.registers_remove_outliers_claim({"dinov2-l": (_profile(many), _profile(dirty, 5))})
    assert still.holds is False
    nothing = darcet_claims.registers_remove_outliers_claim({"dinov2-l": (_profile(_norms(1.0)), with_reg)})
    assert nothing.holds is None and "no model" in nothing.note

