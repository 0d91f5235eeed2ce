"""A step's estimates for the dry run (:mod:`sinklib.pipeline.plan`): the bytes it needs on the device
(:func:`estimate`: the weights in the notebook's dtype plus :func:`sinklib.core.memory.activation_bytes` and the KV
cache; a training step of 03's TinyLM counted on the meta device) and the seconds its calls take on :data:`GPU`
(:func:`call_seconds` per forward, :func:`train_step_seconds` per optimizer step, :func:`step_seconds` for them all),
timed by the model calibrated in :mod:`sinklib.pipeline.plan_calibration`."""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from sinklib.core.memory import activation_bytes
from sinklib.core.protocol import Step
from sinklib.pipeline import plan_calibration as calibration
from sinklib.pipeline import profiles
from sinklib.pipeline.plan_shapes import Shape, step_tokens

GB = 1e9
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
GPU = calibration.H100  # the card the plan's hours are for
BW_EFF = calibration.BW_EFF


def _training_config(run: profiles.Run, variant: str):
    from sinklib.mitigation.comparison import variant_config

    return variant_config(run.train, variant, run.seed)


@cache
def _step_bytes(cfg, micro: int) -> dict[str, int]:
    """:func:`sinklib.mitigation.training.training_step_bytes` of ``cfg`` at ``micro`` (one meta-device count)."""
    from sinklib.mitigation.training import training_step_bytes

    return training_step_bytes(cfg, micro)


def _training_bytes(run: profiles.Run, variant: str, batch: int) -> tuple[dict[str, int], float, int]:
    """(the count, bytes, micro-batch) of one training step of 03's TinyLM with ``variant``'s attention, counted on
    the meta device at the profile's micro-batch (:func:`sinklib.mitigation.training.training_step_bytes`)."""
    cfg = _training_config(run, variant)
    micro = min(batch, cfg.micro_batch or batch)
    counted = _step_bytes(cfg, micro)
    return counted, counted["state"] + counted["saved"] + counted["logits_grad"], micro


