"""Corruption that keeps a file's size and mtime, and NaN values (issue "faults, round two", item 4): a warm load
hashes only files whose mtime changed, so these pass it; ``python -m sinklib verify-cache`` hashes every file and
checks every cached weight finite; a NaN weight in a trained run or a NaN headline number is a fault, never a value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from test_faults_cache import TINY_RUN, _count_trainings, _kept, _one_line

from sinklib.core import manifest
from sinklib.mitigation import training
from sinklib.reproduction import cache_check

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    return tmp_path


def _folder_build(cache: Path, name: str, weights: torch.Tensor) -> Path:
    """A converted-model folder as conversion writes it: config, safetensors, then its manifest last."""
    out = cache / "converted" / name
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"model_type": "llama"}))
    save_file({"w": weights}, out / "model.safetensors")
    manifest.write(out / manifest.MANIFEST, out, manifest.folder_files(out), "test-recipe")
    return out


def _rewrite_keeping_time(path: Path, start: int, data: bytes) -> None:
    """Overwrite bytes in place and put the size and mtime back as they were: the cheap check cannot see it."""
    st = path.stat()
    with path.open("r+b") as f:
        f.seek(start)
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size and path.stat().st_mtime_ns == st.st_mtime_ns


def _verify_cache(cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sinklib", "verify-cache", "--cache", str(cache)],
                          capture_output=True, text=True, cwd=ROOT)


def test_a_sound_cache_passes_with_every_build_counted(cache):
    _folder_build(cache, "sound", torch.arange(1024, dtype=torch.float32))
    training.train(TINY_RUN, progress=False)
    run = _verify_cache(cache)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 of 2 builds sound" in run.stdout and "FAULT" not in run.stdout


def test_zeroed_bytes_with_size_and_mtime_kept_pass_the_warm_check_and_fail_the_full_one(cache):
    out = _folder_build(cache, "zeroed", torch.arange(1024, dtype=torch.float32) + 1)
    weights = out / "model.safetensors"
    _rewrite_keeping_time(weights, weights.stat().st_size - 512, bytes(256))
    assert manifest.problem(out / manifest.MANIFEST, out, manifest.folder_files(out), "test-recipe") is None
    run = _verify_cache(cache)
    assert run.returncode == 1 and "Traceback" not in run.stdout + run.stderr
    fault = [line for line in run.stdout.splitlines() if line.startswith("FAULT")]
    assert len(fault) == 1 and str(weights) in fault[0] and "sha256" in fault[0] and str(out) in fault[0]


@pytest.mark.parametrize("kind", ["training .pt", "training .json", "kept result"])
def test_random_bytes_with_the_time_kept_are_found_in_each_kind_of_cached_file(cache, kind):
    if kind == "kept result":
        done = _kept(cache)
        done.save(({"alpha": torch.arange(1000.0)}, ["cpu"]))
        path = done.path
    else:
        training.train(TINY_RUN, progress=False)
        json_path, weights_path = training.run_paths(TINY_RUN)
        path = weights_path if kind.endswith(".pt") else json_path
    _rewrite_keeping_time(path, path.stat().st_size // 2, os.urandom(16))
    run = _verify_cache(cache)
    assert run.returncode == 1
    faults = [line for line in run.stdout.splitlines() if line.startswith("FAULT")]
    assert len(faults) == 1 and str(path) in faults[0], run.stdout


def test_a_nan_weight_recorded_in_its_manifest_is_a_fault(cache):
    weights = torch.ones(64)
    weights[7] = float("nan")
    out = _folder_build(cache, "nan", weights)
    assert cache_check.build_problem(cache_check.cached_builds(cache)[0]) == (
        f"{out / 'model.safetensors'}: w holds 1 non-finite value(s)")
    assert _verify_cache(cache).returncode == 1


def test_a_trained_run_with_a_nan_weight_is_refused_and_trained_again(cache, monkeypatch):
    training.train(TINY_RUN, progress=False)
    _, weights_path = training.run_paths(TINY_RUN)
    state = torch.load(weights_path, weights_only=True)
    name = next(iter(state))
    state[name].view(-1)[0] = float("nan")
    torch.save(state, weights_path)
    training._record_run(TINY_RUN)  # its manifest agrees: only the values say it
    with pytest.raises(training.InputError) as err:
        training.load_trained(TINY_RUN)
    _one_line(str(err.value))
    assert str(weights_path) in str(err.value) and "non-finite" in str(err.value) and name in str(err.value)
    trained = _count_trainings(monkeypatch)
    training.train(TINY_RUN, progress=False)  # the advice of the error works: the run is trained again
    assert trained == [TINY_RUN.key()]
    assert all(torch.isfinite(p).all() for p in training.load_trained(TINY_RUN).parameters())


def test_no_cache_folder_is_one_line(tmp_path):
    run = _verify_cache(tmp_path / "missing")
    assert run.returncode == 2 and "no model cache" in run.stderr
    _one_line(run.stderr)


def test_a_nan_headline_number_fails_the_notebook_and_writes_nothing(tmp_path):
    """A value that does not exist is None at its producer (no sink head, no delimiter); a NaN that reaches the
    headline is a computation that broke: close() raises one line naming it and writes no headline."""
    import numpy as np

    from sinklib.core.errors import NotFiniteResultError
    from sinklib.pipeline import notebook

    nb = notebook.start("00_tour", "smoke", "tiny-llama-random", "cpu", 0, str(tmp_path / "out"), families="llm")
    nb.headline["ratio"] = {"by_layer": np.array([1.0, np.nan]), "never_reached": None}
    with pytest.raises(NotFiniteResultError) as err:
        nb.close()
    _one_line(str(err.value))
    assert "ratio.by_layer[1]" in str(err.value) and "never_reached" not in str(err.value)
    assert not (tmp_path / "out" / "headline.json").exists()
    nb.headline["ratio"]["by_layer"] = np.array([1.0, 2.0])  # None alone is a value that does not exist: written
    nb.close()
    written = json.loads((tmp_path / "out" / "headline.json").read_text())
    assert written["ratio"] == {"by_layer": [1.0, 2.0], "never_reached": None} and "not_finite" not in written
