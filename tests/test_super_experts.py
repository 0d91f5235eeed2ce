"""Su et al.'s super experts against a direct transcription of the authors' rule on hand-built tables."""

import numpy as np
import torch

from sinklib.architectures.moe.super_experts import expert_output_max, super_experts


def authors_rule(table, include_layers=0.75, quantile=99.5, times=10):
    """ZunhaiSu/Super-Experts-Profilling, _super_experts_analysis + _identify_super_experts, transcribed."""
    kept = round(len(table) * include_layers)
    rows = [(layer, e, v) for layer, row in enumerate(table) if layer < kept for e, v in enumerate(row)]
    values = [v for _, _, v in rows]
    percentile = np.percentile(values, quantile)
    hits = [(layer, e, v) for layer, e, v in rows if v > percentile and v > np.max(values) // times]
    return sorted(hits, key=lambda h: -h[2])


def test_super_experts_follow_the_authors_code():
    gen = torch.Generator().manual_seed(0)
    table = torch.rand(8, 16, generator=gen) * 5  # (L, E): ordinary experts peak below 5
    table[1, 3], table[2, 7] = 900.0, 120.0  # two experts carry extreme outputs in early layers
    table[7, 0] = 5000.0  # a late-layer outlier expert: outside the first 75% of layers, never a super expert
    got = super_experts(table)
    want = authors_rule(table.tolist())
    assert [(layer, e) for layer, e, _ in got] == [(layer, e) for layer, e, _ in want] == [(1, 3)]
    # over the 96 kept values the 99.5th percentile interpolates between 120 and 900, so 120 falls below it (though
    # above max // 10 = 90); at the 97th percentile both pass, largest first
    got = super_experts(table, quantile=97.0)
    assert [(layer, e) for layer, e, _ in got] == [(layer, e) for layer, e, _ in authors_rule(table.tolist(), quantile=97.0)]
    assert [(layer, e) for layer, e, _ in got] == [(1, 3), (2, 7)]
    small = torch.rand(4, 4, generator=gen)  # max < 10: the floor-division condition is only a > 0
    assert [(a, b) for a, b, _ in super_experts(small)] == [(a, b) for a, b, _ in authors_rule(small.tolist())]


def test_expert_output_max_reads_capture_records():
    choice = torch.tensor([[[0, 2], [1, 2]]])  # (B=1, T=2, k=2)
    outputs = torch.zeros(1, 2, 2, 3)
    outputs[0, 0, 1, 2] = -7.0  # expert 2 at token 0
    outputs[0, 1, 0, 0] = 3.0  # expert 1 at token 1
    outputs[0, 1, 1, 1] = 4.0  # expert 2 at token 1
    assert expert_output_max(choice, outputs, 4).tolist() == [0.0, 3.0, 7.0, 0.0]
