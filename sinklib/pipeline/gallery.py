"""``figures/index.html``: the reproduction scorecard on top, then one section per notebook.

The page is built only from what ``make figures`` left on disk, so it can be rebuilt at any time
(``python -m sinklib gallery``):

- a header: the profile(s), the commit and the date the page was built, the models the notebooks ran on, and a
  one-line table of contents;
- the scorecard (:mod:`sinklib.reproduction.scorecard`): counts and the per-paper summary -- on the first screen of a
  1,400 px window --, every claim with its verdict, values and caveat behind one click (a closed ``<details>``), and
  ``90_scorecard``'s figures;
- per notebook (``figures/<stem>/``): its question (the notebook's title and first paragraph, read from
  ``notebooks/<stem>.ipynb``), its claims, every figure with its title (``NAME.title.txt``, written by
  :func:`sinklib.core.plotting.save`) and caption (``NAME.txt``), each "What we saw" takeaway right after the figures
  it reads (``takeaways.json``: see :func:`takeaway_blocks`), its tables (``*.md``, else ``*.csv``), its headline
  numbers with nested values flattened, the time it took, and a link to the executed notebook rendered to HTML
  (``<stem>.html``, written by the runner);
- the benchmark plots and tables (``figures/benchmarks/``, written by ``make benchmark``).

This module only gathers that data; the page's HTML and CSS are the Jinja2 templates in ``templates/``
(``gallery.html.j2`` and the sections' macros in ``gallery_sections.html.j2``), rendered with autoescape on: text is
escaped there, and what is already HTML -- math and Markdown (:func:`with_math`), pandas' tables -- is marked
:class:`~markupsafe.Markup` explicitly. Nothing on the page loads from the network: TeX in titles, takeaways,
captions and claims (``$\\alpha_0^{l,h}$``) is drawn at build time as inline SVG (:mod:`.gallery_math`). Tables are
laid out at the page's width and their cells wrap, so nothing needs horizontal scrolling.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import jinja2
from markupsafe import Markup

from sinklib.core.paths import NOTEBOOK_DIR, atomic_write_bytes
from sinklib.pipeline.gallery_math import tex_svg, with_math

__all__ = ["build_gallery", "flatten", "models_used", "notebook_section", "notebook_text", "run_takeaways",
           "scorecard_section", "benchmark_section", "takeaway_blocks", "tex_svg", "value_lines", "with_math"]

SCORECARD = "90_scorecard"
BENCHMARKS = "benchmarks"
STORY = {"01": "using sinks", "02": "why they form", "03": "removing them", "10": "dense LLMs", "11": "MoE",
         "12": "multimodal LLMs", "13": "ViTs"}  # the start line's "then": what each notebook after 00 is for
MAX_LIST = 12  # longer lists in the headline table are shown as their first values and a count


# ---------------------------------------------------------------- small pieces
def _fmt(value: object) -> str:
    """A scalar in a table cell: floats to 4 significant digits, None as nothing (containers: :func:`_inline`)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list | tuple):
        return _inline(value)
    return "" if value is None else str(value)


