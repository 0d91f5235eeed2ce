"""Claims as results: one record per published claim tested, written to ``figures/<notebook>/claims.json``.

A rule function (next to the computation it judges, e.g. :func:`sinklib.core.gu_claims.llama_family_shape`)
returns a :class:`Claim`; a notebook's :class:`~sinklib.core.claims_file.Recorder` stamps the model and profile on
it, prints its one-line verdict and writes every record at the end. The record carries everything a scorecard needs:
what was claimed and where, the published and measured values, the rule that decided it, and whether it holds
(None: cannot be judged here, with the reason in ``note``). It also carries what makes a verdict trustworthy:

* ``follows``: the paper's equation / section / table and, where the authors published code, ``repo:path:function``;
  ``adapted`` says how the rule here departs from it (a threshold for a smaller model, a relative cut).
* ``at_init``: what the paper predicts for the same architecture at random initialisation -- True for an
  architectural effect (it holds before any training), False for an effect training makes (sinks, massive
  activations, super neurons), None where the paper says nothing.
* ``control``: the same rule's verdict on randomly initialised weights of the model's own configuration
  (:func:`with_control`). A rule whose control holds where ``at_init`` is False cannot tell a trained model from
  noise; ``control_note`` must then say why the record is still kept.
* ``draws``: each draw's verdict where the evidence depends on a random draw (:func:`over_draws`): the claim holds
  (or fails) when every draw that can be judged agrees; draws that cannot be judged are reported beside, not
  counted as disagreement.
* ``margin``: where a verdict rests on a number against a cut, the number, the cut and the spread the number is
  known to move by across machines and settings (:func:`against_cut`); a value within that spread of its cut is
  *unsettled*, never a flip between holds and fails.
* ``quantities``: what each number is (:mod:`sinklib.core.quantities`: identity, count, share, ratio, loss, value),
  declared by the rule that measured it, with its unit and -- where measured -- its own cross-machine tolerance.

The record is a pydantic dataclass: ``claims.json`` is written and read through one schema
(:mod:`sinklib.core.claims_file`: the Recorder, :func:`~sinklib.core.claims_file.json_schema`,
:func:`~sinklib.core.claims_file.load`), checked strictly at the door -- ``holds: "yes"`` or ``id: 5`` is refused,
not coerced.

Four verdicts (:data:`VERDICTS`): **holds**, **does NOT hold**, **unsettled** (``holds`` None and ``unsettled``
True: the judgeable draws disagree, or a value sits within its margin of the cut) and **cannot be judged here**
(``holds`` None: nothing on this model can decide it; ``note`` says why).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import field, replace
from enum import StrEnum

from pydantic.dataclasses import dataclass

from sinklib.core import quantities as q


class Verdict(StrEnum):
    """A claim's verdict (a str: compares equal to its words)."""

    HOLDS = "holds"
    FAILS = "does NOT hold"
    UNSETTLED = "unsettled"
    CANNOT_JUDGE = "cannot be judged here"


VERDICTS = tuple(v.value for v in Verdict)

# A record that is no paper's claim carries one of these in ``Claim.paper`` instead of an arXiv id: the scorecard lists
# it apart and never counts it as a paper's claim. An implementation check tests that this project's code does what
# a paper's method prescribes (the sink cache stays bounded); an own question is asked here of a method whose paper
# does not claim it (does head-wise RMSNorm remove the sink?).
IMPLEMENTATION_CHECK = "implementation check"
OWN_QUESTION = "own question"
NOT_A_PAPER = {IMPLEMENTATION_CHECK: "implementation checks (this project's code does what a method prescribes)",
               OWN_QUESTION: "this project's own questions (no paper claims them)"}


