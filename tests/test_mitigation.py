"""Comparison of attention variants: tables, verdicts and the active-dormant probe, on hand-made runs."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from sinklib.core import metrics
from sinklib.core.errors import InputError
from sinklib.mitigation import (
    comparison,
    convergence,
    protocol,
    seed_claims,
    sink_claims,
    training,
    training_data,
    verdicts,
)
from sinklib.mitigation.variants import VARIANTS


def fake_run(losses, alphas, seconds=1.0, row_mass=1.0, sink_rate=None, share=None, by_head=None):
    """A run dict shaped like training.train's, with one checkpoint per entry of ``losses``.

    ``share``: the row-normalised first-token share (default: alpha itself, as for softmax rows)."""
    ckpts = []
    for i, (loss, a) in enumerate(zip(losses, alphas)):
        sh = a if share is None else share
        ckpts.append({"step": 10 * i, "val_loss": loss, "first_attention": a,
                      "sink_rate": (1.0 if a > 0.3 else 0.0) if sink_rate is None else sink_rate,
                      "alpha_by_head": by_head or [[a, a / 2]], "max_activation": 5.0, "kurtosis": 3.0,
                      "dom_ratio_first": 2.0, "effective_rank": 10.0, "row_mass": row_mass, "first_share": sh,
                      "share_sink_rate": 1.0 if sh > 0.3 else 0.0, "share_by_head": [[sh, sh / 2]]})
    return {"checkpoints": ckpts, "seconds": seconds}


def test_parse_variants():
    assert comparison.parse_variants("") == list(VARIANTS)
    assert comparison.parse_variants("softpick, sigmoid") == ["softmax", "softpick", "sigmoid"]
    with pytest.raises(InputError, match="unknown attention variant.*nope"):
        comparison.parse_variants("softmax,nope")


def test_uniform_alpha_matches_uniform_causal_attention():
    T = 17
    A = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]  # uniform over visible keys
    assert comparison.uniform_alpha(T) == pytest.approx(float(metrics.alpha(A, 0)))
    assert comparison.uniform_alpha(1) == 1.0 and comparison.uniform_alpha(2) == 0.75


def test_curve_and_final_table():
    runs = {"softmax": [fake_run([3.0, 2.0], [0.1, 0.5], 4), fake_run([3.0, 2.2], [0.1, 0.3], 6)],
            "softpick": [fake_run([3.0, 2.1], [0.1, 0.05]), fake_run([3.0, 2.1], [0.1, 0.07])]}
    steps, mean, sd = comparison.curve(runs["softmax"], "val_loss")
    assert steps.tolist() == [0, 10] and mean.tolist() == pytest.approx([3.0, 2.1])
    assert sd[1] == pytest.approx(math.sqrt(0.02))
    table = comparison.final_table(runs)
    assert table.loc["softmax", ("first-token attention", "mean")] == pytest.approx(0.4)
    assert table.loc["softmax", ("sink rate", "mean")] == pytest.approx(0.5)
    assert table.loc["softmax", ("train s", "")] == 5
    shown = comparison.format_table(table)
    assert shown.loc["softpick", "first-token attention"] == "0.060 ± 0.014"
    ref = comparison.reference_table({"variants": {"softmax": {"first_attention": 0.467}}}, ["softmax", "softpick"])
    assert ref["published"].tolist() == ["first attention: 0.467", ""]
    md = comparison.markdown(shown)
    assert md.splitlines()[0].startswith("|  | val loss |") and "| softpick | 2.100 ± 0.000 |" in md


def test_sink_verdicts_follow_the_rules():
    u = comparison.uniform_alpha(64)  # 0.074
    runs = {"softmax": [fake_run([2.0], [0.40]), fake_run([2.0], [0.42])],
            "gated_headwise": [fake_run([1.9], [0.07], sink_rate=0.0), fake_run([1.9], [0.08], sink_rate=0.0)],
            "softpick": [fake_run([2.0], [0.15]), fake_run([2.0], [0.17])],
            "sigmoid": [fake_run([2.0], [0.35], row_mass=3.2), fake_run([2.0], [0.37], row_mass=3.0)],
            "sink_logit": [fake_run([2.0], [0.30], row_mass=0.6), fake_run([2.0], [0.32], row_mass=0.6)],
            "kv_bias": [fake_run([2.0], [0.9]), fake_run([2.0], [0.95])]}
    table = comparison.final_table(runs)
    v = {name: verdicts.sink_verdict(name, table, u).line for name in runs}
    assert "grows a first-token sink" in v["softmax"]
    assert "removes the first-token sink" in v["gated_headwise"] and "val loss -0.100" in v["gated_headwise"]
    assert "reduces" in v["softpick"]
    assert "keeps" in v["sigmoid"] and "not normalised" in v["sigmoid"]
    assert "keeps" in v["sink_logit"]
    assert "40% of each query's attention goes to the learned sink logit" in v["sink_logit"]
    assert "strengthens" in v["kv_bias"]
    flat = comparison.final_table({"softmax": [fake_run([2.0], [0.08])], "softpick": [fake_run([2.0], [0.07])]})
    assert "does NOT grow" in verdicts.sink_verdict("softmax", flat, u).line
    assert "cannot be judged" in verdicts.sink_verdict("softpick", flat, u).line


def test_small_alpha_in_small_rows_is_not_a_removal():
    u = comparison.uniform_alpha(64)
    runs = {"softmax": [fake_run([2.0], [0.40]), fake_run([2.0], [0.42])],
            # sigmoid-like: rows carry 0.2 of the mass, and 0.8 of that goes to the first token
            "sigmoid": [fake_run([2.0], [0.004], sink_rate=0.0, share=0.8, row_mass=0.2)] * 2,
            # softpick-like: small rows, and the first token's share of them is small too
            "softpick": [fake_run([2.0], [0.002], sink_rate=0.0, share=0.05, row_mass=0.05)] * 2}
    table = comparison.final_table(runs)
    sig = verdicts.sink_verdict("sigmoid", table, u).line
    assert "shrinks the rows, not the sink" in sig and "row-normalised share of the first token 0.800" in sig
    assert "removes the first-token sink" in verdicts.sink_verdict("softpick", table, u).line


def test_verdict_flags_a_cut_the_seeds_cannot_settle(rate_settled):
    u = comparison.uniform_alpha(64)  # 1.5U = 0.111
    runs = {"softmax": [fake_run([2.0], [0.35]), fake_run([2.0], [0.36])],
            "a": [fake_run([2.0], [0.08], sink_rate=0.0), fake_run([2.0], [0.14], sink_rate=0.0)],  # 0.110 +- 0.04
            "b": [fake_run([2.0], [0.02], sink_rate=0.0), fake_run([2.0], [0.021], sink_rate=0.0)]}
    table = comparison.final_table(runs)
    a = verdicts.sink_verdict("a", table, u).line
    assert "not settled" in a and "1.5x uniform" in a
    assert a.startswith("a: removes or reduces the first-token sink (the seeds cannot tell which)")  # no side named
    b = verdicts.sink_verdict("b", table, u).line
    assert "not settled" not in b and b.startswith("b: removes the first-token sink")


def test_late_slope_and_the_removed_or_delayed_caveat():
    u = comparison.uniform_alpha(64)
    rising = fake_run([2.0] * 9, [0.02 * i for i in range(9)], sink_rate=0.0)  # steps 0..80, share +0.02 per 10
    flat = fake_run([2.0] * 9, [0.05] * 9, sink_rate=0.0)
    assert verdicts.late_slope(rising) == pytest.approx(0.2)  # +0.02 per 10 steps = +0.2 per 100 steps
    assert verdicts.late_slope(flat) == pytest.approx(0.0, abs=1e-12)
    runs = {"softmax": [fake_run([2.0], [0.35]), fake_run([2.0], [0.36])],
            "x": [fake_run([2.0], [0.02], sink_rate=0.0), fake_run([2.0], [0.021], sink_rate=0.0)]}
    table = comparison.final_table(runs)
    assert "delayed" in verdicts.sink_verdict("x", table, u, runs=[flat, rising]).line
    assert "delayed" not in verdicts.sink_verdict("x", table, u, runs=[flat, flat]).line
    assert "delayed" not in verdicts.sink_verdict("x", table, u).line  # no runs given: no claim either way


def test_convergence_verdicts():
    base = [fake_run([5, 3.0, 2.50, 2.30], [0] * 4), fake_run([5, 3.1, 2.52, 2.31], [0] * 4)]
    fast = [fake_run([5, 2.5, 2.20, 2.10], [0] * 4), fake_run([5, 2.6, 2.22, 2.12], [0] * 4)]
    same = [fake_run([5, 3.05, 2.49, 2.31], [0] * 4), fake_run([5, 3.02, 2.53, 2.30], [0] * 4)]
    c = convergence.convergence(fast, base)
    assert c["verdict"] == "faster" and c["auc"]["diff"] < 0
    assert c["steps_to_baseline_final"] == {"candidate": [20, 20], "baseline": [30, None]}
    assert convergence.convergence(base, fast)["verdict"] == "slower"
    assert convergence.convergence(same, base)["verdict"] == "no difference"
    line = convergence.convergence_line("head-wise RMSNorm", convergence.convergence(same, base), "bible")
    assert line.startswith("no difference in convergence between head-wise RMSNorm and softmax at this scale (bible)")


def test_heads_and_crossings():
    runs = [fake_run([3, 2, 1], [0.1, 0.2, 0.5]), fake_run([3, 2, 1], [0.1, 0.4, 0.5])]
    assert comparison.first_crossing(runs, 0.3) == [20, 10]
    assert comparison.strongest_head(runs[0]) == (0, 0, pytest.approx(0.5))
    # each run's own strongest head: seed 0 sinks in head 1, seed 1 in head 0 (an average would pick neither well)
    a = fake_run([1], [0.5], by_head=[[0.1, 0.9]])
    b = fake_run([1], [0.5], by_head=[[0.8, 0.05]])
    assert comparison.strongest_head(a)[:2] == (0, 1) and comparison.strongest_head(b)[:2] == (0, 0)
    assert convergence.steps_to_reach(runs[0], 2.0) == 10 and convergence.steps_to_reach(runs[0], 0.5) is None


class FixedAttention(nn.Module):
    """Stands in for TinyLM: one layer, one head, attending to t-1 on trigger queries and to BOS elsewhere."""

    def forward(self, ids, record=False):
        N, T = ids.shape
        A = torch.zeros(1, N, 1, T, T)
        trig = torch.isin(ids, torch.tensor(training_data.BBC_TRIGGERS))
        for n in range(N):
            for t in range(T):
                A[0, n, 0, t, t - 1 if (trig[n, t] and t >= 1) else 0] = 1.0
        return None, A, None


def test_active_dormant_on_a_hand_built_head():
    ids = training_data.bigram_backcopy_batch(8, 40, torch.Generator().manual_seed(0))
    ad = comparison.active_dormant(FixedAttention(), ids, 0, 0)
    assert ad["bos_other"] == 1.0 and ad["bos_trigger"] == 0.0
    assert ad["prev_trigger"] == 1.0 and ad["prev_other"] == 0.0 and ad["holds"]
    assert 0 < ad["trigger_fraction"] < 0.2


def test_train_variants_trains_each_variant_and_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    base = protocol.SIZES["smoke"].train
    runs = comparison.train_variants(base, ["softmax", "sink_logit"], [0, 1], progress=False)
    assert [r["config"]["model"]["attention"] for r in runs["sink_logit"]] == ["sink_logit"] * 2
    assert [r["config"]["seed"] for r in runs["softmax"]] == [0, 1]
    assert runs["softmax"][0]["checkpoints"] != runs["softmax"][1]["checkpoints"]  # seeds differ
    last = runs["sink_logit"][0]["checkpoints"][-1]
    assert 0 < last["row_mass"] < 1  # mass goes to the learned sink logit
    assert runs["softmax"][0]["checkpoints"][-1]["row_mass"] == pytest.approx(1.0)


def test_every_profile_trains_a_valid_configuration():
    for p in protocol.SIZES.values():
        training.check_config(p.train)
        assert p.train_seeds >= 2
        if p.text_check is not None:
            training.check_config(p.text_check)
            assert p.text_check.data == "bible" and p.text_check.model == p.train.model


def test_published_agreement_compares_directions():
    runs = {"softmax": [fake_run([2.0], [0.40])], "gated_headwise": [fake_run([1.9], [0.60])],
            "softpick": [fake_run([2.1], [0.01])]}
    ref = {"variants": {"softmax": {"first_attention": 0.467, "val_loss": "2.78 +- 0.01"},
                        "gated_headwise": {"first_attention": 0.073, "val_loss": "2.74 +- 0.01"},
                        "softpick": {"note": "no numbers"}}}
    lines = comparison.published_agreement(comparison.final_table(runs), ref)
    assert len(lines) == 2
    assert lines[0].startswith("gated_headwise, first-token attention vs softmax: published 0.073 / 0.467 = 0.16x")
    assert lines[0].endswith("= 1.50x -> disagrees.") and lines[1].endswith("-> agrees.")
    # a variant with its own published baseline is compared with that one, not with another paper's softmax
    ref["variants"]["softpick"] = {"first_attention": 0.033, "baseline_first_attention": 0.65}
    own = comparison.published_agreement(comparison.final_table(runs), ref)
    assert any(line.startswith("softpick, first-token attention vs softmax: published 0.033 / 0.65 = 0.05x")
               for line in own)


def test_published_agreement_is_judged_seed_by_seed():
    """A mean on the paper's side that one seed of two contradicts is unsettled, not an agreement."""
    ref = {"variants": {"softmax": {"first_attention": 0.467}, "off_by_one": {"first_attention": 0.033}}}
    split = {"softmax": [fake_run([2.0], [0.40]), fake_run([2.0], [0.40])],
             "off_by_one": [fake_run([2.0], [0.10]), fake_run([2.0], [0.45])]}  # mean 0.275 < 0.40, seed 2 above
    table = comparison.final_table(split)
    assert comparison.published_agreement(table, ref)[0].endswith("-> agrees.")  # the means alone
    line = comparison.published_agreement(table, ref, runs=split)[0]
    assert line.endswith("-> unsettled (1 of 2 seeds agree).")
    both = {**split, "off_by_one": [fake_run([2.0], [0.10]), fake_run([2.0], [0.20])]}
    assert comparison.published_agreement(comparison.final_table(both), ref, runs=both)[0].endswith("-> agrees.")
    neither = {**split, "off_by_one": [fake_run([2.0], [0.50]), fake_run([2.0], [0.60])]}
    assert comparison.published_agreement(comparison.final_table(neither), ref,
                                          runs=neither)[0].endswith("-> disagrees.")


