"""The faster forwards of sinklib.interpretation give what the plain ones gave, on the tiny random Llama.

Each test writes the old path out by hand (a full forward with logits, one capture per statistic, every position
kept, no KV cache) and compares it with the library's path to float rounding: stopping after the last block a
capture needs, ``logits_to_keep=1``, one pass for several statistics, token k's edits run on a KV cache of positions
0..k-1.
"""

import pytest
import torch

from sinklib.core import metrics
from sinklib.core.adapters import find_layers
from sinklib.core.capture import Capture, hooks_left
from sinklib.interpretation import chain, intervention_effects, massive_activations, origin, sun_sites
from sinklib.interpretation.interventions import HeadOutputAmplification, SelfOnlyAttention

K = 5


@pytest.fixture(scope="module")
def ids():
    return torch.randint(0, 256, (7, 16), generator=torch.Generator().manual_seed(5))


def close(a, b, atol=1e-5):
    torch.testing.assert_close(a, b, atol=atol, rtol=1e-5, equal_nan=True)


def test_forward_stops_after_the_last_layer_and_keeps_its_captures(tiny, ids):
    hooks = hooks_left(tiny.model)
    with torch.no_grad(), Capture(tiny.model, kinds=("hidden_states", "head_outputs")) as full:
        tiny.model(ids, use_cache=False)
    with torch.no_grad(), Capture(tiny.model, kinds=("hidden_states", "head_outputs")) as part:
        assert origin.forward(tiny, ids, last_layer=0) is None  # stopped after block 0
    assert sorted(part.records["hidden_states"]) == [0]  # block 1 never ran
    close(part.get("hidden_states", 0), full.get("hidden_states", 0), atol=0)
    close(part.get("head_outputs", 0), full.get("head_outputs", 0), atol=0)
    out = origin.forward(tiny, ids)  # logits of the last position only
    assert out.logits.shape[1] == 1
    close(out.logits[:, -1], tiny.model(ids, use_cache=False).logits[:, -1])
    assert hooks_left(tiny.model) == hooks


def test_variance_and_neuron_by_position_match_full_forwards(tiny, ids):
    parts = find_layers(tiny.model)
    with torch.no_grad(), Capture(tiny.model, kinds=("head_outputs", "mlp_activations", "mlp_inputs")) as cap:
        tiny.model(ids, use_cache=False)
    var = origin.variance_by_position(tiny, ids, [0])
    o = cap.get("head_outputs", 0)
    close(var["before_wo"][0], metrics.position_variance(o))
    close(var["after_wo"][0], metrics.position_variance(parts[0].o_proj(o.flatten(-2))))
    by_pos = origin.neuron_by_position(tiny, ids, 0, 3)
    close(by_pos["activation"], cap.get("mlp_activations", 0)[..., 3].abs().mean(0))
    w = parts[0].mlp.gate_proj.weight[3]
    close(by_pos["cos_gate"], torch.nn.functional.cosine_similarity(cap.get("mlp_inputs", 0), w, dim=-1).mean(0))


def test_disparity_and_first_values_in_one_pass(tiny, ids):
    dims = [1, 7]
    by_layer, first = origin.disparity_and_first_values(tiny, ids, dims, batch_size=3)
    close(first, massive_activations.first_token_values(tiny, ids, dims, batch_size=3), atol=1e-5)
    assert by_layer.keys() == origin.disparity_by_layer(tiny, ids, batch_size=3).keys()
    with torch.no_grad(), Capture(tiny.model, kinds=("attentions", "hidden_states")) as cap:
        tiny.model(ids, use_cache=False)
    h = cap.stack("hidden_states")
    close(by_layer["dom_first"], metrics.dom_ratio(h[:, :, 0]).mean(1))
    close(by_layer["norm_rest"], h[:, :, 1:].norm(dim=-1).mean(-1).mean(1))
    close(by_layer["alpha_first"], metrics.alpha(cap.stack("attentions"), 0).mean(dim=(1, 2)))
    link = chain.disparity_link(tiny, ids, dims, None, None, {"dom_ratio_first_after_rmsnorm": {"value": 263}}, 3)
    close(link.first_values, first, atol=0)


