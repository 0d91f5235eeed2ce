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
            st._reduce = lambda i, m, q, k, mask, kw: (masks.append(mask), reduce(i, m, q, k, mask, kw))
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
