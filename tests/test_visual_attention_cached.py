"""12_mllm's shortcuts against the whole forwards they replace, on a tiny random LLaVA (5 language layers, so VAR's
layers 2..3 exist): an edit run on a KV cache of the tokens before the text (:func:`va.edited_nll`) against the
same edit on a whole forward, :func:`va.compare_edits` against its former one-forward-per-condition loop, and
:func:`captions.choice_nll` / :func:`captions.digit_accuracy` (one forward for the ten digit captions) against ten forwards."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sinklib.architectures.mllm import captions, kang_rules
from sinklib.architectures.mllm import visual_attention as va
from sinklib.architectures.mllm import visual_sinks as vs
from sinklib.core.capture import hooks_left
from sinklib.core.loaded import LoadedModel, ModelSpec
from sinklib.models import stitch

TOL = dict(atol=1e-5, rtol=1e-5)


def _reference_nll(model, inputs, labels, extra=None) -> torch.Tensor:
    """The former caption_nll: logits of every position, log-softmax over all of them."""
    with torch.inference_mode():
        if extra is not None:
            with extra:
                logits = model(**inputs).logits
        else:
            logits = model(**inputs).logits
    target = labels[:, 1:]
    logp = torch.log_softmax(logits[:, :-1].float(), -1)
    keep = target != -100
    nll = -logp.gather(-1, target.clamp_min(0)[..., None])[..., 0] * keep
    return nll.sum(-1) / keep.sum(-1).clamp_min(1)


def _reference_compare_edits(lm, pictures, texts, dims, batch_size, draws, seed, tau):
    """The former compare_edits: a profile forward, then one whole forward per condition."""
    nll = {"as is": [], "sinks hidden": [], "VAR": []}
    random_runs = [[] for _ in range(draws)]
    n_sinks = []
    for i in range(0, len(pictures), batch_size):
        x, y = captions.caption_inputs(lm, pictures[i:i + batch_size], texts[i:i + batch_size])
        p = vs.profile_mllm(lm.model, x, dims=dims)
        union = kang_rules.sink_union(p, tau)
        n_sinks.append(union.sum(-1).float())
        keys = torch.zeros_like(x["input_ids"], dtype=torch.bool)
        keys[:, p.image] = union
        nll["as is"].append(_reference_nll(lm.model, x, y))
        nll["sinks hidden"].append(_reference_nll(lm.model, x, y, va.KeyMask(lm.model, keys, p.span[1])))
        for r in range(draws):
            rand = torch.zeros_like(keys)
            rand[:, p.image] = vs.random_like(union, seed=seed + 1000 * r + i)
            random_runs[r].append(_reference_nll(lm.model, x, y, va.KeyMask(lm.model, rand, p.span[1])))
        var = va.VisualAttentionRedistribution(lm.model, dims, p.image, tau=tau)
        nll["VAR"].append(_reference_nll(lm.model, x, y, var))
    mean = {k: torch.cat(v).mean().item() for k, v in nll.items()}
    return mean, [torch.cat(v).mean().item() for v in random_runs], torch.cat(n_sinks)


@pytest.fixture(scope="module")
def standin_like():
    """The tiny hub LLaVA with 5 language layers, loaded as the stand-in is (``source="stitched"``: the
    ``Image:<image>*16\\nCaption:`` prompt of :mod:`sinklib.models.stitch`, byte tokenizer + ``<image>``)."""
    from transformers import LlavaForConditionalGeneration

    from sinklib.models import tiny_random_hub

    torch.manual_seed(0)
    model, processor = tiny_random_hub.llava()
    config = model.config
    config.text_config.num_hidden_layers = 5
    if getattr(config.text_config, "layer_types", None) is not None:
        config.text_config.layer_types = config.text_config.layer_types[:1] * 5
    config.image_seq_length = 16
    model = LlavaForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    text, tok = config.text_config, processor.tokenizer
    spec = ModelSpec("tiny-standin", "mllm", "stitched", "tiny stand-in", "test")
    return LoadedModel(name="tiny-standin", spec=spec, model=model, tokenizer=tok, device=torch.device("cpu"),
                       dtype=torch.float32, n_layers=text.num_hidden_layers, n_heads=text.num_attention_heads,
                       n_kv_heads=text.num_key_value_heads, hidden_size=text.hidden_size, head_dim=text.head_dim,
                       vocab_size=len(tok))


def _pictures(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (28, 28, 3), dtype=np.uint8) for _ in range(n)]


def _tau(lm, x) -> float:
    """A threshold inside the image tokens' phi range, so there are sinks to hide and VAR has rows to edit."""
    prof = vs.profile_mllm(lm.model, x)
    return float(torch.nanquantile(prof.phi[kang_rules.KANG_FIRST_LAYER:].flatten(), 0.8))


