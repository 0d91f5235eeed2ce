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


def _mass_with_key_five() -> torch.Tensor:
    """m_j per layer: the BOS sink 0.6 everywhere, key 5 at 0.4 in layers 10-17, everything else 0.05."""
    mass = torch.full((L, T), 0.05, dtype=torch.float64)
    mass[:, 0] = 0.6
    mass[10:18, 5] = 0.4
    return mass


def test_a_window_summary_finds_the_key_by_its_mass_and_reads_its_layers_and_alignment():
    got = ss.summarise_window(_mass_with_key_five(), _hidden(), [f"t{i}" for i in range(T)], skip_last=2)
    assert got["bos"] == 0 and [k["position"] for k in got["mass_sinks"]] == [5]
    key = got["mass_sinks"][0]
    assert key["layers"] == list(range(10, 18)) and key["token"] == "t5" and abs(key["mass"] - 0.4) < 1e-12
    assert key["alignment"] > 0.99 and key["typical_alignment"] < 0.5  # the others in layers 10-17 do not align
    assert got["by_layer"]["strongest_position"][12] == 5 and got["by_layer"]["strongest_position"][2] != 0
    assert got["detection"]["authors"] == {"secondary": 1, "bos": 1, "noise": 1}


def test_over_windows_gathers_the_keys_found_the_strongest_other_key_and_the_detections():
    tokens = [f"t{i}" for i in range(T)]
    flat = torch.full((L, T), 0.05, dtype=torch.float64)
    flat[:, 0] = 0.6
    flat[20, 3] = 0.25  # below eps: not found, but the strongest other key of this window
    windows = [ss.summarise_window(flat, _hidden(), tokens, 2),
               ss.summarise_window(_mass_with_key_five(), _hidden(), tokens, 2)]
    seen = ss.over_windows(windows)
    assert [(k["position"], k["layers"]) for k in seen["found"]] == [(5, list(range(10, 18)))]
    assert seen["strongest"] == {"mass": 0.4, "layer": 10, "position": 5}  # the largest m_j, first where tied
    assert seen["secondary"] == 2 and seen["secondary_adapted"] == 2  # one per window (same states)
    assert abs(seen["share_aligned"] - 3 / (T - 1)) < 1e-12  # positions 5, 7 and 9 pass in some read layer
    only_flat = ss.over_windows(windows[:1])
    assert only_flat["found"] == [] and only_flat["strongest"] == {"mass": 0.25, "layer": 20, "position": 3}
    assert ss.over_windows([]) == {"found": [], "strongest": None, "secondary": 0, "secondary_adapted": 0,
                                   "share_aligned": None}


def test_the_alignment_claim_holds_fails_or_cannot_be_judged():
    tokens = [str(i) for i in range(T)]
    holds = ss.alignment_claim(ss.summarise_window(_mass_with_key_five(), _hidden(), tokens, 2), "m")
    assert holds.holds is True and holds.measured["found"] == 1 and holds.id.endswith(".m")
    flat = torch.full((L, T), 0.05, dtype=torch.float64)
    flat[:, 0] = 0.6
    none = ss.alignment_claim(ss.summarise_window(flat, _hidden(), tokens, 2), "m")
    assert none.holds is None and "no key but the first" in none.note
    h = _hidden()
    h[10:18, 5] = torch.randn(8, D, generator=torch.Generator().manual_seed(1))  # key 5 draws mass, points elsewhere
    assert ss.alignment_claim(ss.summarise_window(_mass_with_key_five(), h, tokens, 2), "m").holds is False


def test_a_found_key_must_beat_an_ordinary_key_when_every_state_shares_the_sinks_direction():
    """Gemma-3's case: every state points along the BOS sink's (|cos| ~ 1), so |cos| > 0.9 alone tells nothing; a
    found key no better aligned than an ordinary one fails."""
    gen = torch.Generator().manual_seed(2)
    bos = torch.zeros(D)
    bos[0] = 1.0
    h = bos + 0.01 * torch.randn(L, T, D, generator=gen)  # everything along e_0
    h[:, 0] = bos * torch.tensor([1.0] * 3 + [50.0] * 22 + [1.0] * 5)[:, None]
    h[10:18, 5] = bos + 0.2 * torch.randn(8, D, generator=gen)  # the found key: still |cos| > 0.9, but less
    claim = ss.alignment_claim(ss.summarise_window(_mass_with_key_five(), h, [str(i) for i in range(T)], 2), "m")
    assert claim.measured["alignment"] > 0.9 and claim.measured["typical_alignment"] > claim.measured["alignment"]
    assert claim.holds is False


def test_the_adapted_margin_leaves_room_for_a_secondary_sink_in_small_models():
    assert ss.adapted_margin(30) == ss.BOS_MARGIN  # the authors' 15 at 30 layers
    assert ss.kind_of(6, 18, ss.adapted_margin(18)) == "secondary" and ss.kind_of(9, 18, ss.adapted_margin(18)) == "bos"


def test_window_states_reads_every_keys_mass_and_the_block_outputs(tiny):
    """m_j from the O(N) statistics equals sum_t A[t, j] / (T - j) of the full maps, averaged over heads; the states
    are the block outputs (the model's own hidden_states[1:])."""
    from sinklib.core.analysis import attention_maps

    ids = torch.arange(3, 19)
    mass, hidden = ss.window_states(tiny, ids)
    maps = attention_maps(tiny, ids).double()  # (L, H, T, T)
    by_hand = (maps.sum(dim=2) / torch.arange(16, 0, -1, dtype=torch.float64)).mean(dim=1)  # (L, T)
    assert torch.allclose(mass, by_hand, atol=1e-5)
    with torch.no_grad():
        states = tiny.model(ids[None], output_hidden_states=True).hidden_states
    assert hidden.shape == (tiny.n_layers, 16, states[-1].shape[-1])
    assert torch.allclose(hidden[-1], states[-1][0].float(), atol=1e-5)


def test_a_control_with_no_sink_level_key_says_why_it_cannot_be_judged():
    """Random weights draw no key above eps: the control cannot be judged, and the record says so (every claim needs
    a control verdict or a note)."""
    flat = torch.full((L, T), 0.01, dtype=torch.float64)
    flat[:, 0] = 0.02
    how = ss.control_of(ss.summarise_window(flat, _hidden(), [str(i) for i in range(T)], 2), "m")
    assert how["control"].holds is None and "no key but the first" in how["control_note"]
    assert "0.01" in how["control_note"]
    judged = ss.control_of(ss.summarise_window(_mass_with_key_five(), _hidden(), [str(i) for i in range(T)], 2), "m")
    assert judged["control"].holds is True and "control_note" not in judged
