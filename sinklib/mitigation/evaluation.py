"""What every checkpoint of a training run records: the loss and the sink and outlier statistics of a fixed batch."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sinklib.core import metrics
from sinklib.mitigation.variant_lm import TinyLM


def effective_rank(h: torch.Tensor) -> float:
    """exp(entropy of the normalised singular values) of a (tokens, d) matrix (Roy & Vetterli)."""
    s = torch.linalg.svdvals(h.float() - h.float().mean(0))
    p = s / s.sum()
    return float(torch.exp(-(p * torch.log(p.clamp_min(1e-12))).sum()))


def kurtosis(x: torch.Tensor) -> float:
    """E[(x - mu)^4] / sigma^4 over all entries (3 for a Gaussian; large when a few entries are huge)."""
    x = x.double().flatten()
    z = x - x.mean()
    return float((z ** 4).mean() / (z ** 2).mean() ** 2)


@torch.no_grad()
def evaluate(model: TinyLM, batch: torch.Tensor, eps: float = metrics.GU_EPS) -> dict:
    """Loss and sink/outlier statistics on a fixed batch (N, T).

    alpha: attention of every query to position 0 (BOS), alpha_0 (Gu et al.'s alpha_1: they count positions from 1),
    per (sequence, layer, head);
    row_mass: mean over queries of sum_j A_tj -- 1 for softmax, < 1 when mass goes to a learned sink or the
    off-by-one zero logit, unconstrained for sigmoid attention;
    first_share: the row-normalised share of BOS, A_t0 / sum_j A_tj, averaged like alpha (equal to alpha for softmax;
    for unnormalised rows it separates "little mass in the row" from "little of the row's mass on BOS").
    """
    model.eval()
    logits, A, H = model(batch, record=True)  # (N, T, V), (L, N, H, T, T), (L, N, T, d)
    model.train()
    alphas = metrics.alpha(A, 0).permute(1, 0, 2)  # (N, L, H): attention to position 0 (BOS)
    shares = metrics.alpha(metrics.row_normalised(A), 0).permute(1, 0, 2)  # (N, L, H): BOS share of each row
    return {
        "val_loss": float(F.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten())),
        "sink_rate": metrics.sink_rate(alphas, eps),
        "first_attention": float(alphas.mean()),
        "alpha_by_layer": alphas.mean(dim=(0, 2)).tolist(),
        "alpha_by_head": alphas.mean(dim=0).tolist(),  # (L, H)
        "row_mass": float(A.sum(-1).mean()),
        "first_share": float(shares.mean()),
        "share_sink_rate": metrics.sink_rate(shares, eps),
        "share_by_head": shares.mean(dim=0).tolist(),  # (L, H)
        "max_activation": float(H.abs().max()),
        "kurtosis": kurtosis(H),
        "dom_ratio_first": float(metrics.dom_ratio(H[:, :, 0]).mean()),
        "effective_rank": effective_rank(H[-1].flatten(0, 1)),
    }
