"""The command line on the tiny model: text and JSON output, one-line errors with exit status 2."""

import json

from sinklib.pipeline.cli import main


def test_models_lists_registry(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "smollm2-135m" in out and "gemma3-270m" in out and "hub" in out.lower()
    rows = [line.split() for line in out.splitlines()[1:] if line.startswith(("smollm2-moe ", "llava-standin "))]
    assert [row[2:4] for row in rows] in (
        [["upcycled", "yes"], ["stitched", "yes"]], [["upcycled", "no"], ["stitched", "no"]]
    )  # the source and ready columns stay apart however long a source is ("upcycledyes" once)
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


def test_unknown_figures_profile_is_refused_before_any_kernel(capsys, tmp_path):
    assert main(["figures", "--profile", "nope", "--figures-dir", str(tmp_path / "f"),
                 "--build-dir", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown profile 'nope'") and "smoke" in err
    assert not (tmp_path / "b").exists()  # nothing ran