def estimate(step: Step, shape: Shape | None, dtype: str, run: profiles.Run, batch: int) -> tuple[float, str]:
    """Bytes one step needs at ``batch``, and a note."""
    if step.train:
        counted, need, micro = _training_bytes(run, step.variant, batch)
        split = f", micro-batches of {micro}" if micro < batch else ""
        return need, (f"{counted['parameters'] / 1e6:.1f}M parameters, AdamW, {run.train.precision}{split}; saved tensors counted on "
                      f"the meta device")
    tokens, note = step_tokens(step, shape)
    weights = shape.params_b * 1e9 * DTYPE_BYTES[dtype]
    acts = activation_bytes(hidden=shape.hidden, d_ff=shape.d_ff, heads=shape.heads, layers=shape.layers,
                            vocab=shape.vocab, batch=batch, seq_len=tokens, eager_attentions=step.maps,
                            hidden_states=step.hidden_states, logits=step.logits)
    kv = 2 * shape.layers * shape.kv_heads * (shape.hidden // shape.heads) * step.kv_tokens * batch * DTYPE_BYTES[dtype]
    if step.kv_tokens:
        note = f"KV cache of {step.kv_tokens} tokens: {kv / GB:.2f} GB"
        if shape.max_positions and step.kv_tokens > shape.max_positions:
            note += f"; beyond the model's {shape.max_positions} trained positions"
    return weights + acts + kv, note


def _peak(dtype: str, card: calibration.Card = GPU) -> float:
    return (card.fp32_tflops if dtype == "float32" else card.bf16_tflops) * 1e12


def call_seconds(step: Step, shape: Shape, dtype: str, batch: int, tokens: int, kv: int,
                 card: calibration.Card = GPU) -> float:
    """Estimated seconds of one forward on ``card`` (calibrated: :mod:`sinklib.pipeline.plan_calibration`).

    A decoded token (``kv`` > 0, at most 16 new tokens): max(FLOPs / peak, bytes / (bandwidth x BW_EFF)) +
    layers x DECODE_LAYER_S[dtype], bytes = the weights + the KV cache read (2 L kv H_kv d_head). Otherwise:
    2 P_active B T / (peak x MATMUL_MFU) + 2 L B T keys d / (peak x ATTENTION_MFU) (keys = T + kv; the causal half
    a prefill skips is absorbed in ATTENTION_MFU, fitted so) + layers x FORWARD_LAYER_S, times the statistics' cost over sdpa when the step takes
    them; kept maps add their (B, H, T, keys) float32 probabilities written and read once per layer over the
    bandwidth and, copied to the host, over PCIe."""
    size = DTYPE_BYTES[dtype]
    active = (shape.active_b or shape.params_b) * 1e9
    head = shape.hidden // shape.heads
    peak = _peak(dtype, card)
    if kv and tokens <= 16:
        flops = 2 * active * batch * tokens + 4 * shape.layers * batch * tokens * (tokens + kv) * shape.hidden
        moved = shape.params_b * 1e9 * size + 2 * shape.layers * kv * shape.kv_heads * head * batch * size
        bound = max(flops / peak, moved / (card.hbm_tb_s * 1e12 * BW_EFF))
        return bound + shape.layers * calibration.DECODE_LAYER_S.get(dtype, calibration.DECODE_LAYER_S["bfloat16"])
    keys = tokens + kv  # causal prefill skips half of these: ATTENTION_MFU was fitted over the whole count
    matmul = 2 * active * batch * tokens / (peak * calibration.MATMUL_MFU[_mfu_dtype(dtype)])
    attention = 2 * shape.layers * batch * tokens * keys * shape.hidden / (
        peak * calibration.ATTENTION_MFU[_mfu_dtype(dtype)])
    seconds = matmul + attention + shape.layers * calibration.FORWARD_LAYER_S
    if step.stats:  # the long-context ratio, or the host's per-layer work where the forward is short
        ratio = calibration.STATS_OVER_SDPA[step.stats]
        ratio = ratio.get(dtype, ratio["bfloat16"])
        seconds = max(seconds * ratio, shape.layers * calibration.STATS_LAYER_S[step.stats])
    maps = shape.layers * shape.heads * batch * tokens * (tokens + kv) * 4 if step.maps else 0
    copied = maps if step.host_maps else 0  # maps reduced on the device stay there
    return seconds + 2 * maps / (card.hbm_tb_s * 1e12 * BW_EFF) + copied / (card.pcie_gb_s * 1e9)


def _mfu_dtype(dtype: str) -> str:
    return "float32" if dtype == "float32" else "bfloat16"


def _train_flops(layers: int, d_model: int, params: float, batch: int, seq_len: int) -> float:
    """6 P B T (the matmuls, forward and backward) + 12 L B T^2 d (QK^T and AV, forward and backward)."""
    return 6 * params * batch * seq_len + 12 * layers * batch * seq_len * seq_len * d_model


def train_step_seconds(run: profiles.Run, variant: str, batch: int, card: calibration.Card = GPU) -> float:
    """Seconds of one optimizer step of 03's TinyLM: the step measured for this variant
    (:data:`plan_calibration.TRAIN_STEP_S`, at :data:`plan_calibration.TRAIN_REFERENCE`), times this step's FLOPs
    over the reference's (:func:`_train_flops`), times the measured card's peak over ``card``'s in the training
    precision."""
    cfg = _training_config(run, variant)
    counted = _training_bytes(run, variant, batch)[0]
    ref = calibration.TRAIN_REFERENCE
    ref_cfg = replace(cfg, model=replace(cfg.model, n_layers=ref["layers"], d_model=ref["d_model"]))
    ref_params = _step_bytes(ref_cfg, 1)["parameters"]  # counted on the meta device, cached
    flops = _train_flops(cfg.model.n_layers, cfg.model.d_model, counted["parameters"], batch, cfg.seq_len)
    ref_flops = _train_flops(ref["layers"], ref["d_model"], ref_params, ref["batch"], ref["seq_len"])
    dtype = "bfloat16" if cfg.precision == "bf16" else "float32"
    measured = calibration.TRAIN_STEP_S.get(variant, max(calibration.TRAIN_STEP_S.values()))
    return measured * flops / ref_flops * _peak("bfloat16", calibration.MEASURED_ON) / _peak(dtype, card)


def step_seconds(step: Step, shape: Shape | None, dtype: str, run: profiles.Run, batch: int) -> float:
    """All of a step's calls (:func:`call_seconds`, :func:`train_step_seconds`)."""
    if step.train:
        return step.calls * train_step_seconds(run, step.variant, batch)
    lengths = step.call_tokens or (step.tokens,) * step.calls
    kv = step.kv_tokens // 2 if step.growing else step.kv_tokens
    total = 0.0
    for n in lengths:
        tokens = step_tokens(replace(step, tokens=n), shape)[0]
        total += call_seconds(step, shape, dtype, batch, tokens, kv)
    return total
