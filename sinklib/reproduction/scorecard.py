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
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from sinklib.core import claims as claims_io
from sinklib.core import quantities as q
from sinklib.core.claims import IMPLEMENTATION_CHECK, NOT_A_PAPER, OWN_QUESTION  # noqa: F401 (re-exported)

VERDICTS = claims_io.VERDICTS  # holds, does NOT hold, unsettled, cannot be judged here


@dataclass(frozen=True)
class Row:
    notebook: str
    id: str
    paper: str  # the source up to its first comma: authors / title / arXiv id
    source: str
    statement: str
    published: object
    measured: object
    model: str
    profile: str
    verdict: str
    reason: str  # the record's note (why it cannot be judged, caveats)
    kind: str  # "pretrained", "stand-in" or "trained here"
    needs_gpu: bool
    follows: str = ""
    adapted: str = ""
    at_init: bool | None = None
    control: bool | None = None
    control_note: str = ""
    control_measured: object = None
    draws: tuple = ()
    draws_of: str = ""
    spread: object = None
    unsettled: bool = False
    margin: object = None
    quantities: dict = field(default_factory=dict)  # what each number is, as its rule declared (Claim.quantities)
    also_in: tuple = ()  # other notebooks that judged the same claim on the same model (filled by :func:`distinct`)

    @property
    def paper_claim(self) -> bool:
        """False for an implementation check or this project's own question (:data:`NOT_A_PAPER`)."""
        return self.paper not in NOT_A_PAPER.values()

    @property
    def draws_text(self) -> str:
        return claims_io.draw_summary(self.draws) if self.draws else "-"

    @property
    def control_text(self) -> str:
        """"fails (paper: fails)": the rule on random weights, and what the paper predicts there."""
        word = {True: "holds", False: "fails", None: "not run" if self.control_measured is None else "cannot be judged"}
        paper = {True: "holds", False: "fails", None: "no prediction"}[self.at_init]
        flag = " -- CONTRADICTS the paper" if self.at_init is False and self.control is True else ""
        return f"{word[self.control]} (paper: {paper}){flag}"


def _kind(notebook: str, model: str) -> str:
    if "stand-in" in model:
        return "stand-in"
    if "trained here" in model:
        return "trained here"
    return "pretrained"


PAPERS = {  # arXiv id -> how the scorecard names the paper
    "2309.17453": "Xiao et al., StreamingLLM", "2410.10781": "Gu et al., When attention sink emerges",
    "2402.17762": "Sun et al., Massive activations", "2605.06611": "Structural origin of sinks (ICML 2026)",
    "2505.06708": "Qiu et al., Gated attention", "2309.16588": "Darcet et al., ViTs need registers",
    "2506.08010": "Jiang et al., Test-time registers", "2503.03321": "Kang et al., Visual attention sink",
    "2507.23279": "Su et al., Super experts", "2403.01241": "Liu et al., IntactKV", "2406.15765": "Yu et al., ACT",
    "2504.20966": "Softpick", "2410.13835": "Guo et al., Active-dormant heads",
}


def _paper(source: str, paper: str = "") -> str:
    """The paper a claim comes from: the record's own ``paper`` (an arXiv id) where it names one, else the first
    arXiv id of its source, as the short name and id; with neither, the source up to the first comma. A record whose
    ``paper`` is in :data:`NOT_A_PAPER` comes from no paper: its kind's words instead."""
    if paper in NOT_A_PAPER:
        return NOT_A_PAPER[paper]
    match = re.search(r"arXiv[: ]*(\d{4}\.\d{4,5})", source)
    arxiv = paper or (match.group(1) if match else "")
    if not arxiv:
        return source.split(",")[0].strip()
    return f"{PAPERS[arxiv]} ({arxiv})" if arxiv in PAPERS else f"arXiv {arxiv}"


