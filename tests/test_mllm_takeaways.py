"""12_mllm's rendered takeaways: every number and direction word follows the inputs (two hand-built inputs per
section that must give different words)."""

from __future__ import annotations

import torch

from sinklib.architectures.mllm import takeaways as tk
from sinklib.core.claims import Claim


def _claim(cid: str, holds, draws=(), control=None) -> Claim:
    return Claim(id=cid, statement="", source="", rule="", published=None, measured=None, holds=holds,
                 draws=draws, draws_of="3 stand-ins" if draws else "", control=control)


def test_training_says_whether_the_projector_learned():
    good = tk.training([6.0, 1.0, 0.6], 263.0, 0.475, 40)
    bad = tk.training([6.0, 6.5], 10.0, 0.05, 40)
    assert good.startswith("**What we saw") and "falls from 6 to 0.600" in good and "0.475 of 40" in good
    assert "tell the language model which digit" in good and "though far from perfectly" in good
    assert "rises" in bad and "do not tell" in bad
    assert "was not trained here" in tk.training([], 0.0, None, 0)


def test_shares_name_the_largest_part_and_the_extreme_layers():
    before = tk.shares([[0.6, 0.2, 0.2], [0.5, 0.3, 0.2], [0.1, 0.2, 0.7]], 2, 36, 16)
    image = tk.shares([[0.1, 0.8, 0.1], [0.2, 0.7, 0.1]], 2, 36, 16)
    assert "the tokens before the image take the largest share" in before
    assert "highest in layer 0 (0.600) and lowest in layer 2 (0.100)" in before
    assert "the image tokens take the largest share" in image
    assert "the text takes the largest share" in tk.shares([[0.1, 0.1, 0.8]], 2, 36, 16)


def test_sinks_report_the_layers_with_sinks_or_that_there_are_none():
    nan = float("nan")
    some = tk.sinks([507, 247], [nan, nan, 0.0, 0.057, 0.02], [nan, nan, 5.0, 22.7, 21.0], [1, 1, 23, 24, 25],
                    [None, None, None, 30.0, 22.0], _claim("kang2025.visual_sink_tokens_exist", True, (True,) * 3))
    none = tk.sinks([1, 2], [nan, nan, 0.0, 0.0], [nan, nan, 3.0, 4.0], [1, 1, 2, 2], [None] * 4,
                    _claim("kang2025.visual_sink_tokens_exist", False, control=False))
    assert "507, 247" in some and "In 2 of 3 layers (layers 3-4)" in some and "5.7% of them (layer 3)" in some
    assert "against the first token's 23-24." in some  # inputs of layers 3-4: outputs of blocks 2-3
    assert "more on average" in some and "holds (3 of 3 draws hold over 3 stand-ins)" in some
    assert "No image token reaches phi >= 20" in none and "does not hold" in none
    assert "on random weights it fails" in none


def test_edits_follow_the_sign_of_each_effect():
    hurt = tk.edits({"as is": 0.372, "sinks hidden": 0.639, "VAR": 0.367}, [0.41, 0.43], 6.8, 36, 64,
                    _claim("kang2025.masking_sinks_is_harmless", False), _claim("kang2025.var_helps", True))
    mild = tk.edits({"as is": 0.366, "sinks hidden": 0.382, "VAR": 0.376}, [0.375, 0.386], 2.1, 36, 64,
                    _claim("kang2025.masking_sinks_is_harmless", None), _claim("kang2025.var_helps", False))
    assert "raises the caption NLL by 0.267" in hurt and "more than any random draw" in hurt
    assert "VAR lowers the caption NLL by 0.00500 nats (from 0.372)" in hurt and "6.8 visual sinks per image" in hurt
    assert "inside the random draws' range" in mild and "VAR raises the caption NLL" in mild
    assert "`kang2025.var_helps` holds" in hurt and "`kang2025.var_helps` does not hold" in mild


def test_a_small_var_change_is_told_as_a_change_not_as_two_equal_rounded_numbers():
    """12 read "VAR raises the NLL of the digit token from 2.28 to 2.28" (2.2835 -> 2.2842)."""
    tiny = tk.edits({"as is": 2.283517, "sinks hidden": 2.51, "VAR": 2.284196}, [2.28, 2.29], 6.0, 36, 64,
                    _claim("kang2025.masking_sinks_is_harmless", None), _claim("kang2025.var_helps", None))
    assert "VAR raises the caption NLL by 0.000679 nats (from 2.28)" in tiny and "from 2.28 to 2.28" not in tiny


