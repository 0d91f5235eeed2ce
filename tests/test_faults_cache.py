"""A corrupted cache never gives wrong numbers (issue 45, item 4): every cached build -- a converted model folder, a
training run's JSON + ``.pt``, a kept per-model result -- carries a manifest (sizes, sha256, recipe) written last; a
cache entry that does not match it is rebuilt once with a one-line note, or stops with one line naming the file and
the command. Small builds in a temporary ``SINKLIB_CACHE``; no real conversion."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from helpers import in_two_processes
from safetensors.torch import load_file, save_file

from sinklib.core import manifest
from sinklib.mitigation import training
from sinklib.mitigation.variant_lm import TinyConfig
from sinklib.models import conversion
from sinklib.pipeline import model_results, profiles

WEIGHTS = torch.arange(4096, dtype=torch.float32)  # 16 KB of float32, none of them zero but the first


def _tiny_build(out: Path) -> None:
    """A stand-in for a conversion: config.json + model.safetensors, and one line in ``builds.log`` per build."""
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    save_file({"w": WEIGHTS}, out / "model.safetensors")
    with (Path(os.environ["SINKLIB_CACHE"]) / "builds.log").open("a") as log:
        log.write(f"start {os.getpid()}\n")


def _builds(cache: Path) -> int:
    log = cache / "builds.log"
    return log.read_text().split().count("start") if log.exists() else 0


def _zero_bytes(path: Path, start: int, count: int) -> None:
    """Overwrite ``count`` bytes at ``start`` with zeros in place: same size, and (as any write) a new mtime."""
    with path.open("r+b") as f:
        f.seek(start)
        f.write(bytes(count))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))  # a coarse clock could leave the mtime unchanged


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    return tmp_path


def _one_line(text: str) -> None:
    assert text and "\n" not in text.strip() and "Traceback" not in text, text


# --- converted model folders (build_once / convert_gguf) ------------------------------------------------------------


def test_zeroed_bytes_in_a_cached_build_are_rebuilt_once_with_a_note(cache, capsys):
    folder = conversion.build_once("m", _tiny_build)
    _zero_bytes(folder / "model.safetensors", 200, 4000)  # the tensor's data: the file still parses
    assert not torch.equal(load_file(folder / "model.safetensors")["w"], WEIGHTS)  # the silent wrong number
    capsys.readouterr()
    again = conversion.build_once("m", _tiny_build)
    assert again == folder and _builds(cache) == 2  # rebuilt once
    assert torch.equal(load_file(again / "model.safetensors")["w"], WEIGHTS)
    note = capsys.readouterr().err.strip()
    _one_line(note)
    assert "model.safetensors" in note and "rebuild" in note
    assert conversion.build_once("m", _tiny_build) == folder and _builds(cache) == 2  # and then it is current


@pytest.mark.parametrize("fault", ["truncated weights", "deleted config", "emptied config"])
def test_a_truncated_or_missing_file_is_caught_before_loading_and_rebuilt(cache, capsys, fault):
    folder = conversion.build_once("m", _tiny_build)
    if fault == "truncated weights":
        with (folder / "model.safetensors").open("r+b") as f:
            f.truncate(1000)
    elif fault == "deleted config":
        (folder / "config.json").unlink()
    else:
        (folder / "config.json").write_text("")
    capsys.readouterr()
    conversion.build_once("m", _tiny_build)
    assert _builds(cache) == 2
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama"
    assert torch.equal(load_file(folder / "model.safetensors")["w"], WEIGHTS)
    note = capsys.readouterr().err.strip()
    _one_line(note)
    assert ("model.safetensors" if fault == "truncated weights" else "config.json") in note


def test_a_corrupted_gguf_conversion_loads_the_right_weights_again(cache, monkeypatch):
    """End to end through ``load_model``: the corrupted converted SmolLM2 of the issue (a tiny Llama stands in for
    the GGUF's dequantised weights) gives the logits of a clean build, not wrong numbers."""
    from sinklib.models import load

    def fake_dequantise(name: str, out: Path) -> None:
        model, tokenizer = load._tiny_llama(0, None)
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)

    monkeypatch.setattr(conversion, "_dequantise", fake_dequantise)
    ids = torch.tensor([[1, 5, 9, 13, 17]])
    first = load.load_model("smollm2-135m", device="cpu")
    with torch.no_grad():
        clean = first.model(ids).logits
    weights = conversion.converted_path("smollm2-135m") / "model.safetensors"
    _zero_bytes(weights, weights.stat().st_size // 2, weights.stat().st_size // 4)
    again = load.load_model("smollm2-135m", device="cpu")
    with torch.no_grad():
        assert torch.equal(again.model(ids).logits, clean)


def test_a_build_that_cannot_be_redone_stops_with_one_line_naming_the_file_and_the_command(cache):
    from sinklib.core.errors import OfflinePackageMissingError, SinklibError

    folder = conversion.build_once("m", _tiny_build)
    _zero_bytes(folder / "model.safetensors", 200, 100)

    def missing_package(out: Path) -> None:
        raise OfflinePackageMissingError("the offline package 'x' is not installed; run `make offline`")

    with pytest.raises(SinklibError) as err:
        conversion.build_once("m", missing_package)
    message = str(err.value)
    _one_line(message)
    assert str(folder / "model.safetensors") in message and "make offline" in message and "rm -rf" in message


def test_a_cache_that_is_read_only_stops_with_one_line_instead_of_loading_a_corrupted_file(cache, monkeypatch):
    from sinklib.core.errors import SinklibError

    folder = conversion.build_once("m", _tiny_build)
    _zero_bytes(folder / "model.safetensors", 200, 100)
    real_access = os.access
    monkeypatch.setattr(conversion.os, "access", lambda p, mode: False if Path(p) == folder.parent
                        else real_access(p, mode))
    with pytest.raises(SinklibError) as err:
        conversion.build_once("m", _tiny_build)
    _one_line(str(err.value))
    assert "model.safetensors" in str(err.value) and "SINKLIB_CACHE" in str(err.value) and _builds(cache) == 1


def test_a_new_recipe_rebuilds_and_an_untouched_copy_is_hashed_once(cache, monkeypatch):
    folder = conversion.build_once("m", _tiny_build, recipe="v1")
    conversion.build_once("m", _tiny_build, recipe="v2")
    assert _builds(cache) == 2  # the manifest records the recipe: a changed one is a stale build
    weights = folder / "model.safetensors"
    st = weights.stat()
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000))  # as a copy without -p would: same bytes
    hashed = []
    real = manifest.sha256_of
    monkeypatch.setattr(manifest, "sha256_of", lambda path: hashed.append(Path(path).name) or real(path))
    conversion.build_once("m", _tiny_build, recipe="v2")
    conversion.build_once("m", _tiny_build, recipe="v2")
    assert _builds(cache) == 2 and hashed == ["model.safetensors"]  # hashed once, then its new mtime is recorded


