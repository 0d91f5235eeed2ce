"""What the runner keeps of an executed notebook beside its figures: the notebook as one offline HTML page
(:func:`render_html`) and its rendered "What we saw" paragraphs with the kernel's environment (:func:`write_takeaways`).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from sinklib.reproduction.environment import KERNEL_ISA_VARIABLES, thread_env


def last_error_line(err: BaseException) -> str:
    name = getattr(err, "ename", type(err).__name__)
    value = str(getattr(err, "evalue", err)).strip().splitlines()
    return f"{name}: {value[-1] if value else ''}"[:300]


WIDGET = "application/vnd.jupyter.widget-view+json"


def static_page(nb) -> None:
    """Make an executed notebook read right as a static, offline page (in place): the TeX of every Markdown cell and
    Markdown output (a takeaway) drawn as inline SVG (:func:`~sinklib.pipeline.gallery_math.with_math`, the gallery's
    renderer) instead of left as ``$\\alpha_0$`` for a MathJax that cannot load offline; widget outputs (tqdm's
    progress bars, whose text form is their state at 0 %) and the widget state dropped -- the run's stderr keeps
    what a bar reported."""
    from sinklib.pipeline.gallery_math import with_math

    nb.metadata.pop("widgets", None)  # its state would make the page fetch a widget manager from a CDN
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = str(with_math(cell.source, markdown=True))
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "text/markdown" in data and "text/html" not in data:
                data["text/html"] = str(with_math(data.pop("text/markdown"), markdown=True))
        if "outputs" in cell:
            cell.outputs = [o for o in cell.outputs if WIDGET not in o.get("data", {})]


def render_html(executed: Path, target: Path) -> Path | None:
    """The executed notebook as one self-contained HTML page (nbconvert's lab template; figures embedded, math drawn
    offline, :func:`static_page`), so the gallery can link to it and it opens without Jupyter. The template's two
    CDN scripts (require.js, MathJax) are left out: the page must open offline. None (and a printed reason) when
    rendering fails: the figures matter more than this page."""
    try:
        import nbformat
        from nbconvert import HTMLExporter

        nb = nbformat.read(str(executed), as_version=4)
        static_page(nb)
        body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    except Exception as err:  # a missing template or a malformed output must not cost the figures
        print(f"      could not render {executed.name} to HTML ({last_error_line(err)}); gallery links skip it")
        return None
    from sinklib.core.paths import atomic_write_bytes

    body = re.sub(r"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>", "", body)
    atomic_write_bytes(target, body.encode())
    return target


def write_takeaways(executed: Path, target: Path) -> Path:
    """The executed notebook's rendered "What we saw" paragraphs (:func:`sinklib.core.takeaways.collect`) as JSON
    beside its figures: the gallery shows what this run found, not what a notebook's source once said.
    ``kernel_env``: the variables its kernel inherited that change which kernels run and how they split -- the
    OpenMP / MKL threads (:func:`thread_env`), ``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``, ``MKL_CBWR`` (None:
    unset, the library's default) -- which ``make verify`` compares with the reference's; ``seed``: the seed papermill
    gave the notebook (the reference is made with seed 0). A takeaway's figures are those the run drew (PNGs beside
    ``target``)."""
    from sinklib.core.results import write_json
    from sinklib.core.takeaways import collect

    kernel_env = {k: os.environ.get(k) for k in (*thread_env(1), *KERNEL_ISA_VARIABLES)}
    nb = json.loads(executed.read_text(encoding="utf-8"))
    seed = nb.get("metadata", {}).get("papermill", {}).get("parameters", {}).get("seed")
    # a figure a cell names but this run did not draw (a section skipped in this profile) is no figure it read
    drawn = [t | {"figures": [f for f in t["figures"] if (target.parent / f"{f}.png").exists()]} for t in collect(nb)]
    return write_json(target, {"notebook": executed.stem, "kernel_env": kernel_env, "seed": seed,
                               "takeaways": drawn})
