"""03_mitigation's protocol: the training settings per profile, what the gpu profile cut, its budget and the steps
the dry run counts (:class:`~sinklib.core.protocol.NotebookProtocol`). 11_moe's trained router reuses the settings
(:data:`TRAIN_SMOKE`, :data:`TRAIN_CPU`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sinklib.core.protocol import NotebookProtocol, Step
from sinklib.mitigation.training import TrainConfig
from sinklib.mitigation.variant_lm import TinyConfig


@dataclass(frozen=True)
class MitigationSizes:
    """03_mitigation's size knobs in one profile (a :class:`~sinklib.pipeline.profiles.Run` reads them through)."""

    train: TrainConfig  # the setting every attention variant is trained in
    train_seeds: int  # seeds per variant (seed, seed + 1, ...)
    text_check: TrainConfig | None  # the same model on real text, for the head-wise RMSNorm convergence check
    text_seeds: int = 0  # seeds of the text check (0: train_seeds)


# CPU: the smallest setting found in which the softmax baseline reliably grows a BOS sink on 2 cores --
# bigram-backcopy (Guo et al., arXiv 2410.13835), 2 layers x 2 heads, d = 64, no positional encoding, 600 steps of
# 64 x 64 tokens (~35-45 s a run). Searched and rejected: Bible bytes with 4 layers, d = 128, RoPE or NoPE,
# T = 128-256, lr 1e-3..1e-2, up to 3,000 steps (alpha_0 stayed at uniform, 0.02-0.04); 2 layers NoPE on Bible bytes
# (0.03-0.09); bigram-backcopy with RoPE (weak and seed-dependent, alpha_0 0.03-0.29). In the chosen setting a head
# first exceeds alpha_0 0.3 at step 450 / 500 (seeds 0 / 1); at step 600 the mean alpha_0 is 0.25 and the sink rate
# 38% (800 steps: 0.31 and 50%, but 19 minutes for the notebook instead of ~13); uniform attention gives 0.074.
TRAIN_SMOKE = TrainConfig(model=TinyConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, max_len=32, rope_theta=0.0),
                          steps=20, batch_size=8, seq_len=32, lr=3e-3, warmup=5, eval_every=10, eval_seqs=8,
                          data="bigram_backcopy")
TRAIN_CPU = TrainConfig(model=TinyConfig(d_model=64, n_layers=2, n_heads=2, d_ff=172, max_len=64, rope_theta=0.0),
                        steps=600, batch_size=64, seq_len=64, lr=3e-3, warmup=40, weight_decay=0.1, eval_every=50,
                        eval_seqs=32, data="bigram_backcopy", precision="bf16")
# bfloat16 autocast as the GPU profile (weights and AdamW float32; measurements read the float32 weights outside it):
# a step costs about half of float32's on a CPU with AVX512-BF16, the largest part of the cold-cache budget.
# GPU: the structural-origin paper's scale by parameter (Llama-2-style, 12 x 768, RoPE, T = 1024; ~85M parameters
# with a byte vocabulary). Point ``data`` at an OpenWebText-like dump with data="file:<path>". Sized to the 6
# GPU-hour budget by the plan calibrated on an H200 (a step took 0.11-0.32 s there, 2-3x the former
# assumption; CUTS below): 3,000 steps of 16 x 1024 tokens in bfloat16 autocast, in micro-batches of 8 so that
# softpick's saved (B, H, T, T) tensors fit 80 GB (151 GB at 32 x 1024 in one piece; `make figures PROFILE=gpu
# DRYRUN=1` counts them per variant).
TRAIN_GPU = TrainConfig(model=TinyConfig(d_model=768, n_layers=12, n_heads=12, d_ff=2048, max_len=1024),
                        steps=3000, batch_size=16, seq_len=1024, lr=6e-4, warmup=500, weight_decay=0.1,
                        eval_every=250, eval_seqs=8, data="bible", precision="bf16", micro_batch=8)

SMOKE = MitigationSizes(train=TRAIN_SMOKE, train_seeds=2, text_check=replace(TRAIN_SMOKE, data="bible"))

SIZES: dict[str, MitigationSizes] = {
    "smoke": SMOKE,
    # 2 seeds a variant (the GPU profile 3): the cold-cache budget; each verdict of the 3-seed reference run was the
    # same on its first two seeds
    "cpu": MitigationSizes(train=TRAIN_CPU, train_seeds=2, text_check=replace(TRAIN_CPU, data="bible"),
                           text_seeds=2),
    "gpu": MitigationSizes(train=TRAIN_GPU, train_seeds=3, text_check=None),
    # the smoke sizes in the gpu profile's training shape (RoPE, its data and precision, micro-batches; no text check)
    "tiny-gpu": replace(SMOKE, train=replace(TRAIN_SMOKE, model=replace(TRAIN_SMOKE.model,
                                                                        rope_theta=TRAIN_GPU.model.rope_theta),
                                             data=TRAIN_GPU.data, precision=TRAIN_GPU.precision, micro_batch=4),
                        text_check=None),
}

# What the gpu profile cut from the papers' protocols to fit 6 GPU-hours on one 80 GB GPU.
CUTS: dict[str, str] = {
    "gpu": "3 seeds x 3,000 steps of 16 x 1024 tokens in bfloat16 autocast (was 4 x 20,000 of 32 x 1024 in float32, "
           "~220 GPU-hours; 5,000 steps before the H200 measured a step at 2-3x the plan); whether the softmax sink "
           "forms this early on Bible bytes is not known until a GPU run shows it",
}


def steps(run: Any, model: str = "") -> list[Step]:
    """One training step per attention variant, ``train_seeds`` runs of ``train.steps`` each (the plan counts its
    memory on the meta device and its time from the measured step)."""
    from sinklib.mitigation.comparison import parse_variants

    r = run
    return [Step(f"training {v}, {r.train_seeds} seeds", "tinylm", r.train.batch_size, r.train.seq_len, train=True,
                 calls=r.train_seeds * r.train.steps, variant=v) for v in parse_variants("")]


PROTOCOL = NotebookProtocol(
    name="03_mitigation", families=(), sizes=SIZES, cuts=CUTS, cpu_budget_s=60, first_run_s=833,
    dtype="float32",  # float32 weights (AdamW's state too), whatever autocast the training runs in
    steps=steps,
)
