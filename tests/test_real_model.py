"""The offline SmolLM2 shows the published shapes under Gu et al.'s protocol (eager float32, T = 64, eps = 0.3)."""

import json

import pytest
import torch

from sinklib.core.analysis import profile_sinks
from sinklib.core.data import make_inputs
from sinklib.pipeline.cli import main

pytestmark = pytest.mark.real_model
NUM_SEQS = 24  # fewer than Gu's 100 to keep `make test` short; the notebook's cpu profile uses 100


@pytest.fixture(scope="module")
def natural(smollm2):
    return profile_sinks(smollm2, make_inputs(smollm2, "natural", NUM_SEQS, 64, seed=0), input_name="natural",
                         progress=False)


def test_smollm2_is_the_offline_llama(smollm2):
    assert (smollm2.n_layers, smollm2.n_heads, smollm2.n_kv_heads, smollm2.hidden_size) == (30, 9, 3, 576)
    assert not smollm2.adds_bos  # position 0 is the first word of the text


def test_first_token_sink_on_natural_text(natural):
    assert natural.sink_rate > 0.5  # most heads
    alpha = natural.alpha_first_by_layer
    assert max(alpha[:2]) < 0.3 < min(alpha[3:9])  # absent in the first layers, present from layer 3 on


def test_no_sink_with_one_token_repeated(smollm2):
    rep = profile_sinks(smollm2, make_inputs(smollm2, "repeated", NUM_SEQS, 64, seed=0), input_name="repeated",
                        progress=False)
    assert rep.sink_rate < 0.02
    # every position then carries the same hidden state, so the first token is not special
    assert max(abs(f - r) for f, r in zip(rep.dom_ratio_first_by_layer, rep.dom_ratio_rest_by_layer)) < 0.25


def test_massive_activation_on_dimension_507_of_the_first_token(natural):
    mid = natural.extremes[12:28]
    assert all(e.dim == 507 and e.position == 0 and abs(e.value) > 1000 for e in mid)
    assert all(abs(e.value) > 100 for e in natural.extremes[2:9])
    first, rest = natural.dom_ratio_first_by_layer, natural.dom_ratio_rest_by_layer
    assert min(f / r for f, r in zip(first[12:28], rest[12:28])) > 4


def test_profile_cli_json_contract(capsys):
    assert main(["profile", "--model", "smollm2-135m", "--input", "random", "--num-seqs", "4", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"model", "input", "sink_rate", "alpha_first_by_layer", "dom_ratio_first_by_layer", "massive"} <= set(out)
    assert out["model"] == "smollm2-135m" and out["input"] == "random" and out["seq_len"] == 64
    assert len(out["alpha_first_by_layer"]) == len(out["massive"]) == 30
    assert {"dim", "value", "median"} <= set(out["massive"][0])
    assert 0.0 <= out["sink_rate"] <= 1.0


@torch.no_grad()
def test_the_moe_stand_in_is_a_labelled_mixtral_with_a_working_router():
    """Built once from the offline SmolLM2, then cached: a real MixtralForCausalLM, labelled a stand-in. The smoke-size
    build (~10 s; the registry's full one runs the same code on 16x the calibration text, ~1 min)."""
    from sinklib.core.adapters import adapter_for
    from sinklib.core.capture import Capture
    from sinklib.models.load import load_model

    lm = load_model("smollm2-moe-smoke", device="cpu")
    assert lm.family == "moe" and "stand-in" in lm.label and "stand-in" in lm.model.config.sinklib_standin["label"]
    assert type(lm.model).__name__ == "MixtralForCausalLM" and len(adapter_for(lm.model).layers) == 30
    ids = lm.tokenizer("In the beginning God created the heavens and the earth.", return_tensors="pt").input_ids
    with Capture(lm.model, kinds=["expert_choice", "expert_weights"], layers=[3]) as cap:
        lm.model(ids)
    choice, weights = cap.get("expert_choice", 3), cap.get("expert_weights", 3)  # (1, T, 6)
    assert choice.shape[-1] == 6 and torch.allclose(weights.sum(-1), torch.ones(()))
    assert (weights - 1 / 6).abs().max() < 0.1  # router scale 0.05: the router picks, the weights stay near 1/k
