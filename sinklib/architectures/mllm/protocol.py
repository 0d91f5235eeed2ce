"""12_mllm's protocol: its model list and sizes per profile, the model family it takes, its budget and the steps the
dry run counts (:class:`~sinklib.core.protocol.NotebookProtocol`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sinklib.core.protocol import NotebookProtocol, Step, forwards, models_of
from sinklib.models import tiny_random_hub


@dataclass(frozen=True)
class MllmSizes:
    """12_mllm's size knobs in one profile (a :class:`~sinklib.pipeline.profiles.Run` reads them through)."""

    models: tuple[str, ...]  # MLLMs: the notebook runs the first; MODEL= runs another
    heldout_digits: int  # digits the projector never saw, with their captions
    zero_shot_digits: int  # digits scored against the 10 digit captions (stand-in sanity check)
    batch_size: int
    random_draws: int  # random-token masking controls
    standin_seeds: int = 1  # stand-ins (projector trained with seed, seed + 1, ...) the claims are judged over
    draw_digits: int = 8  # held-out digits per extra stand-in and for the random-weight control
    draw_random_draws: int = 1  # random-token draws per extra stand-in and for the control


MLLM_MODELS = ("llava-hf/llava-1.5-7b-hf", "HuggingFaceTB/SmolVLM-Instruct", "Qwen/Qwen2-VL-7B-Instruct")

SMOKE = MllmSizes(models=("llava-standin-smoke",), heldout_digits=8, zero_shot_digits=4, batch_size=8,
                  random_draws=1, standin_seeds=1, draw_digits=8, draw_random_draws=1)

SIZES: dict[str, MllmSizes] = {
    "smoke": SMOKE,
    # 2 stand-ins (projectors trained with seeds 0 and 1), 3 before the cold-cache budget
    "cpu": MllmSizes(models=("llava-standin",), heldout_digits=64, zero_shot_digits=40, batch_size=16,
                     random_draws=5, standin_seeds=2, draw_digits=16, draw_random_draws=2),
    "gpu": MllmSizes(models=MLLM_MODELS, heldout_digits=256, zero_shot_digits=0, batch_size=8, random_draws=10,
                     draw_digits=8, draw_random_draws=2),
    "tiny-gpu": replace(SMOKE, models=tiny_random_hub.MLLMS),  # the gpu profile's model classes as tiny hub repositories
}


def steps(run: Any, model: str = "") -> list[Step]:
    """The first model of the list (or MODEL=): caption forwards with attention maps (reduced on the device) over
    the held-out digits and their masking controls, the extra stand-ins and the random-weight control."""
    r = run
    return [Step("caption forward (attention maps)", m, r.batch_size, -1, maps=True, host_maps=False,
                 calls=forwards(r.heldout_digits * (3 + r.random_draws)
                                + 2 * r.draw_digits * (3 + r.draw_random_draws), r.batch_size))
            for m in models_of(r, model, first_only=True)]


PROTOCOL = NotebookProtocol(name="12_mllm", families=("mllm",), sizes=SIZES, cpu_budget_s=90, first_run_s=448,
                            steps=steps)
