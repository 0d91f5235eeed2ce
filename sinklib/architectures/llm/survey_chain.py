"""``10_llm``'s structural-origin chain on one model: links 1-4 (:mod:`sinklib.interpretation.chain`) and Sun et al.'s
zero-vs-mean test, each judged over equal-sized draws of windows (:func:`sinklib.core.claims.over_draws`).

One draw (:func:`chain_draw`) reads links 2-4 and the massive sites' means from one forward per batch of its windows
(:func:`sinklib.interpretation.origin.measure`), then runs the variance link on random tokens and the perplexities.
"""

from __future__ import annotations

import torch

from sinklib.core.claims import Claim, over_draws
from sinklib.core.data import make_inputs, text_windows
from sinklib.core.errors import WrongFamilyError
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation import chain, massive_activations, origin, sun_claims
from sinklib.interpretation.sun_sites import SunSites
from sinklib.interpretation.sun_sites import sun_sites as sun_sites_of

CHAIN_DRAWS = 3  # the run's windows and two more draws of the same size (seeds seed+1, seed+2)


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
               first_only: bool = True) -> tuple[list[Claim], dict]:
    """Links 1-4 and the bias test on one draw: ``natural`` (N, T) windows and N random-token sequences of ``seed``
    (no BOS: position 0 must vary too); the bias test's held-out windows are N more of the same size
    (``first_only``: also the position-0-only edit, which the numbers show and the rule does not read). Returns
    (claims, numbers)."""
    num_seqs, seq_len = natural.shape
    random_ids = make_inputs(lm, "random", num_seqs, seq_len, seed, bos=False)
    variance = chain.variance_link(lm, random_ids)
    found, measured, lock, means = origin.measure(
        lm, natural, [origin.SuperNeuronStats(lm), origin.DisparityStats(massive_dims),
                      origin.LockInStats(lm, chain.HEAD_SEQS),
                      massive_activations.MassiveMeanStats(massive_dims, min_ratio)], batch_size)
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
    return [variance.claim, neuron.claim, disparity.claim, lock_link.claim, chain.bias_claim(bias, paper, natural.shape[0],
                                                                                  disparity.onset)], numbers


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
    claims, numbers = chain_draw(lm, natural, massive_dims, sink_onset, paper, seed, batch_size, min_ratio, sun_sites)
    if n_draws <= 1:
        return claims, numbers
    num_seqs, seq_len = natural.shape
    draws = [claims]
    for i in range(1, n_draws):  # each draw its own windows, and the sink onset and Sun's sites measured on them
        ids = text_windows(lm.tokenizer, num_seqs, seq_len, seed + i)
        sites = sun_sites_of(lm, ids, batch_size) if sun_sites is not None else None
        draws.append(chain_draw(lm, ids, massive_dims, sink_onset_of(lm, ids, batch_size), paper, seed + i,
                                batch_size, min_ratio, sites, first_only=False)[0])
    what = (f"{n_draws} draws of {num_seqs} Bible windows, random-token sequences and held-out windows each (seeds "
            f"{seed}-{seed + n_draws - 1})")
    judged = [over_draws([d[i] for d in draws], what, key=_key if _key(claims[i]) is not None else None)
              for i in range(len(claims))]
    judged = [sun_claims.with_zero_ratios(c, [d[i] for d in draws]) if c.id == "sun2024.massive_activations_are_bias"
              else c for i, c in enumerate(judged)]
    numbers = numbers | {"draws": {c.id: list(c.draws) for c in judged}}
    return judged, numbers
