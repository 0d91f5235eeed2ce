"""The training harness: a smoke run per data source, checkpoint metrics, and the configuration cache."""

import math

import pytest
import torch

from sinklib import training
from sinklib.tinylm import TinyConfig, TinyLM

SMALL = TinyConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, max_len=32)


@pytest.mark.parametrize("data", ["bible", "bigram_backcopy"])
def test_smoke_run_learns_and_records(tmp_path, monkeypatch, data):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    cfg = training.TrainConfig(model=SMALL, steps=30, batch_size=8, seq_len=32, lr=3e-3, warmup=5, eval_every=10,
                               eval_seqs=8, data=data)
    run = training.train(cfg, progress=False)
    steps = [c["step"] for c in run["checkpoints"]]
    assert steps == [0, 10, 20, 30]
    first, last = run["checkpoints"][0], run["checkpoints"][-1]
    assert last["val_loss"] < first["val_loss"] < math.log(258) + 0.5
    for key in ("sink_rate", "first_attention", "max_activation", "kurtosis", "dom_ratio_first", "effective_rank"):
        assert math.isfinite(last[key])
    assert 0 <= last["sink_rate"] <= 1 and len(last["alpha_by_layer"]) == 2
    cached = training.train(cfg, progress=False)  # second call: read from the cache, no training
    assert cached["key"] == run["key"] and cached["checkpoints"] == run["checkpoints"]
    assert (tmp_path / "training" / f"{cfg.key()}.json").exists()


def test_cache_key_changes_with_any_setting():
    a = training.TrainConfig(model=SMALL)
    assert a.key() != training.TrainConfig(model=SMALL, seed=1).key()
    assert a.key() != training.TrainConfig(model=TinyConfig(attention="softpick")).key()
    assert a.key() == training.TrainConfig(model=SMALL).key()


def test_bigram_backcopy_copies_after_triggers():
    x = training.bigram_backcopy_batch(16, 40, torch.Generator().manual_seed(0))
    assert (x[:, 0] == training.BOS).all()
    for t in range(3, 40):
        trig = torch.isin(x[:, t - 1], torch.tensor(training.BBC_TRIGGERS))
        assert (x[trig, t] == x[trig, t - 2]).all()


def test_metrics_helpers():
    assert training.kurtosis(torch.randn(200000)) == pytest.approx(3.0, abs=0.1)
    assert training.effective_rank(torch.randn(500, 8)) == pytest.approx(8, rel=0.1)
    assert training.effective_rank(torch.randn(500, 1) * torch.randn(1, 8)) < 1.5
    logits = TinyLM(SMALL)(torch.zeros(2, 5, dtype=torch.long))
    assert logits.shape == (2, 5, 258)