def test_a_folder_without_a_manifest_is_rebuilt(cache, capsys):
    """An interrupted build (or one by a sinklib older than manifests) has no manifest: rebuilt once, with a note."""
    old = conversion.converted_path("unrecorded")
    _tiny_build(old)  # files, no manifest
    assert conversion.build_once("unrecorded", _tiny_build) == old and _builds(cache) == 2
    assert (old / manifest.MANIFEST).exists() and "rebuilding" in capsys.readouterr().err


def _build_in_process(cache: str, queue) -> None:
    os.environ["SINKLIB_CACHE"] = cache

    def slow(out: Path) -> None:
        _tiny_build(out)
        time.sleep(0.5)

    try:
        folder = conversion.build_once("shared", slow)
        queue.put(float(load_file(folder / "model.safetensors")["w"].sum()))
    except Exception as err:  # reported to the test instead of a silent child crash
        queue.put(f"error: {err!r}")


def test_two_processes_finding_one_corrupted_build_rebuild_it_once(cache):
    folder = conversion.build_once("shared", _tiny_build)
    _zero_bytes(folder / "model.safetensors", 200, 4000)
    results = in_two_processes(_build_in_process, str(cache))
    assert results == [float(WEIGHTS.sum())] * 2, results
    assert _builds(cache) == 2  # the first build, then one rebuild: the second process found it repaired


# --- training runs (JSON + .pt) ------------------------------------------------------------------------------------

TINY_RUN = training.TrainConfig(model=TinyConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=16), steps=2,
                                batch_size=2, seq_len=16, warmup=1, eval_every=2, eval_seqs=2, data="bigram_backcopy")


def _count_trainings(monkeypatch) -> list[str]:
    seen: list[str] = []
    real = training._train

    def counted(cfg, *args, **kwargs):
        seen.append(cfg.key())
        return real(cfg, *args, **kwargs)

    monkeypatch.setattr(training, "_train", counted)
    return seen


def test_garbage_in_a_training_json_is_retrained_with_a_note(cache, monkeypatch, capsys):
    first = training.train(TINY_RUN, progress=False)
    json_path, _ = training.run_paths(TINY_RUN)
    json_path.write_text("{not json")
    trained = _count_trainings(monkeypatch)
    capsys.readouterr()
    again = training.train(TINY_RUN, progress=False)
    assert trained == [TINY_RUN.key()] and again["key"] == first["key"]
    note = capsys.readouterr().err.strip()
    _one_line(note)
    assert json_path.name in note
    assert training.train(TINY_RUN, progress=False)["key"] == again["key"] and len(trained) == 1  # complete again


