"""Sink and outlier metrics: pure functions from tensors to numbers or tensors.

Conventions: attention tensors end in ``(T_q, T_k)`` (query rows, key columns, causal, rows sum to 1); hidden states
end in ``(T, d)``. Positions are 0-indexed here: the papers' "first token" k = 1 is ``key=0``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

SUN_MIN_ABS = 100.0  # Sun et al. (arXiv 2402.17762): |h| > 100 ...
SUN_MIN_RATIO = 1000.0  # ... and about 1000x the median |h| of the layer's output (the authors' torch.median(feat_abs))
GU_EPS = 0.3  # Gu et al. (arXiv 2410.10781) default threshold


def alpha(attn: torch.Tensor, key: int = 0, later_only: bool = False, window: int | None = None) -> torch.Tensor:
    """Per-head importance of key k (Gu et al.): alpha_k = 1/(T-k) * sum_{t >= k} A[t, k].

    ``later_only=True``: 1/(T-k-1) * sum_{t > k} A[t, k], the attention key k gets from *later* queries only. Use it
    when an intervention fixes row k itself (the self-only mask sets A[k, k] = 1, which would add 1/(T-k) to every
    head by construction). ``window``: a sliding-window layer of W keys (query t sees keys t-W+1..t), where only the
    queries k <= t < k + W see key k: Gu's T - k generalised, alpha_k = 1/min(T-k, W) * sum_{k <= t < k+W} A[t, k]
    (without it, the queries that cannot see k would pull alpha_k down as T grows, by construction).
    attn: (..., T, T) -> (...), e.g. (B, H, T, T) -> (B, H).
    """
    T = attn.shape[-1]
    if not 0 <= key < T - (1 if later_only else 0):
        raise ValueError(f"key {key} outside 0..{T - 1 - (1 if later_only else 0)}")
    stop = T if window is None else min(T, key + window)
    return attn[..., key + (1 if later_only else 0):stop, key].float().mean(dim=-1)


def row_normalised(attn: torch.Tensor) -> torch.Tensor:
    """A[t, j] / sum_j' A[t, j']: each query's weights as shares of its own row (rows of zeros stay zero).

    For softmax the rows already sum to 1; for sigmoid, softpick, off-by-one or a learned sink they do not, and a
    small A[t, 0] can mean a small row rather than a row that ignores the first token. attn: (..., T, T).
    """
    a = attn.float()
    return a / a.sum(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).tiny)


def sink_rate(alphas: torch.Tensor, eps: float = GU_EPS) -> float:
    """Sink_k^eps = fraction of (sequence, layer, head) entries with alpha_k > eps.

    With alphas shaped (N, L, H) this is Gu et al.'s per-sequence fraction of heads, averaged over the N sequences.
    """
    return (alphas > eps).float().mean().item()


def sink_mass(attn: torch.Tensor) -> torch.Tensor:
    """Attention mass each key receives, normalised by how many queries can see it.

    m_j = 1/(T-j) * sum_{t >= j} A[t, j]  (= alpha_j for every j).  attn: (..., T, T) -> (..., T).
    Under uniform causal attention m_j is about H_T / T (harmonic); a sink has m_j far above the mean over j.
    """
    T = attn.shape[-1]
    visible = torch.arange(T, 0, -1, device=attn.device, dtype=torch.float32)  # T - j queries see key j
    return attn.float().sum(dim=-2) / visible


def dom_ratio(h: torch.Tensor) -> torch.Tensor:
    """Dimension disparity DomRatio(h) = max_j |h_j| / mean_j |h_j| over the last dimension. (..., d) -> (...)."""
    a = h.float().abs()
    return a.amax(dim=-1) / a.mean(dim=-1).clamp_min(torch.finfo(torch.float32).tiny)


def position_variance(x: torch.Tensor) -> torch.Tensor:
    """Per-position variance across a batch, averaged over features.

    x: (N, T, *feat) -> (T,):  v_t = mean_f Var_n[x_{n,t,f}]  (population variance over the N sequences).
    """
    if x.shape[0] < 2:
        raise ValueError("position_variance needs at least 2 sequences")
    return x.float().var(dim=0, unbiased=False).flatten(1).mean(dim=1)


def layer_median(h: torch.Tensor) -> torch.Tensor:
    """The median |h| Sun et al. compare with: over a sequence's whole layer output, as their code does
    (locuslab/massive-activations ``main_llm.py --exp2``: ``torch.median(feat_abs)`` of the (1, T, d) output; for an
    even count torch takes the lower of the two middle values). h: (..., T, d) -> (..., 1, 1), one median per
    sequence."""
    a = h.float().abs()
    return a.flatten(-2).median(dim=-1).values[..., None, None]


def massive_mask(h: torch.Tensor, min_abs: float = SUN_MIN_ABS, min_ratio: float = SUN_MIN_RATIO,
                 median: str = "layer") -> torch.Tensor:
    """Sun et al.'s criterion, entrywise: |h_{t,j}| > min_abs and |h_{t,j}| > min_ratio * m.

    ``median="layer"`` (theirs): m = median |h| over the sequence's whole (T, d) layer output (:func:`layer_median`);
    ``median="token"`` (an extra, labelled as ours): m = median_j' |h_{t,j'}| of each token's own d entries, which
    is larger where the token itself is large -- on SmolLM2 the first token's median is more than ten times the
    layer's. h: (..., T, d) -> bool (..., T, d).
    """
    a = h.float().abs()
    if median == "layer":
        med = layer_median(h)
    elif median == "token":
        med = a.median(dim=-1, keepdim=True).values
    else:
        raise ValueError(f"median must be 'layer' (Sun et al.'s) or 'token', not {median!r}")
    return (a > min_abs) & (a > min_ratio * med)


@dataclass
class MassiveReport:
    """Massive activations in one layer's hidden states (N, T, d)."""

    dims: list[int]  # feature dimensions holding massive entries, most frequent first
    positions: list[int]  # token positions holding them, most frequent first
    count: int  # number of massive entries
    fraction_tokens: float  # fraction of tokens with at least one massive entry


