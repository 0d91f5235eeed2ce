"""One row of the reproduction scorecard (:mod:`sinklib.reproduction.scorecard`): a claim record as the scorecard
reads it -- its verdict and reason, what it was measured on (:func:`kind_of`), what makes the verdict trustworthy --
and the paper it names (:func:`paper_name`, from :data:`PAPERS`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sinklib.core import claims as claims_io
from sinklib.core.claims import NOT_A_PAPER


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
    kind: str  # "pretrained", "stand-in", "trained here" or "random weights"
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
        """The rule on random weights, and what the paper predicts there (:func:`claims.control_summary`)."""
        return claims_io.control_summary(self.control, self.at_init, self.control_measured)


def kind_of(notebook: str, model: str) -> str:
    """What a record's model label says it was measured on (:func:`sinklib.core.claims.measured_on`'s words)."""
    if "random weights" in model:  # an implementation check on a tiny random model (03's gpt-oss)
        return "random weights"
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


def paper_name(source: str, paper: str = "") -> str:
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
