"""``10_llm``'s structural-origin chain on one model: links 1-4 (:mod:`sinklib.interpretation.chain`) and Sun et al.'s
zero-vs-mean test, each measured on equal-sized draws of windows.

One draw (:func:`chain_draw`) reads links 2-4 and the massive sites' means from one forward per batch of its windows
(:func:`sinklib.interpretation.origin.measure`), then runs the variance link on random tokens and the perplexities.

A pretrained model has no training noise, so where a link's number is a statistic of windows (or of random-token
sequences) it is judged on every draw's windows pooled, with a 95 % bootstrap interval over them
(:mod:`sinklib.core.pooled`): link 1 (:func:`sinklib.interpretation.chain.variance_pooled`, the per-position
variance over all draws' random-token sequences) and link 3 (:func:`disparity_pooled`, the DomRatio over all draws'
windows, with the onsets of the pooled means). The other links are judged over the draws
(:func:`sinklib.core.claims.over_draws`), with the reason in :data:`NOT_POOLED`.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from sinklib.core import pooled
from sinklib.core.claims import Claim, over_draws
from sinklib.core.data import text_windows
from sinklib.core.errors import WrongFamilyError
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation import chain, massive_activations, massive_claims, origin, origin_claims
from sinklib.interpretation.sun_sites import SunSites
from sinklib.interpretation.sun_sites import sun_sites as sun_sites_of

CHAIN_DRAWS = 3  # the run's windows and two more draws of the same size (seeds seed+1, seed+2)
LINKS = ("origin.variance_discrepancy", "origin.super_neuron", "origin.dimension_disparity", "origin.lock_in",
         "sun2024.massive_activations_are_bias")  # the claims origin_chain records for each model
# the links judged on every draw's windows pooled: the condition their interval is of, and the rule's cut
POOLED_CUTS = {"origin.variance_discrepancy": ("ratio", origin_claims.VARIANCE_RATIO),
               "origin.dimension_disparity": ("disparity", origin_claims.DISPARITY_AT_SINK)}
RARE_SITES = massive_claims.RARE_SITES  # Sun et al.'s "a few": later positions per window (massive_by_sun)
# why a link is judged over the draws rather than on the pooled windows (its note says so)
NOT_POOLED = {
    "origin.super_neuron": (
        "judged over the draws, not on pooled windows: the rule reads an identity -- the earliest strong writer among "
        "the neurons found on a draw's windows -- and its layer against the value-onset layer, and the selectivity "
        "divides a mean over windows by a 95th percentile pooled over every later position, not a mean over windows; "
        "pooling would hold every draw's MLP activations at once"),
    "origin.lock_in": (
        "judged over the draws, not on pooled windows: its numbers are per head (the sink heads by alpha_0, the "
        "|cos| AUC over heads with its own bootstrap interval over heads), each from the top singular direction of "
        "all of a draw's queries at once, not a mean over windows; pooling would hold every draw's captured queries"),
    "sun2024.massive_activations_are_bias": (
        "judged over the draws, not on pooled windows: each draw's mean edit uses the site means of its own "
        "calibration windows, so the draws' held-out perplexities are of different edits, and each perplexity is one "
        "number over its held-out windows"),
}


def massive_sites(lm: LoadedModel, means, tokenizer) -> dict:
    """Where the massive activations sit and whether their values stay fixed across inputs, from a
    :class:`~sinklib.interpretation.massive_activations.MassiveMeans`: the first token's relative spread sd / |mean|
    per (layer, dim) (Sun et al.: nearly constant), how many later sites met the criterion and which tokens held them
    (Sun et al.: the first "." or newline)."""
    if means is None:
        return {"first_token_relative_sd": None, "later_sites": 0, "later_tokens": {}}
    rel = (means.first_sd / means.first.abs().clamp_min(1e-12))
    top = sorted(means.other_tokens.items(), key=lambda kv: -kv[1])[:5]
    return {"first_token_relative_sd": float(rel.max()), "later_sites": int(means.other_count.sum()),
            "later_tokens": {tokenizer.decode([t]): n for t, n in top}}


def chain_draw(lm: LoadedModel, natural: torch.Tensor, massive_dims: list[int], sink_onset: int | None, paper: dict,
               seed: int, batch_size: int, min_ratio: float = 1000.0, sun_sites: SunSites | None = None,
               first_only: bool = True) -> tuple[list[Claim], dict, dict]:
    """Links 1-4 and the bias test on one draw: ``natural`` (N, T) windows and N random-token sequences of ``seed``
    (no BOS: position 0 must vary too); the bias test's held-out windows are N more of the same size
    (``first_only``: also the position-0-only edit, which the numbers show and the rule does not read). Returns
    (claims, numbers, windows): windows = link 3's per-window values (:class:`WindowDisparityStats`) and the super
    neuron's layer ("super_layer"), for :func:`disparity_pooled`."""
    num_seqs, seq_len = natural.shape
    variance = chain.variance_link(lm, chain.random_tokens(lm, num_seqs, seq_len, seed))
    found, (*measured, windows), lock, means = origin.measure(
        lm, natural, [origin.SuperNeuronStats(lm), WindowDisparityStats(massive_dims),
                      origin.LockInStats(lm, chain.HEAD_SEQS),
                      massive_activations.MassiveMeanStats(massive_dims, min_ratio)], batch_size)
    measured = tuple(measured)
    neuron = chain.super_neuron_link(lm, natural, massive_dims, paper, batch_size, found=found,
                                     massive_onset=chain.first_token_value_onset(measured))
    disparity = chain.disparity_link(lm, natural, massive_dims, neuron.top, sink_onset, paper, batch_size,
                                     measured=measured, sun_sites=sun_sites)
    lock_link = chain.lock_link(lm, natural, lock=lock)
    # Sun et al.'s zero-vs-mean test: the massive sites of the value-onset layers set to their mean (from the
    # windows) or to zero, perplexity on held-out windows of the same size
    heldout = text_windows(lm.tokenizer, num_seqs, seq_len, seed, split="heldout")
    bias = massive_activations.bias_test(lm, natural, heldout, disparity.onset, massive_dims, min_ratio, batch_size,
                                         means=means, first_only=first_only)
    numbers = {"variance_ratio_t0": variance.ratio_t0[0], "massive_bias": {"ppl": bias.ppl,
                                                                          **massive_sites(lm, bias.means,
                                                                                          lm.tokenizer)},
               "super_neuron": None if neuron.top is None else
               {"layer": neuron.top.layer, "neuron": neuron.top.neuron, "write_dims": neuron.top.write_dims},
               "first_token_value_onset": disparity.onset, "sun_onset": None if sun_sites is None else sun_sites.onset,
               "sink_onset": sink_onset,
               "sink_follows": disparity.claim.measured["sink_follows"],
               "dom_after_super": disparity.dom_after_super, "width": lm.hidden_size,
               "positive_sink_vs_other": lock_link.sink_vs_other["positive_fraction"]}
    claims = [variance.claim, neuron.claim, disparity.claim, lock_link.claim,
              chain.bias_claim(bias, paper, natural.shape[0], disparity.onset)]
    return claims, numbers, windows | {"super_layer": disparity.super_layer}


