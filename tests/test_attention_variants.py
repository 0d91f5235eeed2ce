"""Each attention variant on hand-built inputs: causality, row sums, gates, and where the missing mass goes."""

import math

import pytest
import torch

from sinklib.mitigation import variants as av

B, H, T, HD, D = 2, 3, 5, 4, 12


@pytest.fixture()
def qkv():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(B, H, T, HD, generator=g), torch.randn(B, H, T, HD, generator=g),
            torch.randn(B, H, T, HD, generator=g), torch.randn(B, T, D, generator=g))


@pytest.mark.parametrize("name", list(av.VARIANTS))
def test_causal_and_shapes(name, qkv):
    q, k, v, x = qkv
    mod = av.VARIANTS[name](D, H, HD)
    y, A = mod(q, k, v, x)
    assert y.shape == (B, H, T, HD) and A.shape == (B, H, T, T)
    assert A.triu(1).abs().max() == 0 and (A >= 0).all()
    # changing a later token must not change earlier outputs
    k2, v2 = k.clone(), v.clone()
    k2[..., -1, :] += 5.0
    v2[..., -1, :] -= 3.0
    y2, _ = mod(q, k2, v2, x)
    torch.testing.assert_close(y2[..., :-1, :], y[..., :-1, :])


def test_softmax_rows_sum_to_one_and_first_row_is_self(qkv):
    q, k, v, x = qkv
    y, A = av.Softmax(D, H, HD)(q, k, v, x)
    torch.testing.assert_close(A.sum(-1), torch.ones(B, H, T))
    torch.testing.assert_close(y[..., 0, :], v[..., 0, :])  # o_0 = v_0


def test_equal_logits_give_known_rows():
    q, k = torch.zeros(1, 1, 3, HD), torch.zeros(1, 1, 3, HD)  # every logit 0
    soft = av.Softmax(D, 1, HD).weights(q, k)[0, 0]
    assert soft[2].tolist() == pytest.approx([1 / 3] * 3)
    off = av.SoftmaxOffByOne(D, 1, HD).weights(q, k)[0, 0]
    assert off[2].tolist() == pytest.approx([1 / 4] * 3)  # exp(0) / (1 + 3 exp(0)); 1/4 went to the zero sink
    sig = av.Sigmoid(D, 1, HD, max_len=8)
    assert sig.weights(q, k)[0, 0, 2].tolist() == pytest.approx([1 / (1 + 8)] * 3)  # sigmoid(0 - log 8)
    pick = av.Softpick(D, 1, HD).weights(q, k)[0, 0]
    assert pick.abs().max() == 0  # relu(exp(0) - 1) = 0: softpick can attend to nothing
    sink = av.SinkLogit(D, 1, HD)
    with torch.no_grad():
        sink.sink.fill_(math.log(3.0))
    assert sink.weights(q, k)[0, 0, 2].tolist() == pytest.approx([1 / 6] * 3)  # 3 / (3 + 3) to the learned sink


def test_softpick_formula():
    q = torch.tensor([[[[1.0, 0, 0, 0]] * 3]])  # (1, 1, 3, 4)
    k = torch.tensor([[[[2.0, 0, 0, 0], [0, 0, 0, 0], [-2.0, 0, 0, 0]]]])
    A = av.Softpick(D, 1, HD).weights(q, k)[0, 0, 2]
    e = torch.exp(torch.tensor([1.0, 0.0, -1.0])) - 1  # logits = q.k / sqrt(4)
    torch.testing.assert_close(A, torch.relu(e) / e.abs().sum(), atol=1e-5, rtol=1e-5)


def test_rmsnorm_output_has_unit_rms_times_gain(qkv):
    q, k, v, x = qkv
    mod = av.HeadwiseRMSNorm(D, H, HD)
    with torch.no_grad():
        mod.gain.fill_(2.0)
    y, _ = mod(q, k, v, x)
    torch.testing.assert_close(y.pow(2).mean(-1).sqrt(), torch.full((B, H, T), 2.0), atol=1e-4, rtol=1e-4)


def test_variant_options_reach_the_variant():
    from sinklib.mitigation.variant_lm import TinyConfig, TinyLM

    cfg = TinyConfig(d_model=32, n_layers=1, n_heads=2, d_ff=64, attention="headwise_rmsnorm",
                     options=(("gain_init", 0.1),))
    assert torch.equal(TinyLM(cfg).blocks[0].attn.gain, torch.full((16,), 0.1))
    with pytest.raises(TypeError, match="gain_init"):
        TinyLM(TinyConfig(attention="softpick", options=(("gain_init", 0.1),)))


@pytest.mark.parametrize("cls", [av.GatedHeadwise, av.GatedElementwise])
def test_gates(cls, qkv):
    q, k, v, x = qkv
    mod = cls(D, H, HD)
    base, _ = av.Softmax(D, H, HD)(q, k, v, x)
    with torch.no_grad():
        mod.gate.weight.zero_()
        mod.gate.bias.fill_(-1e4)  # gate closed
    assert mod(q, k, v, x)[0].abs().max() < 1e-6
    with torch.no_grad():
        mod.gate.bias.fill_(0.0)  # sigmoid(0) = 1/2
    torch.testing.assert_close(mod(q, k, v, x)[0], base / 2)


