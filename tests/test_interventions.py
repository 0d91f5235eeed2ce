"""Each intervention on the tiny random Llama changes exactly what it should and restores the model afterwards."""

import pytest
import torch
from transformers import AttentionInterface

from sinklib.capture import Capture, find_layers, hooks_left
from sinklib.interventions import HeadOutputAmplification, ResidualOverride, SelfOnlyAttention

K = 5


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (3, 12), generator=torch.Generator().manual_seed(2))


def run(model, ids, *interventions, **capture):
    with torch.no_grad(), Capture(model, **capture) as cap:
        for iv in interventions:
            iv.__enter__()
        try:
            out = model(ids).logits
        finally:
            for iv in reversed(interventions):
                iv.__exit__(None, None, None)
    return out, cap


def assert_restored(model, ids, baseline_logits, hooks_before):
    with torch.no_grad():  # the baseline may come from the eager path of a Capture: equal up to float rounding
        torch.testing.assert_close(model(ids).logits, baseline_logits, atol=1e-5, rtol=0)
    assert hooks_left(model) == hooks_before
    assert model.config._attn_implementation == "sdpa"
    assert not [k for k in AttentionInterface._global_mapping if k.startswith("sinklib")]


def test_self_only_attention_edits_row_k_only(tiny, ids):
    base, cap0 = run(tiny.model, ids, attentions=True)
    hooks = hooks_left(tiny.model)
    iv = SelfOnlyAttention(tiny.model, K)
    out, cap = run(tiny.model, ids, iv, attentions=True)
    for layer in range(tiny.n_layers):
        A = cap.get("attentions", layer)  # (B, H, T, T)
        assert torch.equal(A[:, :, K], torch.nn.functional.one_hot(torch.tensor(K), 12).float().expand_as(A[:, :, K]))
    A0, B0 = cap.get("attentions", 0), cap0.get("attentions", 0)
    rows = [t for t in range(12) if t != K]
    torch.testing.assert_close(A0[:, :, rows], B0[:, :, rows], atol=1e-6, rtol=0)  # layer 0: other rows untouched
    assert iv.calls == tiny.n_layers
    torch.testing.assert_close(out[:, :K], base[:, :K], atol=1e-5, rtol=0)  # causal: earlier positions unaffected
    assert not torch.allclose(out[:, K:], base[:, K:])
    assert_restored(tiny.model, ids, base, hooks)


def test_self_only_attention_without_capture_and_on_chosen_layers(tiny, ids):
    with torch.no_grad():
        base = tiny.model(ids).logits
        with SelfOnlyAttention(tiny.model, K, layers=[1]) as iv:  # delegates to sdpa
            out = tiny.model(ids).logits
    assert iv.calls == 1 and not torch.allclose(out[:, K], base[:, K])
    _, cap = run(tiny.model, ids, SelfOnlyAttention(tiny.model, K, layers=[1]), attentions=True)
    assert cap.get("attentions", 0)[:, :, K, :K].sum() > 0  # layer 0 untouched
    assert cap.get("attentions", 1)[:, :, K, K].min() == 1.0
    with pytest.raises(ValueError):
        SelfOnlyAttention(tiny.model, K, layers=[7])


def o_proj_inputs(model, ids, *interventions):
    """Inputs that W_O really receives in layer 0 (after any pre-hook edits): (B, T, H * hd)."""
    seen = {}
    o_proj = find_layers(model)[0].o_proj

    def keep(module, args, output):  # returns None, so the output is left alone
        seen.setdefault("x", args[0].clone())

    handle = o_proj.register_forward_hook(keep)
    try:
        with torch.no_grad():
            for iv in interventions:
                iv.__enter__()
            try:
                logits = model(ids).logits
            finally:
                for iv in interventions:
                    iv.__exit__(None, None, None)
    finally:
        handle.remove()
    return seen["x"], logits


@pytest.mark.parametrize("mode", ["centered", "scale"])
def test_head_output_amplification(tiny, ids, mode):
    hooks = hooks_left(tiny.model)
    x, base = o_proj_inputs(tiny.model, ids)
    lam = 3.0
    y, out = o_proj_inputs(tiny.model, ids, HeadOutputAmplification(tiny.model, K, lam, [0], mode))
    mu = x.mean(dim=(0, 1))
    expected = mu + lam * (x[:, K] - mu) if mode == "centered" else lam * x[:, K]
    torch.testing.assert_close(y[:, K], expected, atol=1e-6, rtol=0)
    others = [t for t in range(12) if t != K]
    torch.testing.assert_close(y[:, others], x[:, others], atol=0, rtol=0)
    torch.testing.assert_close(out[:, :K], base[:, :K], atol=1e-5, rtol=0)
    assert_restored(tiny.model, ids, base, hooks)


