"""11_moe's protocol: its model list and sizes per profile, the model family it takes, its budget and the steps the
dry run counts (:class:`~sinklib.core.protocol.NotebookProtocol`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sinklib.core.protocol import NotebookProtocol, Step, forwards, models_of
from sinklib.mitigation.protocol import TRAIN_CPU, TRAIN_SMOKE
from sinklib.mitigation.training import TrainConfig
from sinklib.models import tiny_random_hub


@dataclass(frozen=True)
class MoeSizes:
    """11_moe's size knobs in one profile (a :class:`~sinklib.pipeline.profiles.Run` reads them through)."""

    models: tuple[str, ...]  # MoE models: the notebook runs the first; MODEL= runs another
    num_seqs: int  # held-out windows routed and measured
    seq_len: int
    batch_size: int
    eval_seqs: int  # held-out windows for perplexity under pruning
    eval_seq_len: int
    random_draws: int  # random-expert controls per pruning
    control_seqs: int  # windows routed / pruned on the random-weight control (forwards only)
    draw_seqs: int  # windows of each extra draw (seeds seed + 1, seed + 2) for the super-expert claim
    router_train: TrainConfig | None = None  # a MoE trained here with 03's harness (trained_router); None: not run
    router_seeds: int = 3


# Su et al.'s MoE families that fit one 80 GB GPU in bfloat16 (`make figures PROFILE=gpu DRYRUN=1` checks); 11_moe runs
# the first, MODEL= any other (one model per run: a MoE's routing statistics fill the notebook). Mixtral-8x7B
# (46.7B parameters, ~94 GB in bfloat16) needs a larger device: MODEL=mistralai/Mixtral-8x7B-v0.1 GPU_GB=141 (H200).
MOE_MODELS = ("allenai/OLMoE-1B-7B-0924", "Qwen/Qwen1.5-MoE-A2.7B", "deepseek-ai/DeepSeek-V2-Lite")

SMOKE = MoeSizes(models=("smollm2-moe-smoke",), num_seqs=4, seq_len=32, batch_size=4, eval_seqs=2, eval_seq_len=64,
                 random_draws=1, control_seqs=2, draw_seqs=2, router_train=replace(TRAIN_SMOKE, steps=20),
                 router_seeds=2)

SIZES: dict[str, MoeSizes] = {
    "smoke": SMOKE,
    # the trained router (a table, no verdict) on 2 seeds: the cold-cache budget
    "cpu": MoeSizes(models=("smollm2-moe",), num_seqs=32, seq_len=64, batch_size=8, eval_seqs=8, eval_seq_len=256,
                    random_draws=3, control_seqs=4, draw_seqs=4, router_train=TRAIN_CPU, router_seeds=2),
    "gpu": MoeSizes(models=MOE_MODELS, num_seqs=100, seq_len=64, batch_size=4, eval_seqs=64, eval_seq_len=1024,
                    random_draws=5, control_seqs=16, draw_seqs=32, router_train=TRAIN_CPU, router_seeds=3),
    "tiny-gpu": replace(SMOKE, models=tiny_random_hub.MOES),  # the gpu profile's model classes as tiny hub repositories
}


def steps(run: Any, model: str = "") -> list[Step]:
    """The first model of the list (or MODEL=): routing, statistics and hidden states over the windows, the draws
    and the control, then perplexity with experts pruned (Su et al.'s and the random-expert controls)."""
    r, out = run, []
    for m in models_of(r, model, first_only=True):
        out += [Step("routing + statistics + hidden states", m, r.batch_size, r.seq_len, hidden_states=True,
                     calls=forwards(r.num_seqs + 2 * r.draw_seqs + r.control_seqs, r.batch_size) * 2),
                Step("perplexity with experts pruned", m, r.batch_size, r.eval_seq_len, logits=True,
                     calls=forwards(r.eval_seqs, r.batch_size) * (r.random_draws + 4))]
    return out


PROTOCOL = NotebookProtocol(name="11_moe", families=("moe",), sizes=SIZES, cpu_budget_s=60, first_run_s=309,
                            steps=steps)
