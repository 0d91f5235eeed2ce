"""Su et al.'s super experts against a direct transcription of the authors' rule on hand-built tables."""

import numpy as np
import pytest
import torch

from sinklib.architectures.moe.su_claims import super_experts_claim
from sinklib.architectures.moe.super_experts import effect_size, expert_output_max, super_experts


def authors_rule(table, include_layers=0.75, quantile=99.5, times=10):
    """ZunhaiSu/Super-Experts-Profilling, _super_experts_analysis + _identify_super_experts, transcribed."""
    kept = round(len(table) * include_layers)
    rows = [(layer, e, v) for layer, row in enumerate(table) if layer < kept for e, v in enumerate(row)]
    values = [v for _, _, v in rows]
    percentile = np.percentile(values, quantile)
    hits = [(layer, e, v) for layer, e, v in rows if v > percentile and v > np.max(values) // times]
    return sorted(hits, key=lambda h: -h[2])


def test_super_experts_follow_the_authors_code():
    gen = torch.Generator().manual_seed(0)
    table = torch.rand(8, 16, generator=gen) * 5  # (L, E): ordinary experts peak below 5
    table[1, 3], table[2, 7] = 900.0, 120.0  # two experts carry extreme outputs in early layers
    table[7, 0] = 5000.0  # a late-layer outlier expert: outside the first 75% of layers, never a super expert
    got = super_experts(table)
    want = authors_rule(table.tolist())
    assert [(layer, e) for layer, e, _ in got] == [(layer, e) for layer, e, _ in want] == [(1, 3)]
    # over the 96 kept values the 99.5th percentile interpolates between 120 and 900, so 120 falls below it (though
    # above max // 10 = 90); at the 97th percentile both pass, largest first
    got = super_experts(table, quantile=97.0)
    assert [(layer, e) for layer, e, _ in got] == [(layer, e) for layer, e, _ in authors_rule(table.tolist(), quantile=97.0)]
    assert [(layer, e) for layer, e, _ in got] == [(1, 3), (2, 7)]
    small = torch.rand(4, 4, generator=gen)  # max < 10: the floor-division condition is only a > 0
    assert [(a, b) for a, b, _ in super_experts(small)] == [(a, b) for a, b, _ in authors_rule(small.tolist())]


def authors_rule_with_names(modules, total_layers, include_layers=0.75, quantile=99.5, times=10):
    """The authors' rule over their hooked module names ("model.layers.{l}.mlp.experts.{e}.down_proj",
    "model.layers.{l}.mlp.shared_experts.down_proj" -> expert "-1"), layer_index read from the name."""
    kept = round(total_layers * include_layers)
    rows = []
    for name, v in modules.items():
        parts = name.split(".")
        layer = int(parts[2])
        expert = -1 if "shared_experts" in name else int(parts[-2])
        if layer < kept:
            rows.append((layer, expert, v))
    values = [v for _, _, v in rows]
    percentile = np.percentile(values, quantile)
    return sorted([r for r in rows if r[2] > percentile and r[2] > np.max(values) // times], key=lambda h: -h[2])


def test_super_experts_index_the_models_layers_and_count_shared_experts():
    """DeepSeek-V2-Lite: a dense first layer, then MoE layers with routed and shared experts. Rows are the model's
    layer index (as the authors' layer_index and PruneExperts), and a shared expert is a candidate as expert -1."""
    gen = torch.Generator().manual_seed(1)
    L, E = 8, 6
    table = torch.rand(L, E, generator=gen) * 5
    table[0] = float("nan")  # dense layer 0: no routed experts
    shared = torch.rand(L, generator=gen) * 5
    shared[0] = float("nan")
    table[2, 4] = 800.0  # a routed super expert of the model's layer 2 (the second MoE layer)
    shared[3] = 3000.0  # a shared expert carrying an extreme output
    modules = {f"model.layers.{layer}.mlp.experts.{e}.down_proj": float(table[layer, e])
               for layer in range(1, L) for e in range(E)}
    modules |= {f"model.layers.{layer}.mlp.shared_experts.down_proj": float(shared[layer]) for layer in range(1, L)}
    want = authors_rule_with_names(modules, L, quantile=95.0)
    got = super_experts(table, shared=shared, quantile=95.0)
    assert [(a, b) for a, b, _ in got] == [(a, b) for a, b, _ in want] == [(3, -1), (2, 4)]
    size = effect_size(table, got)
    assert np.isfinite(size) and size > 100  # NaN rows are not "other routed experts"


def test_prune_experts_takes_the_models_layer_and_the_shared_expert():
    from sinklib.architectures.moe.pruning import PruneExperts
    from sinklib.core.adapters import adapter_for
    from sinklib.models import tiny_random

    model, _ = tiny_random.qwen2_moe()
    parts = adapter_for(model).layers
    shared = parts[1].shared_expert.down_proj.weight
    routed = parts[1].experts.down_proj
    before_shared, before_routed = shared.clone(), routed[2].clone()
    with PruneExperts(model, [(1, -1), (1, 2)]):
        assert shared.abs().sum() == 0 and routed[2].abs().sum() == 0 and routed[1].abs().sum() > 0
    assert torch.equal(shared, before_shared) and torch.equal(routed[2], before_routed)


def test_expert_output_max_reads_capture_records():
    choice = torch.tensor([[[0, 2], [1, 2]]])  # (B=1, T=2, k=2)
    outputs = torch.zeros(1, 2, 2, 3)
    outputs[0, 0, 1, 2] = -7.0  # expert 2 at token 0
    outputs[0, 1, 0, 0] = 3.0  # expert 1 at token 1
    outputs[0, 1, 1, 1] = 4.0  # expert 2 at token 1
    assert expert_output_max(choice, outputs, 4).tolist() == [0.0, 3.0, 7.0, 0.0]


def test_the_rank_rule_alone_passes_one_expert_for_any_weights_of_176_layer_experts():
    """The issue: 22 kept layers x 8 experts = 176 maxima; P99.5 interpolates between the two largest, so the authors'
    rule finds exactly the largest expert even for noise -- the effect size is what can fail."""
    gen = torch.Generator().manual_seed(1)
    noise = 1.0 + torch.rand(30, 8, generator=gen)  # (L, E): every expert alike, as on random weights
    found = super_experts(noise)
    assert len(found) == 1 and found[0][2] == noise[:22].max()
    assert effect_size(noise, found) < 2.0  # at most 2 / 1 by construction
    claim = super_experts_claim(noise)
    assert claim.holds is False and claim.measured["authors' rule finds"] == 1 and claim.at_init is False


def test_few_super_experts_holds_only_with_an_extreme_output():
    """Su et al., Sec. 3: "rare but extreme activation outliers in the output of the down_proj" -- one expert of
    layer 2 at 1,000 among experts at 1-2: the authors' rule finds it and it is >= 10 x the others' median."""
    gen = torch.Generator().manual_seed(2)
    table = 1.0 + torch.rand(30, 8, generator=gen)
    table[2, 5] = 1000.0
    claim = super_experts_claim(table)
    assert claim.measured["super_experts"] == [[2, 5]] and claim.measured["effect size"] > 400
    assert claim.holds is True and "Super-Experts-Profilling" in claim.follows and claim.adapted
    table[2, 5] = 12.0  # still the largest, still found by the rank rule, but only ~8 x the median: not extreme
    assert super_experts(table)[0][:2] == (2, 5) and super_experts_claim(table).holds is False
    many = 1.0 + torch.rand(30, 8, generator=gen)
    many[:10, 0] = 1000.0  # ten equally extreme experts: the rank rule takes P99.5 above most of them
    assert super_experts(many) == [] and super_experts_claim(many).holds is False  # P99.5 = 1,000 itself


def test_effect_size_ignores_experts_never_routed_and_the_late_layers():
    table = torch.ones(4, 4)
    table[0, 0], table[0, 1] = 50.0, 0.0  # expert (0, 1) never routed: not part of the median
    table[3, 2] = 1e6  # a late layer (beyond the first 75%): outside the kept layers
    assert effect_size(table, [(0, 0, 50.0)]) == 50.0
    assert effect_size(table, []) == 0.0


def test_routing_rows_are_the_models_layers_with_a_dense_first_layer():
    """A Qwen2-MoE whose first layer is dense (mlp_only_layers=[0], as DeepSeek-V2-Lite's): output_max row 0 is NaN,
    row 1 is the MoE layer, and shared_max holds the shared expert's largest |output|, measured directly."""
    import dataclasses

    from transformers import Qwen2MoeConfig, Qwen2MoeForCausalLM

    from sinklib.architectures.moe.moe_sinks import routing
    from sinklib.core.adapters import adapter_for
    from sinklib.models import tiny_random

    lm, inputs = tiny_random.loaded("qwen2_moe")
    torch.manual_seed(0)
    config = Qwen2MoeConfig(**{**lm.model.config.to_dict(), "mlp_only_layers": [0]})
    model = Qwen2MoeForCausalLM(config).eval()
    lm = dataclasses.replace(lm, model=model)
    route = routing(lm, inputs["input_ids"], batch_size=1)
    assert route.output_max.shape == (2, config.num_experts)
    assert torch.isnan(route.output_max[0]).all() and torch.isfinite(route.output_max[1]).all()
    seen = {}
    part = adapter_for(model).layers[1]
    h = part.shared_expert.register_forward_hook(lambda m, a, out: seen.__setitem__("y", out))
    with torch.no_grad():
        model(inputs["input_ids"])
    h.remove()
    assert torch.isnan(route.shared_max[0]) and route.shared_max[1].item() == pytest.approx(
        float(seen["y"].abs().max()), rel=1e-6)


def test_first_routed_max_is_the_authors_hook_on_two_d_expert_calls():
    """Their hook keeps output[0].abs().max() per expert call; a routed expert called on (n_routed, d) rows in
    position order gives output[0] = the earliest routed token. Transcribed per sequence, then max over calls."""
    from sinklib.architectures.moe.super_experts import first_routed_max

    gen = torch.Generator().manual_seed(3)
    B, T, k, E, d = 3, 7, 2, 5, 4
    choice = torch.stack([torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]) for _ in range(B)])
    y = torch.randn(B, T, k, d, generator=gen)
    want = torch.zeros(E)
    for b in range(B):  # one expert call per sequence: its rows are the tokens routed to it, in position order
        for e in range(E):
            rows = [y[b, t, j] for t in range(T) for j in range(k) if choice[b, t, j] == e]
            if rows:
                output = torch.stack(rows)  # (n_routed, d), what the hook sees
                want[e] = max(want[e], output[0].abs().max())
    got = first_routed_max(choice, y.abs().amax(-1), E)
    torch.testing.assert_close(got, want)
    assert (got <= expert_output_max(choice, y, E)).all()  # ours reads every routed token