def flatten(obj: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    """Nested headline values as (dotted key, leaf) rows: dictionaries open into ``a.b`` keys, lists of scalars stay
    one row (the gallery shows the first :data:`MAX_LIST` values and the count), lists of dictionaries open by index
    (``scorecard[0].claim``)."""
    if isinstance(obj, dict):
        if not obj and prefix:
            yield prefix, "{}"
        for key, val in obj.items():
            yield from flatten(val, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(obj, list) and any(isinstance(v, dict | list) for v in obj):
        for i, val in enumerate(obj):
            yield from flatten(val, f"{prefix}[{i}]")
    else:
        yield prefix, obj


def _leaf(value: object) -> str:
    if isinstance(value, list):
        shown = ", ".join(_fmt(v) for v in value[:MAX_LIST])
        return f"[{shown}{f', ... ({len(value)} values)' if len(value) > MAX_LIST else ''}]"
    return _fmt(value)


MAX_LINES = 8  # a published / measured value shows at most this many "key: value" lines, then a count
MAX_LINE = 160  # characters of one such line


def _inline(value: object) -> str:
    """A value on one line: floats to 4 significant digits, lists as ``[a, b, ...]`` (the first :data:`MAX_LIST`
    and a count), dictionaries as ``key value · key value`` (nested ones in parentheses)."""
    if isinstance(value, dict):
        items = [f"{k} {_inline(v)}" for k, v in value.items()]
        return " · ".join(items) if items else "{}"
    if isinstance(value, list | tuple):
        return _leaf([_inline(v) if isinstance(v, dict | list | tuple) else v for v in value])
    return _fmt(value)


def _with_unit(text: str, quantity) -> str:
    """A number with its declared unit: "2.5x" (a ratio), "0.31 nats", "layer 3" (an identity), "0.4 (fraction of
    heads)" (a unit of several words); no quantity or no unit, no change."""
    unit = getattr(quantity, "unit", "")
    if not unit:
        return text
    if unit == "x":
        return f"{text}x"
    if getattr(quantity, "kind", "") == "identity":
        return f"{unit} {text}"
    return f"{text} ({unit})" if " " in unit or unit in ("fraction", "share") else f"{text} {unit}"


def value_lines(value: object, quantities: dict | None = None) -> list[str]:
    """A published or measured value as short plain-text lines: a dictionary one ``key: value`` line per key (its
    nested values inline, :func:`_inline`), anything else one line; at most :data:`MAX_LINES` lines of at most
    :data:`MAX_LINE` characters, the rest counted ("... 3 more"). With ``quantities`` (a claim's declarations,
    :mod:`sinklib.core.quantities`), a number at the top level carries its unit ("2.5x", "0.31 nats"). An empty
    value says so ("none")."""
    from sinklib.core import quantities as q

    def unit(key: str, v: object):
        if not quantities or isinstance(v, bool) or not isinstance(v, int | float):
            return None
        return q.declared(quantities, "measured", key, v)

    if isinstance(value, dict) and value:
        lines = [f"{k}: {_with_unit(_inline(v), unit(str(k), v))}" for k, v in value.items()]
    elif isinstance(value, dict | list | tuple) and not value:
        lines = ["none"]
    else:
        lines = [_with_unit(_inline(value), unit("", value))] if value not in (None, "") else []
    lines = [line if len(line) <= MAX_LINE else line[:MAX_LINE - 4] + " ..." for line in lines]
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES - 1], f"... {len(lines) - MAX_LINES + 1} more"]
    return lines


def _verdict_class(verdict: str) -> str:
    return verdict.lower().replace(" ", "-")


def _commit(repo: Path) -> str:
    """The short commit of ``repo`` with ``-dirty`` when the work tree has changes; "unknown" outside git."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "")


# ---------------------------------------------------------------- what a notebook says about itself
def notebook_text(path: Path) -> dict:
    """From a notebook's markdown cells: its ``title`` (the first ``# `` heading), its ``question`` (the paragraph
    after it) and ``saw``: (section heading, paragraph) for every paragraph that starts with "**What we saw"."""
    out = {"title": path.stem, "question": "", "saw": []}
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return out
    heading = ""
    for cell in cells:
        if cell.get("cell_type") != "markdown":
            continue
        text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        for para in (p.strip() for p in text.split("\n\n")):
            if para.startswith("# ") and out["title"] == path.stem:
                lines = para.splitlines()
                out["title"] = lines[0][2:].strip()
                rest = "\n".join(lines[1:]).strip()
                out["question"] = out["question"] or rest
            elif para.startswith("## ") or para.startswith("### "):
                heading = para.splitlines()[0].lstrip("#").strip()
            elif para.startswith("**What we saw"):
                out["saw"].append((heading, para))
            elif out["title"] != path.stem and not out["question"] and not para.startswith("#"):
                out["question"] = para
    return out


def _read_json(path: Path) -> dict | None:
    """The JSON object in ``path``; None when it is missing, unreadable (a folder, not UTF-8, not JSON) or not an
    object -- the gallery then shows the notebook without it."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_takeaways(folder: Path) -> list[tuple[str, str]] | None:
    """(section, paragraph) for every "What we saw" paragraph the run rendered (``takeaways.json``, written by the
    runner from the executed notebook); None when the folder has none (a run older than rendered takeaways)."""
    data = _read_json(folder / "takeaways.json")
    return None if data is None else [(t["section"], t["markdown"]) for t in data.get("takeaways", [])]


