"""A small Llama-style decoder (RoPE, RMSNorm, SwiGLU) whose attention function is a pluggable variant.

Written to be read: one file, shape comments, nothing hidden. Used by the mitigation notebook to train each
:mod:`sinklib.mitigation.variants` variant from scratch on the same data, seeds and budget. With ``n_experts > 0``
the feed-forward is a Mixtral-style mixture of experts (a router choosing ``top_k`` of ``n_experts`` SwiGLU experts,
softmax over the chosen logits, Switch-style load-balancing loss) trained end to end: ``11_moe``'s router that is
trained, not fitted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from sinklib.mitigation.variants import VARIANTS, Sigmoid


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 258  # 256 bytes + BOS (256) + padding id (257, unused)
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    d_ff: int = 344  # SwiGLU width ~ 8/3 d
    max_len: int = 256
    attention: str = "softmax"
    rope_theta: float = 10000.0  # 0 = no positional encoding at all (NoPE)
    options: tuple[tuple[str, float], ...] = ()  # the attention variant's keyword arguments: (("gain_init", 0.1),)
    n_experts: int = 0  # > 0: a mixture-of-experts FFN of n_experts SwiGLU experts of width d_ff
    top_k: int = 2  # experts per token
    balance: float = 0.01  # weight of the load-balancing loss (Switch / Mixtral: E * sum_e f_e P_e)

    def as_dict(self) -> dict:
        return asdict(self)


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding on (B, H, T, hd): pairs (x_i, x_{i+hd/2}) rotated by t * theta^(-2i/hd)."""
    T, hd = x.shape[-2], x.shape[-1]
    inv = theta ** (-torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)  # (hd/2,)
    ang = torch.arange(T, device=x.device, dtype=torch.float32)[:, None] * inv  # (T, hd/2)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class MoE(nn.Module):
    """Mixtral's sparse FFN, written densely for small sizes: every expert runs on every token and each token keeps
    its ``top_k`` by router logit, weighted by the softmax over those k logits -- the same output as sparse dispatch.
    ``choice`` (B, T, k) and ``balance_loss`` are kept from the last forward."""

    def __init__(self, d: int, d_ff: int, n_experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Linear(d, n_experts, bias=False)
        self.experts_gate_up = nn.Parameter(torch.randn(n_experts, d, 2 * d_ff) * 0.02)  # (E, d, 2 f)
        self.experts_down = nn.Parameter(torch.randn(n_experts, d_ff, d) * 0.02)  # (E, f, d)
        self.choice: torch.Tensor | None = None
        self.balance_loss = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.router(x)  # (B, T, E)
        top, choice = logits.topk(self.top_k, dim=-1)  # (B, T, k)
        weights = top.softmax(dim=-1)  # (B, T, k)
        gate, up = torch.einsum("btd,edf->btef", x, self.experts_gate_up).chunk(2, dim=-1)  # (B, T, E, f) each
        y = torch.einsum("btef,efd->bted", F.silu(gate) * up, self.experts_down)  # (B, T, E, d)
        chosen = y.gather(2, choice[..., None].expand(*choice.shape, y.shape[-1]))  # (B, T, k, d)
        # Switch Transformer's auxiliary loss: E * sum_e (share of tokens routed to e) * (mean router probability of e)
        E = logits.shape[-1]
        routed = F.one_hot(choice, E).float().sum(2).mean(dim=(0, 1)) / self.top_k  # (E,)
        self.balance_loss = E * (routed * logits.softmax(-1).mean(dim=(0, 1))).sum()
        self.choice = choice.detach()
        return (weights[..., None] * chosen).sum(2)  # (B, T, d)


class Block(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        hd = cfg.d_model // cfg.n_heads
        self.cfg, self.hd = cfg, hd
        self.norm1, self.norm2 = RMSNorm(cfg.d_model), RMSNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.o_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        kwargs = {"max_len": cfg.max_len} if VARIANTS[cfg.attention] is Sigmoid else {}
        kwargs.update(dict(cfg.options))
        self.attn = VARIANTS[cfg.attention](cfg.d_model, cfg.n_heads, hd, **kwargs)
        if cfg.n_experts:
            self.moe = MoE(cfg.d_model, cfg.d_ff, cfg.n_experts, cfg.top_k)
        else:
            self.gate_up = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)
            self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, h: torch.Tensor, need_weights: bool = True):
        B, T, _ = h.shape
        x = self.norm1(h)  # (B, T, d)
        q, k, v = self.qkv(x).view(B, T, 3, self.cfg.n_heads, self.hd).permute(2, 0, 3, 1, 4)  # 3 x (B, H, T, hd)
        if self.cfg.rope_theta > 0:
            q, k = rope(q, self.cfg.rope_theta), rope(k, self.cfg.rope_theta)
        o, A = self.attn(q, k, v, x, need_weights)  # (B, H, T, hd), (B, H, T, T) or None (fused, on CUDA)
        h = h + self.o_proj(o.transpose(1, 2).reshape(B, T, -1))
        if self.cfg.n_experts:
            return h + self.moe(self.norm2(h)), A
        gate, up = self.gate_up(self.norm2(h)).chunk(2, dim=-1)
        return h + self.down(F.silu(gate) * up), A


class TinyLM(nn.Module):
    def __init__(self, cfg: TinyConfig):
        super().__init__()
        if cfg.attention not in VARIANTS:
            raise ValueError(f"unknown attention {cfg.attention!r}; use one of {', '.join(VARIANTS)}")
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear | nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids: torch.Tensor, record: bool = False):
        """ids (B, T) -> logits (B, T, V); with ``record`` also per-layer attention (L, B, H, T, T) and residual
        states after each block (L, B, T, d)."""
        h = self.embed(ids)
        atts, hs = [], []
        for block in self.blocks:
            h, A = block(h, need_weights=record)
            if record:
                atts.append(A.detach())
                hs.append(h.detach())
        logits = self.head(self.norm(h))
        return (logits, torch.stack(atts), torch.stack(hs)) if record else logits

    def balance_loss(self) -> torch.Tensor:
        """The load-balancing loss of the last forward, weighted by ``cfg.balance`` (0 without experts)."""
        if not self.cfg.n_experts:
            return torch.zeros(())
        return self.cfg.balance * sum(b.moe.balance_loss for b in self.blocks)
