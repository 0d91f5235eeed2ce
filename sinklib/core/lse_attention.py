"""Attention that also returns each query's log-sum-exp, and the sink statistics that follow from it at O(N) memory.

With l_tj = q_t . k_j * scaling (+ the mask's additive bias; -inf where query t may not see key j) a fused attention
kernel returns o_t = sum_j p_tj v_j and lse_t = log sum_j exp(l_tj), so every probability is one exponential away:

    p_tj = exp(l_tj - lse_t).

* The first keys' alpha (Gu et al.: alpha_j = sum_t p_tj / #queries that see j) then costs one (T x |keys|) product
  beside the attention the model runs anyway (:func:`tracked_probabilities`).
* Every key's column sum col_j = sum_t p_tj is one more pass over q k^T without the softmax's two reductions and
  without the product with V (:func:`column_sums`): a Triton kernel on CUDA keeps each (query block x key block) tile
  in registers (O(N) memory at any length); elsewhere blocks of queries in torch.

:func:`attention_lse` picks the kernel torch has on the tensors' device: on the CPU the flash kernel
(``_scaled_dot_product_flash_attention_for_cpu``); on CUDA, for float16 / bfloat16 without a mask (causal only for
T = N, where the kernels' corner conventions agree), cuDNN's attention on Hopper and later
(``_scaled_dot_product_cudnn_attention``: what sdpa itself runs there; flash-attention 2 took 1.6x its time on an
H200) and flash-attention 2 (``_scaled_dot_product_flash_attention``) elsewhere or where cuDNN refuses the shape;
the memory-efficient kernel otherwise (``_scaled_dot_product_efficient_attention``: float32, or an
additive mask -- padding, sliding windows -- padded to 8 columns and expanded as torch's sdpa does; causal top-left).
Keys and values of grouped-query heads are repeated for the kernels (O(N) memory); the Triton kernel reads them per
group without repeating.
"""

from __future__ import annotations

import functools
import os

import torch

MASK_ALIGNMENT = 8  # columns: the memory-efficient kernel reads its bias with aligned strides (sdpa pads to 8)
CUDNN_MAX_HEAD_DIM = 128  # head widths cuDNN's attention is used for here (flash-attention 2 above)
_CUDNN_REFUSED: set[tuple] = set()  # (device, dtype, head width) cuDNN raised for: flash-attention 2 from then on


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A 4-D boolean mask (True = may attend) as the additive bias the kernels take: 0 allowed, dtype min masked."""
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min)


def allowed_bias(mask: torch.Tensor) -> torch.Tensor:
    """A 4-D mask block as float32 logit bias for the statistics: the bias where query t may see key j, -inf where
    not (boolean False, or an additive value at or below half the dtype's min -- transformers' "masked"), so masked
    entries count 0 even in a row that sees no key (where a kernel's lse is finite over "dtype min" biases)."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, device=mask.device).masked_fill_(~mask, float("-inf"))
    bias = mask.float()
    return bias.masked_fill_(mask <= torch.finfo(mask.dtype).min / 2, float("-inf"))


def kernel_for(query: torch.Tensor, mask: torch.Tensor | None, causal: bool, n_keys: int) -> str:
    """Which of torch's fused kernels :func:`attention_lse` runs: ``"cpu-flash"``, ``"cudnn"``, ``"flash"`` or
    ``"efficient"``."""
    if query.device.type != "cuda":
        return "cpu-flash"
    T, hd = query.shape[-2], query.shape[-1]
    flash_ok = (query.dtype in (torch.float16, torch.bfloat16) and mask is None and hd % 8 == 0 and hd <= 256
                and (not causal or T == n_keys))
    if not flash_ok:
        return "efficient"
    return "cudnn" if _cudnn_ok(query) else "flash"


def _cudnn_ok(query: torch.Tensor) -> bool:
    """cuDNN attention for this query: enabled in torch, a Hopper or later GPU, head width <= 128, and not refused
    before in this process for its (device, dtype, head width)."""
    if not torch.backends.cuda.cudnn_sdp_enabled() or query.shape[-1] > CUDNN_MAX_HEAD_DIM:
        return False
    if torch.cuda.get_device_capability(query.device) < (9, 0):
        return False
    return (query.device, query.dtype, query.shape[-1]) not in _CUDNN_REFUSED


def attention_lse(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None,
                  causal: bool, scaling: float) -> tuple[torch.Tensor, torch.Tensor]:
    """o = softmax(q k^T * scaling + mask) v and lse_t = log sum_j exp(l_tj), from one fused kernel.

    query (B, H, T, hd), key (B, Hkv, N, hd), value (B, Hkv, N, hd) with H a multiple of Hkv; mask None or 4-D
    (B|1, 1, T, >= N), boolean (True = allowed) or additive; ``causal`` (only with no mask): query t sees keys 0..t.
    Returns o (B, H, T, hd) in the query's dtype and lse (B, H, T) in float32.
    """
    B, H, T, hd = query.shape
    N, G = key.shape[2], H // key.shape[1]
    k, v = (key, value) if G == 1 else (key.repeat_interleave(G, dim=1), value.repeat_interleave(G, dim=1))
    bias = None if mask is None else additive_mask(mask[:, :, :, :N], query.dtype)
    kind = kernel_for(query, bias, causal, N)
    if kind == "cpu-flash":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, k, v, 0.0, causal, attn_mask=bias, scale=scaling)
        return out, lse.float()
    if kind == "cudnn":
        try:
            out, lse = torch.ops.aten._scaled_dot_product_cudnn_attention(query, k, v, None, True, 0.0, causal, False,
                                                                           scale=scaling)[:2]
            return out, lse.reshape(B, H, T).float()  # cuDNN's log-sum-exp is (B, H, T, 1)
        except RuntimeError:  # a cuDNN build without this configuration: flash-attention 2 computes the same
            _CUDNN_REFUSED.add((query.device, query.dtype, hd))
            kind = "flash"
    if kind == "flash":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(query, k, v, 0.0, causal, False,
                                                                       scale=scaling)[:2]
        return out, lse.float()
    if bias is not None:  # aligned strides, as sdpa hands the kernel its masks: pad the columns, slice, expand
        pad = (-N) % MASK_ALIGNMENT or MASK_ALIGNMENT
        bias = torch.nn.functional.pad(bias, (0, pad))[..., :N].expand(B, H, T, N)
    out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, k, v, bias, True, 0.0, causal and bias is None, scale=scaling)[:2]
    return out, lse[..., :T].float()


