"""The rendered "What we saw" paragraphs of 00_tour and 01_utilization: each on two hand-built results that must give
different direction words, and never a hand-typed number."""

from dataclasses import replace

from sinklib.core.claims import Claim
from sinklib.utilization import takeaways as saw


def _claim(cid: str, holds: bool | None, note: str = "") -> Claim:
    return Claim(id=cid, statement="s", source="p", rule="r", published=None, measured=1.0, holds=holds, note=note)


def test_every_paragraph_starts_with_the_heading():
    text = saw.tour_maps({0: 0.1, 29: 0.6}, 24, "M")
    assert text.startswith("**What we saw (M, one 24-token window).**")


def test_tour_maps_direction():
    rising = saw.tour_maps({0: 0.10, 10: 0.18, 29: 0.60}, 24, "M")
    falling = saw.tour_maps({0: 0.70, 10: 0.18, 29: 0.20}, 24, "M")
    assert "gives it less than the last" in rising and "most in layer 29 (0.60)" in rising
    assert "gives it more than the last" in falling and "most in layer 0 (0.70)" in falling


def test_tour_sink_rate_names_the_quiet_layers_and_compares_with_the_paper():
    pub = {"Mistral-7B": 0.9749, "LLaMA2-7B": 0.9247}
    low = saw.tour_sink_rate(0.735, [0.05, 0.5, 0.1, 0.6], 0.3, 0.074, 1, 100, 64, "M", pub)
    high = saw.tour_sink_rate(0.99, [0.5, 0.5, 0.6, 0.6], 0.3, 0.074, 0, 100, 64, "M", pub)
    assert "73.5%" in low and "2 of 4 layers stay at or below it (layers [0, 2])" in low and "lower than" in low
    assert "every layer stays above it" in high and "higher than the lowest" in high
    none = saw.tour_sink_rate(0.0, [0.05, 0.1], 0.3, 0.074, None, 8, 32, "M", pub)
    assert "No layer's mean alpha_0 exceeds 0.3" in none


def test_tour_input_shape_follows_the_claim():
    good = saw.tour_input_shape({"natural": 0.74, "random": 0.78, "repeated": 0.0},
                                _claim("gu2024.llama_family_input_shape", True), "M", 0.62, [0.78, 0.77, 0.80])
    bad = saw.tour_input_shape({"natural": 0.77, "random": 0.70, "repeated": 0.7},
                               _claim("gu2024.llama_family_input_shape", False), "M", 0.62)
    assert ": the Llama-family shape" in good and "77-80% over 3 draws" in good and "keeps less there" in good
    assert "not the Llama-family shape" in bad and "does not hold" in bad and "keeps more there" in bad


def test_tour_massive_and_dom_ratio():
    weak = saw.tour_massive(22000.0, 507, 11, 0, 520.0, False, "M")
    strong = saw.tour_massive(2000.0, 1415, 2, 0, 5000.0, True, "M")
    assert "it is massive; by the relative one (> 1000x the median) it is not" in weak and "not met" in weak
    assert "it is massive." in strong and "criterion is met" in strong
    up = saw.tour_dom_ratio([1.0, 231.0, 50.0], [10.0, 27.0, 20.0], "M")
    down = saw.tour_dom_ratio([1.0, 5.0, 2.0], [10.0, 27.0, 20.0], "M")
    assert "peaks at 231 at layer 1" in up and "larger" in up and "smaller" in down


def test_tour_context_direction():
    falls = saw.tour_context([256, 8192], [0.39, 0.30], 0.0012, 2, "M")
    rises = saw.tour_context([256, 8192], [0.30, 0.39], 0.0012, 2, "M")
    assert "falls from 0.39 to 0.30" in falls and "32-fold" in falls and "times less" in falls
    assert "rises from 0.30 to 0.39" in rises


def test_streaming_ppl_direction():
    post = {"dense": 32.0, "window only": 68.4, "4 sinks + window": 34.5, "recompute": 33.1}
    held = saw.streaming_ppl(post, "4 sinks + window", _claim("xiao2023.sinks_rescue_window", True), "M", 3072, 256,
                             "16 tokens per step", 955.0)
    flat = saw.streaming_ppl({**post, "window only": 34.0, "4 sinks + window": 32.0},
                             "4 sinks + window", _claim("xiao2023.sinks_rescue_window", False), "M", 3072, 256,
                             "16 tokens per step", 955.0)
    assert "above recomputing" in held and "`xiao2023.sinks_rescue_window` holds" in held and "1.98x here" in held
    assert "below recomputing" in flat and "does not hold" in flat


