"""CUDA-only attention kernels transcribed for the fake CUDA device, with CUDA's contract: what they accept, refuse and
return (shapes, dtypes, alignment, the causal mask's corner), computed in float32 on the CPU.

torch has ``_scaled_dot_product_cudnn_attention`` (cuDNN), ``_scaled_dot_product_flash_attention`` (flash-attention 2)
and ``_scaled_dot_product_efficient_attention`` (the memory-efficient kernel) only on CUDA; :mod:`sinklib.core.lse_attention` calls them for the statistics' GPU
path. Under :func:`tests.fake_cuda.fake_cuda` these transcriptions run instead, so that path is tested on a
machine without a GPU -- including the mistakes CUDA would punish: a float32 input to flash or cuDNN, reading
cuDNN's log-sum-exp as (B, H, T) when it is (B, H, T, 1), a bias that is not
expanded to (B, H, T, N) with aligned rows, grouped-query heads in the efficient kernel, and reading the efficient
kernel's log-sum-exp past its T rows (padded to a multiple of 32; the padding is NaN here).
"""

from __future__ import annotations

import math

import torch

LSE_ALIGNMENT = 32  # rows of the efficient kernel's log-sum-exp are padded to a multiple of this
BIAS_ALIGNMENT = 8  # elements: the efficient kernel's bias rows must start aligned (sdpa pads masks to this)


class KernelContractError(RuntimeError):
    """An argument the CUDA kernel refuses."""


def _attend(q, k, v, bias, allowed, scale):
    """float32 reference: l = q k^T * scale + bias, masked where not allowed; returns (o, lse (B, H, T))."""
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, dim=1).float(), v.repeat_interleave(G, dim=1).float()
    logits = q.float() @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if bias is not None:
        logits = logits + bias.float()
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(logits, dim=-1)
    p = torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(0.0)
    return (p @ v).to(q.dtype), lse


def flash_attention(query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):
    """``aten::_scaled_dot_product_flash_attention`` as CUDA runs it: float16 / bfloat16 only, head width a
    multiple of 8 up to 256, key heads dividing query heads, causal aligned to the bottom-right corner (query t sees
    keys j <= t + N - T). Returns (output, logsumexp (B, H, T) float32, and seven bookkeeping values)."""
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise KernelContractError("FlashAttention only support fp16 and bf16 data type")
    hd = query.shape[-1]
    if hd % 8 or hd > 256:
        raise KernelContractError(f"FlashAttention needs a head dimension that is a multiple of 8, at most 256: {hd}")
    if query.shape[1] % key.shape[1]:
        raise KernelContractError("Number of heads in key/value must divide number of heads in query")
    if dropout_p:
        raise KernelContractError("the fake device transcribes flash attention without dropout")
    T, N = query.shape[2], key.shape[2]
    allowed = None
    if is_causal:
        allowed = torch.arange(N)[None, :] <= torch.arange(T)[:, None] + (N - T)
    out, lse = _attend(query, key, value, None, allowed, scale)
    empty = torch.empty(0)
    return out, lse, empty, empty, T, N, empty, empty, empty


def efficient_attention(query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *,
                        scale=None):
    """``aten::_scaled_dot_product_efficient_attention`` as CUDA runs it: equal query and key heads, a bias of the
    query's dtype expanded to (B, H, T, N) with rows aligned to 8 elements, causal top-left. The log-sum-exp has
    ceil(T / 32) * 32 rows (NaN past T here). Returns (output, log_sumexp, philox seed, philox offset)."""
    B, H, T, _ = query.shape
    N = key.shape[2]
    if key.shape[1] != H or value.shape[1] != H:
        raise KernelContractError("the memory-efficient kernel needs as many key/value heads as query heads")
    if attn_bias is not None:
        if attn_bias.dtype != query.dtype:
            raise KernelContractError("invalid dtype for bias - should match query's dtype")
        if tuple(attn_bias.shape) != (B, H, T, N):
            raise KernelContractError(f"attn_bias must be expanded to (B, H, T, N) = {(B, H, T, N)}, got "
                                      f"{tuple(attn_bias.shape)}")
        if attn_bias.stride(-1) != 1 or any(attn_bias.stride(i) % BIAS_ALIGNMENT for i in range(3)):
            raise KernelContractError("attn_bias is not correctly aligned (strideM)")
    if dropout_p:
        raise KernelContractError("the fake device transcribes the efficient kernel without dropout")
    allowed = torch.arange(N)[None, :] <= torch.arange(T)[:, None] if is_causal else None
    out, lse = _attend(query, key, value, attn_bias, allowed, scale)
    rows = math.ceil(T / LSE_ALIGNMENT) * LSE_ALIGNMENT if compute_log_sumexp else 0
    padded = torch.full((B, H, rows), float("nan"))
    padded[..., :min(T, rows)] = lse[..., :rows]
    return out, padded, torch.empty(()), torch.empty(())


def cudnn_attention(query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                    return_debug_mask=False, *, scale=None):
    """``aten::_scaled_dot_product_cudnn_attention`` as this project calls it on a Hopper GPU: float16 / bfloat16,
    head width a multiple of 8 up to 128, equal query and key heads (the caller repeats grouped keys), causal
    top-left. Returns (output, logsumexp (B, H, T, 1) float32, and seven bookkeeping values)."""
    if query.dtype not in (torch.float16, torch.bfloat16):
        raise KernelContractError("cuDNN attention only supports fp16 and bf16 here")
    hd = query.shape[-1]
    if hd % 8 or hd > 128:
        raise KernelContractError(f"cuDNN attention is used for head widths that are multiples of 8 up to 128: {hd}")
    if key.shape[1] != query.shape[1]:
        raise KernelContractError("the cuDNN kernel is handed as many key/value heads as query heads")
    if dropout_p or attn_bias is not None:
        raise KernelContractError("the fake device transcribes cuDNN attention without dropout or bias")
    T, N = query.shape[2], key.shape[2]
    allowed = torch.arange(N)[None, :] <= torch.arange(T)[:, None] if is_causal else None
    out, lse = _attend(query, key, value, None, allowed, scale)
    empty = torch.empty(0)
    lse = lse.unsqueeze(-1) if compute_log_sumexp else empty
    return out, lse, empty, empty, T, N, empty, empty, empty


KERNELS = {"_scaled_dot_product_cudnn_attention": cudnn_attention,
           "_scaled_dot_product_flash_attention": flash_attention,
           "_scaled_dot_product_efficient_attention": efficient_attention}
