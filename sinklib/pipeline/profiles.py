"""Run profiles: every size knob lives here, so notebooks never branch on ``if smoke:``.

Each notebook has its own sizes dataclass and its three profiles sit side by side in :data:`SIZES`; a
:class:`Run` reads them through (``run.num_seqs``).

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
    """What a profile fixes for every notebook: the default model and device, and whether the hub is off-limits."""

    name: str
    model: str  # default model of the profile (a registry name or a hub id)
    device: str  # default device
    offline: bool  # sets HF_HUB_OFFLINE=1 so nothing tries the network
    dtype: str | None = None  # the models' dtype where a notebook does not fix one (None: the device's default)


# ------------------------------------------------------------------------------------------- sizes per notebook
@dataclass(frozen=True)
class TourSizes:  # 00_tour
    num_seqs: int  # sequences per input type for sink statistics (Gu et al.: 100)
    seq_len: int  # T (Gu et al.: 64)
    batch_size: int
    map_seq_len: int  # tokens shown in attention-map figures
    context_lengths: tuple[int, ...]  # long-context sink statistics (O(N) memory path)
    context_windows: int  # natural windows per context length (~2 min each on 2 cores for SmolLM2 up to 8k tokens)
    control_seqs: int  # sequences per input type for the random-weight control (and per extra random-token draw)


@dataclass(frozen=True)
class UtilizationSizes:  # 01_utilization
    batch_size: int
    probe_seqs: int  # sequences for choosing ACT's heads
    eval_seqs: int  # held-out windows for perplexity
    eval_seq_len: int
    stream_tokens: int  # length of the streamed text
    cache_budget: int  # KV cache size: n_sink + window
    stream_chunk: int  # tokens fed per step when streaming (1 = token by token, as the paper)
    recompute_points: int  # positions evaluated for the sliding-window-with-recompute baseline
    decode_tokens: int  # generated tokens for the decode-cost curves
    control_tokens: int  # stream length for the random-weight controls (short: they must stay cheap)
    control_budget: int  # cache budget of the random-weight controls


@dataclass(frozen=True)
class InterpretationSizes:  # 02_interpretation
    batch_size: int
    probe_seqs: int  # sequences for activation statistics and interventions
    seq_len: int
    eval_seqs: int  # held-out windows for perplexity under Sun et al.'s interventions
    eval_seq_len: int
    lambdas: tuple[float, ...]  # variance-amplification sweep
    control_seqs: int = 8  # random-weight control: windows / random sequences for every analysis
    draws: int = 3  # seeds of random tokens for the variance discrepancy (its input is a random draw)


@dataclass(frozen=True)
class LlmSizes:  # 10_llm
    models: tuple[str, ...]  # compared side by side (MODEL= replaces the list with one model)
    num_seqs: int  # sequences per input type (Gu et al.: 100)
    seq_len: int
    batch_size: int
    placement_seqs: int  # windows for where the mass sits, position or token, chat template
    context_lengths: tuple[int, ...]  # alpha_0 against context length (O(N) statistics)
    context_windows: int
    draw_seqs: int = 0  # random-token sequences in each of the two extra draws (seeds seed+1, seed+2)
    draws: int = 3  # draws of windows in all (the run's own first) for the draws and the chain; smoke: 2 (plumbing)
    draw_windows: int = 0  # Bible windows in each extra draw (delimiter, position or token); 0: draw_seqs
    control_seqs: int = 0  # sequences per input on the random-weight control
    stream_tokens: int = 0  # Xiao et al.'s position test: held-out tokens streamed per model (0: not run)
    stream_budget: int = 0  # its KV cache: 4 sinks + (budget - 4) recent tokens
    stream_chunk: int = 16  # tokens per step (1: token by token, as the paper)


@dataclass(frozen=True)
class MoeSizes:  # 11_moe
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


@dataclass(frozen=True)
class VitSizes:  # 13_vit
    models: tuple[str, ...]  # ViTs (MODEL= replaces the list with one); the first gets every figure
    image_size: int  # square input, px
    photos: tuple[str, ...]  # bundled photos (sinklib.core.images.PHOTO_SOURCES)
    batch_size: int
    probe_digits: int  # scikit-learn digits for the linear probe
    probe_size: int  # px the 8 x 8 digits are upscaled to
    control_image_size: int  # px of the photos on the random-weight control (forwards only)


@dataclass(frozen=True)
class MllmSizes:  # 12_mllm
    models: tuple[str, ...]  # MLLMs: the notebook runs the first; MODEL= runs another
    heldout_digits: int  # digits the projector never saw, with their captions
    zero_shot_digits: int  # digits scored against the 10 digit captions (stand-in sanity check)
    batch_size: int
    random_draws: int  # random-token masking controls
    standin_seeds: int = 1  # stand-ins (projector trained with seed, seed + 1, ...) the claims are judged over
    draw_digits: int = 8  # held-out digits per extra stand-in and for the random-weight control
    draw_random_draws: int = 1  # random-token draws per extra stand-in and for the control


@dataclass(frozen=True)
class MitigationSizes:  # 03_mitigation
    train: TrainConfig  # the setting every attention variant is trained in
    train_seeds: int  # seeds per variant (seed, seed + 1, ...)
    text_check: TrainConfig | None  # the same model on real text, for the head-wise RMSNorm convergence check
    text_seeds: int = 0  # seeds of the text check (0: train_seeds)


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
                         eval_seqs=32, data="bigram_backcopy", precision="bf16")
# bfloat16 autocast as the GPU profile (weights and AdamW float32; measurements read the float32 weights outside it):
# a step costs about half of float32's on a CPU with AVX512-BF16, the largest part of the cold-cache budget.
# GPU: the structural-origin paper's scale by parameter (Llama-2-style, 12 x 768, RoPE, T = 1024; ~85M parameters
# with a byte vocabulary). Point ``data`` at an OpenWebText-like dump with data="file:<path>". Sized to the 6
# GPU-hour budget by the plan calibrated on an H200 (a step took 0.11-0.32 s there, 2-3x the former
# assumption; CUTS below): 3,000 steps of 16 x 1024 tokens in bfloat16 autocast, in micro-batches of 8 so that
# softpick's saved (B, H, T, T) tensors fit 80 GB (151 GB at 32 x 1024 in one piece; `make figures PROFILE=gpu
# DRYRUN=1` counts them per variant).
_TRAIN_GPU = TrainConfig(model=TinyConfig(d_model=768, n_layers=12, n_heads=12, d_ff=2048, max_len=1024),
                         steps=3000, batch_size=16, seq_len=1024, lr=6e-4, warmup=500, weight_decay=0.1,
                         eval_every=250, eval_seqs=8, data="bible", precision="bf16", micro_batch=8)


OFFLINE_LLMS = ("smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b")  # three families that ship offline
GU_FAMILIES = ("openai-community/gpt2-xl", "EleutherAI/pythia-6.9b", "facebook/opt-6.7b", "meta-llama/Llama-2-7b-hf",
               "meta-llama/Meta-Llama-3-8B", "mistralai/Mistral-7B-v0.1", "Qwen/Qwen2.5-7B")  # Gu et al.'s families

# Su et al.'s MoE families that fit one 80 GB GPU in bfloat16 (`make figures PROFILE=gpu DRYRUN=1` checks); 11_moe runs
# the first, MODEL= any other (one model per run: a MoE's routing statistics fill the notebook). Mixtral-8x7B
# (46.7B parameters, ~94 GB in bfloat16) needs a larger device: MODEL=mistralai/Mixtral-8x7B-v0.1 GPU_GB=141 (H200).
MOE_MODELS = ("allenai/OLMoE-1B-7B-0924", "Qwen/Qwen1.5-MoE-A2.7B", "deepseek-ai/DeepSeek-V2-Lite")

VIT_MODELS = ("facebook/dinov2-large", "facebook/dinov2-with-registers-large", "facebook/dinov2-giant",
              "facebook/dinov2-with-registers-giant", "openai/clip-vit-large-patch14",
              "timm/deit3_large_patch16_224.fb_in22k_ft_in1k")  # Darcet et al.'s families, with and without registers
MLLM_MODELS = ("llava-hf/llava-1.5-7b-hf", "HuggingFaceTB/SmolVLM-Instruct", "Qwen/Qwen2-VL-7B-Instruct")
_ALL_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "china", "flower", "grace_hopper", "camera", "coins")

PROFILES: dict[str, Profile] = {
    "smoke": Profile("smoke", "smollm2-135m", "cpu", True),  # seconds per notebook, for make test
    "cpu": Profile("cpu", "smollm2-135m", "cpu", True, dtype="float32"),  # make figures' default: offline, 2-core CPU;
    # the CPU on any machine (a GPU would change the numbers behind the README: bfloat16, other kernels)
    "gpu": Profile("gpu", "meta-llama/Llama-2-7b-hf", "cuda", False),  # paper scale on a hub model
    # the gpu profile's code path (hub ids from a hub cache, several model classes per notebook, bfloat16) on tiny
    # random models, on CPU, for the test: sinklib.models.tiny_hub.write_hub_cache fills the cache
    "tiny-gpu": Profile("tiny-gpu", "sinklib-tiny/llama", "cpu", True, dtype="bfloat16"),
}

# notebook -> profile -> sizes: each notebook's three profiles side by side
SIZES: dict[str, dict[str, object]] = {
    "00_tour": {
        "smoke": TourSizes(num_seqs=8, seq_len=32, batch_size=8, map_seq_len=16, context_lengths=(64, 256),
                           context_windows=2, control_seqs=4),
        # 128..4096 tokens, 32-fold as the GPU profile's 1k..32k (an 8k passage cost ~60 s more per window)
        "cpu": TourSizes(num_seqs=100, seq_len=64, batch_size=20, map_seq_len=24,
                         context_lengths=(128, 256, 512, 1024, 2048, 4096), context_windows=2, control_seqs=25),
        "gpu": TourSizes(num_seqs=100, seq_len=64, batch_size=10, map_seq_len=32,
                         context_lengths=(512, 1024, 2048, 4096, 8192, 16384, 32768), context_windows=4,
                         control_seqs=100),
    },
    "01_utilization": {
        "smoke": UtilizationSizes(batch_size=8, probe_seqs=8, eval_seqs=4, eval_seq_len=64, stream_tokens=160,
                                  cache_budget=48, stream_chunk=8, recompute_points=8, decode_tokens=24,
                                  control_tokens=64, control_budget=16),
        # 2,048 streamed tokens (7x the cache once it is full), the recompute baseline at 128 of them (within the cold-cache budget: 3,072
        # and 192 before; every streaming verdict had a 2x margin)
        "cpu": UtilizationSizes(batch_size=20, probe_seqs=32, eval_seqs=16, eval_seq_len=256, stream_tokens=2048,
                                cache_budget=256, stream_chunk=16, recompute_points=128, decode_tokens=256,
                                control_tokens=256, control_budget=64),
        "gpu": UtilizationSizes(batch_size=10, probe_seqs=64, eval_seqs=64, eval_seq_len=1024, stream_tokens=16384,
                                cache_budget=1024, stream_chunk=16, recompute_points=2048, decode_tokens=2048,
                                control_tokens=4096, control_budget=256),
    },
    "02_interpretation": {
        "smoke": InterpretationSizes(batch_size=8, probe_seqs=8, seq_len=32, eval_seqs=4, eval_seq_len=64,
                                     lambdas=(1.0, 8.0, 64.0), control_seqs=4),
        "cpu": InterpretationSizes(batch_size=20, probe_seqs=32, seq_len=64, eval_seqs=16, eval_seq_len=256,
                                   lambdas=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0), control_seqs=8),
        "gpu": InterpretationSizes(batch_size=10, probe_seqs=64, seq_len=64, eval_seqs=64, eval_seq_len=1024,
                                   lambdas=(1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0), control_seqs=16),
    },
    "10_llm": {
        "smoke": LlmSizes(models=OFFLINE_LLMS, num_seqs=4, seq_len=32, batch_size=4, placement_seqs=4,
                          context_lengths=(64, 128), context_windows=1, draw_seqs=2, draw_windows=2, draws=2,
                          control_seqs=2, stream_tokens=96, stream_budget=32, stream_chunk=8),
        "cpu": LlmSizes(models=OFFLINE_LLMS, num_seqs=32, seq_len=64, batch_size=16, placement_seqs=16,
                        context_lengths=(256, 1024, 2048), context_windows=1, draw_seqs=8, draw_windows=4,
                        control_seqs=2, stream_tokens=1024, stream_budget=128, stream_chunk=16),
        "gpu": LlmSizes(models=GU_FAMILIES, num_seqs=100, seq_len=64, batch_size=10, placement_seqs=100,
                        context_lengths=(512, 2048, 8192, 32768), context_windows=4, draw_seqs=100,
                        draw_windows=100, control_seqs=16, stream_tokens=4096, stream_budget=1024, stream_chunk=16),
    },
    "11_moe": {
        "smoke": MoeSizes(models=("smollm2-moe-smoke",), num_seqs=4, seq_len=32, batch_size=4, eval_seqs=2, eval_seq_len=64,
                          random_draws=1, control_seqs=2, draw_seqs=2, router_train=replace(_TRAIN_SMOKE, steps=20),
                          router_seeds=2),
        # the trained router (a table, no verdict) on 2 seeds: the cold-cache budget
        "cpu": MoeSizes(models=("smollm2-moe",), num_seqs=32, seq_len=64, batch_size=8, eval_seqs=8, eval_seq_len=256,
                        random_draws=3, control_seqs=4, draw_seqs=4, router_train=_TRAIN_CPU, router_seeds=2),
        "gpu": MoeSizes(models=MOE_MODELS, num_seqs=100, seq_len=64, batch_size=4, eval_seqs=64, eval_seq_len=1024,
                        random_draws=5, control_seqs=16, draw_seqs=32, router_train=_TRAIN_CPU, router_seeds=3),
    },
    "13_vit": {
        "smoke": VitSizes(models=("dinov2-s",), image_size=112, photos=("astronaut", "coffee"), batch_size=4,
                          probe_digits=60, probe_size=56,
                          control_image_size=56),
        "cpu": VitSizes(models=("dinov2-s",), image_size=224, photos=_ALL_PHOTOS, batch_size=9, probe_digits=600,
                        probe_size=112, control_image_size=98),
        "gpu": VitSizes(models=VIT_MODELS, image_size=224, photos=_ALL_PHOTOS, batch_size=9, probe_digits=1797,
                        probe_size=224, control_image_size=224),
    },
    "12_mllm": {
        "smoke": MllmSizes(models=("llava-standin-smoke",), heldout_digits=8, zero_shot_digits=4, batch_size=8,
                           random_draws=1, standin_seeds=1, draw_digits=8, draw_random_draws=1),
        # 2 stand-ins (projectors trained with seeds 0 and 1), 3 before the cold-cache budget
        "cpu": MllmSizes(models=("llava-standin",), heldout_digits=64, zero_shot_digits=40, batch_size=16,
                         random_draws=5, standin_seeds=2, draw_digits=16, draw_random_draws=2),
        "gpu": MllmSizes(models=MLLM_MODELS, heldout_digits=256, zero_shot_digits=0, batch_size=8, random_draws=10,
                         draw_digits=8, draw_random_draws=2),
    },
    "03_mitigation": {
        "smoke": MitigationSizes(train=_TRAIN_SMOKE, train_seeds=2, text_check=replace(_TRAIN_SMOKE, data="bible")),
        # 2 seeds a variant (the GPU profile 3): the cold-cache budget; each verdict of the 3-seed reference run
        # was the same on its first two seeds
        "cpu": MitigationSizes(train=_TRAIN_CPU, train_seeds=2, text_check=replace(_TRAIN_CPU, data="bible"),
                               text_seeds=2),
        "gpu": MitigationSizes(train=_TRAIN_GPU, train_seeds=3, text_check=None),
    },
}


# What the gpu profile cut from the papers' protocols so that every notebook fits 6 GPU-hours on one 80 GB GPU
# (`make figures PROFILE=gpu DRYRUN=1` prints each notebook's estimate beside these).
CUTS: dict[tuple[str, str], str] = {
    ("gpu", "01_utilization"): "streams 16,384 tokens (was 65,536; StreamingLLM's Fig. 3 shows 20k tokens for "
                               "Llama-2-7B) in chunks of 16 tokens, as the cpu profile (was token by token: a decoded "
                               "token costs ~2 ms per layer of Python and launches, measured on an H200), so the "
                               "window between evictions is 1,008-1,024 tokens, not exactly 1,024 -- the dense "
                               "reference cache then needs 8.6 GB, not 34 GB; decoding timed over 2,048 tokens (was "
                               "8,192, beyond Llama-2's 4,096 positions; benchmarks/streaming_decode.py times 1k-8k)",
    ("gpu", "03_mitigation"): "3 seeds x 3,000 steps of 16 x 1024 tokens in bfloat16 autocast (was 4 x 20,000 of "
                              "32 x 1024 in float32, ~220 GPU-hours; 5,000 steps before the H200 measured a step at "
                              "2-3x the plan); whether the softmax sink forms this early on Bible bytes is not known "
                              "until a GPU run shows it",
    ("gpu", "10_llm"): "Xiao et al.'s position test streams 4,096 tokens in chunks of 16 (was token by token)",
}


def _tiny_gpu(sizes: dict[str, dict[str, object]]) -> None:
    """``tiny-gpu`` sizes: the smoke sizes, the gpu profile's training shape (RoPE, no text check) and model lists of
    the gpu profile's classes as tiny hub repositories (:mod:`sinklib.models.tiny_hub`)."""
    from sinklib.models import tiny_hub

    lists = {"10_llm": tiny_hub.LLMS, "11_moe": tiny_hub.MOES, "12_mllm": tiny_hub.MLLMS, "13_vit": tiny_hub.VITS}
    for notebook, by_profile in sizes.items():
        smoke = by_profile["smoke"]
        if notebook in lists:
            smoke = replace(smoke, models=lists[notebook])
        if notebook == "03_mitigation":
            model = replace(_TRAIN_SMOKE.model, rope_theta=_TRAIN_GPU.model.rope_theta)
            smoke = replace(smoke, train=replace(_TRAIN_SMOKE, model=model, data=_TRAIN_GPU.data,
                                                 precision=_TRAIN_GPU.precision, micro_batch=4), text_check=None)
        by_profile["tiny-gpu"] = smoke


