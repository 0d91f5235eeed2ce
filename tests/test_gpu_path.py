"""The GPU profile's first run, rehearsed: every notebook end to end through the gpu profile's code path (hub ids
resolved from a hub cache, several model classes per notebook, bfloat16 where the notebook does not fix float32) on
tiny random models of the same classes -- Llama, GPT-2, Mixtral, OLMoE, LLaVA with its processor, DINOv2 with and
without registers, a timm ViT -- with ``device="cuda"`` on a fake CUDA device (:mod:`tests.fake_cuda`,
installed in every kernel by an IPython startup file): a tensor left on the wrong device fails here as it would on
a GPU (profile ``tiny-gpu``). Each notebook once, on one device or on two with every transformers model split over
both (accelerate's ``device_map="balanced"``, so blocks, captures and interventions sit on different devices) and the
notebook given ``device="cuda:1"`` (:data:`ONE_DEVICE`, :data:`TWO_DEVICES`)."""

from __future__ import annotations

import json
from functools import partial

import pytest

from sinklib.core import claims_file
from sinklib.models import tiny_random_hub
from sinklib.pipeline import runner, schedule
from tests import fake_cuda
from tests.kernel_startup import kernel_env

pytestmark = pytest.mark.notebook
NOTEBOOKS = [p for p in runner.discover() if p.stem != "90_scorecard"]


# One sweep, each run on one of two fake machines (two sweeps of every notebook cost make test ~2 minutes more):
# one GPU, device="cuda" (weights moved with .to; 03 trains there), or two GPUs with every transformers model split
# over both by accelerate's device_map="balanced" and the notebook given device="cuda:1" (what make figures JOBS=2
# hands the second notebook on a two-GPU machine). Each model class of the gpu profile's lists runs on one of them:
# the MoE families whose attention differs most (MLA) and the tiled and merged image inputs on two. On two devices
# accelerate's hooks move a module's inputs to its device, which hides a CPU tensor handed to a CUDA module: 13's
# full list runs on one device (its final LayerNorm was once given the CPU capture: it failed on an H200 only).
ONE_DEVICE = {  # key -> (notebook, MODEL=; "" for the profile's list)
    "02_interpretation": ("02", ""), "03_mitigation": ("03", ""), "11_moe": ("11", ""),
    "11_moe:mixtral": ("11", "sinklib-tiny/mixtral"), "13_vit": ("13", ""),
}
TWO_DEVICES = {
    "00_tour": ("00", ""), "01_utilization": ("01", ""), "10_llm": ("10", ""), "12_mllm": ("12", ""),
    "13_vit:dinov2-registers": ("13", "sinklib-tiny/dinov2-registers"),
    "11_moe:deepseek-v2": ("11", "sinklib-tiny/deepseek-v2"),
    "12_mllm:idefics3": ("12", "sinklib-tiny/idefics3"), "12_mllm:qwen2-vl": ("12", "sinklib-tiny/qwen2-vl"),
}


def test_every_notebook_is_rehearsed():
    assert {k.split(":")[0] for k in ONE_DEVICE | TWO_DEVICES} == {p.stem for p in NOTEBOOKS}
    assert not set(ONE_DEVICE) & set(TWO_DEVICES)


# Estimated seconds per run (one thread, beside another run): the session's pool starts the longest first.
RUN_SECONDS = {"13_vit": 48, "12_mllm:qwen2-vl": 42, "11_moe:deepseek-v2": 37, "00_tour": 37, "12_mllm": 36,
               "10_llm": 36, "12_mllm:idefics3": 36, "02_interpretation": 35, "01_utilization": 34,
               "13_vit:dinov2-registers": 30}


