"""core.evaluation: the shifted next-token NLL."""

import torch
import torch.nn.functional as F

from sinklib.core.evaluation import shifted_nll


def test_shifted_nll_equals_one_cross_entropy_over_the_shifted_logits():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 9, 50, generator=gen) * 4  # (B, T, V)
    ids = torch.randint(0, 50, (3, 9), generator=gen)
    expected = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view(3, 8)
    for rows in (1, 5, 1024):  # chunk sizes that split rows across batch boundaries, and one chunk
        assert torch.equal(shifted_nll(logits, ids, rows=rows), expected)
