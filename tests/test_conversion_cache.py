"""The converted-model cache (issue 27): a build leaves the caller's random numbers alone, two processes never build
one model at once, and what it writes keeps the user's umask."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
import torch
from helpers import in_two_processes

from sinklib.models import conversion, stitch


def _draws_and_writes(out: Path) -> None:
    out.mkdir(parents=True)
    torch.randn(1000)  # like Dinov2Model(config) inside the ONNX conversion: draws from the global RNG
    fd = os.open(out / "model.safetensors", os.O_CREAT | os.O_WRONLY, 0o600)  # like a writer that uses 0600
    os.write(fd, b"w")
    os.close(fd)


def test_a_build_leaves_the_global_rng_where_a_warm_cache_would(monkeypatch, tmp_path):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    torch.manual_seed(0)
    cold_path = conversion.build_once("m", _draws_and_writes)  # built now
    after_cold = torch.randn(3)
    torch.manual_seed(0)
    warm_path = conversion.build_once("m", _draws_and_writes)  # read from the cache
    after_warm = torch.randn(3)
    assert cold_path == warm_path and torch.equal(after_cold, after_warm)


def test_built_files_get_the_users_umask(monkeypatch, tmp_path):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    old = os.umask(0o022)
    try:
        folder = conversion.build_once("m", _draws_and_writes)
    finally:
        os.umask(old)
    assert stat.S_IMODE((folder / "model.safetensors").stat().st_mode) == 0o644  # not 0600: a group can read it
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # not tempfile's 0700


def _slow_build(out: Path) -> None:
    log = Path(os.environ["SINKLIB_CACHE"]) / "builds.log"
    with log.open("a") as f:
        f.write(f"start {os.getpid()}\n")
    time.sleep(1.0)
    out.mkdir(parents=True)
    (out / "weights").write_text(str(os.getpid()))
    with log.open("a") as f:
        f.write(f"end {os.getpid()}\n")


def _build_in_process(cache: str, queue) -> None:
    os.environ["SINKLIB_CACHE"] = cache
    try:
        folder = conversion.build_once("shared", _slow_build)
        queue.put((folder / "weights").read_text())
    except Exception as err:  # reported to the test instead of a silent child crash
        queue.put(f"error: {err!r}")


def test_two_processes_build_one_model_once(tmp_path):
    results = in_two_processes(_build_in_process, str(tmp_path))
    assert not any(r.startswith("error") for r in results), results
    assert results[0] == results[1]  # both read the one build
    log = (tmp_path / "builds.log").read_text().split()
    assert log.count("start") == 1, log  # the second process waited for the lock and found the model built


def test_the_standin_projector_starts_from_its_seed_whatever_ran_before(monkeypatch, tmp_path):
    """build_standin seeds the projector's initialisation: two builds after different global RNG histories (one
    converted DINOv2 first, one found it cached) assemble the same projector."""
    seen = []

    def fake_assemble(vision_dir, text_dir, image_size):
        seen.append(torch.nn.Linear(4, 4).weight.detach().clone())  # what LlavaForConditionalGeneration(config) draws
        raise StopIteration  # stop before training

    monkeypatch.setattr(stitch, "assemble", fake_assemble)
    monkeypatch.setattr(conversion, "build_once", lambda name, build: tmp_path)
    monkeypatch.setattr(conversion, "convert_gguf", lambda name: tmp_path)
    for history in (0, 5):
        torch.manual_seed(123)
        torch.randn(history)
        try:
            stitch.build_standin(tmp_path / "out", stitch.StitchConfig(seed=1))
        except StopIteration:
            pass
    assert torch.equal(seen[0], seen[1])


@pytest.mark.real_model
@pytest.mark.parametrize("name", ["dinov2-s", "smollm2-135m"])
def test_a_fresh_conversion_equals_the_cached_one(name, monkeypatch, tmp_path):
    """Convert into an empty cache and compare every tensor with the shared cache's copy, bit for bit: a notebook that
    converts a model during a cold run computes with the same weights as one that finds it cached."""
    from safetensors.torch import load_file

    from sinklib.models.load import load_model

    load_model(name, device="cpu")  # the shared cache's copy (converted now if missing)
    cached = load_file(conversion.converted_path(name) / "model.safetensors")
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    load_model(name, device="cpu")
    fresh = load_file(conversion.converted_path(name) / "model.safetensors")
    assert conversion.converted_path(name).is_relative_to(tmp_path) and fresh.keys() == cached.keys()
    assert all(torch.equal(fresh[k], cached[k]) for k in cached)
