"""The gallery as a reader sees it in headless Chromium at 1,400 px (issue 46): the scorecard's summary and per-paper
table on the first screen, no horizontal scrolling, every caveat whole, the full claim list one click away, math
drawn (offline), and nothing fetched from the network."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pytest

from sinklib.core import plotting
from sinklib.core.claims import Claim
from sinklib.core.claims_file import Recorder
from sinklib.core.results import write_json
from sinklib.pipeline import gallery
from tests import browser

pytestmark = pytest.mark.skipif(browser.why_unavailable() is not None, reason=str(browser.why_unavailable()))

WIDTH, HEIGHT = 1400, 900
SOURCES = ["Xiao et al., Efficient Streaming Language Models with Attention Sinks, arXiv 2309.17453, Table 1",
           "Gu et al., When Attention Sink Emerges, arXiv 2410.10781, Table 1",
           "Sun et al., Massive Activations, arXiv 2402.17762, Fig. 2",
           "Darcet et al., Vision Transformers Need Registers, arXiv 2309.16588, Fig. 3"]
LONG_CAVEAT = ("paper: Llama-2-13B, 1024-token cache, PG19; here a 135M stand-in on one held-out stream "
               "-- the size is not comparable; the rule follows mit-han-lab/streaming-llm:streaming_llm/kv_cache.py:"
               "StartRecentKVCache_with_a_very_long_unbroken_identifier_that_no_space_breaks_at_all " * 4)


def _notebook(path, *cells):
    cells = [{"cell_type": "markdown", "metadata": {}, "source": text} for text in cells]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def _figure(path, caption, tall=False):
    fig, ax = plt.subplots(figsize=(10, 9) if tall else (5, 3))
    ax.plot([0, 1], [0, 1])
    fig.suptitle(path.name)
    plotting.save(fig, path, caption, formats=("png",))
    plt.close(fig)


def _gallery(tmp_path):
    """A figures folder like a real run's: three notebooks with many claims from several papers (nested values, a
    long caveat), math in a section heading and a takeaway, a dollar amount that is not math, and the scorecard's
    own (tall) figure; returns the built index.html."""
    nbdir, root = tmp_path / "notebooks", tmp_path / "figures"
    nbdir.mkdir()
    for n, stem in enumerate(["00_tour", "01_utilization", "13_vit"]):  # 00 first: the start line names it
        _notebook(nbdir / f"{stem}.ipynb", f"# {stem[:2]} · Question {n} about sinks\n\nDoes the sink move?",
                  "## 2 · How much each head sinks: $\\alpha_0^{l,h}$ (Gu et al.)\n\n**What we saw.** -")
        folder = root / stem
        folder.mkdir(parents=True)
        _figure(folder / "fig01_line", "The caption: $\\alpha_0$ against the layer $l$.")
        write_json(folder / "headline.json", {"notebook": stem, "profile": "cpu", "seconds": 60.0,
                                              "label": f"Model {n} (4-bit GGUF, dequantised, a long label)"})
        write_json(folder / "takeaways.json", {"notebook": stem, "takeaways": [
            {"section": "2 · How much each head sinks: $\\alpha_0^{l,h}$ (Gu et al.)",
             "markdown": "**What we saw (one 64-token window).** The mean $\\alpha_0^{l,h} > \\epsilon = 0.3$ in "
                         "73.5% of heads; a run costs $5 on a cloud machine, $10 on two."}]})
        rec = Recorder(stem, f"Model {n} (4-bit GGUF, dequantised, a long label)", "cpu")
        for i in range(14):
            rec.add(Claim(f"p{i % 4}.claim_{i}", f"claim {i}: the sink takes $\\alpha_0$ of the attention",
                          SOURCES[i % 4], "share > 0.3",
                          {"Mistral-7B": {"natural": 0.9749, "random": 0.7521, "repeated": 0.0},
                           "LLaMA2-7B": {"natural": 0.9247, "random": 0.9013, "repeated": 0.0}},
                          {"natural": 0.7354, "random": 0.7822, "vs tokens 4-7 kept": [1.001, 0.988, 1.015] * 9},
                          [True, False, None][i % 3], note=LONG_CAVEAT if i % 2 else "one stream, one seed",
                          follows="Table 1 (" + "the paper's protocol, " * 10 + ")"), show=False)
        rec.write(folder)
    (root / "90_scorecard").mkdir()
    _figure(root / "90_scorecard" / "fig01_measured-over-published", "Every claim value.", tall=True)
    return gallery.build_gallery(root, notebook_dir=nbdir)


@pytest.fixture(scope="module")
def seen(tmp_path_factory):
    """The gallery's :class:`tests.browser.ReadingReport` at 1,400 x 900 (one browser session for every
    check below); the first screen is saved beside it."""
    tmp = tmp_path_factory.mktemp("gallery")
    page = _gallery(tmp)
    return browser.reading_report(page, width=WIDTH, height=HEIGHT, screenshot=tmp / "first-screen.png")


def test_nothing_needs_horizontal_scrolling(seen):
    assert seen.scroll_width <= WIDTH, f"the page is {seen.scroll_width} px wide with every <details> open"


def test_what_was_found_where_to_start_and_the_scorecard_are_on_the_first_screen(seen):
    assert seen.off_first_screen == []
    assert seen.screenshot.stat().st_size > 0


def test_every_caveat_is_visible_whole(seen):
    assert seen.caveats >= 3 * 14  # every notebook's claims, and the scorecard's list
    assert seen.clipped_caveats == []


def test_full_claim_list_is_one_click_away(seen):
    assert seen.claims_hidden_at_first, "the every-claim table is open when the page loads"
    assert seen.claims_shown_after_click


def test_math_is_drawn_and_no_raw_tex_is_left(seen):
    assert seen.math_elements >= 3 * 3  # a heading, a takeaway and a caption per notebook
    assert seen.raw_tex == []


def test_nothing_is_fetched_from_the_network(seen, tmp_path):
    assert seen.external_requests == []
    # the check itself sees a page that would fetch math from a CDN
    cdn = tmp_path / "cdn.html"
    cdn.write_text("<html><head><script src='https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js'></script>"
                   "</head><body><p>$\\alpha$</p></body></html>")
    report = browser.reading_report(cdn, width=WIDTH, height=HEIGHT)
    assert report.external_requests == ["https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"]
    assert report.raw_tex == ["$\\alpha"] and not report.ok