def test_sink_count_direction():
    paper = ([3359.95, 11.88, 10.51, 9.59, 9.54], [0, 1, 2, 4, 8])
    few = _claim("xiao2023.few_sinks_suffice", True)
    pos = _claim("xiao2023.sink_is_positional", True)
    one_enough = saw.sink_count({0: 68.4, 1: 34.49, 2: 34.5, 4: 34.52, 8: 34.39}, 34.76, few, pos, *paper)
    one_short = saw.sink_count({0: 68.4, 1: 60.0, 4: 34.5}, 34.76, few, pos, *paper)
    assert "one sink recovers 100% of what four recover" in one_enough and "as good as four" in one_enough
    assert "one sink recovers 25% of what four recover" in one_short and "worse than four" in one_short


def test_decode_cost_direction():
    bounded = _claim("xiao2023.bounded_cache", True)
    slower = saw.decode_cost({"dense": 64.0, "s": 72.5}, {"dense": 23.9, "s": 11.2}, "s", bounded, 512)
    same = saw.decode_cost({"dense": 64.0, "s": 62.7}, {"dense": 23.9, "s": 11.2}, "s", bounded, 512)
    assert "(slower)" in slower and "(about the same)" in same and "ends at 11.2 MiB against 23.9 MiB" in same


def test_kv_quant_reads_each_interval():
    at = "4-bit, keys per token"
    quant = {"4-bit": {"all tokens quantised": 30.4, "4 sink tokens kept": 30.4},
             "2-bit": {"all tokens quantised": 44.0, "4 sink tokens kept": 42.5},
             at: {"all tokens quantised": 30.6, "4 sink tokens kept": 30.5}}
    matched = {at: (1.0, 0.99, 1.01)}
    unclear = saw.kv_quant(quant, 30.4, {"4-bit": (1.009, 0.996, 1.021), "2-bit": (0.963, 0.907, 1.044),
                                         at: (1.0, 0.99, 1.01)}, matched,
                           _claim("intactkv.keep_sinks_full_precision", None, "not measurable"), 1024, "M")
    helps = saw.kv_quant(quant, 30.4, {"4-bit": (0.97, 0.95, 0.99), "2-bit": (0.90, 0.85, 0.95),
                                       at: (0.97, 0.95, 0.99)}, {at: (0.98, 0.97, 0.99)},
                         _claim("intactkv.keep_sinks_full_precision", True), 1024, "M")
    assert "4-bit: +0.90% [-0.40%, +2.1%], an interval containing 1" in unclear and "cannot be judged" in unclear
    assert "an interval below 1" in helps and "containing" not in helps and "The hardest setting, 2-bit" in helps


def test_act_direction():
    act = _claim("yu2024.act_calibration_helps", None, "proxy")
    worse = saw.act({"original": 32.04, "ACT": 32.66}, 175, 270, act, 32, 256, "M")
    better = saw.act({"original": 32.04, "ACT": 31.0}, 3, 270, act, 32, 256, "M")
    nothing = saw.act({"original": 32.04, "ACT": None}, 0, 270, act, 32, 256, "M")
    assert "raises perplexity from 32.0 to 32.7 (+1.9%)" in worse and "lowers perplexity" in better
    assert "nothing was calibrated" in nothing


def test_act_change_is_read_from_its_interval():
    """A 1 % rise whose interval contains 1 is no change (c16eec0 said "does not lower" on 31.65 vs 31.35)."""
    act = _claim("yu2024.act_calibration_helps", None, "proxy")
    act = replace(act, measured={"ACT / original": [1.0096, 0.995, 1.024]})
    text = saw.act({"original": 31.35, "ACT": 31.65}, 88, 270, act, 32, 256, "M")
    assert "does not measurably change perplexity (31.4 -> 31.6; ratio 1.01, 95% interval 0.995-1.02)" in text
