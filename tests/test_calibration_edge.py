"""ACT's sinks are not the window's last keys (issue 43 item 9): a key must be seen by at least as many queries as
edge_min_queries reads off the calibration data (issue 53 item 9: it was a fixed 16 with no counterpart in the
authors' code); the figure names the edge keys apart."""

import matplotlib
import torch

from sinklib.utilization.calibration import (
    act_sink_columns,
    edge_min_queries,
    later_sink_keys,
    non_first_sink_heads,
)
from sinklib.utilization.streaming_plots import key_mass_before_after

matplotlib.use("Agg")


def _uniform_causal(T: int) -> torch.Tensor:
    """(T, T) uniform causal attention: A[t, j] = 1 / (t + 1). Key j's score sum_t A[t, j] / (T - j) rises towards
    the end of the window (the last key's is A[T-1, T-1] = 1/T; key T-2's is (1/(T-1) + 1/T) / 2 ...) -- no sink."""
    return torch.ones(T, T).tril() / torch.arange(1, T + 1)[:, None]


def _self_half(T: int) -> torch.Tensor:
    """(T, T): every query gives itself half its attention, the rest uniform: the last keys' scores are ~0.5."""
    A = _uniform_causal(T) * 0.5
    A[torch.arange(T), torch.arange(T)] += 0.5
    return A


def _scores(A: torch.Tensor) -> torch.Tensor:
    T = A.shape[-1]
    return A.sum(-2) / (T - torch.arange(T))  # (..., T): sum_t A[t, j] / (T - j)


def test_the_cut_is_read_off_the_data_where_the_edge_passes_more_often_than_any_interior_key():
    """Hand-worked: with every query giving itself half, key j's score is (0.5 + 0.5 H) / (T - j) with H the tail
    harmonic sum -- above 0.1 exactly for the keys seen by fewer than ~6 queries at T = 32 (and never in the
    interior); the cut is one more than the largest such T - j. A window where no late key passes more often
    than the interior gives 1: the authors' own rule."""
    T = 32
    score = _scores(_self_half(T))
    passing = [T - j for j in range(T // 4, T) if score[j] > 0.1]
    assert passing and max(passing) < T // 4  # only the edge passes
    assert edge_min_queries(score[None] > 0.1) == max(passing) + 1
    flat = torch.zeros(3, T, dtype=torch.bool)
    flat[:, 10] = True  # a real later sink in the interior, nothing at the edge
    assert edge_min_queries(flat) == 1
    mixed = torch.zeros(4, T, dtype=torch.bool)
    mixed[:, 12] = True  # an interior key passing in every sequence ...
    mixed[:, T - 3:] = True  # ... and edge keys as often: not more often, so not the edge
    assert edge_min_queries(mixed) == 1
    mixed[0, 12] = False  # now the edge passes more often than any interior key
    assert edge_min_queries(mixed) == 4


def test_heads_are_chosen_on_scores_with_the_derived_cut():
    T = 32
    A = _self_half(T)
    sink = _uniform_causal(T) * 0.4
    sink[5:, 5] += 0.4
    sink[torch.arange(T), torch.arange(T)] += torch.where(torch.arange(T) >= 5, 0.2, 0.6)
    scores = torch.stack([torch.stack([_scores(A), _scores(sink)])] * 2)[:, None]  # (N=2, L=1, H=2, T)
    cut = edge_min_queries(scores > 0.1)
    assert cut > 1 and non_first_sink_heads(scores, 0.1, 0.5, cut) == {0: [1]}  # the head with key 5 only
    assert non_first_sink_heads(scores, 0.1, 0.5, 1) == {0: [0, 1]}  # the authors' rule: the edge picks head 0


def test_end_of_window_keys_pass_the_authors_rule_but_are_not_sinks():
    T = 32
    A = _self_half(T)
    cut = edge_min_queries(_scores(A)[None] > 0.1)
    allowed = torch.ones(T, T).tril().bool()[None, None]
    raw = act_sink_columns(A[None, None], allowed, 0.1)[0, 0].nonzero().flatten().tolist()
    kept = act_sink_columns(A[None, None], allowed, 0.1, cut)[0, 0].nonzero().flatten().tolist()
    assert raw and min(raw) > 0 and all(T - j < T for j in raw)  # the authors' rule flags keys ...
    assert max(raw) == T - 1 and kept == [j for j in raw if T - j >= cut]  # ... at the edge too
    assert all(T - j >= cut for j in kept) and set(raw) - set(kept)


def test_a_real_later_sink_is_kept_and_counted_by_queries_that_see_it():
    T = 40
    A = _uniform_causal(T) * 0.4
    A[5:, 5] += 0.4  # key 5 takes 0.4 of every later query: seen by 35 queries, a hidden sink
    A[torch.arange(T), torch.arange(T)] += torch.where(torch.arange(T) >= 5, 0.2, 0.6)  # each query 0.2 to itself
    score = A.sum(0) / (T - torch.arange(T))  # (T,)
    cut = edge_min_queries(score[None] > 0.1)
    sinks = later_sink_keys(score, 0.1, cut).nonzero().flatten().tolist()
    assert sinks == [5] and cut > 1  # the edge's scores average a few weights: the cut must be above them
    assert later_sink_keys(score, 0.1, 1)[T - 1]  # without the cut the last key would be a sink


def test_figure_marks_the_edge_apart():
    T = 32
    A = _uniform_causal(T)
    fig = key_mass_before_after(A, A, [5], min_queries=16, edge_keys=[30, 31])
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("< 16 queries" in lab and "not sinks" in lab for lab in labels)
    assert any(lab == "seen by < 16 queries" for lab in labels)
