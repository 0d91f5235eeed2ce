"""Issue 45, items 5, 7 and 8 (inputs): a student's answer cannot poison later checks, and every bad input -- a
claims.json record, a CLI flag, a dtype name, a model id, token ids, pixels -- is refused at the door with one line
that says what was wrong and what to do (no traceback, no silent nonsense)."""

import json
import warnings

import matplotlib
import numpy as np
import pytest
import torch

from sinklib.core import claims as claims_io
from sinklib.core import claims_file, metrics
from sinklib.core.errors import InputError
from sinklib.pipeline import cli

matplotlib.use("Agg")


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text.strip(), text
    return text


# ------------------------------------------------------------------------------ item 5: a poisoning answer
def test_an_answer_that_edits_its_input_cannot_poison_the_next_check():
    from sinklib.teaching import check
    from sinklib.teaching.check._core import HAND_A

    before = HAND_A.clone()

    def zeroing_alpha(attn, k):  # edits the hand-worked case in place, then answers from the wreck
        attn.zero_()
        return attn[..., k:, k].mean(-1)

    def zeroing_mass(attn):
        attn.mul_(0)
        return attn.sum(-2)

    assert not check.alpha(zeroing_alpha, quiet=True)
    assert not check.sink_mass(zeroing_mass, quiet=True)
    assert torch.equal(HAND_A, before)
    assert check.alpha(metrics.alpha, quiet=True), check.alpha(metrics.alpha, quiet=True).message
    assert check.sink_mass(metrics.sink_mass, quiet=True)


def test_the_checks_that_test_an_untouched_input_still_catch_an_editing_answer():
    from sinklib.teaching import check

    def editing_mask(mask, k):  # right answer, but written into the caller's mask
        mask[k] = float("-inf")
        mask[k, k] = 0.0
        return mask

    result = check.self_only_mask(editing_mask, quiet=True)
    assert not result and "changed" in result.message


# ------------------------------------------------------------------------------ item 7: claims.json records
def _claims_file(tmp_path, extra: dict | None = None):
    recorder = claims_file.Recorder("07_test", "tiny", "smoke")
    recorder.add(claims_io.Claim("x.y", "s", "src", "r", None, 1.0, True, follows="Eq. 1"), show=False)
    folder = tmp_path / "07_test"
    path = recorder.write(folder)
    if extra:
        data = json.loads(path.read_text())
        data["claims"][0].update(extra)
        path.write_text(json.dumps(data))
    return path


