"""One home per notebook: every notebook has exactly one protocol module, in the folder of its research code, and the
profiles, the runner and the plan read each notebook's sizes, families, budget and steps from it."""

from __future__ import annotations

from dataclasses import fields, is_dataclass, replace

import pytest
from test_layout import NOTEBOOK_FOLDER

from sinklib.core.protocol import NotebookProtocol, forwards, models_of
from sinklib.models import tiny_random_hub
from sinklib.pipeline import profiles, protocols, runner

BOOKS = [b.stem for b in runner.discover()]
FAMILIES = {"llm", "moe", "mllm", "vit"}
TINY = {"10_llm": tiny_random_hub.LLMS, "11_moe": tiny_random_hub.MOES, "12_mllm": tiny_random_hub.MLLMS, "13_vit": tiny_random_hub.VITS}


def test_every_notebook_has_exactly_one_protocol_and_every_protocol_a_notebook():
    assert list(protocols.PROTOCOLS) == BOOKS  # in the notebooks' numbered order
    assert all(name == p.name for name, p in protocols.PROTOCOLS.items())


@pytest.mark.parametrize("name", BOOKS)
def test_a_notebooks_protocol_lives_beside_its_research_code(name):
    folder = {**NOTEBOOK_FOLDER, "00": "utilization", "90": "reproduction"}[name[:2]]
    home = protocols.HOMES[name]
    assert home.rpartition(".")[0] == f"sinklib.{folder}", home
    assert home.rpartition(".")[2] in ("protocol", f"{name[3:]}_protocol")


@pytest.mark.parametrize("name", BOOKS)
def test_a_protocol_has_sizes_for_every_profile_or_none_and_known_families(name):
    p = protocols.PROTOCOLS[name]
    assert set(p.families) <= FAMILIES
    assert not p.sizes or list(p.sizes) == list(profiles.PROFILES)
    assert all(is_dataclass(s) for s in p.sizes.values())
    assert set(p.cuts) <= set(profiles.PROFILES)
    assert p.cpu_budget_s and p.cpu_budget_s > 0
    lists = [s.models for s in p.sizes.values() if "models" in {f.name for f in fields(s)}]
    assert not lists or p.families  # a notebook with model lists takes a family (model_family reads them)


@pytest.mark.parametrize("name", BOOKS)
def test_tiny_gpu_is_smoke_with_the_gpu_profiles_model_classes(name):
    """The tiny-gpu sizes are the smoke sizes; the architecture notebooks list the tiny hub's models, 03 trains in the
    gpu profile's shape (RoPE, its data and precision, micro-batches, no text check)."""
    sizes = protocols.PROTOCOLS[name].sizes
    if not sizes:
        return
    smoke, tiny = sizes["smoke"], sizes["tiny-gpu"]
    if name in TINY:
        assert tiny.models == TINY[name] and replace(tiny, models=smoke.models) == smoke
    elif name == "03_mitigation":
        gpu = sizes["gpu"].train
        assert tiny.text_check is None and tiny.train.micro_batch == 4
        assert (tiny.train.model.rope_theta, tiny.train.data, tiny.train.precision) == (
            gpu.model.rope_theta, gpu.data, gpu.precision)
        assert replace(tiny.train, model=smoke.train.model, data=smoke.train.data, precision=smoke.train.precision,
                       micro_batch=smoke.train.micro_batch) == smoke.train
    else:
        assert tiny is smoke


def test_a_run_reads_its_notebooks_sizes_and_names_their_home(tmp_path):
    run = profiles.resolve("cpu", None, None, 0, tmp_path, notebook="10_llm")
    assert run.sizes is protocols.PROTOCOLS["10_llm"].sizes["cpu"] and run.num_seqs == run.sizes.num_seqs
    with pytest.raises(AttributeError, match=r"10_llm has no size 'train' in sinklib\.architectures\.llm\.protocol"):
        getattr(run, "train")  # noqa: B009 -- the attribute access is the test
    stray = profiles.resolve("cpu", None, None, 0, tmp_path, notebook="77_stray")
    assert stray.sizes is None
    with pytest.raises(AttributeError, match="77_stray has no size 'num_seqs' in any protocol module"):
        getattr(stray, "num_seqs")  # noqa: B009


def test_a_notebook_without_a_protocol_has_nothing_but_the_default_families(tmp_path):
    p = protocols.protocol("77_stray")
    assert (p.families, dict(p.sizes), dict(p.cuts), p.cpu_budget_s, p.first_run_s, p.dtype) == (
        ("llm", "moe"), {}, {}, None, None, None)
    assert p.steps(profiles.resolve("cpu", None, None, 0, tmp_path, notebook="77_stray"), "") == []
    assert protocols.model_for("77_stray", "meta-llama/Llama-2-7b-hf", "llm") == "meta-llama/Llama-2-7b-hf"


def test_the_models_of_a_run_and_its_forwards(tmp_path):
    run = profiles.resolve("gpu", None, None, 0, tmp_path, notebook="11_moe")
    assert models_of(run, "") == run.models and models_of(run, "", first_only=True) == run.models[:1]
    assert models_of(run, "x/y") == ("x/y",)
    tour = profiles.resolve("gpu", None, None, 0, tmp_path, notebook="00_tour")
    assert models_of(tour, "") == ("meta-llama/Llama-2-7b-hf",)  # no list: the profile's model
    assert (forwards(0, 8), forwards(8, 8), forwards(9, 8), forwards(3, 0)) == (1, 1, 2, 3)


def test_protocol_modules_are_found_by_name_and_core_is_not_one(tmp_path):
    root = tmp_path / "sinklib"
    for rel in ("core/protocol.py", "utilization/protocol.py", "utilization/tour_protocol.py",
                "architectures/vit/protocol.py", "reproduction/protocol.py", "pipeline/protocols.py",
                "mitigation/protocols_extra.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    assert protocols.protocol_modules(root) == [
        "sinklib.architectures.vit.protocol", "sinklib.reproduction.protocol", "sinklib.utilization.protocol",
        "sinklib.utilization.tour_protocol"]


def test_the_record_is_plain_data():
    p = NotebookProtocol("99_new", families=("llm",))
    assert p.steps(None, "") == [] and dict(p.sizes) == {} and p.dtype is None
