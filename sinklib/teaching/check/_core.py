"""What every check shares: the verdict (:class:`Result`), running cases in order (:func:`run`) and comparing a
student's answer with the expected one (:func:`same`), so that a wrong answer reads as "alpha_1 differs: got 0.267,
expected 0.4"."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

ATOL = 1e-5
HAND_A = torch.tensor([[1.0, 0.0, 0.0],
                       [0.5, 0.5, 0.0],
                       [0.2, 0.3, 0.5]])  # one head, T = 3, causal, rows sum to 1 (00 and 10's hand cases)
# HAND_A is shared by every check and every call: a student's function only ever sees a copy (:func:`fresh_inputs`).


@dataclass
class Result:
    """The verdict of one check: ``passed`` and the one-line ``message`` that was printed."""

    name: str
    passed: bool
    message: str

    def __bool__(self) -> bool:
        return self.passed


class Wrong(Exception):
    """A case came out wrong; the message says how."""


def fresh(value):
    """A copy of ``value`` for one call of a student's function: tensors cloned (lists, tuples and dicts of them
    copied too), anything else passed as it is."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if type(value) in (list, tuple):
        return type(value)(fresh(v) for v in value)
    if type(value) is dict:
        return {k: fresh(v) for k, v in value.items()}
    return value


def fresh_inputs(fn: Callable) -> Callable:
    """``fn`` called on fresh copies of its arguments (:func:`fresh`) every time: an answer that edits its input in
    place cannot change a check's shared hand-worked case (:data:`HAND_A`) or the random case its reference answer
    is computed from, so it cannot make a later, correct answer fail. A check that tests "the input is left as it
    was" calls the student's own ``fn`` instead."""
    def call(*args, **kwargs):
        return fn(*(fresh(a) for a in args), **{k: fresh(v) for k, v in kwargs.items()})

    call.__name__ = getattr(fn, "__name__", "answer")
    call.__wrapped__ = fn
    return call


def run(name: str, cases: list[tuple[str, Callable[[], None]]], quiet: bool) -> Result:
    """Run (description, case) pairs in order; the first failure is the verdict."""
    for what, case in cases:
        try:
            case()
        except Wrong as err:
            return say(Result(name, False, f"{what}: {err}"), quiet)
        except NotImplementedError:
            return say(Result(name, False, "not written yet (the stub still raises NotImplementedError)"), quiet)
        except Exception as err:  # the student's code failed: say where and how
            return say(Result(name, False, f"{what}: your function raised {type(err).__name__}: {err}"), quiet)
    return say(Result(name, True, f"{len(cases)} cases right"), quiet)


def say(result: Result, quiet: bool) -> Result:
    if not quiet:
        print(f"{'PASS' if result.passed else 'NOT YET'}  {result.name}: {result.message}")
    return result


def same(got, want, what: str = "result", atol: float = ATOL) -> None:
    """Raise Wrong unless ``got`` equals ``want`` (a tensor, number or list) within ``atol``."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise Wrong(f"expected a tensor for the {what}, got {type(got).__name__}")
        if tuple(got.shape) != tuple(want.shape):
            raise Wrong(f"{what} has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
        if want.dtype == torch.bool:
            if not torch.equal(got.bool(), want):
                i = (got.bool() != want).nonzero()[0].tolist()
                raise Wrong(f"{what} differs at index {i}: got {bool(got[tuple(i)])}, expected {bool(want[tuple(i)])}")
            return
        g, w = got.detach().double(), want.detach().double()
        both_nan = torch.isnan(g) & torch.isnan(w)
        bad = ~both_nan & (g != w) & ~((g - w).abs() <= atol + 1e-4 * w.abs())  # g == w covers +-inf
        if bad.any():
            i = tuple(bad.nonzero()[0].tolist())
            where = f" at index {list(i)}" if i else ""
            raise Wrong(f"{what} differs{where}: got {g[i].item():.6g}, expected {w[i].item():.6g}")
        return
    if isinstance(want, (list, tuple)):
        if list(got) != list(want):
            raise Wrong(f"{what} is {list(got)}, expected {list(want)}")
        return
    if not isinstance(got, (int, float)) and not (isinstance(got, torch.Tensor) and got.numel() == 1):
        raise Wrong(f"expected a number for the {what}, got {type(got).__name__}")
    if not math.isclose(float(got), float(want), abs_tol=atol, rel_tol=1e-4):
        raise Wrong(f"{what} is {float(got):.6g}, expected {float(want):.6g}")


def random_attention(*shape: int, seed: int = 0) -> torch.Tensor:
    """Causal attention probabilities (..., T, T) with rows summing to 1."""
    gen = torch.Generator().manual_seed(seed)
    T = shape[-1]
    logits = torch.randn(*shape, T, generator=gen) * 2
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(logits, dim=-1)

