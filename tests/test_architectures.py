"""Every architecture family on tiny random models of the real classes: capture and O(N) statistics equal a direct
computation (transformers' own eager attentions, the router's own weights, the experts' own forward), interventions
act where they should, and nothing is left behind."""

import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.moe import ExpertsInterface

from sinklib.core.adapters import adapter_for
from sinklib.core.attnstats import AttentionStats
from sinklib.core.capture import Capture, hooks_left
from sinklib.core.errors import InputError
from sinklib.interpretation.interventions import ResidualOverride, SelfOnlyAttention
from sinklib.models import tiny_random
from sinklib.utilization.calibration import AttentionCalibration, act_bias, act_redistribute

HF = ["llama", "gemma3", "gpt_oss", "mixtral", "olmoe", "qwen2_moe", "dinov2", "dinov2_registers", "vit",
      "clip_vision", "llava", "qwen2_vl"]
MOE = ["mixtral", "olmoe", "qwen2_moe", "gpt_oss"]
EXPECTED = {  # family, causal, blocks, prefix tokens
    "llama": ("llm", True, 2, 0), "gemma3": ("llm", True, 2, 0), "gpt_oss": ("moe", True, 2, 0),
    "mixtral": ("moe", True, 2, 0), "olmoe": ("moe", True, 2, 0), "qwen2_moe": ("moe", True, 2, 0),
    "dinov2": ("vit", False, 2, 1), "dinov2_registers": ("vit", False, 2, 5), "vit": ("vit", False, 2, 1),
    "clip_vision": ("vit", False, 2, 1), "timm_vit": ("vit", False, 2, 3),
    "llava": ("mllm", True, 2, 0), "qwen2_vl": ("mllm", True, 2, 0),
}


def _state(model):
    """Everything a capture could leave behind: hooks, registry names, implementations."""
    configs = [m.config for m in model.modules() if hasattr(m, "config") and hasattr(m.config, "_attn_implementation")]
    return (hooks_left(model), sorted(AttentionInterface._global_mapping), sorted(ExpertsInterface._global_mapping),
            [c._attn_implementation for c in configs], [getattr(m, "fused_attn", None) for m in model.modules()])


def _reference_attentions(model, inputs):
    """transformers' own eager attention probabilities (the LM's for an MLLM), one per block."""
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            return list(model(**inputs, output_attentions=True).attentions)
    finally:
        model.set_attn_implementation(previous)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_adapter_reads_the_layout_from_the_config(name):
    model, inputs = tiny_random.build(name)
    adapter = adapter_for(model)
    family, causal, blocks, prefix = EXPECTED[name]
    assert (adapter.family, adapter.causal, len(adapter.layers), adapter.n_prefix) == (family, causal, blocks, prefix)
    for layer in adapter.layers:
        assert adapter.index_of(layer.attn) == layer.index and layer.o_proj is not None and layer.mlp is not None
        assert (layer.experts is not None) == (name in MOE) and (layer.down_proj is None) == (name in MOE)
    if name == "llava":  # the LM's 2 blocks, not the deeper 3-block vision tower
        assert len(adapter.vision.layers) == 3 and not adapter.vision.causal
        assert adapter.layers[0].block is model.model.language_model.layers[0]
    if name == "qwen2_moe":
        assert all(layer.shared_expert is not None for layer in adapter.layers)


@pytest.mark.parametrize("name", ["llava", "qwen2_vl"])
def test_image_positions_are_the_image_tokens(name):
    model, inputs = tiny_random.build(name)
    where = adapter_for(model).image_positions(inputs["input_ids"])
    assert where.sum() == (32 if name == "llava" else 8)  # 2 sequences x 16 patches / 4 merged tokens
    assert (inputs["input_ids"][where] == model.config.image_token_id).all()
    vit, pixels = tiny_random.build("dinov2_registers")
    assert adapter_for(vit).image_positions(torch.zeros(2, 21)).sum(1).tolist() == [16, 16]  # 5 prefix + 16 patches


