"""compare_pruning computes the blocks before the first pruned layer once: the same runs as every run from scratch."""

import pytest
import torch

from sinklib.architectures.moe import moe_sinks, pruning
from sinklib.core.adapters import adapter_for
from sinklib.core.evaluation import perplexity
from sinklib.models import tiny_random


def _from_scratch(lm, supers, ids, held, draws, seed, batch_size):
    """compare_pruning as it ran before the shared prefix: every run a full forward of every batch."""
    def run(prune):
        with pruning.PruneExperts(lm.model, prune):
            state = pruning.first_token_state(lm, ids, batch_size)
            return pruning.PruneRun(state["alpha_first"], state["max_abs_first"], perplexity(lm, held))

    n_experts = adapter_for(lm.model).layers[supers[0][0]].experts.num_experts if supers else 0
    runs = {"as is": run([]), "super experts pruned": run(supers)}
    for pick in pruning.random_controls(supers, n_experts, draws, seed) if supers else []:
        runs["random experts: " + ", ".join(moe_sinks.expert_name(layer, e) for layer, e in pick)] = run(pick)
    return runs


@pytest.mark.parametrize("name", ["mixtral", "olmoe", "qwen2_moe"])
@pytest.mark.parametrize("supers", [[(1, 2)], [(0, 1)], []])
@pytest.mark.parametrize("from_routing", [False, True])
def test_compare_pruning_equals_every_run_from_scratch(name, supers, from_routing):
    lm, inputs = tiny_random.loaded(name)
    ids = inputs["input_ids"]
    held = torch.cat([ids, ids.flip(1)])
    as_is = moe_sinks.routing(lm, ids, batch_size=1, first_token=True).first_state if from_routing else None
    shared = pruning.compare_pruning(lm, supers, ids, held, draws=3, seed=0, batch_size=1, as_is=as_is)
    alone = _from_scratch(lm, supers, ids, held, draws=3, seed=0, batch_size=1)
    assert list(shared) == list(alone)
    for key, run in alone.items():
        assert shared[key].alpha_first == pytest.approx(run.alpha_first, rel=1e-6, abs=1e-9)
        assert shared[key].max_abs_first == pytest.approx(run.max_abs_first, rel=1e-6)
        assert shared[key].ppl == pytest.approx(run.ppl, rel=1e-6)


def test_replay_skips_the_shared_blocks_and_restores_them():
    lm, inputs = tiny_random.loaded("mixtral")
    ids = inputs["input_ids"]
    layers = adapter_for(lm.model).layers
    calls = []
    hook = layers[0].attn.register_forward_hook(lambda m, a, o: calls.append(1))
    shared = pruning.SharedPrefix(lm.model, 1)
    try:
        with torch.no_grad():
            with shared.record():
                plain = lm.model(ids).logits
            assert len(calls) == 1 and len(shared.states) == 1
            with shared.replay():
                again = lm.model(ids).logits
                with pytest.raises(KeyError, match="not run under record"):
                    lm.model(ids[:, :-1])
            assert len(calls) == 1  # block 0 did not run under replay
            assert "forward" not in layers[0].block.__dict__  # the class's own forward is back
            torch.testing.assert_close(again, plain, rtol=0, atol=0)
            lm.model(ids)
            assert len(calls) == 2
    finally:
        hook.remove()


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_routing_reads_the_first_token_state_off_its_own_forwards(name):
    lm, inputs = tiny_random.loaded(name)
    ids = inputs["input_ids"]
    route = moe_sinks.routing(lm, ids, batch_size=1, first_token=True)
    alone = pruning.first_token_state(lm, ids, batch_size=1)
    assert route.first_state == alone  # the capture leaves the forward as it is: the very same numbers
    plain = moe_sinks.routing(lm, ids, batch_size=1)
    assert plain.first_state is None and torch.equal(plain.output_max, route.output_max)
    assert plain.entropy_first == route.entropy_first and plain.same_set_first == route.same_set_first


def test_record_prefix_stops_after_the_shared_blocks():
    lm, inputs = tiny_random.loaded("mixtral")
    ids = torch.cat([inputs["input_ids"]] * 3)  # 6 windows, batches of 4 and 2
    last = adapter_for(lm.model).layers[-1].attn
    calls = []
    hook = last.register_forward_hook(lambda m, a, o: calls.append(1))
    try:
        full, early = pruning.SharedPrefix(lm.model, 1), pruning.SharedPrefix(lm.model, 1)
        with full.record():
            pruning.first_token_state(lm, ids, batch_size=4)
        assert len(calls) == 2
        early.record_prefix(lm, ids, batch_size=4)
        assert len(calls) == 2  # the last block never ran
        assert full.states.keys() == early.states.keys() and len(early.states) == 2
        assert all(torch.equal(full.states[k], early.states[k]) for k in full.states)
    finally:
        hook.remove()