def test_mitigation_claims_map_verdicts_to_holds(rate_settled):
    verdict = verdicts.SinkVerdict
    assert verdict("s", "removes", True, False, "").removes is True
    assert verdict("k", "reduces", True, False, "").removes is False
    assert verdict("k", "shrinks_rows", True, False, "").removes is False
    assert verdict("x", "removes", False, False, "").removes is None  # the seeds cannot settle the cut
    assert verdict("x", "removes", True, True, "").removes is None  # the strongest head is still rising
    assert verdict("k", "reduces", True, True, "").removes is False  # a reduction still rising is no removal
    assert verdict("x", "cannot_judge", True, False, "").removes is None
    u = comparison.uniform_alpha(64)
    runs = {"softmax": [fake_run([2.0], [0.40]), fake_run([2.0], [0.42])],
            "softpick": [fake_run([2.0], [0.002], sink_rate=0.0, share=0.05, row_mass=0.05)] * 2}
    table = comparison.final_table(runs)
    paper = {"source": "test", "variants": {"softmax": {"first_attention": 0.467}, "headwise_rmsnorm": {}}}
    base = sink_claims.sink_claim("softmax", table, u, runs["softmax"], paper)
    assert base.id == "mitigation.softmax_grows_sink" and base.holds is True
    assert verdicts.sink_verdict("softpick", table, u).outcome == "removes"
    sp = sink_claims.sink_claim("softpick", table, u, runs["softpick"], paper)
    assert sp.holds is True and sp.published is None and sp.note.startswith("softpick: removes")
    slow = [fake_run([5, 3.5, 3.0], [0] * 3), fake_run([5, 3.6, 3.1], [0] * 3)]
    fast = [fake_run([5, 3.0, 2.5], [0] * 3), fake_run([5, 3.1, 2.6], [0] * 3)]
    assert convergence.rmsnorm_convergence(fast, slow, paper, "toy").holds is True
    assert convergence.rmsnorm_convergence(slow, fast, paper, "toy").holds is False
    assert convergence.rmsnorm_convergence(slow, slow, paper, "toy").holds is None