@pytest.mark.parametrize("name", HF)
def test_capture_and_stats_equal_transformers_eager_attentions(name):
    model, inputs = tiny_random.build(name)
    ref = _reference_attentions(model, inputs)
    before = _state(model)
    with torch.no_grad():
        plain = model(**inputs)
        with Capture(model, attentions=True, hidden_states=True) as cap:
            out = model(**inputs)
        with AttentionStats(model, entropy=True) as st:
            model(**inputs)
    assert _state(model) == before  # no hook, registry entry or implementation change left behind
    got = cap.stack("attentions")
    torch.testing.assert_close(got, torch.stack(ref), atol=1e-5, rtol=0)
    main = plain.logits if hasattr(plain, "logits") else plain.last_hidden_state
    torch.testing.assert_close(out.logits if hasattr(out, "logits") else out.last_hidden_state, main, atol=1e-5, rtol=0)
    causal = adapter_for(model).causal
    assert (got[..., 0, 1:].abs().max() == 0) == causal  # a missing mask is causal only where the model is
    assert st.layers == list(range(len(ref)))
    for layer, A in enumerate(ref):  # m_j = sum_t A[t, j] / #queries that see j
        T = A.shape[-1]
        visible = (T - torch.arange(T)).float() if causal else torch.full((T,), float(T))
        if name in ("gemma3", "gpt_oss") and layer == 0:  # sliding window of 4 keys
            visible = torch.tensor([min(4, T - j) for j in range(T)], dtype=torch.float)
        torch.testing.assert_close(st.key_mass(layer), A.sum(-2) / visible, atol=1e-5, rtol=0)
        entropy = torch.special.entr(A).sum(-1) + torch.special.entr((1 - A.sum(-1)).clamp_min(0))  # + gpt-oss's sink logit
        torch.testing.assert_close(st.entropy_by_query(layer), entropy, atol=1e-4, rtol=0)


