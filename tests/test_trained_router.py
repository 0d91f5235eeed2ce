"""The tiny decoder's mixture-of-experts FFN (a router trained with the model) and 11_moe's trained-router report."""

from dataclasses import replace

import torch
import torch.nn.functional as F

from sinklib.architectures.moe import trained_router
from sinklib.mitigation import training
from sinklib.mitigation.protocol import TRAIN_CPU, TRAIN_SMOKE
from sinklib.mitigation.variant_lm import MoE, TinyConfig, TinyLM


def test_moe_equals_sparse_dispatch():
    """Every expert computed densely, each token keeping its top-k by router logit with softmax weights over those k,
    equals Mixtral's loop: for each token, sum_j w_j * expert_{e_j}(x)."""
    torch.manual_seed(0)
    moe = MoE(d=8, d_ff=6, n_experts=4, top_k=2)
    x = torch.randn(2, 5, 8)
    y = moe(x)
    logits = moe.router(x)
    want = torch.zeros_like(x)
    for b in range(2):
        for t in range(5):
            top, idx = logits[b, t].topk(2)
            w = top.softmax(-1)
            for j, e in enumerate(idx.tolist()):
                gate, up = (x[b, t] @ moe.experts_gate_up[e]).chunk(2)
                want[b, t] += w[j] * ((F.silu(gate) * up) @ moe.experts_down[e])
    torch.testing.assert_close(y, want, atol=1e-6, rtol=1e-5)
    assert moe.choice.shape == (2, 5, 2) and moe.balance_loss.item() > 0  # E sum_e f_e P_e (1 when uniform)


def test_dense_runs_keep_their_cache_keys():
    """The MoE fields must not change the key of 03's dense runs (their cached weights would be orphaned)."""
    assert replace(TRAIN_CPU, precision="float32").key() == "softmax-s0-2e79b71f20fe"  # float32: as before the field
    assert TRAIN_CPU.key() == "softmax-s0-1c98512c4a6d"  # the CPU profile's bfloat16 autocast (issue 27)
    moe = trained_router.moe_config(TRAIN_CPU, seed=0)
    assert moe.key() != TRAIN_CPU.key() and moe.model.d_ff == TRAIN_CPU.model.d_ff // 2


def test_router_trains_and_is_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    cfg = trained_router.moe_config(replace(TRAIN_SMOKE, steps=6, eval_every=3), seed=1)
    model = TinyLM(cfg.model)
    assert model.balance_loss().item() == 0.0  # no forward yet: the stored loss is zero
    r = trained_router.measure(cfg, n_seqs=8)
    L = cfg.model.n_layers
    assert len(r.alpha_by_layer) == len(r.same_set_first) == len(r.same_set_middle) == L
    assert all(0 < s <= 1 for s in r.same_set_first + r.same_set_middle) and r.max_abs_first > 0
    assert (tmp_path / "training" / f"{cfg.key()}.pt").exists()
    # a dense model has no balance loss
    assert TinyLM(TinyConfig(d_model=16, n_layers=1, n_heads=2, d_ff=8, max_len=8)).balance_loss().item() == 0.0
    assert training.TrainConfig(model=TinyConfig(n_experts=0)).key() == training.TrainConfig().key()


def test_same_set_share_ignores_order():
    choice = torch.tensor([[1, 2], [2, 1], [0, 3], [1, 2]])
    assert trained_router.same_set_share(choice) == 0.75


def test_a_sink_and_a_fixed_route_are_read_against_their_cuts():
    """11_moe's count of seeds with a sink (sink rate > 30%) and with a fixed first-token route (the most common set
    in > 90% of sequences in every layer, a middle token's in < 50%)."""
    def router(sink_rate, first, middle):
        return trained_router.TrainedRouter(seed=0, val_loss=3.0, alpha_by_layer=[0.5], sink_rate=sink_rate,
                                            same_set_first=first, same_set_middle=middle, max_abs_first=2.0,
                                            max_abs_rest=1.0)

    assert router(0.31, [1.0], [0.3]).formed_sink and not router(0.3, [1.0], [0.3]).formed_sink
    assert router(0.0, [0.95, 1.0], [0.2, 0.4]).fixed_route
    assert not router(0.0, [0.95, 0.9], [0.2, 0.4]).fixed_route  # one layer at the cut, not above it
    assert not router(0.0, [1.0, 1.0], [0.2, 0.5]).fixed_route  # the middle token takes a fixed route too