class WindowDisparityStats(origin.DisparityStats):
    """:class:`~sinklib.interpretation.origin.DisparityStats` that also hands back the per-window values its means
    are taken over, so that draws of windows pool (:func:`disparity_pooled`): (means, first values, windows) with
    windows = {"dom_normed_first", "dom_normed_rest", "alpha_first": (L, N) each; "first_values": (L, N, len(dims)),
    float64}."""

    def result(self) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, torch.Tensor]]:
        means, firsts = super().result()
        windows = {k: torch.cat(self.acc[k], dim=1) for k in ("dom_normed_first", "dom_normed_rest", "alpha_first")}
        return means, firsts, windows | {"first_values": torch.cat(self.firsts, dim=1)}


def _key(claim: Claim) -> float | None:
    """The number whose spread over the draws each link records."""
    m = claim.measured or {}
    picks = {"origin.variance_discrepancy": lambda: m["ratio_t0_to_second_half"][0],
             "origin.super_neuron": lambda: m["selectivity"],
             "origin.dimension_disparity": lambda: m["dom_first_over_rest_at_sink"],
             "origin.lock_in": lambda: m["cos_auc"],
             "sun2024.massive_activations_are_bias": lambda: m["set to mean"] / m["original"]}
    try:
        return float(picks[claim.id]())
    except (KeyError, TypeError, ZeroDivisionError):
        return None