def test_edits_on_a_kv_cache_equal_whole_forwards(standin_like):
    lm = standin_like
    model = lm.model
    texts = [" a cat", " a handwritten digit 7", " b"]  # unequal lengths: right padding
    x, y = captions.caption_inputs(lm, _pictures(3), texts)
    assert va.uses_prefix_cache(model) and captions.logits_kwargs(model) == {"logits_to_keep": 1}
    tau = _tau(lm, x)
    run = vs.profile_forward(model, x, use_cache=True, **captions.logits_kwargs(model, y))
    text = run.profile.span[1]
    cache = run.output.past_key_values
    cache.crop(text - cache.get_seq_length())
    prefix = (cache, text)
    baseline = hooks_left(model)
    assert torch.allclose(captions.mean_nll(captions.token_nll(run.output.logits, y), y), _reference_nll(model, x, y), **TOL)
    assert torch.allclose(captions.caption_nll(model, x, y), _reference_nll(model, x, y), **TOL)
    keys = torch.zeros_like(x["input_ids"], dtype=torch.bool)
    keys[:, run.profile.image] = vs.random_like(torch.ones(3, 16, dtype=torch.bool) & (torch.arange(16) < 5), seed=0)
    ref = _reference_nll(model, x, y, va.KeyMask(model, keys, text))
    ours = va.edited_nll(model, x, y, va.KeyMask(model, keys, text), prefix)
    assert torch.allclose(ours, ref, **TOL) and not torch.allclose(ref, _reference_nll(model, x, y), atol=1e-4)
    assert cache.get_seq_length() == text  # cut back for the next edit
    whole = va.VisualAttentionRedistribution(model, run.profile.dims, run.profile.image, tau=tau, summ=0.0, rho=1.0)
    ref = _reference_nll(model, x, y, whole)
    on_cache = va.VisualAttentionRedistribution(model, run.profile.dims, run.profile.image, tau=tau, summ=0.0,
                                                rho=1.0, prefix_sinks=run.token_phi[:, :, :text] >= tau)
    ours = va.edited_nll(model, x, y, on_cache, prefix)
    assert whole.rows_edited > 0 and on_cache.rows_edited == whole.rows_edited
    assert torch.allclose(ours, ref, **TOL) and not torch.allclose(ref, _reference_nll(model, x, y), atol=1e-4)
    assert hooks_left(model) == baseline


def test_compare_edits_equals_one_whole_forward_per_condition(standin_like, monkeypatch):
    lm = standin_like
    pictures, texts = _pictures(5), [stitch.digit_caption(d) for d in range(5)]
    prof = vs.profile_mllm(lm.model, captions.caption_inputs(lm, pictures[:2], texts[:2])[0])
    tau = _tau(lm, captions.caption_inputs(lm, pictures[:2], texts[:2])[0])
    mean, draws, n_sinks = _reference_compare_edits(lm, pictures, texts, prof.dims, 2, 3, 7, tau)
    assert n_sinks.sum() > 0 and abs(mean["VAR"] - mean["as is"]) > 1e-5  # the edits act
    for cached in (True, False):  # on a KV cache (LLaVA), and the whole forwards other models take
        if not cached:
            monkeypatch.setattr(va, "PREFIX_CACHE_TYPES", ())
        out = va.compare_edits(lm, pictures, texts, prof.dims, batch_size=2, draws=3, seed=7, tau=tau)
        assert torch.equal(out.sinks_per_image, n_sinks) and len(out.random_draws["caption"]) == 3
        assert np.allclose(out.random_draws["caption"], draws, **TOL)
        assert all(np.isclose(out.means["caption"][k], mean[k], **TOL) for k in ("as is", "sinks hidden", "VAR"))
        assert np.isclose(out.means["caption"]["random hidden"], sum(draws) / 3, **TOL)
        assert out.var_rows[1] >= out.var_rows[0] > 0  # VAR edited some of the rows it could


