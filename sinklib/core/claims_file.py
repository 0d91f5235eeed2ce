"""A notebook's ``claims.json``: the :class:`Recorder` that collects and writes it, its schema, and :func:`load`.

A notebook's :class:`Recorder` stamps the model and profile on each :class:`~sinklib.core.claims.Claim`, prints its
one-line verdict and writes every record at the end. ``claims.json`` is written and read through one schema
(:data:`SCHEMA`, the pydantic schema of a :class:`~sinklib.core.claims.Claim`, exported by :func:`json_schema`),
checked strictly at the door -- ``holds: "yes"`` or ``id: 5`` is refused, not coerced.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import MISSING, asdict, fields, replace
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from sinklib.core.claims import (
    Claim,
    check_schema,
    draw_summary,
    measured_on,
    short_value,
    verdict_word,
    with_control,
)
from sinklib.core.errors import InputError
from sinklib.core.results import write_json

SCHEMA = 4  # 4: ``quantities`` (each number's declared kind, unit and tolerance), checked by a pydantic schema;
#             3: the fourth verdict ("unsettled"), ``paper`` and ``margin``


class Recorder:
    """Collects a notebook's claims: ``add`` stamps model and profile and prints the verdict; ``write`` saves them."""

    def __init__(self, notebook: str, model: str, profile: str):
        self.notebook, self.model, self.profile = notebook, model, profile
        self.claims: list[Claim] = []

    def add(self, claim: Claim, show: bool = True, model: str | None = None, control: Claim | None = None,
            control_note: str = "") -> Claim:
        """Stamp the notebook's model (or ``model``, in a notebook that compares several), profile and what it was
        measured on; attach the random-weight ``control`` (:func:`~sinklib.core.claims.with_control`); print."""
        label = model or self.model
        claim = replace(with_control(claim, control, control_note), model=label, profile=self.profile,
                        measured_on=measured_on(label))
        check_schema(claim)
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
            "published": "-" if c.published is None else short_value(c.published), "measured": short_value(c.measured),
            "structure holds": c.verdict(), "number matches": numbers.get(c.id, "no published number"),
            "draws": draw_summary(c.draws) if c.draws else "-",
            "random-weight control": "-" if c.control is None else verdict_word(c.control),
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
        return write_claims(Path(folder) / "claims.json", self.notebook, self.claims)


CLAIM = TypeAdapter(Claim)


def record_of(claim: Claim) -> dict:
    """A claim as the JSON object ``claims.json`` holds (NaN -> null, numpy / torch values -> Python ones)."""
    from sinklib.core.results import to_builtin

    return to_builtin({**asdict(claim), "quantities": {k: v.model_dump(exclude_defaults=True)
                                                       for k, v in claim.quantities.items()}})


def write_claims(path: str | Path, notebook: str, claims: Sequence[Claim]) -> Path:
    """``claims.json``: ``{"schema", "notebook", "claims": [record, ...]}``, each record checked against the schema
    it will be read with (:func:`claim_from_record`) before anything is written."""
    records = [record_of(c) for c in claims]
    for record in records:
        CLAIM.validate_json(json.dumps(record), strict=True)
    return write_json(path, {"schema": SCHEMA, "notebook": notebook, "claims": records})


def json_schema() -> dict:
    """The JSON Schema of a ``claims.json`` file (``python -m sinklib claims-schema``; ``docs/claims.schema.json``)."""
    record = dict(CLAIM.json_schema(mode="serialization"))
    defs = record.pop("$defs", {})  # its references ("#/$defs/Quantity") resolve from the document's root
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "sinklib claims.json",
            "type": "object", "required": ["schema", "notebook", "claims"], "$defs": defs,
            "properties": {"schema": {"const": SCHEMA}, "notebook": {"type": "string"},
                           "claims": {"type": "array", "items": record}}}


class UnknownClaimFieldWarning(UserWarning):
    """A ``claims.json`` record carries a field this sinklib does not know (a newer or hand-edited file): ignored."""


