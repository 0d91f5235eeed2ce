"""13_vit's claims against the papers' definitions on hand-built profiles, the probe draws, and the rendered
takeaways (numbers and direction words from the inputs)."""

from __future__ import annotations

import numpy as np
import torch

from sinklib.architectures.vit import darcet_claims, probe, registers
from sinklib.architectures.vit import takeaways as tk
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
    [*_, few] = darcet_claims.high_norm_claims(_profile(_norms(10.0)), "outliers", None, probe_accuracy, outlier_share=0.2)
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


def test_where_attention_goes_takeaway():
    fixed = tk.where_attention_goes([0.2, 0.1], [30.0, 3.0], [1.0, 1.2], 50, [4, 4, 4], "m")
    assert fixed.startswith("**What we saw (m).**") and "most in layer 0" in fixed
    assert "the same patch in every photo" in fixed and "below the uniform maximum" in fixed
    moving = tk.where_attention_goes([0.1, 0.3], [2.0, 8.0], [3.9, 3.9], 50, [1, 2, 3], "m")
    assert "most in layer 1" in moving and "3 different patches over 3 photos" in moving
    assert "near the uniform maximum" in moving


def test_high_norm_takeaway():
    sim = _sim(0.5, 0.6, False) | {"all": 0.6, "label": "2 highest-norm patches"}
    probes = [{"CLS": 0.9, "highest-norm patch": 0.8, "median-norm patch": 0.75}] * 3
    claims = darcet_claims.high_norm_claims(_profile(_norms(1.0)), "none", _sim(0.5, 0.6, False), probes)
    text = tk.high_norm([1.9, 1.5], 3.0, probes, sim, claims, "m")
    assert "no patch token passes the 3x cut" in text and "over 3 train / test splits" in text
    assert "better than the median-norm one and worse than CLS" in text and "less like their 4 neighbours" in text
    assert "The 2 highest-norm patches are less like" in text
    cal = {"absolute cut": 150.0, "layer": -2, "absolute cut / median patch norm": 15.0,
           "fraction over the absolute cut": 0.0, "fraction over 3 x the median": 0.0}
    other = tk.high_norm([5.0, 1.5], 3.0, [{"CLS": 0.5, "highest-norm patch": 0.4, "median-norm patch": 0.6}],
                         _sim(0.7, 0.6, True) | {"all": 0.6, "label": "outliers"}, claims, "m", 0.25, 0, cal)
    assert "pass the 3x cut in 1 of 2 layers, first in layer 0" in other and "worse than the median-norm one" in other
    assert "outlier in 25% of them" in other and "is 15 x this model's median patch norm" in other
    assert "more like their 4 neighbours" in other


def test_registers_takeaway():
    text = tk.registers([(9, 1, 1.0), (11, 2, 0.5)], 1.9, 1.8, 0.8, [0.01, 0.02], 3.0, True, None, "m")
    assert "highest-norm patch" in text and "layers 9, 11" in text and "falls from 1.90x to 1.80x" in text
    assert "below the 3x outlier cut" in text
    moved = tk.registers([(9, 1, 1.0)], 5.0, 1.2, 6.0, [0.1], 3.0, False, None, "m")
    assert "at the outliers" in moved and "above the 3x outlier cut" in moved and "falls from 5x" in moved
    split = tk.registers([(9, 1, 1.0)], 5.0, 1.2, 6.0, [0.1], 3.0, False, None, "m",
                         {"chosen": [0.4], "other patches": [0.6], "extra": [0.0]},
                         {"chosen": [0.05], "other patches": [0.5], "extra": [0.45]})
    assert "outlier patches 0.400 of its attention without the register and 0.0500 with it, and the register 0.450" in split


def test_cls_maps_takeaway():
    text = tk.cls_maps([0.1, 0.5, 0.2], [0, 1], 10, "m")
    assert "0.100-0.500" in text and "most in layer 1" in text


def test_high_norm_takeaway_explains_a_control_that_holds():
    from sinklib.core.claims import with_control

    small = darcet_claims.outliers_only_claim(_profile(_norms(1.0)), expect="none")
    explained = with_control(small, small, "absence is what random weights share")
    probes = [{"CLS": 0.9, "highest-norm patch": 0.8, "median-norm patch": 0.75}]
    text = tk.high_norm([1.9], 3.0, probes, _sim(0.5, 0.6, False), [explained], "m")
    assert "on random weights it holds" in text and "absence is what random weights share" in text


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
    assert darcet_claims.registers_remove_outliers_claim({"dinov2-l": (_profile(many), _profile(dirty, 5))}).holds is False
    nothing = darcet_claims.registers_remove_outliers_claim({"dinov2-l": (_profile(_norms(1.0)), with_reg)})
    assert nothing.holds is None and "no model" in nothing.note


def test_massive_takeaway():
    from sinklib.core.claims import Claim

    claim = Claim(id="sun2024.vit_massive_activations", source="s", statement="s", rule="r", published="p",
                  measured={"largest / layer median, peak": 50.0, "peak layer": 3, "largest |h| there": 12.0,
                            "dimension of the largest": 7, "images with the largest in that dimension": 0.5,
                            "images with the largest on a prefix token": 1.0,
                            "layers meeting the criterion": []}, holds=None)
    text = tk.massive(claim, "m")
    assert "50 x the layer median in layer 3" in text and "dimension 7 in 50%" in text and "No layer meets" in text
