"""The MoE stand-in: neuron groups partition the FFN, the router is a transcribed ridge regression, and with every
expert selected at equal weight the upcycled Mixtral equals the dense model."""

import pytest
import torch

from sinklib.models import upcycle


def test_neuron_groups_partition_and_group_coactive_neurons():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(200, 1, generator=gen), torch.randn(200, 1, generator=gen)
    acts = torch.cat([a.expand(-1, 4), b.expand(-1, 4)], dim=1) + 0.01 * torch.randn(200, 8, generator=gen)
    acts = acts[:, torch.tensor([0, 4, 1, 5, 2, 6, 3, 7])]  # interleave the two families of neurons
    groups = upcycle.neuron_groups(acts, 2)
    assert groups.shape == (2, 4) and sorted(groups.flatten().tolist()) == list(range(8))
    assert {frozenset(g.tolist()) for g in groups} == {frozenset({0, 2, 4, 6}), frozenset({1, 3, 5, 7})}
    with pytest.raises(ValueError, match="equal experts"):
        upcycle.neuron_groups(acts, 3)


def test_fit_router_is_ridge_regression_on_standardised_log_norms():
    gen = torch.Generator().manual_seed(1)
    x, norms = torch.randn(50, 6, generator=gen), torch.rand(50, 4, generator=gen) + 0.1
    t = norms.log()
    t = (t - t.mean(1, keepdim=True)) / t.std(1, keepdim=True)
    direct = torch.linalg.solve(x.T @ x + 0.5 * 50 * torch.eye(6), x.T @ t).T  # (E, d)
    torch.testing.assert_close(upcycle.fit_router(x, norms, ridge=0.5), direct, atol=1e-5, rtol=1e-5)


@torch.no_grad()
def test_all_experts_at_equal_weight_equal_the_dense_model(tiny):
    ids = torch.randint(3, 250, (2, 24), generator=torch.Generator().manual_seed(2))
    moe = upcycle.upcycle(tiny.model, ids, n_experts=4, top_k=4, zero_router=True)
    assert type(moe).__name__ == "MixtralForCausalLM" and moe.config.intermediate_size == 32
    torch.testing.assert_close(moe(ids).logits, tiny.model(ids).logits, atol=1e-4, rtol=1e-4)
    fitted = upcycle.upcycle(tiny.model, ids, n_experts=4, top_k=2)  # half the experts: close, not equal
    assert not torch.allclose(fitted(ids).logits, tiny.model(ids).logits, atol=1e-3)


def test_stand_in_seeds_have_their_own_cache_folders_and_the_recipe_seed_is_the_registry_one():
    from sinklib.models import upcycle

    v = upcycle.STANDIN_VERSION
    assert upcycle.standin_name(upcycle.STANDIN_RECIPE["seed"]) == f"smollm2-moe-v{v}"
    assert upcycle.standin_name(1) == f"smollm2-moe-v{v}-s1" != upcycle.standin_name(2)
    assert upcycle.standin_name(0, upcycle.SMOKE_STANDIN) == f"smollm2-moe-smoke-v{v}"
    assert upcycle.standin_name(2, upcycle.SMOKE_STANDIN) == f"smollm2-moe-smoke-v{v}-s2"
    like = object()
    assert upcycle.load_standin(upcycle.STANDIN_RECIPE["seed"], like, dense=None) is like  # nothing rebuilt


def test_the_smoke_stand_in_is_the_recipe_on_less_text_labelled_as_such():
    """The smoke-size stand-in differs from the registry one in its calibration text only, and says so."""
    from sinklib.models import upcycle
    from sinklib.models.registry import REGISTRY

    full, smoke = upcycle.RECIPES[upcycle.STANDIN], upcycle.RECIPES[upcycle.SMOKE_STANDIN]
    assert {k for k in full if full[k] != smoke[k]} == {"calib_windows", "calib_len"}
    assert smoke["calib_windows"] * smoke["calib_len"] < full["calib_windows"] * full["calib_len"]
    for name in upcycle.RECIPES:
        assert REGISTRY[name].source == "upcycled" and "stand-in" in upcycle.LABELS[name] == REGISTRY[name].label
