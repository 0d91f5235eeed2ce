"""The attention explorer: built from one forward, its panels show alpha and norms, its sliders redraw them."""

import matplotlib
import pytest
import torch

from sinklib.core import metrics
from sinklib.teaching.explore import Explorer, explore, explorer_data

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def data(tiny):
    return explorer_data(tiny, "In the beginning God created the heavens and the earth.")


def test_panels_show_alpha_and_norms_of_the_chosen_head(data):
    L, H, T, _ = data.attentions.shape
    assert len(data.labels) == T and data.norms.shape == (L, T)
    ex = Explorer(data, layer=1, head=0)
    got = ex.arrays()
    torch.testing.assert_close(torch.tensor(got["alpha"][0]).float(), metrics.alpha(data.attentions[1, 0], 0),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.tensor(got["alpha"]).float(), metrics.sink_mass(data.attentions[1, 0]),
                               atol=1e-6, rtol=0)
    torch.testing.assert_close(torch.tensor(got["norm"]).float(), data.norms[1], atol=1e-5, rtol=1e-6)
    before = {k: v.copy() for k, v in got.items()}
    ex.update(0, H - 1)
    after = ex.arrays()
    assert not (before["map"] == after["map"]).all() and not (before["alpha"] == after["alpha"]).all()
    assert "layer 0, head" in ex.fig._suptitle.get_text()
    with pytest.raises(ValueError, match="outside the model"):
        ex.update(L, 0)


def test_the_sliders_call_update(data):
    ex = Explorer(data, layer=0, head=0)
    box = ex.widget()
    layer, head = box.sliders
    first, shown = ex.arrays()["alpha"].copy(), bytes(box.picture.value)
    assert shown[:8] == b"\x89PNG\r\n\x1a\n"  # the widget carries the figure itself
    layer.value = 1
    assert ex.layer == 1 and not (ex.arrays()["alpha"] == first).all()
    assert bytes(box.picture.value) != shown  # ... and redraws it when a slider moves
    head.value = data.n_heads - 1
    assert ex.head == data.n_heads - 1


def test_static_fallback_and_the_strongest_head(tiny, capsys, monkeypatch):
    monkeypatch.setenv("SINKLIB_HEADLESS", "1")
    import sinklib

    ex = sinklib.explore(tiny, "Hello there, world.")
    assert "static" in capsys.readouterr().out
    a0 = torch.stack([metrics.alpha(ex.data.attentions[i], 0) for i in range(ex.data.n_layers)])  # (L, H)
    assert (ex.layer, ex.head) == divmod(int(a0.argmax()), ex.data.n_heads)
    with pytest.raises(ValueError, match="at least one token"):
        explore(tiny, torch.tensor([], dtype=torch.long), interactive=False)


def test_vit_patches_on_a_grid():
    from sinklib.models.load import load_model

    vit = load_model("tiny-vit-random", device="cpu")
    size = 32
    pixels = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(0))
    ex = Explorer(explorer_data(vit, pixels))
    rows, cols = ex.data.grid
    got = ex.arrays()
    assert got["map"].shape == got["alpha"].shape == got["norm"].shape == (rows, cols)
    assert ex.data.labels[0] == "CLS" and len(ex.data.labels) == ex.data.first_patch + rows * cols


def test_explorer_renders_in_jupyterlab(tmp_path):
    """JupyterLab in headless Chromium runs a notebook calling sinklib.explore: the sliders and the figure appear,
    no error output; the screenshot is left in build/ for a person to look at."""
    import nbformat

    from sinklib.core.paths import ROOT
    from tests import browser

    if (reason := browser.why_unavailable()) is not None:
        pytest.skip(reason)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(
        "import sinklib\nfrom sinklib.models.load import load_model\n"
        "lm = load_model('tiny-llama-random', device='cpu', seed=0)\n"
        "explorer = sinklib.explore(lm, 'In the beginning God created the heavens and the earth.')")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "explore.ipynb"
    nbformat.write(nb, path)
    report = browser.lab_screenshot(path, ROOT / "build" / "explorer-lab-smoke.png")
    assert report.ok, report
    # The notebook's own kernel starts by itself: a "Select Kernel" dialog answered before the kernel list loaded
    # left a fresh clone's cells unrun (CI, stop 34).
    assert not report.dialogs, report.dialogs
    assert report.screenshot.stat().st_size > 10_000
