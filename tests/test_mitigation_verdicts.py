"""03_mitigation's four verdicts on hand-made runs: what a still-rising head means for a removal and for a mere
reduction, the cross-machine margin of the slope gate, the seeds' margin on alpha_0, each claim's own paper, and
measured values that are the means the notebook shows."""

import re

import pytest

from sinklib.core.results import load_reference
from sinklib.mitigation import comparison, convergence, sink_claims, verdicts
from sinklib.mitigation.variants import VARIANTS
from tests.test_mitigation import PAPER, _seeded_runs, fake_run

U = comparison.uniform_alpha(64)  # 1.5U = 0.111




def _ramp(start: float, per_100_steps: float, n: int = 9, **kw) -> dict:
    """A run of ``n`` checkpoints (steps 0, 10, ...) whose first-token attention and share climb linearly at
    ``per_100_steps``: :func:`verdicts.late_slope` reads that slope back."""
    return fake_run([2.0] * n, [start + per_100_steps / 10 * i for i in range(n)], **kw)


def _one_seed(variant_run: dict, softmax_alpha: float = 0.40) -> tuple[dict, object]:
    runs = {"softmax": [fake_run([2.0], [softmax_alpha])], "x": [variant_run]}
    return runs, comparison.final_table(runs)


def test_a_reduction_whose_head_still_rises_does_not_hold():
    """Item 1: "reduces" with a still-rising head moves away from removal: False, not "cannot be judged"."""
    rising = _ramp(0.02, 0.2, sink_rate=0.0)  # ends at 0.18: above 1.5U, below half the baseline's 0.40 -> reduces
    runs, table = _one_seed(rising)
    v = verdicts.sink_verdict("x", table, U, runs=runs["x"])
    assert v.outcome == "reduces" and v.removes is False and not v.delayed
    assert v.slope == pytest.approx(0.2) and "growing back, away from removal" in v.line
    claim = sink_claims.sink_claim("x", table, U, runs["x"], PAPER)
    assert claim.holds is False and claim.verdict() == "does NOT hold"
    both = {"softmax": [fake_run([2.0], [0.40])] * 2, "x": [rising, _ramp(0.06, 0.15, sink_rate=0.0)]}
    over = sink_claims.sink_claim_over_seeds("x", both, U, PAPER, [0, 1])
    assert over.holds is False and over.draws == (False, False)


def test_reduces_or_keeps_is_no_removal_either():
    """A verdict the seeds leave between "reduces" and "keeps" names no removal on either side: False."""
    runs = {"softmax": [fake_run([2.0], [0.40]), fake_run([2.0], [0.42])],
            "x": [fake_run([2.0], [0.18], sink_rate=0.0), fake_run([2.0], [0.24], sink_rate=0.0)]}  # 0.21 vs 0.205
    v = verdicts.sink_verdict("x", comparison.final_table(runs), U)
    assert v.line.startswith("x: reduces or keeps") and not v.settled and v.removes is False
    assert v.sides == ("reduces", "keeps") and v.removal() == (False, False, None)


