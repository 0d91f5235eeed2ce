"""What each number of a claim is, declared where the number is produced, and how closely another run must repeat it.

A rule function that returns a :class:`~sinklib.core.claims.Claim` declares its numbers in ``Claim.quantities``:
``{"super_neuron": identity("neuron"), "dom_ratio": ratio(), "nll": loss("nats")}``. A key names a value of
``measured`` (and the same value of ``control_measured``, the rule's numbers on random weights) by its path --
``"per_layer"`` covers every number under it, ``"per_layer.*.alpha"`` one field of each entry -- or of another group
with a leading ``@``: ``"@spread"`` (the draws' values), ``"@margin"`` (the number a verdict cuts). The longest match
wins. A number nobody declared is a :attr:`Kind.COUNT` when it is an integer, a :attr:`Kind.VALUE` otherwise, and a
verdict's margin is a :attr:`Kind.MARGIN`: nothing is guessed from the words of a key.

A value is reproduced when ``|new - ref| <= abs_tol + rel_tol * |ref|`` (:meth:`Quantity.tolerance`): the
quantity's own tolerance where it declares one (with the measurement it rests on in ``why``), else
:data:`TOLERANCES` by what the claim was measured on and the quantity's kind. An identity (which layer / dimension /
head / position / expert) is an integer and compares exactly; a float is never an identity. A quantity declared
``comparable=False`` is reported apart by ``make verify`` with its ``why`` and never fails it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterator, Mapping
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, model_validator

MEASURED_ON = ("pretrained", "stand-in", "trained here", "random weights")  # what a claim was measured on
GROUPS = ("measured", "control_measured", "spread", "margin")  # the numbers of a record, each compared by value


class Kind(StrEnum):
    """What a number is (its kind picks its default tolerance)."""

    IDENTITY = "identity"  # which layer / dimension / head / position / expert: an integer, equal or not
    COUNT = "count"  # how many tokens / sites / images
    SHARE = "share"  # a fraction in [0, 1]: attention mass, a rate, a proportion of items
    RATIO = "ratio"  # one quantity over another of the same run
    LOSS = "loss"  # a loss, negative log-likelihood or perplexity
    VALUE = "value"  # anything else: an activation, a norm, a slope, a similarity
    MARGIN = "margin"  # a number a verdict cuts, its cut and its known spread (:func:`sinklib.core.claims.against_cut`)


class Quantity(BaseModel):
    """One number's kind and unit, and -- where its producer measured one -- its own tolerance, or why it cannot be
    compared across machines at all. ``why`` names the measurement a declared tolerance (or ``comparable=False``)
    rests on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Kind = Kind.VALUE
    unit: str = ""
    rel_tol: float | None = None
    abs_tol: float | None = None
    comparable: bool = True
    why: str = ""

    @model_validator(mode="after")
    def _declared_with_reason(self) -> Quantity:
        if self.kind == Kind.IDENTITY and (self.rel_tol or self.abs_tol):
            raise ValueError("an identity compares exactly: it takes no tolerance")
        if (self.rel_tol is not None or self.abs_tol is not None or not self.comparable) and not self.why.strip():
            raise ValueError("a quantity with its own tolerance, or not comparable across machines, says why (the "
                             "measurement it rests on) in `why`")
        return self

    def tolerance(self, measured_on: str) -> tuple[float, float]:
        """``(rel_tol, abs_tol)``: exact for an identity; the declared tolerance where given (a missing half 0);
        else :data:`TOLERANCES` of (``measured_on``, kind) -- (``measured_on``, value) for a kind without a row,
        the pretrained row for an unknown ``measured_on``."""
        if self.kind == Kind.IDENTITY:
            return 0.0, 0.0
        if self.rel_tol is not None or self.abs_tol is not None:
            return self.rel_tol or 0.0, self.abs_tol or 0.0
        on = measured_on if measured_on in MEASURED_ON else "pretrained"
        return TOLERANCES.get((on, self.kind), TOLERANCES[(on, Kind.VALUE)])


def identity(unit: str = "") -> Quantity:
    """Which layer / neuron / dimension / head / position / expert (``unit`` names which): compared exactly."""
    return Quantity(kind=Kind.IDENTITY, unit=unit)


def count(unit: str = "") -> Quantity:
    return Quantity(kind=Kind.COUNT, unit=unit)


def share(unit: str = "fraction") -> Quantity:
    return Quantity(kind=Kind.SHARE, unit=unit)


def ratio(unit: str = "x") -> Quantity:
    return Quantity(kind=Kind.RATIO, unit=unit)


def loss(unit: str = "nats") -> Quantity:
    return Quantity(kind=Kind.LOSS, unit=unit)


def value(unit: str = "") -> Quantity:
    return Quantity(kind=Kind.VALUE, unit=unit)


