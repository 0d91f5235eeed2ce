"""Checks for the exercise notebooks (``notebooks/exercises/``): pass the function you wrote, read the verdict.

>>> from sinklib.teaching import check
>>> check.alpha(my_alpha)            # prints "PASS  alpha: ..." or "NOT YET  alpha: <what is wrong>"

Each check runs the student's function on hand-built cases -- worked out by hand in the check's docstring, so a
student can redo them on paper -- and on random cases against sinklib's own implementation (the one the research
notebooks use). It stops at the first case that is wrong and says which case, what was expected and what came back
(or which exception was raised). It returns a :class:`Result`, truthy when everything passed, so a test can assert it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

ATOL = 1e-5


@dataclass
class Result:
    """The verdict of one check: ``passed`` and the one-line ``message`` that was printed."""

    name: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed


class _Wrong(Exception):
    """A case came out wrong; the message says how."""


def _run(name: str, cases: list[tuple[str, Callable[[], None]]], quiet: bool) -> Result:
    """Run (description, case) pairs in order; the first failure is the verdict."""
    for what, case in cases:
        try:
            case()
        except _Wrong as err:
            return _say(Result(name, False, f"{what}: {err}"), quiet)
        except NotImplementedError:
            return _say(Result(name, False, "not written yet (the stub still raises NotImplementedError)"), quiet)
        except Exception as err:  # the student's code failed: say where and how
            return _say(Result(name, False, f"{what}: your function raised {type(err).__name__}: {err}"), quiet)
    return _say(Result(name, True, f"{len(cases)} cases right"), quiet)


def _say(result: Result, quiet: bool) -> Result:
    if not quiet:
        print(f"{'PASS' if result.passed else 'NOT YET'}  {result.name}: {result.message}")
    return result


def _same(got, want, what: str = "result", atol: float = ATOL) -> None:
    """Raise _Wrong unless ``got`` equals ``want`` (a tensor, number or list) within ``atol``."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise _Wrong(f"expected a tensor for the {what}, got {type(got).__name__}")
        if tuple(got.shape) != tuple(want.shape):
            raise _Wrong(f"{what} has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        if want.dtype == torch.bool:
            if not torch.equal(got.bool(), want):
                i = (got.bool() != want).nonzero()[0].tolist()
                raise _Wrong(f"{what} differs at index {i}: got {bool(got[tuple(i)])}, expected {bool(want[tuple(i)])}")
            return
        g, w = got.detach().double(), want.detach().double()
        both_nan = torch.isnan(g) & torch.isnan(w)
        bad = ~both_nan & (g != w) & ~((g - w).abs() <= atol + 1e-4 * w.abs())  # g == w covers +-inf
        if bad.any():
            i = tuple(bad.nonzero()[0].tolist())
            where = f" at index {list(i)}" if i else ""
            raise _Wrong(f"{what} differs{where}: got {g[i].item():.6g}, expected {w[i].item():.6g}")
        return
    if isinstance(want, (list, tuple)):
        if list(got) != list(want):
            raise _Wrong(f"{what} is {list(got)}, expected {list(want)}")
        return
    if not isinstance(got, (int, float)) and not (isinstance(got, torch.Tensor) and got.numel() == 1):
        raise _Wrong(f"expected a number for the {what}, got {type(got).__name__}")
    if not math.isclose(float(got), float(want), abs_tol=atol, rel_tol=1e-4):
        raise _Wrong(f"{what} is {float(got):.6g}, expected {float(want):.6g}")


def _random_attention(*shape: int, seed: int = 0) -> torch.Tensor:
    """Causal attention probabilities (..., T, T) with rows summing to 1."""
    gen = torch.Generator().manual_seed(seed)
    T = shape[-1]
    logits = torch.randn(*shape, T, generator=gen) * 2
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(logits, dim=-1)


HAND_A = torch.tensor([[1.0, 0.0, 0.0],
                       [0.5, 0.5, 0.0],
                       [0.2, 0.3, 0.5]])  # one head, T = 3, causal, rows sum to 1


# ------------------------------------------------------------------------------------------------ 00 · measuring sinks
def alpha(fn: Callable, quiet: bool = False) -> Result:
    """``fn(attn (..., T, T), k) -> (...)``: Gu et al.'s alpha_k = 1/(T-k) sum_{t>=k} A[t, k].

    By hand on HAND_A: alpha_0 = (1 + 0.5 + 0.2)/3 = 0.5667, alpha_1 = (0.5 + 0.3)/2 = 0.4, alpha_2 = 0.5/1 = 0.5.
    Random (B, H, T, T) attention is compared with :func:`sinklib.core.metrics.alpha`.
    """
    from sinklib.core import metrics

    A = _random_attention(2, 3, 9, seed=1)
    return _run("alpha", [
        ("hand case, k = 0", lambda: _same(fn(HAND_A, 0), torch.tensor(1.7 / 3), "alpha_0")),
        ("hand case, k = 1 (only queries t >= 1 count, divide by T - 1)", lambda: _same(fn(HAND_A, 1),
                                                                                        torch.tensor(0.4), "alpha_1")),
        ("hand case, k = 2", lambda: _same(fn(HAND_A, 2), torch.tensor(0.5), "alpha_2")),
        ("random (2, 3, 9, 9) attention, k = 0: one value per (batch, head)",
         lambda: _same(fn(A, 0), metrics.alpha(A, 0), "alpha_0")),
        ("random (2, 3, 9, 9) attention, k = 4", lambda: _same(fn(A, 4), metrics.alpha(A, 4), "alpha_4")),
    ], quiet)


def sink_rate(fn: Callable, quiet: bool = False) -> Result:
    """``fn(alphas (N, L, H), eps) -> float``: the fraction of (sequence, layer, head) entries with alpha > eps.

    By hand: alphas [[[0.1, 0.5], [0.31, 0.3]]] (N=1, L=2, H=2) with eps = 0.3 -> 0.5 and 0.31 count, 0.3 does not
    (strictly greater): 2/4 = 0.5.
    """
    from sinklib.core import metrics

    hand = torch.tensor([[[0.1, 0.5], [0.31, 0.3]]])
    rand = torch.rand(5, 4, 3, generator=torch.Generator().manual_seed(2))
    return _run("sink_rate", [
        ("hand case, eps = 0.3 (0.3 itself is not above eps)", lambda: _same(fn(hand, 0.3), 0.5, "sink rate")),
        ("hand case, eps = 0.05", lambda: _same(fn(hand, 0.05), 1.0, "sink rate")),
        ("random (5, 4, 3) alphas, eps = 0.3", lambda: _same(fn(rand, 0.3), metrics.sink_rate(rand, 0.3), "sink rate")),
    ], quiet)


def uniform_alpha(fn: Callable, quiet: bool = False) -> Result:
    """``fn(T) -> float``: alpha_0 if every query spread its attention evenly over the keys it sees,
    (1/T) sum_{t=0}^{T-1} 1/(t+1) = H_T / T.

    By hand: T = 1 -> 1; T = 2 -> (1 + 1/2)/2 = 0.75; T = 4 -> (1 + 1/2 + 1/3 + 1/4)/4 = 0.5208.
    """
    from sinklib.core.analysis import ContextSweep

    return _run("uniform_alpha", [
        ("T = 1", lambda: _same(fn(1), 1.0, "alpha_0")),
        ("T = 2", lambda: _same(fn(2), 0.75, "alpha_0")),
        ("T = 4", lambda: _same(fn(4), (1 + 1 / 2 + 1 / 3 + 1 / 4) / 4, "alpha_0")),
        ("T = 64 (Gu et al.'s length)", lambda: _same(fn(64), ContextSweep.uniform_baseline(64), "alpha_0")),
    ], quiet)


def dom_ratio(fn: Callable, quiet: bool = False) -> Result:
    """``fn(h (..., d)) -> (...)``: DomRatio(h) = max_j |h_j| / mean_j |h_j|.

    By hand: h = [1, -4, 1, 2]: max |h| = 4, mean |h| = 8/4 = 2 -> 2 (the sign does not matter). A one-hot vector of
    length d gives d.
    """
    from sinklib.core import metrics

    h = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(3))
    return _run("dom_ratio", [
        ("hand case [1, -4, 1, 2]", lambda: _same(fn(torch.tensor([1.0, -4.0, 1.0, 2.0])), torch.tensor(2.0),
                                                  "DomRatio")),
        ("one-hot of length 8", lambda: _same(fn(torch.eye(8)[3]), torch.tensor(8.0), "DomRatio")),
        ("random (3, 5, 16) hidden states: one value per token", lambda: _same(fn(h), metrics.dom_ratio(h),
                                                                               "DomRatio")),
    ], quiet)