def test_a_removal_whose_slope_sits_within_the_margin_is_unsettled(rate_settled):
    """Item 2: a slope within the measured cross-machine margin (0.022) of RISING (0.03) is unsettled, with the margin
    recorded -- not "holds" and not "cannot be judged" (softpick seed 1: +0.021 on one machine, 0.000 on another)."""
    for slope in (0.009, 0.021, 0.05):
        runs, table = _one_seed(_ramp(0.0, slope, sink_rate=0.0))
        assert verdicts.sink_verdict("x", table, U).outcome == "removes"
        claim = sink_claims.sink_claim("x", table, U, runs["x"], PAPER)
        assert claim.holds is None and claim.unsettled and claim.verdict() == "unsettled", slope
        assert claim.margin == {"value": pytest.approx(slope), "cut": 0.03, "spread": 0.022}
        assert "whether it is still rising is unsettled" in claim.note
    runs, table = _one_seed(_ramp(0.02, 0.0, sink_rate=0.0))  # flat: well below the margin
    flat = sink_claims.sink_claim("x", table, U, runs["x"], PAPER)
    assert flat.verdict() == "holds" and flat.margin == {"value": pytest.approx(0.0, abs=1e-12), "cut": 0.03,
                                                         "spread": 0.022}
    runs, table = _one_seed(_ramp(0.0, 0.08, n=5, sink_rate=0.0))  # well past the margin: removed or only delayed
    late = sink_claims.sink_claim("x", table, U, runs["x"], PAPER)
    assert late.verdict() == "cannot be judged here" and "removed or only delayed" in late.note
    assert late.margin == {"value": pytest.approx(0.08), "cut": 0.03, "spread": 0.022}
    assert verdicts.SLOPE_MARGIN == 0.022 and verdicts.RISING == 0.03
    # over the seeds: one seed within the margin, one clean -> unsettled, and the record keeps that seed's margin
    both = {"softmax": [fake_run([2.0], [0.40])] * 2,
            "x": [_ramp(0.02, 0.0, sink_rate=0.0), _ramp(0.0, 0.021, sink_rate=0.0)]}
    over = sink_claims.sink_claim_over_seeds("x", both, U, PAPER, [0, 1])
    assert over.draws == (True, None) and over.verdict() == "unsettled"
    assert over.margin["value"] == pytest.approx(0.021)


def test_an_alpha_cut_the_seeds_cannot_settle_is_unsettled():
    """Item 2: the seed-sd notion of "not settled" is an unsettled verdict; a baseline with no sink stays "cannot be
    judged here"."""
    runs = {"softmax": [fake_run([2.0], [0.35]), fake_run([2.0], [0.36])],
            "a": [fake_run([2.0], [0.08], sink_rate=0.0), fake_run([2.0], [0.14], sink_rate=0.0)]}  # 0.110 +- 0.04
    table = comparison.final_table(runs)
    claim = sink_claims.sink_claim("a", table, U, runs["a"], PAPER)
    assert claim.holds is None and claim.unsettled and claim.verdict() == "unsettled"
    sd = (table.loc["a", ("first-token attention", "sd")] ** 2 + table.loc["softmax", ("first-token attention", "sd")]
          ** 2) / 2
    assert claim.margin == {"value": pytest.approx(0.11), "cut": pytest.approx(1.5 * U),
                            "spread": pytest.approx(2 * sd ** 0.5)}
    flat = {"softmax": [fake_run([2.0], [0.08])], "a": [fake_run([2.0], [0.07])]}
    none = sink_claims.sink_claim("a", comparison.final_table(flat), U, flat["a"], PAPER)
    assert none.holds is None and not none.unsettled and none.verdict() == "cannot be judged here"


def test_convergence_within_the_seeds_margin_is_unsettled():
    noisy = [fake_run([5, 3.0 + d, 2.5 + d], [0] * 3) for d in (0.0, 0.5, 1.0)]
    hair = [fake_run([5, 3.0 + d - 0.001, 2.5 + d - 0.001], [0] * 3) for d in (0.0, 0.5, 1.0)]
    tight = convergence.convergence_claim_over_seeds(hair, noisy, PAPER, "toy", [0, 1, 2])
    assert tight.verdict() == "unsettled" and tight.margin["cut"] == 0.0
    assert tight.margin["value"] == pytest.approx(-0.001)  # paired by seed: -0.001 in every seed, sd 0
    assert tight.margin["spread"] == pytest.approx(convergence.CONVERGENCE_FLOOR)  # the cross-machine floor