_tiny_gpu(SIZES)


@dataclass(frozen=True)
class Run:
    """A resolved notebook run: the profile, the notebook's sizes in it, the user's model/device/seed, the folder."""

    profile: Profile
    model: str
    device: str
    seed: int
    out_dir: Path
    notebook: str = "notebook"
    sizes: object | None = None

    @property
    def dtype(self) -> str | None:
        """The profile's model dtype (None: the device's default, float32 on CPU and bfloat16 on CUDA)."""
        return self.profile.dtype

    def __getattr__(self, name: str):  # run.num_seqs etc. read through to the notebook's sizes
        if name.startswith("__") or name in ("profile", "sizes"):
            raise AttributeError(name)
        if self.sizes is None or not hasattr(self.sizes, name):
            raise AttributeError(f"{self.notebook} has no size {name!r} in sinklib/pipeline/profiles.py SIZES")
        return getattr(self.sizes, name)


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy and torch (CPU and CUDA) with one number."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


OFFLINE_MARK = "SINKLIB_SET_HF_HUB_OFFLINE"  # set when sinklib (not the user) turned the hub off in this process


def hub_offline(offline: bool) -> None:
    """Switch the Hugging Face hub off (an offline profile) or back on (the gpu profile) for this process and the
    processes it starts: ``HF_HUB_OFFLINE`` and huggingface_hub's own switch, which it reads once at import. Back on
    only where sinklib turned it off: a user's own ``HF_HUB_OFFLINE=1`` stays (so one JupyterLab kernel can run the
    cpu profile, then the gpu one)."""
    from huggingface_hub import constants

    if offline:
        if os.environ.get("HF_HUB_OFFLINE") is None:
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ[OFFLINE_MARK] = "1"
        constants.HF_HUB_OFFLINE = os.environ["HF_HUB_OFFLINE"].upper() in ("1", "ON", "YES", "TRUE")
    elif os.environ.pop(OFFLINE_MARK, None):
        os.environ.pop("HF_HUB_OFFLINE", None)
        constants.HF_HUB_OFFLINE = False


def resolve(
    profile: str = "cpu", model: str | None = None, device: str | None = None, seed: int = 0,
    out_dir: str | Path | None = None, notebook: str = "notebook",
) -> Run:
    """Turn a notebook's parameters cell into a :class:`Run`; empty model/device take the profile's defaults.

    Also seeds everything, creates ``out_dir`` and switches the hub off for offline profiles (:func:`hub_offline`).
    """
    if profile not in PROFILES:
        raise InputError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}.")
    prof = PROFILES[profile]
    hub_offline(prof.offline)
    out = Path(out_dir) if out_dir else Path("figures") / notebook
    out.mkdir(parents=True, exist_ok=True)
    seed_everything(seed)
    sizes = SIZES.get(notebook, {}).get(profile)
    return Run(prof, model or prof.model, device or prof.device, int(seed), out, notebook, sizes)
