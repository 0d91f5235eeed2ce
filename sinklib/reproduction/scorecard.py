"""The reproduction scorecard: every notebook's ``claims.json`` gathered into one table -- which published claims
hold, on which model, and by how much.

A row per claim record: notebook, id, paper, source, statement, published and measured values, model, profile,
verdict (holds / does not hold / unsettled / cannot be judged here) with the reason, what it was measured on (a pretrained
model, a stand-in built here, or models trained here), and whether the GPU profile is needed to judge it -- and what
makes the verdict trustworthy: what the rule ``follows`` (and how it is ``adapted``), what the paper predicts at
random initialisation (``at_init``) against the rule's verdict on random weights (``control``), and the verdict of
each draw (``draws``) where the evidence depends on one. No claim is dropped because it failed. ``python -m sinklib scorecard [--json]`` prints it; ``90_scorecard`` draws it.

What is counted: a claim whose rule holds on random weights where its paper says training makes the effect cannot
tell training from noise -- it is counted as "cannot be judged here", not "holds" (:meth:`Claim.without_noise`).
A claim judged on the same model in two notebooks (00's sink shape and 10's on SmolLM2) is counted once, at its
first notebook, with ``also_in`` naming the others (:func:`distinct`). Each record names its own paper
(``Claim.paper``; else the first arXiv id of its source).

A row is a :class:`~sinklib.reproduction.scorecard_row.Row`; the like-for-like ratios' table is
:mod:`sinklib.reproduction.scorecard_ratios`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, replace
from pathlib import Path

from sinklib.core import claims as claims_io
from sinklib.core import claims_file
from sinklib.core.claims import IMPLEMENTATION_CHECK, NOT_A_PAPER, OWN_QUESTION  # noqa: F401 (re-exported)
from sinklib.reproduction.scorecard_ratios import RATIO_SPECS, Term, lookup
from sinklib.reproduction.scorecard_row import Row, kind_of, paper_name

VERDICTS = claims_io.VERDICTS  # holds, does NOT hold, unsettled, cannot be judged here


def collect(figures_dir: str | Path) -> list[Row]:
    """Every ``<figures_dir>/<notebook>/claims.json``, in notebook order. A file another sinklib version wrote (an
    older claims schema) is left out with a one-line warning that says which notebook to re-run: the scorecard of
    the others still builds."""
    import sys

    from sinklib.reproduction.figures_folder import leftovers, notebook_folders

    for line in leftovers(figures_dir):
        print(f"note: {line}", file=sys.stderr)
    rows = []
    for path in [f / "claims.json" for f in notebook_folders(figures_dir) if (f / "claims.json").exists()]:
        notebook = path.parent.name
        try:
            records = claims_file.load(path)
        except ValueError as err:
            print(f"warning: {err}; left out of the scorecard", file=sys.stderr)
            continue
        for c in records:
            counted = c.without_noise()  # a rule that holds on noise is not counted as holding
            rows.append(Row(
                notebook=notebook, id=c.id, paper=paper_name(c.source, c.paper), source=c.source, statement=c.statement,
                published=c.published, measured=c.measured, model=c.model, profile=c.profile,
                verdict=counted.verdict(), reason=counted.note, kind=kind_of(notebook, c.model), needs_gpu=c.needs_gpu,
                follows=c.follows, adapted=c.adapted, at_init=c.at_init, control=c.control,
                control_note=c.control_note, control_measured=c.control_measured, draws=tuple(c.draws),
                draws_of=c.draws_of, spread=c.spread, unsettled=counted.unsettled, margin=c.margin,
                quantities=dict(c.quantities)))
    return rows


def distinct(rows: list[Row]) -> list[Row]:
    """One row per (claim, model): a claim judged on the same model in several notebooks (00's sink shape and 10's on
    SmolLM2; 02's chain links and 10's) is kept at its first notebook, with ``also_in`` naming the others -- and
    saying so where their verdict differs."""
    first: dict[tuple[str, str], int] = {}
    out: list[Row] = []
    for r in rows:
        key = (base_id(r.id), r.model)
        if key not in first:
            first[key] = len(out)
            out.append(r)
            continue
        kept = out[first[key]]
        where = r.notebook if r.verdict == kept.verdict else f"{r.notebook} ({r.verdict} there)"
        out[first[key]] = replace(kept, also_in=(*kept.also_in, where))
    return out


def _counts(rows: list[Row]) -> dict[str, int]:
    return {v: sum(r.verdict == v for r in rows) for v in VERDICTS}


def by_paper(rows: list[Row]) -> list[dict]:
    """Per paper: distinct claims tested (a claim and model once, :func:`distinct`), held, not held, unsettled, not
    judgeable (sorted by the number tested); ``distinct``: how many different claims (whatever the model). Only a
    paper's claims: implementation checks and this project's own questions are no paper's (:func:`not_paper_claims`)."""
    out: dict[str, dict] = {}
    for r in distinct(rows):
        if not r.paper_claim:
            continue
        entry = out.setdefault(r.paper, {"paper": r.paper, "tested": 0, **dict.fromkeys(VERDICTS, 0),
                                         "distinct": set()})
        entry["tested"] += 1
        entry[r.verdict] += 1
        entry["distinct"].add(base_id(r.id))
    for entry in out.values():  # the same claim judged on several models counts once here
        entry["distinct"] = len(entry["distinct"])
    return sorted(out.values(), key=lambda e: (-e["tested"], e["paper"]))


