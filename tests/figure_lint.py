"""Test tooling: a figure's layout and caption, checked -- texts that collide, texts under a legend, legends over
data (:func:`layout_problems`); panels and line or marker styles that neither the caption, a legend nor the figure's
own text explains (:func:`caption_problems`).

The notebook smoke tests give every kernel :func:`install` (through :mod:`tests.kernel_startup`): each figure that
``sinklib.core.plotting.save`` writes is checked, and its problems go to ``NAME.layout.txt`` under
``$SINKLIB_FIGURE_REPORTS/<notebook>/`` (never among the figures); the smoke test fails on any such report, so a
figure must show its point at a glance. The shipped ``save`` checks nothing.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

import matplotlib.collections
import matplotlib.colors
import matplotlib.lines
import matplotlib.markers
import matplotlib.patches
import matplotlib.text
import numpy as np
from matplotlib.figure import Figure

REPORTS = "SINKLIB_FIGURE_REPORTS"  # the folder the kernels write figure reports to (one sub-folder per notebook)


def _texts(fig: Figure) -> list:
    """The visible, non-empty texts a reader sees, outside legends: figure titles and labels, axes titles, axis
    labels, the tick labels inside each axis's view (matplotlib keeps undrawn ones beyond it) and annotations."""
    out = [getattr(fig, name, None) for name in ("_suptitle", "_supxlabel", "_supylabel")] + list(fig.texts)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        out += [ax.title, ax._left_title, ax._right_title, *ax.texts]
        if not ax.axison:
            continue
        for axis in (ax.xaxis, ax.yaxis):
            out.append(axis.label)
            lo, hi = sorted(axis.get_view_interval())
            slack = 1e-9 * max(abs(lo), abs(hi), 1.0)
            for ticks in (axis.get_major_ticks(), axis.get_minor_ticks()):
                for tick in ticks:
                    if lo - slack <= tick.get_loc() <= hi + slack:
                        out += [tick.label1, tick.label2]
    seen: set[int] = set()
    keep = []
    for t in out:  # the figure title is also in fig.texts: each text once
        if t is not None and id(t) not in seen and t.get_visible() and t.get_text().strip() and t.get_alpha() != 0:
            seen.add(id(t))
            keep.append(t)
    return keep


