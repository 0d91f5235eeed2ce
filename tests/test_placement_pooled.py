"""Issue 53 item 3: 10_llm's pretrained verdicts judged on every draw's windows pooled, with a bootstrap interval over
windows -- holds / fails when the interval lies on one side of the cut, unsettled only when it straddles it. Each
case is hand-built: the draws disagree (majority of draws: unsettled) while the pooled interval is clearly on one
side, and a pooled number that sits on its cut."""

from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from sinklib.architectures.llm import llm_survey
from sinklib.architectures.llm import placement as pl
from sinklib.architectures.llm import survey_chain as sc
from sinklib.core import metrics, pooled
from sinklib.core import quantities as q
from sinklib.core.claims import over_draws
from sinklib.core.results import load_reference
from sinklib.interpretation import chain, origin_claims

GU = load_reference("gu2024_sink_rates")
PAPER = load_reference("structural_origin")


def _declared(claim) -> None:
    """Every number of the record (measured, spread, margin) is declared, and the record round-trips through the
    claims.json schema (tests/test_quantities_utilization's checks)."""
    import json
    from dataclasses import replace

    from sinklib.core.claims import check_schema
    from sinklib.core.claims_file import CLAIM, record_of

    undeclared = [(g, path) for g in q.GROUPS for path, _ in q.flatten(getattr(claim, g))
                  if not any(q._matches(p, q.qualified(g, path)) for p in claim.quantities)]
    assert not undeclared
    check_schema(replace(claim, control_note="none here"))
    assert CLAIM.validate_json(json.dumps(record_of(claim)), strict=True).quantities == claim.quantities