def base_id(claim_id: str) -> str:
    """The claim without the model it was judged on: "origin.lock_in.gemma3-270m" -> "origin.lock_in",
    "gu2024.llama_family_input_shape.qwen2.5-coder-0.5b" -> "gu2024.llama_family_input_shape". A third part that
    names a setting rather than a model ("...converges_faster.bible_g0=0.1") is kept."""
    parts = claim_id.split(".", 2)
    if len(parts) == 3 and "-" in parts[2] and not any(ch in parts[2] for ch in "_= "):
        return ".".join(parts[:2])
    return claim_id


def not_paper_claims(rows: list[Row]) -> dict[str, list[str]]:
    """The records that are no paper's claim, by kind (:data:`NOT_A_PAPER`'s words): {kind: ["id (verdict)", ...]},
    each claim and model once."""
    out: dict[str, list[str]] = {}
    for r in distinct(rows):
        if not r.paper_claim:
            out.setdefault(r.paper, []).append(f"{r.id} ({r.verdict})")
    return out


def by_paper_and_kind(rows: list[Row]) -> list[dict]:
    """Per paper and what its claims were measured on (pretrained / stand-in / trained here): verdict counts, each
    claim and model once (:func:`distinct`); a paper's claims only (:func:`by_paper`)."""
    out: dict[tuple[str, str], dict] = {}
    for r in distinct(rows):
        if not r.paper_claim:
            continue
        entry = out.setdefault((r.paper, r.kind), {"paper": r.paper, "kind": r.kind, "tested": 0,
                                                    **dict.fromkeys(VERDICTS, 0), "models": set()})
        entry["tested"] += 1
        entry[r.verdict] += 1
        entry["models"].add(r.model)
    for entry in out.values():
        entry["models"] = len(entry["models"])
    return sorted(out.values(), key=lambda e: (-e["tested"], e["paper"], e["kind"]))


def _ratio(terms: tuple[Term, Term], side: str, row: Row, records: dict[tuple, Row]) -> tuple[float, float] | None:
    """(numerator, denominator) of one side ("published" / "measured") of a ratio, each from its record; None if
    either is missing."""
    out = []
    for term in terms:
        source = row if not term.claim else records.get((row.notebook, row.model, term.claim))
        number = None if source is None else lookup(getattr(source, side), term.path)
        if number is None:
            return None
        out.append(number)
    return out[0], out[1]