def massive(fn: Callable, quiet: bool = False) -> Result:
    """``fn(h (..., d)) -> bool (..., d)``: Sun et al.'s massive activations, |h_j| > 100 and |h_j| > 1000 x the
    median of |h| over that token's d entries.

    By hand (d = 5, median |h| = 1): 2000 is massive; -2000 too (magnitude); 150 is above 100 but only 150 x the
    median -- not massive. With median 0.01, 90 is 9000 x the median but not above 100 -- not massive.
    """
    from sinklib.core import metrics

    h1 = torch.tensor([1.0, 2000.0, -1.0, 150.0, 1.0])
    h2 = torch.tensor([0.01, 90.0, -0.01, 0.01, -2000.0])
    rand = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(4))
    rand[0, 0, 5], rand[1, 3, 7] = 3000.0, -500.0
    return _run("massive", [
        ("hand case [1, 2000, -1, 150, 1]", lambda: _same(fn(h1), torch.tensor([0, 1, 0, 0, 0]).bool(), "mask")),
        ("hand case [0.01, 90, -0.01, 0.01, -2000]", lambda: _same(fn(h2), torch.tensor([0, 0, 0, 0, 1]).bool(),
                                                                   "mask")),
        ("random (2, 6, 32) with two planted outliers", lambda: _same(fn(rand), metrics.massive_mask(rand), "mask")),
    ], quiet)


