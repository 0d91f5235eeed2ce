"""The dry run of make figures: a plan for every notebook, memory estimates worked by hand, refusals with reasons."""

from __future__ import annotations

import pytest

from sinklib.architectures.llm.protocol import GU_FAMILIES
from sinklib.architectures.llm.protocol import SIZES as LLM_SIZES
from sinklib.architectures.mllm.protocol import MLLM_MODELS
from sinklib.architectures.moe.protocol import MOE_MODELS
from sinklib.architectures.vit.protocol import VIT_MODELS
from sinklib.core.errors import InputError
from sinklib.core.memory import activation_bytes
from sinklib.pipeline import plan, plan_estimates, plan_shapes, profiles, protocols, runner
from sinklib.pipeline.cli import main


def test_every_notebook_has_a_plan_and_the_gpu_profile_fits_80_gb():
    plans = plan.plan_run("gpu", gpu_gb=80)
    assert [p.notebook for p in plans] == [b.stem for b in runner.discover()]
    for p in plans:  # a notebook added without its steps here is caught (90 reads results only)
        assert p.estimates or p.notebook == "90_scorecard", p.notebook
        assert p.fits, (p.notebook, p.problems)
    downloads = {m for p in plans for m in p.downloads}
    # 11_moe and 12_mllm run their list's first model (MODEL= another)
    listed = {profiles.PROFILES["gpu"].model, *GU_FAMILIES, *LLM_SIZES["gpu"].rung, MOE_MODELS[0], *VIT_MODELS,
              MLLM_MODELS[0]}  # 10_llm's scale rung adds Qwen2.5 0.5B and 1.5B beside its families' 7B
    assert downloads == listed  # every hub id the gpu profile would download, each with its size
    assert all(p.dtype == "float32" for p in plans if p.notebook in ("00_tour", "10_llm", "03_mitigation"))
    assert next(p for p in plans if p.notebook == "01_utilization").dtype == "bfloat16"


def test_a_small_gpu_refuses_with_the_step_and_the_numbers():
    (big,) = plan.plan_run("gpu", model="deepseek-ai/DeepSeek-V2-Lite", gpu_gb=24, notebooks=["11"])
    assert any("DeepSeek-V2-Lite" in msg and "even at batch 1" in msg and "24 GB" in msg for msg in big.problems)
    (olmoe,) = plan.plan_run("gpu", gpu_gb=24, notebooks=["11"])
    assert olmoe.fits and all(e.fits_batch == e.step.batch for e in olmoe.estimates)  # the 7B MoE fits in 24 GB


def test_estimate_is_weights_plus_activations_plus_kv_cache_by_hand(tmp_path):
    shape = plan_shapes.Shape(params_b=1.0, layers=2, heads=4, kv_heads=2, hidden=64, d_ff=256, vocab=100,
                              max_positions=512)
    run = profiles.resolve("gpu", None, None, 0, tmp_path, notebook="01_utilization")
    step = plan.Step("decode", "x", batch=3, tokens=10, logits=True, kv_tokens=1000)
    need, note = plan_estimates.estimate(step, shape, "bfloat16", run, batch=3)
    weights = 1e9 * 2
    acts = 4 * 3 * 10 * (4 * 64 + 3 * 256) + 3 * 64 * 2**20 + 4 * 3 * 10 * 100  # activation_bytes, transcribed
    kv = 2 * 2 * 2 * (64 // 4) * 1000 * 3 * 2  # K and V, layers, KV heads, head dim, tokens, batch, bytes
    assert acts == activation_bytes(hidden=64, d_ff=256, heads=4, layers=2, vocab=100, batch=3, seq_len=10,
                                    logits=True)
    assert need == weights + acts + kv and "beyond the model's 512" in note


def test_vit_and_mllm_tokens_come_from_the_model():
    vit = plan_shapes.Shape(params_b=0.3, layers=24, heads=16, kv_heads=16, hidden=1024, d_ff=4096, patch=14,
                            registers=4)
    assert plan_shapes.step_tokens(plan.Step("p", "v", 1, -224), vit)[0] == 16 * 16 + 1 + 4
    mllm = plan_shapes.Shape(params_b=7, layers=32, heads=32, kv_heads=32, hidden=4096, d_ff=11008, image_tokens=576)
    assert plan_shapes.step_tokens(plan.Step("c", "m", 1, -1), mllm)[0] == 576 + plan_shapes.TEXT_TOKENS
    llm = plan_shapes.Shape(params_b=7, layers=32, heads=32, kv_heads=32, hidden=4096, d_ff=11008, max_positions=4096)
    assert plan_shapes.step_tokens(plan.Step("l", "m", 1, 32768), llm) == \
        (4096, "32768 clipped to the model's 4096 positions")


def test_unknown_model_offline_is_a_one_line_error():
    with pytest.raises(InputError, match="add its shape to data/hub_models.json"):
        plan_shapes.shape_of("someone/unknown-model", offline=True)
    (p,) = plan.plan_run("cpu", model="someone/unknown-model", notebooks=["00"])
    assert not p.fits and "someone/unknown-model" in p.problems[0]


def test_cli_dry_run_prints_every_notebook_and_exits_1_when_refused(capsys):
    assert main(["figures", "--profile", "gpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert all(b.stem in out for b in runner.discover()) and "every step fits" in out
    assert "meta-llama/Llama-2-7b-hf: download ~13.5 GB" in out
    assert main(["figures", "--profile", "gpu", "--dry-run", "--gpu-gb", "16", "--notebooks", "01"]) == 1
    assert "REFUSED" in capsys.readouterr().out


def test_model_goes_only_to_the_notebooks_of_its_family(capsys):
    """Issue item 2: MODEL=meta-llama/Llama-2-7b-hf (the README's headline) is for the LLM notebooks; the MoE, MLLM
    and ViT notebooks keep their lists (they loaded the 7B LLM, then stopped at their family check) and the plan
    says so."""
    books = [b.stem for b in runner.discover()]
    chosen, line = protocols.route("meta-llama/Llama-2-7b-hf", books, explicit=False)
    assert {nb for nb, m in chosen.items() if m} == {"00_tour", "01_utilization", "02_interpretation", "10_llm"}
    assert line.endswith("; 11_moe, 12_mllm, 13_vit run their profile's own models")
    assert protocols.model_family("facebook/dinov2-giant") == "vit" and protocols.model_family("dinov2-s") == "vit"
    plans = {p.notebook: p for p in plan.plan_run("gpu", model="meta-llama/Llama-2-7b-hf", gpu_gb=80)}
    assert "meta-llama/Llama-2-7b-hf" not in plans["13_vit"].downloads and plans["13_vit"].downloads
    assert "meta-llama/Llama-2-7b-hf" in plans["10_llm"].downloads
    with pytest.raises(InputError, match="none of the chosen notebooks"):
        protocols.route("meta-llama/Llama-2-7b-hf", ["13_vit"], explicit=True)
    assert main(["figures", "--profile", "gpu", "--dry-run", "--model", "meta-llama/Llama-2-7b-hf"]) == 0
    assert "MODEL=meta-llama/Llama-2-7b-hf (llm) runs in 00_tour, 01_utilization" in capsys.readouterr().out
