"""What a reader of 00_tour and 01_utilization sees (issue 46): captions name what is drawn, every ratio is named,
no timing verdict rests on noise, every takeaway says what it was measured on, and figure and prose agree.
Unit level: the notebooks' own plotting and takeaway functions on small hand-built results."""

import re

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from sinklib.core import plotting, takeaways  # noqa: E402
from sinklib.core.claims import Claim  # noqa: E402
from sinklib.utilization import streaming, streaming_plots  # noqa: E402
from sinklib.utilization import takeaways as saw  # noqa: E402


def _claim(cid: str, holds: bool | None) -> Claim:
    return Claim(id=cid, statement="s", source="p", rule="r", published=None, measured=1.0, holds=holds)


# ------------------------------------------------------------------------------------- 01 fig02: caption from drawing
def _sweep_figure(newline: float = 34.5):
    with plotting.style():
        return streaming_plots.sink_sweep([0, 1, 2, 4, 8], [68.8, 34.4, 34.4, 34.5, 34.3],
                                          {"Llama-2-7B": [3359.95, 11.88, 10.51, 9.59, 9.54],
                                           "Pythia-12B": [23.9, 13.2, 12.9, 12.1, 12.1]},
                                          {"4 newline tokens as sinks": newline}, title="t")


def test_sink_sweep_caption_names_every_line_and_marker_as_drawn():
    fig = _sweep_figure()
    try:
        caption = streaming_plots.sink_sweep_caption(fig, budget=256, title="M", relative_to=4)
    finally:
        plt.close(fig)
    # each labelled line, with the marker and line style it is drawn with
    assert "measured: solid line, circles" in caption
    assert "Llama-2-7B: dashed line, squares" in caption and "Pythia-12B: dashed line, triangles" in caption
    assert "4 newline tokens as sinks: a star" in caption
    # the dotted line is y = 1, not the newline tokens; the y-axis is normalised to 4 sinks
    assert "dotted grey line at y = 1" in caption and "dotted: 4 newline" not in caption
    assert "divided by its own perplexity with 4 sinks" in caption


def test_described_style_follows_the_figure_not_a_fixed_text():
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 2], "D-.", label="a")
    ax.plot([0], [1], marker="x", ls="", label="b")
    ax.axhline(3, ls="--", color="grey")
    try:
        text = streaming_plots.describe_drawn(fig)
    finally:
        plt.close(fig)
    assert text == "a: dash-dotted line, diamonds; b: a cross; dashed grey line at y = 3"


# ------------------------------------------------------------------------------------ 01 takeaway 1: ratios named
def test_streaming_takeaway_names_each_ratio():
    post = {"dense": 31.9, "window only": 68.8, "4 sinks + window": 34.5, "recompute": 31.9}
    text = saw.streaming_ppl(post, "4 sinks + window", _claim("xiao2023.sinks_rescue_window", True), "M", 2048, 256,
                             "16 tokens per step", 955.0)
    assert "window-only / dense perplexity = 2.2x" in text
    assert "window-only / sinks perplexity = 1.99x here against 955x in the paper" in text
    # no bare "N.NNx": every ratio stands after "=" or in the same clause as the paper's
    for m in re.finditer(r"\d[\d.,]*x\b", text):
        clause = text[max(0, m.start() - 60):m.start()]
        assert " / " in clause, f"unnamed ratio {m.group(0)!r} in: {text}"


# --------------------------------------------------------------------------------- 01 fig03: decode timing verdict
def test_decode_verdict_is_no_difference_within_the_resolution():
    bounded = _claim("xiao2023.bounded_cache", True)
    mib = {"dense": 12.7, "s": 11.2}
    within = saw.decode_cost({"dense": 97.6, "s": 103.0}, mib, "s", bounded, 256, resolution=0.08,
                             timed="3 interleaved rounds")
    beyond = saw.decode_cost({"dense": 97.6, "s": 103.0}, mib, "s", bounded, 256, resolution=0.02,
                             timed="3 interleaved rounds")
    assert "no difference" in within and "slower" not in within and "8%" in within
    assert "slower" in beyond and "no difference" not in beyond
    assert "3 interleaved rounds" in within  # says how it was timed
    assert streaming.timing_verdict(103.0, 97.6, 0.08) == "no difference"
    assert streaming.timing_verdict(103.0, 97.6, 0.02) == "slower"


def test_decode_timing_ignores_a_spike_at_the_end_of_one_round():
    flat = torch.full((64,), 0.040)
    spiked = flat.clone()
    spiked[-20:] = 0.080  # a slow spell of the machine at the end of one round
    timing = streaming.decode_timing({"dense": [flat, flat, flat], "s": [flat, spiked, flat]}, steps=16)
    assert timing.ms == {"dense": pytest.approx(40.0), "s": pytest.approx(40.0)}  # the fastest round's median
    assert timing.rounds_ms["s"][1] == pytest.approx(80.0)
    assert timing.verdict("s", "dense") == "no difference"
    assert timing.resolution >= streaming.MIN_RESOLUTION
    assert "3 rounds" in timing.describe() and "lockstep" in timing.describe() and "last 16 steps" in timing.describe()