# ------------------------------------------------------------------------------------------------ 01 · using sinks
def kept_positions(fn: Callable, quiet: bool = False) -> Result:
    """``fn(seen, n_sink, window) -> list[int]``: the token positions a StreamingLLM cache holds after ``seen``
    tokens: all of them while seen <= n_sink + window, else the first n_sink and the last window.

    By hand: seen 10, 2 sinks, window 3 -> [0, 1, 7, 8, 9]; seen 4 -> [0, 1, 2, 3]; no sinks, seen 6, window 2 ->
    [4, 5].
    """
    return _run("kept_positions", [
        ("seen 10, n_sink 2, window 3", lambda: _same(fn(10, 2, 3), [0, 1, 7, 8, 9], "kept positions")),
        ("seen 4 (the cache is not full yet)", lambda: _same(fn(4, 2, 3), [0, 1, 2, 3], "kept positions")),
        ("seen 5 (exactly full)", lambda: _same(fn(5, 2, 3), [0, 1, 2, 3, 4], "kept positions")),
        ("window only: seen 6, n_sink 0, window 2", lambda: _same(fn(6, 0, 2), [4, 5], "kept positions")),
        ("seen 3000, n_sink 4, window 252", lambda: _same(fn(3000, 4, 252), [0, 1, 2, 3, *range(2748, 3000)],
                                                          "kept positions")),
    ], quiet)


def fake_quantize(fn: Callable, quiet: bool = False) -> Result:
    """``fn(x (..., d), bits, group_size) -> (..., d)``: group-wise asymmetric quantise-dequantise: per group of
    ``group_size`` channels, scale = (max - min)/(2^bits - 1), q = round((x - min)/scale), x_hat = q scale + min.

    By hand: [0, 1, 2, 3] with 2 bits in one group -> scale 1, exact. [0, 0.4, 1, 0.6] with 1 bit -> scale 1,
    q = round([0, 0.4, 1, 0.6]) = [0, 0, 1, 1] -> [0, 0, 1, 1]. Two groups of 2: [0, 2, 10, 11] at 1 bit -> exact.
    """
    from sinklib.utilization import kvquant

    x = torch.randn(3, 4, 64, generator=torch.Generator().manual_seed(5))
    return _run("fake_quantize", [
        ("[0, 1, 2, 3], 2 bits, one group", lambda: _same(fn(torch.tensor([0.0, 1, 2, 3]), 2, 4),
                                                          torch.tensor([0.0, 1, 2, 3]), "x_hat")),
        ("[0, 0.4, 1, 0.6], 1 bit, one group", lambda: _same(fn(torch.tensor([0.0, 0.4, 1, 0.6]), 1, 4),
                                                             torch.tensor([0.0, 0, 1, 1]), "x_hat")),
        ("[0, 2, 10, 11], 1 bit, groups of 2 (each group has its own min and max)",
         lambda: _same(fn(torch.tensor([0.0, 2, 10, 11]), 1, 2), torch.tensor([0.0, 2, 10, 11]), "x_hat")),
        ("random (3, 4, 64), 4 bits, groups of 32", lambda: _same(fn(x, 4, 32), kvquant.fake_quantize(x, 4, 32),
                                                                  "x_hat")),
        ("random (3, 4, 64), 2 bits, groups of 16", lambda: _same(fn(x, 2, 16), kvquant.fake_quantize(x, 2, 16),
                                                                  "x_hat")),
    ], quiet)


