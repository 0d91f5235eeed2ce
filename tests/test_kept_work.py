"""Work is kept as it goes (issue 30, item 3): a notebook over several models writes each model's results when that
model is done; a failure on a later model keeps the earlier ones, and a rerun skips them."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest

from sinklib.models import tiny_random_hub
from sinklib.pipeline import model_results, profiles, runner


def test_kept_work_round_trips_and_its_key_follows_what_the_result_depends_on(tmp_path, monkeypatch):
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path))
    run = profiles.resolve("smoke", None, None, 0, tmp_path / "out", notebook="10_llm")
    done = model_results.KeptWork.for_model(run, "org/model")
    assert not done.exists() and "org--model-" in done.path.name
    done.save({"alpha": [0.5, 0.25]})
    assert done.exists() and done.load() == {"alpha": [0.5, 0.25]}
    assert not list(done.path.parent.glob("*.tmp*"))  # written through a temporary file, then renamed
    assert model_results.KeptWork.for_model(run, "org/model") == done  # the same run finds it
    other_sizes = replace(run, sizes=replace(run.sizes, num_seqs=run.sizes.num_seqs + 1))
    assert model_results.KeptWork.for_model(other_sizes, "org/model") != done
    assert model_results.KeptWork.for_model(replace(run, seed=1), "org/model") != done
    assert model_results.KeptWork.for_model(replace(run, device="cuda"), "org/model") != done
    monkeypatch.setenv("SINKLIB_DEVICE_MAP", "balanced")
    assert model_results.KeptWork.for_model(run, "org/model") != done


@pytest.mark.notebook
def test_a_failure_on_a_later_model_keeps_the_earlier_ones_and_a_rerun_skips_them(tmp_path, monkeypatch):
    full = tmp_path / "hub"
    tiny_random_hub.write_hub_cache(full)
    partial = tmp_path / "hub-without-gpt2"
    shutil.copytree(full, partial)
    shutil.rmtree(partial / "models--sinklib-tiny--gpt2")  # the list's second model is missing
    monkeypatch.setenv("SINKLIB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (llm,) = runner.discover(only=["10"])
    assert tiny_random_hub.LLMS == ("sinklib-tiny/llama", "sinklib-tiny/gpt2")

    def run_10(hub, out):
        monkeypatch.setenv("HF_HUB_CACHE", str(hub))
        return runner.run_notebook(llm, profile="tiny-gpu", model="", device="cpu", seed=0,
                                   figures_dir=tmp_path / out / "figures", build_dir=tmp_path / out / "build")

    failed = run_10(partial, "first")
    assert not failed.ok and "sinklib-tiny/gpt2" in failed.message
    saved = list((tmp_path / "cache" / "kept" / "10_llm").glob("*.pt"))
    assert len(saved) == 1 and saved[0].name.startswith("sinklib-tiny--llama-")  # the first model's results
    again = run_10(full, "second")
    assert again.ok, again.message
    text = (tmp_path / "second" / "build" / "notebooks" / llm.name).read_text()
    assert "sinklib-tiny/llama: measured by an earlier run" in text
    assert "sinklib-tiny/gpt2: measured by an earlier run" not in text
    assert len(list((tmp_path / "cache" / "kept" / "10_llm").glob("*.pt"))) == 2
    headline = json.loads((tmp_path / "second" / "figures" / "10_llm" / "headline.json").read_text())
    assert set(headline["devices"]) == set(tiny_random_hub.LLMS)  # where each ran, read back with its results