def test_every_claim_names_its_own_paper():
    """Item 7: each record carries the arXiv id of the paper its claim comes from, and its source names it first."""
    ref = load_reference("mitigations")
    assert set(ref["sources"]) == set(VARIANTS)
    expected = {"softmax": "2410.10781", "headwise_rmsnorm": "2605.06611", "gated_headwise": "2505.06708",
                "gated_elementwise": "2505.06708", "sigmoid": "2410.10781", "softmax_off_by_one": "",
                "softpick": "2504.20966", "sink_logit": "2309.17453", "kv_bias": "2402.17762"}
    seeded = _seeded_runs([0.05, 0.06])
    runs = {v: seeded["softpick"] for v in VARIANTS} | {"softmax": seeded["softmax"]}
    for variant, paper in expected.items():
        claim = sink_claims.sink_claim_over_seeds(variant, runs, U, ref, [0, 1])
        own = variant in sink_claims.OWN_QUESTIONS  # removal is our question there: the record says so (item 10)
        assert claim.paper == ("own question" if own else paper), variant
        ids = re.findall(r"\d{4}\.\d{5}", claim.source)
        assert (ids[0] == paper) if paper else claim.source.startswith("Miller 2023"), variant
    conv = convergence.convergence_claim_over_seeds(runs["headwise_rmsnorm"], runs["softmax"], ref, "toy", [0, 1])
    assert conv.paper == "2605.06611" and re.findall(r"\d{4}\.\d{5}", conv.source)[0] == "2605.06611"


def test_measured_values_are_the_seed_means_the_notebook_shows():
    """Item 9: ``measured`` is the mean over the seeds (the notebook's table), labelled; each seed's values are in
    ``spread``."""
    runs = _seeded_runs([0.05, 0.06, 0.10])
    runs["softmax"] = [fake_run([4.0, 2.0], [U, a]) for a in (0.30, 0.40, 0.50)]
    pick = sink_claims.sink_claim_over_seeds("softpick", runs, U, PAPER, [0, 1, 2])
    assert pick.measured["first_attention"] == pytest.approx(0.07) and pick.measured["over"] == "mean over 3 seeds"
    assert pick.spread["values"] == pytest.approx([0.05, 0.06, 0.10])
    assert pick.spread["per_seed"]["first_attention"] == pytest.approx([0.05, 0.06, 0.10])
    grows = sink_claims.sink_claim_over_seeds("softmax", runs, U, PAPER, [0, 1, 2])
    assert grows.measured["first_attention"] == pytest.approx(0.40)
    assert grows.measured["sink_rate"] == pytest.approx(2 / 3) and grows.spread["per_seed"]["sink_rate"] == [0, 1, 1]
    table = comparison.final_table(runs)
    assert grows.measured["first_attention"] == pytest.approx(table.loc["softmax", ("first-token attention", "mean")])
    slow = [fake_run([5, 3.5, 3.0 + d], [0] * 3) for d in (0.0, 0.1)]
    fast = [fake_run([5, 3.0, 2.5 + d], [0] * 3) for d in (0.0, 0.3)]
    conv = convergence.convergence_claim_over_seeds(fast, slow, PAPER, "toy", [0, 1])
    assert conv.measured["final"]["candidate"] == pytest.approx(2.65) and conv.measured["over"] == "mean over 2 seeds"
    assert conv.spread["values"] == pytest.approx([-0.5, -0.3])


def test_a_share_clearly_above_the_cut_rules_out_removal_however_close_alpha_comes():
    """sink_logit seed 0: alpha_0 0.121 within its margin of 1.5U (0.111), but its row-normalised share clearly above
    -- by more than the share's own margin (SEED_SHARE_MARGIN): it cannot be a removal, so the claim does not hold
    (was "removes or reduces", unsettled); with a share that still allows a removal it stays unsettled."""
    cut = 1.5 * U
    runs = {"softmax": [fake_run([2.0], [0.40])], "x": [fake_run([2.0], [cut + 0.01], sink_rate=0.0, share=cut + 0.09)]}
    table = comparison.final_table(runs)
    v = verdicts.sink_verdict("x", table, U)
    assert not v.could_remove and v.removes is False
    assert sink_claims.sink_claim("x", table, U, runs["x"], PAPER).verdict() == "does NOT hold"
    near = {"softmax": runs["softmax"], "x": [fake_run([2.0], [cut + 0.01], sink_rate=0.0, share=cut + 0.01)]}
    assert sink_claims.sink_claim("x", comparison.final_table(near), U, near["x"], PAPER).verdict() == "unsettled"


