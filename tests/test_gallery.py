"""The gallery page: built from a hand-made figures folder, then (where Chromium is installed) opened in a browser."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import tomllib
from markupsafe import Markup

from sinklib.core import plotting
from sinklib.core.claims import Claim
from sinklib.core.claims_file import Recorder
from sinklib.core.results import write_json
from sinklib.pipeline import executed, gallery, gallery_math
from tests import browser


def _notebook(path, *cells):
    cells = [{"cell_type": kind, "metadata": {}, "source": text, **({"outputs": [], "execution_count": None}
                                                                    if kind == "code" else {})} for kind, text in cells]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def test_flatten_opens_nested_dicts_and_lists_of_records():
    rows = dict(gallery.flatten({"sink_rate": {"natural": 0.73, "random": 0.78}, "dims": [507],
                                 "scorecard": [{"claim": "a", "holds": True}, {"claim": "b", "holds": False}],
                                 "empty": {}}))
    assert rows == {"sink_rate.natural": 0.73, "sink_rate.random": 0.78, "dims": [507], "scorecard[0].claim": "a",
                    "scorecard[0].holds": True, "scorecard[1].claim": "b", "scorecard[1].holds": False,
                    "empty": "{}"}


def test_notebook_text_reads_title_question_and_what_we_saw(tmp_path):
    path = tmp_path / "05_x.ipynb"
    _notebook(path, ("markdown", "# 05 · A question\n\nDoes the sink move?\n\nMore."),
              ("code", "x = 1"), ("markdown", "## 1 · First part\nintro"),
              ("markdown", "**What we saw (tiny).** It moved.\n\nNot this."), ("markdown", "## 2 · Next"),
              ("markdown", "**What we saw.** It stayed."))
    text = gallery.notebook_text(path)
    assert text["title"] == "05 · A question" and text["question"] == "Does the sink move?"
    assert text["saw"] == [("1 · First part", "**What we saw (tiny).** It moved."),
                           ("2 · Next", "**What we saw.** It stayed.")]
    assert gallery.notebook_text(tmp_path / "missing.ipynb")["title"] == "missing"


def _figures(tmp_path):
    nbdir, root = tmp_path / "notebooks", tmp_path / "figures"
    nbdir.mkdir()
    _notebook(nbdir / "05_x.ipynb", ("markdown", "# 05 · A question\n\nDoes the sink move?"),
              ("markdown", "## 1 · Part\n\n**What we saw.** It moved by 0.5."))
    folder = root / "05_x"
    folder.mkdir(parents=True)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    fig.suptitle("A real title")
    plotting.save(fig, folder / "fig01_line", "The caption.")
    plt.close(fig)
    (folder / "final_table.md").write_text("| variant | loss |\n|---|---|\n| softmax | 3.1 |\n")
    write_json(folder / "headline.json", {"notebook": "05_x", "profile": "smoke", "label": "Tiny model",
                                          "seconds": 12.0, "sink_rate": {"natural": 0.5}})
    rec = Recorder("05_x", "Tiny model", "smoke")
    rec.add(Claim("p.c", "the sink moves", "Xiao et al., arXiv 2309.17453, Fig. 1", "moves > 0.1", 0.3, 0.5, True,
                  follows="Fig. 1"), show=False)
    rec.write(folder)
    (folder / "05_x.html").write_text("<html><body>executed</body></html>")
    return root, nbdir


def test_gallery_shows_header_scorecard_claims_figures_tables_and_nested_values(tmp_path):
    root, nbdir = _figures(tmp_path)
    page = gallery.build_gallery(root, notebook_dir=nbdir).read_text()
    assert page.index("id='scorecard'") < page.index("id='05_x'")  # the scorecard on top
    assert "Tiny model" in page and "smoke" in page and "<code>" in page  # header: model, profile, commit
    assert "href='#05_x'" in page and "05 · A question" in page and "Does the sink move?" in page
    assert "It moved by 0.5." in page and "Claims (1 of 1 hold)" in page and "the sink moves" in page
    assert "<b>A real title.</b> The caption." in page and "src='05_x/fig01_line.png'" in page
    assert "<td>softmax</td>" in page  # the .md table rendered, not only named
    assert "sink_rate.natural" in page  # nested headline value shown
    assert "href='05_x/05_x.html'" in page and "took 12 s" in page
    assert "id='benchmarks'" not in page  # no benchmark run here: no empty section
    # the run's rendered takeaways replace what the notebook's source says, and the 90 notebook's page is linked
    write_json(root / "05_x" / "takeaways.json", {"notebook": "05_x", "takeaways": [
        {"section": "1 · Moves", "markdown": "**What we saw (this run).** It moved by 0.7."}]})
    (root / "90_scorecard").mkdir()
    (root / "90_scorecard" / "90_scorecard.html").write_text("<html></html>")
    page = gallery.build_gallery(root, notebook_dir=nbdir).read_text()
    assert "It moved by 0.7." in page and "It moved by 0.5." not in page
    assert "href='90_scorecard/90_scorecard.html'" in page


def test_gallery_header_names_every_model_and_how_its_weights_were_made(tmp_path):
    root, nbdir = _figures(tmp_path)
    rec = Recorder("10_llm", "SmolLM2-135M-Instruct (4-bit GGUF, dequantised)", "smoke")
    rec.add(Claim("p.c", "s", "src", "r", None, 1.0, True, follows="Table 1"), show=False)
    rec.add(Claim("p.c", "s", "src", "r", None, 1.0, True, follows="Table 1"), show=False, model="Gemma-3-270M (4-bit GGUF, dequantised)")
    rec.add(Claim("p.c", "s", "src", "r", None, 1.0, True, follows="Table 1"), show=False,
            model="Gemma-3-270M (4-bit GGUF, dequantised) (random weights, seed 0)")
    rec.add(Claim("p.c", "s", "src", "r", None, 1.0, True, follows="Table 1"), show=False, model="TinyLM trained here (2 x 2 heads)")
    rec.write(root / "10_llm")
    write_json(root / "10_llm" / "headline.json", {"notebook": "10_llm", "profile": "smoke", "label": "three LLMs"})
    header = gallery.build_gallery(root, notebook_dir=nbdir).read_text().split("</header>")[0]
    assert "Gemma-3-270M (4-bit GGUF, dequantised) <span class='meta'>(Q4_K_M GGUF dequantised)</span>" in header
    assert "SmolLM2-135M-Instruct" in header and "Tiny model" in header and "random weights" not in header
    assert "4-bit GGUF" in header and "TinyLM trained here" in header


def test_render_html_embeds_figures_and_drops_cdn_scripts(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell(
        "1", outputs=[nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "x"})])]
    src = tmp_path / "n.ipynb"
    nbformat.write(nb, src)
    body = executed.render_html(src, tmp_path / "n.html").read_text()
    assert "data:image/png;base64,iVBORw0KGgo=" in body and "cdnjs" not in body.split("<style")[0]
    assert "<script src=\"https://" not in body


@pytest.mark.skipif(browser.why_unavailable() is not None, reason=str(browser.why_unavailable()))
def test_gallery_in_headless_chromium(tmp_path):
    root, nbdir = _figures(tmp_path)
    page = gallery.build_gallery(root, notebook_dir=nbdir)
    report = browser.check_page(page, screenshot=tmp_path / "shot.png")
    assert report.ok, report
    assert report.images == 1 and report.links >= 5 and report.screenshot.stat().st_size > 0
    # a broken image and a dead link are caught
    (root / "05_x" / "fig01_line.png").write_bytes(b"not a png")
    (root / "05_x" / "05_x.html").unlink()
    bad = browser.check_page(page)
    assert bad.broken_images == ["05_x/fig01_line.png"] and bad.broken_links == ["05_x/05_x.html"]


def test_with_math_draws_tex_as_svg_and_leaves_dollar_amounts_alone():
    html = gallery.with_math("sinks: $\\alpha_0^{l,h}$ (Gu et al.) costs $5 and $10; a \\$ sign; `$x$` stays code",
                             markdown=True)
    assert html.count("<svg class='math'") == 1 and "aria-label='\\alpha_0^{l,h}'" in html
    assert "$5 and $10" in html and "a $ sign" in html and "<code>$x$</code>" in html
    assert "$\\alpha" not in html
    # an underscore inside math is not markdown emphasis; "<" inside it is not a tag
    html = gallery.with_math("$h^l_t$ and $x_t$ with $t < k$ **bold**", markdown=True)
    assert html.count("<svg class='math'") == 3 and "<em>" not in html and "<strong>bold</strong>" in html
    assert gallery.with_math("a < b, $d = 4096$").startswith("a &lt; b, <svg class='math'")
    # the LaTeX spellings mathtext lacks are rewritten; display math is a block; what mathtext cannot draw stays TeX
    assert gallery.tex_svg("j \\le t, \\lVert x\\rVert, \\tfrac{1}{d}, \\sqrt d") is not None
    assert "display:block" in gallery.with_math("$$\\frac{1}{T}\\sum_t A_{t,0}$$")
    assert gallery.with_math("$\\nosuchcommand{x}$") == "<code class='tex'>\\nosuchcommand{x}</code>"


def test_claim_values_read_as_key_value_lines_not_json():
    lines = gallery.value_lines({"Mistral-7B": {"natural": 0.97491, "random": 0.7521}, "n_sink": [0, 1, 2, 4, 8],
                                 "judged at": "4-bit"})
    assert lines == ["Mistral-7B: natural 0.9749 · random 0.7521", "n_sink: [0, 1, 2, 4, 8]", "judged at: 4-bit"]
    assert gallery.value_lines(0.123456) == ["0.1235"] and gallery.value_lines(None) == []
    many = gallery.value_lines({f"k{i}": i for i in range(20)})
    assert len(many) == gallery.MAX_LINES and many[-1] == f"... {20 - gallery.MAX_LINES + 1} more"
    assert all(len(line) <= gallery.MAX_LINE for line in gallery.value_lines({"x": list(range(100)), "y": "z" * 500}))


def test_every_claim_list_is_closed_and_after_the_scorecard_summary(tmp_path):
    root, nbdir = _figures(tmp_path)
    page = gallery.build_gallery(root, notebook_dir=nbdir).read_text()
    summary, per_paper = page.index("id='scorecard-summary'"), page.index("id='per-paper'")
    every = page.index("<details id='every-claim'>")  # closed: no "open" attribute
    assert per_paper < summary < every < page.index("id='05_x'")
    assert page.index("id='every-claim-table'") > every and "href='#every-claim-table'" in page
    assert "{&quot;" not in page and '{"' not in page.split("<body>")[1]  # no JSON dump in a cell
    assert "<td class='caveat'>" in page and "table-layout:fixed" in page


def _save(folder, name, caption=""):
    fig, ax = plt.subplots(figsize=(2, 1.5))
    ax.plot([0, 1], [0, 1])
    plotting.save(fig, folder / name, caption, formats=("png",))
    plt.close(fig)


def test_each_takeaway_follows_the_figures_it_reads(tmp_path):
    """takeaways.json with each takeaway's figures: figures, then their takeaway; a takeaway without figures of its
    own right after the previous block; a figure named twice shown once; a named figure without a PNG skipped;
    figures no takeaway names at the end. An older takeaways.json (no "figures"): every takeaway, then every figure."""
    root, nbdir = _figures(tmp_path)
    folder = root / "05_x"
    for name in ("fig02_heat", "fig03_curve", "fig04_extra"):
        _save(folder, name)
    saw = [{"section": f"{i} · Part", "markdown": f"**What we saw.** Takeaway {i}."} for i in (1, 2, 3)]
    for t, figures in zip(saw, [["fig02_heat", "fig01_line"], [], ["fig02_heat", "fig09_gone", "fig03_curve"]]):
        t["figures"] = figures
    write_json(folder / "takeaways.json", {"notebook": "05_x", "takeaways": saw})
    assert [([p.stem for p in figs], t and t[1][-11:]) for figs, t in gallery.takeaway_blocks(folder)] == [
        (["fig02_heat", "fig01_line"], "Takeaway 1."), ([], "Takeaway 2."), (["fig03_curve"], "Takeaway 3."),
        (["fig04_extra"], None)]
    section = gallery.build_gallery(root, notebook_dir=nbdir).read_text().split("<section id='05_x'>")[1]
    order = [m.group(1) or m.group(2) for m in re.finditer(r"<figure id='05_x-(\w+)'|(Takeaway \d)", section)]
    assert order == ["fig02_heat", "fig01_line", "Takeaway 1", "Takeaway 2", "fig03_curve", "Takeaway 3",
                     "fig04_extra"]
    assert "<h3>Figures and what we saw</h3>" in section and "<h3>Figures</h3>" not in section
    for t in saw:  # the format before takeaways named their figures
        del t["figures"]
    write_json(folder / "takeaways.json", {"notebook": "05_x", "takeaways": saw})
    assert gallery.takeaway_blocks(folder) is None
    section = gallery.build_gallery(root, notebook_dir=nbdir).read_text().split("<section id='05_x'>")[1]
    order = [m.group(1) or m.group(2) for m in re.finditer(r"<figure id='05_x-(\w+)'|(Takeaway \d)", section)]
    assert order == ["Takeaway 1", "Takeaway 2", "Takeaway 3", "fig01_line", "fig02_heat", "fig03_curve",
                     "fig04_extra"]
    assert section.index("<h3>What we saw</h3>") < section.index("<h3>Figures</h3>")


def test_markdown_math_is_parsed_by_dollarmath_and_drawn_offline():
    svg = "<svg class='math"
    # display math on its own lines, inside a table cell, and inline $$ in a paragraph
    html = gallery_math.with_math("Text:\n\n$$\n\\frac{1}{T}\\sum_t A_{t,0}\n$$\n\n| a | $b_1$ |\n|---|---|\n"
                                  "| $\\le$ | x |\n\nand $$x^2$$ inline", markdown=True)
    assert html.count(svg) == 4 and html.count("display:block") == 2 and "<td><svg" in html and "$" not in html
    assert "class=\"math" not in html  # dollarmath's own wrappers are not on the page: the SVG is
    # pandoc's rule: a word character against a dollar is not math; escaped dollars and raw HTML stay text
    html = gallery_math.with_math("US$5 and $n$th, \\$x\\$ and <b>x</b> and *$a_1$*", markdown=True)
    assert html.count(svg) == 1 and "US$5 and $n$th, $x$" in html and "&lt;b&gt;x&lt;/b&gt;" in html
    assert "<em><svg" in html
    # plain text: math, escapes and code spans as written (backticks kept), no Markdown, no paragraph
    plain = gallery.with_math("**a** `$x$` \\$ and $y$ & <i>")
    assert plain.startswith("**a** `$x$` $ and <svg class='math'") and plain.endswith(" &amp; &lt;i&gt;")
    assert isinstance(plain, Markup) and isinstance(gallery.with_math("x", markdown=True), Markup)


def test_the_page_escapes_text_and_its_templates_ship_with_the_package(tmp_path):
    root, nbdir = _figures(tmp_path)
    (root / "05_x" / "fig01_line.txt").write_text("a <script>alert(1)</script> & $x$")
    (root / "05_x" / "fig01_line.title.txt").write_text("Title with 'quotes'")
    page = gallery.build_gallery(root, notebook_dir=nbdir).read_text()
    assert "<script>" not in page and "a &lt;script&gt;alert(1)&lt;/script&gt; &amp; <svg class='math'" in page
    assert "alt='Title with &#39;quotes&#39;'" in page
    templates = resources.files("sinklib.pipeline") / "templates"
    assert {p.name for p in templates.iterdir()} >= {"gallery.html.j2", "gallery_sections.html.j2"}
    data = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert "templates/*.j2" in data["tool"]["setuptools"]["package-data"]["sinklib.pipeline"]


def test_the_first_screen_says_what_was_found_where_to_start_and_counts_in_one_vocabulary(tmp_path):
    root, nbdir = _figures(tmp_path)
    tour = root / "00_tour"
    tour.mkdir()
    write_json(tour / "headline.json", {"notebook": "00_tour", "profile": "smoke", "seconds": 1.0})
    _notebook(nbdir / "00_tour.ipynb", ("markdown", "# 00 · Tour\n\nWhere is the sink?"))
    page = gallery.build_gallery(root, notebook_dir=nbdir).read_text()
    found, summary = page.index("id='found'"), page.index("id='scorecard-summary'")
    assert found < page.index("id='per-paper'") < summary  # what was found beside the per-paper bars, then counts
    assert "<b>Reproduce here:</b> Xiao et al. (1 of 1 hold)" in page  # the one test holds
    assert "<b>Start here:</b> <a href='#00_tour'>" in page and "<a href='#05_x'>" not in page.split("Start here")[1][:80]
    assert "1 tests of 1 claims from 1 papers" in page and "distinct claims" not in page and "records of" not in page
    assert "class='bar'" in page and "style='width:100.0%' title='1 holds'>1</span>" in page  # per-paper bar


def test_a_control_says_it_is_the_random_weight_control_and_values_carry_units(tmp_path):
    from sinklib.core import quantities as q
    from sinklib.core.claims import control_summary

    assert control_summary(False, False, {"x": 1}) == "random-weight control: fails; paper: made by training"
    assert control_summary(True, False, {"x": 1}).endswith("-- CONTRADICTS the paper")
    assert control_summary(None, None) == "random-weight control not run"
    declared = {"ppl": q.loss("ppl"), "ratio": q.ratio(), "layer": q.identity("layer"), "rate": q.share("fraction of heads")}
    assert gallery.value_lines({"ppl": 34.47, "ratio": 2.5, "layer": 3, "rate": 0.5, "other": 1.5}, declared) == [
        "ppl: 34.47 ppl", "ratio: 2.5x", "layer: layer 3", "rate: 0.5 (fraction of heads)", "other: 1.5"]
    assert gallery.value_lines({}) == ["none"]  # never a raw "{}"


def test_an_executed_page_draws_its_math_drops_frozen_progress_bars_and_renders_takeaways(tmp_path):
    import nbformat

    nb = nbformat.v4.new_notebook()
    bar = {"application/vnd.jupyter.widget-view+json": {"model_id": "x"}, "text/plain": "  0%|          | 0/3"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Sinks\n\nThe share $\\alpha_0^{l,h}$ of the first key."),
                nbformat.v4.new_code_cell("say(...)", outputs=[
                    nbformat.v4.new_output("display_data", data=bar),
                    nbformat.v4.new_output("display_data", data={"text/markdown": "**What we saw.** $\\alpha_0$ is 0.5",
                                                                 "text/plain": "<IPython.core.display.Markdown>"})])]
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {}}
    src = tmp_path / "n.ipynb"
    nbformat.write(nb, src)
    body = executed.render_html(src, tmp_path / "n.html").read_text()
    text = re.sub(r"<script.*?</script>", "", body.split("<body", 1)[1], flags=re.S)  # MathJax's config names "$"
    assert "$\\alpha" not in text and len(re.findall(r"<svg[^>]*class=.math", text)) == 2
    assert "0%|" not in text and "<strong>What we saw.</strong>" in text
