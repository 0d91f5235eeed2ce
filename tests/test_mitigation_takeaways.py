"""03_mitigation's rendered takeaways: every number and direction word follows the inputs."""

from dataclasses import replace

from sinklib.core.claims import Claim
from sinklib.core.takeaways import HEADING
from sinklib.mitigation import comparison
from sinklib.mitigation import takeaways as tk
from tests.test_mitigation import fake_run

U = comparison.uniform_alpha(64)


def _claim(cid, holds, control=None, draws=(True, True, True), unsettled=False):
    return Claim(id=cid, statement="s", source="x", rule="r", published=None, measured=0.1, holds=holds,
                 control=control, draws=draws, draws_of="3 training seeds (0, 1, 2)", unsettled=unsettled)


def test_emergence_says_whether_a_head_crossed_and_is_still_rising():
    rising = [fake_run([4, 3, 2, 2], [U, 0.2, 0.3, 0.45], by_head=None) for _ in range(2)]
    for r in rising:
        for c, a in zip(r["checkpoints"], [U, 0.2, 0.3, 0.45]):
            c["alpha_by_head"] = [[a, U]]
    flat = [fake_run([4, 3, 2, 2], [U] * 4) for _ in range(2)]
    for r in flat:
        for c in r["checkpoints"]:
            c["alpha_by_head"] = [[U, U]]
    grown = tk.emergence(rising, [0, 1], U, 0.3, _claim("mitigation.softmax_grows_sink", True, control=False))
    none = tk.emergence(flat, [0, 1], U, 0.3, _claim("mitigation.softmax_grows_sink", False, control=False))
    assert grown.startswith(HEADING) and "2 of 2 seeds have a head above eps" in grown
    assert "still rising" in grown and "first at step 30 in seed 0" in grown and "holds" in grown
    assert "0 of 2 seeds" in none and "the untrained model has no sink" in none and "No seed's strongest head is still rising" in none
    assert "does not hold" in none


def test_active_dormant_counts_seeds_and_compares_bos():
    dormant = [{"holds": True, "bos_trigger": 0.0, "bos_other": 0.4, "prev_trigger": 0.5, "prev_other": 0.02,
                "trigger_fraction": 0.05}] * 2
    busy = [{"holds": False, "bos_trigger": 0.4, "bos_other": 0.1, "prev_trigger": 0.01, "prev_other": 0.2,
             "trigger_fraction": 0.05}] * 2
    a, b = tk.active_dormant(dormant), tk.active_dormant(busy)
    assert "In 2 of 2 seeds" in a and "(more than on triggers)" in a and "triggers give t-1 more" in a
    assert "In 0 of 2 seeds" in b and "(less than on triggers)" in b and "triggers give t-1 less" in b
    assert "no trigger tokens" in tk.active_dormant([])


def _table(**alphas):
    runs = {v: [fake_run([2.0 + d], [a], row_mass=m) for d in (0.0, 0.01)] for v, (a, m) in alphas.items()}
    return comparison.final_table(runs)


def test_attention_maps_name_the_extremes_and_the_missing_mass():
    t1 = _table(softmax=(0.4, 1.0), sink_logit=(0.1, 0.8))
    t2 = _table(softmax=(0.1, 1.0), sink_logit=(0.4, 1.0))
    a = tk.attention_maps({"softmax": [0, 0, 0.4], "sink_logit": [0, 1, 0.1]}, t1)
    b = tk.attention_maps({"softmax": [0, 0, 0.1], "sink_logit": [0, 1, 0.4]}, t2)
    assert "from 0.100 (sink_logit) to 0.400 (softmax)" in a and "sink_logit 0.200" in a
    assert "from 0.100 (softmax) to 0.400 (sink_logit)" in b and "sum to about one" in b


