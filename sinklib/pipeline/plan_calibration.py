"""What the GPU plan's clock is calibrated on: this project's code measured on a real GPU, per kind of step.

Source: issue 44's run on one NVIDIA H200 (torch 2.11.0+cu130, transformers 5.23.0, commit a47419a, no network),
``../shared/gpu/bench.py``: synchronised, median of up to 3 rounds, batch 1 unless said. The plan
(:mod:`sinklib.pipeline.plan`) turns these into constants of its time model and a test
(``tests/test_gpu_plan.py``) pins every estimate within 1.5x of these measurements carried over to the plan's GPU:
by its peak FLOPs for compute-bound kinds (training, long forwards), by nothing for host-bound ones (a decoded
token of a small model is Python and kernel launches: the card does not change them).

What is not measured yet is said so: the statistics' fused-kernel path (``sinklib.core.lse_attention``) was written
after that run, so its cost over sdpa is issue 44's target until ``benchmarks/long_context.py --device cuda`` reports
it; per-layer costs of a 7B model's decode come from the bandwidth model, not a measurement.
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
# 16 x 1024 tokens, bf16 autocast, micro-batches of 8 -- each variant's own attention (materialised (T x T) maps)
TRAIN_REFERENCE = {"layers": 12, "d_model": 768, "batch": 16, "seq_len": 1024, "precision": "bf16"}
TRAIN_STEP_S = {"softmax": 0.136, "headwise_rmsnorm": 0.145, "gated_headwise": 0.142, "gated_elementwise": 0.141,
                "sigmoid": 0.111, "softmax_off_by_one": 0.157, "sink_logit": 0.154, "kv_bias": 0.183,
                "softpick": 0.319}

# one sdpa forward of SmolLM2-135M's shape (random weights, 30 layers, d 576, 9 / 3 heads), batch 1: (N, dtype) -> s
SMOLLM2_SHAPE = {"params_b": 0.1348, "layers": 30, "heads": 9, "kv_heads": 3, "hidden": 576, "d_ff": 1536,
                 "vocab": 49152}
FORWARD_S = {(1024, "float32"): 0.020, (4096, "float32"): 0.121, (16384, "float32"): 1.40,
             (32768, "float32"): 5.2, (4096, "bfloat16"): 0.017, (32768, "bfloat16"): 0.125}

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

# the statistics' fused-kernel path over one sdpa forward: issue 44's targets, not yet measured on a GPU
STATS_OVER_SDPA = {"first key": {"bfloat16": 1.5, "float16": 1.5, "float32": 1.1}, "every key": 3.0}
STATS_MEASURED = False
