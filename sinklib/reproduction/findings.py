"""What the run found, in three sentences a reader sees before any count: which papers reproduce here, where the
structural-origin chain breaks on each model, and which architectures are still open -- read off the scorecard's
rows (:mod:`sinklib.reproduction.scorecard`), never written by hand.

The words, one vocabulary for the whole gallery: a *claim* is one statement of a paper (its id without the model);
a *test* is one claim judged on one model (a scorecard row, each claim and model once); a *record* is one entry of a
``claims.json`` (the same test judged in two notebooks is two records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sinklib.architectures.llm.survey_chain import LINKS
from sinklib.reproduction.scorecard import base_id, distinct
from sinklib.reproduction.scorecard_row import Row

JUDGED = ("holds", "does NOT hold")
CHAIN = LINKS[:4]  # variance discrepancy -> super neuron -> dimension disparity -> lock-in (Sun's bias test is apart)
CHAIN_WORDS = {"origin.variance_discrepancy": "the variance discrepancy (link 1)",
               "origin.super_neuron": "the super neuron (link 2)",
               "origin.dimension_disparity": "the dimension disparity (link 3)",
               "origin.lock_in": "the lock-in (link 4)"}
ARCHITECTURES = {"10_llm": "dense LLM", "11_moe": "MoE", "12_mllm": "multimodal LLM", "13_vit": "ViT"}


def short_model(label: str) -> str:
    """A model's label without its caveat in parentheses: "Gemma-3-270M (4-bit GGUF, dequantised)" -> "Gemma-3-270M"."""
    return label.split(" (")[0].strip()


@dataclass(frozen=True)
class PaperOutcome:
    paper: str
    held: int
    failed: int
    open: int  # unsettled or cannot be judged here

    @property
    def group(self) -> str:
        """"reproduces" (every judged test holds), "partly" (some hold, some fail), "does not reproduce" (tests fail,
        none hold) or "open" (no test judged: all unsettled or not judgeable here)."""
        if self.held and not self.failed:
            return "reproduces"
        if self.held:
            return "partly"
        return "does not reproduce" if self.failed else "open"


def paper_outcomes(rows: Sequence[Row]) -> list[PaperOutcome]:
    """Per paper (its claims only, each claim and model once): tests that hold, fail, and stay open. A test on a
    stand-in counts as open whatever its verdict: a stand-in built here can neither confirm nor refute a paper."""
    out: dict[str, list[int]] = {}
    for r in distinct(list(rows)):
        if r.paper_claim:
            counts = out.setdefault(r.paper, [0, 0, 0])
            judged = r.verdict in JUDGED and r.kind != "stand-in"
            counts[2 if not judged else 0 if r.verdict == "holds" else 1] += 1
    return [PaperOutcome(p, *c) for p, c in out.items()]


def short_paper(paper: str) -> str:
    """"Gu et al., When attention sink emerges (2410.10781)" -> "Gu et al."; "Softpick (2504.20966)" -> "Softpick"."""
    return paper.split(" (")[0].split(",")[0].strip()


def chain_breaks(rows: Sequence[Row]) -> dict[str, str | None]:
    """Per model tested on the chain: the first link of :data:`CHAIN` (in its order) that does not hold -- None when
    every link it was tested on holds. A link that is unsettled or not judgeable is a break too (the chain is not
    shown to go on there)."""
    by_model: dict[str, dict[str, str]] = {}
    for r in distinct(list(rows)):
        link = base_id(r.id)
        if link in CHAIN:
            by_model.setdefault(short_model(r.model), {})[link] = str(r.verdict)
    return {model: next((link for link in CHAIN if link in links and links[link] != "holds"), None)
            for model, links in by_model.items()}


def open_architectures(rows: Sequence[Row]) -> dict[str, str]:
    """The architecture notebooks with no paper's test judged (held or failed) on a pretrained model: {notebook:
    why}, why being what its tests were measured on ("a stand-in", "the small models here: the claims need the GPU
    profile's sizes") or that their tests stay unsettled."""
    out = {}
    kept = [r for r in distinct(list(rows)) if r.paper_claim]
    for notebook in ARCHITECTURES:
        tests = [r for r in kept if r.notebook == notebook]
        if not tests or any(r.verdict in JUDGED and r.kind == "pretrained" for r in tests):
            continue
        if all(r.kind == "stand-in" for r in tests):
            why = "measured on stand-ins built here (a pretrained model needs the GPU profile)"
        elif any(r.needs_gpu for r in tests):
            why = "its claims need the GPU profile's model sizes"
        else:
            why = "its tests stay unsettled"
        out[notebook] = why
    return out


def found(rows: Sequence[Row]) -> list[tuple[str, str]]:
    """The gallery's "what we found", from the rows: (label, text) for the papers by outcome (each with its tests
    that hold of its tests), the structural-origin chain per model, and the open architectures."""
    words = {"reproduces": "Reproduce here", "partly": "Partly reproduce", "does not reproduce": "Do not reproduce",
             "open": "Open here"}
    groups: dict[str, list[str]] = {}
    for o in sorted(paper_outcomes(rows), key=lambda o: (-(o.held + o.failed), -o.open)):
        n = o.held + o.failed + o.open
        detail = f"{o.held} of {n} hold" + (f", {o.failed} fail" if o.failed else "") if o.group != "open" else (
            f"{n} {'test' if n == 1 else 'tests'} open")
        groups.setdefault(o.group, []).append(f"{short_paper(o.paper)} ({detail})")
    out = [(words[g], ", ".join(groups[g])) for g in words if g in groups]
    breaks = chain_breaks(rows)
    if breaks:
        out.append(("The structural-origin chain", "; ".join(
            f"{model} {'keeps every link' if link is None else 'breaks at ' + CHAIN_WORDS[link]}"
            for model, link in breaks.items())))
    still = open_architectures(rows)
    if still:
        by_why: dict[str, list[str]] = {}  # one reason, the architectures it keeps open
        for nb, why in still.items():
            by_why.setdefault(why, []).append(f"{ARCHITECTURES[nb]} ({nb[:2]})")
        out.append(("Architectures still open", "; ".join(f"{' and '.join(names)}: {why}"
                                                          for why, names in by_why.items())))
    return out
