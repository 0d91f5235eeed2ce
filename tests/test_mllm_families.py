"""12_mllm on the GPU profile's other MLLM families: Idefics3 (SmolVLM-Instruct's class: a picture cut into crops plus a
global view, 5-D ``pixel_values``, a token count that is no square) and Qwen2-VL (pictures sized by pixel count, any
aspect ratio) -- where the image tokens lie on the picture, how many a digit becomes, and a capture that keeps only
what the profile reads. Tiny random models with their real processors (:mod:`sinklib.models.tiny_random_hub`)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from matplotlib.patches import Rectangle

from sinklib.architectures.mllm import captions, kang_rules, visual_sink_plots
from sinklib.architectures.mllm import image_layout as il
from sinklib.architectures.mllm import visual_attention as va
from sinklib.architectures.mllm import visual_sinks as vs
from sinklib.core.adapters import adapter_for
from sinklib.core.capture import Capture
from sinklib.core.loaded import LoadedModel, ModelSpec
from sinklib.models import tiny_random_hub


def _loaded(build, folder, dtype=torch.float32) -> LoadedModel:
    """A tiny hub MLLM with its processor saved in ``folder``, loaded as a hub model would be (the name is the
    folder, where ``caption_inputs`` and ``image_layout`` read the processor from)."""
    torch.manual_seed(0)
    model, processor = build()
    processor.save_pretrained(folder)
    model = model.eval().to(dtype)
    text, tok = model.config.get_text_config(), processor.tokenizer
    spec = ModelSpec(str(folder), "mllm", "hub", folder.name, "test", offline=False)
    return LoadedModel(name=str(folder), spec=spec, model=model, tokenizer=tok, device=torch.device("cpu"),
                       dtype=dtype, n_layers=text.num_hidden_layers, n_heads=text.num_attention_heads,
                       n_kv_heads=text.num_key_value_heads, hidden_size=text.hidden_size,
                       head_dim=text.hidden_size // text.num_attention_heads, vocab_size=len(tok))


@pytest.fixture(scope="module")
def idefics3(tmp_path_factory) -> LoadedModel:
    return _loaded(tiny_random_hub.idefics3, tmp_path_factory.mktemp("idefics3"))


@pytest.fixture(scope="module")
def qwen2_vl(tmp_path_factory) -> LoadedModel:
    return _loaded(tiny_random_hub.qwen2_vl, tmp_path_factory.mktemp("qwen2-vl"))


def _digits(n: int, h: int = 8, w: int = 8) -> list[np.ndarray]:
    """White pictures with a dark stroke down the right half (8 x 8 like the digits unless asked)."""
    out = []
    for i in range(n):
        x = np.full((h, w, 3), 255, np.uint8)
        x[1:-1, w // 2 + i % 2:-1] = 30
        out.append(x)
    return out


# --------------------------------------------------------------------------------------------------- the layout
def test_layout_puts_each_crop_where_it_lies_and_the_global_view_after():
    layout = il.ImageLayout(tile=(2, 2), crops=(2, 3), overview=(2, 2))
    assert layout.grid == (4, 6) and layout.n_tokens == 2 * 3 * 4 + 4
    values = torch.arange(layout.n_tokens)
    grid, over = layout.split(values)
    assert grid[0].tolist() == [0, 1, 4, 5, 8, 9]  # row 0 of crops (0, 0), (0, 1), (0, 2)
    assert grid[3].tolist() == [14, 15, 18, 19, 22, 23]  # row 1 of crops (1, 0), (1, 1), (1, 2)
    assert over.tolist() == [[24, 25], [26, 27]]
    assert torch.equal(layout.join(grid, over), values)
    drawn = layout.picture(values)
    assert drawn.shape == (4, 6 + 1 + 2) and np.isnan(drawn[:, 6]).all() and np.isnan(drawn[2:, 7:]).all()
    assert il.ImageLayout.square(36) == il.ImageLayout((6, 6))
    with pytest.raises(ValueError, match="not a square"):
        il.ImageLayout.square(1377)  # SmolVLM-Instruct's 17 tiles x 81 tokens
    assert il.qwen2_vl_layout((1, 6, 10), merge=2) == il.ImageLayout((3, 5))  # a wide picture: 3 x 5 tokens
    smolvlm = il.idefics3_layout((8, 17, 3, 384, 384), patch=14, scale=3, crops=(4, 4))
    assert smolvlm.n_tokens == 1377 and smolvlm.tile == smolvlm.overview == (9, 9) and smolvlm.grid == (36, 36)


@pytest.mark.parametrize("size, crops", [((8, 8), (2, 2)), ((8, 16), (1, 2)), ((16, 8), (2, 1))])
def test_idefics3_tokens_of_square_and_non_square_pictures(idefics3, size, crops):
    """The tiny Idefics3 cuts the picture into 32 px crops of 4 x 4 tokens plus a global view: a square one 2 x 2 + 1
    tiles (80 tokens), a wide one 1 x 2 + 1 (48: no square number); pixel_values are (B, tiles, 3, 32, 32)."""
    pictures = _digits(2, *size)
    inputs, _ = captions.caption_inputs(idefics3, pictures, [" a", " b"])
    assert inputs["pixel_values"].shape == (2, crops[0] * crops[1] + 1, 3, 32, 32)
    layout = il.image_layout(idefics3, inputs, size)
    assert layout == il.ImageLayout((4, 4), crops=crops, overview=(4, 4))
    prof = vs.profile_mllm(idefics3.model, inputs)
    assert prof.phi.shape[-1] == layout.n_tokens == int(prof.image.sum())
    # several blocks of image tokens with the tile tags between them: the span is wider than the image tokens
    assert prof.span[1] - prof.span[0] > layout.n_tokens
    background = vs.plain_background(pictures, layout)  # (B, P): the stroke is in the right half
    grid, over = layout.split(background[0])
    half = grid.shape[1] // 2
    assert grid[:, :half].all() and not grid[:, half:].all() and over[:, 0].all() and not over.all()


def test_plain_background_keeps_the_square_grid_it_had():
    img = np.full((8, 8, 3), 255, np.uint8)
    img[4:, 4:] = 0  # ink in the lower-right quarter
    assert vs.plain_background([img], grid=2).tolist() == [[True, True, True, False]]
    layout = il.ImageLayout((2, 2))
    assert torch.equal(vs.plain_background([img], layout), vs.plain_background([img], 2))


def test_visual_sinks_figure_draws_tiles_and_global_view(tmp_path):
    import matplotlib.pyplot as plt

    from sinklib.core import plotting
    from tests.figure_lint import layout_problems

    layout = il.ImageLayout((4, 4), crops=(1, 2), overview=(4, 4))
    example = torch.rand(48)
    example[[0, 20, 47]] = 30.0  # crop 0, crop 1 and the global view each hold one sink
    phi = torch.rand(4, 2, 48) * 25
    phi[:2] = float("nan")
    with plotting.style():
        fig = visual_sink_plots.visual_sinks(phi, {"tau = 20 (paper)": 20.0}, 20.0, [None, None, 1.5, 2.0],
                                             _digits(1, 8, 16)[0], example, 3, layout=layout)
        assert layout_problems(fig) == []
    (ex,) = [ax for ax in fig.axes if ax.get_title().startswith("(e)")]
    assert ex.get_images()[0].get_array().shape == (4, 8 + 1 + 4)
    outlined = [p for p in ex.patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert len(outlined) == int((example >= 20).sum()) == 3
    assert sorted(p.get_xy() for p in outlined) == [(-0.5, -0.5), (3.5, 0.5), (11.5, 2.5)]  # tokens 0, 16 + 4, 32 + 15
    assert "1 x 2 crops + global view (right)" in ex.get_title()
    plt.close(fig)


# --------------------------------------------------------------------------------------------------- Qwen2-VL
def test_qwen2_vl_rule_makes_a_digit_576_tokens(qwen2_vl):
    """At its default min_pixels (4 tokens' worth) an 8 x 8 digit is 2 x 2 image tokens; the rule asks for at least
    LLaVA-1.5's 24 x 24 (:func:`image_size_kwargs`)."""
    from PIL import Image
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(qwen2_vl.name)
    digit = Image.fromarray(_digits(1)[0])
    plain = processor.image_processor(images=[digit], return_tensors="pt")
    assert plain["image_grid_thw"].tolist() == [[1, 4, 4]]  # 2 x 2 tokens after the 2 x 2 merge
    inputs, _ = captions.caption_inputs(qwen2_vl, _digits(2), [" a", " b"])
    assert inputs["image_grid_thw"].tolist() == [[1, 48, 48]] * 2
    layout = il.image_layout(qwen2_vl, inputs, (8, 8))
    assert layout == il.ImageLayout((24, 24)) and int(vs.profile_mllm(qwen2_vl.model, inputs).image.sum()) == 576


def test_qwen2_vl_rule_on_the_real_processor_defaults():
    """Qwen2-VL-7B's image processor: patch 14, merge 2, min_pixels 56^2. The rule: min_pixels = 576 x 28^2, so an
    8 x 8 digit becomes 672 x 672 px (24 x 24 tokens); a picture that already gives more keeps its size; processors
    that size pictures otherwise get nothing."""
    from transformers import CLIPImageProcessor, Idefics3ImageProcessor, Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    processor = Qwen2VLImageProcessor()
    kwargs = il.image_size_kwargs(processor)
    low, high = kwargs["size"]["shortest_edge"], kwargs["size"]["longest_edge"]
    assert low == 576 * 28 ** 2 and high == processor.size["longest_edge"]
    assert smart_resize(8, 8, 28, processor.size["shortest_edge"], high) == (56, 56)  # the default: 2 x 2 tokens
    assert smart_resize(8, 8, 28, low, high) == (672, 672)
    assert smart_resize(8, 12, 28, low, high) == (560, 840)  # aspect kept: 20 x 30 tokens
    assert smart_resize(1000, 1000, 28, low, high) == smart_resize(1000, 1000, 28, 56 * 56, high)
    assert il.image_size_kwargs(CLIPImageProcessor()) == {} == il.image_size_kwargs(Idefics3ImageProcessor())


# --------------------------------------------------------------------------------------------------- the capture
def _reference(model, inputs, dims=None):
    """The profile from the full (L, B, H, T, T) maps and (L, B, T, d) hidden states, as 12_mllm computed it before
    the capture was reduced on the device."""
    where = vs.shared_positions(adapter_for(model).image_positions(inputs["input_ids"]))
    start, stop = vs.image_span(where)
    with torch.no_grad(), Capture(model, attentions=True, hidden_states=True) as cap:
        model(**inputs)
    att, hid = cap.stack("attentions").float(), cap.stack("hidden_states").float()
    rows = att[:, :, :, stop:]
    before, image = rows[..., :start].sum(-1), rows[..., where].sum(-1)
    shares = torch.stack([before, image, 1 - before - image], -1).mean(dim=(1, 2, 3))
    first = hid[:, :, 0].mean(1)
    dims = list(dims) if dims is not None else vs.sink_dimensions(first)
    layer_input = torch.cat([torch.full_like(hid[:1], float("nan")), hid[:-1]])
    phi = vs.phi(layer_input, dims)[:, :, where]
    phi[:kang_rules.KANG_FIRST_LAYER] = float("nan")
    return shares, phi, rows[..., where].mean(dim=(2, 3)), first, dims


class _Watched(Capture):
    """A Capture that remembers the largest tensor it stored (what the host keeps)."""

    largest: dict[str, int] = {}

    def _store(self, kind, layer, tensor):
        super()._store(kind, layer, tensor)
        if self.records[kind][layer]:
            n = self.records[kind][layer][-1].numel()
            _Watched.largest[kind] = max(_Watched.largest.get(kind, 0), n)


@pytest.mark.parametrize("family", ["idefics3", "qwen2_vl"])
def test_reduced_capture_gives_the_numbers_of_the_full_maps(family, request, monkeypatch):
    lm = request.getfixturevalue(family)
    inputs, _ = captions.caption_inputs(lm, _digits(2), [" a seven", " a three"])
    _Watched.largest = {}
    monkeypatch.setattr(vs, "Capture", _Watched)
    prof = vs.profile_mllm(lm.model, inputs)
    shares, phi, received, first, dims = _reference(lm.model, inputs)
    assert prof.dims == dims
    torch.testing.assert_close(prof.shares, shares, rtol=0, atol=1e-6)
    torch.testing.assert_close(prof.received, received, rtol=0, atol=1e-7)
    torch.testing.assert_close(prof.first_hidden, first)
    torch.testing.assert_close(prof.phi, phi, equal_nan=True)
    B, T = inputs["input_ids"].shape
    H, P, Tq = lm.n_heads, int(prof.image.sum()), T - prof.span[1]
    assert _Watched.largest["attentions"] == B * (2 * H * Tq + P) < B * H * T * T // 10  # no full map on the host


def test_reduced_capture_on_bfloat16_matches_float32_reductions(idefics3, tmp_path):
    """bf16 weights: the probabilities are formed and reduced in float32 (Capture's float32 softmax), the hidden
    states kept in bf16 and phi computed from them in float32 -- the same numbers as reducing the full maps."""
    lm = _loaded(tiny_random_hub.idefics3, tmp_path / "bf16", dtype=torch.bfloat16)
    inputs, _ = captions.caption_inputs(lm, _digits(2), [" a", " b"])
    prof = vs.profile_mllm(lm.model, inputs)
    shares, phi, received, first, _ = _reference(lm.model, inputs, prof.dims)
    torch.testing.assert_close(prof.shares, shares, rtol=0, atol=1e-6)
    torch.testing.assert_close(prof.received, received, rtol=0, atol=1e-7)
    torch.testing.assert_close(prof.phi, phi, equal_nan=True)


@pytest.mark.parametrize("family", ["idefics3", "qwen2_vl"])
def test_edits_run_on_each_family(family, request):
    """Masking and VAR through the processor path, whole forwards (no prefix cache: Idefics3's and Qwen2-VL's
    positions are not LLaVA's), with the layout's background."""
    lm = request.getfixturevalue(family)
    pictures = _digits(3)
    inputs, _ = captions.caption_inputs(lm, pictures[:2], [" a", " b"])
    prof = vs.profile_mllm(lm.model, inputs)
    out = va.compare_edits(lm, pictures, [" one", " two", " three"], prof.dims, batch_size=2, draws=1, seed=0,
                           tau=float(torch.nan_to_num(prof.phi, nan=0).median()))
    assert not va.uses_prefix_cache(lm.model)
    values = [v for m in out.means.values() for v in m.values()]
    assert np.isfinite(values).all() and len(values) == 8
    layout = il.image_layout(lm, inputs, (8, 8))
    assert vs.plain_background(pictures[:2], layout).shape == (2, layout.n_tokens)