def act_redistribute(fn: Callable, quiet: bool = False) -> Result:
    """``fn(weights (B, H, T, N), sink (B, H, N) bool, beta) -> (B, H, T, N)``: ACT's edit -- sink columns become
    beta A[t, j]; the removed mass goes to the other keys of the row in proportion to their weight:
    A[t, j] (1 - beta S_t)/(1 - S_t), S_t = sum over sink columns of A[t, j]. Rows still sum to 1.

    By hand: row [0.6, 0.3, 0.1], sink column 1, beta 0.4 -> S = 0.3, sink 0.12, the others scaled by
    (1 - 0.12)/0.7 = 1.2571: [0.7543, 0.12, 0.1257].
    """
    from sinklib.utilization.calibration import act_redistribute as reference

    w = torch.tensor([0.6, 0.3, 0.1]).view(1, 1, 1, 3)
    s = torch.tensor([False, True, False]).view(1, 1, 3)
    A = _random_attention(2, 2, 7, seed=6)
    sinks = torch.zeros(2, 2, 7, dtype=torch.bool)
    sinks[..., 2] = True
    sinks[1, 0, 4] = True
    return _run("act_redistribute", [
        ("hand row [0.6, 0.3, 0.1], sink at 1, beta 0.4", lambda: _same(
            fn(w, s, 0.4), torch.tensor([0.6 * 0.88 / 0.7, 0.12, 0.1 * 0.88 / 0.7]).view(1, 1, 1, 3), "row")),
        ("random (2, 2, 7, 7) attention, sinks differ by head", lambda: _same(fn(A, sinks, 0.4),
                                                                              reference(A, sinks, 0.4), "weights")),
        ("rows still sum to 1", lambda: _same(fn(A, sinks, 0.4).sum(-1), torch.ones(2, 2, 7), "row sums")),
    ], quiet)


# ------------------------------------------------------------------------------------------------ 02 · why sinks form
def position_variance(fn: Callable, quiet: bool = False) -> Result:
    """``fn(x (N, T, d)) -> (T,)``: per position, the variance over the N sequences (population: divide by N),
    averaged over the d features -- the variance discrepancy of the structural-origin chain.

    By hand (N = 2, T = 2, d = 1): x = [[[1], [5]], [[3], [5]]] -> position 0: values 1 and 3, variance 1;
    position 1: 5 and 5, variance 0 -> [1, 0].
    """
    from sinklib.core import metrics

    x = torch.randn(6, 5, 8, generator=torch.Generator().manual_seed(7))
    return _run("position_variance", [
        ("hand case", lambda: _same(fn(torch.tensor([[[1.0], [5.0]], [[3.0], [5.0]]])), torch.tensor([1.0, 0.0]),
                                    "variance per position")),
        ("random (6, 5, 8)", lambda: _same(fn(x), metrics.position_variance(x), "variance per position")),
    ], quiet)


def self_only_mask(fn: Callable, quiet: bool = False) -> Result:
    """``fn(mask (T, T) additive, k) -> (T, T)``: the mask edit that makes token k attend only to itself (row k:
    0 at column k, -inf elsewhere); every other row unchanged. Token k then aggregates values as the first token does.

    By hand (T = 3, causal, k = 1): [[0, -inf, -inf], [0, 0, -inf], [0, 0, 0]] -> row 1 becomes [-inf, 0, -inf].
    """
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
        before = big.clone()
        fn(big, 2)
        if not torch.equal(big, before):
            raise _Wrong("the mask passed in was changed: edit a copy (mask.clone())")

    return _run("self_only_mask", [
        ("hand case, T = 3, k = 1", lambda: _same(fn(causal, 1), want, "mask")),
        ("T = 6, k = 4", lambda: _same(fn(big, 4), want_big, "mask")),
        ("the input mask is left as it was", untouched),
        ("softmax of the edited row k is one-hot at k", lambda: _same(torch.softmax(fn(big, 4), -1)[4],
                                                                      torch.eye(T)[4], "attention row k")),
    ], quiet)