def layout_problems(fig: Figure, tolerance: float = 2.0) -> list[str]:
    """What a reader would trip over, as far as matplotlib can tell after drawing: texts that overlap each other
    (tick labels, titles, annotations) and legends drawn over data (line vertices, scatter points or bar tops inside
    a legend's box). Returns one line per problem; empty when the figure is clean. ``tolerance``: pixels of overlap
    ignored (anti-aliasing)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems = []
    boxes = []
    for t in _texts(fig):
        bb = t.get_window_extent(renderer)
        if bb.width > 0 and bb.height > 0:
            boxes.append((t, bb))
    for i, (t1, b1) in enumerate(boxes):
        for t2, b2 in boxes[i + 1:]:
            w = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
            h = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
            if w > tolerance and h > tolerance:
                problems.append(f"text {t1.get_text()[:30]!r} overlaps {t2.get_text()[:30]!r}")
    for legend in [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]:
        lb = legend.get_window_extent(renderer)
        for t, b in boxes:  # a title or label running under a legend (e.g. a long title beside an outside legend)
            if min(lb.x1, b.x1) - max(lb.x0, b.x0) > tolerance and min(lb.y1, b.y1) - max(lb.y0, b.y0) > tolerance:
                problems.append(f"text {t.get_text()[:30]!r} runs under a legend")
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not legend.get_visible():
            continue
        lb = legend.get_window_extent(renderer)
        ab = ax.get_window_extent(renderer)
        if lb.x1 <= ab.x0 or lb.x0 >= ab.x1 or lb.y1 <= ab.y0 or lb.y0 >= ab.y1:
            continue  # a legend beside the axes covers nothing
        pts = []
        for line in ax.get_lines():
            if line.get_visible() and len(line.get_xydata()):
                pts.append(line.get_transform().transform(line.get_xydata()))
        for coll in ax.collections:  # scatter points (a fill_between band has no offsets worth testing)
            offsets = np.asarray(coll.get_offsets())
            if coll.get_visible() and isinstance(coll, matplotlib.collections.PathCollection) and len(offsets):
                pts.append(coll.get_offset_transform().transform(offsets))
        for patch in ax.patches:
            if isinstance(patch, matplotlib.patches.Rectangle) and patch.get_visible():
                x, y = patch.get_x() + patch.get_width() / 2, patch.get_y() + patch.get_height()
                pts.append(patch.get_transform().transform([(x, y)]))
        inside = 0
        for p in pts:
            p = p[np.isfinite(p).all(axis=1)]
            inside += int(((p[:, 0] > lb.x0) & (p[:, 0] < lb.x1) & (p[:, 1] > lb.y0) & (p[:, 1] < lb.y1)).sum())
        if inside:
            problems.append(f"legend of {ax.get_title()[:40]!r} covers {inside} data point(s)")
    return problems


# the words a reader is told a style by: caption, legend or the figure's own text must use one of them
LINE_STYLE_WORDS = {"dashed": ("dashed", "dash"), "dotted": ("dotted", "dots"), "dashdot": ("dash-dot", "dash-dotted",
                                                                                            "dashdot")}
MARKER_WORDS = {"*": ("star",), "D": ("diamond",), "d": ("diamond",), "^": ("triangle",), "v": ("triangle",),
                "<": ("triangle",), ">": ("triangle",), "s": ("square",), "x": ("cross", "x"), "X": ("cross", "x"),
                "+": ("plus", "cross", "+"), "P": ("plus", "cross"), "p": ("pentagon",), "h": ("hexagon",),
                "H": ("hexagon",), "o": ("circle", "dot", "point", "marker"), ".": ("dot", "point", "marker")}
_PANEL = re.compile(r"^\(([a-z])\)")


def _line_style(line: matplotlib.lines.Line2D) -> str | None:
    """"dashed" / "dotted" / "dashdot" for a drawn non-solid line, None for a solid or invisible one."""
    style = line.get_linestyle()
    return {"--": "dashed", ":": "dotted", "-.": "dashdot"}.get(style) if len(line.get_xydata()) else None


def _marker_of(artist) -> str | None:
    """The marker code of a line's markers or a scatter's points (None: no markers)."""
    if isinstance(artist, matplotlib.lines.Line2D):
        marker = artist.get_marker()
        return None if marker in (None, "None", "none", "", " ") or not len(artist.get_xydata()) else str(marker)
    if isinstance(artist, matplotlib.collections.PathCollection) and len(artist.get_offsets()):
        paths = artist.get_paths()
        for code in MARKER_WORDS:  # a scatter keeps paths, not codes: match the marker's path
            ref = matplotlib.markers.MarkerStyle(code)
            ref_path = ref.get_path().transformed(ref.get_transform())
            if paths and len(paths[0].vertices) == len(ref_path.vertices) and np.allclose(
                    paths[0].vertices / max(np.abs(paths[0].vertices).max(), 1e-9),
                    ref_path.vertices / max(np.abs(ref_path.vertices).max(), 1e-9), atol=1e-3):
                return code
        return "o"
    return None


def _legend_labels(fig: Figure) -> set[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return {t.get_text() for legend in legends for t in legend.get_texts()}


def _look(artist) -> tuple | None:
    """A line's look -- colour, line style, marker -- by which a legend entry explains every line drawn like it
    (e.g. the same variant's curve in a second panel); None for anything else."""
    if not isinstance(artist, matplotlib.lines.Line2D):
        return None
    return (matplotlib.colors.to_hex(artist.get_color()), artist.get_linestyle(), str(artist.get_marker()))


def _legend_looks(fig: Figure) -> set[tuple]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    return {look for legend in legends for h in legend.legend_handles if (look := _look(h)) is not None}


def caption_problems(fig: Figure, caption: str) -> list[str]:
    """What the caption leaves unexplained: a panel "(x)" drawn in an axes title or text but not named in the
    caption; a dashed / dotted line or a marker (star, diamond, triangle, ...) that no legend entry labels or looks
    like (same colour, line style and marker) and whose
    style word appears neither in the caption nor in the figure's own texts (axis labels, titles, annotations).
    Returns one line per problem (empty: every panel and style is told)."""
    problems = []
    said = caption.lower()
    texts = " ".join(t.get_text() for t in _texts(fig)).lower()
    legend, looks = _legend_labels(fig), _legend_looks(fig)
    panels = sorted({m.group(1) for t in _texts(fig) if (m := _PANEL.match(t.get_text().strip()))})
    problems += [f"panel ({p}) is not named in the caption" for p in panels if f"({p})" not in caption]
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for artist in [*ax.get_lines(), *ax.collections]:
            if not artist.get_visible() or artist.get_label() in legend or _look(artist) in looks:
                continue
            wanted = []
            if isinstance(artist, matplotlib.lines.Line2D) and (style := _line_style(artist)):
                wanted.append((style + " line", LINE_STYLE_WORDS[style]))
            if (marker := _marker_of(artist)) and marker in MARKER_WORDS:
                wanted.append((f"marker {marker!r}", MARKER_WORDS[marker]))
            for what, words in wanted:
                if not any(w in said or w in texts for w in words):
                    problems.append(f"{what} in {ax.get_title()[:40]!r} is explained by no caption word "
                                    f"({' / '.join(words)}), legend entry or label")
    return sorted(set(problems))


def report(folder: Path, name: str, problems: list[str]) -> Path | None:
    """Write ``folder/NAME.layout.txt`` with ``problems`` (a clean figure removes an old report); its path or None."""
    path = Path(folder) / f"{name}.layout.txt"
    if not problems:
        path.unlink(missing_ok=True)
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(problems) + "\n", encoding="utf-8")
    return path


def install() -> None:
    """Check every figure ``sinklib.core.plotting.save`` writes in this process (a notebook kernel): its layout and
    caption problems go to ``$SINKLIB_FIGURE_REPORTS/<the figure's folder name>/NAME.layout.txt``."""
    from sinklib.core import plotting

    save = plotting.save

    @functools.wraps(save)
    def checked(fig: Figure, path, caption: str = "", *args, **kwargs):
        written = save(fig, path, caption, *args, **kwargs)
        path = Path(path)
        report(Path(os.environ[REPORTS]) / path.parent.name, path.name,
               layout_problems(fig) + (caption_problems(fig, caption) if caption else []))
        return written

    plotting.save = checked