def _seeded_runs(softpick_alphas, softmax_alpha=0.45):
    """softmax + softpick runs over len(softpick_alphas) seeds, each with a step-0 checkpoint at uniform attention
    (the untrained model) and a final one."""
    u = comparison.uniform_alpha(64)
    base = [fake_run([4.0, 2.0], [u, softmax_alpha]) for _ in softpick_alphas]
    pick = [fake_run([4.0, 2.1], [u, a], sink_rate=0.0 if a < 0.3 else 1.0,
                     share=a, row_mass=1.0) for a in softpick_alphas]
    return {"softmax": base, "softpick": pick}


PAPER = {"source": "test", "variants": {"softmax": {"first_attention": 0.467},
                                        "headwise_rmsnorm": {"val_loss": "2.74"}}}


def test_sink_claims_are_judged_per_seed_and_over_the_seeds(rate_settled):
    u = comparison.uniform_alpha(64)
    runs = _seeded_runs([0.02, 0.03, 0.04])  # each more than a seed's cross-machine margins below 1.5U = 0.111
    clean = sink_claims.sink_claim_over_seeds("softpick", runs, u, PAPER, [0, 1, 2])
    assert clean.holds is True and clean.draws == (True, True, True)
    assert clean.draws_of == "3 training seeds (0, 1, 2)" and clean.spread["values"] == [0.02, 0.03, 0.04]
    assert clean.note.startswith("per seed: seed 0: removes, seed 1: removes, seed 2: removes; over seeds:")
    split = sink_claims.sink_claim_over_seeds("softpick", _seeded_runs([0.02, 0.03, 0.40]), u, PAPER, [0, 1, 2])
    assert split.holds is None and split.draws == (True, True, False)
    assert split.note.startswith("unsettled: 2 of 3 draws hold (3 training seeds (0, 1, 2))")
    grows = sink_claims.sink_claim_over_seeds("softmax", runs, u, PAPER, [0, 1, 2])
    assert grows.holds is True and grows.at_init is False and grows.id == "mitigation.softmax_grows_sink"
    assert "compute_attention_sink" in grows.follows and "2x uniform" in grows.adapted
    assert clean.at_init is None and "softpick-attention" in clean.follows


