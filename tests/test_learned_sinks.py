"""Learned sink logits across attention kernels (issue 57, item 1): the transcription of gpt-oss's formula on a
hand-worked case, and the check on a tiny random gpt-oss telling a kernel that keeps the sinks from one that drops
them (transformers' sdpa ignores ``s_aux``; a kernel made to drop them is caught)."""

from __future__ import annotations

import math

import pytest
import torch

from sinklib.mitigation import learned_sinks as ls


def test_sink_softmax_transcribes_gpt_oss_on_a_hand_worked_case():
    # one head, one query, keys with logits 0 and ln 2, sink logit 0: exp -> 1, 2 and the sink's 1 -> p = 1/4, 2/4
    p = ls.sink_softmax(torch.tensor([[[[0.0, math.log(2.0)]]]]), torch.tensor([0.0]))
    assert p.flatten().tolist() == pytest.approx([0.25, 0.5]) and float(1 - p.sum()) == pytest.approx(0.25)
    # a masked key takes nothing; a sink logit of ln 3 takes 3 / (3 + 1 + 2) = 1/2
    p = ls.sink_softmax(torch.tensor([[[[0.0, math.log(2.0), -math.inf]]]]), torch.tensor([math.log(3.0)]))
    assert p.flatten().tolist() == pytest.approx([1 / 6, 2 / 6, 0.0])
    # no sinks: a plain softmax; large logits do not overflow
    assert ls.sink_softmax(torch.tensor([[[[1000.0, 1000.0]]]]), None).flatten().tolist() == [0.5, 0.5]
    assert ls.sink_softmax(torch.tensor([[[[1000.0, 1000.0]]]]), torch.tensor([1000.0])).flatten().tolist() == \
        pytest.approx([1 / 3, 1 / 3])


def test_the_transcription_equals_the_gpt_oss_reference_form():
    """gpt-oss's reference: the sinks concatenated as a last logit column, softmax, the column dropped."""
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 5, 5, generator=gen, dtype=torch.float64).masked_fill(
        torch.ones(5, 5, dtype=torch.bool).triu(1), -math.inf)
    sinks = torch.randn(3, generator=gen, dtype=torch.float64)
    column = sinks.view(1, 3, 1, 1).expand(2, 3, 5, 1)
    reference = torch.softmax(torch.cat([logits, column], dim=-1), dim=-1)[..., :-1]
    torch.testing.assert_close(ls.sink_softmax(logits, sinks), reference)


@pytest.fixture(scope="module")
def gpt_oss():
    from sinklib.models.tiny_random_hub import gpt_oss as build

    model, _ = build()
    return model.eval()


def test_the_check_tells_a_kernel_that_keeps_the_sinks_from_one_that_drops_them(gpt_oss):
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    check = ls.check_model(gpt_oss, ids, "tiny gpt-oss",
                           extra={"made to drop them": lambda *a, **k: ls.transcribed_attention(*a, keep_sinks=False,
                                                                                                **k)})
    rows = {k.kernel: k for k in check.kernels}
    assert check.decidable and check.drop_effect > 100 * check.tolerance
    assert rows["eager (transformers)"].keeps is True and rows["eager (transformers)"].logp_max < 1e-5
    stats = rows["sinklib statistics (fused output)"]
    assert stats.keeps is True and stats.sink_mass_error < 1e-5 and stats.alpha_error < 1e-5
    made = rows["made to drop them"]
    assert made.keeps is False and made.logp_max == pytest.approx(check.drop_effect)
    assert made.sink_mass == pytest.approx([0.0] * len(made.sink_mass), abs=1e-6)  # every row sums to 1
    sdpa = rows["sdpa (transformers)"]  # transformers' sdpa never reads s_aux: the live bug class
    assert sdpa.keeps is False and sdpa.logp_max > 10 * check.tolerance
    assert not rows["flex_attention (transformers)"].ran and "CPU" in rows["flex_attention (transformers)"].why
    assert not rows["flash / cuDNN (torch sdpa backends)"].ran
    assert all("\n" not in line for line in check.lines()) and len(check.lines()) == len(check.kernels) + 1
    assert min(check.reference_sink_mass) > 0.05  # the tiny model's sinks take a visible share


def test_a_model_without_learned_sinks_is_one_line():
    from transformers import LlamaConfig, LlamaForCausalLM

    from sinklib.models.tiny_random import byte_lm

    model, _ = byte_lm(LlamaConfig, LlamaForCausalLM, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=1)
    assert not ls.has_learned_sinks(model)
    with pytest.raises(ValueError, match="no learned sink logits") as err:
        ls.check_model(model, torch.zeros(1, 4, dtype=torch.long), "tiny llama")
    assert "\n" not in str(err.value)


def test_tiny_lm_paths_keep_the_sink_and_the_control_drops_it():
    from sinklib.mitigation.variant_lm import TinyConfig, TinyLM

    torch.manual_seed(0)
    model = TinyLM(TinyConfig(d_model=32, n_layers=2, n_heads=2, d_ff=48, max_len=32, attention="sink_logit")).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.sink.normal_(1.0, 1.0)
            block.qkv.weight.normal_(0.0, 0.3)  # logits of order 1: a sink that matters
    check = ls.check_tiny_lm(model, torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1)))
    rows = {k.kernel: k for k in check.kernels}
    assert check.decidable, check.lines()
    assert rows["TinyLM weights path (CPU)"].keeps is True and rows["TinyLM weights path (CPU)"].sink_mass_error < 1e-5
    assert rows["TinyLM fused path (SDPA + extra key)"].keeps is True
    assert ls.project_kernels_keep([check]) == (True, [])
    dropped = ls.SinkCheck("m", "float32", 1e-4, 1.0, [0.3], [ls.KernelResult("TinyLM weights path (CPU)", True,
                                                                             logp_max=0.2, logp_mean=0.1, keeps=False)])
    assert ls.project_kernels_keep([check, dropped]) == (False, ["TinyLM weights path (CPU) on m"])
    undecided = ls.SinkCheck("m", "float32", 1e-4, 1e-4, [0.0], [])
    assert ls.project_kernels_keep([check, undecided]) == (None, [])


def test_check_sinks_cli_one_line_per_kernel(tmp_path):
    """``python -m sinklib check-sinks MODEL`` on a hub id: a header and one line per kernel; a model without learned
    sinks is one line; a window longer than the sliding window is one error line."""
    import os
    import subprocess
    import sys

    from sinklib.models import tiny_random_hub

    tiny_random_hub.write_hub_cache(tmp_path)
    env = {**os.environ, "HF_HUB_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1"}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "sinklib", "check-sinks", *args], capture_output=True,
                              text=True, env=env, timeout=300)

    run = cli("sinklib-tiny/gpt-oss", "--seq-len", "16")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 1 + 6 and lines[0].startswith("gpt-oss (sinklib-tiny/gpt-oss) (float32): learned sinks take")
    assert any(line.startswith("eager (transformers): keeps the sinks") for line in lines)
    assert any(line.startswith("sdpa (transformers): DROPS the sinks") for line in lines)
    none = cli("sinklib-tiny/llama")
    assert none.returncode == 0 and len(none.stdout.strip().splitlines()) == 1
    assert "has no learned sink logits" in none.stdout
    long = cli("sinklib-tiny/gpt-oss", "--seq-len", "64")
    assert long.returncode == 2 and long.stderr.strip().splitlines()[-1].startswith("error: --seq-len 64 is longer")