def _token_state_by_hand(lm, ids, k, intervention=None):
    """The old token_state: every position of every layer captured, in one forward with logits."""
    with torch.no_grad(), Capture(lm.model, kinds=("hidden_states", "keys")) as cap:
        if intervention is not None:
            intervention.__enter__()
        try:
            lm.model(ids, use_cache=False)
        finally:
            if intervention is not None:
                intervention.__exit__(None, None, None)
    h, keys = cap.stack("hidden_states").float(), cap.stack("keys").float()
    k0, kk = keys[..., 0, :], keys[..., k, :]
    return {"dom_k": metrics.dom_ratio(h[:, :, k]).mean(1), "dom_0": metrics.dom_ratio(h[:, :, 0]).mean(1),
            "key_cos": torch.nn.functional.cosine_similarity(kk, k0, dim=-1).mean(dim=(1, 2)),
            "key_norm_ratio": (kk.norm(dim=-1) / k0.norm(dim=-1).clamp_min(1e-12)).mean(dim=(1, 2))}


def test_self_only_effect_reads_token_state_from_its_own_forwards(tiny, ids):
    effect = intervention_effects.self_only_effect(tiny, ids, K, batch_size=3)
    for state, iv in ((effect.state_before, None), (effect.state_after, SelfOnlyAttention(tiny.model, K))):
        expected = _token_state_by_hand(tiny, ids, K, iv)
        assert state.keys() == expected.keys()
        for name in expected:
            close(state[name], expected[name])
        for name, value in intervention_effects.token_state(tiny, ids, K, iv).items():
            close(value, expected[name])
    by_hand = intervention_effects.alpha_at(tiny, ids, K, SelfOnlyAttention(tiny.model, K), 3, later_only=True)
    close(effect.alpha_after, by_hand)
    close(effect.alpha_before_per_seq,
          intervention_effects.alpha_at(tiny, ids, K, None, 7, later_only=True, per_sequence=True))


def test_token_state_under_amplification_keeps_one_batch(tiny, ids):
    """HeadOutputAmplification's mu_k is the batch mean: token_state runs every window in one forward, as before."""
    iv = HeadOutputAmplification(tiny.model, K, 8.0, [0])
    state = intervention_effects.token_state(tiny, ids, K, iv)
    expected = _token_state_by_hand(tiny, ids, K, HeadOutputAmplification(tiny.model, K, 8.0, [0]))
    for name in expected:
        close(state[name], expected[name])


@pytest.mark.parametrize("k", [0, 1, K, 14])
def test_amplification_on_a_kv_cache_equals_full_forwards(tiny, ids, k):
    edits = [(4.0, "centered"), (4.0, "scale"), (32.0, "centered")]
    hooks = hooks_left(tiny.model)
    got = intervention_effects.amplified_alpha(tiny, ids, k, edits, [0], batch_size=3)
    for (lam, mode), a in zip(edits, got):
        full = []
        for start in range(0, len(ids), 3):  # the old path: full forwards, mu over the same batches of 3
            with torch.no_grad(), Capture(tiny.model, attentions=True) as cap, \
                    HeadOutputAmplification(tiny.model, k, lam, [0], mode):
                tiny.model(ids[start:start + 3], use_cache=False)
            full.append(metrics.alpha(cap.stack("attentions"), k, later_only=True))  # (L, B, H)
        close(a, torch.cat(full, dim=1))
    assert hooks_left(tiny.model) == hooks
    with pytest.raises(ValueError):
        intervention_effects.amplified_alpha(tiny, ids, 15, edits, [0])


def test_amplification_per_window_uses_the_given_baseline(tiny, ids):
    lambdas = [1.0, 4.0]
    before = intervention_effects.alpha_at(tiny, ids, K, batch_size=3, later_only=True, per_sequence=True)
    given = intervention_effects.amplification_per_window(tiny, ids, K, lambdas, [0], 3, alpha_before=before)
    measured = intervention_effects.amplification_per_window(tiny, ids, K, lambdas, [0], 3)
    for name in given:
        close(given[name], measured[name])
        assert given[name].shape == (2, len(ids))
    close(given[intervention_effects.CENTRED][0], before[1:].mean(dim=(0, 2)))


