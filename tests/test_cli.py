"""The command line on the tiny model: text and JSON output, one-line errors with exit status 2."""

import json

from sinklib.cli import main


def test_models_lists_registry(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and "gemma3-270m" in out and "hub" in out.lower()
    assert main(["models", "--json"]) == 0
    assert {r["name"] for r in json.loads(capsys.readouterr().out)} >= {"smollm2-135m", "tiny-llama-random"}


def test_profile_json_on_tiny_model(capsys):
    args = ["profile", "--model", "tiny-llama-random", "--input", "natural", "--num-seqs", "3", "--seq-len", "12"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_seqs"] == 3 and out["seq_len"] == 12 and len(out["dom_ratio_first_by_layer"]) == 2
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "sink rate" in text and "DomRatio" in text


def test_errors_are_one_line(capsys):
    assert main(["profile", "--model", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown model") and "\n" not in err
    assert main(["profile", "--model", "tiny-llama-random", "--num-seqs", "0"]) == 2