def test_step_zero_control_fails_for_grows_and_cannot_judge_removes():
    """The random-weight control is the same TinyLM at step 0: Gu et al. predict no sink before training."""
    u = comparison.uniform_alpha(64)
    runs = _seeded_runs([0.05, 0.06, 0.07])
    init = seed_claims.at_init(runs)
    assert all(len(r["checkpoints"]) == 1 for rs in init.values() for r in rs)
    assert all(len(r["checkpoints"]) == 2 for rs in runs.values() for r in rs)  # the runs themselves untouched
    grows = sink_claims.sink_claim_over_seeds("softmax", init, u, PAPER, [0, 1, 2])
    assert grows.holds is False and sink_claims.control_note("softmax", init, u) == ""
    removes = sink_claims.sink_claim_over_seeds("softpick", init, u, PAPER, [0, 1, 2])
    assert removes.holds is None
    assert "no sink to remove" in sink_claims.control_note("softpick", init, u)
    # a step-0 model that already had a sink: the note says so (and the record would warn without it)
    sunk = {"softmax": [fake_run([4.0], [0.5])] * 3}
    assert sink_claims.control_note("softmax", sunk, u).startswith("the rule holds on the same TinyLM at step 0")


def test_gu_sink_rate_transcribes_the_authors_code():
    """sail-sg/Attention-Sink eval_sink_open_source.py:compute_attention_sink, transcribed: importance of key j =
    sum_t A[t, j] / (T - j); metric = fraction of (sample, layer, head) with importance > eps."""
    A = torch.zeros(1, 1, 2, 4, 4)  # (samples, layers, heads, T, T)
    A[..., 0, 0] = 1.0
    A[0, 0, 0, 1:, 0] = 0.5  # head 0: every later query gives BOS half -> importance (1 + 3 * 0.5) / 4 = 0.625
    A[0, 0, 1, 1:, 0] = 0.1  # head 1: (1 + 0.3) / 4 = 0.325 -> also above 0.3
    A[0, 0, 1, 3, 0] = 0.0  # (1 + 0.2) / 4 = 0.3 -> not above
    ratios = torch.arange(4, 0, -1)[None, None, None, :].expand_as(A).to(A)
    theirs = ((A / ratios).sum(dim=-2) > 0.3).float().mean(dim=(0, 1, 2))[0]
    ours = metrics.sink_rate(metrics.alpha(A, 0), 0.3)
    assert ours == pytest.approx(float(theirs)) == pytest.approx(0.5)