def takeaway_blocks(folder: Path) -> list[tuple[list[Path], tuple[str, str] | None]] | None:
    """The notebook's figures and takeaways in reading order, as (figures, (section, paragraph)) blocks: each takeaway
    after the figures saved since the previous one (its ``"figures"`` in ``takeaways.json``, written by
    :func:`sinklib.core.takeaways.collect`; those that exist as PNGs, each figure once), then (figures no takeaway
    names, None). A takeaway without figures of its own follows the previous block. None when ``takeaways.json`` is
    missing or older than the ``"figures"`` lists: the page then shows every takeaway, then every figure."""
    data = _read_json(folder / "takeaways.json")
    records = data.get("takeaways", []) if data else []
    if not any("figures" in t for t in records):
        return None
    pngs = {p.stem: p for p in sorted(folder.glob("*.png"))}
    blocks, shown = [], set()
    for t in records:
        own = [s for s in dict.fromkeys(t.get("figures", [])) if s in pngs and s not in shown]
        shown.update(own)
        blocks.append(([pngs[s] for s in own], (t["section"], t["markdown"])))
    rest = [p for s, p in pngs.items() if s not in shown]
    return blocks + ([(rest, None)] if rest else [])


# ---------------------------------------------------------------- the data each section shows
@functools.cache
def _templates() -> jinja2.Environment:
    """The Jinja2 environment of ``templates/`` (package data): autoescape on, undefined names an error; the filters
    ``math`` / ``markdown`` (:func:`with_math`), ``value_lines`` and ``verdict_class``."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("sinklib.pipeline", "templates"), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(math=with_math, markdown=functools.partial(with_math, markdown=True), value_lines=value_lines,
                       verdict_class=_verdict_class)
    return env


def _macro(name: str):
    return getattr(_templates().get_template("gallery_sections.html.j2").module, name)


def _figure(png: Path) -> dict:
    """A figure's id, image, title (``NAME.title.txt``, else its name: fig03_sink-rates -> "Sink rates"), caption
    (``NAME.txt``) and PDF (None when there is none)."""
    folder, title_file, cap, pdf = png.parent.name, png.with_suffix(".title.txt"), png.with_suffix(".txt"), png.with_suffix(".pdf")
    title = title_file.read_text(encoding="utf-8").strip() if title_file.exists() else ""
    if not title:
        words = png.stem.split("_", 1)[-1].replace("-", " ").replace("_", " ")
        title = words[:1].upper() + words[1:]
    return {"id": f"{folder}-{png.stem}", "src": f"{folder}/{png.name}", "title": title,
            "caption": cap.read_text(encoding="utf-8").strip() if cap.exists() else "",
            "pdf": f"{folder}/{pdf.name}" if pdf.exists() else None}


def _tables(folder: Path) -> list[dict]:
    """Each ``*.md`` table rendered (with a link to its file), then each ``*.csv`` that has no ``.md`` twin."""
    out = [{"name": md.stem, "html": with_math(md.read_text(encoding="utf-8"), markdown=True), "file": md.name,
            "href": f"{folder.name}/{md.name}"} for md in sorted(folder.glob("*.md"))]
    for csv in sorted(folder.glob("*.csv")):
        if not csv.with_suffix(".md").exists():
            import pandas as pd

            table = pd.read_csv(csv).to_html(index=False, float_format="{:.4g}".format)  # pandas escapes the cells
            out.append({"name": csv.stem, "html": Markup(table), "file": None, "href": None})
    return out


def _notebook(folder: Path, notebook_dir: Path) -> dict:
    """What :func:`notebook_section` shows of one notebook."""
    from sinklib.core import claims_file as claims_io
    from sinklib.core.claims import control_summary, draw_summary

    text = notebook_text(notebook_dir / f"{folder.name}.ipynb")
    saw = run_takeaways(folder)  # what this run found, rendered from its results; else the notebook's source
    headline = _read_json(folder / "headline.json") or {}
    try:
        claims, error = claims_io.load(folder / "claims.json") if (folder / "claims.json").exists() else [], None
    except ValueError as err:  # written by another sinklib version: say so, show the figures anyway
        claims, error = [], str(err)
    claims = [c.without_noise() for c in claims]  # a rule that holds on noise is not shown as holding
    blocks = takeaway_blocks(folder)
    return {"stem": folder.name, "title": text["title"], "question": text["question"],
            "model": headline.get("label") or headline.get("model"), "profile": headline.get("profile"),
            "seconds": float(headline["seconds"]) if "seconds" in headline else None,
            "executed": (folder / f"{folder.name}.html").exists(), "claims_json": (folder / "claims.json").exists(),
            "claims_error": error, "held": sum(c.holds is True for c in claims),
            "claims": [(c, (f"draws: {draw_summary(c.draws)}; " if c.draws else "")
                        + control_summary(c.control, c.at_init, c.control_measured)) for c in claims],
            "paired": blocks is not None, "saw": text["saw"] if saw is None else saw,
            "blocks": [([_figure(p) for p in figs], t) for figs, t in blocks or []],
            "figures": [_figure(p) for p in sorted(folder.glob("*.png"))], "tables": _tables(folder),
            "headline": [(k, _leaf(v)) for k, v in flatten(headline)]}


def notebook_section(folder: Path, notebook_dir: Path) -> str:
    """One notebook's section (see the module docstring)."""
    return _macro("notebook_section")(_notebook(folder, notebook_dir))