def sink_onset_of(lm: LoadedModel, ids: torch.Tensor, batch_size: int) -> int | None:
    """The first layer whose alpha_0 (mean over the windows and heads) exceeds Gu et al.'s eps, on ``ids`` (N, T):
    a chain draw's own sink onset, not the first draw's."""
    from sinklib.architectures.llm.placement import layer_mass
    from sinklib.core.analysis import first_layer_above
    from sinklib.core.metrics import GU_EPS

    alpha = layer_mass(lm, ids, batch_size)[..., 0].mean(dim=(0, 2))  # (N, L, H) -> (L,)
    return first_layer_above(alpha.tolist(), GU_EPS)


def origin_chain(lm: LoadedModel, natural: torch.Tensor, massive_dims: list[int], sink_onset: int | None,
                 paper: dict, seed: int, batch_size: int, min_ratio: float = 1000.0, sun_sites: SunSites | None = None,
                 n_draws: int = 1):
    """Links 1-4 of the structural-origin chain and Sun et al.'s bias test on one model: (claims, numbers), or (None,
    None) when the model has no gated MLP (the chain's super neuron lives in one). With ``n_draws`` > 1 each claim
    is judged over ``n_draws`` equal-sized draws (:func:`~sinklib.core.claims.over_draws`): the run's ``natural``
    windows (seed ``seed``) and as many Bible windows of seeds seed+1, ... (with random tokens and held-out windows
    of the same seeds), each draw with its own sink onset and Sun et al.'s sites measured on its windows
    (:func:`sink_onset_of`; before, every draw reused the first's); the numbers are the run's own draw's."""
    try:
        origin.require_gated_mlp(lm, "the structural-origin chain")
    except WrongFamilyError:
        return None, None
    claims, numbers, windows = chain_draw(lm, natural, massive_dims, sink_onset, paper, seed, batch_size, min_ratio,
                                          sun_sites)
    if n_draws <= 1:
        return claims, numbers
    num_seqs, seq_len = natural.shape
    draws, per_window = [claims], [windows]
    for i in range(1, n_draws):  # each draw its own windows, and the sink onset and Sun's sites measured on them
        ids = text_windows(lm.tokenizer, num_seqs, seq_len, seed + i)
        sites = sun_sites_of(lm, ids, batch_size) if sun_sites is not None else None
        draw, _, windows = chain_draw(lm, ids, massive_dims, sink_onset_of(lm, ids, batch_size), paper, seed + i,
                                      batch_size, min_ratio, sites, first_only=False)
        draws.append(draw)
        per_window.append(windows)
    what = (f"{n_draws} draws of {num_seqs} Bible windows, random-token sequences and held-out windows each (seeds "
            f"{seed}-{seed + n_draws - 1})")
    judged = []
    for i, first in enumerate(claims):
        per_draw = [d[i] for d in draws]
        if first.id == "origin.variance_discrepancy":
            ids = torch.cat([chain.random_tokens(lm, num_seqs, seq_len, seed + k) for k in range(n_draws)])
            judged.append(chain.variance_pooled(lm, ids, per_draw, what, seed, batch_size))
        elif first.id == "origin.dimension_disparity":
            judged.append(disparity_pooled(per_window, per_draw, paper, lm.hidden_size, sun_sites, what, seed))
        else:
            judged.append(over_draws_with_reason(per_draw, what))
    numbers = numbers | {"draws": {c.id: list(c.draws) for c in judged},
                         "pooled": {c.id: {name: _interval_or_none(b) for name, b in c.spread["intervals"].items()}
                                    for c in judged if isinstance(c.spread, dict) and c.spread.get("intervals")}}
    return judged, numbers


def _interval_or_none(bounds: list[float]) -> list[float] | None:
    """A pooled interval's [low, high], or None when it has none (no resample gave a finite value: NaN bounds)."""
    return None if any(b != b for b in bounds) else bounds