def test_convergence_claim_needs_every_seed_and_the_margin():
    slow = [fake_run([5, 3.5, 3.0 + d], [0] * 3) for d in (0.0, 0.01, 0.02)]
    fast = [fake_run([5, 3.0, 2.5 + d], [0] * 3) for d in (0.0, 0.01, 0.02)]
    claim = convergence.convergence_claim_over_seeds(fast, slow, PAPER, "toy", [0, 1, 2])
    assert claim.holds is True and claim.draws == (True,) * 3 and claim.draws_of == "3 training seeds (0, 1, 2)"
    assert claim.at_init is None and claim.follows.startswith("arXiv 2605.06611")
    assert claim.control is None and claim.control_note.startswith("control not run: ")
    assert convergence.convergence_claim_over_seeds(slow, fast, PAPER, "toy", [0, 1, 2]).holds is False
    mixed = [fast[0], slow[1], fast[2]]
    assert convergence.convergence_claim_over_seeds(mixed, slow, PAPER, "toy", [0, 1, 2]).holds is None
    # every seed a hair faster (paired: -0.001 each), within the cross-machine floor of a loss difference: unsettled
    noisy = [fake_run([5, 3.0 + d, 2.5 + d], [0] * 3) for d in (0.0, 0.5, 1.0)]
    hair = [fake_run([5, 3.0 + d - 0.001, 2.5 + d - 0.001], [0] * 3) for d in (0.0, 0.5, 1.0)]
    tight = convergence.convergence_claim_over_seeds(hair, noisy, PAPER, "toy", [0, 1, 2])
    assert tight.holds is None and tight.unsettled and "within its margin" in tight.note


