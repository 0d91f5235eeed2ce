"""Gu et al.'s (arXiv 2410.10781, Table 1) Llama-family input shape as a claim: sinks on natural text and on random
tokens, none on one token repeated -- judged once (:func:`llama_family_shape`) or, on a pretrained model, with the
random-token rate pooled over every seed's sequences (:func:`llama_family_shape_pooled`). The cuts are
:data:`sinklib.core.analysis.SHAPE_CUTS`; the rates come from :func:`sinklib.core.analysis.profile_sinks`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import torch

from sinklib.core import pooled
from sinklib.core import quantities as q
from sinklib.core.analysis import SHAPE_CUTS
from sinklib.core.claims import Claim

# Gu et al.'s sink rate by input kind (the share of heads with alpha_0 > eps); over draws, the random-token rate's
# spread (:func:`llama_family_shape_pooled`: each seed's rate and the pooled rate's interval)
GU_SHAPE_QUANTITIES = {kind: q.share("fraction of heads") for kind in ("natural", "random", "repeated", "@spread")}


def llama_family_shape(measured: dict[str, float], reference: dict, eps: float = 0.3,
                       absolute: bool = False) -> Claim:
    """Gu et al. (arXiv 2410.10781, Table 1): Llama-family models sink on natural text and on random tokens, but not
    on one token repeated at every position. Rule: sink rate > 0.3 on natural and random input and < 0.05 on the
    repeated token. ``measured``: {"natural", "random", "repeated"} -> sink rate; ``reference``: the
    ``gu2024_sink_rates`` file.

    The paper states this shape for the Llama/Mistral families, whose positions are rotary only; a model with
    learned absolute position embeddings (``absolute``, :func:`~sinklib.core.analysis.absolute_positions`; Gu et al.'s GPT2-XL keeps
    62.28% on a repeated token) is outside it: its rates are recorded beside GPT2-XL's and the verdict is "cannot
    be judged here". Rotary decoders of other families (Qwen2, Gemma-3) are judged by it, as said in ``adapted``."""
    if absolute:
        gpt2 = reference["models"].get("GPT2-XL", {})
        return Claim(
            id="gu2024.llama_family_input_shape",
            statement="Llama-family models sink on natural text and random tokens, not on one token repeated",
            source=reference["source"], rule="not applied: the model has learned absolute position embeddings",
            published={"GPT2-XL": gpt2}, measured=dict(measured), quantities=GU_SHAPE_QUANTITIES, holds=None,
            note=f"outside the Llama/Mistral families the paper states this for (learned absolute positions); "
                 f"its own repeated-token rate {measured['repeated']:.1%} against GPT2-XL's "
                 f"{gpt2.get('repeated', float('nan')):.2%}",
            follows="Table 1, Sec. 3 (GPT2-XL: 62.28% on a repeated token; LLaMA2/3, Mistral: 0%)",
            adapted="judged only for models with rotary positions and no absolute position embedding",
            at_init=False)
    holds = (measured["natural"] > SHAPE_CUTS["natural"] and measured["random"] > SHAPE_CUTS["random"]
             and measured["repeated"] < SHAPE_CUTS["repeated"])
    return Claim(
        id="gu2024.llama_family_input_shape",
        statement="Llama-family models sink on natural text and random tokens, not on one token repeated",
        source=reference["source"],
        rule=f"sink rate (eps {eps}) > 30% on natural and random input and < 5% on a repeated token",
        published={m: reference["models"][m] for m in reference["llama_family"]},
        measured=dict(measured), quantities=GU_SHAPE_QUANTITIES, holds=bool(holds),
        follows="Table 1, Sec. 3 (alpha_k = sum_{t>=k} A[t, k] / (T - k + 1) for the first token k = 1; Sink^eps = "
                "share of heads with alpha_1 > eps; eps 0.3, T 64); sail-sg/Attention-Sink:eval_sink_open_source.py:compute_attention_sink",
        adapted="the paper reports rates per model; the cut-offs (> 30% on natural and random input, < 5% on a "
                "repeated token) are this project's reading of the Llama-family rows of Table 1; applied to every "
                "decoder with rotary positions and no absolute position embedding (Qwen2, Gemma-3 too), not to "
                "GPT-2-style models",
        at_init=False)  # Gu et al., Sec. 4: the sink emerges during pre-training once the model is optimised


