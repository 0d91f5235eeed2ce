"""Checks for ``notebooks/exercises/11_moe``: the router's entropy, each expert's largest output and Su et al.'s
super-expert rule (arXiv 2507.23279, as the authors' code applies it)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from sinklib.teaching.check._core import Result, Wrong, fresh_inputs, run, same


def router_entropy(fn: Callable, quiet: bool = False) -> Result:
    """``fn(logits (..., E)) -> (...)``: H = -sum_e p_e log p_e in nats, p = softmax(logits).

    By hand: equal logits over 4 experts -> ln 4 = 1.3863; logits [0, ln 3] -> p = [1/4, 3/4] ->
    -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.5623; one logit far above the rest -> 0 (0 log 0 counts as 0, not nan).
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.moe.moe_sinks import router_entropy as reference

    rand = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(21)) * 3
    return run("router_entropy", [
        ("equal logits over 4 experts", lambda: same(fn(torch.zeros(4)), torch.tensor(math.log(4)), "entropy")),
        ("hand case [0, ln 3]", lambda: same(fn(torch.tensor([0.0, math.log(3)])),
                                             torch.tensor(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75))),
                                             "entropy")),
        ("one logit 1000 above the rest (no nan)", lambda: same(fn(torch.tensor([1000.0, 0.0, 0.0])),
                                                                torch.tensor(0.0), "entropy")),
        ("random (3, 5, 8): one value per token", lambda: same(fn(rand), reference(rand), "entropy")),
    ], quiet)


def expert_output_max(fn: Callable, quiet: bool = False) -> Result:
    """``fn(choice (B, T, k), outputs (B, T, k, d), n_experts) -> (E,)``: for each expert, the largest |y| over
    every token that chose it and every channel of its output; 0 for an expert no token chose.

    By hand (one token, k = 2, E = 3): chose experts [2, 0] with outputs [[1, -5], [3, 2]] -> expert 2: 5,
    expert 0: 3, expert 1 (not chosen): 0 -> [3, 0, 5].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.moe.super_experts import expert_output_max as reference

    gen = torch.Generator().manual_seed(22)
    choice = torch.stack([torch.randperm(6, generator=gen)[:2] for _ in range(4 * 5)]).view(4, 5, 2)
    choice[choice == 4] = 1  # expert 4 is never chosen: it must come back as 0
    outputs = torch.randn(4, 5, 2, 7, generator=gen)
    return run("expert_output_max", [
        ("hand case: one token chose experts [2, 0]", lambda: same(
            fn(torch.tensor([[[2, 0]]]), torch.tensor([[[[1.0, -5.0], [3.0, 2.0]]]]), 3), torch.tensor([3.0, 0.0, 5.0]),
            "maxima")),
        ("random (4, 5, 2) choices over 6 experts, expert 4 never chosen",
         lambda: same(fn(choice, outputs, 6), reference(choice, outputs, 6), "maxima")),
    ], quiet)


def super_experts(fn: Callable, quiet: bool = False) -> Result:
    """``fn(output_max (L, E), include_layers, quantile, times) -> [(layer, expert), ...]`` largest a first: Su et
    al.'s super experts as their code finds them -- keep the first round(L x include_layers) layers; an expert is
    super when its a is above the ``quantile``-th percentile of every kept a (``torch.quantile``, linear
    interpolation like numpy's) *and* above floor(max a / times) (the code's ``np.max(values) // times``).

    By hand (L = 4, include_layers 0.75: layers 0-2 kept, E = 4, quantile 90, times 10): a = 1 everywhere except
    layer 1 expert 2 = 600 and layer 3 expert 0 = 900 (not kept). The 90th percentile of the 12 kept values (eleven
    1s and the 600) sits at sorted index 0.9 x 11 = 9.9, between two 1s -> 1; floor(600 / 10) = 60 -> [(1, 2)].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.moe.super_experts import super_experts as reference

    hand = torch.ones(4, 4)
    hand[1, 2], hand[3, 0] = 600.0, 900.0
    gen = torch.Generator().manual_seed(23)
    rand = torch.rand(8, 16, generator=gen) * 5
    rand[2, 3], rand[4, 9], rand[5, 1], rand[7, 7] = 400.0, 350.0, 30.0, 1000.0  # 30 passes the percentile only

    def pairs(found) -> list[tuple[int, int]]:
        try:
            return [(int(h[0]), int(h[1])) for h in found]
        except (TypeError, IndexError) as err:
            raise Wrong(f"return a list of (layer, expert) pairs, got {found!r}") from err

    def expect(a, include, quantile, times):
        return lambda: same(pairs(fn(a, include, quantile, times)),
                            [(h[0], h[1]) for h in reference(a, include, quantile, times)], "super experts")

    return run("super_experts", [
        ("hand case (layer 3 is not kept)", lambda: same(pairs(fn(hand, 0.75, 90, 10)), [(1, 2)], "super experts")),
        ("random (8, 16): 6 layers kept, 99.5th percentile (interpolated between 350 and 400)",
         expect(rand, 0.75, 99.5, 10)),
        ("random (8, 16), every layer, 95th percentile: a 30 above it but not above max // 10 = 100",
         expect(rand, 1.0, 95, 10)),
    ], quiet)