def test_loss_curves_sort_variants_by_their_gap_in_seed_sds():
    hi = _table(softmax=(0.4, 1.0), softpick=(0.0, 1.0))
    for col in ("mean",):
        hi.loc["softpick", ("val loss", col)] += 0.5
    lo = hi.copy()
    lo.loc["softpick", ("val loss", "mean")] -= 1.0
    a, b = tk.loss_curves(hi, floor=1.5), tk.loss_curves(lo, floor=None)
    assert "above the task's entropy floor" in a and "More than 2 seed sd's above softmax at the end: softpick" in a
    assert "More than 2 sd's below: softpick" in b and "Softmax ends at" in b


def test_final_metrics_say_whether_there_are_massive_activations():
    t = _table(softmax=(0.4, 1.0), softpick=(0.02, 1.0))
    a = tk.final_metrics(t, U, ["x -> agrees.", "y -> disagrees."])
    assert "from 0.0200 (softpick) to 0.400 (softmax)" in a and "has no massive activations" in a
    assert "1 of 2 comparisons agree" in a
    t.loc["softmax", ("max activation", "mean")] = 500.0
    b = tk.final_metrics(t, U, [])
    assert "has massive activations" in b and "No published number" in b


def test_verdicts_group_the_removal_claims():
    claims = [_claim("mitigation.softmax_grows_sink", True, control=False),
              _claim("mitigation.softpick_removes_sink", True),
              _claim("mitigation.kv_bias_removes_sink", None, draws=(True, False, True), unsettled=True),
              _claim("mitigation.sink_logit_removes_sink", None, draws=(None, None))]
    a = tk.verdicts(claims)
    assert "every seed: softpick." in a and "fails, as it should" in a
    # the four verdicts apart: an unsettled claim is not one that cannot be judged
    assert "a number sits within its margin of a cut): kv_bias." in a
    assert "is still rising): sink_logit." in a and "kv_bias, sink_logit" not in a
    b = tk.verdicts([replace(claims[0], control=True), replace(claims[1], holds=False)])
    assert "every seed: none." in b and "Does not, in every seed: softpick" in b and "holds -- see" in b


def test_bible_check_says_whether_softmax_grew_a_sink():
    flat = _table(softmax=(0.06, 1.0), headwise_rmsnorm=(0.06, 1.0))
    flat.loc["softmax", ("sink rate", "mean")] = 0.0
    sunk = _table(softmax=(0.5, 1.0), headwise_rmsnorm=(0.06, 1.0))
    c = [_claim("origin.headwise_rmsnorm_converges_faster.bible", False)]
    a, b = tk.bible_check(flat, U, c), tk.bible_check(sunk, U, c)
    assert "grows no first-token sink" in a and "below the uniform" in a and "does not hold" in a
    assert "grows a first-token sink" in b and "above the uniform" in b


def test_verdicts_mark_our_own_question_and_read_the_papers_parity_claim():
    """Issue 43 item 10: head-wise RMSNorm's removal is this project's question; its paper's claim is parity."""
    own = replace(_claim("mitigation.headwise_rmsnorm_removes_sink", False, draws=(False, False)),
                  paper="own question")
    parity = replace(_claim("origin.headwise_rmsnorm_restores_parity", True, draws=(True, True)),
                     measured={"variance_ratio": [13.5, 1.0], "layer": 0, "over": "mean over 2 seeds"})
    table = replace(_claim("origin.headwise_rmsnorm_lowers_disparity_raises_rank", True, draws=(True, True)),
                    measured={"dom_ratio": [3.5, 2.1], "effective_rank": [20.0, 24.0], "over": "mean over 2 seeds"})
    text = tk.verdicts([_claim("mitigation.softmax_grows_sink", True, control=False), own, parity, table])
    assert "headwise_rmsnorm (our own question, not its paper's claim)" in text
    assert "DomRatio 2.10 against softmax's 3.50" in text and "effective rank 24 against 20" in text
    assert "`origin.headwise_rmsnorm_restores_parity` holds" in text and "1x as much over a batch" in text
    assert "`origin.headwise_rmsnorm_lowers_disparity_raises_rank` holds" in text
