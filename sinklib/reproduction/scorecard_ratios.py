"""The table behind the scorecard's like-for-like ratios (:func:`sinklib.reproduction.scorecard.like_for_like`):
for each claim whose paper and run each give two numbers of the same kind, which two (:data:`RATIO_SPECS`), as
paths into a claim record's ``published`` and ``measured`` values (:class:`Term`, :class:`At`, :data:`MEAN`), and
the number a path leads to (:func:`lookup`)."""

from __future__ import annotations

import math
from dataclasses import dataclass


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


def lookup(value, path: tuple) -> float | None:
    """The number at ``path`` in a record's value (:class:`Term`), None where the path leads nowhere."""
    parent = None
    for i, step in enumerate(path):
        if step == MEAN:
            if not isinstance(value, list) or not value:
                return None
            each = [lookup(v, path[i + 1:]) for v in value]
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
