"""O(N)-memory sink statistics equal the statistics of eager `output_attentions` (within 1e-5)."""

import pytest
import torch
from transformers import AttentionInterface

from sinklib.core import metrics
from sinklib.core.attnstats import AttentionStats
from sinklib.core.capture import Capture, hooks_left


def both(model, ids, chunk, **kwargs):
    """(reference probabilities (L, B, H, T, T) from eager weights, AttentionStats) for one forward."""
    with torch.no_grad():
        with Capture(model, attentions=True) as cap:
            ref_logits = model(ids, **kwargs).logits
        with AttentionStats(model, entropy=True, chunk=chunk) as st:
            logits = model(ids, **kwargs).logits
    real = kwargs["attention_mask"].bool() if "attention_mask" in kwargs else torch.ones(ids.shape, dtype=torch.bool)
    torch.testing.assert_close(logits[real], ref_logits[real], atol=1e-4, rtol=1e-4)  # outputs: the backend's
    return cap.stack("attentions"), st


def assert_same_stats(A, st):
    key_mass = torch.stack([st.key_mass(i) for i in st.layers])
    ref = metrics.sink_mass(A)
    torch.testing.assert_close(key_mass, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(st.alpha([0, 3])[..., 0], metrics.alpha(A, 0), atol=1e-5, rtol=0)
    entropy = torch.stack([st.entropy_by_query(i) for i in st.layers])
    ref_entropy = -(A * torch.log(A.clamp_min(1e-38))).sum(-1)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("chunk", [1, 7, 64])
def test_tiny_llama_gqa_any_chunk(tiny, chunk):
    ids = torch.randint(0, 256, (2, 29), generator=torch.Generator().manual_seed(0))
    A, st = both(tiny.model, ids, chunk)
    assert_same_stats(A, st)
    assert st.learned_sink_mass(0) is None


def test_padding_mask(tiny):
    ids = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :6] = 0  # left padding
    A, st = both(tiny.model, ids, 5, attention_mask=mask)
    col = torch.stack([torch.cat(st.col_sum[i]) for i in st.layers])
    real_queries = mask.bool()[None, :, None, :, None]  # padded queries' rows are garbage in eager, 0 here
    torch.testing.assert_close(col, (A * real_queries).sum(dim=-2), atol=1e-5, rtol=0)
    assert (torch.cat(st.visible[0])[0, :6] == 0).all()  # no real query sees the padding
    real = st.key_mass(0)[0, :, 6:]
    assert torch.isfinite(real).all()


def test_sliding_window_softcap_gemma3(tiny_gemma3):
    model = tiny_gemma3(sliding_window=5, softcap=20.0)
    ids = torch.randint(0, 100, (2, 17))
    A, st = both(model, ids, 4)
    col = torch.stack([torch.cat(st.col_sum[i]) for i in st.layers])
    torch.testing.assert_close(col, A.sum(dim=-2), atol=1e-5, rtol=0)
    assert torch.cat(st.visible[0])[0, 0] == 5  # sliding layer: key 0 is seen by queries 0..4 only
    assert torch.cat(st.visible[1])[0, 0] == 17


def test_learned_sink_logits_are_reported():
    from transformers import GptOssConfig, GptOssForCausalLM

    config = GptOssConfig(
        vocab_size=100, hidden_size=32, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1, sliding_window=6,
        layer_types=["sliding_attention", "full_attention"],
    )
    torch.manual_seed(0)
    model = GptOssForCausalLM(config).eval()
    for layer in model.model.layers:
        torch.nn.init.normal_(layer.self_attn.sinks, std=2.0)
    model.set_attn_implementation("eager")
    ids = torch.randint(0, 100, (2, 12))
    A, st = both(model, ids, 3)
    for i in st.layers:
        rows = A[i].sum(-1)  # (B, H, T): < 1, the rest went to the learned sink
        torch.testing.assert_close(st.learned_sink_mass(i), 1 - rows, atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.cat(st.col_sum[i]), A[i].sum(-2), atol=1e-5, rtol=0)
    assert float(st.learned_sink_mass(0).mean()) > 0.01


def test_smollm2_at_512(smollm2):
    ids = torch.randint(0, smollm2.vocab_size, (1, 512), generator=torch.Generator().manual_seed(0))
    A, st = both(smollm2.model, ids, None)
    assert_same_stats(A, st)


