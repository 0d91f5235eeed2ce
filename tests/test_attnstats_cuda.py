"""The statistics' CUDA path -- one fused kernel with the log-sum-exp (cuDNN / flash-attention 2 / the
memory-efficient kernel), the tracked keys from a (T x |keys|) product, every key's column sum from a Triton kernel -- against eager
attention maps, on the fake CUDA device (CPU transcriptions of the CUDA-only kernels with CUDA's contract, Triton's
interpreter for the Triton kernel)."""

from __future__ import annotations

import copy
import os

import pytest
import torch

from sinklib.core import lse_attention, metrics
from sinklib.core.attnstats import AttentionStats
from sinklib.core.capture import Capture
from tests import fake_cuda_kernels
from tests.fake_cuda import fake_cuda


def _eager_maps(model, ids, **kwargs) -> torch.Tensor:
    """(L, B, H, T, T) attention probabilities of the model's eager weights, on the CPU."""
    with torch.no_grad(), Capture(model, attentions=True) as cap:
        model(ids, **kwargs)
    return cap.stack("attentions")


def _cuda_stats(model, ids, keys=None, **kwargs):
    """AttentionStats of a forward of a copy of ``model`` on the fake CUDA device; (stats, logits on the CPU, which
    kernels ran)."""
    ran = {"attention": [], "triton": 0}
    attention_lse, triton_sums = lse_attention.attention_lse, lse_attention._triton_column_sums

    def spy_attention(query, key, value, mask, causal, scaling):
        ran["attention"].append(lse_attention.kernel_for(query, mask, causal, key.shape[2]))
        return attention_lse(query, key, value, mask, causal, scaling)

    def spy_triton(*a):
        ran["triton"] += 1
        return triton_sums(*a)

    with fake_cuda():
        twin = copy.deepcopy(model).to("cuda")
        lse_attention.attention_lse, lse_attention._triton_column_sums = spy_attention, spy_triton
        try:
            with torch.no_grad(), AttentionStats(twin, keys=keys) as st:
                logits = twin(ids.to("cuda"), **{k: v.to("cuda") for k, v in kwargs.items()}).logits.cpu()
        finally:
            lse_attention.attention_lse, lse_attention._triton_column_sums = attention_lse, triton_sums
    return st, logits, ran


@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("keys", [None, [0, 3]])
def test_cuda_statistics_equal_eager_maps_in_float32(tiny, keys, padded):
    ids = torch.randint(0, 256, (2, 29), generator=torch.Generator().manual_seed(0))
    kwargs = {}
    if padded:
        mask = torch.ones_like(ids)
        mask[0, :6] = 0  # left padding: a 4-D mask, so the efficient kernel with a bias
        kwargs["attention_mask"] = mask
    A = _eager_maps(tiny.model, ids, **kwargs)
    with torch.no_grad():
        ref_logits = tiny.model(ids, **kwargs).logits
    st, logits, ran = _cuda_stats(tiny.model, ids, keys=keys, **kwargs)
    assert ran["attention"] == ["efficient"] * tiny.n_layers  # float32: the memory-efficient kernel
    assert ran["triton"] == (tiny.n_layers if keys is None else 0)
    real = kwargs["attention_mask"].bool() if padded else torch.ones(ids.shape, dtype=torch.bool)
    torch.testing.assert_close(logits[real], ref_logits[real], atol=1e-5, rtol=1e-5)
    cols = slice(None) if keys is None else keys
    if padded:  # padded queries' rows are garbage in eager, 0 here; no real query sees a padded key
        A = A * real[None, :, None, :, None]
        col = torch.stack([torch.cat(st.col_sum[i]) for i in st.layers])
        torch.testing.assert_close(col[..., cols], A.sum(dim=-2)[..., cols], atol=1e-5, rtol=0)
        assert (torch.cat(st.visible[0])[0, :6] == 0).all()
        return
    mass = torch.stack([st.key_mass(i) for i in st.layers])
    torch.testing.assert_close(mass[..., cols], metrics.sink_mass(A)[..., cols], atol=1e-5, rtol=0)
    torch.testing.assert_close(st.alpha([0])[..., 0], metrics.alpha(A, 0), atol=1e-5, rtol=0)


