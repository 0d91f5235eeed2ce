"""Which keys each query may see, read from a layer's attention mask as the backends read it -- for
:class:`~sinklib.core.attnstats.AttentionStats`, which must reduce the very attention the model computes.

A 4-D mask (causal, padding, sliding windows; boolean, or additive with the dtype's minimum where masked) is read as
given; ``None`` as sdpa reads it: for a causal module and T > 1 queries, query t sees keys 0..t (top-left
alignment), and a single query sees every key. A sliding window passed without a mask that shows it is refused.
"""

from __future__ import annotations

import torch

from sinklib.core.errors import InputError


def allowed(mask: torch.Tensor | None, q_len: int, k_len: int, start: int, stop: int,
            device: torch.device) -> torch.Tensor:
    """Boolean (B or 1, 1, stop-start, k_len): may query t (rows start..stop-1) attend to key j?

    ``None`` is read as sdpa reads it for a causal module: causal with top-left alignment (query t sees keys 0..t)
    when q_len > 1, every key when q_len == 1 (bidirectional modules get an all-zero mask before this).
    """
    if mask is None:
        q_pos = torch.arange(start, stop, device=device) + (k_len if q_len == 1 else 0)
        return (torch.arange(k_len, device=device)[None, :] <= q_pos[:, None])[None, None]
    block = mask[:, :, start:stop, :k_len]
    if block.dtype == torch.bool:
        return block
    return block > torch.finfo(block.dtype).min / 2  # additive float mask: 0 = allowed, dtype min = masked


def allowed_keys(mask: torch.Tensor | None, q_len: int, keys: list[int], causal: bool,
                 device: torch.device) -> torch.Tensor:
    """Boolean (B|1, 1, T, |keys|): may query t see each listed key? Read from the mask's columns only (no T x N
    tensor): a 4-D mask as given; None as sdpa reads it (causal: j <= t; otherwise every key)."""
    if mask is not None:
        cols = mask[:, :, :q_len, keys]
        return cols if cols.dtype == torch.bool else cols > torch.finfo(cols.dtype).min / 2
    if not causal:
        return torch.ones(1, 1, q_len, len(keys), dtype=torch.bool, device=device)
    return (torch.tensor(keys, device=device)[None, :] <= torch.arange(q_len, device=device)[:, None])[None, None]


def visible(mask: torch.Tensor | None, q_len: int, k_len: int, causal: bool, batch: int, device: torch.device,
            block_bytes: int) -> torch.Tensor:
    """(B, N) float64: how many queries may see each key -- causal: T - j; no mask otherwise: T; a 4-D mask:
    counted in blocks of queries."""
    if mask is None:
        j = torch.arange(k_len, device=device)
        seen = (q_len - j).clamp_min(0) if causal else torch.full((k_len,), q_len, device=device)
        return seen.double().expand(batch, k_len)
    vis = torch.zeros(batch, k_len, dtype=torch.float64, device=device)
    step = max(1, block_bytes // max(1, mask.shape[0] * k_len))
    for start in range(0, q_len, step):
        ok = allowed(mask, q_len, k_len, start, min(q_len, start + step), device)
        vis += ok.sum(dim=2).flatten(1).double().expand(batch, -1)
    return vis


def refuse_unseen_window(mask: torch.Tensor | None, kwargs: dict, n_keys: int) -> None:
    """A sliding window that would cut keys but no mask showing it: statistics of another attention -- refuse."""
    window = kwargs.get("sliding_window")
    if mask is None and window and window < n_keys:
        raise InputError(f"AttentionStats got no mask but a sliding window of {window} < {n_keys} keys (a window it "
                         "cannot see); load the model with attn_implementation='sdpa' or 'eager'.")