def super_neuron(fn: Callable, quiet: bool = False) -> Result:
    """``fn(acts (N, T, F)) -> int``: the MLP neuron whose largest |activation| on the first token (position 0, over
    the N sequences) is the largest of all neurons -- the candidate super neuron of a layer.

    By hand: F = 3, one sequence, first token [0.5, -9, 2], later tokens up to 20 on neuron 2 -> neuron 1 (|-9| is
    the first token's largest; later tokens do not count).
    """
    acts = torch.tensor([[[0.5, -9.0, 2.0], [1.0, 1.0, 20.0]]])
    rand = torch.randn(4, 7, 50, generator=torch.Generator().manual_seed(8))
    rand[2, 0, 31] = -40.0
    rand[:, 1:, 12] = 100.0  # large, but never on the first token
    return _run("super_neuron", [
        ("hand case (later tokens do not count; the sign does not matter)", lambda: _same(int(fn(acts)), 1,
                                                                                          "neuron")),
        ("random (4, 7, 50) with neuron 31 planted on one sequence's first token",
         lambda: _same(int(fn(rand)), 31, "neuron")),
    ], quiet)


# ------------------------------------------------------------------------------------------------ 03 · removing sinks
def _masked_logits(seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 3, 6, 6, generator=gen) * 3
    return logits.masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))


def softmax_off_by_one(fn: Callable, quiet: bool = False) -> Result:
    """``fn(logits (..., N)) -> (..., N)``: exp(l_j) / (1 + sum_j' exp(l_j')); masked logits are -inf (weight 0).
    Rows sum to less than 1: the rest went to an implicit zero logit.

    By hand: [0, 0] -> [1/3, 1/3]; [0, -inf] -> [1/2, 0]; [ln 3] -> [3/4].
    """
    from sinklib.mitigation.variants import SoftmaxOffByOne

    logits = _masked_logits(9)
    q = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(10))
    k = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(11))
    from sinklib.mitigation.variants import causal_logits

    return _run("softmax_off_by_one", [
        ("hand case [0, 0]", lambda: _same(fn(torch.tensor([0.0, 0.0])), torch.tensor([1 / 3, 1 / 3]), "weights")),
        ("hand case [0, -inf]", lambda: _same(fn(torch.tensor([0.0, float("-inf")])), torch.tensor([0.5, 0.0]),
                                              "weights")),
        ("hand case [ln 3]", lambda: _same(fn(torch.tensor([math.log(3.0)])), torch.tensor([0.75]), "weights")),
        ("large logits [1000, 1000] (compute it stably)", lambda: _same(fn(torch.tensor([1000.0, 1000.0])),
                                                                        torch.tensor([0.5, 0.5]), "weights")),
        ("random causal (2, 3, 6, 6)", lambda: _same(fn(causal_logits(q, k)), SoftmaxOffByOne(4, 3, 4).weights(q, k),
                                                     "weights")),
        ("random masked logits: masked entries get 0", lambda: _same(fn(logits)[..., 0, 1:], torch.zeros(2, 3, 5),
                                                                     "weights above the diagonal")),
    ], quiet)


def softpick(fn: Callable, quiet: bool = False) -> Result:
    """``fn(logits (..., N)) -> (..., N)``: Softpick, relu(exp(l_j) - 1) / sum_j' |exp(l_j') - 1| over the visible
    keys (masked logits are -inf and count for nothing, not even in the denominator).

    By hand: [0, ln 2] -> numerators [0, 1], denominator 0 + 1 -> [0, 1]. [ln 2, -ln 2] -> exp - 1 = [1, -0.5],
    numerators [1, 0], denominator 1.5 -> [2/3, 0]: negative logits get no weight but still shrink the others.
    """
    from sinklib.mitigation.variants import Softpick, causal_logits

    q = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(12))
    k = torch.randn(2, 3, 6, 4, generator=torch.Generator().manual_seed(13))
    ln2 = math.log(2.0)
    return _run("softpick", [
        ("hand case [0, ln 2]", lambda: _same(fn(torch.tensor([0.0, ln2])), torch.tensor([0.0, 1.0]), "weights",
                                              atol=1e-4)),
        ("hand case [ln 2, -ln 2]", lambda: _same(fn(torch.tensor([ln2, -ln2])), torch.tensor([2 / 3, 0.0]),
                                                  "weights", atol=1e-4)),
        ("a masked key is not in the denominator: [ln 2, -ln 2, -inf]",
         lambda: _same(fn(torch.tensor([ln2, -ln2, float("-inf")])), torch.tensor([2 / 3, 0.0, 0.0]), "weights",
                       atol=1e-4)),
        ("random causal (2, 3, 6, 6)", lambda: _same(fn(causal_logits(q, k)), Softpick(4, 3, 4).weights(q, k),
                                                     "weights", atol=1e-4)),
    ], quiet)