@dataclass(frozen=True)
class Claim:
    id: str  # stable across runs, "<paper>.<claim>", e.g. "gu2024.repeated_token_no_sink"
    statement: str  # what the paper claims, in words
    source: str  # paper (authors, arXiv id) and table / figure / section
    rule: str  # the test applied here, in words, with its thresholds
    published: object  # the published value(s), or None when the paper gives none
    measured: object  # the value(s) measured here (of the run's own seed where there are draws)
    holds: bool | None  # None: cannot be judged on this model / at this size, or draws disagree (say why in ``note``)
    note: str = ""  # caveats: a different model than the paper's, one stream, two seeds, a stand-in, ...
    needs_gpu: bool = False  # only the GPU profile's models can judge it (e.g. outliers that need a large ViT)
    follows: str = ""  # "Eq. 2, Sec. 3; sail-sg/Attention-Sink:path:function" -- the definition transcribed
    adapted: str = ""  # how the rule departs from the paper's (empty: it is the paper's own)
    at_init: bool | None = None  # the paper's prediction at random initialisation (None: the paper says nothing)
    control: bool | None = None  # the rule's verdict on random weights of the same configuration (None: not run)
    control_measured: object = None  # what the control measured
    control_note: str = ""  # why the record stands although the control contradicts ``at_init``
    draws: tuple = ()  # each draw's verdict (True / False / None); the Recorder fills in (holds,) for one evaluation
    draws_of: str = ""  # what was redrawn: "3 seeds of random tokens", "3 stand-ins trained with seeds 0-2", ...
    spread: object = None  # the measured values over the draws, e.g. {"min": ..., "max": ...}
    model: str = ""  # stamped by the Recorder
    profile: str = ""
    measured_on: str = ""  # "pretrained", "stand-in", "trained here" or "random weights"; stamped by the Recorder
    unsettled: bool = False  # with holds None: the judgeable draws disagree, or a value is within its margin of a cut
    paper: str = ""  # the arXiv id of the paper the claim comes from, where ``source`` names several (else found
    # there); or a key of :data:`NOT_A_PAPER` for an implementation check / this project's own question
    margin: object = None  # {"value", "cut", "spread"} where the verdict is a value against a cut (:func:`against_cut`)
    quantities: dict[str, q.Quantity] = field(default_factory=dict)  # what each number is (sinklib.core.quantities)

    def verdict(self) -> Verdict:
        """One of :class:`Verdict`."""
        if self.holds is None and self.unsettled:
            return Verdict.UNSETTLED
        return {True: Verdict.HOLDS, False: Verdict.FAILS, None: Verdict.CANNOT_JUDGE}[self.holds]

    def quantity(self, group: str, path: str, number: float | int) -> q.Quantity:
        """What the number at ``path`` of ``group`` ("measured", "control_measured", "spread", "margin") is
        (:func:`sinklib.core.quantities.declared`)."""
        return q.declared(self.quantities, group, path, number)

    @property
    def control_contradicts(self) -> bool:
        """The rule holds on random weights although the paper says training makes the effect."""
        return self.at_init is False and self.control is True

    def without_noise(self) -> Claim:
        """The record the scorecard counts: a claim whose rule also holds on random weights, where the paper says
        training makes the effect, cannot tell training from noise -- it is not counted as holding, whatever the
        ``control_note`` (which is kept, with the reason, in ``note``)."""
        if not (self.control_contradicts and self.holds is True):
            return self
        why = "holds on random weights too: this rule cannot tell training from noise"
        note = why + (f" ({self.control_note})" if self.control_note else "") + (f"; {self.note}" if self.note else "")
        return replace(self, holds=None, unsettled=False, note=note)

    def line(self) -> str:
        """One printable line: verdict, statement, measured vs published, rule, draws and control."""
        published = "" if self.published is None else f"; published {short_value(self.published)}"
        note = f" ({self.note})" if self.note else ""
        extra = ""
        if self.draws:
            extra += f" Draws: {draw_summary(self.draws)}."
        if self.control is not None or self.at_init is not None:
            ran = "cannot be judged" if self.control_measured is not None else "not run"
            extra += (f" Random-weight control: {verdict_word(self.control, ran)} (paper at init: "
                      f"{verdict_word(self.at_init, 'no prediction')}).")
        return (f"Claim {self.id} {self.verdict()}: {self.statement} -- measured {short_value(self.measured)}"
                f"{published}. Rule: {self.rule}.{note}{extra}")


def verdict_word(value: bool | None, none: str = "not run") -> str:
    """A draw's or control's verdict in one word: "holds", "fails", or ``none`` for None."""
    return {True: "holds", False: "fails", None: none}[value]


def control_summary(control: bool | None, at_init: bool | None, measured: object = None) -> str:
    """The random-weight control as words that say it is one, with what the paper predicts there: "random-weight
    control: fails; paper: made by training", "... holds; paper: made by training -- CONTRADICTS the paper" (the rule
    cannot tell training from noise), "random-weight control not run"."""
    if control is None and measured is None:
        return "random-weight control not run"
    word = {True: "holds", False: "fails", None: "cannot be judged"}[control]
    paper = {True: "; paper: holds at initialisation", False: "; paper: made by training", None: ""}[at_init]
    flag = " -- CONTRADICTS the paper" if at_init is False and control is True else ""
    return f"random-weight control: {word}{paper}{flag}"