def test_a_deleted_training_pt_makes_the_run_incomplete_and_it_is_retrained(cache, monkeypatch):
    training.train(TINY_RUN, progress=False)
    _, weights_path = training.run_paths(TINY_RUN)
    weights_path.unlink()
    with pytest.raises(training.InputError) as err:
        training.load_trained(TINY_RUN)
    _one_line(str(err.value))
    assert weights_path.name in str(err.value)
    trained = _count_trainings(monkeypatch)
    training.train(TINY_RUN, progress=False)  # the advice of the error works: the run is trained again
    assert trained == [TINY_RUN.key()] and weights_path.exists()
    assert isinstance(training.load_trained(TINY_RUN), torch.nn.Module)


def test_garbage_in_a_training_pt_is_one_line_naming_the_file(cache, monkeypatch):
    training.train(TINY_RUN, progress=False)
    _, weights_path = training.run_paths(TINY_RUN)
    weights_path.write_bytes(b"garbage" * 100)
    with pytest.raises(training.InputError) as err:
        training.load_trained(TINY_RUN)
    _one_line(str(err.value))
    assert str(weights_path) in str(err.value)
    trained = _count_trainings(monkeypatch)
    training.train(TINY_RUN, progress=False)
    assert trained == [TINY_RUN.key()] and isinstance(training.load_trained(TINY_RUN), torch.nn.Module)


def test_a_training_run_without_its_manifest_is_trained_again(cache, monkeypatch):
    training.train(TINY_RUN, progress=False)
    training.run_manifest(TINY_RUN).unlink()  # an interrupted save, or a run cached by an older sinklib
    trained = _count_trainings(monkeypatch)
    training.train(TINY_RUN, progress=False)
    assert trained == [TINY_RUN.key()] and training.run_manifest(TINY_RUN).exists()


# --- kept per-model results ----------------------------------------------------------------------------------------


def _kept(cache: Path) -> model_results.KeptWork:
    run = profiles.resolve("smoke", None, None, 0, cache / "out", notebook="10_llm")
    return model_results.KeptWork.for_model(run, "org/model")


@pytest.mark.parametrize("fault", ["garbage", "zeroed"])
def test_a_corrupted_kept_result_counts_as_missing_with_a_note(cache, capsys, fault):
    done = _kept(cache)
    done.save(({"alpha": torch.arange(1000.0)}, ["cpu"]))
    if fault == "garbage":
        done.path.write_bytes(b"\x80garbage")
    else:
        _zero_bytes(done.path, done.path.stat().st_size // 2, 64)
    capsys.readouterr()
    assert not done.exists()  # measured again instead of read
    note = capsys.readouterr().err.strip()
    _one_line(note)
    assert str(done.path) in note
    done.save(({"alpha": torch.arange(1000.0)}, ["cpu"]))
    assert done.exists() and torch.equal(done.load()[0]["alpha"], torch.arange(1000.0))


def test_an_unreadable_kept_result_is_one_line_naming_the_file(cache, monkeypatch):
    from sinklib.core.errors import SinklibError

    done = _kept(cache)
    done.save({"alpha": 1.0})
    monkeypatch.setattr(model_results.torch, "load", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("bad zip\nmore")))
    with pytest.raises(SinklibError) as err:
        done.load()
    _one_line(str(err.value))
    assert str(done.path) in str(err.value)


def test_an_unwritable_or_full_cache_stops_with_one_line(tmp_path, monkeypatch):
    """Item 7: a read-only empty cache and a full cache during conversion gave raw tracebacks."""
    import errno

    from sinklib.core.errors import InputError
    from sinklib.models import conversion

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("SINKLIB_CACHE", str(blocked / "cache"))
    with pytest.raises(InputError, match="cannot be written.*SINKLIB_CACHE") as err:
        conversion.build_once("tiny-test", _tiny_build)
    _one_line(str(err.value))
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path / "cache"))

    def full(out: Path) -> None:
        out.mkdir(parents=True)
        (out / "model.safetensors").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(InputError, match="No space left on device.*SINKLIB_CACHE") as err:
        conversion.build_once("tiny-test", full)
    _one_line(str(err.value))
    converted = tmp_path / "cache" / "converted"
    assert not (converted / "tiny-test").exists() and not list(converted.glob(".tiny-test-*"))  # nothing half-built