def test_fused_output_equals_the_backend_in_prefill_and_decode(tiny):
    """The output AttentionStats computes in its own pass is the backend's: a prompt and three cached decode steps
    give the same logits and the same statistics with ``fused=False`` (sdpa computes the output)."""
    from transformers import DynamicCache

    ids = torch.randint(0, 256, (2, 15), generator=torch.Generator().manual_seed(3))
    runs, delegated = {}, {}
    for fused in (True, False):
        with torch.no_grad(), AttentionStats(tiny.model, fused=fused) as st:
            delegate, delegated[fused] = st._switch.delegate, []
            st._switch.delegate = lambda *a, _d=delegate, _n=delegated[fused], **k: (_n.append(1), _d(*a, **k))[1]
            cache = DynamicCache(config=tiny.model.config)
            logits = [tiny.model(ids[:, :12], past_key_values=cache, use_cache=True).logits[:, -1]]
            logits += [tiny.model(ids[:, t:t + 1], past_key_values=cache, use_cache=True).logits[:, -1]
                       for t in range(12, 15)]
        runs[fused] = torch.stack(logits), [st.col_sum[0][i] for i in range(4)]
    assert not delegated[True] and len(delegated[False]) == 4 * tiny.n_layers  # the fused pass really ran
    torch.testing.assert_close(runs[True][0], runs[False][0], atol=1e-5, rtol=1e-5)
    for a, b in zip(runs[True][1], runs[False][1]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


@pytest.mark.parametrize("padded", [False, True])
def test_chosen_keys_come_from_the_flash_kernel_and_equal_the_full_statistics(tiny, padded):
    """keys=[0, 3]: torch's CPU flash kernel gives the output and lse, p_tj = exp(l_tj - lse_t) gives those keys --
    equal to the full blocked statistics and to eager probabilities, logits equal to the plain model's; other keys
    are NaN and asking alpha for them is an error."""
    ids = torch.randint(0, 256, (2, 21), generator=torch.Generator().manual_seed(5))
    kwargs = {}
    if padded:
        mask = torch.ones_like(ids)
        mask[1, :4] = 0
        kwargs["attention_mask"] = mask
    with torch.no_grad():
        with Capture(tiny.model, attentions=True) as cap:
            tiny.model(ids, **kwargs)
        ref_logits = tiny.model(ids, **kwargs).logits
        with AttentionStats(tiny.model, keys=[0, 3]) as st:
            fast = []
            reduce_lse = st._reduce_lse
            st._reduce_lse = lambda *a: (fast.append(1), reduce_lse(*a))[1]
            logits = tiny.model(ids, **kwargs).logits
    assert len(fast) == tiny.n_layers
    real = kwargs["attention_mask"].bool() if padded else torch.ones(ids.shape, dtype=torch.bool)
    torch.testing.assert_close(logits[real], ref_logits[real], atol=1e-5, rtol=1e-5)
    A = cap.stack("attentions")  # (L, B, H, T, T)
    if padded:
        A = A * real[None, :, None, :, None]  # padded queries' rows are garbage in eager, 0 here
    col = torch.stack([torch.cat(st.col_sum[i]) for i in st.layers])
    torch.testing.assert_close(col[..., [0, 3]], A.sum(dim=-2)[..., [0, 3]], atol=1e-5, rtol=0)
    if not padded:
        ref = torch.stack([metrics.alpha(A, 0), metrics.alpha(A, 3)], dim=-1)  # (L, B, H, 2)
        torch.testing.assert_close(st.alpha([0, 3]), ref, atol=1e-5, rtol=0)
    assert torch.isnan(st.key_mass(0)[..., 1]).all()
    with pytest.raises(ValueError, match=r"keys \[1\] were not measured"):
        st.alpha([1])


def test_chosen_keys_in_cached_decode_and_where_the_kernel_does_not_apply(tiny, tiny_gemma3):
    """One query per step with a cache (mask None: every key), and Gemma-3's soft-capping (the kernel cannot):
    alpha of key 0 equals the full statistics'."""
    from transformers import DynamicCache

    ids = torch.randint(0, 256, (1, 14), generator=torch.Generator().manual_seed(6))
    got = {}
    for keys in ([0], None):
        with torch.no_grad(), AttentionStats(tiny.model, keys=keys) as st:
            cache = DynamicCache(config=tiny.model.config)
            tiny.model(ids[:, :11], past_key_values=cache, use_cache=True)
            for t in range(11, 14):
                tiny.model(ids[:, t:t + 1], past_key_values=cache, use_cache=True)
        got[keys is None] = [st.col_sum[0][i][..., 0] for i in range(4)]
    for a, b in zip(*got.values()):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    model = tiny_gemma3(sliding_window=5, softcap=20.0)
    ids = torch.randint(0, 100, (2, 17))
    with torch.no_grad():
        with AttentionStats(model, keys=[0]) as st:
            model(ids)
        with AttentionStats(model) as full:
            model(ids)
    torch.testing.assert_close(st.alpha([0]), full.alpha([0]), atol=1e-6, rtol=0)


def test_under_an_outer_switch_the_backend_computes_the_output(tiny):
    """Nested inside another attention switch (an intervention, a variant) the statistics must not replace that
    switch's output: here the outer function doubles every output, so the logits must change with it."""
    from sinklib.core.attention_switch import AttentionSwitch

    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(4))
    calls, outer = [], []  # outer[-1]: the switch in force, whose previous backend `doubled` calls

    def doubled(module, *args, **kwargs):
        calls.append(1)
        out, w = outer[-1].delegate(module, *args, **kwargs)
        return 2 * out, w

    with torch.no_grad():
        outer.append(AttentionSwitch(tiny.model, "doubled", doubled))
        with outer[-1]:
            ref = tiny.model(ids).logits
        n = len(calls)
        outer.append(AttentionSwitch(tiny.model, "doubled", doubled))
        with outer[-1], AttentionStats(tiny.model) as st:
            got = tiny.model(ids).logits
    assert len(calls) == 2 * n and st.layers == list(range(tiny.n_layers))
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