def test_one_forward_scores_the_ten_digit_captions(standin_like):
    lm = standin_like
    pictures = _pictures(5)
    choices = [stitch.digit_caption(d) for d in range(10)]
    ours = captions.choice_nll(lm, pictures, choices)
    ref = torch.stack([_reference_nll(lm.model, *captions.caption_inputs(lm, pictures, [c] * 5)) for c in choices])
    assert ours.shape == (10, 5) and torch.allclose(ours, ref, **TOL)
    mixed = [" a cat", " a dog", " two"]  # not one last token apart: one forward per choice
    ref = torch.stack([_reference_nll(lm.model, *captions.caption_inputs(lm, pictures, [c] * 5)) for c in mixed])
    assert torch.allclose(captions.choice_nll(lm, pictures, mixed), ref, **TOL)
    labels = ref.new_tensor(range(5)).long().numpy()
    old = float((torch.stack([torch.cat([_reference_nll(lm.model, *captions.caption_inputs(
        lm, pictures[i:i + 2], [c] * len(pictures[i:i + 2]))) for i in range(0, 5, 2)]) for c in choices])
        .argmin(0).numpy() == labels).mean())
    assert captions.digit_accuracy(lm, pictures, labels, batch_size=2) == old


def test_claims_are_recorded_over_every_stand_in_with_the_control(standin_like):
    """12_mllm's record (kang_claims.judge_over_standins): the four claims, in order, each judged over the stand-ins
    as claims_over_draws / over_draws judge them, with the random-weight control or a note why it could not judge."""
    from dataclasses import replace

    from sinklib.architectures.mllm import kang_claims
    from sinklib.architectures.mllm.image_layout import ImageLayout
    from sinklib.architectures.mllm.protocol import MllmSizes
    from sinklib.core.claims_file import Recorder

    lm = standin_like
    pictures, texts = _pictures(4), [stitch.digit_caption(d) for d in range(4)]
    sizes = MllmSizes(models=("tiny-standin",), heldout_digits=4, zero_shot_digits=0, batch_size=2, random_draws=2,
                      standin_seeds=2, draw_digits=2, draw_random_draws=1)
    prof = vs.profile_mllm(lm.model, captions.caption_inputs(lm, pictures[:2], texts[:2])[0])
    edits = va.compare_edits(lm, pictures, texts, prof.dims, sizes.batch_size, sizes.random_draws, 0)
    layout = ImageLayout.square(16)
    ids = ["kang2025.visual_sink_tokens_exist", "kang2025.masking_sinks_is_harmless", "kang2025.var_helps"]

    alone = kang_claims.judge_over_standins(Recorder("12_mllm", "tiny stand-in", "test"), lm, prof, edits, pictures,
                                            texts, layout, {}, stitch.StitchConfig(), sizes, 0, True, 64)
    expected = kang_claims.claims_over_draws([kang_claims.edit_claims(prof, edits, True, 64)], "")
    assert list(alone.claims) == ids and [c.holds for c in alone.claims.values()] == [c.holds for c in expected]
    assert all(c.control is not None or c.control_note for c in alone.claims.values())
    assert alone.claims[ids[1]].draws_of == "one model; the masking rule compares with each of 2 random-token draw(s)"
    assert alone.background.draws_of == "1 stand-in(s), projector seeds 0-0, the first 2 digits of each"
    assert list(alone.nll_changes) == [0] and len(alone.random_changes[0]) == 2 and alone.background_digits == {0: 2}

    record = Recorder("12_mllm", "tiny stand-in", "test")
    others = {1: replace(lm, name="tiny-standin-1")}
    both = kang_claims.judge_over_standins(record, lm, prof, edits, pictures, texts, layout, others,
                                           stitch.StitchConfig(), sizes, 0, True, 64)
    assert not others and [c.id for c in record.claims] == ids + ["kang2025.sinks_on_background"]
    assert list(both.nll_changes) == [0, 1] and len(both.random_changes[1]) == 1
    assert all(len(c.draws) == 2 for c in both.claims.values()) and len(both.background.draws) == 2
    assert both.claims[ids[0]].draws_of.startswith("2 stand-ins, projector seeds 0-1 (seed 0: 4 digits")
