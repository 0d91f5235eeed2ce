"""Checks for ``notebooks/exercises/10_llm``: the attention each key receives (sink mass), its mean by token kind
(Sun et al.'s first delimiter), and the rule that tells a positional sink from a token sink."""

from __future__ import annotations

from collections.abc import Callable

import torch

from sinklib.teaching.check._core import HAND_A, Result, Wrong, fresh_inputs, random_attention, run, same


def sink_mass(fn: Callable, quiet: bool = False) -> Result:
    """``fn(attn (..., T, T)) -> (..., T)``: m_j = 1/(T-j) sum_{t >= j} A[t, j] for every key j -- alpha_j of every
    key at once, each column divided by the number of queries that can see it.

    By hand on HAND_A: m = [(1 + 0.5 + 0.2)/3, (0.5 + 0.3)/2, 0.5/1] = [0.5667, 0.4, 0.5].
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.core import metrics

    A = random_attention(2, 3, 8, seed=28)
    return run("sink_mass", [
        ("hand case", lambda: same(fn(HAND_A), torch.tensor([1.7 / 3, 0.4, 0.5]), "mass")),
        ("random (2, 3, 8, 8): one value per key", lambda: same(fn(A), metrics.sink_mass(A), "mass")),
    ], quiet)


def mass_by_kind(fn: Callable, quiet: bool = False) -> Result:
    """``fn(mass (N, T), kinds [[str] * T] * N, skip_last) -> {kind: mean}``: the mean of m_j over the keys of each
    kind in :data:`sinklib.architectures.llm.placement.KINDS`, leaving out the last ``skip_last`` keys of every sequence
    (few queries see them, so their m_j is large by construction); None for a kind with no key.

    By hand (skip_last 1): masses [[0.9, 0.1, 0.3, 0.2, 0.8]] with kinds [first, content, first delimiter, content,
    delimiter] -> first 0.9, content (0.1 + 0.2)/2 = 0.15, first delimiter 0.3, delimiter None (its only key is the
    last, left out), weak None.
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.llm.placement import KINDS
    from sinklib.architectures.llm.placement import mass_by_kind as reference

    mass = torch.tensor([[0.9, 0.1, 0.3, 0.2, 0.8]])
    kinds = [["first", "content", "first delimiter", "content", "delimiter"]]
    want = {"first": 0.9, "first delimiter": 0.3, "delimiter": None, "weak": None, "content": 0.15}
    gen = torch.Generator().manual_seed(29)
    rand = torch.rand(3, 12, generator=gen)
    pick = torch.randint(1, len(KINDS), (3, 12), generator=gen)
    rand_kinds = [["first"] + [KINDS[int(k)] for k in row[1:]] for row in pick]

    def compare(got: dict, expected: dict) -> None:
        if not isinstance(got, dict) or set(got) != set(expected):
            raise Wrong(f"expected a dict with the keys {sorted(expected)}, got {got!r}")
        for kind, value in expected.items():
            if value is None:
                if got[kind] is not None:
                    raise Wrong(f"{kind!r} has no key left: expected None (no mean exists), got {got[kind]!r}")
            else:
                same(float(got[kind]), value, f"mean mass of {kind!r}")

    return run("mass_by_kind", [
        ("hand case, skip_last 1", lambda: compare(fn(mass, kinds, 1), want)),
        ("random (3, 12), skip_last 4", lambda: compare(fn(rand, rand_kinds, 4), reference(rand, rand_kinds, 4))),
    ], quiet)


def position_verdict(fn: Callable, quiet: bool = False) -> Result:
    """``fn(own, replaced, moved_first, moved_original, keep=0.5) -> True | False | None``: the rule of the
    position-or-token test (Xiao et al. Sec. 3.1; Gu et al. Sec. 5). alpha is measured at position 0 as the text
    has it (``own``), with another token at position 0 (``replaced``), with other text in front (``moved_first``,
    position 0 again) and at the original first token moved back to a later position (``moved_original``).
    True (the position): replaced and moved_first keep >= keep x own, moved_original keeps less. False (the token):
    replaced keeps less and moved_original keeps >= keep x own. None: neither.

    By hand (own 0.8): (0.7, 0.75, 0.05) -> True; (0.1, 0.2, 0.7) -> False; (0.3, 0.7, 0.1) -> None (another first
    token loses it, yet the original does not carry it along); (0.4, 0.4, 0.1) -> True (exactly half is kept).
    """
    fn = fresh_inputs(fn)  # every call gets its own copy of the cases
    from sinklib.architectures.llm.placement import PositionOrToken

    def reference(own, replaced, moved_first, moved_original, keep):
        return PositionOrToken(own, replaced, moved_first, moved_original, 8, "x", []).verdict(keep)

    def case(args: tuple, keep: float = 0.5):
        def check() -> None:
            got, want = fn(*args, keep=keep), reference(*args, keep)
            if got is not want:
                raise Wrong(f"verdict for own, replaced, moved_first, moved_original = {args}, keep {keep}: got "
                            f"{got!r}, expected {want!r}")
        return check

    return run("position_verdict", [
        ("hand case: a positional sink", case((0.8, 0.7, 0.75, 0.05))),
        ("hand case: a token sink", case((0.8, 0.1, 0.2, 0.7))),
        ("hand case: neither", case((0.8, 0.3, 0.7, 0.1))),
        ("hand case: exactly half kept counts as kept", case((0.8, 0.4, 0.4, 0.1))),
        ("keep 0.9", case((0.8, 0.7, 0.75, 0.05), keep=0.9)),
    ], quiet)
