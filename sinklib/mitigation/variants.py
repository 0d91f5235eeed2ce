"""Attention functions that do (or do not) grow a sink, each a small module with one job.

Every variant maps per-head queries, keys, values (B, H, T, hd) -- and the layer's normalised input x (B, T, d) for
the gated variants -- to head outputs (B, H, T, hd) before W_O, and also returns its attention weights (B, H, T, T)
so training can measure sinks. Causal masking is part of every variant.

With ``need_weights=False`` on a CUDA device (a training step that records nothing) the softmax-like variants --
softmax, head-wise RMSNorm, both gates, and off-by-one / sink logit / KV bias as softmax over one extra key -- hand
the attention to torch's fused kernels (:meth:`Softmax.fused_output`: flash-attention for plain causal softmax, the
memory-efficient kernel with a (T x T+1) mask for the extra key) and return no weights: the same function, without
the (B, H, T, T) maps in memory. Sigmoid and softpick are not a softmax and keep their maps. On the CPU the maps are
always formed (the CPU profile's reference runs were trained so, and its small T gains little).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def causal_logits(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """l_{t,j} = q_t . k_j / sqrt(hd) for j <= t, -inf above the diagonal. (B, H, T, hd) -> (B, H, T, T)."""
    T, hd = q.shape[-2], q.shape[-1]
    logits = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return logits.masked_fill(mask, float("-inf"))


def extra_key_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k0: torch.Tensor, v0: torch.Tensor,
                        bias0: torch.Tensor | None = None) -> torch.Tensor:
    """softmax over [l_t0, l_t1..l_tt] with one extra key k0 (value v0) every query sees, l_t0 = q_t . k0 / sqrt(hd)
    (+ ``bias0``, per head), through torch's fused attention. q, k, v (B, H, T, hd); k0, v0 (B|1, H, 1, hd); bias0
    (H,) or None. Returns y = sum_j p_tj v_j over the T + 1 keys: (B, H, T, hd)."""
    B, H, T, hd = q.shape
    keys = torch.cat([k0.expand(B, H, 1, hd).to(k.dtype), k], dim=2)  # (B, H, T + 1, hd)
    values = torch.cat([v0.expand(B, H, 1, hd).to(v.dtype), v], dim=2)
    seen = torch.ones(T, T + 1, dtype=torch.bool, device=q.device).tril(1)  # key 0 always, key j + 1 for j <= t
    if bias0 is None:
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=seen)
    mask = torch.zeros(1, H, T, T + 1, dtype=q.dtype, device=q.device).masked_fill(~seen, float("-inf"))
    mask = torch.cat([bias0.to(q.dtype).view(1, H, 1, 1).expand(1, H, T, 1), mask[..., 1:]], dim=-1)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


class Softmax(nn.Module):
    """Baseline: A = softmax_j(l_{t,j}), y = A v."""

    fusable = True  # its output has a fused-kernel form (fused_output)

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__()

    def weights(self, q, k) -> torch.Tensor:
        return torch.softmax(causal_logits(q, k), dim=-1)

    def fused_output(self, q, k, v) -> torch.Tensor:
        """y = softmax(l) v by torch's fused causal attention (flash-attention on CUDA): (B, H, T, hd)."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fuses(self, q: torch.Tensor, need_weights: bool) -> bool:
        """Take the fused kernel: no weights wanted, a softmax-like variant, a CUDA device."""
        return not need_weights and self.fusable and q.is_cuda

    def attend(self, q, k, v, need_weights: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(y, A): the maps formed when needed or on a CPU, else the fused kernel and A = None."""
        if self.fuses(q, need_weights):
            return self.fused_output(q, k, v), None
        A = self.weights(q, k)
        return torch.matmul(A, v), A

    def forward(self, q, k, v, x, need_weights: bool = True):
        return self.attend(q, k, v, need_weights)


class HeadwiseRMSNorm(Softmax):
    """Structural-origin fix (arXiv 2605.06611): o_hat = o / RMS(o) * g per head, g in R^hd shared across heads.

    ``gain_init``: the initial value of every entry of g (1, as any RMSNorm, unless set; the comparison at small
    scale is sensitive to it because unit-RMS head outputs can dominate a freshly initialised residual stream).
    """

    def __init__(self, d_model: int, n_heads: int, head_dim: int, eps: float = 1e-6, gain_init: float = 1.0):
        super().__init__(d_model, n_heads, head_dim)
        self.gain = nn.Parameter(torch.full((head_dim,), float(gain_init)))
        self.eps = eps

    def forward(self, q, k, v, x, need_weights: bool = True):
        o, A = self.attend(q, k, v, need_weights)
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps) * self.gain
        return o, A


class GatedHeadwise(Softmax):
    """Gated attention (Qiu et al., arXiv 2505.06708): y' = y * sigmoid(x W_g), one gate per head."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__(d_model, n_heads, head_dim)
        self.gate = nn.Linear(d_model, n_heads)

    def forward(self, q, k, v, x, need_weights: bool = True):
        o, A = self.attend(q, k, v, need_weights)
        g = torch.sigmoid(self.gate(x)).transpose(1, 2)[..., None]  # (B, H, T, 1)
        return o * g, A


class GatedElementwise(Softmax):
    """Gated attention, element-wise: one gate per head channel, y' = y * sigmoid(x W_g)."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__(d_model, n_heads, head_dim)
        self.gate = nn.Linear(d_model, n_heads * head_dim)
        self.n_heads = n_heads

    def forward(self, q, k, v, x, need_weights: bool = True):
        o, A = self.attend(q, k, v, need_weights)
        B, T = x.shape[:2]
        g = torch.sigmoid(self.gate(x)).view(B, T, self.n_heads, -1).transpose(1, 2)  # (B, H, T, hd)
        return o * g, A


class Sigmoid(Softmax):
    """Sigmoid attention without normalisation: A_{t,j} = sigmoid(l_{t,j} + b), b learnable, init -log(T_max)."""

    fusable = False

    def __init__(self, d_model: int, n_heads: int, head_dim: int, max_len: int = 256):
        super().__init__(d_model, n_heads, head_dim)
        self.bias = nn.Parameter(torch.tensor(-math.log(max_len)))

    def weights(self, q, k):
        return torch.sigmoid(causal_logits(q, k) + self.bias)  # exp(-inf) -> sigmoid = 0 above the diagonal


class SoftmaxOffByOne(Softmax):
    """Softmax-off-by-one (zero sink): A_{t,j} = exp(l_tj) / (1 + sum_j' exp(l_tj')); rows may sum to < 1."""

    def weights(self, q, k):
        logits = causal_logits(q, k)
        zero = torch.zeros_like(logits[..., :1])
        return torch.softmax(torch.cat([logits, zero], dim=-1), dim=-1)[..., :-1]

    def fused_output(self, q, k, v):
        """The zero sink as an extra key of zeros with a zero value: its logit is 0, it adds nothing to y."""
        zero = torch.zeros(1, q.shape[1], 1, q.shape[-1], dtype=q.dtype, device=q.device)
        return extra_key_attention(q, k, v, zero, zero)


class Softpick(Softmax):
    """Softpick (arXiv 2504.20966): A = relu(exp(l) - 1) / sum_j |exp(l_j) - 1| over visible keys (stable form)."""

    fusable = False

    def weights(self, q, k, eps: float = 1e-6):
        logits = causal_logits(q, k)
        m = logits.amax(dim=-1, keepdim=True).clamp_min(0.0)  # shift by max(m, 0): exp(l - m) - exp(-m)
        e = torch.exp(logits - m) - torch.exp(-m)  # masked entries: 0 - exp(-m) -> excluded below
        visible = torch.isfinite(logits)
        num = F.relu(e).masked_fill(~visible, 0.0)
        den = e.abs().masked_fill(~visible, 0.0).sum(-1, keepdim=True)
        return num / (den + eps * torch.exp(-m))


class SinkLogit(Softmax):
    """Learned sink logit per head (gpt-oss): A = softmax over [l_t, s_h], sink column dropped; rows sum to < 1."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__(d_model, n_heads, head_dim)
        self.sink = nn.Parameter(torch.zeros(n_heads))

    def weights(self, q, k):
        logits = causal_logits(q, k)
        s = self.sink.view(1, -1, 1, 1).expand(*logits.shape[:-1], 1)
        return torch.softmax(torch.cat([logits, s], dim=-1), dim=-1)[..., :-1]

    def fused_output(self, q, k, v):
        """The sink logit s_h as an extra key of zeros (logit 0) biased by s_h, with a zero value."""
        zero = torch.zeros(1, q.shape[1], 1, q.shape[-1], dtype=q.dtype, device=q.device)
        return extra_key_attention(q, k, v, zero, zero, bias0=self.sink)