def over_draws_with_reason(per_draw: list[Claim], what: str) -> Claim:
    """A link judged over its draws (:func:`~sinklib.core.claims.over_draws`, the spread of :func:`_key`), its note
    ending in why it is not pooled (:data:`NOT_POOLED`); Sun et al.'s bias test with every draw's zero-edit ratio."""
    first = per_draw[0]
    judged = over_draws(per_draw, what, key=_key if _key(first) is not None else None)
    if first.id == "sun2024.massive_activations_are_bias":
        judged = massive_claims.with_zero_ratios(judged, per_draw)
    why = NOT_POOLED.get(first.id, "")
    return replace(judged, note="; ".join(x for x in (judged.note, why) if x)) if why else judged


# ----------------------------------------------------------------------------------------------- link 3, pooled
def disparity_interval(windows: dict[str, torch.Tensor], sink_onset: int | None, seed: int = 0) -> pooled.Interval:
    """The first token's DomRatio over the others' in the state the sink layer's attention reads, on pooled windows:
    sum_n dom_normed_first[l-1, n] / sum_n dom_normed_rest[l-1, n] at l = ``sink_onset`` (the ratio of means
    :func:`~sinklib.interpretation.chain.dom_read_at` reads), with its bootstrap interval over windows; NaN with no
    sink layer or a sink at layer 0 (its attention reads the embeddings). windows: (L, N) tensors."""
    if sink_onset is None or sink_onset < 1:
        return pooled.Interval(float("nan"), float("nan"), float("nan"))
    read = sink_onset - 1  # block l's attention reads h^(l-1)
    return pooled.ratio_interval(windows["dom_normed_first"][read], windows["dom_normed_rest"][read], seed)


def disparity_pooled(per_window: list[dict[str, torch.Tensor]], per_draw: list[Claim], paper: dict, width: int,
                     sun_sites: SunSites | None, what: str, seed: int = 0) -> Claim:
    """Link 3 on every draw's windows pooled, from the per-window values the draws already measured
    (:class:`WindowDisparityStats`; no forward): the first token's value onset from the pooled mean of its values
    (:func:`~sinklib.interpretation.massive_activations.onset_layers`), the sink onset from the pooled alpha_0 per
    layer (the first layer whose mean over heads and windows passes eps), and the DomRatio where the sink layer reads
    with its bootstrap interval over windows (:func:`disparity_interval`). The layer order is an index read from the
    pooled means (no interval); the claim holds when the order holds and the DomRatio's interval lies above
    :data:`~sinklib.interpretation.origin_claims.DISPARITY_AT_SINK`, fails when either fails, and is unsettled only
    when the interval straddles the cut. Sun et al.'s onset is the run's own (``sun_sites``), and the DomRatio after
    the super neuron is read at the run's own super-neuron layer."""
    from sinklib.core.analysis import first_layer_above
    from sinklib.core.metrics import GU_EPS

    w = {k: torch.cat([d[k] for d in per_window], dim=1) for k in per_window[0] if k != "super_layer"}  # (L, N[, D])
    onset = massive_activations.onset_layers(w["first_values"].mean(1).float())
    sink_onset = first_layer_above(w["alpha_first"].mean(1).tolist(), GU_EPS)
    dom = disparity_interval(w, sink_onset, seed)
    after = float(w["dom_normed_first"][per_window[0]["super_layer"]].mean())
    claim = origin_claims.disparity_then_sink(onset, sink_onset, dom.value, after, paper, width=width,
                                              sun_onset=None if sun_sites is None else sun_sites.onset,
                                              sun_measured=sun_sites is not None)
    conditions = [pooled.Condition("order", fixed=claim.measured["order_holds"],
                                   label="the sink onset 0-2 layers after the first attention that reads the value "
                                         "onset (pooled means)"),
                  pooled.Condition("disparity", origin_claims.DISPARITY_AT_SINK, dom,
                                   label="first-token DomRatio over the others' where the sink layer reads")]
    return pooled.pooled_claim(claim, conditions, lambda c: c["order"] and c["disparity"], per_draw,
                               [_key(c) for c in per_draw], what, f"{w['alpha_first'].shape[1]} Bible windows",
                               main="disparity")