def _noise(n: int, seed: int, scale: float = 0.005) -> torch.Tensor:
    return scale * torch.randn(n, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------------- the helpers
def test_settle_tries_every_way_an_open_condition_could_fall():
    sure = pooled.Condition("a", 1.0, pooled.Interval(2.0, 1.5, 2.5))  # above 1
    across = pooled.Condition("b", 1.0, pooled.Interval(1.1, 0.8, 1.4))  # straddles 1
    below = pooled.Condition("c", 1.0, pooled.Interval(0.5, 0.4, 0.6))
    assert (sure.answer(), across.answer(), below.answer()) == (True, None, False)
    both = lambda c: c["a"] and c["b"]  # noqa: E731
    assert pooled.settle([sure, across], both)[:2] == (None, True)  # b decides: unsettled
    assert pooled.settle([below, across], lambda c: c["c"] and c["b"])[:2] == (False, False)  # c fails it anyway
    assert pooled.settle([sure, pooled.Condition("f", fixed=False)], lambda c: c["a"] and c["f"])[:2] == (False, False)
    assert pooled.Condition("n", 1.0, pooled.Interval(float("nan"), float("nan"), float("nan"))).answer() is False


def test_ratio_interval_is_the_ratio_of_pooled_sums():
    num, den = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([2.0, 2.0, 2.0, 2.0])
    iv = pooled.ratio_interval(num, den, seed=0)
    assert iv.value == pytest.approx(10 / 8) and iv.low <= iv.value <= iv.high
    assert pooled.ratio_interval(num, den, seed=0) == iv  # seeded: the same resamples
    assert pooled.mean_interval(torch.full((8,), 0.4)).bounds == pytest.approx([0.4, 0.4])


# ----------------------------------------------------------------------------------------------- position or token
def _draw(replaced: float, moved_original: float, n: int = 16, own: float = 0.5, seed: int = 0) -> pl.PositionOrToken:
    """n windows whose alphas are ``own`` as given, ``replaced`` x own with another first token, 0.9 x own with
    another text in front and ``moved_original`` x own for the moved first token (each with a little noise)."""
    ratios = torch.tensor([1.0, replaced, 0.9, moved_original]).repeat(n, 1)
    windows = own * ratios + torch.stack([_noise(n, seed + k) for k in range(4)], dim=1)  # (n, 4)
    return pl.PositionOrToken(*windows.mean(0).tolist(), shift=8, other_token="x", layers=[3], windows=windows)


def test_position_pooled_holds_where_the_draws_disagree():
    """Draw 0 looks like the token (another first token keeps 0.45x, the moved one 0.55x); draws 1-2 like the
    position (0.7x, 0.3x). By draws: unsettled. Pooled over 48 windows: 0.62x and 0.38x, both intervals clear of the
    0.5x cut -- the position holds."""
    draws = [_draw(0.45, 0.55, seed=0), _draw(0.7, 0.3, seed=10), _draw(0.7, 0.3, seed=20)]
    assert [d.verdict() for d in draws] == [False, True, True]
    assert pl.position_over_draws(draws, "m", "3 draws").verdict() == "unsettled"
    claim = pl.position_pooled(draws, "m", "3 draws of 16 windows")
    assert claim.holds is True and not claim.unsettled and claim.draws == (False, True, True)
    lo, hi = claim.spread["intervals"]["replaced"]
    assert 0.5 < lo < claim.measured["replaced"] / claim.measured["own"] < hi
    assert claim.spread["intervals"]["moved_original"][1] < 0.5 and claim.measured["answer"] == "position"
    assert "judged on all 48 windows pooled" in claim.note and len(claim.spread["values"]) == 3
    _declared(claim)


def test_position_pooled_is_unsettled_only_where_an_interval_straddles_its_cut():
    """Windows alternating 0.3x / 0.7x with another first token pool to 0.5x: the rule's answer depends on which
    side it falls (the position, or neither) -- unsettled; with no sink at all (alpha_0 0.2) it fails whatever the
    ratios, though one draw alone would call it the position."""
    mixed = [_draw(r, 0.3, n=1, seed=i) for i, r in enumerate([0.3, 0.7] * 12)]
    claim = pl.position_pooled(mixed, "m", "24 draws")
    lo, hi = claim.spread["intervals"]["replaced"]
    assert claim.verdict() == "unsettled" and lo < 0.5 < hi and claim.margin["of"] == "replaced"
    assert "straddles its cut" in claim.note
    weak = [_draw(0.7, 0.3, own=0.2, seed=s) for s in (0, 10)]
    assert pl.position_pooled(weak, "m", "2 draws").holds is False
    assert pl.position_pooled([pl.PositionOrToken(0.6, 0.6, 0.58, 0.02, 8, "x", [3])] * 2, "m", "w").draws_of == "w"


# ----------------------------------------------------------------------------------------------- Gu et al.'s shape
def _shape_report(random: list[torch.Tensor], natural: float = 0.7, repeated: float = 0.0) -> SimpleNamespace:
    rates = {"natural": natural, "random": float(random[0].mean()), "repeated": repeated}
    return SimpleNamespace(sink_rate=rates, absolute_positions=False,
                           draws={"seeds": [0, 1, 2], "random": [float(r.mean()) for r in random],
                                  "random_by_sequence": random,
                                  "sizes": {"random tokens": [len(r) for r in random]}})


def test_shape_pooled_holds_where_the_random_token_seeds_disagree():
    """Seed 0: 32 sequences at 0.35 (holds), seeds 1-2: 8 at 0.25 each (fail). By seeds: unsettled; pooled over 48
    sequences: 0.317 with an interval above 0.3 -- holds."""
    random = [0.35 + _noise(32, 0), 0.25 + _noise(8, 1), 0.25 + _noise(8, 2)]
    report = _shape_report(random)
    assert llm_survey.shape_over_draws(report, GU).verdict() == "unsettled"
    claim = llm_survey.shape_pooled(report, GU)
    lo, hi = claim.spread["interval"]
    assert claim.holds is True and claim.draws == (True, False, False) and 0.3 < lo < claim.measured["random"] < hi
    assert claim.measured["random"] == pytest.approx(float(torch.cat(random).mean()))
    assert "48 random-token sequences pooled" in claim.note and claim.margin["cut"] == 0.3
    _declared(claim)


def test_shape_pooled_is_unsettled_on_its_cut_and_fails_on_a_repeated_token():
    straddling = [torch.tensor([0.1, 0.5] * 16), torch.tensor([0.1, 0.5] * 4), torch.tensor([0.5, 0.1] * 4)]
    assert llm_survey.shape_pooled(_shape_report(straddling), GU).verdict() == "unsettled"
    # the repeated token sinks: fails whatever the random tokens' interval
    assert llm_survey.shape_pooled(_shape_report(straddling, repeated=0.4), GU).holds is False
    report = _shape_report(straddling)
    report.absolute_positions = True  # outside the Llama shape: no verdict, pooled or not
    assert llm_survey.shape_pooled(report, GU).holds is None


# ----------------------------------------------------------------------------------------------- the chain's link 1
def test_position_variances_is_metrics_position_variance_for_every_resample():
    x = torch.randn(6, 5, 4, generator=torch.Generator().manual_seed(0)) + 3.0
    ones = torch.ones(1, 6)
    torch.testing.assert_close(chain.position_variances(x, ones)[0], metrics.position_variance(x).double(),
                               rtol=1e-5, atol=1e-7)
    idx = torch.tensor([[0, 0, 2, 3, 5, 5]])
    torch.testing.assert_close(chain.position_variances(x, pooled.counts(idx))[0],
                               metrics.position_variance(x[idx[0]]).double(), rtol=1e-5, atol=1e-7)


def _head_outputs(ratio: float, n: int = 48, t: int = 16, c: int = 8, seed: int = 0) -> torch.Tensor:
    """Random head outputs (n, t, c) whose position 0 has exactly ``ratio`` x the second half's mean variance."""
    x = torch.randn(n, t, c, generator=torch.Generator().manual_seed(seed))
    v = metrics.position_variance(x)
    x[:, 0] *= (ratio * v[t // 2:].mean() / v[0]).sqrt()
    return x


def _variance_claim(ratio: float, largest: bool = True):
    return origin_claims.variance_discrepancy([ratio], [largest])


def test_variance_pooled_holds_where_the_draws_disagree(monkeypatch):
    """Draws at 1.9x / 2.8x / 2.8x the second half's variance (fails / holds / holds): unsettled by draws. Pooled
    over 48 random-token sequences at 2.6x, its bootstrap interval over sequences above 2 -- holds."""
    per_draw = [_variance_claim(1.9), _variance_claim(2.8), _variance_claim(2.8)]
    assert over_draws(per_draw, "3 draws").verdict() == "unsettled"
    x = _head_outputs(2.6)
    monkeypatch.setattr(chain, "head_outputs", lambda lm, ids, layers, bs: {0: x})
    claim = chain.variance_pooled(SimpleNamespace(n_layers=1), torch.zeros(48, 16), per_draw, "3 draws", seed=0)
    lo, hi = claim.spread["interval"]
    assert claim.holds is True and claim.draws == (False, True, True) and 2.0 < lo < 2.6 < hi
    assert claim.measured["ratio_t0_to_second_half"][0] == pytest.approx(2.6, rel=1e-4)
    assert claim.spread["values"] == pytest.approx([1.9, 2.8, 2.8]) and "48 random-token sequences" in claim.note
    _declared(claim)


def test_variance_pooled_is_unsettled_on_its_cut(monkeypatch):
    x = _head_outputs(2.0)
    monkeypatch.setattr(chain, "head_outputs", lambda lm, ids, layers, bs: {0: x})
    claim = chain.variance_pooled(SimpleNamespace(n_layers=1), torch.zeros(48, 16),
                               [_variance_claim(2.2), _variance_claim(1.8)], "2 draws")
    assert claim.verdict() == "unsettled" and claim.margin["of"] == "ratio"
    quiet = _head_outputs(1.2)  # far below 2x: fails, though one draw held
    monkeypatch.setattr(chain, "head_outputs", lambda lm, ids, layers, bs: {0: quiet})
    assert chain.variance_pooled(SimpleNamespace(n_layers=1), torch.zeros(48, 16),
                              [_variance_claim(2.2), _variance_claim(1.8)], "2 draws").holds is False


# ----------------------------------------------------------------------------------------------- the chain's link 3
def _disparity_windows(dom: list[float], sink: int = 2, n_layers: int = 4) -> dict:
    """Per-window values of one draw: the first token's value onset at layer 1 (500 on the massive dim), the sink
    from layer ``sink`` (alpha_0 0.6), and the first token's DomRatio ``dom[n]`` x the others' (1.0) in the state
    the sink layer reads (layer sink - 1)."""
    n = len(dom)
    first = torch.zeros(n_layers, n, 1, dtype=torch.float64)
    first[1:] = 500.0
    alpha = torch.full((n_layers, n), 0.1)
    alpha[sink:] = 0.6
    dnf = torch.full((n_layers, n), 1.0)
    dnf[sink - 1] = torch.tensor(dom)
    return {"dom_normed_first": dnf, "dom_normed_rest": torch.ones(n_layers, n), "alpha_first": alpha,
            "first_values": first, "super_layer": 1}


def _disparity_claim(dom: float):
    return origin_claims.disparity_then_sink([1], 2, dom, 1.0, PAPER)


def test_disparity_pooled_holds_where_the_draws_disagree():
    """DomRatio 2.8x in draw 0, 3.4x in draws 1-2 (the cut is 3x): unsettled by draws; pooled over 48 windows 3.2x,
    interval above 3, the order (sink 0 layers after the first reading attention) holds -- holds."""
    doms = [2.8, 3.4, 3.4]
    windows = [_disparity_windows((d + _noise(16, i, 0.05)).tolist()) for i, d in enumerate(doms)]
    per_draw = [_disparity_claim(d) for d in doms]
    assert over_draws(per_draw, "3 draws").verdict() == "unsettled"
    claim = sc.disparity_pooled(windows, per_draw, PAPER, 64, None, "3 draws")
    lo, hi = claim.spread["interval"]
    assert claim.holds is True and claim.draws == (False, True, True) and 3.0 < lo < hi
    m = claim.measured
    assert m["first_token_value_onsets"] == [1] and m["sink_onset"] == 2 and m["order_holds"] is True
    assert m["dom_first_over_rest_at_sink"] == pytest.approx(3.2, abs=0.02)
    _declared(claim)


def test_disparity_pooled_is_unsettled_on_its_cut_and_fails_out_of_order():
    windows = [_disparity_windows([2.5, 3.5] * 8), _disparity_windows([3.5, 2.5] * 8)]
    per_draw = [_disparity_claim(2.9), _disparity_claim(3.1)]
    claim = sc.disparity_pooled(windows, per_draw, PAPER, 64, None, "2 draws")
    assert claim.verdict() == "unsettled" and claim.margin["of"] == "disparity"
    early = [_disparity_windows([2.5, 3.5] * 8, sink=1), _disparity_windows([3.5, 2.5] * 8, sink=1)]
    out_of_order = sc.disparity_pooled(early, per_draw, PAPER, 64, None, "2 draws")  # the sink before its reader
    assert out_of_order.holds is False and out_of_order.measured["order_holds"] is False


def test_window_disparity_stats_keep_what_their_means_are_taken_over(tiny):
    from sinklib.interpretation import origin

    ids = torch.randint(3, 200, (3, 12), generator=torch.Generator().manual_seed(0))
    (means, firsts), (means2, firsts2, windows) = origin.measure(
        tiny, ids, [origin.DisparityStats([1, 2]), sc.WindowDisparityStats([1, 2])], batch_size=2)
    torch.testing.assert_close(firsts, firsts2)
    for k in ("dom_normed_first", "dom_normed_rest", "alpha_first"):
        torch.testing.assert_close(windows[k].mean(1), means[k], equal_nan=True)
        assert windows[k].shape == (tiny.n_layers, 3)
    torch.testing.assert_close(windows["first_values"].mean(1).float(), firsts)


def test_pooled_interval_reads_a_pooled_claims_condition():
    """10_llm renders a pooled verdict's number with its interval: the interval of the named condition, or None where
    the claim was not pooled (no interval, or a NaN one)."""
    claim = pl.position_pooled([_draw(0.7, 0.3, seed=0), _draw(0.7, 0.3, seed=10)], "m", "2 draws")
    lo, hi = llm_survey.pooled_interval(claim, "replaced")
    assert [lo, hi] == pytest.approx(claim.spread["intervals"]["replaced"]) and lo < hi
    assert llm_survey.pooled_interval(claim, "no such condition") is None
    assert llm_survey.pooled_interval(pl.position_claim(_draw(0.7, 0.3), "m"), "replaced") is None  # one draw
    assert llm_survey.pooled_interval(None, "replaced") is None
    nan = replace(claim, spread={"intervals": {"replaced": [float("nan"), float("nan")]}})
    assert llm_survey.pooled_interval(nan, "replaced") is None
    assert pooled.BOOTSTRAP_DRAWS == pl.BOOTSTRAP_DRAWS


def test_uniform_share_is_the_even_spread_of_each_query():
    """alpha_0 if every query t spread its attention evenly over its t + 1 keys: H_N / N."""
    assert abs(llm_survey.uniform_share(256) - 0.0239) < 1e-3
    assert llm_survey.uniform_share(1) == 1.0 and llm_survey.uniform_share(2) == pytest.approx(0.75)