def test_timm_vit_capture_and_stats_equal_a_direct_computation():
    model, inputs = tiny_random.build("timm_vit")
    before = _state(model)
    with torch.no_grad():
        plain = model(**inputs)
        with Capture(model, kinds=["attentions", "attn_inputs", "queries", "keys", "values", "hidden_states",
                                   "head_outputs"]) as cap:
            out = model(**inputs)
        with AttentionStats(model) as st:
            model(**inputs)
    assert _state(model) == before
    torch.testing.assert_close(out, plain, atol=1e-5, rtol=0)  # eager path == fused path
    for i, block in enumerate(model.blocks):
        x = cap.get("attn_inputs", i)  # (B, N, d): norm1 output
        qkv = block.attn.qkv(x).unflatten(-1, (3, 4, 8)).permute(2, 0, 3, 1, 4)  # (3, B, H, N, hd)
        A = torch.softmax(qkv[0] @ qkv[1].transpose(-1, -2) * 8 ** -0.5, dim=-1)
        torch.testing.assert_close(cap.get("attentions", i), A, atol=1e-5, rtol=0)
        torch.testing.assert_close(cap.get("values", i), qkv[2], atol=1e-6, rtol=0)
        torch.testing.assert_close(cap.get("queries", i), qkv[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(cap.get("head_outputs", i).flatten(-2), (A @ qkv[2]).transpose(1, 2).flatten(-2),
                                   atol=1e-5, rtol=0)
        torch.testing.assert_close(st.key_mass(i), A.sum(-2) / A.shape[-1], atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", MOE)
def test_router_and_expert_outputs_equal_the_moe_block(name):
    model, inputs = tiny_random.build(name)
    adapter = adapter_for(model)
    experts_out = {}
    handles = [p.experts.register_forward_hook(lambda m, a, out, i=p.index: experts_out.__setitem__(i, out))
               for p in adapter.layers]
    before_hooks = hooks_left(model)
    with torch.no_grad():
        plain = model(**inputs).logits
        with Capture(model, kinds=["mlp_inputs", "router_logits", "expert_choice", "expert_weights",
                                   "expert_outputs"]) as cap:
            logits = model(**inputs).logits
    assert hooks_left(model) == before_hooks and not any("sinklib" in k for k in ExpertsInterface._global_mapping)
    for h in handles:
        h.remove()
    torch.testing.assert_close(logits, plain, atol=1e-5, rtol=0)  # recording does not change the model
    B, T = inputs["input_ids"].shape
    for p in adapter.layers:
        i, router = p.index, p.router
        x = cap.get("mlp_inputs", i)  # (B, T, d)
        direct = x @ router.weight.T + (router.bias if getattr(router, "bias", None) is not None else 0)
        torch.testing.assert_close(cap.get("router_logits", i), direct, atol=1e-5, rtol=0)
        choice, weights, y = cap.get("expert_choice", i), cap.get("expert_weights", i), cap.get("expert_outputs", i)
        k = router.top_k
        assert choice.shape == (B, T, k) and y.shape == (B, T, k, x.shape[-1])
        assert (choice.sort(-1).values == direct.topk(k, dim=-1).indices.sort(-1).values).all()  # top-k of the logits
        weighted = (weights.unsqueeze(-1) * y).sum(2)  # sum_k w_k y_k == the experts module's own output
        torch.testing.assert_close(weighted.flatten(0, 1), experts_out[i].flatten(0, -2), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["dinov2", "timm_vit", "llava", "qwen2_moe"])
def test_self_only_attention_on_every_family(name):
    model, inputs = tiny_random.build(name)
    with torch.no_grad():
        model(**inputs)  # transformers installs its own output-recording hooks on the first forward
    before = _state(model)
    k = 5
    with torch.no_grad(), Capture(model, attentions=True) as cap, SelfOnlyAttention(model, k) as so:
        model(**inputs)
    assert _state(model) == before and so.calls == len(adapter_for(model).layers)
    A = cap.get("attentions", 1)
    onehot = torch.zeros(A.shape[-1])
    onehot[k] = 1.0
    torch.testing.assert_close(A[:, :, k], onehot.expand_as(A[:, :, k]), atol=1e-6, rtol=0)
    assert A[:, :, k + 1, k + 1].lt(0.99).all()  # other rows untouched


def test_act_on_probabilities_equals_act_as_a_logit_bias():
    """timm's path (edit the probabilities) and transformers' path (a per-row bias on the sink columns) agree."""
    logits = torch.randn(2, 3, 7, 7, generator=torch.Generator().manual_seed(0))
    A = torch.softmax(logits, -1)
    sink = torch.zeros(2, 3, 7, dtype=torch.bool)
    sink[:, :, 2] = True
    sink[0, 1, 4] = True
    via_bias = torch.softmax(logits + act_bias(A, sink, 0.4), -1)
    torch.testing.assert_close(act_redistribute(A, sink, 0.4), via_bias, atol=1e-6, rtol=0)
    model, inputs = tiny_random.build("timm_vit")
    with torch.no_grad(), Capture(model, attentions=True) as cap, \
            AttentionCalibration(model, {0: [0, 1, 2, 3]}, threshold=0.0) as act:
        model(**inputs)
    assert act.damped > 0 and torch.allclose(cap.get("attentions", 0).sum(-1), torch.ones(()))


@pytest.mark.parametrize("name", ["mixtral", "clip_vision", "timm_vit", "qwen2_vl"])
def test_residual_override_on_every_family(name):
    model, inputs = tiny_random.build(name)
    with torch.no_grad(), Capture(model, hidden_states=True) as cap, \
            ResidualOverride(model, layers=[0], dims=[3, 7], values=0.0, positions=[2]) as ro:
        model(**inputs)
    h = cap.get("hidden_states", 0)
    assert ro.calls == 1 and ro.edited == 2 * h.shape[0]
    assert h[:, 2, [3, 7]].abs().max() > 0  # Capture's hook ran first and saw the unedited state


def test_unsupported_models_get_one_line_errors():
    with pytest.raises(InputError, match="no transformers config"):
        adapter_for(torch.nn.Linear(2, 2))
    from transformers import T5Config, T5Model

    with pytest.raises(InputError, match="encoder-decoder"):
        adapter_for(T5Model(T5Config(d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8, vocab_size=32)))


@pytest.mark.parametrize("name", ["vit", "timm_vit", "olmoe", "llava"])
def test_head_output_amplification_on_every_family(name):
    from sinklib.interpretation.interventions import HeadOutputAmplification

    model, inputs = tiny_random.build(name)
    n = len(adapter_for(model).layers)
    with torch.no_grad():
        plain = model(**inputs)
        with HeadOutputAmplification(model, position=4, lam=1.0, layers=range(n), mode="scale") as same:
            unchanged = model(**inputs)
        with HeadOutputAmplification(model, position=4, lam=0.0, layers=range(n), mode="scale") as zero:
            changed = model(**inputs)

    def first(out):  # logits, last hidden state or timm features
        return out if torch.is_tensor(out) else out[0]

    assert same.calls == zero.calls == n
    torch.testing.assert_close(first(unchanged), first(plain), atol=1e-6, rtol=0)
    assert not torch.allclose(first(changed), first(plain), atol=1e-4)
