"""ACT's sinks are not the window's last keys (issue 43 item 9): a key must be seen by at least ACT_MIN_QUERIES
queries; the figure and the takeaway name the edge keys apart."""

import matplotlib
import torch

from sinklib.core.claims import Claim
from sinklib.utilization import takeaways as saw
from sinklib.utilization.calibration import ACT_MIN_QUERIES, act_sink_columns, later_sink_keys
from sinklib.utilization.streaming_plots import key_mass_before_after

matplotlib.use("Agg")


def _uniform_causal(T: int) -> torch.Tensor:
    """(T, T) uniform causal attention: A[t, j] = 1 / (t + 1). Key j's score sum_t A[t, j] / (T - j) rises towards
    the end of the window (the last key's is A[T-1, T-1] = 1/T; key T-2's is (1/(T-1) + 1/T) / 2 ...) -- no sink."""
    return torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None]


def test_end_of_window_keys_pass_the_authors_rule_but_are_not_sinks():
    T = 32
    A = _uniform_causal(T)
    A[:, :] = A * 0.5
    A[torch.arange(T), torch.arange(T)] += 0.5  # every query gives itself half: the last keys' scores are ~0.5
    allowed = torch.ones(T, T).tril().bool()[None, None]
    raw = act_sink_columns(A[None, None], allowed, 0.1)[0, 0].nonzero().flatten().tolist()
    kept = act_sink_columns(A[None, None], allowed, 0.1, ACT_MIN_QUERIES)[0, 0].nonzero().flatten().tolist()
    assert raw and min(raw) > 0 and all(T - j < T for j in raw)  # the authors' rule flags keys ...
    assert max(raw) == T - 1 and kept == [j for j in raw if T - j >= ACT_MIN_QUERIES]  # ... at the edge too
    assert all(T - j >= ACT_MIN_QUERIES for j in kept) and set(raw) - set(kept)


def test_a_real_later_sink_is_kept_and_counted_by_queries_that_see_it():
    T = 40
    A = _uniform_causal(T) * 0.4
    A[5:, 5] += 0.4  # key 5 takes 0.4 of every later query: seen by 35 queries, a hidden sink
    A[torch.arange(T), torch.arange(T)] += torch.where(torch.arange(T) >= 5, 0.2, 0.6)  # each query 0.2 to itself
    score = A.sum(0) / (T - torch.arange(T))  # (T,)
    sinks = later_sink_keys(score, 0.1, ACT_MIN_QUERIES).nonzero().flatten().tolist()
    assert sinks == [5] and ACT_MIN_QUERIES >= 8  # the edge's scores average 2-8 weights: the cut must be above
    assert later_sink_keys(score, 0.1, 1)[T - 1]  # without the cut the last key would be a sink


def test_figure_marks_the_edge_apart():
    T = 32
    A = _uniform_causal(T)
    fig = key_mass_before_after(A, A, [5], min_queries=16, edge_keys=[30, 31])
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("< 16 queries" in lab and "not sinks" in lab for lab in labels)
    assert any(lab == "seen by < 16 queries" for lab in labels)


def test_takeaway_names_the_cut_and_the_edge_keys():
    claim = Claim(id="yu2024.act_calibration_helps", statement="s", source="x", rule="r", published=None,
                  measured={}, holds=None, note="proxy", follows="f")
    text = saw.act({"original": 31.3, "ACT": 31.0}, 40, 270, claim, 16, 256, "M", 16,
                   {"layer": 14, "head": 3, "sink_keys": [17, 60], "edge_keys": [250, 253, 254]})
    assert "seen by at least 16 queries" in text and "positions 250, 253, 254" in text
    assert "2 keys count as sinks (positions 17, 60)" in text