@pytest.mark.parametrize("cudnn", [True, False])
def test_bfloat16_runs_cudnn_or_flash_attention_and_agrees_with_float32(tiny, cudnn):
    """On a Hopper GPU (the fake device's capability) bfloat16 runs cuDNN's kernel, sdpa's own choice there; with
    cuDNN's sdpa turned off, flash-attention 2."""
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(2))
    st32, _, _ = _cuda_stats(tiny.model, ids)
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(cudnn)
    try:
        st16, _, ran = _cuda_stats(copy.deepcopy(tiny.model).to(torch.bfloat16), ids)  # the shared model untouched
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)
    want = "cudnn" if cudnn else "flash"
    assert ran["attention"] == [want] * tiny.n_layers and ran["triton"] == tiny.n_layers
    torch.testing.assert_close(st16.alpha(), st32.alpha(), atol=3e-2, rtol=0)


def test_a_cudnn_refusal_falls_back_to_flash_and_is_remembered(tiny, monkeypatch):
    calls = []

    def refuse(*args, **kwargs):
        calls.append(1)
        raise fake_cuda_kernels.KernelContractError("cuDNN: no execution plan for this configuration")

    monkeypatch.setitem(fake_cuda_kernels.KERNELS, "_scaled_dot_product_cudnn_attention", refuse)
    monkeypatch.setattr(lse_attention, "_CUDNN_REFUSED", set())
    ids = torch.randint(0, 256, (1, 24), generator=torch.Generator().manual_seed(3))
    st32, _, _ = _cuda_stats(tiny.model, ids, keys=[0])
    st16, _, ran = _cuda_stats(copy.deepcopy(tiny.model).to(torch.bfloat16), ids, keys=[0])
    assert len(calls) == 1  # refused once, then flash-attention 2 for every later layer without asking again
    assert ran["attention"] == ["cudnn"] + ["flash"] * (tiny.n_layers - 1)
    torch.testing.assert_close(st16.alpha([0]), st32.alpha([0]), atol=3e-2, rtol=0)


def test_cuda_statistics_wait_on_the_device_and_reach_the_host_in_one_move(tiny, monkeypatch):
    """No host copy per layer (each would make the host wait for the GPU): the statistics stay on the device during
    the forward and are on the host after the context, before any reading method, or once enough bytes wait."""
    from sinklib.core import attnstats

    ids = torch.randint(0, 256, (1, 24), generator=torch.Generator().manual_seed(4))
    with fake_cuda():
        twin = copy.deepcopy(tiny.model).to("cuda")
        with torch.no_grad(), AttentionStats(twin, keys=[0]) as st:
            twin(ids.to("cuda"))
            assert {v.device.type for values in st.col_sum.values() for v in values} == {"cuda"}
            assert st.alpha([0]).device.type == "cpu"  # a reading method brings everything over
            assert {v.device.type for values in st.key_probs.values() for v in values} == {"cpu"}
            twin(ids.to("cuda"))
        assert {v.device.type for store in (st.col_sum, st.visible, st.key_probs) for values in store.values()
                for v in values} == {"cpu"}
        monkeypatch.setattr(attnstats, "DEVICE_KEEP_BYTES", 1)  # a tiny allowance: moved as soon as it is passed
        with torch.no_grad(), AttentionStats(twin, keys=[0]) as st:
            twin(ids.to("cuda"))
            assert {v.device.type for values in st.col_sum.values() for v in values} == {"cpu"}
    assert st.alpha([0]).shape == (tiny.n_layers, 1, tiny.model.config.num_attention_heads, 1)


def _columns(st) -> torch.Tensor:
    return torch.stack([torch.cat(st.col_sum[i]) for i in st.layers])  # (L, B, H, N): sum_t A[t, j]