def plan_jobs(tmp_path_factory) -> dict:
    """Every (notebook, MODEL=) of :data:`ONE_DEVICE` and :data:`TWO_DEVICES` on the tiny-gpu profile, with the
    tiny models' hub cache written first: key -> (estimated seconds, call returning (result, figures folder, executed
    notebook, number of fake devices))."""
    root = tmp_path_factory.getbasetemp() / "tiny_gpu"
    hub = root / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    tiny_random_hub.write_hub_cache(hub)
    base = {**runner.thread_env(1), "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    one = {**base, **kernel_env(root / "ipython-1", fake_cuda=1)}
    two = {**base, **kernel_env(root / "ipython-2", fake_cuda=2), "SINKLIB_DEVICE_MAP": "balanced"}
    return ({f"tiny-gpu:{key}": (RUN_SECONDS.get(key, 30), partial(_run, root, key, nb, model, "cuda", one, 1))
             for key, (nb, model) in ONE_DEVICE.items()}
            | {f"tiny-gpu:{key}": (RUN_SECONDS.get(key, 30), partial(_run, root, key, nb, model, "cuda:1", two, 2))
               for key, (nb, model) in TWO_DEVICES.items()})


def _run(root, key: str, nb: str, model: str, device: str, env: dict, n_devices: int):
    book = runner.discover(only=[nb])[0]
    out = root / key.replace(":", "-")
    res = runner.run_isolated(book, env=env, profile="tiny-gpu", model=model, device=device, seed=0,
                              figures_dir=out / "figures", build_dir=out / "build", progress_bar=False)
    return res, out / "figures" / book.stem, out / "build" / "notebooks" / book.name, n_devices


@pytest.fixture(scope="module")
def tiny_gpu_run(jobs):
    """key -> (result, folder, executed notebook, number of fake devices) of every run."""
    return {key: jobs.result(f"tiny-gpu:{key}") for key in ONE_DEVICE | TWO_DEVICES}


LOADED = {"10_llm": tiny_random_hub.LLMS, "11_moe": tiny_random_hub.MOES[:1], "11_moe:mixtral": ("sinklib-tiny/mixtral",),
          "12_mllm": tiny_random_hub.MLLMS[:1], "13_vit": tiny_random_hub.VITS[:1]}  # 11 and 12 run their list's first model
SPLIT = {"10_llm": {"sinklib-tiny/llama"}, "12_mllm": {"sinklib-tiny/llava"}} | {
    key: {model} for key, (_, model) in TWO_DEVICES.items() if model}  # others: the profile's model


@pytest.mark.parametrize("stem", list(ONE_DEVICE | TWO_DEVICES))
def test_notebook_runs_the_gpu_code_path_on_tiny_models(tiny_gpu_run, stem):
    res, folder, executed, n_devices = tiny_gpu_run[stem]
    assert res.ok, res.message
    headline = json.loads((folder / "headline.json").read_text())
    assert headline["profile"] == "tiny-gpu" and headline["fake_cuda_devices"] == n_devices
    assert headline["device"] == ("cuda" if n_devices == 1 else "cuda:1")
    assert list(folder.glob("*.png"))
    text = executed.read_text()
    models = LOADED.get(stem, ())  # every model class of the list was loaded and measured
    assert all(m in text for m in models), [m for m in models if m not in text]
    if stem == "13_vit":  # section 6 measured every ViT of the list (by label: "dinov2-registers", "timm/...")
        assert len(headline["models"]) == len(tiny_random_hub.VITS)
    if (folder / "claims.json").exists():
        assert all(c.profile == "tiny-gpu" for c in claims_file.load(folder / "claims.json"))
    if n_devices == 2 and stem != "03_mitigation":  # the weights sit on both devices
        devices = headline["devices"]
        split = SPLIT.get(stem, {"sinklib-tiny/llama"})
        assert all(devices[m] == ["cuda:0", "cuda:1"] for m in split), devices


def test_jobs_give_each_notebook_its_own_gpu():
    with fake_cuda.fake_cuda(2):
        assert schedule.gpu_slots("gpu", "", 2) == ["cuda:0", "cuda:1"]
        assert schedule.gpu_slots("gpu", "", 4) == ["cuda:0", "cuda:1"]  # no more notebooks at once than GPUs
        assert schedule.gpu_slots("gpu", "cuda:0", 2) == []  # a device named by the user is kept
        assert schedule.gpu_slots("gpu", "", 1) == []
        assert schedule.gpu_slots("cpu", "", 2) == []  # the cpu profile stays on the CPU
    with fake_cuda.fake_cuda(1):
        assert schedule.gpu_slots("gpu", "", 2) == []
    assert schedule.gpu_slots("gpu", "", 2) == []  # no CUDA at all
