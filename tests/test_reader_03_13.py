"""Issue 46, as a reader sees notebooks 03, 11, 12 and 13: a rate's band stays in [0, 1], a gap below its measured
resolution reads "no different", a before / after map is scaled to the change, every takeaway names what it was
measured on, and the numbered sections carrying takeaways are unique and consecutive. Tiny synthetic inputs only."""

from __future__ import annotations

import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from sinklib.architectures.mllm import takeaways as mllm_tk
from sinklib.architectures.moe import takeaways as moe_tk
from sinklib.architectures.moe.trained_router import TrainedRouter
from sinklib.architectures.vit import takeaways as vit_tk
from sinklib.architectures.vit import vit_plots, vit_sinks
from sinklib.architectures.vit.vit_sinks import VitProfile
from sinklib.core import plotting
from sinklib.core.claims import Claim
from sinklib.core.takeaways import measurement_size, unmeasured
from sinklib.mitigation import comparison_plots
from sinklib.mitigation import takeaways as mit_tk

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
    spread over images. Per-image gaps that scatter around zero -> "no different", with the resolution stated."""
    noisy = vit_sinks.high_norm_similarity(_profile(_similarity([-0.08, 0.06, -0.07, 0.05, -0.06, 0.04, -0.05,
                                                                 0.06, -0.03])))
    assert noisy["images"] == 9 and noisy["resolution"] > abs(noisy["selected"] - noisy["all"])
    text = vit_tk.redundancy_sentence(noisy)
    assert "no different" in text and "less like" not in text
    assert f"the resolution of {vit_tk.num(noisy['resolution'])}" in text and "over 9 images" in text
    steady = vit_sinks.high_norm_similarity(_profile(_similarity([-0.2, -0.21, -0.19, -0.2, -0.2, -0.22, -0.18,
                                                                  -0.2, -0.2])))
    text = vit_tk.redundancy_sentence(steady)
    assert "less like their 4 neighbours" in text and "beyond the resolution" in text
    one = vit_sinks.high_norm_similarity(_profile(_similarity([-0.2])))
    assert math.isnan(one["resolution"]) and "less like" in vit_tk.redundancy_sentence(one)


def test_high_norm_takeaway_uses_the_resolution():
    sim = vit_sinks.high_norm_similarity(_profile(_similarity([-0.08, 0.06, -0.07, 0.05, -0.06, 0.04])))
    probes = [{"CLS": 0.9, "highest-norm patch": 0.8, "median-norm patch": 0.75}]
    text = vit_tk.high_norm([1.9], 3.0, probes, sim, [], "m", with_norms=False)
    assert "no different from patches overall" in text and "x the image's median" not in text


# ---------------------------------------------------------------- 13: fig05 is scaled to the change

def test_register_change_map_is_scaled_to_the_change(figures):
    """13 fig05: a largest change of 0.002 on a +-0.06 scale drew four blank grey panels."""
    before = torch.full((3, 4, 6, 6), 0.02)
    before[:, :, 0, 0] = 0.06
    after = before.clone()
    after[-1, :, 2, 3] += torch.tensor([0.001, -0.002, 0.0015, 0.0005])
    fig = figures(vit_plots.registers_before_after, torch.rand(4, 3, 84, 84), before, after,
                  ["a", "b", "c", "d"], 2)
    panels = [ax for ax in fig.axes if ax.images]
    for ax in panels:
        lo, hi = ax.images[-1].get_clim()
        assert math.isclose(hi, 0.002, rel_tol=1e-5) and math.isclose(lo, -0.002, rel_tol=1e-5)
    label = " ".join(" ".join(ax.get_xlabel() for ax in fig.axes if not ax.images).split())
    assert "+-0.002" in label and "0.06" in label  # the limit, beside the unedited maps' largest value


# ---------------------------------------------------------------- every takeaway names what it was measured on

def _claim(cid: str = "x.y", holds: bool | None = True, **measured) -> Claim:
    return Claim(id=cid, source="s", statement="s", rule="r", published="p", measured=measured, holds=holds)


def _measured(markdown: str) -> None:
    assert measurement_size(markdown), markdown
    assert not unmeasured(markdown), markdown


def test_mitigation_takeaways_name_their_sizes():
    table = pd.DataFrame({("attention row mass", "mean"): [1.0, 0.9], ("seeds", ""): [2, 2]},
                         index=["softmax", "softpick"])
    table.columns = pd.MultiIndex.from_tuples(table.columns)
    _measured(mit_tk.attention_maps({"softmax": [0, 1, 0.3], "softpick": [1, 0, 0.01]}, table))
    runs = _runs([[0.0, 0.1, 0.4], [0.0, 0.2, 0.5]])
    ads = [{"holds": True, "bos_trigger": 0.01, "bos_other": 0.4, "prev_trigger": 0.5, "prev_other": 0.02,
            "trigger_fraction": 0.05}] * 2
    text = mit_tk.emergence(runs, [0, 1], 0.07, 0.3, None, ads, "64 held-out sequences of 64 tokens")
    _measured(text)
    assert "active-dormant as Guo et al. describe, measured on 64 held-out sequences of 64 tokens" in text
    assert "not measured" in mit_tk.emergence(runs, [0, 1], 0.07, 0.3, None, [])


def test_moe_takeaways_name_their_sizes():
    windows = moe_tk.windows(32, 64)
    assert windows == "32 held-out windows of 64 tokens"
    _measured(moe_tk.routing([1.0, 0.5], [0.3, 0.4], [2.0] * 2, [2.0] * 2, 8, "m", size=windows))
    table = torch.ones(30, 8)
    table[11, 0] = 1e5
    from sinklib.architectures.moe import su_claims

    _measured(moe_tk.super_experts(su_claims.super_experts_claim(table), 240, "m", size=windows))
    base = {"alpha": 0.5, "ppl": 40.0, "max_abs_first": 2e4}
    runs = {"as is": base, "super experts pruned": {"alpha": 0.2, "ppl": 150.0, "max_abs_first": 700.0},
            "random experts [a]": base}
    text = moe_tk.pruning(runs, su_claims.pruning_over_draws(runs), "m", size=windows,
                          ppl_size=moe_tk.windows(8, 256))
    _measured(text)
    assert "alpha_0 and |h| on 32 held-out windows of 64 tokens, perplexity on 8 held-out windows of 256" in text
    router = TrainedRouter(seed=0, val_loss=3.1, alpha_by_layer=[0.3], sink_rate=0.4, same_set_first=[1.0],
                           same_set_middle=[0.3], max_abs_first=2.0, max_abs_rest=1.0)
    text = moe_tk.trained_router([router], "tiny", moe_tk.windows(32, 64, "held-out sequences"))
    _measured(text)
    assert "(tiny, 1 seed, each on 32 held-out sequences of 64 tokens)" in text


def test_mllm_takeaways_name_their_sizes():
    _measured(mllm_tk.training([6.0, 1.0], 100.0, 0.4, 40))
    nan = float("nan")
    _measured(mllm_tk.sinks([507], [nan, nan, 0.1], [nan, nan, 22.0], [1, 1, 23], [None, None, 3.0], None,
                            n_digits=16, n_image=36))
    more = mllm_tk.seed_sentences({0: {"sinks": 0.2, "random": 0.01, "VAR": 0.0},
                                   1: {"sinks": -0.01, "random": 0.0, "VAR": 0.001}},
                                  sizes={0: "64 digits, 5 draws", 1: "16 digits, 2 draws"})
    text = mllm_tk.edits({"as is": 2.0, "sinks hidden": 2.2, "VAR": 2.0}, [2.01, 2.02], 6.0, 36, 64, None, None,
                         more=more)
    _measured(text)
    assert "seed 0 (64 digits, 5 draws): sinks +0.200" in text and "seed 1 (16 digits, 2 draws)" in text
    bg = _claim("kang2025.sinks_on_background", None, **{"share on background": 0.0, "visual sink tokens": 3,
                                                          "background share of all image tokens": 0.38})
    _measured(mllm_tk.kang_extras(bg, {0: bg}, 1.0, 0.4, 1, True, n_digits=16))


def test_vit_takeaways_name_their_sizes():
    _measured(vit_tk.cls_maps([0.1, 0.5], [0, 1], 10, "m", "9 photos"))
    _measured(vit_tk.where_attention_goes([0.2, 0.1], [30.0, 3.0], [1.0, 1.2], 50, [4, 4], "m", "9 photos"))
    _measured(vit_tk.token_norms([1.9, 1.5], 3.0, "m", size="9 photos"))
    sim = vit_sinks.high_norm_similarity(_profile(_similarity([-0.08, 0.06])))
    probes = [{"CLS": 0.9, "highest-norm patch": 0.8, "median-norm patch": 0.75}]
    _measured(vit_tk.high_norm([1.9], 3.0, probes, sim, [], "m", with_norms=False,
                               size="the probe on 600 digits, the neighbours on 9 photos"))
    _measured(vit_tk.registers([(9, 1, 1.0)], 1.9, 1.8, 0.8, [0.01], 3.0, True, None, "m", size="9 photos"))
    massive = _claim("sun2024.vit_massive_activations", None, **{
        "largest / layer median, peak": 50.0, "peak layer": 3, "largest |h| there": 12.0,
        "dimension of the largest": 7, "images with the largest in that dimension": 1.0,
        "images with the largest on a prefix token": 1.0, "layers meeting the criterion": []})
    _measured(vit_tk.massive(massive, "m", "9 photos"))


# ---------------------------------------------------------------- section numbers carrying takeaways

_HEADING = re.compile(r"^# #{1,3} (?:(\w+) · )?")


def takeaway_sections(source: str) -> list[tuple[str | None, int]]:
    """(section number, takeaways.show calls under it) for every "## N · Title" heading of a py:percent notebook,
    in order; None for an unnumbered heading. A takeaway belongs to the nearest preceding heading, as the runner
    reads it."""
    sections: list[list] = []
    for line in source.splitlines():
        heading = _HEADING.match(line)
        if heading and line.startswith("# ##"):
            sections.append([heading.group(1), 0])
        elif not line.lstrip().startswith("#") and "takeaways.show(" in line and sections:
            sections[-1][1] += 1
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
