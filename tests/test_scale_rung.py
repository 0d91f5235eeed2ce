"""10_llm's scale rung and mid-sequence section (issue 57, items 2 and 3): the rung's cut protocol, the numbers it
compares, its figure and the mid-sequence figure, on hand-built reports (the executed notebook is checked in
tests/test_notebooks.py; make test never loads the 1.5B)."""

from dataclasses import replace
from types import SimpleNamespace

import matplotlib
import pytest

matplotlib.use("Agg")

from sinklib.architectures.llm import placement_plots, scale_rung  # noqa: E402
from sinklib.architectures.llm.protocol import OFFLINE_RUNG, RUNG_CUT, SIZES, rung_sizes, steps  # noqa: E402
from sinklib.core.analysis import MassiveDims  # noqa: E402
from sinklib.interpretation.sun_sites import SunSites  # noqa: E402
from sinklib.pipeline import profiles  # noqa: E402


def _report(name: str, n_layers: int = 4, **over) -> SimpleNamespace:
    by_layer = {"bos_mass": [0.2, 0.5, 0.6, 0.4][:n_layers] + [0.4] * (n_layers - 4),
                "strongest_other": [0.01, 0.05, 0.35, 0.02][:n_layers] + [0.02] * (n_layers - 4),
                "strongest_position": [3] * n_layers, "median": [0.2] * n_layers, "p90": [0.5] * n_layers}
    detection = {"layers": [1, n_layers], "authors": {"secondary": 0, "bos": 1, "noise": 0},
                 "adapted": {"secondary": 0, "bos": 1, "noise": 0}, "share_aligned": 0.02}
    base = dict(
        name=name, label=f"{name.upper()} (4-bit GGUF)", n_layers=n_layers,
        sink_rate={"natural": 0.7, "random": 0.8, "repeated": 0.0},
        alpha_by_layer=[0.1, 0.4, 0.5, 0.6][:n_layers] + [0.5] * (n_layers - 4), sink_layers=[1, 2, 3],
        massive=MassiveDims([7], True, 1000.0, 4000.0),
        sun_sites=SunSites(first=[0, 1, 1, 1] + [1] * (n_layers - 4), later_share=[0.0] * n_layers,
                           later_per_seq=[0.0, 0.5] + [0.0] * (n_layers - 2),
                           first_ratio=[10.0, 2000.0, 3000.0, 2500.0] + [2000.0] * (n_layers - 4), n_seqs=8,
                           seq_len=64),
        chain_numbers={"super_neuron": {"layer": 1, "neuron": 5}, "first_token_value_onset": [1], "sink_onset": 1},
        xiao={"window only": 40.0, "own first 4": 20.0, "4 newlines": 21.0},
        mid_sequence={"tokens": 64, "windows": [{"mass_sinks": [{"position": 3, "layers": [2], "mass": 0.35,
                                                                  "alignment": 0.97}], "by_layer": by_layer,
                                                 "detection": detection}],
                      "control": [{"by_layer": by_layer | {"strongest_other": [0.004] * n_layers}}]},
    )
    return SimpleNamespace(**(base | over))


def test_the_rung_cut_applies_only_to_the_rung_and_is_stated_in_the_protocol():
    cpu = SIZES["cpu"]
    assert cpu.rung == OFFLINE_RUNG == ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b")
    cut = rung_sizes(cpu)
    for key, value in RUNG_CUT:
        assert getattr(cut, key) == value
    assert cut.rung == () and cut.rung_cut == () and cut.seq_len == cpu.seq_len
    assert SIZES["smoke"].rung == () and SIZES["tiny-gpu"].rung == ()  # make test never loads the 1.5B
    from sinklib.architectures.llm.protocol import PROTOCOL

    assert "scale rung" in PROTOCOL.cuts["cpu"] and "num_seqs 6" in PROTOCOL.cuts["cpu"]


def test_the_dry_run_counts_the_rung_under_its_cut_and_drops_it_for_one_model():
    run = profiles.Run(profiles.PROFILES["cpu"], "", "cpu", 0, "/tmp", "10_llm", SIZES["cpu"])
    rung = [s for s in steps(run) if s.what.startswith("rung: ")]
    assert {s.model for s in rung} == set(OFFLINE_RUNG)
    long = next(s for s in rung if "long context" in s.what)
    assert long.tokens == 256  # the cut's one context length, not the profile's 2,048
    assert not [s for s in rung if "mid-sequence" in s.what]  # not run on the rung
    assert not [s for s in steps(run, "smollm2-135m") if s.what.startswith("rung: ")]
    assert scale_rung.rung_run(run).num_seqs == 6 and run.num_seqs == SIZES["cpu"].num_seqs


def test_rung_numbers_reads_each_compared_quantity():
    got = scale_rung.rung_numbers(_report("a"))
    assert got["sink rate, natural"] == 0.7 and got["layers"] == 4
    assert got["sink layers (alpha_0 > eps)"] == 3 and got["first sink layer, relative depth"] == pytest.approx(1 / 3)
    assert got["Sun criterion, first layer at position 0"] == 1 and got["super neuron, layer"] == 1
    assert got["first-token value onset (layer)"] == 1 and got["sink onset (layer)"] == 1
    assert got["Xiao: window only / own first 4"] == 2.0 and got["Xiao: 4 newlines / own first 4"] == 1.05
    assert got["mid-sequence keys with m_j > eps"] == 1 and got["strongest other key, m_j"] == 0.35
    none = scale_rung.rung_numbers(_report("b", alpha_by_layer=[0.1] * 4, xiao=None, mid_sequence=None,
                                           chain_numbers=None, sun_sites=None))
    assert none["sink layers (alpha_0 > eps)"] == 0 and none["first sink layer, relative depth"] is None
    assert none["Xiao: window only / own first 4"] is None and none["super neuron, layer"] is None


def test_the_rung_figure_draws_both_sizes_against_relative_depth_with_the_chain_layers_marked():
    fig = placement_plots.scale_rung([_report("small", 4), _report("large", 7)])
    ax, bx, cx = fig.axes[:3]
    assert [line.get_xdata()[-1] for line in ax.get_lines() if len(line.get_xdata()) > 2] == [1.0, 1.0]
    assert bx.get_yscale() == "log" and len(bx.collections) >= 4  # super neuron + sink onset per model
    assert len(cx.patches) == 6 and all(t in fig.axes[0].get_title() for t in ("(a)",))


def test_the_mid_sequence_figure_marks_found_keys_and_the_control():
    fig = placement_plots.mid_sequence_sinks([_report("a"), _report("b")])
    ax, bx = fig.axes[:2]
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":" and len(line.get_xdata())]
    assert len(dotted) == 2  # each model's random-weight control
    assert sum(len(c.get_offsets()) for c in ax.collections) == 2  # one found key per model
    assert any(abs(line.get_ydata()[0] - 0.9) < 1e-12 for line in bx.get_lines() if len(line.get_ydata()) == 2)


def test_under_cut_keeps_the_verdict_and_states_the_cut():
    from sinklib.core.claims import Claim

    claim = Claim(id="x.y", statement="s", source="p", rule="r", published=None, measured=1, holds=True, note="n")
    cut = scale_rung.under_cut(claim, "num_seqs 8")
    assert cut.holds is True and cut.note == "n; measured under a cut protocol: num_seqs 8"
    assert replace(claim, note="").note == "" and scale_rung.under_cut(replace(claim, note=""), "c").note.startswith(
        "measured under")
