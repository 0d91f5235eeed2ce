"""The figures of 12_mllm and 13_vit, built from small synthetic inputs: readable (no layout problems) and drawing
what they claim (outlined cells, one shared colour scale, one row, a colour bar)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pytest
import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from sinklib.architectures.mllm import visual_sink_plots
from sinklib.architectures.vit import vit_plots
from sinklib.core import plotting
from tests.figure_lint import layout_problems


@pytest.fixture
def drawn():
    """Builds figures in sinklib's style; checks each is a clean Figure; closes them all afterwards."""
    figs = []

    def build(fn, *args, **kwargs) -> Figure:
        with plotting.style():
            fig = fn(*args, **kwargs)
            figs.append(fig)
            assert isinstance(fig, Figure)
            assert layout_problems(fig) == []
        return fig

    yield build
    for fig in figs:
        plt.close(fig)


def _pixels(n: int | None = None, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand((3, 84, 84) if n is None else (n, 3, 84, 84), generator=g)


def test_standin_training_states_the_check(drawn):
    fig = drawn(visual_sink_plots.standin_training, torch.linspace(3, 1, 50).tolist(), 0.82, 0.1, 200,
                title="SmolLM2 stand-in")
    assert fig.get_suptitle().startswith("Did the projector learn?")
    fig = drawn(visual_sink_plots.standin_training, [2.0, 1.5, 1.0], 1.0, 0.1, 20)
    assert fig.get_suptitle() == "Did the projector learn?"


def test_attention_shares(drawn):
    shares = torch.softmax(torch.rand(12, 3), -1)
    drawn(visual_sink_plots.attention_shares, shares, 5, 36, title="where text looks")


def _visual_sinks(drawn, example_phi: torch.Tensor, verdict_tau: float = 7.5):
    torch.manual_seed(0)
    phi = torch.rand(10, 4, 36) * 25
    phi[:2] = float("nan")
    taus = {"tau = 20 (paper)": 20.0, "width-matched tau = 7.5": 7.5}
    ratio = [None, None, 1.4, 2.0, None, 3.1, 0.8, 1.2, 5.0, 2.2]
    return drawn(visual_sink_plots.visual_sinks, phi, taus, verdict_tau, ratio, _pixels(), example_phi, 6,
                 title="Visual sink tokens, sink dims [12, 301], SmolLM2 stand-in")


def test_visual_sinks_outlines_the_sinks_and_has_no_twin_axis(drawn):
    example = torch.rand(36) * 5
    example[[3, 10, 20, 35]] = torch.tensor([8.0, 12.0, 7.5, 30.0])
    fig = _visual_sinks(drawn, example)
    panels = {ax.get_title().split(" ")[0]: ax for ax in fig.axes if ax.get_title()}
    assert set(panels) == {"(a)", "(b)", "(c)", "(d)", "(e)"}
    assert len(fig.axes) == 5 + 1  # five panels and the colour bar of (e): no twin axis
    positions = {tuple(round(v, 4) for v in ax.get_position().bounds) for ax in fig.axes}
    assert len(positions) == len(fig.axes)
    outlined = [p for p in panels["(e)"].patches if isinstance(p, Rectangle) and not p.get_fill()]
    assert len(outlined) == int((example >= 7.5).sum()) == 4
    assert "(verdict)" in " ".join(t.get_text() for t in panels["(a)"].get_legend().get_texts())
    assert panels["(b)"].get_ylim() == (0, 1)
    legend_c = " ".join(t.get_text() for t in panels["(c)"].get_legend().get_texts())
    assert "1 = as much as a non-sink image token" in legend_c


def test_visual_sinks_says_when_no_cell_passes(drawn):
    fig = _visual_sinks(drawn, torch.rand(36), verdict_tau=20.0)
    (ex,) = [ax for ax in fig.axes if ax.get_title().startswith("(e)")]
    assert "none >= tau" in ex.get_title()
    assert not [p for p in ex.patches if isinstance(p, Rectangle)]


@pytest.mark.parametrize("nll, zoomed", [
    ({"as is": 2.10, "sinks hidden": 2.25, "random hidden": 2.12, "VAR": 2.09}, True),
    ({"as is": 0.9, "sinks hidden": 2.4, "random hidden": 1.1, "VAR": 0.85}, False),
])
def test_masking_and_var(drawn, nll, zoomed):
    runs = [nll["random hidden"] + d for d in (-0.02, 0.0, 0.03, 0.05, -0.01)]
    fig = drawn(visual_sink_plots.masking_and_var, nll, runs, title="Hiding visual sinks vs random, and VAR",
                ylabel="NLL of the digit token (nats)")
    (ax,) = fig.axes
    assert ax.get_ylabel() == "NLL of the digit token (nats)"
    assert ("does not start at 0" in ax.get_title()) == zoomed
    assert (ax.get_ylim()[0] == 0) != zoomed


def test_cls_maps_has_one_shared_colour_bar(drawn):
    maps = torch.rand(8, 3, 6, 6)
    fig = drawn(vit_plots.cls_maps, _pixels(3), maps, ["cat", "dog", "digit 7"], [0, 3, 7], title="CLS maps")
    bars = [ax for ax in fig.axes if "relative to the map's maximum" in ax.get_xlabel() + ax.get_ylabel()]
    assert len(bars) == 1
    assert len(fig.axes) == 3 * 4 + 1


def test_registers_before_after_shows_the_map_above_its_change_on_one_scale(drawn):
    torch.manual_seed(0)
    before = torch.softmax(torch.rand(6, 4, 6, 6).flatten(-2) * 4, -1).reshape(6, 4, 6, 6)
    after = before + 0.01 * torch.randn_like(before)
    names = ["cat", "dog", "digit 7", "digit 1"]
    fig = drawn(vit_plots.registers_before_after, _pixels(4), before, after, names, 5, title="Test-time register")
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 8  # as is above, the change below, one column per photo
    rows = sorted({round(ax.get_position().y0, 6) for ax in panels}, reverse=True)
    assert len(rows) == 2
    top = [ax for ax in panels if round(ax.get_position().y0, 6) == rows[0]]
    bottom = [ax for ax in panels if round(ax.get_position().y0, 6) == rows[1]]
    lim = float((after[5] - before[5]).abs().max())  # one symmetric scale set by the largest change
    for ax in bottom:
        lo, hi = ax.images[-1].get_clim()
        assert math.isclose(hi, lim, rel_tol=1e-6) and math.isclose(lo, -lim, rel_tol=1e-6)
        assert "max |change| " in ax.get_title()
    peak = float(before[5].max())
    assert all(math.isclose(ax.images[-1].get_clim()[1], peak, rel_tol=1e-6) for ax in top)
    assert [ax.get_title().split(":")[0] for ax in top] == names
    assert fig.get_figwidth() <= 12
    labels = " ".join(" ".join((ax.get_xlabel() + ax.get_ylabel()).split()) for ax in fig.axes if not ax.images)
    assert "change (after - before)" in labels and "of the top row's largest value" in labels
    drawn(vit_plots.registers_before_after, _pixels(1), before[:, :1], after[:, :1], ["cat"], 5)


def test_probe_and_redundancy(drawn):
    probe = {"CLS": 0.91, "highest-norm patch": 0.42, "median-norm patch": 0.35}
    similarity = {"selected": 0.71, "all": 0.55, "k": 12, "label": "12 highest-norm patches (last layer)"}
    fig = drawn(vit_plots.probe_and_redundancy, probe, 0.1, similarity, title="High-norm tokens")
    bx = fig.axes[1]
    assert bx.get_title() == "(b) are the high-norm patches redundant?"
    assert "(patch embeddings)" in " ".join(bx.get_ylabel().split())
    fig = drawn(vit_plots.probe_and_redundancy, probe, 0.1, {**similarity, "space": "pixels", "selected": -0.1})
    assert "(pixels)" in " ".join(fig.axes[1].get_ylabel().split())
    # one accuracy per split: the bar is their mean, each split a dot, the range an error bar
    fig = drawn(vit_plots.probe_and_redundancy, {"CLS": [0.9, 0.8, 1.0], "patch": [0.3, 0.5, 0.4]}, 0.1, similarity)
    ax = fig.axes[0]
    assert [round(b.get_height(), 6) for b in ax.patches] == [0.9, 0.4]
    assert sum(len(c.get_offsets()) for c in ax.collections if c.get_offsets().size) >= 6  # six split dots
    assert "mean over splits" in ax.get_ylabel()


def test_where_attention_goes_token_norms_models_compared(drawn):
    torch.manual_seed(0)
    drawn(vit_plots.where_attention_goes, torch.rand(12).tolist(), (torch.rand(12) * 40).tolist(),
          (torch.rand(12) * 3).tolist(), 37, title="Where attention goes")
    norms = torch.rand(12, 8, 36) + 1
    norms[8:, :, 5] = 30
    drawn(vit_plots.token_norms, norms, [0, 6, 11], (torch.rand(12) * 20).tolist(), 10.0, title="Token norms")
    summaries = {f"model {i}": {"max_norm_ratio": (torch.rand(n) * 30).tolist(), "n_prefix": 1 + i,
                                "outlier_fraction": (torch.rand(n) * 0.02).tolist()}
                 for i, n in enumerate((12, 24, 6))}
    drawn(vit_plots.models_compared, summaries, 10.0, title="High-norm tokens across models")


def test_visual_sinks_draws_every_stand_in_and_says_when_none_has_a_sink(drawn):
    """Issue 43: fig03 showed seed 0 only, whose (c) panel was empty; every stand-in is drawn, the ceiling too."""
    torch.manual_seed(0)
    phi = torch.rand(10, 4, 36) * 19
    phi[:2] = float("nan")
    other = phi.clone() + 3
    fig = drawn(visual_sink_plots.visual_sinks, phi, {"tau = 20 (paper)": 20.0}, 20.0, [None] * 10, _pixels(),
                torch.rand(36), 6, others={"seed 1": (other, [None] * 10)}, ceiling=24.0, label="seed 0")
    panels = {ax.get_title().split(" ")[0]: ax for ax in fig.axes if ax.get_title()}
    legend_a = " ".join(t.get_text() for t in panels["(a)"].get_legend().get_texts())
    assert "seed 0" in legend_a and "seed 1" in legend_a and "ceiling sqrt(d) = 24" in legend_a
    assert "no visual sink token" in " ".join(t.get_text() for t in panels["(c)"].texts)


def test_changes_per_model_shows_each_stand_in_against_its_own_baseline(drawn):
    """Issue 43: fig04 showed seed 0's four identical bars on a +-0.001 axis; seed 1's +0.133 was in no figure."""
    fig = drawn(visual_sink_plots.changes_per_model,
                {"seed 0": {"sinks": 0.0, "random": 0.0, "VAR": 0.0},
                 "seed 1": {"sinks": 0.133, "random": 0.05, "VAR": -0.008}},
                {"seed 0": [0.0, 0.0], "seed 1": [0.04, 0.06]})
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["seed 0", "seed 1"]
    labels = [t.get_text() for t in ax.texts]
    assert "+0.133" in labels and ax.get_ylim()[1] > 0.133
