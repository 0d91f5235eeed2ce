"""Claims as results: one record per published claim tested, written to ``figures/<notebook>/claims.json``.

A rule function (next to the computation it judges, e.g. :func:`sinklib.core.analysis.llama_family_shape`) returns a
:class:`Claim`; a notebook's :class:`Recorder` stamps the model and profile on it, prints its one-line verdict and
writes every record at the end. The record carries everything a scorecard needs: what was claimed and where, the
published and measured values, the rule that decided it, and whether it holds (None: cannot be judged here, with
the reason in ``note``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sinklib.core.results import write_json

SCHEMA = 1


@dataclass(frozen=True)
class Claim:
    id: str  # stable across runs, "<paper>.<claim>", e.g. "gu2024.repeated_token_no_sink"
    statement: str  # what the paper claims, in words
    source: str  # paper (authors, arXiv id) and table / figure / section
    rule: str  # the test applied here, in words, with its thresholds
    published: object  # the published value(s), or None when the paper gives none
    measured: object  # the value(s) measured here
    holds: bool | None  # None: cannot be judged on this model / at this size (say why in ``note``)
    note: str = ""  # caveats: a different model than the paper's, one stream, two seeds, a stand-in, ...
    needs_gpu: bool = False  # only the GPU profile's models can judge it (e.g. outliers that need a large ViT)
    model: str = ""  # stamped by the Recorder
    profile: str = ""

    def verdict(self) -> str:
        return {True: "holds", False: "does NOT hold", None: "cannot be judged here"}[self.holds]

    def line(self) -> str:
        """One printable line: verdict, statement, measured vs published, rule."""
        published = "" if self.published is None else f"; published {_short(self.published)}"
        note = f" ({self.note})" if self.note else ""
        return (f"Claim {self.id} {self.verdict()}: {self.statement} -- measured {_short(self.measured)}"
                f"{published}. Rule: {self.rule}.{note}")


def _short(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_short(v) for v in value) + "]"
    return str(value)


class Recorder:
    """Collects a notebook's claims: ``add`` stamps model and profile and prints the verdict; ``write`` saves them."""

    def __init__(self, notebook: str, model: str, profile: str):
        self.notebook, self.model, self.profile = notebook, model, profile
        self.claims: list[Claim] = []

    def add(self, claim: Claim, show: bool = True, model: str | None = None) -> Claim:
        """Stamp the notebook's model (or ``model``, in a notebook that compares several) and profile; print."""
        claim = replace(claim, model=model or self.model, profile=self.profile)
        if any(c.id == claim.id and c.model == claim.model for c in self.claims):  # once per claim and model
            raise ValueError(f"claim {claim.id!r} recorded twice for {claim.model!r} in {self.notebook}")
        self.claims.append(claim)
        if show:
            print(claim.line())
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
    return [Claim(**c) for c in data["claims"]]