def test_massive_means_stop_after_the_last_layer(tiny, ids):
    layers, dims = [0], [1, 7]
    means = massive_activations.massive_means(tiny, ids, layers, dims, min_ratio=1.0, batch_size=3)
    with torch.no_grad(), Capture(tiny.model, hidden_states=True) as cap:
        tiny.model(ids, use_cache=False)
    h = cap.get("hidden_states", 0).double()
    close(means.first[0], h[:, 0, dims].mean(0).float())


# ----------------------------------------------------------------------------------------------- one shared pass
def _old_super_neurons(lm, ids, batch_size):
    """The old find_super_neurons: its own forwards (with logits), thresholds off -> (first, rest, median) per layer."""
    out = []
    firsts, rests, medians = {}, {}, {}
    for start in range(0, len(ids), batch_size):
        with torch.no_grad(), Capture(lm.model, mlp_activations=True) as cap:
            lm.model(ids[start:start + batch_size], use_cache=False)
        for i in range(lm.n_layers):
            a = cap.get("mlp_activations", i).float().abs()
            firsts.setdefault(i, []).append(a[:, 0])
            rests.setdefault(i, []).append(a[:, 1:].flatten(0, 1).half())
            medians.setdefault(i, []).append(a.median())
    for i in range(lm.n_layers):
        rest = torch.cat(rests[i]).float()
        k = 1 + int(round(origin.REST_QUANTILE * (rest.shape[0] - 1)))
        out.append((torch.cat(firsts[i]).mean(0), rest.kthvalue(k, dim=0).values, torch.stack(medians[i]).mean()))
    return out


