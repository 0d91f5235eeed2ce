"""Language-model evaluation: perplexity over token windows, optionally under an intervention."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from sinklib.models import LoadedModel


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
            logits = lm.model(batch, use_cache=False).logits.float()  # (B, T, V)
        nll = F.cross_entropy(logits[:, :-1].flatten(0, 1), batch[:, 1:].flatten(), reduction="none")
        out.append(nll.view(batch.shape[0], -1).cpu())
    return torch.cat(out)


def ppl(nll: torch.Tensor) -> float:
    """ppl = exp(mean NLL) over the given tokens; ``inf`` when the model's predictions break down."""
    m = float(nll.double().mean())
    return math.exp(m) if math.isfinite(m) and m < 700 else math.inf


def perplexity(lm: LoadedModel, input_ids: torch.Tensor, batch_size: int = 8, intervention=None) -> float:
    """:func:`ppl` over every predicted token of ``input_ids`` (N, T)."""
    return ppl(token_nll(lm, input_ids, batch_size, intervention))
