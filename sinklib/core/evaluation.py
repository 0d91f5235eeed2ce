"""Language-model evaluation: perplexity over token windows, optionally under an intervention."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from sinklib.core.loaded import LoadedModel


@torch.inference_mode()
def token_nll(lm: LoadedModel, input_ids: torch.Tensor, batch_size: int = 8, intervention=None,
              progress: bool = False) -> torch.Tensor:
    """Per-token negative log-likelihood: ``input_ids`` (N, T) -> (N, T-1), nll[n, t] = -log p(x_{t+1} | x_<=t).

    ``intervention``: a sinklib intervention (context manager) entered around every batch, or None.
    """
    out = []
    for start in tqdm(range(0, len(input_ids), batch_size), disable=not progress, leave=False, desc="nll"):
        batch = input_ids[start:start + batch_size].to(lm.device)
        with intervention if intervention is not None else contextlib.nullcontext():
            logits = lm.model(batch, use_cache=False).logits  # (B, T, V)
        out.append(shifted_nll(logits, batch).cpu())
    return torch.cat(out)


def shifted_nll(logits: torch.Tensor, ids: torch.Tensor, rows: int = 1024) -> torch.Tensor:
    """nll[n, t] = -log softmax(logits[n, t])[ids[n, t+1]]: (B, T, V) logits and (B, T) ids -> (B, T-1).

    Row by row the same numbers as one ``F.cross_entropy`` over ``logits[:, :-1]``, computed ``rows`` positions at a
    time on the contiguous (B T, V) view (the last position's target is ignored): no (B, T-1, V) copy and no
    full-size log-softmax, which for a 50k vocabulary cost as much as the LM head itself on a CPU.
    """
    B, T, V = logits.shape
    flat = logits.reshape(B * T, V)  # a view
    target = F.pad(ids[:, 1:], (0, 1), value=-100).reshape(-1)  # (B T,); -100: the last position predicts nothing
    nll = torch.cat([F.cross_entropy(flat[s:s + rows].float(), target[s:s + rows], reduction="none")
                     for s in range(0, B * T, rows)])
    return nll.view(B, T)[:, :-1]


def ppl(nll: torch.Tensor) -> float:
    """ppl = exp(mean NLL) over the given tokens; ``inf`` when the model's predictions break down."""
    m = float(nll.double().mean())
    return math.exp(m) if math.isfinite(m) and m < 700 else math.inf


def perplexity(lm: LoadedModel, input_ids: torch.Tensor, batch_size: int = 8, intervention=None) -> float:
    """:func:`ppl` over every predicted token of ``input_ids`` (N, T)."""
    return ppl(token_nll(lm, input_ids, batch_size, intervention))


def ppl_ratio_interval(nll_a: torch.Tensor, nll_b: torch.Tensor, block: int = 64, n_boot: int = 2000,
                       level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """ppl_b / ppl_a on the same tokens, with a paired moving-block bootstrap interval.

    ratio = exp(mean_t (nll_b[t] - nll_a[t])). Tokens of one text are correlated, so the bootstrap resamples
    contiguous blocks of ``block`` tokens (the moving-block bootstrap, Kunsch 1989) of the per-token difference
    d_t = nll_b[t] - nll_a[t], keeping the pairing. Returns (ratio, low, high) at ``level``. A change is only a
    change when the interval excludes 1: on one stream of about a thousand tokens, differences of a percent often
    do not. nll_a, nll_b: (T,) over the same tokens.
    """
    if nll_a.numel() != nll_b.numel() or nll_a.numel() < 2 * block:
        raise ValueError(f"need two equal-length NLL series of at least {2 * block} tokens, got {nll_a.numel()} and "
                         f"{nll_b.numel()}")
    d = (nll_b.double() - nll_a.double()).reshape(-1)  # (T,) paired per-token difference
    n_blocks = math.ceil(d.numel() / block)
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, d.numel() - block + 1, (n_boot, n_blocks), generator=gen)  # (n_boot, n_blocks)
    idx = (starts[..., None] + torch.arange(block)).flatten(1)[:, : d.numel()]  # (n_boot, T)
    means = d[idx].mean(dim=1)
    lo, hi = torch.quantile(means, torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=means.dtype)).tolist()
    return math.exp(float(d.mean())), math.exp(lo), math.exp(hi)