def like_for_like(rows: list[Row]) -> dict:
    """Each claim's run against its paper, like with like: for every
    :data:`~sinklib.reproduction.scorecard_ratios.RATIO_SPECS` entry of a claim (each claim and model once,
    :func:`distinct`), the run's ratio numerator / denominator -- both numbers measured in the same run, on the same
    model and text or training -- beside the paper's ratio of the same two quantities from its own table. A 135M model's perplexity is never divided by Llama-2's.

    Returns {"ratios": [{id, notebook, model, verdict, kind, quantity, label, measured, published,
    measured_terms, published_terms}], "without": [ids of the claims with no like-for-like ratio],
    "not_finite": [{id, label, why}: a ratio whose paper or run value is zero or infinite (a log axis cannot show
    it)]}. A claim with only non-finite ratios is in ``not_finite``, not in ``without``."""
    kept = distinct(rows)
    records = {(r.notebook, r.model, base_id(r.id)): r for r in rows}
    ratios, not_finite, with_spec = [], [], set()
    for r in kept:
        for spec in (s for s in RATIO_SPECS if s.claim == base_id(r.id)):
            measured = _ratio(spec.measured, "measured", r, records)
            published = _ratio(spec.published, "published", r, records)
            if measured is None or published is None:
                continue
            with_spec.add(r.id)
            label = f"{spec.numerator} / {spec.denominator}"
            bad = [f"{who} {n:g} / {d:g}" for who, (n, d) in (("paper", published), ("run", measured))
                   if not (math.isfinite(n) and math.isfinite(d)) or n == 0 or d == 0]
            if bad:
                not_finite.append({"id": r.id, "label": label, "why": "; ".join(bad)})
                continue
            ratios.append({"id": r.id, "notebook": r.notebook, "model": r.model, "verdict": r.verdict, "paper": r.paper,
                           "kind": r.kind, "quantity": spec.quantity, "label": label,
                           "measured": measured[0] / measured[1], "published": published[0] / published[1],
                           "measured_terms": measured, "published_terms": published})
    return {"ratios": ratios, "without": [r.id for r in kept if r.id not in with_spec], "not_finite": not_finite}


def what_would_settle(r: Row) -> str:
    """For a claim that neither holds nor fails here, what would settle it, from its own record: a model that is not
    a stand-in (which ones), the GPU profile (the paper's sizes), a control that fails, a value clear of its margin
    (how far it is now, and what would move it: seeds for a model trained here, windows for a pretrained one), draws
    that agree, or what the note names. Empty for "holds" and "does NOT hold"."""
    from sinklib.architectures.mllm.protocol import MLLM_MODELS
    from sinklib.architectures.moe.protocol import MOE_MODELS

    if r.verdict in ("holds", "does NOT hold"):
        return ""
    if r.kind == "stand-in":
        trained = {"11": ("a trained MoE", MOE_MODELS), "12": ("a pretrained LMM", MLLM_MODELS)}
        what, models = trained.get(r.notebook[:2], ("a pretrained model", ()))
        return (f"{what} in place of the stand-in: the GPU profile's {', '.join(models[:2])} (`make figures "
                f"PROFILE=gpu`, or MODEL=<hub id>)" if models else f"{what} in place of the stand-in")
    if r.needs_gpu:
        return "the GPU profile (`make figures PROFILE=gpu`): the paper's model sizes"
    if r.at_init is False and r.control is True:
        return ("a model on which the random-weight control fails: here the rule holds on random weights too, so it "
                "cannot show what training made")
    margin = r.margin if isinstance(r.margin, dict) else {}
    if r.verdict == "unsettled" and {"value", "cut", "spread"} <= set(margin):
        away = abs(margin["value"] - margin["cut"])
        more = (f"more training seeds than {len(r.draws)} or a larger model (the GPU profile)" if r.kind ==
                "trained here" else "more windows or tokens than now")
        return (f"a value clear of its margin: {margin['value']:.3g} lies {away:.3g} from the cut {margin['cut']:.3g}, "
                f"within its margin {margin['spread']:.3g}; {more}")
    if r.verdict == "unsettled":
        judged = [d for d in r.draws if d is not None]
        return (f"draws that agree (now {sum(d is True for d in judged)} of {len(judged)} judgeable draws hold): "
                f"more windows per draw, or all windows pooled with an interval clear of the cut")
    reason = (r.reason or "").split(";")[0].strip()
    return f"what keeps it from being judged here: {reason}" if reason else "a record that says why it was not judged"