def head_rmsnorm(fn: Callable, quiet: bool = False) -> Result:
    """``fn(o (B, H, T, hd), gain (hd,), eps) -> (B, H, T, hd)``: head-wise RMSNorm of head outputs,
    o / sqrt(mean_c o_c^2 + eps) * gain, the mean over each head's hd channels (not across heads).

    By hand (eps = 0): o = [3, 4] -> RMS = sqrt((9 + 16)/2) = 3.5355 -> [0.8485, 1.1314]; with gain [1, 2] ->
    [0.8485, 2.2627].
    """
    o = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(14)) * 5
    g = torch.linspace(0.5, 2.0, 8)
    want = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-6) * g
    r = math.sqrt(12.5)
    return _run("head_rmsnorm", [
        ("hand case [3, 4], gain [1, 1]", lambda: _same(fn(torch.tensor([3.0, 4.0]), torch.ones(2), 0.0),
                                                        torch.tensor([3 / r, 4 / r]), "output")),
        ("hand case [3, 4], gain [1, 2]", lambda: _same(fn(torch.tensor([3.0, 4.0]), torch.tensor([1.0, 2.0]), 0.0),
                                                        torch.tensor([3 / r, 8 / r]), "output")),
        ("random (2, 3, 5, 8), eps 1e-6: the mean is over each head's channels", lambda: _same(fn(o, g, 1e-6), want,
                                                                                               "output")),
    ], quiet)


def attention_function(fn: Callable, quiet: bool = False) -> Result:
    """``fn(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs) -> (output, weights)``:
    softmax-off-by-one written as a transformers attention function (the signature transformers' attention registry,
    ``AttentionInterface``, calls). query (B, H, T, hd); key, value (B, H_kv, N, hd) -- fewer key/value heads than
    query heads (grouped-query attention: repeat each H / H_kv times); attention_mask: None or additive (B, 1, T, N)
    to be added to the logits (None: causal). Return output (B, T, H, hd) -- transposed back -- and the weights.

    The check registers it on a tiny random Llama (2 query heads per key/value head) and compares the model's logits
    with softmax-off-by-one computed directly.
    """
    from sinklib.architectures import tiny
    from sinklib.core.switch import AttentionSwitch

    def reference(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        G = query.shape[1] // key.shape[1]
        k, v = key.repeat_interleave(G, dim=1), value.repeat_interleave(G, dim=1)
        logits = query @ k.transpose(-1, -2) * (scaling or query.shape[-1] ** -0.5)
        T, N = logits.shape[-2:]
        if attention_mask is None:
            logits = logits.masked_fill(torch.ones(T, N, dtype=torch.bool).triu(N - T + 1), float("-inf"))
        else:
            logits = logits + attention_mask[..., :N]
        w = torch.softmax(torch.cat([logits, torch.zeros_like(logits[..., :1])], dim=-1), dim=-1)[..., :-1]
        return (w @ v).transpose(1, 2).contiguous(), w

    torch.manual_seed(0)
    model, inputs = tiny.llama()  # 4 query heads, 2 key/value heads, head_dim 8
    model.eval()
    ids = inputs["input_ids"]

    def logits_with(f):
        with torch.no_grad(), AttentionSwitch(model, "exercise", f):
            return model(ids).logits

    def on_model():
        want = logits_with(reference)
        got = logits_with(fn)
        _same(got, want, "model logits", atol=1e-4)

    def shapes():
        module = model.model.layers[0].self_attn
        q, kv = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8)
        out, _ = fn(module, q, kv, kv, None, scaling=8 ** -0.5)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != (1, 5, 4, 8):
            raise _Wrong(f"output shape {tuple(getattr(out, 'shape', ()))}, expected (B, T, H, hd) = (1, 5, 4, 8)")

    return _run("attention_function", [
        ("output shape with 4 query heads and 2 key/value heads", shapes),
        ("a tiny Llama running your function (mask as transformers passes it)", on_model),
    ], quiet)


ALL = {name: globals()[name] for name in (
    "alpha", "sink_rate", "uniform_alpha", "dom_ratio", "massive", "kept_positions", "fake_quantize",
    "act_redistribute", "position_variance", "self_only_mask", "super_neuron", "softmax_off_by_one", "softpick",
    "head_rmsnorm", "attention_function")}