def draw_summary(draws: Sequence[bool | None], unsettled: Sequence[bool] = ()) -> str:
    """Draws as words, counting only the judged ones: "3 of 3 draws hold", "1 of 1 judgeable draw fails (1 of 2
    cannot be judged)", "unsettled: 2 of 3 draws hold", "no draw can be judged (2 draws)". ``unsettled``: per draw,
    whether its None is a value within its margin of the cut (counted apart, never as "cannot be judged"):
    "unsettled: 1 of 1 judged draw holds (1 of 2 within its margin of the cut)"."""
    flags = list(unsettled) + [False] * (len(draws) - len(unsettled))
    close = sum(d is None and u for d, u in zip(draws, flags))
    held = sum(d is True for d in draws)
    judged = sum(d is not None for d in draws)
    unjudged = len(draws) - judged - close
    if not close:
        if judged == 0:  # nothing to judge in any draw (e.g. no outliers): not a disagreement
            return f"no draw can be judged ({len(draws)} draw{'s' if len(draws) != 1 else ''})"
        if unjudged:
            text = f"{held} of {judged} judgeable draw{'s' if judged > 1 else ''} hold"
            text += f" ({unjudged} of {len(draws)} cannot be judged)"
        else:
            text = f"{held} of {judged} draws hold"
        return text if held in (0, judged) else f"unsettled: {text}"
    parts = [f"{close} of {len(draws)} within {'its' if close == 1 else 'their'} margin of the cut"]
    if unjudged:
        parts.append(f"{unjudged} cannot be judged")
    lead = (f"{held} of {judged} judged draw{'s' if judged != 1 else ''} hold" if judged else "no draw is clear of its cut")
    return f"unsettled: {lead} ({'; '.join(parts)})"


def _close_calls(claims: Sequence[Claim]) -> str:
    """The draws within their margin of the cut, with their numbers: "draw 2: 21.07 against the cut 20 (margin
    2.656)"."""
    out = []
    for i, c in enumerate(claims, 1):
        m = c.margin if isinstance(c.margin, dict) else {}
        if c.holds is None and c.unsettled and {"value", "cut", "spread"} <= set(m):
            out.append(f"draw {i}: {m['value']:.4g} against the cut {m['cut']:.4g} (margin {m['spread']:.4g})")
    return "; ".join(out)


def against_cut(value: float, cut: float, spread: float, above: bool = True) -> tuple[bool | None, bool, dict]:
    """A value judged against a cut with its margin: ``(holds, unsettled, margin)``.

    holds = value >= cut (``above``) or value <= cut, **unless** |value - cut| <= ``spread`` -- the amount the
    value is measured to move across machines and settings (threads, instruction set) -- in which case the verdict
    is unsettled: ``(None, True, margin)``. ``margin`` = {"value", "cut", "spread"} goes on the claim, so that a
    reader (and :func:`sinklib.reproduction.verify`) sees how close it came.
    """
    margin = {"value": float(value), "cut": float(cut), "spread": float(spread)}
    if math.isnan(value):
        return None, False, margin
    if abs(value - cut) <= spread:
        return None, True, margin
    return (value >= cut) if above else (value <= cut), False, margin


def short_value(value) -> str:
    """A measured or published value as printed: floats to 4 significant digits, dicts and lists element-wise."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {short_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(short_value(v) for v in value) + "]"
    return str(value)


def _numbers(value) -> list[float]:
    """Every number in a measured value, flattened (bools are not numbers here)."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, list | tuple):
        return [x for v in value for x in _numbers(v)]
    return []


