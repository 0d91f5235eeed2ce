"""The data 03's tiny models train on: byte windows of text and the synthetic bigram-backcopy task.

``TrainConfig.data`` picks one: ``"bible"`` -- the World English Bible as bytes, random windows with a BOS token
(id 256) at position 0 of every sequence (training part: the first 90% of verses; validation: the last 10%);
``"bigram_backcopy"`` -- the synthetic task of Guo et al. (arXiv 2410.13835); ``"file:<path>"`` -- any UTF-8 text
file as bytes (first 90% train, last 10% validation), e.g. an OpenWebText dump for paper-scale runs.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Protocol

import torch

from sinklib.core.data import corpus_units
from sinklib.core.errors import InputError

BOS = 256


class DataSpec(Protocol):
    """What :func:`make_batch` reads of a run's configuration (a :class:`~sinklib.mitigation.training.TrainConfig`)."""

    data: str
    seq_len: int
    bos: bool


@cache
def bible_bytes(split: str) -> torch.Tensor:
    """The Bible split as a uint8 tensor of UTF-8 bytes."""
    return torch.frombuffer(bytearray(" ".join(corpus_units("bible", split)).encode()), dtype=torch.uint8)


@cache
def file_bytes(path: str, split: str) -> torch.Tensor:
    """A text file as bytes: the first 90% for ``train``, the last 10% for ``heldout``."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise InputError(f"training data file {p} not found; give data='file:<path to a UTF-8 text file>'")
    raw = p.read_bytes()
    if len(raw) < 10_000:
        raise InputError(f"training data file {p} has {len(raw)} bytes; give at least 10 kB of text")
    cut = int(0.9 * len(raw))
    return torch.frombuffer(bytearray(raw[:cut] if split == "train" else raw[cut:]), dtype=torch.uint8)


def byte_batch(data: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator, bos: bool = True) -> torch.Tensor:
    """(batch, seq_len) windows of bytes at random offsets; position 0 is BOS when ``bos``."""
    n = seq_len - 1 if bos else seq_len
    starts = torch.randint(0, len(data) - n - 1, (batch,), generator=gen)
    rows = torch.stack([data[s:s + n] for s in starts.tolist()]).long()
    return torch.cat([torch.full((batch, 1), BOS), rows], dim=1) if bos else rows


BBC_VOCAB, BBC_TRIGGERS = 64, (0, 1, 2)


@cache
def bigram_matrix(vocab: int = BBC_VOCAB, seed: int = 0) -> torch.Tensor:
    """The fixed bigram transition matrix of the synthetic task: rows ~ Dirichlet(0.3), (vocab, vocab)."""
    gen = torch.Generator().manual_seed(seed)
    g = torch._standard_gamma(torch.full((vocab, vocab), 0.3), generator=gen)
    return g / g.sum(-1, keepdim=True)


def bigram_backcopy_batch(batch: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    """Bigram-backcopy (Guo et al., arXiv 2410.13835): after a trigger token the next token copies the token before
    the trigger; otherwise it follows a fixed bigram chain. Position 0 is BOS. (batch, seq_len) ids."""
    P = bigram_matrix()
    x = torch.empty(batch, seq_len, dtype=torch.long)
    x[:, 0] = BOS
    x[:, 1] = torch.randint(3, BBC_VOCAB, (batch,), generator=gen)
    is_trigger = torch.zeros(BBC_VOCAB + 1, dtype=torch.bool)
    is_trigger[list(BBC_TRIGGERS)] = True
    for t in range(2, seq_len):
        prev = x[:, t - 1]
        nxt = torch.multinomial(P[prev.clamp_max(BBC_VOCAB - 1)], 1, generator=gen).squeeze(1)
        copy = is_trigger[prev] & (t >= 3)
        x[:, t] = torch.where(copy, x[:, t - 2], nxt)
    return x


def bigram_backcopy_entropy(seq_len: int, n: int = 4096, seed: int = 0) -> float:
    """The task's entropy floor: the lowest validation loss any model can reach on bigram-backcopy (nats/token).

    The loss is averaged over the targets x_1..x_{T-1}. The Bayes-optimal predictor knows the process: x_1 is
    uniform over the 61 non-trigger tokens (entropy ln 61); after a trigger (t >= 3) the next token is a copy
    (entropy 0); otherwise it follows the bigram row of the previous token (entropy H(P[x_{t-1}])). Averaged over
    ``n`` sampled sequences (Monte Carlo; the standard error is below 1e-3 nats at n = 4096, T = 64).
    """
    P = bigram_matrix()
    row_entropy = -(P * P.clamp_min(1e-30).log()).sum(-1)  # (vocab,)
    x = bigram_backcopy_batch(n, seq_len, torch.Generator().manual_seed(seed))
    prev = x[:, 1:-1]  # (n, T-2): the token before targets x_2..x_{T-1}
    t = torch.arange(2, seq_len)
    copy = torch.isin(prev, torch.tensor(BBC_TRIGGERS)) & (t >= 3)
    h = torch.where(copy, torch.zeros(()), row_entropy[prev.clamp_max(BBC_VOCAB - 1)])  # (n, T-2)
    first = math.log(BBC_VOCAB - len(BBC_TRIGGERS))  # target x_1
    return float((first + h.sum(1)).mean() / (seq_len - 1))


def make_batch(cfg: DataSpec, split: str, batch: int, gen: torch.Generator) -> torch.Tensor:
    """(batch, cfg.seq_len) token ids of ``cfg.data``'s ``split`` ("train" or "heldout"), drawn from ``gen``."""
    if cfg.data == "bible":
        return byte_batch(bible_bytes(split), batch, cfg.seq_len, gen, cfg.bos)
    if cfg.data == "bigram_backcopy":
        return bigram_backcopy_batch(batch, cfg.seq_len, gen)
    if cfg.data.startswith("file:"):
        return byte_batch(file_bytes(cfg.data[5:], split), batch, cfg.seq_len, gen, cfg.bos)
    raise InputError(f"unknown training data {cfg.data!r}; use 'bible', 'bigram_backcopy' or 'file:<path>'")



def most_triggers(ids: torch.Tensor, data: str) -> tuple[int, list[int]]:
    """For figures of bigram-backcopy attention: the row of ``ids`` (N, T) with the most trigger tokens and the
    positions of its triggers; (0, []) for any other data (there are no triggers to mark)."""
    if data != "bigram_backcopy":
        return 0, []
    is_trigger = torch.isin(ids, torch.tensor(BBC_TRIGGERS, device=ids.device))  # (N, T)
    row = int(is_trigger.sum(1).argmax())
    return row, is_trigger[row].nonzero().flatten().tolist()