def test_sliding_windows_and_soft_capping_on_cuda(tiny_gemma3):
    ids = torch.randint(0, 100, (2, 17), generator=torch.Generator().manual_seed(3))
    model = tiny_gemma3(sliding_window=5, softcap=None)  # layer 0 slides: a 4-D mask read by the Triton kernel
    A = _eager_maps(model, ids)
    st, _, ran = _cuda_stats(model, ids)
    assert ran["attention"] == ["efficient", "efficient"] and ran["triton"] == 2
    torch.testing.assert_close(_columns(st), A.sum(dim=-2), atol=1e-5, rtol=0)
    from transformers import Gemma2Config, Gemma2ForCausalLM  # Gemma-2 passes its soft-cap to the attention

    config = Gemma2Config(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=5,
                          attn_logit_softcapping=5.0)
    torch.manual_seed(0)
    capped = Gemma2ForCausalLM(config).eval()
    A = _eager_maps(capped, ids)
    st, _, ran = _cuda_stats(capped, ids)
    assert not ran["attention"]  # soft-capping: the blocked path, blocks sized to the free memory
    torch.testing.assert_close(_columns(st), A.sum(dim=-2), atol=1e-5, rtol=0)


def _reference_columns(q, k, allowed, scaling):
    """sum_t softmax_j(l)_tj over the allowed (t, j): (B, H, N), grouped heads repeated."""
    G = q.shape[1] // k.shape[1]
    logits = (q @ k.repeat_interleave(G, dim=1).transpose(-1, -2) * scaling).masked_fill(~allowed, float("-inf"))
    return torch.softmax(logits, -1).nan_to_num(0.0).sum(2), torch.logsumexp(logits, -1)


@pytest.mark.parametrize("case", ["causal, more keys than queries", "bidirectional", "boolean mask",
                                  "additive mask"])
def test_column_sums_of_the_triton_kernel_and_of_torch_blocks(case, monkeypatch):
    """Hand-built: grouped heads (4 query heads on 2 key heads), a head width that is not a power of 2, key and
    query counts across tile edges, a row that sees no key."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    g = torch.Generator().manual_seed(0)
    B, H, T, N, hd = 2, 4, 70, 75, 24
    q, k = torch.randn(B, H, T, hd, generator=g), torch.randn(B, 2, N, hd, generator=g)
    allowed = torch.rand(B, 1, T, N, generator=g) > 0.3
    allowed[0, 0, 5] = False
    mask, offset = None, None
    if case.startswith("causal"):
        offset = N - T
        allowed = (torch.arange(N)[None, :] <= torch.arange(T)[:, None] + offset).expand(B, 1, T, N)
    elif case == "bidirectional":
        allowed = torch.ones(B, 1, T, N, dtype=torch.bool)
    elif case == "boolean mask":
        mask = allowed
    else:
        mask = torch.zeros(B, 1, T, N).masked_fill(~allowed, torch.finfo(torch.float32).min)
    want, lse = _reference_columns(q, k, allowed, 0.3)
    triton_cols = lse_attention._triton_column_sums(q, k, lse, mask, offset, 0.3)
    torch_cols = lse_attention.column_sums(q, k, lse, mask, offset, 0.3, block_bytes=4 * B * H * N * 16)
    torch.testing.assert_close(triton_cols, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch_cols, want, atol=1e-5, rtol=0)


def test_the_transcribed_kernels_keep_cuda_s_contract():
    q = torch.randn(1, 2, 40, 16)
    with pytest.raises(fake_cuda_kernels.KernelContractError, match="fp16 and bf16"):
        fake_cuda_kernels.flash_attention(q, q, q, 0.0, True)
    bias = torch.zeros(1, 1, 40, 40)
    with pytest.raises(fake_cuda_kernels.KernelContractError, match="expanded"):
        fake_cuda_kernels.efficient_attention(q, q, q, bias, True)
    out, lse = fake_cuda_kernels.efficient_attention(q, q, q, None, True, 0.0, True)[:2]
    assert lse.shape == (1, 2, 64) and torch.isnan(lse[..., 40:]).all()  # padded to 32 rows: sliced by callers
    ref = torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)
    k = torch.randn(1, 2, 50, 16).bfloat16()  # causal with T < N: flash aligns the mask to the bottom-right
    _, lse = fake_cuda_kernels.flash_attention(q[:, :, :10].bfloat16(), k, k, 0.0, True)[:2]
    logits = q[:, :, :10].bfloat16().float() @ k.float().transpose(-1, -2) / 4
    seen = torch.arange(50)[None, :] <= torch.arange(10)[:, None] + 40
    torch.testing.assert_close(lse, torch.logsumexp(logits.masked_fill(~seen, float("-inf")), -1), atol=1e-4,
                               rtol=0)
    with pytest.raises(fake_cuda_kernels.KernelContractError, match="fp16 and bf16"):
        fake_cuda_kernels.cudnn_attention(q, q, q, None, True, 0.0, True)
    qb = q.bfloat16()
    out, lse = fake_cuda_kernels.cudnn_attention(qb, qb, qb, None, True, 0.0, True, scale=0.25)[:2]
    assert lse.shape == (1, 2, 40, 1) and lse.dtype == torch.float32  # cuDNN's log-sum-exp has a trailing 1
    flash_out, flash_lse = fake_cuda_kernels.flash_attention(qb, qb, qb, 0.0, True, scale=0.25)[:2]
    torch.testing.assert_close(lse[..., 0], flash_lse)
    torch.testing.assert_close(out, flash_out)
    with fake_cuda():  # and the statistics never hand flash or cuDNN a causal mask with T != N
        assert lse_attention.kernel_for(q[:, :, :10].bfloat16().cuda(), None, True, 50) == "efficient"
        assert lse_attention.kernel_for(q.bfloat16().cuda(), None, True, 40) == "cudnn"
        assert lse_attention.kernel_for(torch.randn(1, 2, 40, 256).bfloat16().cuda(), None, True, 40) == "flash"
    assert os.environ.get("TRITON_INTERPRET") != "1" or "TRITON_INTERPRET" in os.environ


def test_the_long_context_benchmark_reports_its_cuda_rows(tmp_path):
    """``benchmarks/long_context.py --device cuda`` is how a GPU run reports; rehearsed on the fake device."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, str(root / "benchmarks" / "long_context.py"), "--device", "cuda", "--fake",
                           "--dtypes", "bfloat16", "--lengths", "70", "--layers", "1", "--rounds", "1",
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=root,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "first key" in proc.stdout and "every key" in proc.stdout and "fake" in proc.stdout
    rows = json.loads((tmp_path / "long_context_cuda.json").read_text())["rows"]
    assert [r["N"] for r in rows] == [70] and all("seconds" in rows[0][m] for m in ("sdpa", "first key",
                                                                                     "every key", "eager"))


