"""Issue 46, as a reader sees notebooks 03, 11, 12 and 13: a rate's band stays in [0, 1], a gap below its measured
resolution reads "no different", a before / after map is scaled to the change, and the numbered sections carrying
takeaways are unique and consecutive. Tiny synthetic inputs only. (That every takeaway names what it was measured on
is checked on the executed notebooks, tests/test_takeaways.py.)"""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from sinklib.architectures.vit import vit_plots, vit_sinks
from sinklib.architectures.vit.vit_sinks import VitProfile
from sinklib.core import plotting
from sinklib.mitigation import comparison_plots

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


@pytest.fixture
def figures():
    """Figures built in sinklib's style, closed afterwards."""
    made = []

    def build(fn, *args, **kwargs):
        with plotting.style():
            fig = fn(*args, **kwargs)
        made.append(fig)
        return fig

    yield build
    for fig in made:
        plt.close(fig)


# ---------------------------------------------------------------- 03: a proportion's band never leaves [0, 1]

def _runs(rates: list[list[float]]) -> list[dict]:
    """One softmax run per seed: 1 layer x 1 head, the given sink rate per checkpoint."""
    return [{"checkpoints": [{"step": 100 * i, "alpha_by_head": [[0.1 + 0.05 * i]], "sink_rate": r,
                              "val_loss": 3.0 - 0.1 * i} for i, r in enumerate(seed)]} for seed in rates]


def test_emergence_sink_rate_band_stays_in_0_1(figures):
    """Seeds at rate 0 and 0.5 (and 1 and 0.6): mean +- sd gave 0.25 +- 0.35, a band below 0 (and above 1)."""
    fig = figures(comparison_plots.emergence, _runs([[0.0, 0.0, 1.0], [0.0, 0.5, 0.6]]), 0.07, 0.3)
    rate_axis = fig.axes[1]
    bands = [c for c in rate_axis.collections if len(c.get_paths())]
    assert bands, "the sink rate has a band over the seeds"
    ys = np.concatenate([p.vertices[:, 1] for c in bands for p in c.get_paths()])
    assert ys.min() >= 0.0 and ys.max() <= 1.0
    assert math.isclose(ys.max(), 1.0) and math.isclose(ys.min(), 0.0)  # the seeds' range: min 0, max 1


def test_final_bars_clip_a_proportions_error_bar_to_0_1(figures):
    """fig04: softpick's first-token share 0.03 +- 0.05 drew a bar below 0."""
    labels = ["sink rate", "val loss"]
    table = pd.DataFrame({("sink rate", "mean"): [0.03, 0.95], ("sink rate", "sd"): [0.05, 0.2],
                          ("val loss", "mean"): [3.0, -1.0], ("val loss", "sd"): [0.5, 0.5]},
                         index=["softpick", "softmax"])
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    fig = figures(comparison_plots.final_bars, table, labels)

    def spans(ax):
        return np.concatenate([s[:, 0] for c in ax.collections for s in c.get_segments()])

    rate = spans(fig.axes[0])
    assert rate.min() >= 0.0 and rate.max() <= 1.0
    assert math.isclose(rate.min(), 0.0) and math.isclose(rate.max(), 1.0)
    assert spans(fig.axes[1]).min() < -1.0  # a loss is no proportion: its bar is +- sd as it is


# ---------------------------------------------------------------- 13: a gap below its resolution is no difference

def _profile(sim: torch.Tensor) -> VitProfile:
    """B images of 4 x 4 patches (+ CLS); patch 0 of every image has the largest norm at the last layer."""
    B, P = sim.shape
    norms = torch.ones(2, B, 1 + P)
    norms[-1, :, 1] = 2.0  # below the 3x outlier cut: the top-2% stand-in picks it
    return VitProfile(label="hand-built", n_prefix=1, grid=(4, 4), cls_map=torch.full((2, B, 4, 4), 1 / 17),
                      received=torch.full((2, B, 1 + P), 1 / 17), entropy=torch.full((2,), math.log(17)),
                      norms=norms, embed_similarity=sim)


def _similarity(gaps: list[float]) -> torch.Tensor:
    """(B, 16) similarities: all patches 0.65 but patch 0, at 0.65 + its image's gap."""
    sim = torch.full((len(gaps), 16), 0.65)
    sim[:, 0] += torch.tensor(gaps)
    return sim


def test_a_gap_below_the_images_resolution_reads_no_difference():
    """13 read "highest-norm patches are less like their neighbours (0.649 against 0.652)": a 0.003 gap inside the
    spread over images. Per-image gaps that scatter around zero -> "no different", the resolution measured."""
    noisy = vit_sinks.high_norm_similarity(_profile(_similarity([-0.08, 0.06, -0.07, 0.05, -0.06, 0.04, -0.05,
                                                                 0.06, -0.03])))
    assert noisy["images"] == 9 and noisy["resolution"] > abs(noisy["selected"] - noisy["all"])
    assert vit_sinks.neighbour_gap(noisy) == "no different"
    steady = vit_sinks.high_norm_similarity(_profile(_similarity([-0.2, -0.21, -0.19, -0.2, -0.2, -0.22, -0.18,
                                                                  -0.2, -0.2])))
    assert steady["resolution"] < abs(steady["selected"] - steady["all"])
    assert vit_sinks.neighbour_gap(steady) == "less"
    assert vit_sinks.neighbour_gap(steady | {"selected": steady["all"] + 0.2}) == "more"
    one = vit_sinks.high_norm_similarity(_profile(_similarity([-0.2])))
    assert math.isnan(one["resolution"]) and vit_sinks.neighbour_gap(one) == "less"
    assert vit_sinks.neighbour_gap(one | {"selected": one["all"]}) == "as"


