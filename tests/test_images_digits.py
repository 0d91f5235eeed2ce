"""images.digits: a seeded permutation, with or without n (issue 43 item 13)."""

import numpy as np

from sinklib.core import images


def test_digits_seed_permutes_the_whole_set():
    a, ya = images.digits(seed=0)
    b, yb = images.digits(seed=1)
    assert len(a) == len(b) == 1797
    assert sorted(ya.tolist()) == sorted(yb.tolist())  # the same digits
    assert not all((x == y).all() for x, y in zip(a[:50], b[:50]))  # in another order


def test_digits_n_is_the_front_of_the_same_permutation():
    whole, labels = images.digits(seed=3)
    first, head = images.digits(n=10, seed=3)
    assert list(head) == list(labels[:10])
    assert all((x == y).all() for x, y in zip(first, whole[:10]))
    assert first[0].shape == (8, 8, 3) and first[0].dtype == np.uint8
