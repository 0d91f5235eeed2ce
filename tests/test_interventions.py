"""Each intervention on the tiny random Llama changes exactly what it should and restores the model afterwards."""

import pytest
import torch
from transformers import AttentionInterface

from sinklib.core.adapters import find_layers
from sinklib.core.capture import Capture, hooks_left
from sinklib.interpretation.interventions import (
    HeadOutputAmplification,
    MaskEdit,
    ResidualOverride,
    SelfOnlyAttention,
)

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


def _self_only(mask, k):
    """The self-only edit written out on a (T, T) mask, as a student would."""
    out = mask.clone()
    out[k] = float("-inf")
    out[k, k] = 0.0
    return out


def test_mask_edit_with_a_hand_written_self_only_edit_equals_self_only_attention(tiny, ids):
    seen = []

    def edit(mask):
        seen.append(mask.clone())
        return _self_only(mask, K)

    hooks = hooks_left(tiny.model)
    with torch.no_grad():
        base = tiny.model(ids).logits
    want, cap_want = run(tiny.model, ids, SelfOnlyAttention(tiny.model, K), attentions=True)
    iv = MaskEdit(tiny.model, edit)
    got, cap_got = run(tiny.model, ids, iv, attentions=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    torch.testing.assert_close(cap_got.get("attentions", 1), cap_want.get("attentions", 1), atol=1e-6, rtol=0)
    assert iv.calls == tiny.n_layers and len(seen) == tiny.n_layers * ids.shape[0]  # one (T, T) mask per sequence
    causal = seen[0] < -1e30  # what the edit was handed: the causal mask, large negative above the diagonal
    assert seen[0].shape == (12, 12) and torch.equal(causal, torch.ones(12, 12, dtype=torch.bool).triu(1))
    with torch.no_grad(), MaskEdit(tiny.model, lambda m: _self_only(m, K), layers=[0]):  # without a Capture: sdpa
        one_layer = tiny.model(ids).logits
    assert not torch.allclose(one_layer, base) and not torch.allclose(one_layer, got)
    assert_restored(tiny.model, ids, base, hooks)


def test_mask_edit_refuses_a_cache(tiny, ids):
    with torch.no_grad(), MaskEdit(tiny.model, lambda m: m), pytest.raises(ValueError, match="use_cache=False"):
        out = tiny.model(ids[:, :6], use_cache=True)
        tiny.model(ids[:, 6:7], past_key_values=out.past_key_values)


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
    mu = x[:, K].mean(dim=0)  # token K's own batch mean
    expected = mu + lam * (x[:, K] - mu) if mode == "centered" else lam * x[:, K]
    torch.testing.assert_close(y[:, K], expected, atol=1e-6, rtol=0)
    if mode == "centered":  # token K keeps its mean across inputs; only its variance grows (by lambda^2)
        torch.testing.assert_close(y[:, K].mean(0), x[:, K].mean(0), atol=1e-5, rtol=0)
        torch.testing.assert_close(y[:, K].var(0), lam ** 2 * x[:, K].var(0), atol=1e-5, rtol=1e-4)
    others = [t for t in range(12) if t != K]
    torch.testing.assert_close(y[:, others], x[:, others], atol=0, rtol=0)
    torch.testing.assert_close(out[:, :K], base[:, :K], atol=1e-5, rtol=0)
    assert_restored(tiny.model, ids, base, hooks)


def test_amplification_pooled_mean_moves_token_k_mean(tiny, ids):
    x, _ = o_proj_inputs(tiny.model, ids)
    y, _ = o_proj_inputs(tiny.model, ids, HeadOutputAmplification(tiny.model, K, 3.0, [0], mu="pooled"))
    mu = x.mean(dim=(0, 1))
    torch.testing.assert_close(y[:, K], mu + 3.0 * (x[:, K] - mu), atol=1e-6, rtol=0)
    assert not torch.allclose(y[:, K].mean(0), x[:, K].mean(0), atol=1e-4)  # why "position" is the default
    with pytest.raises(ValueError, match="mu must be"):
        HeadOutputAmplification(tiny.model, K, 3.0, [0], mu="batch")


def test_self_only_scored_on_later_queries_only(tiny, ids):
    from sinklib.core import metrics
    from sinklib.interpretation import intervention_effects

    # A hand-built head that ignores key K except in row K itself (what the self-only mask forces)
    A = torch.zeros(12, 12)
    A[:, 0] = 1.0
    A[K] = 0.0
    A[K, K] = 1.0
    assert float(metrics.alpha(A, K)) == pytest.approx(1 / (12 - K))  # the mask alone scores 1/(T-k)
    assert float(metrics.alpha(A, K, later_only=True)) == 0.0
    with pytest.raises(ValueError):
        metrics.alpha(A, 11, later_only=True)
    after = intervention_effects.alpha_at(tiny, ids, K, SelfOnlyAttention(tiny.model, K), later_only=True)
    with_self = intervention_effects.alpha_at(tiny, ids, K, SelfOnlyAttention(tiny.model, K))
    torch.testing.assert_close(with_self, (after * (12 - K - 1) + 1) / (12 - K), atol=1e-5, rtol=0)


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
    iv = ResidualOverride(tiny.model, [0], [3], 0.0, min_abs=thr, min_ratio=0.0)
    out = iv._edit(h0, 0)
    big = h0[..., 3].abs() > thr
    assert (out[..., 3][big] == 0).all() and torch.equal(out[..., 3][~big], h0[..., 3][~big])
    assert torch.equal(out[..., :3], h0[..., :3])
    assert_restored(tiny.model, ids, base, hooks)
    with pytest.raises(ValueError):
        ResidualOverride(tiny.model, [0, 1], [3], torch.zeros(1, 1))


def test_residual_override_locates_massive_entries_by_sun_criterion_at_every_position(tiny):
    h = torch.ones(2, 6, 32) * 0.5  # median |h| 0.5 for every token
    h[:, 0, 3] = 2000.0  # first token: 4000x median -> massive
    h[1, 4, 3] = -1800.0  # a delimiter in sequence 1: massive too, at t = 4
    h[0, 2, 3] = 300.0  # > 100 but only 600x median -> not massive under the 1000x rule
    h[0, 5, 7] = 5000.0  # massive, but on a dimension not asked for
    iv = ResidualOverride(tiny.model, [0], [3], values=torch.tensor([[10.0]]), other_values=torch.tensor([[-20.0]]))
    out = iv._edit((h,), 0)[0]
    assert out[0, 0, 3] == 10.0 and out[1, 0, 3] == 10.0  # the first token's own mean
    assert out[1, 4, 3] == -20.0  # the delimiter's own mean
    assert out[0, 2, 3] == 300.0 and out[0, 5, 7] == 5000.0  # below the ratio / another dimension: untouched
    assert iv.edited == 3
    loose = ResidualOverride(tiny.model, [0], [3], 0.0, min_ratio=100.0)._edit((h,), 0)[0]
    assert loose[0, 2, 3] == 0.0  # a looser ratio (stated by the caller) catches it


def test_capture_must_be_outermost(tiny, ids):
    with SelfOnlyAttention(tiny.model, K), pytest.raises(RuntimeError, match="enter Capture first"):
        with Capture(tiny.model, attentions=True):
            pass
    assert tiny.model.config._attn_implementation == "sdpa"


def official_act(head: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
    """A direct transcription of ACT's published rule for one head's (T, T) causal attention (GATECH-EIC/ACT,
    ``atten_process_eval``): sinks = keys j >= 1 with sum_t A[t, j] / (T - j) > threshold; A[:, sinks] *= beta; the
    removed (1 - beta) * sum_sinks A[t, :] goes to the other keys of each row in proportion to their weights."""
    A = head.clone().double()
    T = A.shape[0]
    sinks = [j for j in range(1, T) if float(A[:, j].sum() / (T - j)) > threshold]
    if not sinks:
        return A
    removed = A[:, sinks].sum(dim=1, keepdim=True) * (1 - beta)  # (T, 1)
    others = A.clone()
    others[1:, sinks] = 0.0
    ratios = others / others.sum(dim=1, keepdim=True)
    A[:, sinks] *= beta
    A = A + removed * ratios
    A[0, 0] = 1.0
    return A


def test_act_bias_reproduces_the_official_redistribution_on_a_hand_built_matrix():
    from sinklib.utilization.calibration import act_bias, act_sink_columns

    # 4 tokens; key 2 receives 0.5 from row 2 and 0.5 from row 3: sum / (T - j) = 1.0 / 2 = 0.5 (a sink at 0.3);
    # dividing by T instead (1.0 / 4 = 0.25) would miss it -- a late sink.
    A = torch.tensor([[1.0, 0.0, 0.0, 0.0],
                      [0.6, 0.4, 0.0, 0.0],
                      [0.3, 0.2, 0.5, 0.0],
                      [0.2, 0.1, 0.5, 0.2]])
    allowed = torch.ones(4, 4).tril().bool()[None, None]
    sink = act_sink_columns(A[None, None], allowed, threshold=0.3)
    assert sink[0, 0].tolist() == [False, False, True, False]
    assert not (A[:, 2].sum() / 4 > 0.3)  # the old 1/T rule misses this sink
    logits = torch.log(A.clamp_min(1e-30))[None, None]  # softmax(logits) = A
    got = torch.softmax(logits.double() + act_bias(A[None, None], sink, 0.4).double(), dim=-1)[0, 0]
    want = official_act(A, 0.4, 0.3)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=0)  # the bias is float32
    assert float(got[3, 2]) == pytest.approx(0.4 * 0.5)  # exactly beta * A on the sink: 0.2, not 0.286
    # the plain "log beta on the logits, renormalise" shortcut gives beta A / (1 - (1 - beta) S) instead
    shortcut = torch.softmax(logits[0, 0].double() + torch.tensor([0, 0, float(torch.log(torch.tensor(0.4))), 0]),
                             dim=-1)
    assert float(shortcut[3, 2]) == pytest.approx(0.2 / (1 - 0.6 * 0.5))


def test_attention_calibration_matches_the_official_rule_in_the_model(tiny, ids):
    from sinklib.utilization.calibration import AttentionCalibration

    base, cap0 = run(tiny.model, ids, attentions=True)
    hooks = hooks_left(tiny.model)
    A0 = cap0.get("attentions", 1)  # (B, H, T, T)
    T = A0.shape[-1]
    mass = A0.sum(dim=2) / torch.arange(T, 0, -1)  # (B, H, T)
    threshold = float(mass[..., 1:].quantile(0.8))  # make some later keys count as sinks
    iv = AttentionCalibration(tiny.model, {1: [0, 2]}, beta=0.4, threshold=threshold)
    _, cap = run(tiny.model, ids, iv, attentions=True)
    A = cap.get("attentions", 1)
    for b in range(A0.shape[0]):
        for h in (0, 2):
            torch.testing.assert_close(A[b, h].double(), official_act(A0[b, h], 0.4, threshold), atol=2e-5, rtol=0)
    torch.testing.assert_close(A[:, [1, 3]], A0[:, [1, 3]], atol=1e-6, rtol=0)  # other heads untouched
    torch.testing.assert_close(cap.get("attentions", 0), cap0.get("attentions", 0), atol=0, rtol=0)
    assert iv.damped > 0 and iv.calls == 1
    assert_restored(tiny.model, ids, base, hooks)