# the pooled shape's spread: each seed's random-token rate and the pooled rate's interval (fractions of heads)
SHAPE_POOLED_QUANTITIES = {"@spread": q.share("fraction of heads")}


def shape_conditions(measured: Mapping[str, float], random: torch.Tensor, seed: int = 0) -> list[pooled.Condition]:
    """Gu et al.'s shape as three conditions: natural > 0.3 and repeated < 0.05 as measured once (no draws: read
    without an interval), random = mean_n r[n] over the pooled random-token sequences > 0.3 with its bootstrap
    interval over sequences. random: (N,) per-sequence sink rates (:attr:`~sinklib.core.analysis.SinkProfile.sink_rate_by_sequence`)."""
    natural, repeated = measured["natural"], measured["repeated"]
    return [pooled.Condition("natural", fixed=natural > SHAPE_CUTS["natural"],
                             label=f"natural-text rate {natural:.3g} > {SHAPE_CUTS['natural']:g}"),
            pooled.Condition("repeated", fixed=repeated < SHAPE_CUTS["repeated"],
                             label=f"repeated-token rate {repeated:.3g} < {SHAPE_CUTS['repeated']:g}"),
            pooled.Condition("random", SHAPE_CUTS["random"], pooled.mean_interval(random, seed),
                             label="random-token sink rate")]


def shape_rule(answers: Mapping[str, bool]) -> bool:
    """The shape's rule on its conditions' answers (:func:`shape_conditions`): all three hold."""
    return answers["natural"] and answers["random"] and answers["repeated"]


def llama_family_shape_pooled(measured: Mapping[str, float], random: Sequence[torch.Tensor], reference: dict,
                              seed: int, draws_of: str, per_draw: Sequence[Claim] | None = None,
                              eps: float = 0.3) -> Claim:
    """Gu et al.'s Llama-family shape (:func:`llama_family_shape`) on a pretrained model, the random-token rate
    judged on every seed's sequences pooled: a fixed model has no training noise, only the drawn sequences differ.
    rate = mean_n r[n] over the pooled N = sum_s N_s sequences (r[n]: the share of sequence n's heads with alpha_0 >
    eps); its 95 % bootstrap interval over sequences decides the random condition -- holds / fails when it is clear
    of 0.3, unsettled only when it straddles 0.3 and the other two hold (:func:`~sinklib.core.pooled.pooled_claim`).

    ``measured``: {"natural", "repeated"} -> sink rate, measured once (a "random" entry is replaced by the pooled
    rate); ``random``: per seed s its sequences' rates r, (N_s,) each; ``reference``: the ``gu2024_sink_rates`` file;
    ``seed``: the bootstrap's; ``draws_of``: what was redrawn, in words; ``per_draw``: each seed's own claim
    (default: :func:`llama_family_shape` on each seed's mean rate) -- its verdict in ``draws``, its rate in the
    spread."""
    pooled_rates = torch.cat([torch.as_tensor(r, dtype=torch.float64).flatten() for r in random])  # (N,)
    conditions = shape_conditions(measured, pooled_rates, seed)
    claim = llama_family_shape({**measured, "random": conditions[-1].interval.value}, reference, eps)
    if per_draw is None:
        per_draw = [llama_family_shape({**measured, "random": float(torch.as_tensor(r, dtype=torch.float64).mean())},
                                       reference, eps) for r in random]
    claim = replace(claim, quantities={**claim.quantities, **SHAPE_POOLED_QUANTITIES})
    return pooled.pooled_claim(claim, conditions, shape_rule, per_draw, [c.measured["random"] for c in per_draw],
                               draws_of, f"{len(pooled_rates)} random-token sequences", main="random", unit="sequences")
