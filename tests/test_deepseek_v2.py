"""DeepSeek-V2 (the gpu profile's DeepSeek-V2-Lite, as the tiny hub's random ``sinklib-tiny/deepseek-v2``): a dense
first block before the MoE blocks, shared experts beside the routed ones, and multi-head latent attention whose
values (32 wide here) are narrower than its queries and keys (48 + 16 RoPE = 64), with a YaRN logit scale."""

import pytest
import torch

from sinklib.architectures.moe import moe_sinks
from sinklib.core.adapters import adapter_for
from sinklib.core.attnstats import AttentionStats
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel, ModelSpec
from sinklib.models import tiny_random_hub

MOE_KINDS = ["router_logits", "expert_choice", "expert_weights", "expert_outputs"]
B, T = 2, 12


@pytest.fixture(scope="module")
def deepseek():
    torch.manual_seed(0)
    model, tokenizer = tiny_random_hub.deepseek_v2()
    with torch.no_grad():  # as write_hub_cache: norms off 1, biases off 0
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(1))
    return model.eval(), tokenizer, ids


@pytest.fixture(scope="module")
def lm(deepseek):
    model, tokenizer, _ = deepseek
    cfg = model.config
    spec = ModelSpec("tiny-deepseek-v2", "moe", "config", "tiny random DeepSeek-V2", "tiny random model")
    return LoadedModel(name=spec.name, spec=spec, model=model, tokenizer=tokenizer, device=torch.device("cpu"),
                       dtype=torch.float32, n_layers=cfg.num_hidden_layers, n_heads=cfg.num_attention_heads,
                       n_kv_heads=cfg.num_key_value_heads, hidden_size=cfg.hidden_size, head_dim=cfg.v_head_dim,
                       vocab_size=cfg.vocab_size)


@pytest.fixture(scope="module")
def eager_attentions(deepseek):
    """(L, B, H, T, T): the model's own eager attention probabilities (``output_attentions``), computed apart."""
    model, _, ids = deepseek
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            out = model(ids, output_attentions=True)
    finally:
        model.set_attn_implementation("sdpa")
    return torch.stack(out.attentions)


def test_the_tiny_model_is_shaped_like_deepseek_v2_lite(deepseek):
    from sinklib.models.load import infer_family
    from sinklib.pipeline.protocols import model_family

    model, _, _ = deepseek
    cfg, attn = model.config, model.model.layers[0].self_attn
    assert cfg.first_k_dense_replace == 1 and cfg.n_shared_experts >= 1 and cfg.q_lora_rank is None
    assert cfg.v_head_dim != cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    assert attn.scaling != pytest.approx((cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) ** -0.5)  # YaRN's mscale
    layers = adapter_for(model).layers
    assert layers[0].experts is None and layers[0].router is None and layers[0].down_proj is not None
    assert all(p.experts is not None and p.router is not None and p.shared_expert is not None for p in layers[1:])
    assert adapter_for(model).family == infer_family(cfg) == model_family("sinklib-tiny/deepseek-v2") == "moe"
    assert "sinklib-tiny/deepseek-v2" in tiny_random_hub.MOES and tiny_random_hub.MOES[0] == "sinklib-tiny/olmoe"


def test_stack_over_moe_kinds_skips_the_dense_first_layer_and_says_which_layers(deepseek):
    model, _, ids = deepseek
    parts = adapter_for(model).layers
    block_out = {}
    handles = [p.mlp.register_forward_hook(lambda m, a, out, i=p.index: block_out.__setitem__(i, out))
               for p in parts[1:]]
    try:
        with torch.no_grad(), Capture(model, kinds=MOE_KINDS + ["mlp_inputs", "hidden_states"]) as cap:
            model(ids)
    finally:
        for h in handles:
            h.remove()
    stacked = {kind: cap.stack(kind) for kind in MOE_KINDS}  # was a KeyError: nothing at layer 0
    E, k, d = model.config.n_routed_experts, model.config.num_experts_per_tok, model.config.hidden_size
    shapes = {"router_logits": (2, B, T, E), "expert_choice": (2, B, T, k), "expert_weights": (2, B, T, k),
              "expert_outputs": (2, B, T, k, d)}
    assert {kind: tuple(s.shape) for kind, s in stacked.items()} == shapes
    assert cap.layers_of("hidden_states") == cap.layers_of("mlp_inputs") == [0, 1, 2]
    assert all(cap.layers_of(kind) == [1, 2] for kind in MOE_KINDS)  # block 0 is a dense MLP
    assert cap.stack("hidden_states").shape == (3, B, T, d)
    for row, i in enumerate(cap.layers_of("router_logits")):  # row r of stack() is layer layers_of()[r]
        p, x = parts[i], cap.get("mlp_inputs", i)  # (B, T, d)
        torch.testing.assert_close(stacked["router_logits"][row], x @ p.router.weight.T, atol=1e-5, rtol=0)
        w, y = stacked["expert_weights"][row], stacked["expert_outputs"][row]  # (B, T, k), (B, T, k, d)
        with torch.no_grad():  # the MoE block's output = sum_j w_j y_j + the shared experts' output
            direct = (w.unsqueeze(-1) * y).sum(2) + p.shared_expert(x)
        torch.testing.assert_close(block_out[i], direct, atol=1e-5, rtol=0)