def test_kv_bias_takes_mass_and_adds_its_value(qkv):
    q, k, v, x = qkv
    mod = av.KVBias(D, H, HD)
    with torch.no_grad():
        mod.k_bias.zero_()  # logit 0 against every query
        mod.v_bias.fill_(1.0)
    y, A = mod(q, k, v, x)
    logits = av.causal_logits(q, k)
    p_bias = 1 / (1 + torch.exp(logits).sum(-1))  # exp(0) / (exp(0) + sum_j exp(l_j))
    torch.testing.assert_close(A.sum(-1), 1 - p_bias, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(y, torch.matmul(A, v) + p_bias[..., None], atol=1e-6, rtol=1e-5)


def test_sink_logit_transcribes_gpt_oss_sdpa(qkv):
    """openai/gpt-oss gpt_oss/torch/model.py:sdpa, transcribed for one query group: QK * sm_scale + causal mask,
    cat the per-head sink S as an extra column, softmax, drop that column, W @ V."""
    q, k, v, x = qkv
    mod = av.SinkLogit(D, H, HD)
    with torch.no_grad():
        mod.sink.copy_(torch.tensor([0.5, -1.0, 2.0]))
    ours, A = mod(q, k, v, x)
    mask = torch.triu(q.new_full((T, T), -float("inf")), diagonal=1)
    QK = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(HD) + mask
    S = mod.sink.detach().reshape(1, H, 1, 1).expand(B, -1, T, -1)
    W = torch.softmax(torch.cat([QK, S], dim=-1), dim=-1)[..., :-1]
    torch.testing.assert_close(A, W)
    torch.testing.assert_close(ours, torch.einsum("bhqk,bhkd->bhqd", W, v))


def test_softpick_transcribes_the_authors_naive_kernel(qkv):
    """zaydzuhri/softpick-attention naive_softpick_attn.py:softpick (their numerically stable form), transcribed:
    x_m = max x; (exp(x - x_m) - exp(-x_m)) rectified over its absolute sum on finite entries."""
    q, k, _, _ = qkv
    x = av.causal_logits(q * 3, k)  # larger logits: the stable form matters
    x_m = x.max(dim=-1, keepdim=True).values
    e = torch.exp(x - x_m) - torch.exp(-x_m)
    theirs = torch.relu(e) / (torch.where(x.isfinite(), e.abs(), 0).sum(-1, keepdim=True) + 1e-8)
    torch.testing.assert_close(av.Softpick(D, H, HD).weights(q * 3, k), theirs, atol=1e-5, rtol=1e-4)


def test_kv_bias_transcribes_gu_et_al_prepended_bias(qkv):
    """sail-sg/Attention-Sink lit_gpt/model_kv_bias.py:CausalSelfAttention.forward, transcribed: prepend a zero
    query, k' and v' as position 0, causal attention over T + 1 positions, drop the first output row."""
    q, k, v, x = qkv
    mod = av.KVBias(D, H, HD)
    with torch.no_grad():
        mod.v_bias.normal_(0, 0.5)
    ours, _ = mod(q, k, v, x)
    kb, vb = (p.detach()[None, :, None, :].expand(B, -1, 1, -1) for p in (mod.k_bias, mod.v_bias))
    q1, k1, v1 = torch.cat([torch.zeros_like(kb), q], 2), torch.cat([kb, k], 2), torch.cat([vb, v], 2)
    theirs = torch.nn.functional.scaled_dot_product_attention(q1, k1, v1, is_causal=True)[:, :, 1:]
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", list(av.VARIANTS))
def test_fused_training_path_equals_the_maps_on_cuda(name):
    """Without recorded weights on a CUDA device the softmax-like variants run torch's fused attention (one extra key
    for off-by-one, sink logit and KV bias): the same outputs and gradients as the materialised maps; sigmoid and
    softpick keep their maps. On the fake CUDA device (CPU data, CUDA's device checks)."""
    from tests.fake_cuda import fake_cuda

    g = torch.Generator().manual_seed(1)
    q, k, v, x = (torch.randn(B, H, 7, HD, generator=g), torch.randn(B, H, 7, HD, generator=g),
                  torch.randn(B, H, 7, HD, generator=g), torch.randn(B, 7, D, generator=g))
    torch.manual_seed(0)
    mod = av.VARIANTS[name](D, H, HD)
    with torch.no_grad():
        for p in mod.parameters():
            p.add_(0.3 * torch.randn_like(p))  # sink logits, biases and gains away from their initial values
    with fake_cuda():
        mod = mod.to("cuda")
        runs = []
        for need in (True, False):
            inputs = [t.to("cuda").requires_grad_() for t in (q, k, v, x)]
            mod.zero_grad()
            y, A = mod(*inputs, need_weights=need)
            (y * torch.linspace(-1, 1, HD, device="cuda")).sum().backward()
            runs.append((y.detach().cpu(), A, [t.grad.cpu() for t in inputs[:3]],
                         [p.grad.cpu() for p in mod.parameters() if p.grad is not None]))
    (y_maps, A_maps, g_maps, p_maps), (y_fused, A_fused, g_fused, p_fused) = runs
    assert A_maps is not None and (A_fused is None) == mod.fusable
    torch.testing.assert_close(y_fused, y_maps, atol=1e-5, rtol=1e-5)
    for a, b in zip(g_fused + p_fused, g_maps + p_maps):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert len(p_fused) == len(p_maps)


def test_the_cpu_keeps_the_maps_it_was_trained_with(qkv):
    q, k, v, x = qkv
    y, A = av.Softmax(D, H, HD)(q, k, v, x, need_weights=False)
    assert A is not None  # the CPU profile's runs are unchanged