def test_headwise_rmsnorm_removal_is_our_own_question_not_the_papers_claim():
    """Issue 43 item 10: arXiv 2605.06611 claims faster convergence and statistical parity, not removal."""
    from sinklib.reproduction.scorecard import OWN_QUESTION

    ref = load_reference("mitigations")
    runs = {"softmax": [fake_run([2.0], [0.40])], "headwise_rmsnorm": [fake_run([2.0], [0.05], sink_rate=0.0)]}
    table = comparison.final_table(runs)
    own = sink_claims.sink_claim("headwise_rmsnorm", table, U, runs["headwise_rmsnorm"], ref)
    assert own.paper == OWN_QUESTION and "own question" in own.source and "2605.06611" in own.source
    assert own.statement.startswith("(this project's question)")
    runs["gated_headwise"] = runs.pop("headwise_rmsnorm")
    other = sink_claims.sink_claim("gated_headwise", comparison.final_table(runs), U, runs["gated_headwise"], ref)
    assert other.paper == "2505.06708"


def _parity_run(dom: float, rank: float) -> dict:
    run = fake_run([2.0], [0.1])
    run["checkpoints"][-1] |= {"dom_ratio_first": dom, "effective_rank": rank}
    return run


def test_the_table_claim_is_what_the_paper_reports_and_can_fail():
    from sinklib.mitigation import parity

    ref = load_reference("mitigations")
    soft = [_parity_run(80.0, 340.0), _parity_run(84.0, 350.0)]
    better = [_parity_run(33.0, 440.0), _parity_run(35.0, 450.0)]
    worse = [_parity_run(90.0, 300.0), _parity_run(95.0, 320.0)]
    split = [_parity_run(33.0, 300.0), _parity_run(35.0, 320.0)]
    held = parity.table_claim_over_seeds(better, soft, ref, [0, 1])
    assert held.holds is True and held.paper == "2605.06611" and held.draws == (True, True)
    assert held.published == {"dom_ratio": [82.67, 33.74], "effective_rank": [343.7, 446.0]}
    assert held.measured["dom_ratio"] == [82.0, 34.0]
    assert parity.table_claim_over_seeds(worse, soft, ref, [0, 1]).holds is False
    c = parity.table_claim_over_seeds(split, soft, ref, [0, 1])  # DomRatio falls, effective rank falls too
    assert c.holds is False and "the rank half does not" in c.note
    mixed = parity.table_claim_over_seeds([better[0], worse[1]], soft, ref, [0, 1])
    assert mixed.verdict() == "unsettled"
    # hand-built runs carry no attention outputs: the parity claim itself is not judged on them
    unmeasured = parity.parity_claim_over_seeds(better, soft, ref, [0, 1])
    assert unmeasured.holds is None and "with_parity" in unmeasured.note


def test_a_share_within_its_margin_of_the_removal_cut_is_unsettled_on_either_side(rate_settled):
    """The row-normalised share decides "removes" against "shrinks the rows", but had no margin: sink logit seed 1's
    share 0.1153 against 1.5U = 0.1112 said "does not hold" by 0.004, and on an Intel/AMX host the same run's share
    was 0.143. Within the share's per-seed margin (SEED_SHARE_MARGIN: one seed's measured cross-machine spread), both
    sides of the cut are unsettled; beyond it, settled."""
    assert verdicts.SEED_SHARE_MARGIN == 0.068 and 1.5 * U == pytest.approx(0.1112, abs=1e-4)
    for share in (0.1153, 0.143, 0.100):  # above the cut by 0.004 and 0.032, below it by 0.011
        runs, table = _one_seed(fake_run([2.0], [0.060], row_mass=0.5, sink_rate=0.0, share=share))
        v = verdicts.sink_verdict("x", table, U)
        assert not v.settled and "removes" in v.sides, share
        claim = sink_claims.sink_claim("x", table, U, runs["x"], PAPER)
        assert claim.verdict() == "unsettled" and claim.margin == {
            "value": pytest.approx(share), "cut": pytest.approx(1.5 * U), "spread": 0.068}, share
        assert "row-normalised share" in claim.note and "not settled" in claim.note
    far_above = fake_run([2.0], [0.060], row_mass=0.5, sink_rate=0.0, share=0.20)  # 0.089 above: shrinks the rows
    runs, table = _one_seed(far_above)
    assert sink_claims.sink_claim("x", table, U, runs["x"], PAPER).verdict() == "does NOT hold"
    far_below = fake_run([2.0], [0.060], row_mass=0.5, sink_rate=0.0, share=0.03)  # 0.081 below: a removal
    runs, table = _one_seed(far_below)
    assert verdicts.sink_verdict("x", table, U).outcome == "removes" and verdicts.sink_verdict("x", table, U).settled


