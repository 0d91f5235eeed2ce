"""A figure's layout, checked: texts that collide, texts under a legend, legends over data.

:func:`save <sinklib.core.plotting.save>` writes ``NAME.layout.txt`` beside a figure when :func:`layout_problems`
finds anything, and the notebook smoke test fails on such a file: a figure must show its point at a glance.
"""

from __future__ import annotations

import matplotlib.collections
import matplotlib.patches
import matplotlib.text
import numpy as np
from matplotlib.figure import Figure


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
