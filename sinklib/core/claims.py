"""Claims as results: one record per published claim tested, written to ``figures/<notebook>/claims.json``.

A rule function (next to the computation it judges, e.g. :func:`sinklib.core.analysis.llama_family_shape`) returns a
:class:`Claim`; a notebook's :class:`Recorder` stamps the model and profile on it, prints its one-line verdict and
writes every record at the end. The record carries everything a scorecard needs: what was claimed and where, the
published and measured values, the rule that decided it, and whether it holds (None: cannot be judged here, with
the reason in ``note``). It also carries what makes a verdict trustworthy:

* ``follows``: the paper's equation / section / table and, where the authors published code, ``repo:path:function``;
  ``adapted`` says how the rule here departs from it (a threshold for a smaller model, a relative cut).
* ``at_init``: what the paper predicts for the same architecture at random initialisation -- True for an
  architectural effect (it holds before any training), False for an effect training makes (sinks, massive
  activations, super neurons), None where the paper says nothing.
* ``control``: the same rule's verdict on randomly initialised weights of the model's own configuration
  (:func:`with_control`). A rule whose control holds where ``at_init`` is False cannot tell a trained model from
  noise; ``control_note`` must then say why the record is still kept.
* ``draws``: each draw's verdict where the evidence depends on a random draw (:func:`over_draws`): the claim holds
  (or fails) only when every draw agrees, else it is unsettled (``holds = None``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sinklib.core.results import write_json

SCHEMA = 2


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

    def verdict(self) -> str:
        return {True: "holds", False: "does NOT hold", None: "cannot be judged here"}[self.holds]

    @property
    def control_contradicts(self) -> bool:
        """The rule holds on random weights although the paper says training makes the effect."""
        return self.at_init is False and self.control is True

    def line(self) -> str:
        """One printable line: verdict, statement, measured vs published, rule, draws and control."""
        published = "" if self.published is None else f"; published {_short(self.published)}"
        note = f" ({self.note})" if self.note else ""
        extra = ""
        if self.draws:
            extra += f" Draws: {draw_summary(self.draws)}."
        if self.control is not None or self.at_init is not None:
            ran = "cannot be judged" if self.control_measured is not None else "not run"
            extra += (f" Random-weight control: {_word(self.control, ran)} (paper at init: "
                      f"{_word(self.at_init, 'no prediction')}).")
        return (f"Claim {self.id} {self.verdict()}: {self.statement} -- measured {_short(self.measured)}"
                f"{published}. Rule: {self.rule}.{note}{extra}")


def _word(value: bool | None, none: str = "not run") -> str:
    return {True: "holds", False: "fails", None: none}[value]


def draw_summary(draws: Sequence[bool | None]) -> str:
    """"3 of 3 draws hold", "unsettled: 2 of 3 draws hold"."""
    held = sum(d is True for d in draws)
    judged = sum(d is not None for d in draws)
    if judged == 0:  # nothing to judge in any draw (e.g. no outliers): not a disagreement
        return f"not judged in {len(draws)} draw{'s' if len(draws) > 1 else ''}"
    settled = judged == len(draws) and held in (0, len(draws))
    text = f"{held} of {len(draws)} draws hold"
    if judged < len(draws):
        text += f", {len(draws) - judged} not judged"
    return text if settled else f"unsettled: {text}"


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_short(v) for v in value) + "]"
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

    ``claims[0]`` is the run's own seed: its statement, rule and ``measured`` are kept. Verdict:
    holds = True if every draw holds, False if every draw fails, else None with "unsettled: k of n draws hold" in the
    note. ``key(claim) -> float`` picks the number whose spread is recorded (default: the measured value itself when
    it is a number); ``spread`` = {"min", "max", "values"}.
    """
    if not claims:
        raise ValueError("over_draws needs at least one draw")
    ids = {c.id for c in claims}
    if len(ids) != 1:
        raise ValueError(f"over_draws got different claims {sorted(ids)}: one claim, several draws")
    draws = tuple(c.holds for c in claims)
    if all(d is True for d in draws):
        holds = True
    elif all(d is False for d in draws):
        holds = False
    else:
        holds = None
    values = [key(c) if key else (_numbers(c.measured)[0] if len(_numbers(c.measured)) == 1 else None)
              for c in claims]
    spread = None
    if values and all(isinstance(v, int | float) for v in values):
        spread = {"min": min(values), "max": max(values), "values": list(values)}
    first = claims[0]
    note = first.note
    if holds is None:
        note = f"{draw_summary(draws)} ({draws_of})" + (f"; {note}" if note else "")
    return replace(first, holds=holds, note=note, draws=draws, draws_of=draws_of, spread=spread)