def test_every_margin_is_the_measured_cross_machine_spread():
    """The margins are the largest spreads of data/reference/cross_machine_03.json (every CPU-profile run of 03 trained
    on an AMD EPYC, on an Intel Xeon with AMX and there capped to AVX512_CORE_BF16): each covers its spread, rounded up
    by at most 0.002 -- a margin guessed wider would make a rule that cannot fail."""
    data = load_reference("cross_machine_03")
    one, mean = data["largest_spread"], data["largest_mean_spread"]
    for margin, spread in ((verdicts.SEED_ALPHA_MARGIN, one["first_attention"]), (verdicts.ALPHA_MARGIN,
                           mean["first_attention"]), (verdicts.SEED_SHARE_MARGIN, one["first_share"]),
                           (verdicts.SHARE_MARGIN, mean["first_share"]), (verdicts.SLOPE_MARGIN, one["late_slope"]),
                           (verdicts.SEED_RATE_MARGIN, one["sink_rate"]), (verdicts.RATE_MARGIN, mean["sink_rate"])):
        assert spread["spread"] <= margin <= spread["spread"] + 0.002, (margin, spread)
    assert len(data["settings"]) >= 3 and len(data["runs"]) == 24


def test_a_removal_stays_possible_while_its_cut_is_within_the_margin_though_another_cut_is_closer():
    """softmax_off_by_one seed 1: alpha_0 0.125 lay 0.014 above 1.5U (within a seed's margin) and closer still to half
    the baseline: "reduces or keeps" (a settled "does not hold") here, while on an Intel/AMX host the same run was
    an unsettled "removes or shrinks the rows" -- the removal side was dropped because another cut was nearer."""
    cut = 1.5 * U
    runs = {"softmax": [fake_run([2.0], [0.245], sink_rate=0.5)], "x": [fake_run([2.0], [cut + 0.014], sink_rate=0.0)]}
    table = comparison.final_table(runs)
    v = verdicts.sink_verdict("x", table, U)
    assert v.sides == ("removes", "reduces", "keeps") and v.could_remove and not v.settled
    assert v.line.startswith("x: removes, reduces or keeps the first-token sink")
    claim = sink_claims.sink_claim("x", table, U, runs["x"], PAPER)
    assert claim.verdict() == "unsettled" and claim.margin["cut"] == pytest.approx(cut)