def _scorecard(root: Path) -> dict | None:
    """What :func:`scorecard_section` shows; None before any ``claims.json``. Counted in one vocabulary
    (:mod:`sinklib.reproduction.findings`): a claim is a paper's statement, a test is a claim judged on one model."""
    from sinklib.reproduction import findings, scorecard

    every = scorecard.collect(root)
    if not every:
        return None
    summary = scorecard.to_json(every)
    rows = scorecard.distinct(every)  # each claim and model once; "also judged in" names the other notebooks
    papers = [r for r in rows if r.paper_claim]
    executed = root / SCORECARD / f"{SCORECARD}.html"
    by_paper = [p | {"short": findings.short_paper(p["paper"]),
                     "bar": [(v, 100 * p[v] / p["tested"]) for v in scorecard.VERDICTS if p[v]]}
                for p in summary["by_paper"]]
    contradicting = [f"{findings.short_paper(r.paper)}: {r.statement} ({findings.short_model(r.model)})"
                     for r in rows if r.at_init is False and r.control is True]
    return {"rows": [(r, scorecard.what_would_settle(r)) for r in rows], "counts": summary["counts"],
            "by_paper": by_paper, "verdicts": scorecard.VERDICTS, "tests": len(papers),
            "claims": len({scorecard.base_id(r.id) for r in papers}), "papers": len(by_paper),
            "notebooks": len({r.notebook for r in rows}), "found": findings.found(every),
            "not_counted": summary.get("not_paper_claims") or {}, "contradicting": contradicting,
            "stand_ins": sum(r.kind == "stand-in" for r in rows),
            "trained_here": sum(r.kind == "trained here" for r in rows),
            "need_gpu": sum(r.needs_gpu or r.kind == "stand-in" for r in rows),
            "figures": [_figure(p) for p in sorted((root / SCORECARD).glob("*.png"))],
            "executed": f"{SCORECARD}/{executed.name}" if executed.exists() else None}


