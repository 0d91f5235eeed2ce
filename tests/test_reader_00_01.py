"""What a reader of 00_tour and 01_utilization sees (issue 46): captions name what is drawn, no timing verdict rests
on noise, and figure and prose agree. Unit level: the notebooks' own plotting and timing functions on small
hand-built results (the takeaways themselves are written in the notebooks and checked on the executed ones)."""

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from sinklib.core import plotting  # noqa: E402
from sinklib.utilization import decode_timing, streaming_plots, tour  # noqa: E402


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


# --------------------------------------------------------------------------------- 01 fig03: decode timing verdict
def test_decode_verdict_is_no_difference_within_the_resolution():
    assert decode_timing.timing_verdict(103.0, 97.6, 0.08) == "no difference"
    assert decode_timing.timing_verdict(103.0, 97.6, 0.02) == "slower"
    assert decode_timing.timing_verdict(90.0, 97.6, 0.02) == "faster"


def test_decode_timing_ignores_a_spike_at_the_end_of_one_round():
    flat = torch.full((64,), 0.040)
    spiked = flat.clone()
    spiked[-20:] = 0.080  # a slow spell of the machine at the end of one round
    timing = decode_timing.decode_timing({"dense": [flat, flat, flat], "s": [flat, spiked, flat]}, steps=16)
    assert timing.ms == {"dense": pytest.approx(40.0), "s": pytest.approx(40.0)}  # the fastest round's median
    assert timing.rounds_ms["s"][1] == pytest.approx(80.0)
    assert timing.verdict("s", "dense") == "no difference"
    assert timing.resolution >= decode_timing.MIN_RESOLUTION
    assert "3 rounds" in timing.describe() and "lockstep" in timing.describe() and "last 16 steps" in timing.describe()


def test_decode_timing_pairs_steps_so_a_load_change_between_rounds_makes_no_verdict():
    # what the loaded machine did to a run: one round quiet (40 ms), the next two ten times slower, for both caches
    load = [1.0, 10.0, 10.0]
    same = {"dense": [torch.full((64,), 0.040 * f) for f in load], "s": [torch.full((64,), 0.041 * f) for f in load]}
    timing = decode_timing.decode_timing(same, steps=16)
    assert timing.verdict("s", "dense") == "no difference" and timing.resolution == decode_timing.MIN_RESOLUTION
    slower = {"dense": same["dense"], "s": [torch.full((64,), 0.050 * f) for f in load]}
    assert decode_timing.decode_timing(slower, steps=16).verdict("s", "dense") == "slower"
    assert decode_timing.decode_timing(slower, steps=16).ratio("s", "dense") == pytest.approx(1.25)


# ----------------------------------------------------------------------------- 00 fig05: figure and prose agree
def test_the_dimensions_named_are_those_the_figure_labels():
    dims = [247] + [507] * 29
    values = [49.6, 408.0, 976.0] + [900.0] * 8 + [29578.0] * 19
    with plotting.style():
        fig = plotting.massive_by_layer(values, [1.0] * 30, dims)
    try:
        labelled = {int(t.get_text().split()[-1]) for t in fig.axes[0].texts if t.get_text().startswith("dim ")}
    finally:
        plt.close(fig)
    held = tour.dims_by_layer(dims)  # what the caption and the takeaway name
    assert {d for d, _ in held} == labelled
    assert held == [(507, list(range(1, 30))), (247, [0])]  # the dimension holding most layers first
    assert tour.dims_by_layer([3, 5, 5, 3]) == [(3, [0, 3]), (5, [1, 2])]  # a tie: the one that starts first


def test_interleaved_decode_rounds_feed_the_figure_and_the_timing(tiny):
    from sinklib.utilization.sink_cache import SinkWindowCache

    prompt = torch.arange(3, 11)
    rounds = decode_timing.interleaved_decode(tiny, prompt, 6, {"dense": None, "s": lambda: SinkWindowCache.for_model(
        tiny.model, n_sink=2, window=4)}, rounds=2, progress=False)
    assert {k: len(v) for k, v in rounds.items()} == {"dense": 2, "s": 2}
    assert rounds["s"][0].cache_bytes[-1] < rounds["dense"][0].cache_bytes[-1]  # the sink cache stays bounded
    timing = decode_timing.decode_timing({k: [c.seconds for c in v] for k, v in rounds.items()}, steps=3)
    assert set(timing.ms) == {"dense", "s"} and len(timing.rounds_ms["s"]) == 2
    with plotting.style():
        fig = streaming_plots.decode_cost(rounds, smooth=2, timed_steps=3)
    try:
        assert "median of 2 rounds" in fig.axes[0].get_ylabel()
    finally:
        plt.close(fig)


def test_the_timed_steps_are_those_where_the_sink_cache_evicts():
    assert decode_timing.evicting_steps(256, 256, 32) == 32  # cpu profile: the cache fills at step 224
    assert decode_timing.evicting_steps(2048, 1024, 32) == 1056
    assert decode_timing.evicting_steps(24, 48, 32) == 8  # smoke profile
    assert decode_timing.evicting_steps(8, 48, 32) == 2  # never full: the last quarter
