"""00_tour's research code beyond :mod:`sinklib.core.analysis`: Gu et al.'s input-shape claim judged over draws with
its random-weight control (:func:`judge_input_shape`), and which dimension holds each layer's largest activation
(:func:`dims_by_layer`, read by the massive-activation figure's caption and its takeaway)."""

from __future__ import annotations

import gc
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sinklib.core import analysis, gu_claims
from sinklib.core.claims import Claim
from sinklib.core.data import INPUT_KINDS, make_inputs
from sinklib.core.loaded import LoadedModel
from sinklib.models.random_init import random_weights


@dataclass(frozen=True)
class InputShape:
    """Gu et al.'s Llama-family shape judged on a pretrained model: ``claim`` on every random-token draw pooled
    (:func:`sinklib.core.gu_claims.llama_family_shape_pooled`), ``control`` the same rule on random weights."""

    claim: Claim
    control: Claim
    random_draws: list[float]  # each seed's random-token sink rate, the run's own first
    control_rates: dict[str, float]  # {input kind: sink rate} on random weights
    seconds: float  # what the extra draws and the control took


def judge_input_shape(lm: LoadedModel, profiles: Mapping[str, analysis.SinkProfile], reference: dict, seed: int,
                      seq_len: int, extra_seqs: int, batch_size: int, n_draws: int = 3) -> InputShape:
    """The input-shape claim with its draws and control, in one call. ``profiles``: {input kind: the run's own
    :func:`~sinklib.core.analysis.profile_sinks`} (N sequences of ``seq_len`` tokens each); ``reference``: the
    ``gu2024_sink_rates`` file.

    Draws: the run's random-token batch (seed ``seed``) and ``n_draws - 1`` more of ``extra_seqs`` sequences (seeds
    ``seed + 1``, ...); the random-token rate is the mean over all their sequences of each sequence's share of heads
    with alpha_0 > eps, with a 95% bootstrap interval over sequences (a pretrained model has no training noise, only
    the drawn sequences differ). Control: every input kind on ``extra_seqs`` sequences through ``lm``'s architecture
    with fresh weights (:func:`~sinklib.models.random_init.random_weights`, seed ``seed``), where the rule must fail."""
    started = time.perf_counter()
    own = profiles["random"]
    n_seqs = own.alphas.shape[0]
    random = [own] + [analysis.profile_sinks(lm, make_inputs(lm, "random", extra_seqs, seq_len, s),
                                             input_name="random", batch_size=batch_size)
                      for s in range(seed + 1, seed + n_draws)]
    sizes = ", ".join(str(n) for n in [n_seqs] + [extra_seqs] * (n_draws - 1))
    measured = {kind: p.sink_rate for kind, p in profiles.items()}
    claim = gu_claims.llama_family_shape_pooled(measured, [p.sink_rate_by_sequence for p in random], reference, seed,
                                               f"{n_draws} seeds of random tokens ({sizes} sequences)")
    control_lm = random_weights(lm, seed)
    control_rates = {kind: analysis.profile_sinks(control_lm, make_inputs(control_lm, kind, extra_seqs, seq_len, seed),
                                                  input_name=kind, batch_size=batch_size).sink_rate
                     for kind in INPUT_KINDS}
    del control_lm
    gc.collect()
    return InputShape(claim, gu_claims.llama_family_shape(control_rates, reference), [p.sink_rate for p in random],
                      control_rates, time.perf_counter() - started)


def dims_by_layer(dims: Sequence[int]) -> list[tuple[int, list[int]]]:
    """[(dimension, the layers whose largest entry it holds)] from ``dims`` (per layer: the dimension of its largest
    entry), the dimension holding most layers first: [247, 507, 507] -> [(507, [1, 2]), (247, [0])]."""
    groups: dict[int, list[int]] = {}
    for layer, d in enumerate(dims):
        groups.setdefault(int(d), []).append(layer)
    return sorted(groups.items(), key=lambda g: (-len(g[1]), g[1][0]))