def test_the_share_rate_margin_leaves_no_removal_settled_at_this_scale():
    """softpick seed 1's sink rate on shares was 7.0% (9 of 128 items) on the AMD EPYC and 0 on an Intel/AMX host: a
    "does not hold" here was a "holds" there. With that spread as a two-sided margin on the 2% cut, a share rate of 0
    is within it too: at 2 x 2 heads a removal stays unsettled however clean the run -- and a share rate clearly above
    it still rules removal out."""
    assert verdicts.SEED_SHARE_RATE_MARGIN > 0.02
    runs, table = _one_seed(_ramp(0.0, 0.0, sink_rate=0.0))
    v = verdicts.sink_verdict("x", table, U)
    assert v.outcome == "removes" and not v.settled and v.sides == ("removes", "reduces")
    claim = sink_claims.sink_claim("x", table, U, runs["x"], PAPER)
    assert claim.verdict() == "unsettled" and claim.margin == {"value": 0.0, "cut": 0.02, "spread": 0.071}
    assert "sink rate on shares 0.0% is within 0.071 of 2%" in claim.note
    high = {"softmax": [fake_run([2.0], [0.40])], "x": [fake_run([2.0], [0.0], sink_rate=0.0, share=0.05)]}
    high["x"][0]["checkpoints"][-1]["share_sink_rate"] = 0.2  # well above 2% + the margin
    assert sink_claims.sink_claim("x", comparison.final_table(high), U, high["x"], PAPER).verdict() == "does NOT hold"


def test_the_share_rate_margin_is_the_measured_flip():
    """softpick seed 1's sink rate on shares in data/reference/cross_machine_03.json: 9/128 here; on the AMX host its
    mean share was 0.001, so fewer than 0.001 x 128 / eps < 1 of its 128 items passed eps = 0.3 there: a rate of 0.
    The margin covers that spread, rounded up by at most one item (1/128)."""
    run = load_reference("cross_machine_03")["runs"]["softpick-s1-6108ada1aff3"]
    here = run["share_sink_rate"]["values"]["amd-epyc-avx512bf16 (torch 2.14.1)"]
    amx_share = run["first_share"]["values"]["intel-xeon-amx (torch 2.11)"]
    assert amx_share * 128 / 0.3 < 1  # so its share sink rate was 0
    assert here <= verdicts.SEED_SHARE_RATE_MARGIN <= here + 1 / 128
    assert here / 2 <= verdicts.SHARE_RATE_MARGIN <= here / 2 + 1 / 128  # the mean over its 2 seeds (seed 0: 0 here)


def test_a_loss_difference_is_checked_with_twice_a_loss_spread():
    data = load_reference("cross_machine_03")["largest_spread"]["val_loss"]["spread"]
    assert 2 * data <= convergence.LOSS_DIFFERENCE.abs_tol <= 2 * data + 0.001
    assert convergence.CONVERGENCE_QUANTITIES["final.candidate".split(".")[0]].kind == "loss"


def test_one_gate_for_the_rates_and_a_removal_judged_only_by_its_own_cut():
    """Review mends: a sink rate within its margin of 2% keeps a removal open (was a settled "reduces" with the rate
    at 0.05, a removal on a machine whose rate was 0); alpha_0 near 1.5U with the weights' rate above 2% by more than
    its margin names the cut it is near; a removal near half the baseline but not near 1.5U names 1.5U's side only."""
    cut = 1.5 * U
    base = [fake_run([2.0], [0.26], sink_rate=0.5)]
    runs = {"softmax": base, "x": [fake_run([2.0], [0.05], sink_rate=0.03)]}  # rate 0.03: within 0.024 of 2%
    v = verdicts.sink_verdict("x", comparison.final_table(runs), U)
    assert not v.settled and "removes" in v.sides
    high = {"softmax": [fake_run([2.0], [0.40], sink_rate=0.5)], "x": [fake_run([2.0], [cut + 0.01], sink_rate=0.1)]}
    v = verdicts.sink_verdict("x", comparison.final_table(high), U)  # rate 0.1: no removal; 1.5U is no cut here
    assert "removes" not in v.sides and (v.near is None or v.near["cut"] != pytest.approx(cut))
    low_base = {"softmax": [fake_run([2.0], [0.16], sink_rate=0.5)], "x": [fake_run([2.0], [0.075], sink_rate=0.0)]}
    v = verdicts.sink_verdict("x", comparison.final_table(low_base), U, baseline="softmax")
    assert v.outcome == "removes" and v.sides[0] == "removes" and v.near["cut"] in (pytest.approx(0.02),
                                                                                    pytest.approx(cut))
