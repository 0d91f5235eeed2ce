"""The training harness: a smoke run per data source, checkpoint metrics, and the configuration cache."""

import math
from dataclasses import replace

import pytest
import torch

from sinklib.core.errors import InputError
from sinklib.mitigation import evaluation, training, training_data
from sinklib.mitigation.protocol import TRAIN_SMOKE
from sinklib.mitigation.variant_lm import TinyConfig, TinyLM

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
    x = training_data.bigram_backcopy_batch(16, 40, torch.Generator().manual_seed(0))
    assert (x[:, 0] == training_data.BOS).all()
    for t in range(3, 40):
        trig = torch.isin(x[:, t - 1], torch.tensor(training_data.BBC_TRIGGERS))
        assert (x[trig, t] == x[trig, t - 2]).all()


def test_metrics_helpers():
    assert evaluation.kurtosis(torch.randn(200000)) == pytest.approx(3.0, abs=0.1)
    assert evaluation.effective_rank(torch.randn(500, 8)) == pytest.approx(8, rel=0.1)
    assert evaluation.effective_rank(torch.randn(500, 1) * torch.randn(1, 8)) < 1.5
    logits = TinyLM(SMALL)(torch.zeros(2, 5, dtype=torch.long))
    assert logits.shape == (2, 5, 258)


def test_final_weights_are_cached_and_reload(tmp_path, monkeypatch):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    cfg = training.TrainConfig(model=SMALL, steps=12, batch_size=4, seq_len=32, warmup=2, eval_every=6, eval_seqs=4,
                               data="bigram_backcopy")
    with pytest.raises(InputError, match="no cached weights"):
        training.load_trained(cfg)
    run = training.train(cfg, progress=False)
    model = training.load_trained(cfg)
    val = training_data.make_batch(cfg, "heldout", cfg.eval_seqs, torch.Generator().manual_seed(1234))
    again = evaluation.evaluate(model, val)
    assert again["val_loss"] == pytest.approx(run["checkpoints"][-1]["val_loss"], abs=1e-5)
    assert torch.allclose(torch.tensor(again["alpha_by_head"]), torch.tensor(run["checkpoints"][-1]["alpha_by_head"]),
                          atol=1e-5)
    assert [c["seconds"] for c in run["checkpoints"]] == sorted(c["seconds"] for c in run["checkpoints"])


