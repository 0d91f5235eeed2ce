"""Checks for ``notebooks/exercises/12_mllm``: Kang et al.'s visual sink tokens (phi over the sink dimensions),
their image-centric heads and visual attention redistribution, VAR (ICLR 2025, arXiv 2503.03321; the authors'
``DimProspector``, ``HeadFork`` and ``VARProcessor.attn_redist``)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from sinklib.teaching.check._core import Result, fresh_inputs, random_attention, run, same


def phi(fn: Callable, quiet: bool = False) -> Result:
    """``fn(h (..., d), dims) -> (...)``: phi(x) = max_{j in dims} |x_j| / RMS(x), RMS(x) = sqrt(mean_j x_j^2 +
    1e-6) over all d entries.

    By hand: x = [3, -4, 0, 0], dims [1] -> RMS = sqrt(25/4) = 2.5 -> |-4| / 2.5 = 1.6; dims [0, 1] -> still 1.6
    (the larger). x = [0, 0, 0, 0] -> 0 (the 1e-6 keeps it finite).
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.mllm.visual_sinks import phi as reference

    h = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(24))
    h[0, 2, 5] = 80.0
    x = torch.tensor([3.0, -4.0, 0.0, 0.0])
    rms = math.sqrt(25 / 4 + 1e-6)
    return run("phi", [
        ("hand case [3, -4, 0, 0], dims [1]", lambda: same(fn(x, [1]), torch.tensor(4 / rms), "phi")),
        ("hand case [3, -4, 0, 0], dims [0, 1]: the larger of the two", lambda: same(fn(x, [0, 1]),
                                                                                   torch.tensor(4 / rms), "phi")),
        ("all zeros", lambda: same(fn(torch.zeros(4), [0]), torch.tensor(0.0), "phi")),
        ("random (2, 6, 32) with a massive entry, dims [5, 9]", lambda: same(fn(h, [5, 9]), reference(h, [5, 9]),
                                                                             "phi")),
    ], quiet)


def image_centric_rows(fn: Callable, quiet: bool = False) -> Result:
    """``fn(weights (B, H, T, N), visual_sinks (B, N), image (B, N), from_query, rho, summ) -> bool (B, H, T)``:
    Kang et al.'s image-centric (head, query) rows -- queries t >= ``from_query`` whose attention to the image is
    at least ``summ`` and whose visual sinks take at most ``rho`` of that image attention; no row counts in an
    image without visual sinks.

    By hand (one head, keys [text, img, img, img], sink = key 1, summ 0.2, rho 0.5, from_query 0): row [0.9, 0.05,
    0.05, 0] -> image 0.1 < 0.2: no. Row [0.2, 0.1, 0.5, 0.2] -> image 0.8, sink share 0.125: yes. Row [0.2, 0.6,
    0.1, 0.1] -> image 0.8, sink share 0.75 > 0.5: no.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.mllm.visual_attention import image_centric_rows as reference

    w = torch.tensor([[0.9, 0.05, 0.05, 0.0], [0.2, 0.1, 0.5, 0.2], [0.2, 0.6, 0.1, 0.1]]).view(1, 1, 3, 4)
    image = torch.tensor([[False, True, True, True]])
    sink = torch.tensor([[False, True, False, False]])
    A = random_attention(2, 3, 10, seed=25)
    img = torch.zeros(2, 10, dtype=torch.bool)
    img[:, 1:6] = True
    vis = torch.zeros(2, 10, dtype=torch.bool)
    vis[0, 2] = True  # image 1 has no visual sink: none of its rows count
    return run("image_centric_rows", [
        ("hand case, from_query 0", lambda: same(fn(w, sink, image, 0, 0.5, 0.2),
                                                 torch.tensor([[[False, True, False]]]), "rows")),
        ("hand case, from_query 2 (earlier queries never count)",
         lambda: same(fn(w, sink, image, 2, 0.5, 0.2), torch.zeros(1, 1, 3, dtype=torch.bool), "rows")),
        ("random (2, 3, 10, 10), image keys 1-5, a sink only in image 0, text from 6",
         lambda: same(fn(A, vis, img, 6, 0.5, 0.2), reference(A, vis, img, 6, 0.5, 0.2), "rows")),
    ], quiet)


def var_redistribute(fn: Callable, quiet: bool = False) -> Result:
    """``fn(weights (B, H, T, N), sinks (B, N), image (B, N), rows (B, H, T), p) -> (B, H, T, N)``: VAR on the
    selected rows -- every sink key keeps p of its attention, A' = p A; the removed (1 - p) S, S = the row's
    attention to sinks, goes to the non-sink image keys in proportion to their attention, A' = A + (1 - p) S A / I
    (I = their total); every other entry, and every row not selected, unchanged. Rows still sum to 1.

    By hand (keys [sink, img, img, text], p 0.6): row [0.5, 0.1, 0.3, 0.1] -> S = 0.5, (1 - p) S = 0.2 shared 1:3 by
    the image keys -> [0.3, 0.15, 0.45, 0.1].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.mllm.visual_attention import var_redistribute as reference

    w = torch.tensor([0.5, 0.1, 0.3, 0.1]).view(1, 1, 1, 4)
    sinks = torch.tensor([[True, False, False, False]])
    image = torch.tensor([[True, True, True, False]])
    A = random_attention(2, 3, 9, seed=26)
    s = torch.zeros(2, 9, dtype=torch.bool)
    s[:, 0] = True
    s[1, 3] = True
    img = torch.zeros(2, 9, dtype=torch.bool)
    img[:, 2:6] = True
    rows = torch.rand(2, 3, 9, generator=torch.Generator().manual_seed(27)) > 0.4
    return run("var_redistribute", [
        ("hand row, p 0.6", lambda: same(fn(w, sinks, image, torch.ones(1, 1, 1, dtype=torch.bool), 0.6),
                                         torch.tensor([0.3, 0.15, 0.45, 0.1]).view(1, 1, 1, 4), "row")),
        ("the same row not selected: unchanged", lambda: same(
            fn(w, sinks, image, torch.zeros(1, 1, 1, dtype=torch.bool), 0.6), w, "row")),
        ("random (2, 3, 9, 9): a text sink and an image sink, rows chosen at random",
         lambda: same(fn(A, s, img, rows, 0.6), reference(A, s, img, rows, 0.6), "weights")),
    ], quiet)