def test_cleans_up(tiny):
    before = set(AttentionInterface._global_mapping)
    with pytest.raises(RuntimeError, match="boom"), AttentionStats(tiny.model):
        raise RuntimeError("boom")
    assert set(AttentionInterface._global_mapping) == before
    assert tiny.model.config._attn_implementation == "sdpa" and hooks_left(tiny.model) == 0
    with pytest.raises(RuntimeError, match="entropy"):
        st = AttentionStats(tiny.model)
        with st:
            tiny.model(torch.zeros(1, 4, dtype=torch.long))
        st.entropy_by_query(0)


def test_static_cache_prefill_with_no_mask_matches_the_model(tiny):
    """sdpa gets mask None and 32 cache slots for a 12-token prompt: the statistics must follow sdpa's is_causal
    (query t sees keys 0..t), not treat the empty slots as earlier tokens."""
    from transformers import StaticCache

    ids = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        with Capture(tiny.model, attentions=True) as cap:
            tiny.model(ids, use_cache=False)
        masks = []
        with AttentionStats(tiny.model) as st:
            reduce = st._reduce
            st._reduce = lambda i, m, q, k, mask, kw, **v: (masks.append(mask), reduce(i, m, q, k, mask, kw, **v))[1]
            tiny.model(ids, past_key_values=StaticCache(config=tiny.model.config, max_cache_len=32), use_cache=True)
    assert masks[0] is None  # the case in question really arises
    for layer in range(tiny.n_layers):
        mass = st.key_mass(layer)  # (1, H, 32)
        torch.testing.assert_close(mass[..., :12], metrics.sink_mass(cap.get("attentions", layer)), atol=1e-5,
                                   rtol=0)
        assert torch.isnan(mass[..., 12:]).all()  # empty slots: seen by no query


def test_backends_whose_masks_cannot_be_read_are_refused(tiny):
    from sinklib.core.errors import InputError

    cfg = tiny.model.config
    old = cfg._attn_implementation
    try:
        cfg._attn_implementation = "flash_attention_2"
        with pytest.raises(InputError, match="flash_attention_2.*sdpa"):
            AttentionStats(tiny.model).__enter__()
    finally:
        cfg._attn_implementation = old
    assert tiny.model.config._attn_implementation == old
    st = AttentionStats(tiny.model)
    q, k = torch.randn(1, 4, 6, 16), torch.randn(1, 2, 6, 16)
    module = tiny.model.model.layers[0].self_attn
    with pytest.raises(InputError, match="4-D attention mask"):
        st._reduce(0, module, q, k, torch.ones(1, 6, dtype=torch.bool), {})  # flash's 2-D padding mask
    st._reduce(0, module, q, k, None, {"sliding_window": 6})  # a window as long as the keys cuts nothing: fine
    with pytest.raises(InputError, match="sliding window of 4"):
        st._reduce(0, module, q, k, None, {"sliding_window": 4})


