"""A static HTML gallery of every figure under ``figures/``, each with the caption saved beside it."""

from __future__ import annotations

import html
import json
from pathlib import Path

from sinklib.core.paths import atomic_write_bytes

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em} h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
figure{margin:1.5em 0} img{max-width:100%;border:1px solid #eee}
figcaption{font-size:.9em;color:#444;margin-top:.4em} code{background:#f4f4f4;padding:0 .2em}
table{border-collapse:collapse;font-size:.85em} td,th{border:1px solid #ddd;padding:.2em .5em;text-align:left}
"""


def _headline(folder: Path) -> str:
    """The notebook's headline JSON, shown as a small table of its scalar entries."""
    files = sorted(folder.glob("*.json"))
    if not files:
        return ""
    rows = []
    for f in files:
        data = json.loads(f.read_text())
        for key, val in data.items():
            if isinstance(val, str | int | float | bool) or val is None:
                shown = f"{val:.4g}" if isinstance(val, float) else str(val)
                rows.append(f"<tr><th>{html.escape(key)}</th><td>{html.escape(shown)}</td></tr>")
    link = ", ".join(f'<a href="{f.parent.name}/{f.name}">{f.name}</a>' for f in files)
    return f"<details><summary>headline numbers ({link})</summary><table>{''.join(rows)}</table></details>"


def build_gallery(figures_dir: str | Path = "figures") -> Path:
    """Write ``figures/index.html``: one section per notebook folder, every PNG with its ``.txt`` caption."""
    root = Path(figures_dir)
    root.mkdir(parents=True, exist_ok=True)
    parts = ["<!doctype html><meta charset='utf-8'><title>sinklib figures</title>", f"<style>{_CSS}</style>",
             "<h1>sinklib figures</h1><p>Regenerate with <code>make figures</code>; "
             "each section is one notebook in <code>notebooks/</code>.</p>"]
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        pngs = sorted(folder.glob("*.png"))
        if not pngs:
            continue
        parts.append(f"<h2 id='{folder.name}'>{html.escape(folder.name)}</h2>{_headline(folder)}")
        for png in pngs:
            cap = png.with_suffix(".txt")
            caption = html.escape(cap.read_text().strip()) if cap.exists() else ""
            pdf = png.with_suffix(".pdf")
            pdf_link = f' <a href="{folder.name}/{pdf.name}">[pdf]</a>' if pdf.exists() else ""
            parts.append(f"<figure><img src='{folder.name}/{png.name}' alt='{html.escape(png.stem)}'>"
                         f"<figcaption><b>{html.escape(png.stem)}</b>. {caption}{pdf_link}</figcaption></figure>")
    out = root / "index.html"
    atomic_write_bytes(out, "\n".join(parts).encode())
    return out
