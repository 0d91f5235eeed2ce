"""What the GPU plan's clock is calibrated on: this project's code measured on a real GPU, per kind of step.

Source: a run on one NVIDIA H200 (torch 2.11.0+cu130, transformers 5.23.0, commit a47419a, no network),
``../shared/gpu/bench.py``: synchronised, median of up to 3 rounds, batch 1 unless said. The plan
(:mod:`sinklib.pipeline.plan`) turns these into constants of its time model and a test
(``tests/test_gpu_plan.py``) pins every estimate within 1.5x of these measurements carried over to the plan's GPU:
by its peak FLOPs for compute-bound kinds (training, long forwards), by nothing for host-bound ones (a decoded
token of a small model is Python and kernel launches: the card does not change them).

A later session measured on the same H200 (torch 2.11.0+cu130, triton 3.6.0) what was added after that run:
the statistics' fused-kernel path (``benchmarks/long_context.py --device cuda``) and 03's fused training steps
(``bench.py train``). Per-layer costs of a 7B model's decode come from the bandwidth model, not a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Card:
    """A GPU's published dense peaks (NVIDIA datasheets)."""

    name: str
    bf16_tflops: float
    fp32_tflops: float  # plain float32 (no TF32)
    hbm_tb_s: float
    pcie_gb_s: float = 25.0


H100 = Card("H100 SXM 80 GB", 989.0, 67.0, 3.35)
H200 = Card("H200 141 GB", 989.0, 67.0, 4.8)
MEASURED_ON = H200

# 03's training step, seconds per optimizer step (steps 6-30) at the gpu profile's setting: TinyLM 12 x 768,
# 16 x 1024 tokens, bf16 autocast, micro-batches of 8. Softmax-like variants run torch's fused attention:
# measured so (a second H200 run) for softmax, off-by-one, sink logit, KV bias and the head-wise gate; head-wise RMSNorm and
# the element-wise gate keep the first H200 run's measurement with materialised maps (an upper bound); sigmoid and softpick
# are not softmax and keep their maps (softpick re-measured: 0.320).
TRAIN_REFERENCE = {"layers": 12, "d_model": 768, "batch": 16, "seq_len": 1024, "precision": "bf16"}
TRAIN_STEP_S = {"softmax": 0.0937, "headwise_rmsnorm": 0.145, "gated_headwise": 0.118, "gated_elementwise": 0.141,
                "sigmoid": 0.111, "softmax_off_by_one": 0.0911, "sink_logit": 0.106, "kv_bias": 0.0899,
                "softpick": 0.320}

# one sdpa forward of SmolLM2-135M's shape (random weights, 30 layers, d 576, 9 / 3 heads), batch 1: (N, dtype) -> s
SMOLLM2_SHAPE = {"params_b": 0.1348, "layers": 30, "heads": 9, "kv_heads": 3, "hidden": 576, "d_ff": 1536,
                 "vocab": 49152}

# decoding one token with a KV cache, SmolLM2's shape: 18.6 ms in float32, 61-79 ms in bfloat16 (30 layers)
DECODE_TOKEN_S = {"float32": 0.0186, "bfloat16": 0.070}

# --- the time model's constants, fitted to the measurements above (see tests/test_gpu_plan.py) ---
# forward = 2 P B T / (peak x MATMUL_MFU) + attention FLOPs / (peak x ATTENTION_MFU) + layers x FORWARD_LAYER_S,
# attention FLOPs = 2 L B T keys d, keys = T + cached tokens (a causal prefill computes about half: absorbed here)
MATMUL_MFU = {"bfloat16": 0.16, "float32": 0.34}
ATTENTION_MFU = {"bfloat16": 0.63, "float32": 0.115}  # float32 at 16k-32k: sdpa's own kernel choice, as measured
FORWARD_LAYER_S = 3e-4
# a decoded token: the larger of FLOPs and bytes (weights + KV cache) over the card, plus this per layer (host-bound)
DECODE_LAYER_S = {dtype: s / SMOLLM2_SHAPE["layers"] for dtype, s in DECODE_TOKEN_S.items()}
BW_EFF = 0.6  # share of memory bandwidth a memory-bound decode reaches (assumed: SmolLM2's decode is host-bound)

# the statistics' fused-kernel path over one sdpa forward (the second H200 run, random weights of SmolLM2's shape, batch 1):
#   N       dtype     sdpa     first key  every key
#   4,096   bfloat16  16 ms    3.32x      2.22x      host-bound: the statistics' Python per layer
#   32,768  bfloat16  125 ms   1.53x      2.43x
#   131,072 bfloat16  1.47 s   1.14x      2.60x
#   4,096   float32   121 ms   0.69x      0.94x      sdpa's float32 with grouped heads is torch's math kernel;
#   16,384  float32   1.40 s   0.31x      0.74x      the statistics' memory-efficient kernel is faster
# A statistics forward = max(sdpa x STATS_OVER_SDPA, layers x STATS_LAYER_S): the ratio at long context; below it
# the host's Python per layer bounds it (the 4,096-token bfloat16 forward, whose GPU work is shorter).
STATS_OVER_SDPA = {"first key": {"bfloat16": 1.53, "float16": 1.53, "float32": 0.69},
                   "every key": {"bfloat16": 2.6, "float16": 2.6, "float32": 0.94}}
STATS_LAYER_S = {"first key": 1.77e-3, "every key": 1.18e-3}  # 3.32 x 16 ms / 30 layers; 2.22 x 16 ms / 30
# the targets set for that path, which benchmarks/long_context.py reports met or MISSED against
STATS_TARGETS = {"first key": {"bfloat16": 1.5, "float16": 1.5, "float32": 1.1}, "every key": 3.0}