def _old_lock_and_bias(lm, ids):
    """The old lock_in and sink_as_bias: one forward of ``ids`` each, every head by hand."""
    with torch.no_grad(), Capture(lm.model, kinds=("attentions", "queries", "keys", "values")) as cap:
        lm.model(ids, use_cache=False)
    group = lm.n_heads // lm.n_kv_heads
    cos, pos, ratio, spread = (torch.zeros(lm.n_layers, lm.n_heads) for _ in range(4))
    for i in range(lm.n_layers):
        q, k0 = cap.get("queries", i).float(), cap.get("keys", i).float()[:, :, 0]
        A = cap.get("attentions", i).float()
        v = cap.get("values", i).float().repeat_interleave(group, dim=1)
        vn = v.norm(dim=-1)
        ratio[i] = (vn[..., 0] / vn[..., 1:].mean(-1)).mean(0)
        c = A[..., 1:, 0, None] * v[:, :, None, 0]
        dev = (c - c.mean(dim=2, keepdim=True)).norm(dim=-1).mean(-1)
        spread[i] = (dev / c.norm(dim=-1).mean(-1).clamp_min(1e-12)).mean(0)
        for h in range(lm.n_heads):
            kh, qh = k0[:, h // group], q[:, h, 1:]
            top = torch.linalg.svd(qh.flatten(0, 1), full_matrices=False).Vh[0]
            cos[i, h] = torch.nn.functional.cosine_similarity(top, kh.mean(0), dim=0).abs()
            pos[i, h] = (torch.einsum("ntd,nd->nt", qh, kh) > 0).float().mean()
    alpha = metrics.alpha(cap.stack("attentions"), 0).mean(1)
    return {"key_query_cos": cos, "positive_fraction": pos, "alpha_first": alpha}, \
        {"value_norm_ratio": ratio, "sink_term_spread": spread, "alpha_first": alpha}


@pytest.mark.parametrize("head_seqs", [2, 4, 16])  # within the first batch, across two batches, more than all
def test_natural_pass_equals_the_separate_measurements(tiny, ids, head_seqs):
    dims, bs = [1, 7], 3
    shared = chain.natural_pass(tiny, ids, dims, K, min_ratio=1.0, batch_size=bs, head_seqs=head_seqs)
    # super neurons: every neuron with the thresholds off, from the shared statistic and from the old forwards
    found = {(s.layer, s.neuron): s for s in origin.measure(tiny, ids, [origin.SuperNeuronStats(tiny, 0.0, 0.0)], bs)[0]}
    for i, (first, rest, med) in enumerate(_old_super_neurons(tiny, ids, bs)):
        for f in (0, 17, 99):
            assert found[i, f].first_abs == pytest.approx(float(first[f]), rel=1e-5)
            assert found[i, f].rest_abs == pytest.approx(float(rest[f]), rel=1e-3)  # float16 storage, both paths
            assert found[i, f].vs_median == pytest.approx(float(first[f] / med), rel=1e-5)
    assert [(s.layer, s.neuron) for s in shared.super_neurons] == \
        [(s.layer, s.neuron) for s in origin.find_super_neurons(tiny, ids, batch_size=bs)]
    # disparity and the first token's values
    by_layer, first = shared.disparity
    close(first, massive_activations.first_token_values(tiny, ids, dims, batch_size=bs))
    for name, value in origin.disparity_by_layer(tiny, ids, batch_size=bs).items():
        close(by_layer[name], value)
    # per-head statistics on the first head_seqs windows, one forward of them as the old calls ran
    lock, bias = _old_lock_and_bias(tiny, ids[:head_seqs])
    for name in lock:
        close(shared.lock[name], lock[name], atol=1e-4)
    for name in bias:
        close(shared.sink_as_bias[name], bias[name], atol=1e-4)
    # intervention (i)'s "before": alpha_k of the later queries per window and token k's state
    alpha, state = shared.before_k
    close(alpha, intervention_effects.alpha_at(tiny, ids, K, None, bs, later_only=True, per_sequence=True))
    for name, value in _token_state_by_hand(tiny, ids, K).items():
        close(state[name], value)
    # the means of section 7, for layers chosen afterwards, equal a pass over those layers only
    for layers in ([0], [1], [0, 1]):
        got, want = shared.massive_means.select(layers), massive_activations.massive_means(tiny, ids, layers, dims,
                                                                                          1.0, bs)
        for name in ("first", "first_sd", "other", "other_count"):
            torch.testing.assert_close(getattr(got, name), getattr(want, name), equal_nan=True)
        assert list(got.other_tokens.items()) == list(want.other_tokens.items())
    # where Sun et al.'s criterion holds, layer by layer, as a pass of its own
    alone = sun_sites.sun_sites(tiny, ids, bs)
    for name in ("first", "later_share", "later_per_seq", "first_ratio"):
        assert getattr(shared.sun_sites, name) == pytest.approx(getattr(alone, name), rel=1e-5), name


def test_massive_means_match_the_old_loop(tiny, ids):
    """massive_means against its old loop: one capture per batch, sums in float64, tokens counted batch by batch."""
    from collections import Counter

    layers, dims, bs = [1, 0], [1, 7], 3
    first, sq, other, count = (torch.zeros(2, 2, dtype=torch.float64) for _ in range(4))
    tokens, n = Counter(), 0
    for start in range(0, len(ids), bs):
        batch = ids[start:start + bs]
        with torch.no_grad(), Capture(tiny.model, hidden_states=True, layers=layers) as cap:
            tiny.model(batch, use_cache=False)
        for row, layer in enumerate(layers):
            h = cap.get("hidden_states", layer).double()
            first[row] += h[:, 0, dims].sum(0)
            sq[row] += (h[:, 0, dims] ** 2).sum(0)
            hit = metrics.massive_mask(h, min_ratio=1.0)[:, 1:, dims]  # the sites ResidualOverride edits
            other[row] += (h[:, 1:, dims] * hit).sum(dim=(0, 1))
            count[row] += hit.sum(dim=(0, 1))
            tokens.update(batch[:, 1:][hit.any(-1)].tolist())
        n += len(batch)
    means = massive_activations.massive_means(tiny, ids, layers, dims, 1.0, bs)
    close(means.first, (first / n).float())
    close(means.first_sd, (sq / n - (first / n) ** 2).clamp_min(0).sqrt().float())
    torch.testing.assert_close(means.other, torch.where(count > 0, other / count.clamp_min(1),
                                                        torch.full_like(other, float("nan"))).float(), equal_nan=True)
    assert means.other_count.tolist() == count.long().tolist()
    assert list(means.other_tokens.items()) == tokens.most_common()


def test_nll_batch_size_keeps_cpu_forwards_near_a_thousand_tokens(tiny):
    assert massive_activations.nll_batch_size(tiny, 256, 20) == 4
    assert massive_activations.nll_batch_size(tiny, 64, 20) == 16
    assert massive_activations.nll_batch_size(tiny, 4096, 20) == 1
    assert massive_activations.nll_batch_size(tiny, 64, 8) == 8
