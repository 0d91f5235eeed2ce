"""Check a forward pass fits before running it: sequence length against the model, memory against what is free.

The estimates are deliberately simple upper bounds (float32, inference mode) so a request that cannot fit fails
with a one-line message instead of an out-of-memory kill half-way through.
"""

from __future__ import annotations

import psutil
import torch

from sinklib.core.errors import InputError
from sinklib.core.loaded import LoadedModel

GiB = 2**30


def max_length(lm: LoadedModel) -> int | None:
    cfg = lm.model.config.get_text_config() if hasattr(lm.model.config, "get_text_config") else lm.model.config
    return getattr(cfg, "max_position_embeddings", None)


def check_length(lm: LoadedModel, seq_len: int) -> None:
    """Raise :class:`InputError` if ``seq_len`` exceeds the model's ``max_position_embeddings``."""
    limit = max_length(lm)
    if limit is not None and seq_len > limit:
        raise InputError(
            f"a sequence of {seq_len} tokens is longer than {lm.name!r} supports (max_position_embeddings={limit}); "
            f"use a sequence length of at most {limit}."
        )


def check_input_tokens(num_seqs: int, seq_len: int) -> None:
    """Raise :class:`InputError` when ``num_seqs`` x ``seq_len`` token ids (int64, made and held on the host before
    the first forward) would take more than a quarter of the host's free memory."""
    need, free = 8 * num_seqs * seq_len, available_bytes(torch.device("cpu"))
    if need > 0.25 * free:
        raise InputError(f"{num_seqs} x {seq_len} tokens need {need / GiB:.1f} GiB of token ids alone ({free / GiB:.1f} "
                         f"GiB free); use fewer sequences (Gu et al. use 100 x 64).")


def activation_bytes(*, hidden: int, d_ff: int, heads: int, layers: int, vocab: int, batch: int, seq_len: int,
                     eager_attentions: bool = False, hidden_states: bool = False, logits: bool = False,
                     stats_block: int = 64 * 2**20) -> int:
    """Upper estimate of the extra bytes one no-grad forward needs beyond the weights, from the model's shape alone
    (so a plan can judge a hub model before downloading it).

    Working activations ~ 4 B N (4 d + 3 d_ff) bytes; ``eager_attentions`` keeps L H N^2 probabilities (plus one
    layer's scratch); ``hidden_states`` keeps L B N d; ``logits`` B N V; the O(N) statistics need ~3 query blocks.
    """
    f32 = 4
    total = f32 * batch * seq_len * (4 * hidden + 3 * d_ff)
    per_layer_attn = f32 * batch * heads * seq_len * seq_len
    total += (layers + 2) * per_layer_attn if eager_attentions else 3 * stats_block
    if hidden_states:
        total += f32 * layers * batch * seq_len * hidden
    if logits:
        total += f32 * batch * seq_len * vocab
    return int(total)


def forward_bytes(lm: LoadedModel, batch: int, seq_len: int, **kwargs) -> int:
    """:func:`activation_bytes` for a loaded model (its config gives the shape)."""
    cfg = lm.model.config.get_text_config() if hasattr(lm.model.config, "get_text_config") else lm.model.config
    return activation_bytes(hidden=lm.hidden_size, d_ff=getattr(cfg, "intermediate_size", 4 * lm.hidden_size),
                            heads=lm.n_heads, layers=lm.n_layers, vocab=lm.vocab_size or 0, batch=batch,
                            seq_len=seq_len, **kwargs)


def available_bytes(device: torch.device) -> int:
    """Bytes a new allocation can get: on CUDA the driver's free memory plus the blocks PyTorch's caching allocator
    holds but no tensor uses (``memory_reserved - memory_allocated``: after one model of a notebook is dropped its
    blocks stay reserved, invisible to ``mem_get_info``, yet free for the next); elsewhere the host's available RAM."""
    device = torch.device(device)
    if device.type == "cuda":
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(torch.cuda.mem_get_info(device)[0] + max(0, cached))
    return int(psutil.virtual_memory().available)


def check_fits(lm: LoadedModel, batch: int, seq_len: int, **kwargs) -> int:
    """Raise :class:`InputError` when :func:`forward_bytes` exceeds 90% of the free memory; return the estimate."""
    need = forward_bytes(lm, batch, seq_len, **kwargs)
    free = available_bytes(lm.device)
    if need > 0.9 * free:
        raise InputError(
            f"{batch} x {seq_len} tokens on {lm.name!r} needs about {need / GiB:.1f} GiB but {free / GiB:.1f} GiB is "
            f"free on {lm.device}; use fewer tokens or a smaller batch"
            + ("" if not kwargs.get("eager_attentions") else ", or the O(N) statistics (sinklib.core.attnstats)") + "."
        )
    return need


def fit_batch(lm: LoadedModel, want: int, seq_len: int, **kwargs) -> int:
    """The largest batch <= ``want`` whose :func:`forward_bytes` fits in 90% of the free memory (halving from
    ``want``); raises like :func:`check_fits` when not even one sequence fits."""
    batch = max(1, int(want))
    free = 0.9 * available_bytes(lm.device)
    while batch > 1 and forward_bytes(lm, batch, seq_len, **kwargs) > free:
        batch //= 2
    check_fits(lm, batch, seq_len, **kwargs)
    return batch
