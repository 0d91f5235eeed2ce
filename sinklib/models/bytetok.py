"""A byte-level tokenizer built in code (no files, no downloads) for the randomly initialised test models."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

BOS, EOS = "<bos>", "<eos>"


def byte_tokenizer(add_bos: bool = True) -> PreTrainedTokenizerFast:
    """256 byte tokens (GPT-2's printable byte alphabet) plus ``<bos>``/``<eos>``; prepends ``<bos>`` if asked.

    Ids: bytes 0..255 in alphabet order, then ``<bos>`` = 256, ``<eos>`` = 257.
    """
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab[BOS], vocab[EOS] = len(vocab), len(vocab) + 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, vocab[BOS])]
        )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS, pad_token=EOS)
