"""Capture on a tiny random Llama: equal to transformers' own outputs, and nothing left behind."""

import pytest
import torch
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface

from sinklib.core.adapters import find_layers
from sinklib.core.capture import Capture, hooks_left
from sinklib.models.load import load_model


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (3, 17), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def test_attentions_equal_output_attentions(tiny, ids):
    eager = load_model("tiny-llama-random", attn_implementation="eager", seed=0, device="cpu")  # beside `tiny`
    ref = eager.model(ids, output_attentions=True, output_hidden_states=True)
    with Capture(tiny.model, attentions=True, hidden_states=True) as cap:
        out = tiny.model(ids)
    got = cap.stack("attentions")  # (L, B, H, T, T)
    assert got.shape == (2, 3, 4, 17, 17)
    torch.testing.assert_close(got, torch.stack(ref.attentions), atol=1e-6, rtol=0)
    # hidden states after each block; transformers' last entry has the final norm applied, so compare the others
    torch.testing.assert_close(cap.get("hidden_states", 0), ref.hidden_states[1], atol=1e-6, rtol=0)
    torch.testing.assert_close(out.logits, ref.logits, atol=1e-5, rtol=0)
    assert torch.allclose(got.sum(-1), torch.ones(()))  # rows sum to one
    assert got[..., 0, 1:].abs().max() == 0  # causal


@torch.no_grad()
def test_padding_mask_reaches_the_recorder(tiny, ids):
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding on the first sequence
    with Capture(tiny.model, attentions=True) as cap:
        tiny.model(ids, attention_mask=mask)
    A = cap.get("attentions", 0)
    assert A[0, :, 5:, :5].abs().max() == 0  # real tokens never attend to padding
    assert A[1, :, :, :5].abs().max() > 0


@torch.no_grad()
def test_head_outputs_and_mlp_activations_match_modules(tiny, ids):
    layer = find_layers(tiny.model)[1]
    seen = {}
    handle = layer.attn.register_forward_hook(lambda m, a, out: seen.__setitem__("attn_out", out[0]))
    try:
        with Capture(tiny.model, head_outputs=True, mlp_activations=True) as cap:
            tiny.model(ids)
    finally:
        handle.remove()
    o = cap.get("head_outputs", 1)  # (B, T, H, hd)
    assert o.shape == (3, 17, 4, 16)
    # W_O applied to the captured head outputs gives the attention block's output
    torch.testing.assert_close(layer.o_proj(o.flatten(-2)), seen["attn_out"], atol=1e-6, rtol=0)
    assert cap.get("mlp_activations", 1).shape == (3, 17, 128)
    z = torch.randn(2, 5, 64)
    with Capture(tiny.model, mlp_activations=True) as cap2:
        layer.mlp(z)
    mlp = layer.mlp  # SwiGLU intermediate: act(gate(z)) * up(z)
    torch.testing.assert_close(cap2.get("mlp_activations", 1), mlp.act_fn(mlp.gate_proj(z)) * mlp.up_proj(z))


def test_nothing_left_behind_even_on_error(tiny, ids):
    before_impl, before_hooks = tiny.model.config._attn_implementation, hooks_left(tiny.model)
    before_keys = set(AttentionInterface._global_mapping)
    with pytest.raises(RuntimeError, match="boom"):
        with Capture(tiny.model, attentions=True, hidden_states=True, head_outputs=True, mlp_activations=True):
            tiny.model(ids[:1])
            raise RuntimeError("boom")
    assert hooks_left(tiny.model) == before_hooks == 0
    assert tiny.model.config._attn_implementation == before_impl
    assert set(AttentionInterface._global_mapping) == before_keys
    assert not any(k.startswith("sinklib") for k in AttentionMaskInterface._global_mapping)


def test_layer_selection_and_reduce(tiny, ids):
    with torch.no_grad(), Capture(tiny.model, attentions=True, layers=[1],
                                  reduce={"attentions": lambda a, layer: a[..., 0]}) as cap:
        tiny.model(ids)
        tiny.model(ids[:1])
    assert set(cap.records["attentions"]) == {1}
    assert cap.get("attentions", 1).shape == (4, 4, 17)  # two calls concatenated, first key column kept
    with pytest.raises(ValueError):
        Capture(tiny.model)


@torch.no_grad()
def test_sliding_window_and_softcapping_masks_are_respected(tiny_gemma3):
    """A tiny random Gemma-3 with sliding-window layers: capture equals output_attentions layer by layer."""
    model = tiny_gemma3(sliding_window=4, softcap=30.0)
    ids = torch.randint(0, 100, (2, 12))
    model.set_attn_implementation("eager")
    ref = model(ids, output_attentions=True)
    model.set_attn_implementation("sdpa")
    hooks_before = hooks_left(model)  # transformers registers a few output-recording hooks of its own
    with Capture(model, attentions=True, hidden_states=True) as cap:
        model(ids)
    got = cap.stack("attentions")
    torch.testing.assert_close(got, torch.stack(ref.attentions), atol=1e-6, rtol=0)
    assert got[0, ..., 11, :8].abs().max() == 0  # sliding layer: query 11 sees keys 8..11 only
    assert got[1, ..., 11, :8].abs().max() > 0  # full layer sees everything
    assert model.config._attn_implementation == "sdpa" and hooks_left(model) == hooks_before