def test_decode_timing_pairs_steps_so_a_load_change_between_rounds_makes_no_verdict():
    # what the loaded machine did to a run: one round quiet (40 ms), the next two ten times slower, for both caches
    load = [1.0, 10.0, 10.0]
    same = {"dense": [torch.full((64,), 0.040 * f) for f in load], "s": [torch.full((64,), 0.041 * f) for f in load]}
    timing = streaming.decode_timing(same, steps=16)
    assert timing.verdict("s", "dense") == "no difference" and timing.resolution == streaming.MIN_RESOLUTION
    slower = {"dense": same["dense"], "s": [torch.full((64,), 0.050 * f) for f in load]}
    assert streaming.decode_timing(slower, steps=16).verdict("s", "dense") == "slower"
    assert streaming.decode_timing(slower, steps=16).ratio("s", "dense") == pytest.approx(1.25)


# ------------------------------------------------------------------------- measurement sizes: 00 and 01 takeaways
def test_every_00_and_01_takeaway_names_its_measurement_size():
    claim = _claim("x", True)
    texts = [
        saw.tour_input_shape({"natural": 0.74, "random": 0.78, "repeated": 0.0}, claim, "M", 0.62, [0.78, 0.77, 0.8],
                             n_seqs=100, seq_len=64),
        saw.tour_massive(29578.0, 507, 11, 0, 15510.0, True, "M", dims=[247] + [507] * 29,
                         positions=[0] * 30, n_seqs=100, seq_len=64),
        saw.tour_dom_ratio([1.0, 231.0, 50.0], [10.0, 27.0, 20.0], "M", n_seqs=100, seq_len=64),
        saw.tour_context([128, 4096], [0.45, 0.30], 0.0022, 2, "M"),
        saw.sink_count({0: 68.8, 1: 34.4, 2: 34.4, 4: 34.5, 8: 34.3}, 34.5, claim, claim,
                       [3359.95, 11.88, 10.51, 9.59, 9.54], [0, 1, 2, 4, 8],
                       measured_on=saw.stream_size("M", 2048, 256, "16 tokens per step")),
        saw.decode_cost({"dense": 38.7, "s": 39.1}, {"dense": 12.7, "s": 11.2}, "s", claim, 256,
                        model="M", prompt_tokens=32),
    ]
    for text in texts:
        assert not takeaways.unmeasured(text), takeaways.heading_of(text)


def test_tour_context_names_the_reference_length_of_the_share_kept():
    text = saw.tour_context([128, 256, 4096], [0.45, 0.40, 0.30], 0.0022, 2, "M")
    kept = next(s for s in re.split(r"(?<=\.) ", text) if "keeps" in s)
    assert "128 tokens" in kept and "4,096 tokens" in kept


# ----------------------------------------------------------------------------- 00 fig05: figure and prose agree
def test_tour_massive_names_every_dimension_the_figure_labels():
    dims = [247] + [507] * 29
    values = [49.6, 408.0, 976.0] + [900.0] * 8 + [29578.0] * 19
    with plotting.style():
        fig = plotting.massive_by_layer(values, [1.0] * 30, dims)
    try:
        labelled = {int(t.get_text().split()[-1]) for t in fig.axes[0].texts if t.get_text().startswith("dim ")}
    finally:
        plt.close(fig)
    assert labelled == {247, 507}
    text = saw.tour_massive(29578.0, 507, 11, 0, 15510.0, True, "M", dims=dims, positions=[0] * 9 + [54, 1] + [0] * 19)
    assert "dimension 507 in 29 of 30 layers (1-29)" in text and "dimension 247 in layer 0" in text
    assert "at the first token in 28 of 30 layers" in text and "layer 9 (position 54)" in text
    caption = saw.massive_dims_caption(dims)
    assert "247 in layer 0" in caption and "507 in layers 1-29" in caption


def test_interleaved_decode_rounds_feed_the_figure_and_the_timing(tiny):
    from sinklib.utilization.sink_cache import SinkWindowCache

    prompt = torch.arange(3, 11)
    rounds = streaming.interleaved_decode(tiny, prompt, 6, {"dense": None, "s": lambda: SinkWindowCache.for_model(
        tiny.model, n_sink=2, window=4)}, rounds=2, progress=False)
    assert {k: len(v) for k, v in rounds.items()} == {"dense": 2, "s": 2}
    assert rounds["s"][0].cache_bytes[-1] < rounds["dense"][0].cache_bytes[-1]  # the sink cache stays bounded
    timing = streaming.decode_timing({k: [c.seconds for c in v] for k, v in rounds.items()}, steps=3)
    assert set(timing.ms) == {"dense", "s"} and len(timing.rounds_ms["s"]) == 2
    with plotting.style():
        fig = streaming_plots.decode_cost(rounds, smooth=2, timed_steps=3)
    try:
        assert "median of 2 rounds" in fig.axes[0].get_ylabel()
    finally:
        plt.close(fig)


def test_the_timed_steps_are_those_where_the_sink_cache_evicts():
    assert streaming.evicting_steps(256, 256, 32) == 32  # cpu profile: the cache fills at step 224
    assert streaming.evicting_steps(2048, 1024, 32) == 1056
    assert streaming.evicting_steps(24, 48, 32) == 8  # smoke profile
    assert streaming.evicting_steps(8, 48, 32) == 2  # never full: the last quarter