def _rerun(path: Path, notebook: object = None) -> str:
    """What to do about a claims file that cannot be read: re-run the notebook that wrote it."""
    stem = notebook if isinstance(notebook, str) and notebook else path.parent.name
    return f"re-run the notebook: make figures NOTEBOOKS={stem[:2] or '?'}"


def _read_claims_json(path: Path) -> dict:
    """The parsed ``claims.json`` object, or a one-line :class:`InputError` naming the file (unreadable text,
    invalid JSON, or JSON that is not an object with a ``claims`` list)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:  # a folder where the file should be, or a file that cannot be read
        raise InputError(f"{path}: not a claims file ({err.strerror or type(err).__name__}); {_rerun(path)}") from None
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not a claims file (not UTF-8 text: {err.reason}); {_rerun(path)}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: not a claims file (invalid JSON: {err.msg} at line {err.lineno}, column "
                         f"{err.colno}); {_rerun(path)}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: not a claims file (a JSON {type(data).__name__}, expected an object with "
                         f"\"schema\" and \"claims\"); {_rerun(path)}")
    return data


CLAIM_FIELDS = tuple(f.name for f in fields(Claim))
REQUIRED_FIELDS = tuple(f.name for f in fields(Claim) if f.default is MISSING and f.default_factory is MISSING)


def _claim_of(record: object, path: Path, index: int, notebook: object) -> tuple[Claim, set[str]]:
    """One record as a :class:`Claim` and the names of the fields it carries that a Claim does not have (ignored);
    a record that is not an object, or lacks a required field, is a one-line :class:`InputError`."""
    if not isinstance(record, dict):
        raise InputError(f"{path}: claim record {index} is a JSON {type(record).__name__}, not an object; "
                         f"{_rerun(path, notebook)}")
    missing = [f for f in REQUIRED_FIELDS if f not in record]
    if missing:
        raise InputError(f"{path}: claim record {index} ({record.get('id', 'no id')!r}) lacks {', '.join(missing)}; "
                         f"{_rerun(path, notebook)}")
    known = {k: v for k, v in record.items() if k in CLAIM_FIELDS}
    try:
        claim = CLAIM.validate_json(json.dumps(known), strict=True)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InputError(f"{path}: claim record {index} ({record.get('id', 'no id')!r}) has {where} = "
                         f"{first.get('input')!r}: {first['msg'].lower()}; {_rerun(path, notebook)}") from None
    return claim, set(record) - set(CLAIM_FIELDS)


def load(path: str | Path) -> list[Claim]:
    """The claims of one ``claims.json``.

    A record with fields a :class:`Claim` does not have (a newer sinklib, a hand edit) is read without them, and
    one :class:`UnknownClaimFieldWarning` per file names the file and the fields. Anything else that cannot be read
    -- invalid JSON, a list instead of an object, another schema, a record that is not an object or lacks a field --
    is a one-line :class:`~sinklib.core.errors.InputError` (a ValueError: the scorecard, gallery and verify leave
    that notebook out and say so) naming the file and the notebook to re-run."""
    import warnings

    path = Path(path)
    data = _read_claims_json(path)
    notebook = data.get("notebook")
    if data.get("schema") != SCHEMA:
        raise InputError(f"{path}: claims schema {data.get('schema')!r}, this sinklib reads {SCHEMA}; "
                         f"{_rerun(path, notebook)}")
    records = data.get("claims")
    if not isinstance(records, list):
        raise InputError(f"{path}: not a claims file (\"claims\" is {type(records).__name__}, expected a list); "
                         f"{_rerun(path, notebook)}")
    claims, unknown = [], set()
    for i, record in enumerate(records):
        claim, extra = _claim_of(record, path, i, notebook)
        claims.append(claim)
        unknown |= extra
    if unknown:
        warnings.warn(f"{path}: ignored unknown claim field(s) {', '.join(sorted(unknown))} (written by another "
                      f"sinklib version or by hand)", UnknownClaimFieldWarning, stacklevel=2)
    return claims
