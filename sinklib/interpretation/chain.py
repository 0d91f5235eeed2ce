"""The first four links of the structural-origin chain (arXiv 2605.06611), each measured and judged in one call.

``02_interpretation`` draws each link on one model; ``10_llm`` runs the same calls on every family to see which links
hold where. Each function returns a small record with what the figure needs and the link's
:class:`~sinklib.core.claims.Claim` (rules in :mod:`sinklib.interpretation.origin_claims`).

Link 1 on a pretrained model is judged on every draw's random-token sequences pooled, with a 95 % bootstrap interval
over sequences (:func:`variance_pooled_over_draws` in ``02``, :func:`variance_pooled` in ``10``;
:mod:`sinklib.core.pooled`): a fixed model has no training noise, only the drawn sequences differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sinklib.core import metrics, pooled
from sinklib.core.capture import Capture
from sinklib.core.claims import Claim
from sinklib.core.data import make_inputs
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation import massive_activations, massive_claims, origin, origin_claims
from sinklib.interpretation.intervention_effects import ScoreStats
from sinklib.interpretation.sun_sites import SunSites, SunSiteStats

VARIANCE_LAYERS = 3  # link 1 reads the first layers' head outputs


@dataclass
class VarianceLink:
    layers: list[int]
    variance: dict[str, torch.Tensor]  # origin.variance_by_position: before_wo / after_wo, (len(layers), T)
    ratio_t0: list[float]  # Var at t = 0 over the mean of the second half, per layer
    t0_is_max: list[bool]
    claim: Claim


def variance_link(lm: LoadedModel, random_ids: torch.Tensor, n_layers: int = VARIANCE_LAYERS) -> VarianceLink:
    """Link 1: the first position's head output varies most across inputs (first layers, random tokens)."""
    layers = list(range(min(n_layers, lm.n_layers)))
    var = origin.variance_by_position(lm, random_ids, layers)
    before = var["before_wo"]  # (len(layers), T)
    ratio = (before[:, 0] / before[:, before.shape[1] // 2:].mean(dim=1)).tolist()
    is_max = (before[:, 0] >= before[:, 1:].max(dim=1).values).tolist()
    return VarianceLink(layers, var, ratio, is_max, origin_claims.variance_discrepancy(ratio, is_max))


@dataclass
class SuperNeuronLink:
    found: list[origin.SuperNeuron]  # every neuron that meets the criterion, strongest first
    writers: list[origin.SuperNeuron]  # those writing a massive dimension (all found, if none does)
    top: origin.SuperNeuron | None  # the earliest writer: where the chain starts
    claim: Claim


def super_neuron_link(lm: LoadedModel, natural: torch.Tensor, massive_dims: list[int], paper: dict,
                      batch_size: int = 16, found: list[origin.SuperNeuron] | None = None,
                      massive_onset: int | None = None) -> SuperNeuronLink:
    """Link 2: an early MLP neuron fires on the first token only and writes the massive dimension. ``found``:
    :func:`~sinklib.interpretation.origin.find_super_neurons` on ``natural`` when already measured (:func:`natural_pass`).
    ``massive_onset``: the first token's value onset (:func:`first_token_value_onset`), which the neuron's layer
    must not come after; None: the order is not judged."""
    if found is None:
        found = origin.find_super_neurons(lm, natural, batch_size=batch_size)
    writers = [s for s in found if set(s.write_dims) & set(massive_dims)] or found
    top = earliest_writer(writers)
    return SuperNeuronLink(found, writers, top, origin_claims.super_neuron(top, massive_dims, paper, massive_onset))


def earliest_writer(writers: list[origin.SuperNeuron],
                    min_share: float = origin_claims.SUPER_WRITE_SHARE) -> origin.SuperNeuron | None:
    """Where the chain starts: the earliest neuron (then the most active) among the massive dimensions' writers that
    puts > ``min_share`` of its W_down column's squared norm there -- a weak earlier writer (SmolLM2's layer-0 neuron
    585: 20% into dimension 247) does not hide the super neuron after it (layer 1, neuron 83: 73% into 507). When
    none writes that much, the earliest writer, whose claim then fails on its share."""
    strong = [s for s in writers if s.write_share > min_share]
    pool = strong or writers
    return min(pool, key=lambda s: (s.layer, -s.first_abs)) if pool else None


def first_token_value_onset(measured: tuple[dict[str, torch.Tensor], torch.Tensor]) -> int | None:
    """The first token's value onset: the first layer l whose output h^l holds (or doubles) a value |v| > 100 of the
    first token on a massive dimension, from :func:`~sinklib.interpretation.origin.disparity_and_first_values`'
    result; None when there is none. Not Sun et al.'s criterion (no 1000x-median cut): on SmolLM2 this is layer 1
    (169 on dim 507, under 1000x its layer median), Sun's criterion first holds at layer 11
    (:attr:`~sinklib.interpretation.sun_sites.SunSites.onset`)."""
    onset = massive_activations.onset_layers(measured[1])
    return onset[0] if onset else None


@dataclass
class DisparityLink:
    by_layer: dict[str, torch.Tensor]  # origin.disparity_by_layer
    first_values: torch.Tensor  # (L, len(massive_dims)): the first token's values on the massive dims
    onset: list[int]  # the first token's value onsets: layers where |v| > 100 on a massive dim appears or doubles
    sun_onset: int | None  # the first layer whose output meets Sun et al.'s criterion anywhere (None: none/unmeasured)
    super_layer: int  # the super neuron's layer (1 when none was found, the paper's)
    dom_after_super: float  # DomRatio of RMSNorm_(s+1)(h^s) * g at the first token
    claim: Claim


def dom_read_at(chain: dict[str, torch.Tensor], layer: int | None) -> float:
    """The first token's DomRatio over the other tokens' in the state block ``layer``'s attention reads: its input
    h^(layer-1) after ``layer``'s RMSNorm, ``dom_normed_first[layer - 1] / dom_normed_rest[layer - 1]``
    (:func:`~sinklib.interpretation.origin.disparity_by_layer` aligns the normalised input of block l+1 with h^l).
    Where the paper reads it: the normalised state the sink layer's attention sees, not the sink layer's output.
    NaN at layer 0 (its input is the embeddings, not measured) and when there is no sink layer."""
    if layer is None or layer < 1:
        return float("nan")
    return float(chain["dom_normed_first"][layer - 1] / chain["dom_normed_rest"][layer - 1])


def disparity_link(lm: LoadedModel, natural: torch.Tensor, massive_dims: list[int], top: origin.SuperNeuron | None,
                   sink_onset: int | None, paper: dict, batch_size: int = 16,
                   measured: tuple[dict[str, torch.Tensor], torch.Tensor] | None = None,
                   sun_sites: SunSites | None = None) -> DisparityLink:
    """Link 3: the first token's DomRatio jumps with its value onset, and the sink follows. ``measured``:
    :func:`~sinklib.interpretation.origin.disparity_and_first_values` on ``natural`` with ``massive_dims`` when
    already measured (:func:`natural_pass`). ``sun_sites``: where Sun et al.'s criterion holds on the same windows
    (:class:`~sinklib.interpretation.sun_sites.SunSites`): its first layer is recorded beside the value onset."""
    if measured is None:
        measured = origin.disparity_and_first_values(lm, natural, massive_dims, batch_size=batch_size)
    chain, first_vals = measured
    onset = massive_activations.onset_layers(first_vals)
    s_layer = top.layer if top is not None else 1
    dom_after = float(chain["dom_normed_first"][s_layer])
    at_sink = dom_read_at(chain, sink_onset)
    claim = origin_claims.disparity_then_sink(onset, sink_onset, at_sink, dom_after, paper, width=lm.hidden_size,
                                              sun_onset=None if sun_sites is None else sun_sites.onset,
                                              sun_measured=sun_sites is not None)
    return DisparityLink(chain, first_vals, onset, None if sun_sites is None else sun_sites.onset, s_layer, dom_after,
                         claim)


@dataclass
class LockLink:
    per_head: dict[str, torch.Tensor]  # origin.lock_in: key_query_cos, positive_fraction, alpha_first (L, H)
    sink_vs_other: dict[str, tuple[float | None, float | None]]  # None: a group with no head
    n_sink_heads: int
    claim: Claim


def lock_link(lm: LoadedModel, natural: torch.Tensor, max_seqs: int = 16,
              lock: dict[str, torch.Tensor] | None = None) -> LockLink:
    """Link 4: in sink heads every query scores the first token's key positively. ``lock``:
    :func:`~sinklib.interpretation.origin.lock_in` on the first ``max_seqs`` windows when already measured
    (:func:`natural_pass`)."""
    if lock is None:
        lock = origin.lock_in(lm, natural[: min(max_seqs, len(natural))])
    stats = massive_activations.sink_vs_other({k: lock[k] for k in ("key_query_cos", "positive_fraction")},
                                              lock["alpha_first"])
    n = int((lock["alpha_first"] > 0.3).sum())
    sep = massive_activations.separation_interval(lock["key_query_cos"], lock["alpha_first"])
    return LockLink(lock, stats, n, origin_claims.lock_in(stats["positive_fraction"], stats["key_query_cos"], n, sep))


# ----------------------------------------------------------------------------------------------- link 1, pooled
def random_tokens(lm: LoadedModel, num_seqs: int, seq_len: int, seed: int) -> torch.Tensor:
    """One draw's random-token sequences (N, T) for link 1: no BOS, so position 0 varies across inputs too."""
    return make_inputs(lm, "random", num_seqs, seq_len, seed, bos=False)


def head_outputs(lm: LoadedModel, ids: torch.Tensor, layers: list[int], batch_size: int = 16
                 ) -> dict[int, torch.Tensor]:
    """Each of ``layers``' head outputs before W_O, heads' channels pooled: layer -> (N, T, C) float32, C = H x hd
    (what :func:`~sinklib.interpretation.origin.variance_by_position` reads as ``before_wo``); the forward stops
    after the last of ``layers``."""
    flat = {"head_outputs": lambda o, i: o.flatten(-2).float()}  # (B, T, H, hd) -> (B, T, C)
    with Capture(lm, head_outputs=True, layers=layers, reduce=flat) as cap:
        for batch in origin.batches(ids, batch_size):
            origin.forward(lm, batch, last_layer=max(layers))
    return {layer: cap.get("head_outputs", layer) for layer in layers}


def variance_claim(outputs: dict[int, torch.Tensor]) -> Claim:
    """Link 1's rule (:func:`~sinklib.interpretation.origin_claims.variance_discrepancy`) on head outputs by layer
    (layer -> (N, T, C)): per layer v = :func:`~sinklib.core.metrics.position_variance` (T,), the ratio
    v_0 / mean_{t >= T/2} v_t and whether v_0 >= max_{t >= 1} v_t -- what :func:`variance_link` reads."""
    v = torch.stack([metrics.position_variance(outputs[layer]) for layer in sorted(outputs)])  # (len(layers), T)
    half = v.shape[1] // 2
    return origin_claims.variance_discrepancy((v[:, 0] / v[:, half:].mean(1)).tolist(),
                                              (v[:, 0] >= v[:, 1:].max(1).values).tolist())


def position_variances(x: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Per-position variance over weighted sequences, averaged over channels, for each row of ``weights``:
    v[b, t] = (1/C) sum_c [ sum_n w[b, n] x[n, t, c]^2 / N - (sum_n w[b, n] x[n, t, c] / N)^2 ], with
    sum_n w[b, n] = N (a resample's counts; all ones = :func:`sinklib.core.metrics.position_variance`). The second
    term is w G_t w / N^2 with the Gram matrix G_t = X_t X_t^T, so no resample is ever materialised.
    x: (N, T, C); weights: (B, N) -> (B, T), float64."""
    n, _, c = x.shape
    centred = (x.double() - x.double().mean(0)).float()  # the variance does not move; the sums stay small
    squares = centred.double().pow(2).sum(-1)  # (N, T)
    gram = torch.stack([(xt @ xt.T).double() for xt in centred.transpose(0, 1)])  # (T, N, N)
    w = weights.double()
    cross = torch.einsum("bn,tnm,bm->bt", w, gram, w)  # (B, T)
    return (w @ squares / n - cross / n ** 2) / c


def variance_conditions(x: torch.Tensor, seed: int = 0) -> list[pooled.Condition]:
    """Link 1's two conditions on layer 0's pooled head outputs x (N, T, C), each with its bootstrap interval over
    sequences (the same resamples): "ratio" = v_0 / mean_{t >= T/2} v_t against
    :data:`~sinklib.interpretation.origin_claims.VARIANCE_RATIO`, "largest" = v_0 / max_{t >= 1} v_t against 1
    (t = 0 the largest), v = :func:`position_variances`."""
    n, t = x.shape[:2]
    v = position_variances(x, torch.cat([torch.ones(1, n, dtype=torch.float64),
                                         pooled.counts(pooled.resamples(n, seed))]))  # (1 + B, T)
    ratio = v[:, 0] / v[:, t // 2:].mean(-1)
    largest = v[:, 0] / v[:, 1:].max(-1).values
    return [pooled.Condition("ratio", origin_claims.VARIANCE_RATIO, pooled.interval_of(float(ratio[0]), ratio[1:]),
                             label="layer 0: Var at t = 0 / mean Var of the second half"),
            pooled.Condition("largest", 1.0, pooled.interval_of(float(largest[0]), largest[1:]),
                             label="layer 0: Var at t = 0 / the largest Var at t >= 1")]


def ratio_t0(claim: Claim) -> float | None:
    """A link-1 claim's layer-0 ratio Var(t = 0) / mean Var(second half) (None when it has none)."""
    try:
        return float(claim.measured["ratio_t0_to_second_half"][0])
    except (KeyError, IndexError, TypeError):
        return None


def variance_judged(outputs: dict[int, torch.Tensor], per_draw: Sequence[Claim], draws_of: str,
                    seed: int = 0) -> Claim:
    """Link 1 on every draw's random-token sequences pooled, from their head outputs (layer -> (N, T, C), N = all
    draws' sequences): the rule of :func:`variance_claim` on the pooled per-position variances, settled by the
    bootstrap intervals over sequences of its two numbers in the first layer (:func:`variance_conditions`): holds /
    fails when both intervals are clear of their cuts, unsettled only when one straddles its cut and decides the
    answer (:func:`~sinklib.core.pooled.pooled_claim`). ``per_draw``: each draw's own claim (its verdict in
    ``draws``, its layer-0 ratio in the spread)."""
    first = outputs[min(outputs)]  # (N, T, C)
    return pooled.pooled_claim(variance_claim(outputs), variance_conditions(first, seed),
                               lambda c: c["ratio"] and c["largest"], per_draw, [ratio_t0(c) for c in per_draw],
                               draws_of, f"{len(first)} random-token sequences", main="ratio", unit="sequences")


def variance_layers(lm: LoadedModel) -> list[int]:
    """The layers link 1 reads: the first :data:`VARIANCE_LAYERS`."""
    return list(range(min(VARIANCE_LAYERS, lm.n_layers)))


def variance_pooled(lm: LoadedModel, random_ids: torch.Tensor, per_draw: Sequence[Claim], draws_of: str,
                    seed: int = 0, batch_size: int = 16) -> Claim:
    """:func:`variance_judged` on ``random_ids`` (N, T), every draw's random-token sequences, whose own claims
    ``per_draw`` are already measured (``10_llm``'s chain draws): one more forward of the pooled sequences through
    the first :data:`VARIANCE_LAYERS` blocks (cheap: no later block runs)."""
    return variance_judged(head_outputs(lm, random_ids, variance_layers(lm), batch_size), per_draw, draws_of, seed)


def variance_pooled_over_draws(lm: LoadedModel, first: VarianceLink, num_seqs: int, seq_len: int, seed: int,
                               n_draws: int = 3, batch_size: int = 16) -> Claim:
    """Link 1 on a pretrained model (``02_interpretation``): ``n_draws`` draws of ``num_seqs`` random-token sequences
    (seeds seed, seed+1, ...; ``first`` is the run's own, already measured by :func:`variance_link`) judged on all
    their sequences pooled (:func:`variance_judged`): a fixed model has no training noise, only the drawn sequences
    differ. One forward of the pooled sequences (n_draws x N, T) through the first :data:`VARIANCE_LAYERS` blocks;
    draw i's own claim is the rule on its slice of them (:func:`variance_claim`), the first draw's is ``first``'s."""
    ids = torch.cat([random_tokens(lm, num_seqs, seq_len, seed + i) for i in range(n_draws)])  # (n_draws N, T)
    outputs = head_outputs(lm, ids, variance_layers(lm), batch_size)  # layer -> (n_draws N, T, C)
    per_draw = [first.claim] + [variance_claim({layer: o[i * num_seqs:(i + 1) * num_seqs]
                                                for layer, o in outputs.items()}) for i in range(1, n_draws)]
    return variance_judged(outputs, per_draw,
                           f"{n_draws} seeds of random tokens (seeds {seed}-{seed + n_draws - 1})", seed)


# ----------------------------------------------------------------------------------------------- one pass for all links
HEAD_SEQS = 16  # windows for the per-head statistics (lock-in, the sink as a bias): their captures are (L, N, H, T, .)


@dataclass
class NaturalPass:
    """What the unedited model's forwards over the natural windows give every section that reads them, measured in
    one pass (:func:`natural_pass`) instead of one per section; each field is what the named function returns."""

    super_neurons: list[origin.SuperNeuron]  # origin.find_super_neurons
    disparity: tuple[dict[str, torch.Tensor], torch.Tensor]  # origin.disparity_and_first_values with the massive dims
    lock: dict[str, torch.Tensor]  # origin.lock_in on the first HEAD_SEQS windows
    before_k: tuple[torch.Tensor, dict[str, torch.Tensor]]  # alpha_k (t > k) per window and token k's state
    massive_means: massive_activations.MassiveMeansByLayer  # massive_activations.massive_means, every layer
    sink_as_bias: dict[str, torch.Tensor]  # massive_activations.sink_as_bias on the first HEAD_SEQS windows
    sun_sites: SunSites  # sun_sites.sun_sites: where Sun et al.'s criterion holds, layer by layer


def natural_pass(lm: LoadedModel, natural: torch.Tensor, massive_dims: list[int], k: int, min_ratio: float,
                 batch_size: int = 16, head_seqs: int = HEAD_SEQS) -> NaturalPass:
    """One forward per batch of the unedited model over ``natural`` for links 2-4, intervention (i)'s "before" (token
    ``k``) and the massive-activation means of section 7 -- the same numbers as the separate calls, which each ran
    their own forwards over the same windows (batches of ``batch_size``; the per-head statistics read the first
    ``head_seqs`` windows, as ``lock_link`` and ``sink_as_bias(natural[:16])`` do)."""
    stats = [origin.SuperNeuronStats(lm), origin.DisparityStats(massive_dims), origin.LockInStats(lm, head_seqs),
             ScoreStats(k, later_only=True, state_of=k), massive_activations.MassiveMeanStats(massive_dims, min_ratio),
             massive_activations.SinkAsBiasStats(lm, head_seqs), SunSiteStats()]
    return NaturalPass(*origin.measure(lm, natural, stats, batch_size))


# ----------------------------------------------------------------------------------------------- Sun's bias test
def bias_claim(bias: massive_activations.BiasTest, paper: dict, windows: int, layers: list[int]) -> Claim:
    """Sun et al.'s zero-vs-mean verdict of one :class:`~sinklib.interpretation.massive_activations.BiasTest` whose
    site means came from ``windows`` calibration windows in ``layers`` (the rows of ``bias.means``): on a model whose
    position 0 is the same BOS in every window, the mean edit is judged on the later sites only; where an edited
    layer holds more than "a few" sites at t >= 1 per window, the test is not of massive activations
    (:func:`~sinklib.interpretation.massive_claims.massive_bias`).

    densest = max_l sum_d other_count[l, d] / windows  (later entries per window in the densest edited layer)"""
    fixed = bias.means is not None and bias.means.first_is_fixed
    later = None if bias.means is None else int(bias.means.other_count.sum())
    densest = None
    if bias.means is not None and bias.means.other_count.numel():
        per_layer = bias.means.other_count.sum(-1) / max(windows, 1)  # (len(layers),)
        i = int(per_layer.argmax())
        densest = (int(layers[i]), float(per_layer[i]))
    return massive_claims.massive_bias(bias.ppl, paper, first_fixed=fixed, later_sites=later, densest_later=densest)


def bias_over_draws(lm: LoadedModel, first: Claim, layers: list[int], dims: list[int], min_ratio: float,
                    calibration_shape: tuple[int, int], heldout_shape: tuple[int, int], paper: dict, seed: int,
                    batch_size: int = 16, n_draws: int = 3) -> Claim:
    """Sun et al.'s bias test judged over ``n_draws`` draws (``first`` is the run's own, already measured): for seeds
    seed+1, ... new calibration windows (``calibration_shape`` = (N, T), the site means) and new held-out windows
    (``heldout_shape``, the perplexities), the same layers, dimensions and criterion; holds only if every draw holds
    (:func:`sinklib.core.claims.over_draws`). The spread is that of ppl(mean) / ppl(original)."""
    from sinklib.core.claims import over_draws
    from sinklib.core.data import make_inputs, text_windows

    others = []
    for s in range(seed + 1, seed + n_draws):
        calibration = make_inputs(lm, "natural", *calibration_shape, s)
        heldout = text_windows(lm.tokenizer, *heldout_shape, s, split="heldout")
        others.append(bias_claim(massive_activations.bias_test(lm, calibration, heldout, layers, dims, min_ratio,
                                                               batch_size, first_only=False), paper,
                                 calibration_shape[0], layers))
    judged = over_draws([first, *others],
                        f"{n_draws} draws of {calibration_shape[0]} calibration and {heldout_shape[0]} held-out "
                        f"windows (seeds {seed}-{seed + n_draws - 1})",
                        key=lambda c: c.measured["set to mean"] / c.measured["original"])
    return massive_claims.with_zero_ratios(judged, [first, *others])

