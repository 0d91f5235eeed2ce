"""Secondary sinks (issue 57, item 3; Wong et al., arXiv 2512.22213): the authors' detection transcribed, on hidden
states and an every-key mass built by hand."""

from __future__ import annotations

import torch

from sinklib.interpretation import secondary_sinks as ss

L, T, D = 30, 12, 8


def _hidden() -> torch.Tensor:
    """30 layers x 12 positions: the BOS sink at position 0 switches on at layer 3 (norm 1 -> 50) and off at layer 25;
    position 5 points along it in layers 10-17 (a secondary sink, lifetime 8), position 7 in layers 3-24 (lifetime
    22 >= 30 - 15: BOS-like), position 9 in layers 12-13 only (noise); every other state is orthogonal to it."""
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(L, T, D, generator=gen)
    h[..., 0] = 0.0  # nothing along the sink's direction e_0 ...
    bos = torch.zeros(D)
    bos[0] = 1.0
    h[:, 0] = bos * torch.tensor([1.0] * 3 + [50.0] * 22 + [1.0] * 5)[:, None]
    for position, layers in ((5, range(10, 18)), (7, range(3, 25)), (9, range(12, 14))):
        for layer in layers:  # ... except where a sink is on
            h[layer, position] = 3.0 * bos + 0.01 * torch.randn(D, generator=gen)
    return h


def test_the_clip_reads_the_layers_where_the_bos_sink_is_on():
    norm = torch.tensor([1.0] * 3 + [50.0] * 22 + [1.0] * 5)
    assert ss.clipped_layers(norm) == range(3, 25)  # jump into layer 3, drop into layer 25
    assert ss.clipped_layers(torch.tensor([1.0, 1.0, 1.0, 9.0])) == range(3, 4)  # a jump into the last layer


def test_the_detection_finds_the_secondary_sink_and_labels_each_candidate():
    found = ss.detect(_hidden())
    assert found.bos == 0 and found.layers == range(3, 25)
    by = {s.position: s for s in found.sinks}
    assert set(by) == {5, 7, 9}
    assert by[5].kind == "secondary" and by[5].lifetime == 8 and by[5].created == 10
    assert by[7].kind == "bos" and by[9].kind == "noise"
    assert [s.position for s in found.of_kind("secondary")] == [5]


def test_the_bos_sink_is_the_candidate_with_the_largest_norm():
    h = _hidden()
    h[:, 1] *= 100.0  # position 1 now has the largest norm: it is the BOS sink (a chat template's first tokens)
    assert ss.bos_position(h) == 1 and ss.bos_position(h, candidates=(0,)) == 0


def test_a_small_model_has_no_room_for_a_secondary_sink_under_the_authors_margins():
    assert ss.kind_of(8, 30) == "secondary" and ss.kind_of(8, 22) == "bos" and ss.kind_of(4, 30) == "noise"
    assert all(ss.kind_of(life, 19) != "secondary" for life in range(20))  # 4 < life < 19 - 15 = 4: none


def test_mass_in_lifetime_reads_the_every_key_mass_over_the_sinks_own_layers():
    mass = torch.full((L, T), 0.05, dtype=torch.float64)
    mass[:, 0] = 0.6
    mass[10:18, 5] = 0.3  # position 5 draws sink-level mass only while it is a sink
    sink = next(s for s in ss.detect(_hidden()).sinks if s.position == 5)
    got = ss.mass_in_lifetime(mass, sink, bos=0)
    assert abs(got["mass"] - 0.3) < 1e-12 and abs(got["bos_mass"] - 0.6) < 1e-12
    assert abs(got["median_key_mass"] - 0.05) < 1e-12


def test_the_converse_search_finds_keys_by_mass_and_reads_their_alignment():
    mass = torch.full((L, T), 0.05, dtype=torch.float64)
    mass[:, 0] = 0.6
    mass[10:18, 5] = 0.4  # sink-level mass at position 5 in layers 10-17
    mass[:, T - 1] = 0.9  # the last key: seen by one query, left out
    found = ss.mass_candidates(mass, bos=0, skip_last=2)
    assert found == {5: list(range(10, 18))}
    h = _hidden()
    assert ss.alignment(h, 0, 5, found[5]) > 0.99  # it points along the BOS sink's state there
    assert ss.alignment(h, 0, 3, found[5]) < 1e-6  # an ordinary position does not