# ---------------------------------------------------------------- 13: fig05 is scaled to the change

def test_register_change_map_is_scaled_to_the_change(figures):
    """13 fig05: a largest change of 0.002 on a +-0.06 scale drew four blank grey panels."""
    before = torch.full((3, 4, 6, 6), 0.02)
    before[:, :, 0, 0] = 0.06
    after = before.clone()
    after[-1, :, 2, 3] += torch.tensor([0.001, -0.002, 0.0015, 0.0005])
    fig = figures(vit_plots.registers_before_after, torch.rand(4, 3, 84, 84), before, after,
                  ["a", "b", "c", "d"], 2)
    changes = [ax for ax in fig.axes if ax.images and "change" in ax.get_title()]  # the lower row
    assert len(changes) == 4
    for ax in changes:
        lo, hi = ax.images[-1].get_clim()
        assert math.isclose(hi, 0.002, rel_tol=1e-5) and math.isclose(lo, -0.002, rel_tol=1e-5)
    label = " ".join(" ".join(ax.get_xlabel() + ax.get_ylabel() for ax in fig.axes if not ax.images).split())
    assert "+-0.002" in label and "0.06" in label  # the limit, beside the unedited maps' largest value


# ---------------------------------------------------------------- section numbers carrying takeaways

_HEADING = re.compile(r"^# #{1,3} (?:(\w+) · )?")


def _is_takeaway(call: ast.Call) -> bool:
    """``say(...)`` -- a takeaway written in its cell -- or an older ``takeaways.show(...)``."""
    f = call.func
    return (isinstance(f, ast.Name) and f.id == "say") or (
        isinstance(f, ast.Attribute) and f.attr == "show" and getattr(f.value, "id", "") == "takeaways")


def _takeaways_run(body: list[ast.stmt]) -> int:
    """How many takeaways a run through ``body`` can show at most: the calls of every statement, but of an
    ``if`` / ``else`` only its larger branch (the two are never both run)."""
    n = 0
    for node in body:
        if isinstance(node, ast.If):
            n += sum(_is_takeaway(c) for c in ast.walk(node.test) if isinstance(c, ast.Call))
            n += max(_takeaways_run(node.body), _takeaways_run(node.orelse))
        else:
            n += sum(_is_takeaway(c) for c in ast.walk(node) if isinstance(c, ast.Call))
    return n


def takeaway_sections(source: str) -> list[tuple[str | None, int]]:
    """(section number, takeaways written under it -- ``say(...)`` calls, the larger branch of an ``if`` / ``else``)
    for every "## N · Title" heading of a py:percent notebook, in order; None for an unnumbered heading. A takeaway
    belongs to the nearest preceding heading, as the runner reads it."""
    sections: list[list] = []
    parts = re.split(r"^(# %%.*)$", source, flags=re.MULTILINE)  # header, marker, cell, marker, cell, ...
    for marker, cell in zip(parts[1::2], parts[2::2], strict=True):
        if "[markdown]" in marker:  # its headings
            for line in cell.splitlines():
                heading = _HEADING.match(line)
                if heading and line.startswith("# ##"):
                    sections.append([heading.group(1), 0])
        elif sections:
            sections[-1][1] += _takeaways_run(ast.parse(cell).body)
    return [(n, k) for n, k in sections]


@pytest.mark.parametrize("name", ["03_mitigation", "11_moe", "12_mllm", "13_vit"])
def test_numbered_sections_with_takeaways_are_unique_and_consecutive(name):
    """03 had two takeaways under section 1, 12 two under 3 (and a "3b"), 13 none under 3 between 2 and 4."""
    sections = takeaway_sections((NOTEBOOKS / f"{name}.py").read_text())
    numbered = [(n, k) for n, k in sections if n is not None]
    assert all(n.isdigit() for n, _ in numbered), numbered
    assert all(k <= 1 for _, k in sections), sections
    carrying = [int(n) for n, k in numbered if k]
    assert carrying and carrying[0] in (0, 1)
    assert carrying == list(range(carrying[0], carrying[0] + len(carrying))), carrying


def test_fig06_names_each_variant_at_its_end_with_rising_or_flat_and_no_label_overlaps():
    """03 fig06 asked "removed or delayed?" and left three overlapping lines to answer it."""
    from sinklib.core import plotting
    from sinklib.mitigation import comparison_plots
    from sinklib.mitigation.verdicts import RISING
    from tests.figure_lint import layout_problems

    def run(end: float, power: float) -> dict:
        return {"checkpoints": [{"step": s, "share_by_head": [[0.07 + (end - 0.07) * (s / 600) ** power]]}
                                for s in range(0, 601, 50)]}

    runs = {"softmax": [run(0.36, 1)], "softmax_off_by_one": [run(0.19, 2)], "sink_logit": [run(0.185, 2)],
            "kv_bias": [run(0.18, 2)], "sigmoid": [run(0.07, 1)]}
    with plotting.style():
        fig = comparison_plots.strongest_head_over_training(runs, 0.3, 0.074)
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert any(t.startswith("softmax: still rising") for t in texts) and "sigmoid: flat" in texts
    assert f"> {RISING:g}" in fig.axes[0].get_title(loc="right")
    assert layout_problems(fig) == []  # three lines that end together keep readable labels