# (relative, absolute) tolerance by (what the claim was measured on, what the number is): a value is reproduced when
# |new - ref| <= abs + rel * |ref|. From spreads measured across machines and settings (docs/reproducibility.md,
# "Determinism"):
_FORWARD = (1e-4, 1e-9)  # a float32 forward of fixed weights: ATEN_CPU_CAPABILITY=avx2 / MKL_CBWR moved SmolLM2's
#                          logits by <= 7e-5 (benchmarks/determinism.py), a tiny LM's by 8e-7 on an Intel host
TOLERANCES: dict[tuple[str, Kind], tuple[float, float]] = {
    **{(on, k): _FORWARD for on in ("pretrained", "random weights") for k in Kind if k != Kind.IDENTITY},
    # 03's TinyLMs trained here on an AMD EPYC (avx512_core_bf16, torch 2.14.1) and on an Intel Xeon with AMX,
    # oneDNN on AMX and capped to AVX512_CORE_BF16 (torch 2.11; benchmarks/cross_machine.py, committed in
    # data/reference/cross_machine_03.json): a final alpha_0 / share / sink rate moved by up to 0.032, a
    # validation loss by <= 0.7 %, the strongest head's late slope by up to 0.022 per 100 steps.
    ("trained here", Kind.VALUE): (0.1, 0.02), ("trained here", Kind.SHARE): (0.0, 0.05),
    ("trained here", Kind.LOSS): (0.02, 0.0), ("trained here", Kind.MARGIN): (0.0, 0.03),
    ("trained here", Kind.RATIO): (0.1, 0.02), ("trained here", Kind.COUNT): (0.1, 1.0),
    # Stand-ins (12's projector, 11's router) are trained here in bfloat16 from pretrained parts: on the Intel/AMX
    # machine 12's digit NLL moved 2.226 -> 2.091 (6 %) and its caption NLL 0.506 -> 0.457 (10 %).
    ("stand-in", Kind.VALUE): (0.15, 0.02), ("stand-in", Kind.SHARE): (0.0, 0.1), ("stand-in", Kind.LOSS): (0.15, 0.0),
    ("stand-in", Kind.MARGIN): (0.0, 0.05), ("stand-in", Kind.RATIO): (0.15, 0.02),
    ("stand-in", Kind.COUNT): (0.15, 1.0),
}


def _segments(path: str) -> list[str]:
    return path.split(".") if path else []


def _matches(pattern: str, path: str) -> bool:
    """``pattern`` (segments, ``*`` one segment) names ``path`` or a value above it."""
    if pattern.startswith("@") != path.startswith("@"):  # "*" names measured values, never a group's "@spread"
        return False
    pat, segs = _segments(pattern), _segments(path)
    return len(pat) <= len(segs) and all(fnmatch.fnmatchcase(s, p) for p, s in zip(pat, segs))


def qualified(group: str, path: str) -> str:
    """A value's key for :func:`declared`: ``measured`` and ``control_measured`` paths as they are, others under
    ``@<group>``."""
    if group in ("measured", "control_measured"):
        return path
    return f"@{group}.{path}" if path else f"@{group}"


def declared(quantities: Mapping[str, Quantity], group: str, path: str, number: float | int) -> Quantity:
    """The quantity of ``number`` at ``path`` in ``group``: the longest declaration that names it
    (:func:`qualified`), else a margin for the ``margin`` group, a count for an integer, a value otherwise."""
    key = qualified(group, path)
    best = max((p for p in quantities if _matches(p, key)), key=lambda p: len(_segments(p)), default=None)
    if best is not None:
        return quantities[best]
    if group == "margin":
        return Quantity(kind=Kind.MARGIN)
    return count() if isinstance(number, int) and not isinstance(number, bool) else value()


def flatten(obj, prefix: str = "") -> Iterator[tuple[str, float | int | None]]:
    """Every number in a nested dict / list as ``("a.b.0", number)``, its type kept (an int stays an int); a null
    inside a list or dict (a NaN written out) as None. Booleans and strings are not numbers."""
    if isinstance(obj, bool) or isinstance(obj, str):
        return
    if obj is None:
        if prefix:
            yield prefix, None
        return
    if isinstance(obj, int | float):
        yield prefix or "value", obj
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list | tuple):
        for i, v in enumerate(obj):
            yield from flatten(v, f"{prefix}.{i}" if prefix else str(i))


def problems(quantities: Mapping[str, Quantity], groups: Mapping[str, object]) -> list[str]:
    """What is wrong with a claim's declarations against its numbers (``groups``: group name -> value): an identity
    that is not an integer -- a float is never an identity."""
    out = []
    for group, obj in groups.items():
        for path, number in flatten(obj):
            if number is None or isinstance(number, int):
                continue
            if declared(quantities, group, path, number).kind == Kind.IDENTITY:
                out.append(f"{group} {path} = {number!r} is declared an identity, but a float is never an identity "
                           f"(declare it a count or value, or store the index as an int)")
    return out
