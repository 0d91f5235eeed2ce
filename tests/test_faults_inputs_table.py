"""The last bad inputs (issue "faults, round two", item 6), as one table: each is refused before any work with one
line that says what was wrong and what to do -- no traceback, no silent result -- or, where the input is fine,
gives the right answer."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sinklib.core import analysis, images
from sinklib.core.errors import SinklibError
from sinklib.models.load import load_model
from sinklib.pipeline import cli


@pytest.fixture(scope="module")
def llm():
    return load_model("tiny-llama-random", device="cpu")


@pytest.fixture(scope="module")
def vit():
    return load_model("tiny-vit-random", device="cpu")


def _pixels(vit, **change) -> torch.Tensor:
    size = vit.model.config.image_size
    pixels = torch.zeros(1, 3, size, size)
    if "fill" in change:
        pixels[0, 0, 0, 0] = change["fill"]
    return pixels


TINY = ["--model", "tiny-llama-random", "--num-seqs", "2", "--seq-len", "8"]
# (case, what it runs: "cli" and its arguments, or a function of (llm, vit); words the one line must hold)
CASES = [
    ("profile --seq-len 1e9", ("cli", ["profile", *TINY, "--seq-len", "1000000000"]), "longer than"),
    ("profile --num-seqs 1e9", ("cli", ["profile", *TINY, "--num-seqs", "1000000000"]), "token ids alone"),
    ("profile --device meta", ("cli", ["profile", *TINY, "--device", "meta"]), "cannot run"),
    ("figures --device weird", ("cli", ["figures", "--device", "weird", "--notebooks", "00"]), "unknown device"),
    ("figures --jobs 0", ("cli", ["figures", "--jobs", "0"]), "at least 1"),
    ("figures --jobs -1", ("cli", ["figures", "--jobs", "-1"]), "at least 1"),
    ("figures --notebooks (none)", ("cli", ["figures", "--notebooks"]), "no notebook"),
    ("GPU_GB=nan", ("cli", ["figures", "--profile", "gpu", "--dry-run", "--gpu-gb", "nan"]), "finite"),
    ("GPU_GB=inf", ("cli", ["figures", "--profile", "gpu", "--dry-run", "--gpu-gb", "inf"]), "finite"),
    ("HOST_GB=nan", ("cli", ["figures", "--profile", "gpu", "--dry-run", "--host-gb", "nan"]), "finite"),
    ("gallery on a missing folder", ("cli", ["gallery", "--figures-dir", "/nonexistent/figures-typo"]),
     "no notebook results"),
    ("profile_vit: NaN pixels", lambda llm, vit: _vit(vit, _pixels(vit, fill=math.nan)), "NaN pixel"),
    ("profile_vit: inf pixels", lambda llm, vit: _vit(vit, _pixels(vit, fill=math.inf)), "infinite pixel"),
    ("profile_vit: uint8 pixels", lambda llm, vit: _vit(vit, _pixels(vit).to(torch.uint8)), "float tensor"),
    ("profile_vit: (3, H, W)", lambda llm, vit: _vit(vit, _pixels(vit)[0]), "(B, 3, H, W)"),
    ("profile_vit: an LLM", lambda llm, vit: _vit(llm, _pixels(vit)), "family vit"),
    ("attention_maps: id outside the vocabulary",
     lambda llm, vit: analysis.attention_maps(llm, torch.tensor([1, llm.vocab_size + 10])), "vocabulary"),
    ("attention_maps: layer 99", lambda llm, vit: analysis.attention_maps(llm, torch.tensor([1, 2]), [99]),
     "is not one of"),
    ("first_token_mass_by_length([0])",
     lambda llm, vit: analysis.first_token_mass_by_length(llm, [0], progress=False), "at least 2 tokens"),
    ("to_pixels(size=0)", lambda llm, vit: images.to_pixels(np.zeros((8, 8, 3), np.uint8), size=0), "size"),
    ("seed 2**70 (API)", lambda llm, vit: __import__("sinklib.pipeline.profiles").pipeline.profiles.seed_everything(
        2 ** 70), "0..4294967295"),
    ("seed 2**70 (load_model)", lambda llm, vit: load_model("tiny-llama-random", seed=2 ** 70), "0..4294967295"),
    ("seed 2**70 (CLI)", ("cli", ["profile", *TINY, "--seed", str(2 ** 70)]), "0..4294967295"),
]


def _vit(lm, pixels):
    from sinklib.architectures.vit import vit_sinks

    return vit_sinks.profile_vit(lm, pixels)


@pytest.mark.parametrize("case,run,words", CASES, ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_line_before_any_work(case, run, words, llm, vit, capsys):
    if isinstance(run, tuple):
        status = cli.main(run[1])
        err = capsys.readouterr().err.strip()
        assert status == 2, (case, err)
        assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
        text = err
    else:
        with pytest.raises(SinklibError) as raised:
            run(llm, vit)
        text = str(raised.value)
        assert "\n" not in text.strip(), text
    assert words in text, (case, text)


def test_cuda_on_a_machine_without_it_is_refused_once_before_any_notebook(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert cli.main(["figures", "--device", "cuda", "--notebooks", "00"]) == 2
    err = capsys.readouterr().err
    assert "no usable CUDA device" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("eps", [np.float32(0.3), torch.tensor(0.3), 0.3], ids=["numpy", "0-d tensor", "float"])
def test_eps_as_a_numpy_scalar_or_a_0d_tensor_is_a_number(llm, eps):
    ids = torch.randint(0, llm.vocab_size, (2, 8), generator=torch.Generator().manual_seed(0))
    got = analysis.profile_sinks(llm, ids, eps=eps, progress=False)
    want = analysis.profile_sinks(llm, ids, eps=0.3, progress=False)
    assert got.sink_rate == want.sink_rate


def test_negative_layers_count_from_the_last(llm):
    ids = torch.tensor([1, 2, 3])
    assert torch.equal(analysis.attention_maps(llm, ids, [-1]), analysis.attention_maps(llm, ids, [llm.n_layers - 1]))


def test_figures_defaults_to_the_checkouts_folders_from_any_directory(monkeypatch, tmp_path):
    from sinklib.core.paths import REPO

    monkeypatch.chdir(tmp_path)
    args = cli.build_parser().parse_args(["figures"])
    assert REPO is not None and args.figures_dir == str(REPO / "figures") and args.build_dir == str(REPO / "build")


def test_the_kernels_cache_notes_reach_the_terminal_and_nothing_else(capsys):
    from sinklib.pipeline.runner import CacheNotes

    notes = CacheNotes("02_interpretation")
    notes.write("progress 10%\r[sinklib] smollm2-135m differs from its man")
    notes.write("ifest; rebuilding it (once)\nother stderr\n")
    err = capsys.readouterr().err
    assert err == "      02_interpretation: [sinklib] smollm2-135m differs from its manifest; rebuilding it (once)\n"


def test_the_smoke_profiles_dry_run_checks_every_notebook(capsys):
    assert cli.main(["figures", "--profile", "smoke", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "REFUSED" not in out and "smollm2-moe-smoke" in out and "llava-standin-smoke" in out