def scorecard_section(root: Path) -> str:
    """The scorecard on top: the counts and the per-paper summary (the first screen), every claim behind one click
    (a closed ``<details>``), then ``90_scorecard``'s figures."""
    return _macro("scorecard_section")(_scorecard(root))


def _benchmarks(root: Path) -> dict:
    folder = root / BENCHMARKS
    if not folder.is_dir():
        return {"figures": [], "tables": []}
    return {"figures": [_figure(p) for p in sorted(folder.glob("*.png"))], "tables": _tables(folder)}


def benchmark_section(root: Path) -> str:
    """The benchmarks' figures and tables; empty (no section at all) when ``make benchmark`` has not run here."""
    return _macro("benchmark_section")(_benchmarks(root)).strip()


# ---------------------------------------------------------------- the page
def models_used(root: Path, folders: list[Path], headlines: list[dict]) -> list[tuple[str, str]]:
    """Every model the notebooks ran on (headline labels and every claim's model -- stand-ins and models trained here
    included, random-weight controls left out), sorted, each as (label, how its weights were made where the registry
    knows, e.g. "Q4_1 GGUF dequantised to float32" for the CPU profile's language models, else "")."""
    from sinklib.core import claims_file as claims_io
    from sinklib.models.registry import REGISTRY

    labels = {h.get("label") or h.get("model") for h in headlines if h.get("label") or h.get("model")}
    for folder in folders:
        if (folder / "claims.json").exists():
            try:
                labels |= {c.model for c in claims_io.load(folder / "claims.json") if c.model}
            except (ValueError, TypeError):  # an older schema: its headline label is enough
                pass
    labels = {m for m in labels if "random weights" not in m}  # controls are not models the notebooks study
    how = {spec.label: spec.description.split(";")[-1].strip() for spec in REGISTRY.values() if spec.source == "gguf"}
    return [(m, how.get(m, "")) for m in sorted(labels)]


def build_gallery(figures_dir: str | Path = "figures", notebook_dir: Path = NOTEBOOK_DIR) -> Path:
    """Write ``<figures_dir>/index.html`` (see the module docstring) and return its path."""
    from sinklib.pipeline.publish import require_folder
    from sinklib.reproduction.figures_folder import leftovers

    root = Path(figures_dir)
    require_folder(root, "figures folder")
    root.mkdir(parents=True, exist_ok=True)
    for line in leftovers(root):
        print(f"note: {line}")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                     and p.name not in (SCORECARD, BENCHMARKS)
                     and ((p / "headline.json").exists() or any(p.glob("*.png"))))
    headlines = [h for h in (_read_json(f / "headline.json") for f in folders) if h is not None]
    notebooks = [_notebook(f, notebook_dir) for f in folders]
    scorecard, benchmarks = _scorecard(root), _benchmarks(root)
    toc = [("scorecard", "Scorecard")] + ([("every-claim-table", "Every claim")] if scorecard else [])
    toc += [(nb["stem"], nb["title"]) for nb in notebooks]
    toc += [(BENCHMARKS, "Benchmarks")] if benchmarks["figures"] or benchmarks["tables"] else []
    stems = [nb["stem"] for nb in notebooks]
    start = ({"first": stems[0], "title": notebooks[0]["title"],
              "then": [(stem, STORY.get(stem[:2], "")) for stem in stems[1:] if stem[:2] in STORY]}
             if stems and stems[0].startswith("00") else None)
    page = _templates().get_template("gallery.html.j2").render(
        profiles=sorted({h["profile"] for h in headlines if h.get("profile")}),
        commit=_commit(notebook_dir.parent), built=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        seconds=sum(float(h.get("seconds", 0)) for h in headlines), models=models_used(root, folders, headlines),
        toc=toc, start=start, scorecard=scorecard, notebooks=notebooks, benchmarks=benchmarks)
    out = root / "index.html"
    atomic_write_bytes(out, page.encode())
    return out
