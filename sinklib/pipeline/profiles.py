"""Run profiles: every size knob lives here, so notebooks never branch on ``if smoke:``.

* ``smoke``: seconds per notebook, for ``make test`` (real offline model, tiny batches);
* ``cpu``: the default of ``make figures``: offline, the protocol sizes that fit a 2-core CPU;
* ``gpu``: paper scale on a hub model (needs network or a filled hub cache and a CUDA device).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from sinklib.core.errors import InputError
from sinklib.mitigation.tinylm import TinyConfig
from sinklib.mitigation.training import TrainConfig


@dataclass(frozen=True)
class Profile:
    name: str
    model: str  # default model of the profile (a registry name or a hub id)
    device: str  # default device
    offline: bool  # sets HF_HUB_OFFLINE=1 so nothing tries the network
    num_seqs: int  # sequences per input type for sink statistics (Gu et al.: 100)
    seq_len: int  # T (Gu et al.: 64)
    batch_size: int
    map_seq_len: int  # tokens shown in attention-map figures
    probe_seqs: int  # sequences for activation statistics and interventions (interpretation notebook)
    eval_seqs: int  # held-out windows for perplexity
    eval_seq_len: int
    lambdas: tuple[float, ...]  # variance-amplification sweep
    context_lengths: tuple[int, ...]  # long-context sink statistics (O(N) memory path)
    stream_tokens: int  # length of the streamed text (utilization notebook)
    cache_budget: int  # KV cache size: n_sink + window
    stream_chunk: int  # tokens fed per step when streaming (1 = token by token, as the paper)
    recompute_points: int  # positions evaluated for the sliding-window-with-recompute baseline
    decode_tokens: int  # generated tokens for the decode-cost curves
    train: TrainConfig  # mitigation notebook: the setting every attention variant is trained in
    train_seeds: int  # seeds per variant (seed, seed + 1, ...)
    text_check: TrainConfig | None  # the same model on real text, for the head-wise RMSNorm convergence check
    context_windows: int = 2  # natural windows per context length (the long-context figure shows their spread;
    # each costs one forward per length, ~2 min on 2 cores for SmolLM2 up to 8k tokens)


# Mitigation training (03_mitigation). CPU: the smallest setting found in which the softmax baseline reliably grows
# a BOS sink on 2 cores -- bigram-backcopy (Guo et al., arXiv 2410.13835), 2 layers x 2 heads, d = 64, no positional
# encoding, 600 steps of 64 x 64 tokens (~35-45 s a run). Searched and rejected: Bible bytes with 4 layers,
# d = 128, RoPE or NoPE, T = 128-256, lr 1e-3..1e-2, up to 3,000 steps (alpha_0 stayed at uniform, 0.02-0.04);
# 2 layers NoPE on Bible bytes (0.03-0.09); bigram-backcopy with RoPE (weak and seed-dependent, alpha_0 0.03-0.29).
# In the chosen setting a head first exceeds alpha_0 0.3 at step 450 / 500 (seeds 0 / 1); at step 600 the mean
# alpha_0 is 0.25 and the sink rate 38% (800 steps: 0.31 and 50%, but 19 minutes for the notebook instead of ~13);
# uniform attention gives 0.074.
_TRAIN_SMOKE = TrainConfig(model=TinyConfig(d_model=32, n_layers=2, n_heads=2, d_ff=64, max_len=32, rope_theta=0.0),
                           steps=20, batch_size=8, seq_len=32, lr=3e-3, warmup=5, eval_every=10, eval_seqs=8,
                           data="bigram_backcopy")
_TRAIN_CPU = TrainConfig(model=TinyConfig(d_model=64, n_layers=2, n_heads=2, d_ff=172, max_len=64, rope_theta=0.0),
                         steps=600, batch_size=64, seq_len=64, lr=3e-3, warmup=40, weight_decay=0.1, eval_every=50,
                         eval_seqs=32, data="bigram_backcopy")
# GPU: the structural-origin paper's scale by parameter (Llama-2-style, 12 x 768, RoPE, T = 1024; ~85M parameters
# with a byte vocabulary). Point ``data`` at an OpenWebText-like dump with data="file:<path>"; 4 seeds as the paper.
_TRAIN_GPU = TrainConfig(model=TinyConfig(d_model=768, n_layers=12, n_heads=12, d_ff=2048, max_len=1024),
                         steps=20000, batch_size=32, seq_len=1024, lr=6e-4, warmup=1000, weight_decay=0.1,
                         eval_every=500, eval_seqs=8, data="bible")


PROFILES: dict[str, Profile] = {
    "smoke": Profile("smoke", "smollm2-135m", "cpu", True, num_seqs=8, seq_len=32, batch_size=8, map_seq_len=16,
                     probe_seqs=8, eval_seqs=4, eval_seq_len=64, lambdas=(1.0, 8.0, 64.0),
                     context_lengths=(64, 256), stream_tokens=160, cache_budget=48, stream_chunk=8,
                     recompute_points=8, decode_tokens=24, train=_TRAIN_SMOKE, train_seeds=2,
                     text_check=replace(_TRAIN_SMOKE, data="bible"), context_windows=2),
    "cpu": Profile("cpu", "smollm2-135m", "auto", True, num_seqs=100, seq_len=64, batch_size=20, map_seq_len=24,
                   probe_seqs=32, eval_seqs=32, eval_seq_len=256, lambdas=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0),
                   context_lengths=(256, 512, 1024, 2048, 4096, 8192), stream_tokens=3072, cache_budget=256,
                   stream_chunk=16, recompute_points=192, decode_tokens=768, train=_TRAIN_CPU, train_seeds=2,
                   text_check=replace(_TRAIN_CPU, data="bible")),
    "gpu": Profile("gpu", "meta-llama/Llama-2-7b-hf", "cuda", False, num_seqs=100, seq_len=64, batch_size=10,
                   map_seq_len=32, probe_seqs=64, eval_seqs=64, eval_seq_len=1024,
                   lambdas=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0),
                   context_lengths=(512, 1024, 2048, 4096, 8192, 16384, 32768), stream_tokens=65536,
                   cache_budget=1024, stream_chunk=1, recompute_points=2048, decode_tokens=8192, train=_TRAIN_GPU,
                   train_seeds=4, text_check=None, context_windows=4),
}


@dataclass(frozen=True)
class Run:
    """A resolved notebook run: the profile's knobs plus the user's model/device/seed and output folder."""

    profile: Profile
    model: str
    device: str
    seed: int
    out_dir: Path

    def __getattr__(self, name: str):  # run.num_seqs etc. read through to the profile
        if name.startswith("__") or name == "profile":
            raise AttributeError(name)
        return getattr(self.profile, name)


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy and torch (CPU and CUDA) with one number."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve(
    profile: str = "cpu", model: str | None = None, device: str | None = None, seed: int = 0,
    out_dir: str | Path | None = None, notebook: str = "notebook",
) -> Run:
    """Turn a notebook's parameters cell into a :class:`Run`; empty model/device take the profile's defaults.

    Also seeds everything, creates ``out_dir`` and, for offline profiles, sets ``HF_HUB_OFFLINE=1``.
    """
    if profile not in PROFILES:
        raise InputError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}.")
    prof = PROFILES[profile]
    if prof.offline:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(out_dir) if out_dir else Path("figures") / notebook
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(seed)
    return Run(prof, model or prof.model, device or prof.device, int(seed), out)
