"""Random-weight controls of ``02_interpretation``: every claim's analysis run again on randomly initialised weights
of the model's own configuration (:func:`sinklib.models.random_init.random_weights`, built by the notebook), at
smaller sizes, forwards only.

The paper predicts (``claim_sources.AT_INIT``) that only the variance discrepancy exists before training -- it is
how causal value aggregation works -- while super neurons, massive activations and sinks are made by training. A
rule that holds on these weights where the paper says training makes the effect cannot tell a trained model from
noise.
"""

from __future__ import annotations

from dataclasses import dataclass

from sinklib.core import analysis
from sinklib.core.claims import Claim
from sinklib.core.data import make_inputs, text_windows
from sinklib.core.loaded import LoadedModel
from sinklib.interpretation import (
    chain,
    intervention_effects,
    massive_activations,
    massive_claims,
    origin_claims,
)


@dataclass
class ControlSizes:
    num_seqs: int  # windows / random sequences for every analysis
    seq_len: int
    eval_seq_len: int  # held-out windows for the perplexities (the control: as short as the probes)
    batch_size: int


def random_weight_controls(control: LoadedModel, paper: dict, k: int, lambdas: list[float], amp_layers: list[int],
                           sizes: ControlSizes, seed: int = 0) -> dict[str, Claim]:
    """Each claim of the notebook, by the same rule, on ``control`` (a random-weight model): claim id -> Claim.

    The control finds its own massive dimensions, sink onset and super neurons, exactly as the notebook does for the
    trained model -- nothing measured on the trained model is carried over."""
    n, T, bs = sizes.num_seqs, sizes.seq_len, sizes.batch_size
    natural = make_inputs(control, "natural", n, T, seed)
    random_ids = make_inputs(control, "random", n, T, seed, bos=False)
    heldout = text_windows(control.tokenizer, n, sizes.eval_seq_len, seed, split="heldout")
    prof = analysis.profile_sinks(control, natural, input_name="natural", batch_size=bs, progress=False)
    massive = analysis.massive_dimensions(prof)
    sink_onset = analysis.first_layer_above(prof.alpha_first_by_layer, 0.3)
    shared = chain.natural_pass(control, natural, massive.dims, k, massive.min_ratio, bs)  # one pass, as the notebook
    neuron = chain.super_neuron_link(control, natural, massive.dims, paper, bs, found=shared.super_neurons,
                                     massive_onset=chain.first_token_value_onset(shared.disparity))
    disparity = chain.disparity_link(control, natural, massive.dims, neuron.top, sink_onset, paper, bs,
                                     measured=shared.disparity, sun_sites=shared.sun_sites)
    self_only = intervention_effects.self_only_effect(control, natural, k, bs, before=shared.before_k)
    sweep = control_lambdas(lambdas)
    curves = intervention_effects.amplification_curves(intervention_effects.amplification_per_window(
        control, natural, k, sweep, amp_layers, bs, alpha_before=self_only.alpha_before_per_seq))
    bias = massive_activations.bias_test(control, natural, heldout, disparity.onset, massive.dims, massive.min_ratio,
                                         bs, means=shared.massive_means)
    auc, n_heads = massive_activations.implicit_bias_separation(shared.sink_as_bias)
    claims = [chain.variance_link(control, random_ids).claim, neuron.claim, disparity.claim,
              chain.lock_link(control, natural, lock=shared.lock).claim,
              origin_claims.self_only_sink(self_only.rate_before, self_only.rate_after, k),
              origin_claims.amplification(sweep, curves[intervention_effects.CENTRED],
                                          curves[intervention_effects.SCALED]),
              chain.bias_claim(bias, paper, natural.shape[0], disparity.onset), massive_claims.implicit_bias(auc, n_heads),
              massive_claims.massive_by_sun(massive, shared.sun_sites)]
    return {c.id: c for c in claims}


def control_lambdas(lambdas: list[float]) -> list[float]:
    """The control's shorter sweep: the first, middle and last lambda (the same rule, a third of the forwards)."""
    return sorted({lambdas[0], lambdas[len(lambdas) // 2], lambdas[-1]})


def control_summary(controls: dict[str, Claim]) -> dict[str, bool | None]:
    """claim id -> the control's verdict, for the headline."""
    return {cid: c.holds for cid, c in controls.items()}