def test_seeds_lists_each_stand_in_only_when_there_are_several():
    two = tk.seeds({0: {"sinks": 0.267, "random": 0.05, "VAR": -0.009}, 1: {"sinks": 0.1, "random": 0.2, "VAR": 0.01}})
    assert "seed 0: sinks +0.267" in two and "VAR -0.00900" in two and "seed 1" in two
    assert tk.seeds({0: {"sinks": 0.1, "random": 0.2, "VAR": 0.0}}) == ""
    assert "No image token" not in two
    none = tk.seeds({0: {"sinks": 0.2, "random": 0.05, "VAR": 0.0, "max_phi": 23.0},
                     1: {"sinks": 0.0, "random": 0.0, "VAR": 0.0, "max_phi": 18.4}})
    assert "No image token reaches phi >= 20 on seed 1 (largest phi 18.4, 1.60 below tau = 20)" in none
    assert "seed 0 (" not in none


def test_edits_say_why_the_control_could_not_judge_the_edits():
    from dataclasses import replace

    masking = replace(_claim("kang2025.masking_sinks_is_harmless", False),
                      control_note="control run: on random weights no image token reaches phi >= 20 (largest 3.9)")
    text = tk.edits({"as is": 0.3, "sinks hidden": 0.4, "VAR": 0.3}, [0.31], 2.0, 36, 8, masking, None)
    assert "control run: on random weights no image token reaches phi >= 20 (largest 3.9)." in text
    assert "VAR leaves the caption NLL at 0.300" in text and "`kang2025.var_helps` was not judged" in text


def test_edits_without_sinks_say_there_is_nothing_to_hide():
    text = tk.edits({"as is": 5.48, "sinks hidden": 5.48, "VAR": 5.48}, [5.48], 0.0, 16, 8,
                    _claim("kang2025.masking_sinks_is_harmless", None), _claim("kang2025.var_helps", None))
    assert "No image token is a visual sink here" in text and "raises" not in text


def test_kang_extras_reports_each_stand_in_and_only_compares_positions_with_sinks():
    from sinklib.architectures.mllm import kang_claims

    with_sinks = kang_claims.background_claim(torch.tensor([[True, True, False, False]]),
                                     torch.tensor([[True, True, True, False]]), True)
    without = kang_claims.background_claim(torch.zeros(1, 4, dtype=torch.bool), torch.tensor([[True, True, True, False]]), True)
    assert with_sinks.holds is True and with_sinks.measured["share on background"] == 1.0  # >= 90% and > 75%
    text = tk.kang_extras(with_sinks, {0: without, 1: with_sinks}, 1.0, 0.5, 1, True)
    assert "seed 0: no visual sink token" in text and "seed 1: 100% of 2 sinks on background (all image tokens: 75%)" in text
    assert "Jaccard overlap of 1: a check of the code, not a finding" in text and "share 0.500 of their" in text
    none = tk.kang_extras(without, {0: without}, 1.0, 1.0, 1, False)
    assert "no positions to compare" in none and "Jaccard" not in none


def test_seeds_render_how_far_below_tau_each_stand_in_stayed():
    """Issue 43: "just under the threshold" was typed, not measured: the gap below tau and the ceiling are rendered."""
    text = tk.seeds({0: {"sinks": 0.0, "random": 0.0, "VAR": 0.0, "max_phi": 18.5},
                     1: {"sinks": 0.1, "random": 0.2, "VAR": 0.0, "max_phi": 22.0}}, 20.0, ceiling=24.0)
    assert "seed 0 (largest phi 18.5, 1.50 below tau = 20, whose ceiling sqrt(d) is 24)" in text
    assert "just under" not in text and "seed 1 (" not in text


def test_width_matched_tau_is_no_test_when_every_image_token_passes():
    """Issue 43: at tau = 7.5 every image token of layers 2-24 was a "sink", yet the takeaway said the existence
    rule "holds there"."""
    text = tk.sinks([507, 247], [float("nan"), float("nan"), 0.0], [float("nan"), float("nan"), 19.1],
                    [3.0, 23.8, 23.8], [None, None, None], None, 20.0,
                    {20.0: {"max fraction": 0.0, "sinks per image": 0.0, "holds": False},
                     7.5: {"max fraction": 1.0, "sinks per image": 36.0, "holds": True}})
    assert "holds there" not in text and "separates no sink from the rest" in text


def test_kang_extras_without_any_overlap_to_measure():
    from sinklib.architectures.mllm import kang_claims

    with_sinks = kang_claims.background_claim(torch.tensor([[True, False, False, False]]),
                                     torch.tensor([[True, True, True, False]]), True)
    text = tk.kang_extras(with_sinks, {0: with_sinks}, 1.0, None, 1, True)
    assert "Jaccard" not in text and "None" not in text
