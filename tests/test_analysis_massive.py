"""analysis.massive_dims_of: Sun et al.'s massive dimensions from the candidate tokens only equal find_massive's."""

import torch

from sinklib.core import analysis, metrics


def test_massive_dims_of_equals_find_massive():
    g = torch.Generator().manual_seed(0)
    for trial in range(40):
        h = torch.randn(3, 17, 64, generator=g)  # median |h| ~ 0.67: an entry > 670 and > 100 is massive
        for _ in range(trial % 5):  # spikes of either sign, some massive, some only large
            n, t, j = (int(torch.randint(0, s, (1,), generator=g)) for s in (3, 17, 64))
            h[n, t, j] = float(torch.rand(1, generator=g)) * 3000 - 1500
        if trial % 3 == 0:  # a token above 100 everywhere: large, never 1000x its own median
            h[1, 2] = 200 + torch.rand(64, generator=g)
        assert analysis.massive_dims_of(h) == set(metrics.find_massive(h).dims), trial
    assert analysis.massive_dims_of(torch.zeros(2, 3, 8)) == set()
