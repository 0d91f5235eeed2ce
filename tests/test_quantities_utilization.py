"""The quantities 00_tour, 01_utilization and 10_llm's own rules declare: every number of their claims has a declared
kind (nothing falls back to the integer / float default), identities are integers, and the quantised-KV ratios carry
their measured cross-machine tolerance."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from sinklib.architectures.llm import placement
from sinklib.core import gu_claims
from sinklib.core import quantities as q
from sinklib.core.claims import Claim, check_schema, over_draws
from sinklib.core.claims_file import CLAIM, record_of
from sinklib.utilization import calibration, kvquant, streaming

PAPER = {"table1_llama2_13b_pg19_cache1024": {"window_only": 5158.07, "sink4_window1020": 5.40,
                                              "newline4_window1020": 5.60},
         "table2_pg19_400k": {"n_sink": [0, 1, 2, 4, 8], "Llama-2-7B": [3359.95, 11.88, 10.51, 9.59, 9.54]}}
GU = {"source": "Gu et al.", "models": {"LLaMA2-7B": {"natural": 0.8}, "GPT2-XL": {"repeated": 0.6228}},
      "llama_family": ["LLaMA2-7B"]}
SINKS = "4 sinks + window"


def _claims() -> list[Claim]:
    iv = {s: (0.95, 0.9, 1.01) for s in ("2-bit", "4-bit", kvquant.PAPER_SETTING)}
    return [
        kvquant.sink_preservation_helps(iv, iv, 4096),
        calibration.act_claim({"original": 31.3, "ACT": 31.6}, 88, 270),
        calibration.act_claim({"original": 31.3, "ACT": None}, 0, 270),
        streaming.sinks_rescue_streaming({"window only": 68.0, SINKS: 34.0, SINKS + streaming.PAIRED: 32.0,
                                          "recompute": 31.0}, SINKS, PAPER),
        streaming.one_sink_recovers_most({0: 68.0, 1: 34.4, 2: 34.4, 4: 34.5, 8: 34.3}, PAPER),
        streaming.sink_is_positional(34.5, 34.4, PAPER, 68.0),
        streaming.bounded_cache({"dense": 12.6, SINKS: 11.2}, SINKS),
        over_draws([gu_claims.llama_family_shape({"natural": 0.7, "random": r, "repeated": 0.0}, GU)
                    for r in (0.78, 0.76, 0.75)], "3 seeds", key=lambda c: c.measured["random"]),
        gu_claims.llama_family_shape({"natural": 0.7, "random": 0.7, "repeated": 0.6}, GU, absolute=True),
        placement.delimiter_over_draws([{k: 0.02 for k in placement.KINDS} | {"first": 0.5}] * 3, "m", "3 draws"),
        placement.position_over_draws([placement.PositionOrToken(0.53, 0.54, 0.54, 0.009, 8, "'\\n'", [1, 2])] * 3,
                                      "m", "3 draws"),
    ]


@pytest.mark.parametrize("claim", _claims(), ids=lambda c: c.id)
def test_every_number_is_declared_and_the_record_round_trips(claim):
    check_schema(replace(claim, control_note="none here"))
    undeclared = [(g, path) for g in q.GROUPS for path, _ in q.flatten(getattr(claim, g))
                  if not any(q._matches(p, q.qualified(g, path)) for p in claim.quantities)]
    assert not undeclared
    back = CLAIM.validate_json(json.dumps(record_of(claim)), strict=True)
    assert back.quantities == claim.quantities


def test_quantised_kv_ratios_carry_their_measured_tolerance():
    claim = _claims()[0]
    quantity = claim.quantity("measured", "vs all quantised.2-bit.0", 0.946)
    assert quantity.kind == q.Kind.RATIO and quantity.tolerance("pretrained") == (0.08, 0.0)
    assert "0.946 -> 0.905" in quantity.why
    assert claim.quantity("control_measured", "vs tokens 4-7 kept.4-bit, keys per token.2", 1.0).rel_tol == 0.08


def test_the_moved_position_is_an_integer_identity():
    claim = _claims()[-1]
    assert type(claim.measured["shift"]) is int
    assert claim.quantity("measured", "shift", 8).kind == q.Kind.IDENTITY