def collect(figures_dir: str | Path) -> list[Row]:
    """Every ``<figures_dir>/<notebook>/claims.json``, in notebook order. A file another sinklib version wrote (an
    older claims schema) is left out with a one-line warning that says which notebook to re-run: the scorecard of
    the others still builds."""
    import sys

    from sinklib.reproduction.figures_folder import leftovers, notebook_folders

    for line in leftovers(figures_dir):
        print(f"note: {line}", file=sys.stderr)
    rows = []
    for path in [f / "claims.json" for f in notebook_folders(figures_dir) if (f / "claims.json").is_file()]:
        notebook = path.parent.name
        try:
            records = claims_io.load(path)
        except ValueError as err:
            print(f"warning: {err}; left out of the scorecard", file=sys.stderr)
            continue
        for c in records:
            counted = c.without_noise()  # a rule that holds on noise is not counted as holding
            rows.append(Row(
                notebook=notebook, id=c.id, paper=_paper(c.source, c.paper), source=c.source, statement=c.statement,
                published=c.published, measured=c.measured, model=c.model, profile=c.profile,
                verdict=counted.verdict(), reason=counted.note, kind=_kind(notebook, c.model), needs_gpu=c.needs_gpu,
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


def _number(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) and x != 0 else None


def numeric_pairs(rows: list[Row]) -> list[dict]:
    """(published, measured) number pairs for the figure: the values themselves when both are numbers, and every
    key both dictionaries share with a number on each side -- except numbers their rule declares identities (which
    layer / neuron / dimension), whose ratio means nothing."""
    pairs = []
    for r in rows:
        p, m = _number(r.published), _number(r.measured)
        if p is not None and m is not None:
            pairs.append({"id": r.id, "key": "", "published": p, "measured": m, "verdict": r.verdict,
                          "kind": r.kind, "quantity": quantity(r, "value", r.measured)})
        elif isinstance(r.published, dict) and isinstance(r.measured, dict):
            for key in sorted(r.published.keys() & r.measured.keys()):
                if q.declared(r.quantities, "measured", key, r.measured[key]).kind == q.Kind.IDENTITY:
                    continue
                p, m = _number(r.published[key]), _number(r.measured[key])
                if p is not None and m is not None:
                    pairs.append({"id": r.id, "key": key, "published": p, "measured": m, "verdict": r.verdict,
                                  "kind": r.kind, "quantity": quantity(r, key, r.measured[key])})
    return pairs


GROUP_OF_KIND = {q.Kind.LOSS: "loss or perplexity", q.Kind.SHARE: "attention share or rate", q.Kind.RATIO: "ratio"}


def quantity(row: Row, key: str, number) -> str:
    """What a number measures, for grouping, from the kind its rule declared: loss or perplexity, attention share
    or rate, ratio, or other."""
    return GROUP_OF_KIND.get(q.declared(row.quantities, "measured", key, number).kind, "other")


@dataclass(frozen=True)
class At:
    """A path step into a paper's table stored as parallel lists: the entry of the current list at the index where
    the sibling list ``column`` holds ``value`` (Xiao et al. Table 2: {"n_sink": [0, 1, 2, 4, 8], "Llama-2-7B":
    [...]} -- ``("Llama-2-7B", At("n_sink", 4))`` is the perplexity with 4 sinks)."""
    column: str
    value: object


MEAN = "*"  # a path step over a list of draws: the mean of the rest of the path over its entries


@dataclass(frozen=True)
class Term:
    """One number of a ratio: its path (keys, list indices, :class:`At`, :data:`MEAN`) into a claim record's
    ``published`` or ``measured`` value, in the claim's own record (``claim`` = "") or in the record with base id
    ``claim`` of the same notebook and model (a mitigation variant's softmax baseline trained beside it)."""
    path: tuple
    claim: str = ""


@dataclass(frozen=True)
class RatioSpec:
    """A like-for-like ratio of one claim: ``numerator`` / ``denominator`` (words), the run's from ``measured``
    (both numbers from the same run: same model, same text or training), the paper's from ``published`` (both
    from the paper's own table). ``quantity`` names the figure's group of rows."""
    claim: str  # base id (:func:`base_id`)
    numerator: str
    denominator: str
    published: tuple[Term, Term]
    measured: tuple[Term, Term]
    quantity: str


def _same(*path) -> tuple[Term, Term]:
    """The same two keys on both sides: (numerator path, denominator path) -> two :class:`Term` s."""
    return Term(path[0]), Term(path[1])


_QIU_BASELINE = Term(("first_attention",), "mitigation.softmax_grows_sink")  # Qiu et al. Table 4's softmax: 0.467

RATIO_SPECS = (  # every claim whose paper and run each give two numbers of the same kind (research/targets.md)
    RatioSpec("xiao2023.sinks_rescue_window", "window only", "4 sinks + window",
              _same(("window only",), ("4 sinks + window",)), _same(("window only",), ("4 sinks + window",)),
              "perplexity"),
    RatioSpec("xiao2023.sink_is_positional", "4 newlines as sinks", "own first 4",
              _same(("4 newlines",), ("own first 4",)), _same(("4 newlines",), ("own first 4",)), "perplexity"),
    RatioSpec("xiao2023.few_sinks_suffice", "0 sinks", "4 sinks",
              (Term(("Llama-2-7B", At("n_sink", 0))), Term(("Llama-2-7B", At("n_sink", 4)))),
              _same(("0",), ("4",)), "perplexity"),
    RatioSpec("xiao2023.few_sinks_suffice", "1 sink", "4 sinks",
              (Term(("Llama-2-7B", At("n_sink", 1))), Term(("Llama-2-7B", At("n_sink", 4)))),
              _same(("1",), ("4",)), "perplexity"),
    RatioSpec("sun2024.massive_activations_are_bias", "set to mean", "original",
              _same(("set_to_mean",), ("original",)), _same(("set to mean",), ("original",)), "perplexity"),
    RatioSpec("sun2024.massive_activations_are_bias", "set to zero", "original",
              _same(("set_to_zero",), ("original",)), _same(("set to zero",), ("original",)), "perplexity"),
    RatioSpec("su2025.pruning_super_experts_breaks_the_sink", "super experts pruned", "as is",
              _same(("Mixtral-8x7B ppl", "prune SEs"), ("Mixtral-8x7B ppl", "baseline")),
              _same(("prune super experts", "ppl"), ("baseline", "ppl")), "perplexity"),
    RatioSpec("su2025.pruning_super_experts_breaks_the_sink", "random experts pruned", "as is",
              _same(("Mixtral-8x7B ppl", "random"), ("Mixtral-8x7B ppl", "baseline")),
              _same(("random", MEAN, "ppl"), ("baseline", "ppl")), "perplexity"),
    RatioSpec("mitigation.gated_headwise_removes_sink", "head-wise gate", "softmax",
              (Term(("first_attention",)), _QIU_BASELINE), (Term(("first_attention",)), _QIU_BASELINE),
              "attention share or rate"),
    RatioSpec("mitigation.gated_elementwise_removes_sink", "element-wise gate", "softmax",
              (Term(("first_attention",)), _QIU_BASELINE), (Term(("first_attention",)), _QIU_BASELINE),
              "attention share or rate"),
    RatioSpec("mitigation.softmax_off_by_one_removes_sink", "softmax-off-by-one", "softmax",
              _same(("first_attention",), ("baseline_first_attention",)),
              (Term(("first_attention",)), _QIU_BASELINE), "attention share or rate"),
    RatioSpec("origin.headwise_rmsnorm_lowers_disparity_raises_rank", "head-wise RMSNorm DomRatio", "softmax's",
              _same(("dom_ratio", 1), ("dom_ratio", 0)), _same(("dom_ratio", 1), ("dom_ratio", 0)),
              "activation ratio"),
    RatioSpec("origin.headwise_rmsnorm_lowers_disparity_raises_rank", "head-wise RMSNorm effective rank", "softmax's",
              _same(("effective_rank", 1), ("effective_rank", 0)),
              _same(("effective_rank", 1), ("effective_rank", 0)), "other"),
)


def _float(x) -> float | None:
    """A number, or a paper's "inf" written as text; None for anything else."""
    if isinstance(x, str) and x.strip().lower() in ("inf", "infinity"):
        return math.inf
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x)


def _lookup(value, path: tuple) -> float | None:
    """The number at ``path`` in a record's value (:class:`Term`), None where the path leads nowhere."""
    parent = None
    for i, step in enumerate(path):
        if step == MEAN:
            if not isinstance(value, list) or not value:
                return None
            each = [_lookup(v, path[i + 1:]) for v in value]
            return None if None in each else sum(each) / len(each)
        if isinstance(step, At):
            column = parent.get(step.column) if isinstance(parent, dict) else None
            if not isinstance(column, list) or step.value not in column or not isinstance(value, list):
                return None
            parent, value = value, value[column.index(step.value)] if column.index(step.value) < len(value) else None
        elif isinstance(value, dict) and step in value:
            parent, value = value, value[step]
        elif isinstance(value, list) and isinstance(step, int) and -len(value) <= step < len(value):
            parent, value = value, value[step]
        else:
            return None
    return _float(value)


def _ratio(terms: tuple[Term, Term], side: str, row: Row, records: dict[tuple, Row]) -> tuple[float, float] | None:
    """(numerator, denominator) of one side ("published" / "measured") of a ratio, each from its record; None if
    either is missing."""
    out = []
    for term in terms:
        source = row if not term.claim else records.get((row.notebook, row.model, term.claim))
        number = None if source is None else _lookup(getattr(source, side), term.path)
        if number is None:
            return None
        out.append(number)
    return out[0], out[1]


def like_for_like(rows: list[Row]) -> dict:
    """Each claim's run against its paper, like with like: for every :data:`RATIO_SPECS` entry of a claim (each
    claim and model once, :func:`distinct`), the run's ratio numerator / denominator -- both numbers measured in
    the same run, on the same model and text or training -- beside the paper's ratio of the same two quantities
    from its own table. A 135M model's perplexity is never divided by Llama-2's.

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
            ratios.append({"id": r.id, "notebook": r.notebook, "model": r.model, "verdict": r.verdict,
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
