"""10_llm's takeaways: every number and direction word comes from the inputs (two hand-built runs per section)."""

from dataclasses import replace
from types import SimpleNamespace

from sinklib.architectures.llm import placement as pl
from sinklib.architectures.llm import takeaways as tk
from sinklib.core.analysis import MassiveDims
from sinklib.core.claims import Claim, over_draws
from sinklib.core.takeaways import HEADING


def _report(name: str, **over) -> SimpleNamespace:
    base = dict(
        name=name, label=name.upper(), n_layers=4,
        sink_rate={"natural": 0.74, "random": 0.79, "repeated": 0.0}, alpha_by_layer=[0.1, 0.2, 0.5, 0.6],
        massive=MassiveDims([7], True, 1000.0, 1500.0),
        by_kind={"first": 0.5, "first delimiter": 0.02, "delimiter": 0.02, "weak": 0.03, "content": 0.015},
        secondary=[(" the", 55, 0.048)],
        position=pl.PositionOrToken(0.5, 0.5, 0.48, 0.01, shift=8, other_token="'\\n'", layers=[2, 3]),
        bos_stripped=None, raw_vs_chat={"raw": 0.74, "chat template": 0.79}, chat_top=[("<|im_start|>", 2, 0.31)],
        context={"lengths": [256, 2048], "alpha_first": [0.42, 0.33]}, sun_sites=None,
        chain_numbers={"variance_ratio_t0": 20.0, "super_neuron": {"layer": 1, "neuron": 83, "write_dims": [7]},
                       "first_token_value_onset": [1], "sink_onset": 3, "dom_after_super": 59.0,
                       "positive_sink_vs_other": [0.99, 0.76]},
    )
    return SimpleNamespace(**(base | over))


def _claim(claim_id: str, name: str, holds, control=None, at_init=None, draws=()) -> Claim:
    return Claim(id=f"{claim_id}.{name}", statement="s", source="p", rule="r", published=None, measured=0.5,
                 holds=holds, control=control, at_init=at_init, draws=draws)


def test_sink_by_depth_words_follow_the_verdicts():
    a, b = _report("a"), _report("b", sink_rate={"natural": 0.5, "random": 0.1, "repeated": 0.0},
                                 alpha_by_layer=[0.1] * 4)
    claims = [_claim("gu2024.llama_family_input_shape", "a", True), _claim("gu2024.llama_family_input_shape", "b",
                                                                           False)]
    both = tk.sink_by_depth([a, replace_rates(b)], [claims[0], _claim("gu2024.llama_family_input_shape", "b", True)])
    one = tk.sink_by_depth([a, b], claims)
    assert both.startswith(HEADING) and "holds on all two models" in both
    assert "holds on A (" in one and "B in no layer" in one and "A from layer 2 (2 of 4 layers)" in one
    assert "74% / 79% / 0%" in one


def replace_rates(r):
    return SimpleNamespace(**(vars(r) | {"sink_rate": {"natural": 0.6, "random": 0.5, "repeated": 0.01}}))


def test_massive_says_above_or_short_of_the_cut():
    met = tk.massive([_report("a")], [_claim("sun2024.massive_activations", "a", True)])
    short = tk.massive([_report("a", massive=MassiveDims([5], False, 100.0, 525.0))],
                       [_claim("sun2024.massive_activations", "a", False)])
    assert "met on A (dimensions 7)" in met and "holds on 1 of 1" in met
    assert "No model meets" in short and "525x" in short and "short of 1,000x" in short and "holds on 0 of 1" in short


def test_mass_by_kind_compares_the_delimiter_with_the_cut():
    low = tk.mass_by_kind([_report("a")], [_claim("sun2024.first_delimiter_draws_attention", "a", False)])
    high = tk.mass_by_kind([_report("a", by_kind={"first": 0.5, "first delimiter": 0.06, "delimiter": 0.02,
                                                  "weak": 0.03, "content": 0.015})],
                           [_claim("sun2024.first_delimiter_draws_attention", "a", True)])
    assert "1.3x (below the 2x cut)" in low and "does not hold" in low
    assert "4x (above the 2x cut)" in high and "` holds" in high
    assert "' the' (0.0480 over 55 occurrences, 3.2x a content word)" in low


