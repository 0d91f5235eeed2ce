"""Seeded inputs: natural windows, random tokens, one token repeated."""

import pytest
import torch

from sinklib.core import data
from sinklib.core.errors import InputError


def test_bible_is_the_world_english_bible():
    verses = data.bible_verses()
    assert len(verses) > 31000
    assert verses[0] == "In the beginning God created the heavens and the earth."
    assert not any("{" in v for v in verses[:500])


def test_pydoc_source_and_splits():
    assert len(data.corpus_units("pydoc")) > 1000
    train, held = data.corpus_units("bible", "train"), data.corpus_units("bible", "heldout")
    assert len(train) + len(held) == len(data.bible_verses()) and not set(train[-5:]) & set(held[:5])
    with pytest.raises(InputError):
        data.corpus_units("wikipedia")


def test_inputs_are_seeded_and_shaped(tiny):
    for kind in data.INPUT_KINDS:
        a = data.make_inputs(tiny, kind, 4, 20, seed=3)
        b = data.make_inputs(tiny, kind, 4, 20, seed=3)
        c = data.make_inputs(tiny, kind, 4, 20, seed=4)
        assert a.shape == (4, 20) and a.dtype == torch.long
        assert torch.equal(a, b) and not torch.equal(a, c)


def test_natural_windows_follow_the_tokenizer_bos(tiny):
    ids = data.make_inputs(tiny, "natural", 3, 30, seed=0)
    assert (ids[:, 0] == tiny.tokenizer.bos_token_id).all()  # the tiny byte tokenizer prepends <bos>
    text = tiny.tokenizer.decode(ids[0, 1:])  # 29 bytes of consecutive verses
    assert len(text) > 10 and text in " ".join(data.bible_verses())


def test_random_excludes_specials_and_repeated_is_constant(tiny):
    rnd = data.make_inputs(tiny, "random", 8, 50, seed=0)
    special = set(tiny.tokenizer.all_special_ids)
    assert (rnd[:, 0] == tiny.tokenizer.bos_token_id).all()
    assert not set(rnd[:, 1:].flatten().tolist()) & special
    rep = data.make_inputs(tiny, "repeated", 8, 50, seed=0)
    assert (rep == rep[:, :1]).all() and not set(rep[:, 0].tolist()) & special  # no BOS: all positions equal
    assert len(set(rep[:, 0].tolist())) > 1  # a different token per sequence


def test_bad_inputs(tiny):
    with pytest.raises(InputError):
        data.make_inputs(tiny, "poetry", 2, 10)
    with pytest.raises(InputError):
        data.make_inputs(tiny, "random", 0, 10)
