"""Every drawn line of a figure in words, for a caption written from what was drawn (:func:`describe_drawn`):
the caption then names each line and marker as it is drawn, on any model. (The tests' lint of a figure's layout and
caption lives in ``tests/figure_lint.py``.)"""

from __future__ import annotations

import numpy as np
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

_MARKERS = {"o": ("a circle", "circles"), "s": ("a square", "squares"), "^": ("a triangle", "triangles"),
            "v": ("a down-triangle", "down-triangles"), "D": ("a diamond", "diamonds"), "*": ("a star", "stars"),
            "x": ("a cross", "crosses"), "+": ("a plus", "pluses"), ".": ("a dot", "dots"), "P": ("a plus", "pluses"),
            "X": ("a cross", "crosses"), "d": ("a diamond", "diamonds"), "<": ("a triangle", "triangles"),
            ">": ("a triangle", "triangles")}
_LINES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dotted"}
_GREYS = {to_hex(c) for c in ("grey", "dimgrey", "darkgrey", "lightgrey", "silver")}


def line_words(line: Line2D) -> str:
    """How one drawn line looks, in words, read off the artist: "dashed line, squares" (a line with markers),
    "solid line", "a star" (one marker, no line), "stars" (markers, no line)."""
    style = _LINES.get(line.get_linestyle())
    marker = line.get_marker()
    named = _MARKERS.get(marker) if isinstance(marker, str) else None
    mark = (named[0] if len(line.get_xdata()) == 1 else named[1]) if named else ""
    return ", ".join(w for w in (f"{style} line" if style else "", mark) if w)


def _reference_line(line: Line2D) -> str:
    """An unlabelled horizontal or vertical line (``axhline`` / ``axvline``): "dotted grey line at y = 1"."""
    style = _LINES.get(line.get_linestyle(), "")
    grey = " grey" if to_hex(line.get_color()) in _GREYS else ""
    xs, ys = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    if len(ys) >= 2 and np.all(ys == ys[0]):
        return f"{style}{grey} line at y = {ys[0]:g}".strip()
    if len(xs) >= 2 and np.all(xs == xs[0]):
        return f"{style}{grey} line at x = {xs[0]:g}".strip()
    return ""


def describe_drawn(fig: Figure) -> str:
    """Every line of ``fig`` in words, read off the artists that were drawn (so a caption cannot name a style the
    figure does not use): "label: style" for each labelled line, then each unlabelled reference line ("dotted grey
    line at y = 1"), joined by "; ". A figure of several panels prefixes each panel's part with its y-axis label."""
    axes = [ax for ax in fig.axes if ax.get_lines()]
    parts = []
    for ax in axes:
        items = [f"{ln.get_label()}: {line_words(ln)}" for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        items += [r for r in (_reference_line(ln) for ln in ax.get_lines() if ln.get_label().startswith("_")) if r]
        text = "; ".join(items)
        parts.append(f"panel '{ax.get_ylabel()}': {text}" if len(axes) > 1 else text)
    return "; ".join(parts)
