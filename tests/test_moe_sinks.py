"""Routing summaries and expert pruning on tiny random MoE decoders, against direct computations."""

import pytest
import torch

from sinklib.architectures.moe import moe_sinks, pruning, su_claims
from sinklib.core.adapters import adapter_for
from sinklib.models import tiny_random


@pytest.mark.parametrize("name", ["mixtral", "olmoe", "qwen2_moe"])
def test_routing_summaries_equal_a_direct_computation(name):
    lm, inputs = tiny_random.loaded(name)
    ids = inputs["input_ids"]
    r = moe_sinks.routing(lm, ids, batch_size=1)
    router = adapter_for(lm.model).layers[0].router
    x = {}
    h = adapter_for(lm.model).layers[0].mlp.register_forward_pre_hook(lambda m, a: x.__setitem__("in", a[0]))
    with torch.no_grad():
        lm.model(ids)
    h.remove()
    p = torch.softmax(x["in"] @ router.weight.T.detach(), dim=-1)  # (B, T, E)
    entropy = -(p * p.log()).sum(-1)
    assert r.entropy_first[0] == pytest.approx(float(entropy[:, 0].mean()), abs=1e-5)
    assert r.entropy_rest[0] == pytest.approx(float(entropy[:, 1:].mean()), abs=1e-5)
    k = router.top_k
    first = p[:, 0].topk(k).indices  # (B, k)
    load = torch.bincount(first.flatten(), minlength=p.shape[-1]).float() / first.numel()
    torch.testing.assert_close(r.load_first[0], load)
    assert r.load_rest.sum(-1).allclose(torch.ones(len(r.load_rest)))
    assert 0 < r.same_set_first[0] <= 1 and r.output_max.shape == (2, p.shape[-1])


def test_prune_experts_zeroes_and_restores():
    lm, inputs = tiny_random.loaded("mixtral")
    before = [p.clone() for p in lm.model.parameters()]
    with torch.no_grad():
        plain = lm.model(**inputs).logits
        with pruning.PruneExperts(lm.model, [(0, 1), (1, 3)]):
            assert adapter_for(lm.model).layers[0].experts.down_proj[1].abs().max() == 0
            pruned = lm.model(**inputs).logits
        again = lm.model(**inputs).logits
    assert not torch.allclose(pruned, plain) and torch.equal(again, plain)
    assert all(torch.equal(a, b) for a, b in zip(before, lm.model.parameters()))


def test_random_controls_stay_in_the_layer_and_off_the_super_experts():
    picks = pruning.random_controls([(3, 0), (5, 2)], 4, draws=20, seed=1)
    assert len(picks) == 20 and all([layer for layer, _ in p] == [3, 5] for p in picks)
    assert all((3, 0) not in p and (5, 2) not in p for p in picks)


def test_super_expert_and_pruning_claims():
    table = torch.ones(30, 8)
    table[11, 0] = 1e5  # one extreme expert of 240
    assert su_claims.super_experts_claim(table).holds is True
    assert su_claims.super_experts_claim(torch.ones(30, 8)).holds is False  # none found (ties: nothing above P99.5)
    base, pruned = {"alpha": 0.5, "ppl": 40.0}, {"alpha": 0.2, "ppl": 150.0}
    ok = [{"alpha": 0.51, "ppl": 41.0}]
    assert su_claims.pruning_claim(base, pruned, ok).holds is True
    assert su_claims.pruning_claim(base, {"alpha": 0.4, "ppl": 150.0}, ok).holds is False  # the sink survives
    assert su_claims.pruning_claim(base, pruned, ok + [{"alpha": 0.3, "ppl": 41.0}]).holds is False  # random hurts
    assert su_claims.pruning_claim(base, pruned, ok).at_init is False


def test_pruning_is_judged_over_the_random_expert_draws():
    """Su et al., Table 3: perplexity with the super experts pruned vs as many random experts pruned; each random
    draw is one draw of the claim: all hold -> holds, all fail -> fails, else unsettled."""
    base, pruned = {"alpha": 0.5, "ppl": 40.0}, {"alpha": 0.2, "ppl": 150.0}
    good, bad = {"alpha": 0.5, "ppl": 41.0}, {"alpha": 0.3, "ppl": 41.0}
    runs = {"as is": base, "super experts pruned": pruned, "random experts [a]": good, "random experts [b]": good,
            "random experts [c]": good}
    claim = su_claims.pruning_over_draws(runs)
    assert claim.holds is True and claim.draws == (True, True, True) and len(claim.measured["random"]) == 3
    assert "3 draws" in claim.draws_of and claim.spread["max"] == 41.0 / 40.0 - 1
    mixed = su_claims.pruning_over_draws(runs | {"random experts [c]": bad})
    assert mixed.holds is None and mixed.draws == (True, True, False) and "unsettled: 2 of 3" in mixed.note
    broken = su_claims.pruning_over_draws(runs | {"super experts pruned": {"alpha": 0.45, "ppl": 41.0}})
    assert broken.holds is False and broken.draws == (False, False, False)