class KVBias(Softmax):
    """Explicit attention bias (Sun et al., arXiv 2402.17762): a learnable key k' and value v' per head, always
    visible: A over [k', k_1..k_t], y = A' v' + sum_j A_j v_j. Returned weights exclude the k' column."""

    def __init__(self, d_model: int, n_heads: int, head_dim: int):
        super().__init__(d_model, n_heads, head_dim)
        self.k_bias = nn.Parameter(torch.randn(n_heads, head_dim) * 0.02)
        self.v_bias = nn.Parameter(torch.zeros(n_heads, head_dim))

    def fused_output(self, q, k, v):
        """k' and v' as the extra key and value every query sees."""
        return extra_key_attention(q, k, v, self.k_bias[None, :, None, :], self.v_bias[None, :, None, :])

    def forward(self, q, k, v, x, need_weights: bool = True):
        if self.fuses(q, need_weights):
            return self.fused_output(q, k, v), None
        logits = causal_logits(q, k)  # (B, H, T, T)
        extra = torch.einsum("bhtd,hd->bht", q, self.k_bias)[..., None] / math.sqrt(q.shape[-1])
        P = torch.softmax(torch.cat([extra, logits], dim=-1), dim=-1)
        A = P[..., 1:]
        return torch.matmul(A, v) + P[..., :1] * self.v_bias[None, :, None, :], A


VARIANTS: dict[str, type[Softmax]] = {
    "softmax": Softmax,
    "headwise_rmsnorm": HeadwiseRMSNorm,
    "gated_headwise": GatedHeadwise,
    "gated_elementwise": GatedElementwise,
    "sigmoid": Sigmoid,
    "softmax_off_by_one": SoftmaxOffByOne,
    "softpick": Softpick,
    "sink_logit": SinkLogit,
    "kv_bias": KVBias,
}
