"""Checks for ``notebooks/exercises/02_interpretation``: the first links of the structural-origin chain
(variance per position, the super neuron) and the mask edit that makes a sink anywhere."""

from __future__ import annotations

from collections.abc import Callable

import torch

from sinklib.teaching.check._core import Result, Wrong, fresh_inputs, run, same


def position_variance(fn: Callable, quiet: bool = False) -> Result:
    """``fn(x (N, T, d)) -> (T,)``: per position, the variance over the N sequences (population: divide by N),
    averaged over the d features -- the variance discrepancy of the structural-origin chain.

    By hand (N = 2, T = 2, d = 1): x = [[[1], [5]], [[3], [5]]] -> position 0: values 1 and 3, variance 1;
    position 1: 5 and 5, variance 0 -> [1, 0].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.core import metrics

    x = torch.randn(6, 5, 8, generator=torch.Generator().manual_seed(7))
    return run("position_variance", [
        ("hand case", lambda: same(fn(torch.tensor([[[1.0], [5.0]], [[3.0], [5.0]]])), torch.tensor([1.0, 0.0]),
                                    "variance per position")),
        ("random (6, 5, 8)", lambda: same(fn(x), metrics.position_variance(x), "variance per position")),
    ], quiet)


def self_only_mask(fn: Callable, quiet: bool = False) -> Result:
    """``fn(mask (T, T) additive, k) -> (T, T)``: the mask edit that makes token k attend only to itself (row k:
    0 at column k, -inf elsewhere); every other row unchanged. Token k then aggregates values as the first token does.

    By hand (T = 3, causal, k = 1): [[0, -inf, -inf], [0, 0, -inf], [0, 0, 0]] -> row 1 becomes [-inf, 0, -inf].
    """
    raw, fn = fn, fresh_inputs(fn)  # "left as it was" needs the answer itself; every other case a copy
    inf = float("-inf")
    causal = torch.tensor([[0.0, inf, inf], [0.0, 0.0, inf], [0.0, 0.0, 0.0]])
    want = causal.clone()
    want[1] = torch.tensor([inf, 0.0, inf])
    T = 6
    big = torch.zeros(T, T).masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), inf)
    want_big = big.clone()
    want_big[4] = inf
    want_big[4, 4] = 0.0

    def untouched():
        mask = big.clone()  # the student's own copy: an edit stays in it
        raw(mask, 2)
        if not torch.equal(mask, big):
            raise Wrong("the mask passed in was changed: edit a copy (mask.clone())")

    return run("self_only_mask", [
        ("hand case, T = 3, k = 1", lambda: same(fn(causal, 1), want, "mask")),
        ("T = 6, k = 4", lambda: same(fn(big, 4), want_big, "mask")),
        ("the input mask is left as it was", untouched),
        ("softmax of the edited row k is one-hot at k", lambda: same(torch.softmax(fn(big, 4), -1)[4],
                                                                      torch.eye(T)[4], "attention row k")),
    ], quiet)


def super_neuron(fn: Callable, quiet: bool = False) -> Result:
    """``fn(acts (N, T, F)) -> int``: the MLP neuron whose largest |activation| on the first token (position 0, over
    the N sequences) is the largest of all neurons -- the candidate super neuron of a layer.

    By hand: F = 3, one sequence, first token [0.5, -9, 2], later tokens up to 20 on neuron 2 -> neuron 1 (|-9| is
    the first token's largest; later tokens do not count).
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    acts = torch.tensor([[[0.5, -9.0, 2.0], [1.0, 1.0, 20.0]]])
    rand = torch.randn(4, 7, 50, generator=torch.Generator().manual_seed(8))
    rand[2, 0, 31] = -40.0
    rand[:, 1:, 12] = 100.0  # large, but never on the first token
    return run("super_neuron", [
        ("hand case (later tokens do not count; the sign does not matter)", lambda: same(int(fn(acts)), 1,
                                                                                          "neuron")),
        ("random (4, 7, 50) with neuron 31 planted on one sequence's first token",
         lambda: same(int(fn(rand)), 31, "neuron")),
    ], quiet)