def test_one_convention_for_convergence_paired_by_seed():
    """bible_g0=0.1 at c16eec0: both seeds slower (final +0.057, +0.031) but "unsettled" -- each seed alone had no
    sd, the seeds pooled unpaired had a wide one. Paired by seed: final +0.044 against its margin max(2 x 0.0184,
    0.029) = 0.037 -- slower, so "converges faster" does not hold. Paired differences that disagree in sign stay
    unsettled however the seeds' own losses spread."""
    base = [fake_run([5, 2.10, 1.918], [0] * 3), fake_run([5, 2.15, 1.967], [0] * 3)]
    g0 = [fake_run([5, 2.214, 1.975], [0] * 3), fake_run([5, 2.1426, 1.998], [0] * 3)]
    conv = convergence.convergence(g0, base)
    assert conv["final"]["paired"] == pytest.approx([0.057, 0.031]) and conv["verdict"] == "slower"
    assert conv["final"]["margin"] == pytest.approx(2 * np.std([0.057, 0.031], ddof=1))
    claim = convergence.convergence_claim_over_seeds(g0, base, PAPER, "toy", [0, 1])
    assert claim.verdict() == "does NOT hold" and claim.draws == (False, False)
    split = [fake_run([5, 2.00, 1.818], [0] * 3), fake_run([5, 2.25, 2.067], [0] * 3)]  # -0.1 and +0.1 per seed
    assert convergence.convergence_claim_over_seeds(split, base, PAPER, "toy", [0, 1]).verdict() == "unsettled"


