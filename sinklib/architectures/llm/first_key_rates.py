"""Gu et al.'s sink rate of a language model, read from the first key's attention alone (``10_llm``, sections 1
and 5b).

* :func:`sink_rate` / :func:`sink_rate_by_sequence` -- the share of (sequence, layer, head) with alpha_0 > eps on
  given windows, over all of them or per sequence (so that the sequences of several draws pool);
* :func:`chat_windows` / :func:`first_key_rate` -- the same content tokens raw and wrapped in the model's chat
  template, and the sink rate with alpha_0 read over chosen queries (the content tokens'), so that raw and chat
  input are compared on the same queries (Gu et al. compare base and chat checkpoints; one checkpoint can compare
  raw and chat-formatted input).

The attention mass they read is :func:`sinklib.architectures.llm.placement.layer_mass`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sinklib.architectures.llm.placement import layer_mass
from sinklib.core import metrics
from sinklib.core.attnstats import AttentionStats
from sinklib.core.loaded import LoadedModel
from sinklib.core.metrics import GU_EPS
from sinklib.interpretation.origin import batches


def sink_rate(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 16, eps: float = GU_EPS,
              progress: str | None = None) -> float:
    """Gu et al.'s sink rate of ``ids`` (N, T): the share of (sequence, layer, head) with alpha_0 > eps -- the
    ``sink_rate`` of :func:`sinklib.core.analysis.profile_sinks` (the same statistics), without its hidden-state
    reductions, for inputs of which nothing else is read."""
    return metrics.sink_rate(layer_mass(lm, ids, batch_size, progress)[..., 0], eps)


def sink_rate_by_sequence(lm: LoadedModel, ids: torch.Tensor, batch_size: int = 16, eps: float = GU_EPS,
                          progress: str | None = None) -> torch.Tensor:
    """Gu et al.'s sink rate of each sequence of ``ids`` (N, T): r[n] = share of (layer, head) with alpha_0 > eps,
    (N,). Every sequence has the same L x H heads, so mean_n r[n] is :func:`sink_rate` of the same forwards -- and
    the rate of sequences pooled from several draws is the mean of their r."""
    alpha = layer_mass(lm, ids, batch_size, progress)[..., 0]  # (N, L, H)
    return (alpha > eps).float().mean(dim=(1, 2)).cpu()


_MARK = "\x00sinklib-content\x00"


@dataclass
class ChatWindows:
    """The same content tokens raw and as one user message in the chat template.

    ``raw``: (N, T) the windows as given; ``chat``: (N, P + C + S) template prefix (its default system prompt
    included), the *same* content token ids, template suffix; ``content``: where the C content tokens sit in each,
    as (raw start, chat start, C). Comparing the two on the content tokens' queries compares the format, not a text
    cut to another length (cut to T, SmolLM2's template left 40 of 64 positions to the text)."""

    raw: torch.Tensor
    chat: torch.Tensor
    raw_start: int
    chat_start: int
    n_content: int


def chat_windows(lm: LoadedModel, ids: torch.Tensor) -> ChatWindows | None:
    """The windows' content tokens (after a BOS the tokenizer adds) wrapped, unchanged, in the model's chat
    template for one user message; None when the tokenizer has no template. The template's text around the message
    is tokenised once (around a marker) and the content ids are spliced in, so the content is token-for-token the
    raw windows'."""
    tok = lm.tokenizer
    if not getattr(tok, "chat_template", None):
        return None
    text = tok.apply_chat_template([{"role": "user", "content": _MARK}], tokenize=False)
    if text.count(_MARK) != 1:
        return None
    before, after = text.split(_MARK)
    prefix = tok(before, add_special_tokens=False).input_ids
    suffix = tok(after, add_special_tokens=False).input_ids
    start = 1 if lm.adds_bos else 0
    content = ids[:, start:]
    chat = torch.cat([torch.tensor(prefix, dtype=torch.long).expand(len(ids), -1), content,
                      torch.tensor(suffix, dtype=torch.long).expand(len(ids), -1)], dim=1)
    return ChatWindows(ids, chat, start, len(prefix), content.shape[1])


def first_key_rate(lm: LoadedModel, ids: torch.Tensor, queries: slice, batch_size: int = 16,
                   eps: float = GU_EPS) -> tuple[float, torch.Tensor]:
    """Gu et al.'s sink rate with alpha_0 taken over chosen queries: alpha = mean_{t in queries} A[t, 0] per
    (sequence, layer, head), and the share of them above ``eps``. Returns (rate, alpha (N, L, H))."""
    out = []
    for batch in batches(ids, batch_size):
        with AttentionStats(lm, keys=[0]) as st:
            lm.model(batch.to(lm.device), use_cache=False, logits_to_keep=1)
        out.append(torch.stack([st.probs_of_keys(i)[:, :, queries, 0].mean(dim=-1) for i in range(lm.n_layers)],
                               dim=1))  # (B, L, H)
    alpha = torch.cat(out)
    return float((alpha > eps).float().mean()), alpha
