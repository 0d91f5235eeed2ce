"""The claims of 02_interpretation / 10_llm (origin.*, sun2024.*) and 03's parity claim declare what each of their
numbers is (sinklib.core.quantities): every number of ``measured`` (and of the draws' ``spread``) is declared, the
indices are int identities, and a float -- a DomRatio whose key mentions the super neuron -- is never one."""

import math
from dataclasses import replace

from sinklib.core import quantities as q
from sinklib.core.analysis import MassiveDims
from sinklib.core.claims import check_schema, over_draws, with_control
from sinklib.core.results import load_reference
from sinklib.interpretation import massive_claims, origin_claims
from sinklib.interpretation.origin import SuperNeuron
from sinklib.interpretation.sun_sites import SunSites
from sinklib.mitigation import parity

PAPER = load_reference("structural_origin")


def _sites() -> SunSites:
    return SunSites(first=[0, 1.0, 1.0], later_share=[0, 0.0, 0.01], later_per_seq=[0, 0.0, 1.0],
                    first_ratio=[1.0, 2000.0, 3000.0], n_seqs=4, seq_len=101)


def _claims():
    neuron = SuperNeuron(1, 83, 18.4, 0.3, 690.0, [507, 330], 0.73)
    run = {"checkpoints": [{"dom_ratio_first": 2.4, "effective_rank": 46.1}]}
    base = {"checkpoints": [{"dom_ratio_first": 4.2, "effective_rank": 49.3}]}
    return [origin_claims.variance_discrepancy([18.6, 4.7, 1.1], [True, True, False]),
            origin_claims.super_neuron(neuron, [507], PAPER, massive_onset=1),
            origin_claims.disparity_then_sink([1, 2, 11], 3, 4.85, 59.94, PAPER, width=576, sun_onset=11),
            origin_claims.lock_in((0.9999, 0.75), (0.51, 0.24), 207, (0.87, 0.82, 0.92)),
            origin_claims.self_only_sink(0.0, 0.39, 10),
            origin_claims.amplification([1, 8, 64], [0.01, 0.2, 0.4], [0.01, 0.01, 0.012]),
            massive_claims.massive_by_sun(MassiveDims([247, 507], True, 1000.0, 14399.0), _sites()),
            massive_claims.massive_bias({"original": 31.3, "set to mean": 31.4, "set to zero": 1.4e6,
                                     "set to mean, position 0 only": 31.8}, {"perplexity_wikitext": None},
                                    first_fixed=True, later_sites=5),
            massive_claims.implicit_bias({"value_norm_ratio": 0.92, "sink_term_spread": 0.97}, 207),
            parity.table_claim_over_seeds([run, run], [base, base], load_reference("mitigations"), [0, 1])]


def _undeclared(claim) -> list[str]:
    return [f"{claim.id} {group} {path}" for group in ("measured", "control_measured", "spread")
            for path, _ in q.flatten(getattr(claim, group))
            if not any(q._matches(p, q.qualified(group, path)) for p in claim.quantities)]


def test_every_number_is_declared_and_every_record_passes_the_schema():
    claims = [with_control(c, c) for c in _claims()]  # its own numbers as its control: control_measured read too
    for claim in claims:
        check_schema(claim)
        assert claim.quantities, claim.id
    assert [u for c in claims for u in _undeclared(c)] == []


def test_indices_are_int_identities_and_dom_ratios_are_not():
    by_id = {c.id: c for c in _claims()}
    neuron = by_id["origin.super_neuron"]
    for path in ("layer", "neuron", "write_dims.0", "first_token_value_onset"):
        number = dict(q.flatten(neuron.measured))[path]
        assert type(number) is int and neuron.quantity("measured", path, number).kind == q.Kind.IDENTITY
    dis = by_id["origin.dimension_disparity"]
    m = dict(q.flatten(dis.measured))
    assert dis.quantity("measured", "dom_ratio_after_super_neuron", 59.94).kind == q.Kind.RATIO
    assert dis.quantity("measured", "dom_share_after_super_neuron", 0.104).kind == q.Kind.SHARE
    for path in ("sink_onset", "sun_onset", "first_reading_layer", "first_token_value_onsets.2"):
        assert type(m[path]) is int and dis.quantity("measured", path, m[path]).kind == q.Kind.IDENTITY
    sun = by_id["sun2024.massive_activations"]
    assert sun.quantity("measured", "later_share.2", 0.01).kind == q.Kind.SHARE
    assert sun.quantity("measured", "dims.1", 507).kind == q.Kind.IDENTITY
    bias = by_id["sun2024.massive_activations_are_bias"]
    assert bias.quantity("measured", "set to mean, position 0 only", 31.8).kind == q.Kind.LOSS
    assert by_id["origin.headwise_rmsnorm_lowers_disparity_raises_rank"].quantity("spread", "min", 0.57).kind == q.Kind.RATIO


def test_a_numpy_or_float_index_is_stored_as_an_int():
    import numpy as np

    neuron = SuperNeuron(np.int64(1), np.int64(83), 18.4, 0.3, 690.0, [np.int64(507)], 0.73)
    claim = origin_claims.super_neuron(neuron, [507], PAPER, massive_onset=np.int64(1))
    check_schema(with_control(claim, claim))
    assert all(type(claim.measured[k]) is int for k in ("layer", "neuron", "first_token_value_onset"))
    assert type(claim.measured["write_dims"][0]) is int
    massive = massive_claims.massive_by_sun(MassiveDims([np.int64(3)], True, 1000.0, 2000.0))
    assert type(massive.measured["dims"][0]) is int


def test_the_control_and_the_draws_keep_the_declarations():
    """The random-weight control's numbers and the 10_llm draws' spread are read with the claim's declarations; the
    no-neuron record still declares what its control's neuron would be."""
    none = origin_claims.super_neuron(None, [507], PAPER)
    control = origin_claims.super_neuron(SuperNeuron(0, 5, 2.0, 1.0, 10.0, [3, 4], 0.2), [507], PAPER)
    joined = with_control(none, control)
    check_schema(joined)
    assert not _undeclared(joined)
    assert joined.quantity("control_measured", "neuron", 5).kind == q.Kind.IDENTITY
    assert joined.quantity("control_measured", "write_share", 0.2).kind == q.Kind.SHARE
    draws = [origin_claims.disparity_then_sink([1], 3, r, 60.0, PAPER) for r in (4.8, 5.0, 4.9)]
    combined = over_draws(draws, "3 draws", key=lambda c: c.measured["dom_first_over_rest_at_sink"])
    assert combined.quantity("spread", "values.1", 5.0).kind == q.Kind.RATIO
    renamed = replace(combined, id=f"{combined.id}.smollm2-135m")  # 10_llm's per-model id
    assert renamed.quantities == combined.quantities and not _undeclared(renamed)
    assert not math.isnan(combined.spread["min"])