def test_context_sweep_keeps_every_window(tiny):
    from sinklib.core import analysis

    sweep = analysis.first_token_mass_by_length(tiny, [16, 32], seed=0, progress=False, n_windows=3)
    L, H = tiny.n_layers, tiny.n_heads
    assert sweep.by_window.shape == (2, 3, L, H) and sweep.lengths == [16, 32]
    torch.testing.assert_close(sweep.alpha_first, sweep.by_window.mean(dim=1))
    lo, hi = sweep.range_over_windows()
    mean = sweep.mean_over()
    assert all(a <= m <= b for a, m, b in zip(lo, mean, hi)) and lo[0] < hi[0]  # windows differ


@pytest.mark.parametrize("model_kind", ["llama", "gemma3"])
def test_every_length_equals_its_own_forward(tiny, model_kind):
    """The sweep reads length n off the first n queries of one long forward; that must equal alpha_0 of a separate
    eager forward of the window's first n tokens -- for Llama (flash-kernel path) and for Gemma-3 with a sliding
    window and soft-capping (blocked path)."""
    from sinklib.core import analysis
    from sinklib.core.data import text_windows

    lm = tiny if model_kind == "llama" else _gemma3_lm(tiny)
    sweep = analysis.first_token_mass_by_length(lm, [8, 24, 16], seed=1, progress=False, n_windows=2)
    assert sweep.lengths == [8, 16, 24]
    windows = text_windows(lm.tokenizer, 2, 24, 1, "bible")
    for w, ids in enumerate(windows):
        for i, n in enumerate(sweep.lengths):
            with torch.no_grad(), Capture(lm.model, attentions=True) as cap:
                lm.model(ids[None, :n])
            attn = cap.stack("attentions")[:, 0]  # (L, H, n, n)
            ref = torch.stack([metrics.alpha(attn[j], 0, window=win) for j, win in enumerate(sweep.windows)])
            torch.testing.assert_close(sweep.by_window[i, w], ref, atol=1e-5, rtol=0)


def test_sliding_layers_average_over_the_queries_that_see_the_first_key(tiny):
    """Gemma-3's sliding layers: only the first W queries see key 0. alpha_0 there is the mean over those (Gu's
    T - k generalised); averaging over all n queries would make it fall with n by construction."""
    from sinklib.core import analysis

    lm = _gemma3_lm(tiny)
    assert analysis.layer_windows(lm) == [5, None]
    sweep = analysis.first_token_mass_by_length(lm, [5, 24], seed=1, progress=False, n_windows=1)
    assert sweep.windows == [5, None] and sweep.sliding_layers == [0]
    # the sliding layer's value at 24 is read off the same 5 queries as at 5: identical
    torch.testing.assert_close(sweep.by_window[1, 0, 0], sweep.by_window[0, 0, 0])
    attn = torch.zeros(1, 8, 8)
    attn[0, :, 0] = 1.0  # every query that sees key 0 gives it everything
    assert metrics.alpha(attn, 0, window=3).item() == 1.0 and metrics.alpha(attn, 0).item() == 1.0
    attn[0, 3:, 0] = 0.0  # a window of 3: queries 3.. cannot see key 0
    assert metrics.alpha(attn, 0, window=3).item() == 1.0 and metrics.alpha(attn, 0).item() == 3 / 8
    assert sweep.uniform_over(24) == pytest.approx(
        (analysis.ContextSweep.uniform_baseline(5) + analysis.ContextSweep.uniform_baseline(24)) / 2)


def _gemma3_lm(template):
    """A tiny random Gemma-3 (sliding window 5, soft-capping 20) behind the tiny model's byte tokenizer."""
    import dataclasses

    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=template.vocab_size, hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                              sliding_window=5, layer_types=["sliding_attention", "full_attention"],
                              attn_logit_softcapping=20.0)
    torch.manual_seed(0)
    model = Gemma3ForCausalLM(config).eval()
    return dataclasses.replace(template, model=model, n_layers=2, n_heads=2, n_kv_heads=1, hidden_size=32,
                               head_dim=16)