def test_few_super_experts_fails_on_a_random_weight_moe():
    """The random-weight control: a freshly initialised MoE has no extreme expert, so the claim fails although the
    authors' rank rule still names one."""
    from sinklib.models.random_init import random_weights

    lm, inputs = tiny_random.loaded("mixtral")
    control = random_weights(lm, seed=0)
    route = moe_sinks.routing(control, inputs["input_ids"], batch_size=2)
    claim = su_claims.super_experts_claim(route.output_max)
    assert claim.holds is False and claim.measured["effect size"] < 10


def test_compare_pruning_runs_the_model_as_is_pruned_and_random():
    lm, inputs = tiny_random.loaded("mixtral")
    ids = inputs["input_ids"]
    runs = pruning.compare_pruning(lm, [(1, 2)], ids, ids, draws=2, seed=0, batch_size=2)
    assert list(runs)[:2] == ["as is", "super experts pruned"] and len(runs) == 4
    assert all(name.startswith("random experts: expert ") and name.endswith(" of layer 1") for name in list(runs)[2:])
    assert runs["as is"].ppl != runs["super experts pruned"].ppl and len(runs["as is"].alpha_first) == 2
    s = runs["as is"].summary()
    assert s["alpha"] == sum(runs["as is"].alpha_first) / 2 and s["max_abs_first"] == max(runs["as is"].max_abs_first)


def test_standin_verdicts_keep_numbers_and_say_why_they_cannot_be_judged():
    """The upcycled stand-in's experts are slices of a dense MLP: pruning one is a dense super-neuron ablation.
    Its two Su et al. claims keep their numbers but are recorded as "cannot be judged here", with the reason."""
    table = torch.ones(30, 8)
    table[11, 5] = 1e5
    claim = su_claims.super_experts_claim(table)
    assert claim.holds is True
    judged = su_claims.standin_verdict(claim)
    assert judged.holds is None and judged.measured == claim.measured
    assert "not judgeable on the stand-in" in judged.note and "the rule on these numbers holds" in judged.note
    base, pruned = {"alpha": 0.5, "ppl": 40.0, "max_abs_first": 2e4}, {"alpha": 0.1, "ppl": 90.0, "max_abs_first": 7e2}
    prune = su_claims.standin_verdict(su_claims.pruning_claim(base, pruned, [base]))
    assert prune.holds is None and "dense super-neuron ablation" in prune.note
    assert {"su2025.few_super_experts", "su2025.pruning_super_experts_breaks_the_sink"} <= set(
        su_claims.STANDIN_CANNOT_TEST)


def test_expert_channels_and_sink_drop():
    """The channel of an expert's largest output, read from Capture's expert outputs, equals a direct argmax over
    the outputs the expert produced; the per-layer sink drop is 1 - pruned / as is."""
    from sinklib.core.capture import Capture

    lm, inputs = tiny_random.loaded("mixtral")
    ids = inputs["input_ids"]
    got = pruning.expert_channels(lm, ids, [(0, 1), (1, 3)], batch_size=1)
    with torch.no_grad(), Capture(lm.model, kinds=["expert_choice", "expert_outputs"]) as cap:
        lm.model(ids)
    for (layer, e), (channel, value) in got.items():
        y = cap.get("expert_outputs", layer)[cap.get("expert_choice", layer) == e]  # (n, d)
        flat = int(y.abs().argmax())
        assert channel == flat % y.shape[-1] and value == pytest.approx(float(y.abs().max()))
    drop = pruning.sink_drop_by_layer([0.5, 0.8, 0.0], [0.05, 0.8, 0.0])
    assert drop[0] == pytest.approx(0.9) and drop[1] == 0.0 and drop[2] != drop[2]


def test_pruning_is_recorded_with_its_control_or_why_there_is_none():
    """11_moe's record of su2025.pruning_super_experts_breaks_the_sink: the verdict of pruning_over_draws, with the
    random-weight control where the rule found a super expert there (else a note saying it did not), and on the
    stand-in "cannot be judged here" with the numbers kept."""
    from sinklib.core.claims_file import Recorder

    lm, inputs = tiny_random.loaded("mixtral")
    ids = inputs["input_ids"]
    base, good = {"alpha": 0.5, "ppl": 40.0, "max_abs_first": 2e4}, {"alpha": 0.5, "ppl": 41.0, "max_abs_first": 2e4}
    summary = {"as is": base, "super experts pruned": {"alpha": 0.2, "ppl": 150.0, "max_abs_first": 7e2},
               "random experts [a]": good, "random experts [b]": good}
    record = Recorder("11_moe", "m", "test")
    assert su_claims.record_pruning(record, {"as is": base}, lm, [], ids, ids, 0, 2, False) is None
    claim = su_claims.record_pruning(record, summary, lm, [], ids, ids, 0, 2, False)
    assert claim.holds is True and claim.draws == (True, True) and claim.control is None
    assert claim.control_note.startswith("control not run") and record.claims == [claim]
    record = Recorder("11_moe", "m", "test")
    judged = su_claims.record_pruning(record, summary, lm, [(1, 2)], ids, ids, 0, 2, True)
    assert judged.holds is None and "not judgeable on the stand-in" in judged.note
    assert judged.measured == claim.measured and judged.control is not None and not judged.control_note
