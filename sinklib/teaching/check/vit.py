"""Checks for ``notebooks/exercises/13_vit``: high-norm patch tokens, Jiang et al.'s register neurons and the
test-time register edit that moves their activation onto an extra token (arXiv 2506.08010)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from sinklib.teaching.check._core import Result, Wrong, fresh_inputs, run, same


def outlier_mask(fn: Callable, quiet: bool = False) -> Result:
    """``fn(patch_norms (B, P), factor) -> bool (B, P)``: the high-norm patches, ||h_t|| > factor x the median patch
    norm of the same image (``torch.median``: for an even count, the lower of the two middle values).

    By hand (factor 3): [1, 2, 10, 3, 2] -> median 2, cut 6 -> only 10. [1, 2, 6, 2, 3]: 6 is exactly 3 x the
    median, not above it -> none. [1, 2, 4, 7] (even): median 2 (not 3), cut 6 -> 7 is an outlier.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.vit.vit_sinks import outlier_mask as reference

    gen = torch.Generator().manual_seed(18)
    norms = torch.randn(4, 256, generator=gen).exp()  # log-normal, a few far above the median
    norms[1, 17] = 80.0
    return run("outlier_mask", [
        ("hand case [1, 2, 10, 3, 2], factor 3", lambda: same(fn(torch.tensor([[1.0, 2, 10, 3, 2]]), 3.0),
                                                              torch.tensor([[0, 0, 1, 0, 0]]).bool(), "mask")),
        ("hand case [1, 2, 6, 2, 3]: exactly 3 x the median is not above it",
         lambda: same(fn(torch.tensor([[1.0, 2, 6, 2, 3]]), 3.0), torch.zeros(1, 5, dtype=torch.bool), "mask")),
        ("hand case [1, 2, 4, 7], an even count (torch.median: 2)",
         lambda: same(fn(torch.tensor([[1.0, 2, 4, 7]]), 3.0), torch.tensor([[0, 0, 0, 1]]).bool(), "mask")),
        ("random (4, 256) norms, factor 3: each image has its own median",
         lambda: same(fn(norms, 3.0), reference(norms, 3.0), "mask")),
        ("random (4, 256) norms, factor 2", lambda: same(fn(norms, 2.0), reference(norms, 2.0), "mask")),
    ], quiet)


def register_scores(fn: Callable, quiet: bool = False) -> Result:
    """``fn(acts (B, T, F), positions (B, T) bool) -> (F,)``: Jiang et al.'s register-neuron score for one layer --
    per image with at least one outlier position, the mean |activation| over those positions; then the mean over
    those images (images without outliers do not count).

    By hand (F = 2): image 0, outliers at tokens 1 and 2 with activations [1, -3] and [3, 1] -> [2, 2]; image 1,
    no outliers -> skipped: [2, 2]. With image 1's outlier at token 0, activations [4, 0] -> mean of [2, 2] and
    [4, 0] = [3, 1].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.vit.registers import register_scores as reference

    acts = torch.tensor([[[9.0, 9.0], [1.0, -3.0], [3.0, 1.0]],
                         [[4.0, 0.0], [7.0, 7.0], [7.0, 7.0]]])  # (B=2, T=3, F=2)
    one = torch.tensor([[False, True, True], [False, False, False]])
    two = torch.tensor([[False, True, True], [True, False, False]])
    gen = torch.Generator().manual_seed(19)
    rand = torch.randn(5, 12, 40, generator=gen)
    where = torch.rand(5, 12, generator=gen) > 0.8
    where[3] = False
    where[0, :2] = True
    return run("register_scores", [
        ("hand case: one image with outliers (|activation|: the sign does not count)",
         lambda: same(fn(acts, one), torch.tensor([2.0, 2.0]), "scores")),
        ("hand case: two images -- the mean of the per-image means, not of all positions together",
         lambda: same(fn(acts, two), torch.tensor([3.0, 1.0]), "scores")),
        ("random (5, 12, 40), one image without outliers", lambda: same(fn(rand, where), reference(rand, where),
                                                                       "scores")),
    ], quiet)


def move_to_registers(fn: Callable, quiet: bool = False) -> Result:
    """``fn(acts (B, T, F), neurons, n_registers) -> (B, T, F)``: the test-time register edit of one MLP, as Jiang et
    al.'s code does it. The last ``n_registers`` tokens are the registers. Per image, v = the activation of largest
    magnitude, with its sign, over all tokens and all listed neurons (their ``sign_max``: one value per image and
    layer); every register gets v in each listed neuron, every other token except CLS (token 0) gets 0 there; CLS
    and the other neurons stay as they were; the tensor passed in is not changed.

    By hand (one register, neurons [0]): tokens [[1, 5], [7, 2], [0, 0]] -> v = 7 -> [[1, 5], [0, 2], [7, 0]] (CLS
    keeps its 1). Two neurons [0, 1], tokens [[0.5, -2, 1], [3, -9, 0], [0, 0, 0]]: v = -9 (|-9| > 3) ->
    [[0.5, -2, 1], [0, 0, 0], [-9, -9, 0]].
    """
    raw, fn = fn, fresh_inputs(fn)  # "left as it was" needs the answer itself; every other case a copy
    from sinklib.architectures.vit.registers import move_to_registers as reference

    hand = torch.tensor([[[1.0, 5.0], [7.0, 2.0], [0.0, 0.0]]])
    signed = torch.tensor([[[0.5, -2.0, 1.0], [3.0, -9.0, 0.0], [0.0, 0.0, 0.0]]])
    rand = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(20))

    def untouched():
        acts = rand.clone()  # the student's own copy: an edit stays in it
        raw(acts, [2, 5], 2)
        if not torch.equal(acts, rand):
            raise Wrong("the activations passed in were changed: edit a copy (acts.clone())")

    return run("move_to_registers", [
        ("hand case, one register, neurons [0]: CLS keeps its activation", lambda: same(
            fn(hand, [0], 1), torch.tensor([[[1.0, 5.0], [0.0, 2.0], [7.0, 0.0]]]), "activations")),
        ("hand case, neurons [0, 1]: one signed maximum for both (-9), not one per neuron", lambda: same(
            fn(signed, [0, 1], 1), torch.tensor([[[0.5, -2.0, 1.0], [0.0, 0.0, 0.0], [-9.0, -9.0, 0.0]]]),
            "activations")),
        ("random (3, 9, 16), neurons [2, 5, 11], one register (each image its own value)",
         lambda: same(fn(rand, [2, 5, 11], 1), reference(rand, [2, 5, 11], 1), "activations")),
        ("random (3, 9, 16), neurons [2, 5], two registers", lambda: same(fn(rand, [2, 5], 2),
                                                                          reference(rand, [2, 5], 2), "activations")),
        ("the activations passed in are left as they were", untouched),
    ], quiet)