def test_judge_records_each_claim_over_the_seeds_with_its_step_zero_control():
    """seed_claims.judge is the bookkeeping of 03 and nothing else: the records it adds are the rules' own, each with
    the same rule on the step-0 checkpoints as its control and the control's note."""
    from sinklib.core.claims_file import Recorder

    u = comparison.uniform_alpha(64)
    runs = _seeded_runs([0.02, 0.03, 0.04])
    record = Recorder("03_mitigation", "TinyLM trained here", "smoke")
    grows, removes = seed_claims.judge(record, "sink", runs, PAPER, [0, 1, 2], variants=["softmax", "softpick"],
                                       uniform=u)
    assert [c.id for c in record.claims] == ["mitigation.softmax_grows_sink", "mitigation.softpick_removes_sink"]
    direct = sink_claims.sink_claim_over_seeds("softpick", runs, u, PAPER, [0, 1, 2])
    assert (removes.holds, removes.draws, removes.measured) == (direct.holds, direct.draws, direct.measured)
    assert grows.control is False and removes.control is None  # Gu et al.: no sink before training to remove
    assert "no sink to remove" in removes.control_note
    conv_runs = {"softmax": runs["softmax"], "headwise_rmsnorm g0=0.1": runs["softpick"]}
    [conv] = seed_claims.judge(record, "convergence", conv_runs, PAPER, [0, 1, 2],
                               variants=["headwise_rmsnorm g0=0.1"], setting="bible")
    assert conv.id == "origin.headwise_rmsnorm_converges_faster.bible_g0=0.1" and conv.control is None
    assert conv.control_note == convergence.CONVERGENCE_CONTROL
    with pytest.raises(ValueError, match="unknown rule"):
        seed_claims.judge(record, "removes", runs, PAPER, [0, 1, 2])


def test_loss_against_baseline_groups_variants_by_their_gap_in_seed_sds():
    runs = {v: [fake_run([2.0 + d], [0.1]) for d in (0.0, 0.01)] for v in ("softmax", "softpick", "kv_bias")}
    table = comparison.final_table(runs)
    table.loc["softpick", ("val loss", "mean")] += 0.5  # far above softmax's, in pooled seed sd's (0.00707)
    table.loc["kv_bias", ("val loss", "mean")] += 0.01  # within 2 sd's
    groups = comparison.loss_against_baseline(table)
    assert list(groups["above"]) == ["softpick"] and groups["above"]["softpick"] == pytest.approx(0.5)
    assert list(groups["within"]) == ["kv_bias"] and groups["below"] == {}
    table.loc["softpick", ("val loss", "mean")] -= 1.0
    assert list(comparison.loss_against_baseline(table)["below"]) == ["softpick"]
    assert list(comparison.loss_against_baseline(table, sds=0.5)["above"]) == ["kv_bias"]
