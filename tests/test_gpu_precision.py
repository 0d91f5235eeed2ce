"""Item 6 of the GPU issue: attention probabilities in float32 from a bfloat16 model, timing that waits for the GPU,
free memory that counts PyTorch's cached blocks, and weights placed on the GPU(s) as they load."""

from __future__ import annotations

import pytest
import torch

from sinklib.core import memory
from sinklib.core.capture import Capture, float32_inputs
from sinklib.models.load import device_map_for
from sinklib.utilization.decode_timing import device_synchronizer
from tests.fake_cuda import FAKE_MEMORY, fake_cuda


def _probabilities(q, k, mask=None):
    logits = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if mask is not None:
        logits = logits + mask
    return logits.softmax(-1)


def test_probabilities_formed_in_float32_from_bfloat16_inputs():
    """Logits of 20-40 in bfloat16 are rounded by up to 0.125: the probabilities move by several percent. Formed
    from the same bfloat16 q and k in float32 they agree with a float64 reference to 1e-5."""
    g = torch.Generator().manual_seed(0)
    q = (torch.randn(1, 2, 8, 16, generator=g) * 2.2).bfloat16()
    k = (torch.randn(1, 2, 8, 16, generator=g) * 2.2).bfloat16()
    v = torch.randn(1, 2, 8, 16, generator=g).bfloat16()
    reference = _probabilities(q.double(), k.double())
    assert (q.double() @ k.double().transpose(-1, -2) / 4).abs().max() > 15  # logits as large as a sink head's
    in_bf16 = _probabilities(q, k).double()
    q32, k32, v32, _ = float32_inputs(q, k, v, None)
    in_f32 = _probabilities(q32, k32).double()
    assert (in_bf16 - reference).abs().max() > 1e-3
    assert (in_f32 - reference).abs().max() < 1e-5
    assert v32.dtype == torch.float32 and float32_inputs(q32, k32, v32, None)[0] is q32  # float32: unchanged


def test_capture_keeps_float32_probabilities_of_a_bfloat16_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=16))
    model = model.to(torch.bfloat16).eval()
    ids = torch.randint(0, 64, (1, 12))
    with torch.no_grad(), Capture(model, attentions=True) as cap:
        out = model(ids)
    probs = cap.stack("attentions")  # (L, B, H, T, T)
    assert probs.dtype == torch.float32 and out.logits.dtype == torch.bfloat16  # the model keeps its dtype
    assert torch.allclose(probs.sum(-1), torch.ones(()), atol=1e-5)  # rows of float32 probabilities


def test_decode_timing_waits_for_every_gpu(monkeypatch):
    with fake_cuda(2):
        waited = []
        monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waited.append(device))
        device_synchronizer(torch.device("cuda:1"))()
        assert waited == [0, 1]  # a model split over both: wait for both
    device_synchronizer(torch.device("cpu"))()  # nothing to wait for


def test_free_memory_counts_the_allocators_cached_blocks(monkeypatch):
    with fake_cuda(1):
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 6 * 2**30)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2 * 2**30)
        assert memory.available_bytes(torch.device("cuda:0")) == FAKE_MEMORY + 4 * 2**30


def test_weights_are_placed_as_they_load(monkeypatch):
    monkeypatch.delenv("SINKLIB_DEVICE_MAP", raising=False)
    assert device_map_for(torch.device("cpu")) is None  # loaded, then moved, as before
    with fake_cuda(1):
        assert device_map_for(torch.device("cuda")) == "cuda:0"  # straight to the GPU, not through host RAM
    with fake_cuda(2):
        assert device_map_for(torch.device("cuda")) == "auto"  # several GPUs: accelerate places the blocks
        assert device_map_for(torch.device("cuda:1")) == "cuda:1"  # a device the user named
        monkeypatch.setenv("SINKLIB_DEVICE_MAP", "balanced")
        assert device_map_for(torch.device("cuda:1")) == "balanced"
        with pytest.raises(ValueError, match="device_map='everywhere'"):
            device_map_for(torch.device("cuda"), "everywhere")