def test_an_unknown_field_in_a_claim_record_is_ignored_and_named_once(tmp_path):
    path = _claims_file(tmp_path, {"confidence": 0.9, "reviewer": "me"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        records = claims_file.load(path)
    assert [c.id for c in records] == ["x.y"] and records[0].measured == 1.0
    assert len(caught) == 1
    text = str(caught[0].message)
    assert str(path) in text and "confidence" in text and "reviewer" in text and "\n" not in text


@pytest.mark.parametrize("content", ["[1, 2, 3]", "{not json", "", '{"schema": 3, "claims": [7]}',
                                     '{"schema": 3}', '{"schema": 3, "claims": [{"id": "a"}]}'])
def test_a_broken_claims_file_is_one_line_naming_the_file_and_the_rerun(tmp_path, content):
    path = tmp_path / "07_test" / "claims.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(InputError) as err:  # a ValueError: scorecard, gallery and verify leave the notebook out
        claims_file.load(path)
    text = one_line(err.value)
    assert str(path) in text and "make figures NOTEBOOKS=07" in text


def test_the_scorecard_leaves_a_broken_claims_file_out_with_its_name(tmp_path, capsys):
    from sinklib.reproduction import scorecard

    _claims_file(tmp_path)
    bad = tmp_path / "08_bad" / "claims.json"
    bad.parent.mkdir()
    bad.write_text("[]")
    rows = scorecard.collect(tmp_path)
    assert [r.notebook for r in rows] == ["07_test"]
    assert str(bad) in capsys.readouterr().err


# ------------------------------------------------------------------------------ items 7-8: the command line
TINY = ["profile", "--model", "tiny-llama-random", "--input", "random", "--num-seqs", "2", "--seq-len", "8"]


def _fails_in_one_line(capsys, argv, *words) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    err = err.split("\r")[-1].strip()  # after the progress bar, which a terminal clears
    assert err.startswith("error: ") and "\n" not in err, err
    for word in words:
        assert word in err, err
    return err


@pytest.mark.parametrize("seed", ["-1", str(2 ** 70), str(2 ** 32)])
def test_a_seed_outside_what_every_generator_takes_is_one_line(capsys, seed):
    _fails_in_one_line(capsys, TINY + ["--seed", seed], "--seed", str(2 ** 32 - 1))


def test_the_largest_seed_runs(capsys):
    assert cli.main(TINY + ["--seed", str(2 ** 32 - 1), "--json"]) == 0


@pytest.mark.parametrize("eps", ["nan", "-1", "0", "1", "inf"])
def test_eps_outside_0_1_is_one_line_not_a_sink_rate(capsys, eps):
    _fails_in_one_line(capsys, TINY + ["--eps", eps], "--eps", "(0, 1)")


@pytest.mark.parametrize("model", ["meta-llama/", "/meta-llama", "meta-llama//Llama-2", "a b/c", "timm/"])
def test_a_malformed_hub_id_is_one_line(capsys, model):
    _fails_in_one_line(capsys, ["profile", "--model", model], repr(model))


def test_a_local_model_folder_loads(tmp_path, tiny, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    folder = tmp_path / "my model"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    assert cli.main(["profile", "--model", str(folder), "--input", "random", "--num-seqs", "2", "--seq-len", "8",
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(folder)
    empty = tmp_path / "empty"
    empty.mkdir()
    _fails_in_one_line(capsys, ["profile", "--model", str(empty)], "config.json", str(empty))


@pytest.mark.parametrize("command", ["gallery", "scorecard", "verify"])
def test_a_figures_dir_that_is_a_file_is_one_line(capsys, tmp_path, command):
    a_file = tmp_path / "figures"
    a_file.write_text("not a folder")
    _fails_in_one_line(capsys, [command, "--figures-dir", str(a_file)], str(a_file), "folder")
    assert a_file.read_text() == "not a folder"


def test_a_long_profile_asks_for_yes(capsys, monkeypatch):
    monkeypatch.setattr(cli, "LONG_RUN_S", 0.0)  # every run is "long": the tiny model's estimate is above 0 s
    _fails_in_one_line(capsys, TINY, "--yes", "estimated")
    assert cli.main(TINY + ["--yes", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_seqs"] == 2


def test_profile_sinks_stops_when_its_estimate_is_over_the_budget(tiny):
    from sinklib.core.analysis import profile_sinks

    ids = torch.randint(3, 200, (4, 16), generator=torch.Generator().manual_seed(0))
    with pytest.raises(InputError) as err:
        profile_sinks(tiny, ids, progress=False, max_seconds=0.0)
    assert "estimated" in one_line(err.value)
    assert profile_sinks(tiny, ids, progress=False, max_seconds=3600.0).alphas.shape[0] == 4


def test_durations_in_words():
    from sinklib.core.profile_checks import duration_words

    assert duration_words(16920) == "4 h 42 min"
    assert duration_words(600) == "10 min"
    assert duration_words(42) == "42 s"


# ------------------------------------------------------------------------------ item 7: dtype names
@pytest.mark.parametrize("name", ["float8", "int8", "fp8", "complex64", "bool", ""])
def test_an_unknown_dtype_name_lists_the_accepted_ones(name):
    from sinklib.models.load import load_model

    with pytest.raises(InputError) as err:
        load_model("tiny-llama-random", device="cpu", dtype=name)
    text = one_line(err.value)
    assert repr(name) in text and "bfloat16" in text and "float32" in text


@pytest.mark.parametrize("name, dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16), ("fp32", torch.float32),
                                         ("half", torch.float16), ("bfloat16", torch.bfloat16)])
def test_dtype_aliases(name, dtype):
    from sinklib.models.load import dtype_of

    assert dtype_of(name) is dtype


def test_a_torch_dtype_that_cannot_run_a_model_is_refused():
    from sinklib.models.load import dtype_of

    assert dtype_of(torch.float16) is torch.float16
    with pytest.raises(InputError):
        dtype_of(torch.int8)


# ------------------------------------------------------------------------------ item 8 and 7: token ids
BAD_IDS = {
    "one token": torch.tensor([[5]]),
    "float ids": torch.rand(2, 6),
    "bool ids": torch.ones(2, 6, dtype=torch.bool),
    "3-D ids": torch.zeros(1, 2, 6, dtype=torch.long),
    "0-D ids": torch.tensor(5),
    "no sequence": torch.zeros(0, 6, dtype=torch.long),
    "no token": torch.zeros(2, 0, dtype=torch.long),
    "negative id": torch.tensor([[1, 2, -1, 4]]),
    "id past the vocabulary": torch.tensor([[1, 2, 258, 4]]),
    "not a tensor": "In the beginning",
}


@pytest.mark.parametrize("what", list(BAD_IDS))
def test_profile_sinks_refuses_malformed_ids_in_one_line(tiny, what):
    from sinklib.core.analysis import profile_sinks

    with pytest.raises(InputError) as err:
        profile_sinks(tiny, BAD_IDS[what], progress=False)
    one_line(err.value)


def test_profile_sinks_on_one_token_says_why(tiny):
    from sinklib.core.analysis import profile_sinks

    with pytest.raises(InputError, match="one token"):
        profile_sinks(tiny, torch.tensor([[5]]), progress=False)


def test_profile_sinks_refuses_eps_and_batch_size_outside_their_range(tiny):
    from sinklib.core.analysis import profile_sinks

    ids = torch.randint(3, 200, (2, 8))
    for eps in (float("nan"), -1.0, 1.0):
        with pytest.raises(InputError, match="eps"):
            profile_sinks(tiny, ids, eps=eps, progress=False)
    with pytest.raises(InputError, match="batch"):
        profile_sinks(tiny, ids, batch_size=-1, progress=False)


def test_profile_sinks_takes_one_sequence_as_a_1d_tensor_or_a_list(tiny):
    from sinklib.core.analysis import profile_sinks

    ids = torch.randint(3, 200, (8,), generator=torch.Generator().manual_seed(1))
    one = profile_sinks(tiny, ids, progress=False)
    assert one.alphas.shape[0] == 1
    torch.testing.assert_close(profile_sinks(tiny, ids.tolist(), progress=False).alphas, one.alphas)


EXPLORER_BAD = {
    "a batch of two": torch.randint(3, 200, (2, 5)),
    "float ids": torch.rand(5),
    "bool ids": torch.ones(5, dtype=torch.bool),
    "3-D ids": torch.zeros(1, 1, 5, dtype=torch.long),
    "empty ids": torch.zeros(0, dtype=torch.long),
    "empty text": "",
    "negative id": torch.tensor([1, -2, 3]),
    "id past the vocabulary": torch.tensor([1, 9999, 3]),
    "ragged list": [[1, 2], [3]],
    "None": None,
}


@pytest.mark.parametrize("what", list(EXPLORER_BAD))
def test_the_explorer_refuses_malformed_inputs_in_one_line(tiny, what):
    from sinklib.teaching.explore import explorer_data

    with pytest.raises(InputError) as err:
        explorer_data(tiny, EXPLORER_BAD[what])
    one_line(err.value)


def test_the_explorer_does_not_join_a_batch_into_one_sequence(tiny):
    from sinklib.teaching.explore import explorer_data

    with pytest.raises(InputError, match=r"ids\[0\]"):
        explorer_data(tiny, torch.randint(3, 200, (2, 5)))
    assert len(explorer_data(tiny, torch.randint(3, 200, (1, 5))).labels) == 5  # (1, T) is one sequence


# ------------------------------------------------------------------------------ item 8: pixels
def test_nan_pixels_are_refused_in_one_line():
    from sinklib.core import images
    from sinklib.models.load import load_model
    from sinklib.teaching.explore import explorer_data

    vit = load_model("tiny-vit-random", device="cpu")
    pixels = torch.randn(1, 3, 32, 32)
    pixels[0, 1, 4, 7] = float("nan")
    with pytest.raises(InputError) as err:
        explorer_data(vit, pixels)
    assert "NaN" in one_line(err.value)
    photo = np.random.default_rng(0).random((40, 40, 3)) * 255
    photo[3, 3, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        images.to_pixels([photo])
    with pytest.raises(InputError, match="3"):
        images.to_pixels([np.zeros((40, 40), dtype=np.uint8)])  # grey: give it three channels

