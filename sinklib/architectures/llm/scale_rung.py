"""``10_llm`` section 8: a scale rung within one family -- the same recipe on a small and a larger model of it, under a
stated cut of the protocol (:data:`~sinklib.architectures.llm.protocol.RUNG_CUT`) where the larger one would not fit the
CPU budget otherwise.

:func:`rung_run` applies the cut to a run, :func:`under_cut` says so in a claim's note, and :func:`rung_numbers`
reads, from one model's :class:`~sinklib.architectures.llm.llm_survey.LlmReport`, every quantity the rung compares.
"""

from __future__ import annotations

from dataclasses import replace

from sinklib.architectures.llm.llm_survey import LlmReport, mid_sequence_seen
from sinklib.architectures.llm.protocol import rung_sizes
from sinklib.core.claims import Claim
from sinklib.core.metrics import GU_EPS


def rung_run(run):
    """The run the scale rung measures under: ``run`` with the profile's ``rung_cut`` applied to its sizes
    (:func:`sinklib.architectures.llm.protocol.rung_sizes`)."""
    return replace(run, sizes=rung_sizes(run.sizes))


def under_cut(claim: Claim, cut: str) -> Claim:
    """``claim`` with a note that it was measured under a stated cut of the protocol (the scale rung's)."""
    return replace(claim, note=(f"{claim.note}; " if claim.note else "") + f"measured under a cut protocol: {cut}")


def rung_numbers(report: LlmReport) -> dict[str, float | int | None]:
    """What the scale rung compares of one model, flat (None: not measured, or no such thing): the sink rate per
    input kind, the sink layers (how many, the first one's relative depth), Sun et al.'s criterion (met or only the
    100x fallback, its peak ratio, its first layer at the first position and anywhere, later sites per sequence), the
    chain's layers (super neuron, first-token value onset, sink onset), Xiao et al.'s perplexity ratios and the
    mid-sequence search (keys beyond the first with m_j > eps, the strongest one's m_j)."""
    n = report.chain_numbers or {}
    sites = report.sun_sites
    depth = max(report.n_layers - 1, 1)
    sinking = [i for i, a in enumerate(report.alpha_by_layer) if a > GU_EPS]  # (report.sink_layers: all when none)
    xiao = report.xiao or {}
    mid = mid_sequence_seen(report)
    out: dict[str, float | int | None] = {f"sink rate, {k}": v for k, v in report.sink_rate.items()}
    out |= {
        "layers": report.n_layers,
        "sink layers (alpha_0 > eps)": len(sinking),
        "first sink layer, relative depth": sinking[0] / depth if sinking else None,
        "Sun criterion met (1) or 100x fallback (0)": int(report.massive.strict),
        "peak |h| / layer median": report.massive.peak_ratio,
        "Sun criterion, first layer at position 0": None if sites is None else sites.first_token_onset,
        "Sun criterion, first layer anywhere": None if sites is None else sites.onset,
        "later Sun sites per sequence (max over layers)": None if sites is None else max(sites.later_per_seq),
        "super neuron, layer": (n.get("super_neuron") or {}).get("layer"),
        "first-token value onset (layer)": (n.get("first_token_value_onset") or [None])[0],
        "sink onset (layer)": n.get("sink_onset"),
        "Xiao: window only / own first 4": xiao["window only"] / xiao["own first 4"] if xiao else None,
        "Xiao: 4 newlines / own first 4": xiao["4 newlines"] / xiao["own first 4"] if xiao else None,
        "mid-sequence keys with m_j > eps": len(mid["found"]) if mid["strongest"] else None,
        "strongest other key, m_j": mid["strongest"]["mass"] if mid["strongest"] else None,
    }
    return out