def tracked_probabilities(query: torch.Tensor, key: torch.Tensor, lse: torch.Tensor, allowed: torch.Tensor,
                          keys: list[int], scaling: float) -> torch.Tensor:
    """p_tj = exp(q_t . k_j * scaling - lse_t) for the listed keys j, 0 where query t may not see j.

    query (B, H, T, hd), key (B, Hkv, N, hd), lse (B, H, T), allowed (B|1, 1, T, |keys|) boolean.
    Returns (B, H, T, |keys|) float32: one (T x |keys|) product per head, no (T x N) tensor.
    """
    B, H, T, hd = query.shape
    Hkv = key.shape[1]
    q = query.float().view(B, Hkv, H // Hkv, T, hd)
    k = key[:, :, keys].float()  # (B, Hkv, K, hd): the G query heads of a group share it
    logits = torch.matmul(q, k.unsqueeze(2).transpose(-1, -2)).view(B, H, T, len(keys)) * scaling
    p = torch.exp(logits - lse.unsqueeze(-1)).nan_to_num_(0.0)  # rows that see no key: lse = -inf
    return p.masked_fill_(~allowed, 0.0)


def column_sums(query: torch.Tensor, key: torch.Tensor, lse: torch.Tensor, mask: torch.Tensor | None,
                causal_offset: int | None, scaling: float, block_bytes: int) -> torch.Tensor:
    """col_j = sum_t exp(l_tj - lse_t) over the queries t that may see key j: (B, H, N) float32.

    ``mask`` 4-D (B|1, 1, T, >= N) boolean or additive, or None with ``causal_offset`` c (query t sees keys
    j <= t + c) or None (every key). CUDA with Triton: :func:`_triton_column_sums`; otherwise query blocks of
    ``block_bytes`` float32 logits each in torch.
    """
    if query.device.type == "cuda" and _triton() is not None:
        return _triton_column_sums(query, key, lse, mask, causal_offset, scaling)
    B, H, T, hd = query.shape
    N, Hkv = key.shape[2], key.shape[1]
    G = H // Hkv
    q = query.float().view(B, Hkv, G, T, hd)
    kt = key.float().transpose(-1, -2)  # (B, Hkv, hd, N)
    col = torch.zeros(B, Hkv, G, N, dtype=torch.float64, device=query.device)
    step = max(1, block_bytes // (4 * B * H * N))
    for start in range(0, T, step):
        stop = min(T, start + step)
        C = stop - start
        logits = torch.matmul(q[:, :, :, start:stop].reshape(B, Hkv, G * C, hd), kt).view(B, Hkv, G, C, N) * scaling
        if mask is not None:
            logits = logits + allowed_bias(mask[:, :, start:stop, :N]).unsqueeze(2)
        elif causal_offset is not None:
            seen = torch.arange(N, device=query.device) <= torch.arange(start, stop, device=query.device)[:, None] \
                + causal_offset  # (C, N)
            logits.masked_fill_(~seen, float("-inf"))
        p = torch.exp(logits - lse.view(B, Hkv, G, T, 1)[:, :, :, start:stop]).nan_to_num_(0.0)
        col += p.sum(dim=3).double()
    return col.view(B, H, N).float()


# --------------------------------------------------------------------------------------------------- Triton (CUDA)
@functools.cache
def _triton_module(interpret: bool):
    """The Triton kernel, compiled for the GPU or (``TRITON_INTERPRET=1``) run by Triton's CPU interpreter;
    None without Triton. Built on first use: Triton reads ``TRITON_INTERPRET`` when a kernel is decorated."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None
    if interpret and type(tl.zeros).__name__ != "InterpretedFunction":
        return None  # Triton was imported before TRITON_INTERPRET was set: its own library cannot be interpreted

    @triton.jit
    def key_mass_kernel(Q, K, LSE, MASK, COL, T, N, H, G, scaling, offset, masked_below,
                        sqb, sqh, sqt, skb, skh, skn, slb, slh, smb, smt, smn,
                        HD: tl.constexpr, HD_P: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        CAUSAL: tl.constexpr, MASK_KIND: tl.constexpr, IEEE: tl.constexpr,
                        UPCAST: tl.constexpr):
        # one program: BLOCK_N keys of one (batch, head); it walks the query blocks that can see them.
        # MASK_KIND 0: none, 1: boolean (as uint8, nonzero = allowed), 2: additive (allowed above masked_below)
        pid_n, bh = tl.program_id(0), tl.program_id(1)
        b, h = (bh // H).to(tl.int64), bh % H  # 64-bit offsets: a (T x N) mask passes 2^31 elements at ~46k tokens
        offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
        offs_d = tl.arange(0, HD_P)
        k = tl.load(K + b * skb + (h // G) * skh + offs_n[:, None] * skn + offs_d[None, :],
                    mask=(offs_n[:, None] < N) & (offs_d[None, :] < HD), other=0.0)  # (BLOCK_N, HD_P)
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        first = 0
        if CAUSAL:  # queries t < j - offset see no key of this block
            first = tl.maximum(pid_n * BLOCK_N - offset, 0) // BLOCK_M * BLOCK_M
        for m0 in range(first, T, BLOCK_M):
            offs_m = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
            q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqt + offs_d[None, :],
                        mask=(offs_m[:, None] < T) & (offs_d[None, :] < HD), other=0.0)  # (BLOCK_M, HD_P)
            if UPCAST:  # Triton's CPU interpreter multiplies bfloat16 tiles wrongly: float32 there (same products)
                q = q.to(tl.float32)
            if IEEE or UPCAST:
                s = tl.dot(q, tl.trans(k).to(q.dtype), input_precision="ieee") * scaling
            else:
                s = tl.dot(q, tl.trans(k)) * scaling  # (BLOCK_M, BLOCK_N), float32 accumulation
            ok = (offs_m[:, None] < T) & (offs_n[None, :] < N)
            if CAUSAL:
                ok = ok & (offs_m[:, None] + offset >= offs_n[None, :])
            if MASK_KIND == 1:
                seen = tl.load(MASK + b * smb + offs_m[:, None] * smt + offs_n[None, :] * smn, mask=ok, other=0)
                ok = ok & (seen != 0)
            if MASK_KIND == 2:
                bias = tl.load(MASK + b * smb + offs_m[:, None] * smt + offs_n[None, :] * smn, mask=ok,
                               other=0.0).to(tl.float32)
                ok = ok & (bias > masked_below)
                s = s + bias
            lse = tl.load(LSE + b * slb + h * slh + offs_m, mask=offs_m < T, other=0.0)
            p = tl.exp(tl.where(ok, s - lse[:, None], float("-inf")))
            acc += tl.sum(tl.where(p == p, p, 0.0), axis=0)  # p == p: a row that sees no key (lse -inf) adds 0
        tl.store(COL + bh.to(tl.int64) * N + offs_n, acc, mask=offs_n < N)

    return triton, key_mass_kernel


def _triton():
    """(triton, kernel) for the current ``TRITON_INTERPRET`` setting, or None."""
    return _triton_module(os.environ.get("TRITON_INTERPRET", "0") == "1")


BLOCK_M = BLOCK_N = 64  # query and key tile of the Triton kernel


def _launch(query: torch.Tensor, key: torch.Tensor, lse: torch.Tensor, mask: torch.Tensor | None,
            causal_offset: int | None, scaling: float, interpret: bool) -> tuple[tuple, tuple, dict, torch.Tensor]:
    """(grid, arguments, constexprs, output) of the column-sum kernel for these tensors: what
    :func:`_triton_column_sums` launches and :func:`compile_for_gpu` compiles."""
    B, H, T, hd = query.shape
    N, Hkv = key.shape[2], key.shape[1]
    q, k = query.contiguous(), key.contiguous()
    lse = lse.float().contiguous()
    col = torch.empty(B, H, N, dtype=torch.float32, device=query.device)
    kind, m, below = 0, q, 0.0  # the mask read in place, in its own dtype: no (T x N) copy
    if mask is not None:
        m = mask[:, :, :, :N]
        kind = 1 if m.dtype == torch.bool else 2
        below = 0.0 if kind == 1 else float(torch.finfo(m.dtype).min) / 2
        m = m.view(torch.uint8) if kind == 1 else m
    m_strides = (0, 0, 0) if mask is None else (m.stride(0) if m.shape[0] > 1 else 0, m.stride(2), m.stride(3))
    grid = (-(-N // BLOCK_N), B * H)
    args = (q, k, lse, m, col, T, N, H, H // Hkv, float(scaling), int(causal_offset or 0), below,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            lse.stride(0), lse.stride(1), *m_strides)
    constexprs = {"HD": hd, "HD_P": max(16, 1 << (hd - 1).bit_length()), "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N,
                  "CAUSAL": mask is None and causal_offset is not None, "MASK_KIND": kind,
                  "IEEE": query.dtype == torch.float32, "UPCAST": interpret}
    return grid, args, constexprs, col


def _triton_column_sums(query: torch.Tensor, key: torch.Tensor, lse: torch.Tensor, mask: torch.Tensor | None,
                        causal_offset: int | None, scaling: float) -> torch.Tensor:
    """:func:`column_sums` as one Triton kernel launch: (B, H, N) float32; q and k read in their own dtype
    (bfloat16 products are exact in float32 accumulation; float32 ones in IEEE precision, not TF32)."""
    _, kernel = _triton()
    grid, args, constexprs, col = _launch(query, key, lse, mask, causal_offset, scaling,
                                          interpret=os.environ.get("TRITON_INTERPRET", "0") == "1")
    kernel[grid](*args, **constexprs)
    return col


_TRITON_TYPES = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32", torch.uint8: "*u8"}


def compile_for_gpu(query: torch.Tensor, key: torch.Tensor, lse: torch.Tensor, mask: torch.Tensor | None,
                    causal_offset: int | None, scaling: float, capability: int = 90):
    """Compile, without a GPU, the kernel :func:`_triton_column_sums` would launch for tensors like these, for an
    NVIDIA GPU of this compute capability (80: A100, 90: H100 / H200) down to its binary (Triton's bundled ptxas):
    what Triton's CPU interpreter cannot check -- types, tile shapes, the dot's precision -- checked here. Needs
    Triton imported with ``TRITON_INTERPRET`` unset. Returns Triton's compiled kernel (``.asm["cubin"]``)."""
    triton, kernel = _triton_module(False)
    from triton.backends.compiler import GPUTarget

    _, args, constexprs, _ = _launch(query, key, lse, mask, causal_offset, scaling, interpret=False)
    names = [n for n in kernel.arg_names if n not in constexprs]
    signature = {n: _TRITON_TYPES[a.dtype] if isinstance(a, torch.Tensor) else ("fp32" if isinstance(a, float)
                 else "i32" if abs(a) < 2**31 else "i64") for n, a in zip(names, args)}
    signature.update({n: "constexpr" for n in constexprs})
    source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", capability, 32))