def test_position_or_token_names_the_answer():
    pos = tk.position_or_token([_report("a")], [_claim("xiao2023.sink_is_the_position", "a", True)])
    tok = tk.position_or_token(
        [_report("g", position=pl.PositionOrToken(0.5, 0.03, 0.03, 0.49, shift=8, other_token="'\\n'", layers=[0]),
                 bos_stripped={"alpha_with_bos": 0.5, "alpha_without_bos": 0.03})],
        [_claim("xiao2023.sink_is_the_position", "g", False)])
    assert "A -- the position" in pos and "holds on A" in pos
    assert "G -- the token" in tok and "falls from 0.500 to 0.0300" in tok and "holds on none of the models" in tok


def test_context_and_chat_directions():
    falls = tk.context_and_chat([_report("a")])
    rises = tk.context_and_chat([_report("a", context={"lengths": [256, 2048], "alpha_first": [0.3, 0.4]},
                                         raw_vs_chat={"raw": 0.54, "chat template": 0.09}, chat_top=None)])
    assert "A falls from 0.420 at 256 tokens to 0.330 at 2,048" in falls and "rises from 74% raw to 79%" in falls
    assert "A rises from 0.300" in rises and "falls from 54% raw to 9%" in rises
    assert abs(tk.uniform_share(256) - 0.0239) < 1e-3  # H_N / N: the even spread the notebook compares with
    assert "has no chat template" in tk.context_and_chat([_report("a", raw_vs_chat=None)])


def test_chain_orders_the_onsets():
    links = [_claim(link, "a", True) for link in tk.LINKS]
    after = tk.chain([_report("a")], links)
    same = tk.chain([_report("a", chain_numbers=_report("a").chain_numbers | {"first_token_value_onset": [0],
                                                                                 "sink_onset": 0,
                                                                                 "sink_follows": "neither"})],
                    [replace(c, holds=False) for c in links])
    assert "variance discrepancy on A" in after
    assert "the first token's value onset (|v| > 100 on a massive dimension) in layer 1's output" in after
    assert "sink at layer 3: 1 layer after the first attention that reads the value onset" in after
    assert "sink at layer 0: 1 layer before the first attention that reads the value onset" in same
    assert "variance discrepancy on none of the models" in same


def test_chain_says_which_onset_the_sink_follows():
    """SmolLM2 (issue 43): value onset at layer 1 (169 on dim 507, under 1000x its layer median), Sun et al.'s
    criterion from layer 11, sink from layer 3: the takeaway names both layers and says which one the sink follows."""
    from sinklib.interpretation.sun_sites import SunSites

    sites = SunSites(first=[0.0] * 11 + [1.0], later_share=[0.0] * 12, later_per_seq=[0.0] * 12,
                     first_ratio=[5.0, 210.0] + [700.0] * 10, n_seqs=16, seq_len=64)
    numbers = _report("s").chain_numbers | {"first_token_value_onset": [1, 2], "sun_onset": 11, "sink_onset": 3,
                                            "sink_follows": "the value onset"}
    text = tk.chain([_report("s", chain_numbers=numbers, sun_sites=sites)],
                    [_claim(link, "s", True, draws=(True, True, True)) for link in tk.LINKS])
    assert "in layer 1's output (210x its layer median at position 0, under Sun et al.'s 1,000x)" in text
    assert "Sun et al.'s criterion first met in layer 11's output" in text
    assert "9 layers before the first attention that reads Sun's onset -- it follows the value onset" in text


def test_massive_reports_the_share_of_tokens():
    """Gemma-3 (issue 43): Sun's criterion met on 83 / 54 / 27 % of the tokens after position 0 in layers 1-3."""
    from sinklib.interpretation.sun_sites import SunSites

    sites = SunSites(first=[0, 0, 0, 0, 1.0], later_share=[0, 0.83, 0.54, 0.27, 0],
                     later_per_seq=[0, 52.3, 34.0, 17.0, 0], first_ratio=[1.0] * 5, n_seqs=32, seq_len=64)
    text = tk.massive([_report("g", sun_sites=sites)], [_claim("sun2024.massive_activations", "g", False)])
    assert "G: 83% / 54% / 27% in layers 1 / 2 / 3" in text and "position 0 from layer 4" in text
    assert "at most 2 later positions per window" in text and "holds on 0 of 1" in text
    assert "No gated MLP" in tk.chain([_report("a", chain_numbers=None)], [])