def test_text_file_data_and_bad_settings(tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_text("In the beginning was the byte. " * 1000)
    cfg = training.TrainConfig(model=SMALL, seq_len=32, data=f"file:{text}")
    batch = training_data.make_batch(cfg, "train", 3, torch.Generator().manual_seed(0))
    assert batch.shape == (3, 32) and (batch[:, 0] == training_data.BOS).all() and batch[:, 1:].max() < 256
    with pytest.raises(InputError, match="not found"):
        training_data.make_batch(training.TrainConfig(data=f"file:{tmp_path}/missing.txt"), "train", 2,
                            torch.Generator())
    with pytest.raises(InputError, match="unknown training data"):
        training_data.make_batch(training.TrainConfig(data="owt"), "train", 2, torch.Generator())
    with pytest.raises(InputError, match="exceeds the model's max_len"):
        training.check_config(training.TrainConfig(model=SMALL, seq_len=64))


@pytest.mark.parametrize("attention", ["sigmoid", "sink_logit", "kv_bias", "headwise_rmsnorm"])
def test_one_dimensional_parameters_are_not_decayed(attention):
    model = TinyLM(TinyConfig(d_model=32, n_layers=1, n_heads=2, d_ff=64, max_len=32, attention=attention))
    decay, keep = training.param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and keep["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decay["params"])
    names = {n for n, p in model.named_parameters() if any(p is q for q in keep["params"])}
    assert all(p.ndim < 2 for n, p in model.named_parameters() if n in names and "_bias" not in n), names
    assert len(decay["params"]) + len(keep["params"]) == len(list(model.parameters()))
    # the variant's own parameter is among the undecayed ones, so AdamW leaves it where the gradient puts it
    own = {"sigmoid": "bias", "sink_logit": "sink", "kv_bias": "v_bias", "headwise_rmsnorm": "gain"}[attention]
    assert any(own in n for n in names), (own, names)


def test_first_share_separates_small_rows_from_small_shares():
    A = torch.zeros(1, 1, 1, 3, 3)
    A[..., :, 0] = 0.1  # every row puts 0.1 on the first token and nothing elsewhere: row mass 0.1, share 1
    from sinklib.core import metrics

    share = metrics.alpha(metrics.row_normalised(A), 0)
    assert float(metrics.alpha(A, 0)) == pytest.approx(0.1) and float(share) == pytest.approx(1.0)


def test_bigram_backcopy_entropy_is_the_bayes_optimal_loss():
    """Transcribe the Bayes-optimal predictor token by token on a fresh sample: its cross-entropy is the floor."""
    T = 16
    x = training_data.bigram_backcopy_batch(2000, T, torch.Generator().manual_seed(7))
    P = training_data.bigram_matrix()
    nll = []
    for t in range(1, T):
        if t == 1:
            p = torch.full((len(x),), 1 / 61)  # x_1 uniform over the non-trigger tokens 3..63
        else:
            prev = x[:, t - 1]
            copy = torch.isin(prev, torch.tensor(training_data.BBC_TRIGGERS)) & (t >= 3)
            p = torch.where(copy, (x[:, t] == x[:, t - 2]).float(), P[prev.clamp_max(63), x[:, t]])
        nll.append(-p.log())
    direct = float(torch.stack(nll, 1).mean())
    floor = training_data.bigram_backcopy_entropy(T, n=8000, seed=3)
    assert floor == pytest.approx(direct, abs=0.03) and 0 < floor < math.log(64)


def test_most_triggers_picks_the_row_and_its_positions():
    t = training_data.BBC_TRIGGERS[0]
    ids = torch.tensor([[5, t, 6, 7], [t, 5, t, t], [5, 6, 7, 8]])
    assert training_data.most_triggers(ids, "bigram_backcopy") == (1, [0, 2, 3])
    assert training_data.most_triggers(ids, "bible") == (0, [])


def test_shared_batches_train_exactly_like_batches_drawn_step_by_step(monkeypatch):
    """The variants of one seed share their drawn batches (issue 27); a run then equals one that draws each step."""
    from dataclasses import replace

    from sinklib.mitigation.protocol import TRAIN_SMOKE

    cfg = replace(TRAIN_SMOKE, steps=12, eval_every=6)
    shared = training.train(cfg, use_cache=False, progress=False)
    monkeypatch.setattr(training, "SHARE_LIMIT", 0)  # every batch drawn in the loop
    drawn = training.train(cfg, use_cache=False, progress=False)
    assert [c["val_loss"] for c in shared["checkpoints"]] == [c["val_loss"] for c in drawn["checkpoints"]]
    assert [c["train_loss"] for c in shared["checkpoints"]] == [c["train_loss"] for c in drawn["checkpoints"]]


def test_trains_where_the_caller_turned_autograd_off(tmp_path, monkeypatch):
    """A notebook measures with autograd off (``notebook.start(grad=False)``); a run it trains (11_moe's router)
    must still learn: training turns autograd on for itself and leaves the caller's setting as it was."""
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    cfg = training.TrainConfig(model=SMALL, steps=6, batch_size=4, seq_len=32, warmup=2, eval_every=3, eval_seqs=4,
                               data="bigram_backcopy")
    with torch.no_grad():
        run = training.train(cfg, progress=False)
        assert not torch.is_grad_enabled()
    assert run["checkpoints"][-1]["step"] == 6


def test_training_loops_run_on_one_thread_whatever_the_notebook_has(monkeypatch, tmp_path):
    """Issue 42: a run must not depend on JOBS (two threads a notebook with JOBS=1); the caller's threads come back,
    also after an error, and a GPU run is left alone."""
    from sinklib.core import precision

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with precision.training_threads("cpu"):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError, match="boom"), precision.training_threads("cpu"):
            raise RuntimeError("boom")
        assert torch.get_num_threads() == 2
        with precision.training_threads("meta"):
            assert torch.get_num_threads() == 2
        seen = []
        monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
        monkeypatch.setattr(training, "_train", lambda *a, **k: seen.append(torch.get_num_threads()) or {})
        training.train(replace(TRAIN_SMOKE, steps=2), use_cache=False, progress=False)
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
