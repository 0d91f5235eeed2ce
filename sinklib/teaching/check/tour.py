"""Checks for ``notebooks/exercises/00_tour``: measuring a sink (alpha_k, the sink rate, the uniform baseline,
DomRatio, massive activations)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from sinklib.teaching.check._core import HAND_A, Result, fresh_inputs, random_attention, run, same


def alpha(fn: Callable, quiet: bool = False) -> Result:
    """``fn(attn (..., T, T), k) -> (...)``: Gu et al.'s alpha_k = 1/(T-k) sum_{t>=k} A[t, k].

    By hand on HAND_A: alpha_0 = (1 + 0.5 + 0.2)/3 = 0.5667, alpha_1 = (0.5 + 0.3)/2 = 0.4, alpha_2 = 0.5/1 = 0.5.
    Random (B, H, T, T) attention is compared with :func:`sinklib.core.metrics.alpha`.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.core import metrics

    A = random_attention(2, 3, 9, seed=1)
    return run("alpha", [
        ("hand case, k = 0", lambda: same(fn(HAND_A, 0), torch.tensor(1.7 / 3), "alpha_0")),
        ("hand case, k = 1 (only queries t >= 1 count, divide by T - 1)", lambda: same(fn(HAND_A, 1),
                                                                                        torch.tensor(0.4), "alpha_1")),
        ("hand case, k = 2", lambda: same(fn(HAND_A, 2), torch.tensor(0.5), "alpha_2")),
        ("random (2, 3, 9, 9) attention, k = 0: one value per (batch, head)",
         lambda: same(fn(A, 0), metrics.alpha(A, 0), "alpha_0")),
        ("random (2, 3, 9, 9) attention, k = 4", lambda: same(fn(A, 4), metrics.alpha(A, 4), "alpha_4")),
    ], quiet)


def sink_rate(fn: Callable, quiet: bool = False) -> Result:
    """``fn(alphas (N, L, H), eps) -> float``: the fraction of (sequence, layer, head) entries with alpha > eps.

    By hand: alphas [[[0.1, 0.5], [0.31, 0.3]]] (N=1, L=2, H=2) with eps = 0.3 -> 0.5 and 0.31 count, 0.3 does not
    (strictly greater): 2/4 = 0.5.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.core import metrics

    hand = torch.tensor([[[0.1, 0.5], [0.31, 0.3]]])
    rand = torch.rand(5, 4, 3, generator=torch.Generator().manual_seed(2))
    return run("sink_rate", [
        ("hand case, eps = 0.3 (0.3 itself is not above eps)", lambda: same(fn(hand, 0.3), 0.5, "sink rate")),
        ("hand case, eps = 0.05", lambda: same(fn(hand, 0.05), 1.0, "sink rate")),
        ("random (5, 4, 3) alphas, eps = 0.3", lambda: same(fn(rand, 0.3), metrics.sink_rate(rand, 0.3), "sink rate")),
    ], quiet)


def uniform_alpha(fn: Callable, quiet: bool = False) -> Result:
    """``fn(T) -> float``: alpha_0 if every query spread its attention evenly over the keys it sees,
    (1/T) sum_{t=0}^{T-1} 1/(t+1) = H_T / T.

    By hand: T = 1 -> 1; T = 2 -> (1 + 1/2)/2 = 0.75; T = 4 -> (1 + 1/2 + 1/3 + 1/4)/4 = 0.5208.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.core.analysis import ContextSweep

    return run("uniform_alpha", [
        ("T = 1", lambda: same(fn(1), 1.0, "alpha_0")),
        ("T = 2", lambda: same(fn(2), 0.75, "alpha_0")),
        ("T = 4", lambda: same(fn(4), (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4, "alpha_0")),
        ("T = 64 (Gu et al.'s length)", lambda: same(fn(64), ContextSweep.uniform_baseline(64), "alpha_0")),
    ], quiet)


def dom_ratio(fn: Callable, quiet: bool = False) -> Result:
    """``fn(h (..., d)) -> (...)``: DomRatio(h) = max_j |h_j| / mean_j |h_j|.

    By hand: h = [1, -4, 1, 2]: max |h| = 4, mean |h| = 8/4 = 2 -> 2 (the sign does not matter). A one-hot vector of
    length d gives d.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.core import metrics

    h = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(3))
    return run("dom_ratio", [
        ("hand case [1, -4, 1, 2]", lambda: same(fn(torch.tensor([1.0, -4.0, 1.0, 2.0])), torch.tensor(2.0),
                                                  "DomRatio")),
        ("one-hot of length 8", lambda: same(fn(torch.eye(8)[3]), torch.tensor(8.0), "DomRatio")),
        ("random (3, 5, 16) hidden states: one value per token", lambda: same(fn(h), metrics.dom_ratio(h),
                                                                               "DomRatio")),
    ], quiet)


def massive(fn: Callable, quiet: bool = False) -> Result:
    """``fn(h (..., T, d)) -> bool (..., T, d)``: Sun et al.'s massive activations, |h_{t,j}| > 100 and
    |h_{t,j}| > 1000 x the median |h| over the sequence's whole T x d layer output (their code's
    ``torch.median(feat.abs())``; for an even count torch takes the lower middle value).

    By hand (T = 1, d = 5, median |h| = 1): 2000 is massive; -2000 too (magnitude); 150 is above 100 but only 150 x
    the median -- not massive. With median 0.01, 90 is 9000 x the median but not above 100 -- not massive. Two tokens
    [5, 2000, 5, 5] and [0.5, 0.5, 0.5, 0.5]: the layer's median is 0.5 (the lower middle of eight), so 2000 is
    4000 x it -- massive, although it is only 400 x its own token's median (5).
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.core import metrics

    h1 = torch.tensor([[1.0, 2000.0, -1.0, 150.0, 1.0]])
    h2 = torch.tensor([[0.01, 90.0, -0.01, 0.01, -2000.0]])
    h3 = torch.tensor([[5.0, 2000.0, 5.0, 5.0], [0.5, 0.5, 0.5, 0.5]])
    rand = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(4))
    rand[0, 0, 5], rand[1, 3, 7] = 3000.0, -500.0
    return run("massive", [
        ("hand case [1, 2000, -1, 150, 1]", lambda: same(fn(h1), torch.tensor([[0, 1, 0, 0, 0]]).bool(), "mask")),
        ("hand case [0.01, 90, -0.01, 0.01, -2000]", lambda: same(fn(h2), torch.tensor([[0, 0, 0, 0, 1]]).bool(),
                                                                   "mask")),
        ("hand case: the layer's median, not the token's", lambda: same(
            fn(h3), torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0]]).bool(), "mask")),
        ("random (2, 6, 32) with two planted outliers", lambda: same(fn(rand), metrics.massive_mask(rand), "mask")),
    ], quiet)