def test_amplification_with_lambda_one_is_the_identity(tiny, ids):
    _, base = o_proj_inputs(tiny.model, ids)
    _, out = o_proj_inputs(tiny.model, ids, HeadOutputAmplification(tiny.model, K, 1.0, [0, 1]))
    torch.testing.assert_close(out, base, atol=1e-5, rtol=0)


def test_residual_override_fixed_positions_and_detected_entries(tiny, ids):
    hooks = hooks_left(tiny.model)
    base, cap0 = run(tiny.model, ids, hidden_states=True)
    h0 = cap0.get("hidden_states", 0)
    iv = ResidualOverride(tiny.model, [0], dims=[3, 7], values=torch.tensor([[5.0, -2.0]]), positions=[0])
    _, cap = run(tiny.model, ids, iv, hidden_states=True)
    h = cap.get("hidden_states", 0)  # the hook sees the block's output before the edit...
    torch.testing.assert_close(h, h0, atol=0, rtol=0)
    _, cap = run(tiny.model, ids, ResidualOverride(tiny.model, [0], [3, 7], torch.tensor([[5.0, -2.0]]), [0]),
                 kinds=["attn_inputs"])
    # ...and layer 1 reads the edited stream: recompute its normalised input from the edited residual
    edited = h0.clone()
    edited[:, 0, 3], edited[:, 0, 7] = 5.0, -2.0
    norm = tiny.model.model.layers[1].input_layernorm
    with torch.no_grad():
        torch.testing.assert_close(cap.get("attn_inputs", 1), norm(edited), atol=1e-5, rtol=0)
    # detected mode: only entries above the threshold change
    thr = float(h0[..., 3].abs().median())
    iv = ResidualOverride(tiny.model, [0], [3], 0.0, min_abs=thr)
    out = iv._edit(h0, 0)
    big = h0[..., 3].abs() > thr
    assert (out[..., 3][big] == 0).all() and torch.equal(out[..., 3][~big], h0[..., 3][~big])
    assert torch.equal(out[..., :3], h0[..., :3])
    assert_restored(tiny.model, ids, base, hooks)
    with pytest.raises(ValueError):
        ResidualOverride(tiny.model, [0, 1], [3], torch.zeros(1, 1))


def test_capture_must_be_outermost(tiny, ids):
    with SelfOnlyAttention(tiny.model, K), pytest.raises(RuntimeError, match="enter Capture first"):
        with Capture(tiny.model, attentions=True):
            pass
    assert tiny.model.config._attn_implementation == "sdpa"


def test_attention_calibration_damps_non_first_sinks(tiny, ids):
    from sinklib.interventions import AttentionCalibration

    base, cap0 = run(tiny.model, ids, attentions=True)
    hooks = hooks_left(tiny.model)
    A0 = cap0.get("attentions", 1)  # (B, H, T, T)
    threshold = float(A0.mean(dim=2)[..., 1:].quantile(0.9))  # make some later keys count as sinks
    iv = AttentionCalibration(tiny.model, {1: [0, 2]}, beta=0.4, threshold=threshold)
    _, cap = run(tiny.model, ids, iv, attentions=True)
    A = cap.get("attentions", 1)
    sink = A0.mean(dim=2) > threshold
    sink[..., 0] = False
    sink[:, [1, 3]] = False  # heads not chosen
    c = torch.where(sink, 0.4, 1.0)[:, :, None, :]
    expected = A0 * c / (A0 * c).sum(-1, keepdim=True)
    torch.testing.assert_close(A, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(A[:, [1, 3]], A0[:, [1, 3]], atol=1e-6, rtol=0)  # other heads untouched
    torch.testing.assert_close(cap.get("attentions", 0), cap0.get("attentions", 0), atol=0, rtol=0)
    assert iv.damped > 0 and iv.calls == 1
    assert_restored(tiny.model, ids, base, hooks)