def test_controls_flag_a_rule_that_holds_on_noise():
    learned = _claim("x", "a", True, control=False, at_init=False)
    clean = tk.controls([learned, over_draws([_claim("y", "a", True)] * 3, "3 seeds")])
    noisy = tk.controls([replace(learned, control=True), _claim("v", "a", True, control=True, at_init=True)])
    assert "1 of 2 verdicts were judged over several draws; unsettled among them: none." in clean
    assert "On random weights 0 of 1 controlled rules hold." in clean
    assert "2 of 2 controlled rules hold" in noisy and "training makes the effect: x.a" in noisy
    assert "architectural effect): v.a" in noisy


def test_notebook_states_suns_median_and_a_few_as_the_rule_does():
    """Issue 43 item 7: Sun et al.'s median is the layer output's (their code), not the token's; "a few" is stated."""
    from pathlib import Path

    text = (Path(__file__).parents[1] / "notebooks" / "10_llm.py").read_text()
    assert "median $|h|$ of its token" not in text
    assert "the median $|h|$ of the layer's output" in text and "at most 2 positions after position 0" in text


def test_pooled_verdicts_render_their_intervals():
    """Issue 53 item 3: where a verdict was judged on every draw's windows pooled, the takeaway renders the pooled
    number with its 95% interval and where it lies against the cut, from the claim itself."""
    import torch

    from sinklib.core import pooled

    def windows(replaced: float, moved: float) -> pl.PositionOrToken:
        w = torch.tensor([0.5, 0.5 * replaced, 0.45, 0.5 * moved]).repeat(16, 1)
        w = w + 0.004 * torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
        return pl.PositionOrToken(*w.mean(0).tolist(), shift=8, other_token="x", layers=[3], windows=w)

    claim = pl.position_pooled([windows(0.9, 0.1), windows(0.9, 0.1)], "a", "2 draws")
    text = tk.position_or_token([_report("a")], [claim])
    assert "On every draw's windows pooled: A -- the position: alpha_0 0.5" in text
    assert "above the 0.300 cut" in text and "x, below the 0.500x cut) of it" in text
    shape = replace(_claim("gu2024.llama_family_input_shape", "a", True), measured={"random": 0.62},
                    spread={"intervals": {"random": [0.58, 0.66]}})
    assert "random-token rate is A 62% (95% interval 58%-66%, above the 30% cut)" in tk.sink_by_depth(
        [_report("a")], [shape])
    variance = replace(_claim("origin.variance_discrepancy", "a", True), draws_of="3 draws of 16 windows",
                       measured={"ratio_t0_to_second_half": [18.0]}, spread={"intervals": {"ratio": [15.0, 21.0]}})
    dom = replace(_claim("origin.dimension_disparity", "a", None), unsettled=True, draws_of="3 draws of 16 windows",
                  measured={"dom_first_over_rest_at_sink": 3.1}, spread={"intervals": {"disparity": [2.9, 3.3]}})
    others = [_claim(link, "a", True, draws=(True, True, True)) for link in tk.LINKS[1:] if "disparity" not in link]
    chain = tk.chain([_report("a")], [variance, dom, *others])
    assert "variance discrepancy and dimension disparity judged on every draw's windows pooled" in chain
    assert "super neuron, lock in, massive activations are bias hold or fail only where every draw agrees" in chain
    assert "layer-0 variance ratio 18x (95% interval 15-21x, above the 2x cut)" in chain
    assert "DomRatio where the sink layer reads 3.10x (95% interval 2.90-3.30x, across the 3x cut)" in chain
    assert pooled.BOOTSTRAP_DRAWS == pl.BOOTSTRAP_DRAWS