def find_massive(h: torch.Tensor, min_abs: float = SUN_MIN_ABS, min_ratio: float = SUN_MIN_RATIO) -> MassiveReport:
    """Find the massive dimensions automatically: where :func:`massive_mask` fires, counted by dimension/position.

    h: (N, T, d).
    """
    mask = massive_mask(h, min_abs, min_ratio)  # (N, T, d)
    idx = mask.nonzero()  # (M, 3): seq, pos, dim
    dims = [d for d, _ in Counter(idx[:, 2].tolist()).most_common()]
    pos = [p for p, _ in Counter(idx[:, 1].tolist()).most_common()]
    return MassiveReport(dims, pos, int(mask.sum()), mask.any(dim=-1).float().mean().item())


@dataclass
class Extreme:
    """The largest-magnitude entry of a batch of hidden states and the context to judge it."""

    dim: int
    value: float  # signed value of the entry
    median: float  # median |h| over the sequence's whole layer output (Sun et al.'s, :func:`layer_median`)
    position: int
    seq: int
    token_median: float | None = None  # median |h| over the d entries of the same token (an extra)

    @property
    def ratio(self) -> float:
        return abs(self.value) / max(self.median, 1e-12)

    @property
    def is_massive(self) -> bool:
        return abs(self.value) > SUN_MIN_ABS and self.ratio > SUN_MIN_RATIO

    def as_dict(self) -> dict:
        return {"dim": self.dim, "value": self.value, "median": self.median, "position": self.position,
                "ratio": self.ratio, "massive": self.is_massive, "token_median": self.token_median}


def largest_activation(h: torch.Tensor) -> Extreme:
    """The entry with the largest |h| in (N, T, d), with its dimension, position, its sequence's layer median |h|
    (Sun et al.'s) and its token's median |h| (an extra)."""
    N, T, d = h.shape
    a = h.float().abs()
    flat = int(a.argmax())
    n, t, j = flat // (T * d), (flat // d) % T, flat % d
    return Extreme(dim=j, value=float(h[n, t, j]), median=float(layer_median(h[n])), position=t, seq=n,
                   token_median=float(a[n, t].median()))


def top_dims(h: torch.Tensor, k: int = 3) -> list[tuple[int, float]]:
    """The k feature dimensions with the largest max |h| over all tokens: [(dim, max |h|), ...]. h: (..., d)."""
    per_dim = h.float().abs().flatten(0, -2).amax(dim=0)  # (d,)
    vals, dims = per_dim.topk(min(k, per_dim.numel()))
    return list(zip(dims.tolist(), vals.tolist()))