COMPILE_SCRIPT = r"""
import os
os.environ.pop("TRITON_INTERPRET", None)
import torch
from sinklib.core import lse_attention as la

CONFIGS = [(90, dtype, hd, kind) for dtype in (torch.bfloat16, torch.float16, torch.float32)
           for hd, kind in ((64, "causal"), (24, "bidirectional"), (128, "bool"), (256, "additive"))]
CONFIGS += [(80, torch.bfloat16, 64, "causal"), (80, torch.float32, 80, "additive")]
done = []
for capability, dtype, hd, mask_kind in CONFIGS:
    q, k = torch.zeros(1, 4, 70, hd, dtype=dtype), torch.zeros(1, 2, 75, hd, dtype=dtype)
    lse = torch.zeros(1, 4, 70)
    mask = {"bool": torch.ones(1, 1, 70, 75, dtype=torch.bool),
            "additive": torch.zeros(1, 1, 70, 75, dtype=dtype)}.get(mask_kind)
    offset = 5 if mask_kind == "causal" else None
    compiled = la.compile_for_gpu(q, k, lse, mask, offset, 0.125, capability)
    assert compiled.asm["cubin"], (capability, dtype, hd, mask_kind)
    done.append((capability, str(dtype), hd, mask_kind))
print(len(done))
"""


def test_the_triton_kernel_compiles_for_a100_and_h100_without_a_gpu():
    """Triton's interpreter runs the kernel's arithmetic on the CPU but not its GPU compilation (types, tile shapes,
    the dot's precision): compile every launch configuration the statistics use down to an sm_80 / sm_90 binary."""
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], capture_output=True, text=True, env=env,
                          cwd=Path(__file__).resolve().parents[1], timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "14"
