"""What the readers of a figures folder (scorecard, verify, gallery) may read: the visible notebook folders, and
what an interrupted publish (:mod:`sinklib.pipeline.publish`) left hidden."""

from __future__ import annotations

import re
from pathlib import Path

NOTEBOOK_FOLDER = re.compile(r"^\d\d_[A-Za-z0-9_]+$")  # 00_tour, 13_vit, ...: what a reader may read


def notebook_folders(figures_dir: Path) -> list[Path]:
    """The visible notebook folders (``NN_name``) of ``figures_dir``, in order: what readers may read."""
    figures_dir = Path(figures_dir)
    if not figures_dir.is_dir():
        return []
    return sorted(p for p in figures_dir.iterdir() if p.is_dir() and NOTEBOOK_FOLDER.match(p.name))


def leftovers(figures_dir: Path) -> list[str]:
    """One line per folder an interrupted publish left hidden (``.<nb>.old`` with no ``<nb>``)."""
    figures_dir = Path(figures_dir)
    if not figures_dir.is_dir():
        return []
    return [f"{old} is the last complete copy of {old.name[1:-4]}, hidden by an interrupted publish: the next make "
            f"figures puts it back (or rename it to {old.name[1:-4]})"
            for old in sorted(figures_dir.glob(".*.old")) if not (figures_dir / old.name[1:-4]).exists()]