def over_draws(claims: Sequence[Claim], draws_of: str, key=None) -> Claim:
    """One claim judged over several draws of its random input (seeds, random tokens, sampled windows, controls).

    ``claims[0]`` is the run's own seed: its statement, rule and ``measured`` are kept. Verdict over the draws that
    can be judged (a draw that cannot -- no sink to hide, no outlier to count -- is reported beside, not counted as
    a disagreement): holds = True if every judgeable draw holds, False if every one fails; **unsettled** (None,
    ``unsettled``) if they disagree, or if a draw is itself unsettled (a value within its margin of the cut); None
    when no draw can be judged. ``key(claim) -> float`` picks the number whose spread is recorded (default: the measured value itself when
    it is a number); ``spread`` = {"min", "max", "values"}.
    """
    if not claims:
        raise ValueError("over_draws needs at least one draw")
    ids = {c.id for c in claims}
    if len(ids) != 1:
        raise ValueError(f"over_draws got different claims {sorted(ids)}: one claim, several draws")
    draws = tuple(c.holds for c in claims)
    judged = [d for d in draws if d is not None]
    unsettled = any(c.holds is None and c.unsettled for c in claims)
    if judged and not unsettled and all(judged):
        holds = True
    elif judged and not unsettled and not any(judged):
        holds = False
    else:
        holds = None
        unsettled = unsettled or bool(judged)
    values = [key(c) if key else (_numbers(c.measured)[0] if len(_numbers(c.measured)) == 1 else None)
              for c in claims]
    spread = None
    if values and all(isinstance(v, int | float) for v in values):
        spread = {"min": min(values), "max": max(values), "values": list(values)}
    first = claims[0]
    note = first.note
    if holds is None or len(judged) < len(draws):  # say what was (not) judged; the first unjudgeable draw's reason
        close = [c.holds is None and c.unsettled for c in claims]
        why = next((c.note for c, u in zip(claims, close) if c.holds is None and not u and c.note), "")
        calls, summary = _close_calls(claims), draw_summary(draws, close)
        if calls:  # the decisive cause first: which draw sat how close to which cut, then the count
            lead = "unsettled: " if summary.startswith("unsettled: ") else ""
            note = f"{lead}{calls} -- {summary.removeprefix('unsettled: ')} ({draws_of})"
        else:
            note = f"{summary} ({draws_of})"
        if why and why != first.note:
            note += f"; a draw that cannot be judged: {why}"
        note += f"; {first.note}" if first.note else ""
    margin = first.margin
    return replace(first, holds=holds, unsettled=holds is None and unsettled, note=note, draws=draws,
                   draws_of=draws_of, spread=spread, margin=margin)


def with_control(claim: Claim, control: Claim | None, note: str = "") -> Claim:
    """``claim`` with its random-weight control: the same rule applied to the same analysis on randomly initialised
    weights of the model's own configuration (:func:`sinklib.models.random_init.random_weights`). ``note`` explains
    a control that holds where the paper says training makes the effect; a control that cannot be judged either
    says so with its own reason unless ``note`` is given."""
    if control is None:  # not run: the note says why
        return replace(claim, control_note=note or claim.control_note)
    if control.id != claim.id:
        raise ValueError(f"control {control.id!r} is not a control of {claim.id!r}")
    if control.holds is None and not note:
        note = f"on random weights it cannot be judged either: {control.note}"
    return replace(claim, control=control.holds, control_measured=control.measured, control_note=note)


def measured_on(label: str) -> str:
    """What a model label says the claim was measured on."""
    if "random weights" in label:
        return "random weights"
    if "stand-in" in label:
        return "stand-in"
    if "trained here" in label:
        return "trained here"
    return "pretrained"


def check_schema(claim: Claim) -> None:
    """Refuse a record a scorecard could not trust: no ``follows`` (what definition the rule transcribes), a paper
    prediction at random initialisation (``at_init``) with neither a control run nor a ``control_note`` saying why
    none was, an "unsettled" flag on a claim that holds or fails, or a ``paper`` that is neither an arXiv id nor a
    key of :data:`NOT_A_PAPER`."""
    if not claim.follows.strip():
        raise ValueError(f"claim {claim.id!r} has no `follows`: name the equation / table / repo:path:function its "
                         f"rule transcribes")
    if claim.at_init is not None and claim.control is None and claim.control_measured is None \
            and not claim.control_note.strip():
        raise ValueError(f"claim {claim.id!r} states what its paper predicts at initialisation (at_init="
                         f"{claim.at_init}) but has no random-weight control and no control_note saying why")
    if claim.unsettled and claim.holds is not None:
        raise ValueError(f"claim {claim.id!r} is marked unsettled but holds={claim.holds}")
    if claim.paper and claim.paper not in NOT_A_PAPER and not re.fullmatch(r"\d{4}\.\d{4,5}", claim.paper):
        raise ValueError(f"claim {claim.id!r} has paper={claim.paper!r}: give an arXiv id (e.g. '2309.17453') or one "
                         f"of {sorted(NOT_A_PAPER)}")
    wrong = q.problems(claim.quantities, {g: getattr(claim, g) for g in q.GROUPS})
    if wrong:
        raise ValueError(f"claim {claim.id!r}: {'; '.join(wrong)}")