def to_json(rows: list[Row]) -> dict:
    """Every distinct claim (a claim and model once; ``also_in``: the other notebooks that judged it) with its record
    (``follows``, ``at_init``, ``control``, ``draws``, ``margin`` among them), the per-paper summary and the four
    verdict counts of the papers' claims (``paper_claims`` of them; ``not_paper_claims``: the implementation checks
    and this project's own questions, listed by kind and counted nowhere else); ``unsettled``: the claims whose evidence disagrees or sits within its margin of a cut;
    ``controls_contradicting``: claims whose rule holds on random weights where the paper says training makes the
    effect (counted as "cannot be judged here"); ``not_testable_here``: every "cannot be judged here" with what would
    test it; each claim's ``settle``: :func:`what_would_settle`."""
    kept = distinct(rows)
    claims = []
    for r in kept:
        row = asdict(r)
        row["draws"] = {"n": len(r.draws), "outcomes": list(r.draws), "of": r.draws_of, "spread": r.spread}
        row.pop("draws_of")
        row.pop("spread")
        row["also_in"] = list(r.also_in)
        row["settle"] = what_would_settle(r)  # "" for holds / does NOT hold
        claims.append(row)
    papers = [r for r in kept if r.paper_claim]
    return {"claims": claims, "by_paper": by_paper(rows), "counts": _counts(papers), "records": len(rows),
            "paper_claims": len(papers), "not_paper_claims": not_paper_claims(rows),
            "unsettled": [f"{r.id} ({r.model})" for r in kept if r.verdict == "unsettled"],
            # claims these weights cannot test, apart from the verdicts: each with what would test it
            "not_testable_here": [{"claim": f"{r.id} ({r.model})", "settle": what_would_settle(r)}
                                  for r in kept if r.verdict == "cannot be judged here"],
            "controls_contradicting": [f"{r.id} ({r.model})" for r in kept
                                       if r.at_init is False and r.control is True]}


def format_table(rows: list[Row], width: int = 60) -> str:
    """A plain-text table: one line per claim (verdict, notebook, id, model, what it was measured on)."""
    if not rows:
        return "no claims.json found -- run `make figures` first"
    lines = [f"{'verdict':<22} {'notebook':<18} {'claim':<48} {'model':<{width}} {'on':<13} {'draws':<28} "
             f"random-weight control"]
    for r in rows:
        gpu = ", needs GPU" if r.needs_gpu else ""
        lines.append(f"{r.verdict:<22} {r.notebook:<18} {r.id[:48]:<48} {r.model[:width]:<{width}} "
                     f"{r.kind + gpu:<13} {r.draws_text[:28]:<28} {r.control_text}")
    summary = to_json(rows)
    others = summary["not_paper_claims"]
    lines.append(f"{summary['paper_claims']} distinct claims ({len(rows)} records; a claim judged on the same model in "
                 f"two notebooks counts once; papers' claims only): "
                 + ", ".join(f"{n} {v}" for v, n in summary["counts"].items()))
    if others:
        lines.append("not counted as a paper's claim: " + "; ".join(f"{len(ids)} {kind}: {', '.join(ids)}"
                                                                      for kind, ids in others.items()))
    return "\n".join(lines)