def test_stack_of_a_moe_kind_on_dense_layers_only_is_a_clear_key_error(deepseek):
    model, _, ids = deepseek
    with torch.no_grad(), Capture(model, kinds=["router_logits", "hidden_states"], layers=[0]) as cap:
        model(ids)
    assert cap.layers_of("router_logits") == [] and cap.stack("hidden_states").shape[0] == 1
    with pytest.raises(KeyError, match="none of the captured layers"):
        cap.stack("router_logits")


def test_attention_stats_on_latent_attention_equal_eager_probabilities(deepseek, eager_attentions):
    model, _, ids = deepseek
    A = eager_attentions  # (L, B, H, T, T)
    with torch.no_grad():
        plain = model(ids).logits
        with AttentionStats(model, entropy=True) as st:
            fused = model(ids).logits  # its own P V (values 32 wide) replaces sdpa's
        with AttentionStats(model, keys=[0]) as first:
            model(ids)
    torch.testing.assert_close(fused, plain, atol=1e-5, rtol=0)
    seen = torch.arange(T, 0, -1).float()  # key j is seen by the T - j queries t >= j
    for i in range(model.config.num_hidden_layers):
        torch.testing.assert_close(st.key_mass(i), A[i].sum(-2) / seen, atol=1e-5, rtol=0)
        torch.testing.assert_close(st.entropy_by_query(i), torch.special.entr(A[i]).sum(-1), atol=1e-4, rtol=0)
        torch.testing.assert_close(first.probs_of_keys(i), A[i][..., :1], atol=1e-5, rtol=0)
    alpha0 = A[..., 0].mean(-1)  # (L, B, H): alpha_0 = (1/T) sum_t A[t, 0], every query sees key 0
    torch.testing.assert_close(st.alpha()[..., 0], alpha0, atol=1e-5, rtol=0)
    torch.testing.assert_close(first.alpha()[..., 0], alpha0, atol=1e-5, rtol=0)
    assert (A[:, :, :, 0, 0] == 1).all()  # hand check: the first query sees only the first key


def test_capture_of_latent_attention_keeps_each_width(deepseek, eager_attentions):
    model, _, ids = deepseek
    with torch.no_grad(), Capture(model, kinds=["attentions", "queries", "values", "head_outputs"]) as cap:
        model(ids)
    H, cfg = model.config.num_attention_heads, model.config
    for i in range(cfg.num_hidden_layers):
        A, v = cap.get("attentions", i), cap.get("values", i)  # (B, H, T, T), (B, H, T, 32)
        assert cap.get("queries", i).shape[-1] == cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        assert v.shape == (B, H, T, cfg.v_head_dim)
        torch.testing.assert_close(A, eager_attentions[i], atol=1e-5, rtol=0)
        torch.testing.assert_close(cap.get("head_outputs", i), (A @ v).transpose(1, 2), atol=1e-5, rtol=0)


def test_routing_indexes_the_moe_layers_by_the_models_layer(deepseek, lm):
    model, _, ids = deepseek
    cfg = model.config
    r = moe_sinks.routing(lm, ids, batch_size=B, first_token=True)
    assert r.moe_layers == [1, 2] and len(r.same_set_first) == len(r.entropy_first) == r.load_first.shape[0] == 2
    assert r.output_max[0].isnan().all() and r.output_max[1:].isfinite().all()
    assert r.shared_max[0].isnan() and (r.shared_max[1:] > 0).all()
    assert len(r.first_state["alpha_first"]) == 3  # alpha_0 of every layer, the dense one too
    assert r.load_first.shape[1] == cfg.n_routed_experts  # the first token's slots over the routed experts


def test_the_gated_mlp_check_reads_every_block_not_the_dense_first_one(lm):
    from sinklib.core.errors import WrongFamilyError
    from sinklib.interpretation import origin

    with pytest.raises(WrongFamilyError, match="DeepseekV2Moe"):  # block 0 is gated, blocks 1-2 are MoE
        origin.require_gated_mlp(lm, "the structural-origin chain")


def test_streaming_refuses_latent_attention_in_one_line_and_10_llm_records_why(deepseek, lm):
    """MODEL=deepseek-ai/DeepSeek-V2-Lite reaches 01 and 10 (both take MoE models): the sink cache re-rotates cached
    keys, which MLA does not cache -- a one-line error in 01, a "not run" record in 10's Xiao test."""
    from sinklib.architectures.llm import xiao_position
    from sinklib.core.errors import InputError
    from sinklib.utilization.sink_cache import SinkWindowCache, why_no_sink_cache

    model, _, _ = deepseek
    assert "multi-head latent attention" in why_no_sink_cache(model)
    with pytest.raises(InputError) as err:
        SinkWindowCache.for_model(model, n_sink=4, window=8)
    assert "\n" not in str(err.value) and "latent" in str(err.value)
    from sinklib.core.results import load_reference

    xiao, claim = xiao_position.xiao_position_test(lm, 64, 16, 8, load_reference("streamingllm"))
    assert xiao == {} and claim.holds is None and claim.note.startswith("not run: ") and "latent" in claim.note
