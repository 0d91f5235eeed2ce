"""Choosing where attention calibration (ACT, arXiv 2406.15765) applies: heads with sinks beyond the first token."""

from __future__ import annotations

import torch

from sinklib.attnstats import AttentionStats
from sinklib.models import LoadedModel


@torch.inference_mode()
def non_first_sink_heads(lm: LoadedModel, ids: torch.Tensor, threshold: float = 0.1, min_fraction: float = 0.5,
                         batch_size: int = 8) -> dict[int, list[int]]:
    """Heads in which some key j >= 1 has column mean (1/T) sum_t A[t, j] > ``threshold`` in at least
    ``min_fraction`` of the calibration sequences. ids: (N, T) -> {layer: [head, ...]}."""
    hits = None
    for start in range(0, len(ids), batch_size):
        batch = ids[start:start + batch_size].to(lm.device)
        with AttentionStats(lm.model) as st:
            lm.model(batch, use_cache=False, logits_to_keep=1)
        T = batch.shape[1]
        col_mean = torch.stack([torch.cat(st.col_sum[i]) for i in st.layers]) / T  # (L, B, H, T)
        h = (col_mean[..., 1:] > threshold).any(dim=-1).float().sum(dim=1)  # (L, H) sequences with such a sink
        hits = h if hits is None else hits + h
    frac = hits / len(ids)
    return {layer: heads for layer in range(frac.shape[0])
            if (heads := (frac[layer] >= min_fraction).nonzero().flatten().tolist())}
