"""claims.json is written and read through one schema: the pydantic Claim, exported as JSON Schema
(docs/claims.schema.json), checked strictly at the door -- a wrong type is refused, not coerced."""

from __future__ import annotations

import json

import jsonschema
import pytest

from sinklib.core import claims, claims_file
from sinklib.core import quantities as q
from sinklib.core.errors import InputError
from sinklib.core.paths import ROOT
from sinklib.reproduction import scorecard


def _recorded(tmp_path):
    rec = claims_file.Recorder("00_tour", "SmolLM2", "cpu")
    rec.add(claims.Claim(id="gu2024.x", statement="s", source="Gu et al., arXiv 2410.10781", rule="r", published=0.9,
                         measured={"natural": 0.5, "layer": 2}, holds=True, follows="Eq. 1",
                         quantities={"natural": q.share(), "layer": q.identity("layer")}), show=False)
    return rec.write(tmp_path / "00_tour")


def test_the_committed_schema_is_the_one_the_code_reads_and_a_written_file_satisfies_it(tmp_path):
    committed = json.loads((ROOT / "docs" / "claims.schema.json").read_text(encoding="utf-8"))
    assert committed == json.loads(json.dumps(claims_file.json_schema())), "regenerate: python -m sinklib claims-schema"
    path = _recorded(tmp_path)
    jsonschema.validate(json.loads(path.read_text(encoding="utf-8")), committed)
    [back] = claims_file.load(path)
    assert back.quantities["layer"].kind == q.Kind.IDENTITY and back.verdict() == claims.Verdict.HOLDS


@pytest.mark.parametrize("field, bad", [("holds", "yes"), ("id", 5), ("draws", "TT"), ("needs_gpu", 1),
                                        ("quantities", {"natural": {"kind": "fraction"}})])
def test_a_record_of_the_wrong_type_is_refused_at_the_door_and_left_out_of_the_scorecard(tmp_path, field, bad, capsys):
    path = _recorded(tmp_path)
    data = json.loads(path.read_text(encoding="utf-8"))
    data["claims"][0][field] = bad
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError) as err:
        claims_file.load(path)
    assert "\n" not in str(err.value) and field in str(err.value) and "re-run the notebook" in str(err.value)
    assert scorecard.collect(tmp_path) == []
    assert "left out of the scorecard" in capsys.readouterr().err