def with_control(claim: Claim, control: Claim | None, note: str = "") -> Claim:
    """``claim`` with its random-weight control: the same rule applied to the same analysis on randomly initialised
    weights of the model's own configuration (:func:`sinklib.models.random_init.random_weights`). ``note`` explains
    a control that holds where the paper says training makes the effect."""
    if control is None:  # not run: the note says why
        return replace(claim, control_note=note or claim.control_note)
    if control.id != claim.id:
        raise ValueError(f"control {control.id!r} is not a control of {claim.id!r}")
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


class Recorder:
    """Collects a notebook's claims: ``add`` stamps model and profile and prints the verdict; ``write`` saves them."""

    def __init__(self, notebook: str, model: str, profile: str):
        self.notebook, self.model, self.profile = notebook, model, profile
        self.claims: list[Claim] = []

    def add(self, claim: Claim, show: bool = True, model: str | None = None, control: Claim | None = None,
            control_note: str = "") -> Claim:
        """Stamp the notebook's model (or ``model``, in a notebook that compares several), profile and what it was
        measured on; attach the random-weight ``control`` (:func:`with_control`); print."""
        label = model or self.model
        claim = replace(with_control(claim, control, control_note), model=label, profile=self.profile,
                        measured_on=measured_on(label))
        if not claim.draws:  # judged once: the record still says so, and on what
            claim = replace(claim, draws=(claim.holds,), draws_of=claim.draws_of or "one evaluation")
        if any(c.id == claim.id and c.model == claim.model for c in self.claims):  # once per claim and model
            raise ValueError(f"claim {claim.id!r} recorded twice for {claim.model!r} in {self.notebook}")
        self.claims.append(claim)
        if show:
            print(claim.line())
        if claim.control_contradicts and not claim.control_note:
            print(f"WARNING: {claim.id} holds on random weights, but its paper says training makes the effect: "
                  f"the rule cannot tell this model from noise")
        return claim

    def table(self, numbers: dict[str, str] | None = None):
        """The notebook's scorecard, one row per claim: statement, source, published and measured values, verdict,
        and -- kept apart from the verdict -- whether the *number* matches the paper's (``numbers``: claim id ->
        text, e.g. from :func:`sinklib.core.results.number_matches`; "no published number" elsewhere)."""
        import pandas as pd

        numbers = numbers or {}
        return pd.DataFrame([{
            "id": c.id, "claim": c.statement, "source": c.source,
            "published": "-" if c.published is None else _short(c.published), "measured": _short(c.measured),
            "structure holds": c.verdict(), "number matches": numbers.get(c.id, "no published number"),
            "draws": draw_summary(c.draws) if c.draws else "-",
            "random-weight control": "-" if c.control is None else _word(c.control),
        } for c in self.claims])

    def show(self, prefix: str) -> list[Claim]:
        """Print (and return) the recorded claims whose id starts with ``prefix`` -- e.g. one claim across models."""
        chosen = [c for c in self.claims if c.id.startswith(prefix)]
        for c in chosen:
            print(c.line())
        return chosen

    @property
    def all_hold(self) -> bool:
        return bool(self.claims) and all(c.holds is True for c in self.claims)

    def write(self, folder: str | Path) -> Path:
        return write_json(Path(folder) / "claims.json", {"schema": SCHEMA, "notebook": self.notebook,
                                                          "claims": [asdict(c) for c in self.claims]})


def load(path: str | Path) -> list[Claim]:
    """The claims of one ``claims.json``."""
    import json

    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: claims schema {data.get('schema')!r}, this sinklib reads {SCHEMA}; re-run the "
                         f"notebook (make figures NOTEBOOKS={data.get('notebook', '?')[:2]})")
    return [Claim(**(c | {"draws": tuple(c.get("draws", ()))})) for c in data["claims"]]
