"""When each notebook runs and how long it should take: the order that finishes soonest on ``jobs`` workers
(:func:`best_order`), the progress line with its estimate, the budgets and the summary table of a run
(:func:`summary_table`), how many notebooks run at once (:func:`default_jobs`) and on which GPUs (:func:`gpu_slots`),
and which cannot run at all (:func:`unreadable_notebooks`: a truncated or conflicted ``.ipynb``).
"""

from __future__ import annotations

import heapq
import itertools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sinklib.pipeline.executed import last_error_line


@dataclass
class NotebookResult:
    name: str
    ok: bool
    seconds: float
    message: str = ""



# Each notebook's time budget on the CPU profile once caches are warm is its protocol's ``cpu_budget_s`` (all
# notebooks <= 12 minutes on the 2-core machine; the summary prints each notebook's time against it); every notebook
# together from empty caches (make figures, its setup included) has <= 30 minutes.
COLD_BUDGET_S = 30 * 60


def caches_empty(cache: Path) -> bool:
    """Whether ``cache`` (``SINKLIB_CACHE``) holds no file yet: the run converts, builds and trains everything, so the
    summary judges it against :data:`COLD_BUDGET_S`, not the warm budget."""
    return not Path(cache).is_dir() or not any(p.is_file() for p in Path(cache).rglob("*"))


def summary_table(results: list[NotebookResult], profile: str = "cpu", wall: float | None = None,
                  jobs: int = 1, cold: bool = False) -> str:
    """Notebook, status, seconds and -- on the CPU profile -- the budget and whether it was kept; with ``wall`` the
    run's wall-clock time (notebooks ran ``jobs`` at a time) against the whole budget: the warm one (the notebooks'
    protocols' ``cpu_budget_s`` summed), or with ``cold`` (the run started from empty caches) :data:`COLD_BUDGET_S`."""
    from sinklib.pipeline.protocols import protocol

    judged = profile == "cpu" and jobs == 1  # two at a time: judge the wall clock
    lines = [f"{'notebook':<22}{'status':<8}{'seconds':>9}{'budget':>8}  note", "-" * 70]
    for r in results:
        budget = protocol(r.name).cpu_budget_s if judged else None
        over = f"over budget ({r.seconds / budget:.1f}x) " if budget and r.ok and r.seconds > budget else ""
        lines.append(f"{r.name:<22}{'ok' if r.ok else 'FAILED':<8}{r.seconds:>9.1f}"
                     f"{budget if budget else '-':>8}  {over}{r.message}")
    total = sum(r.seconds for r in results)
    failed = sum(not r.ok for r in results)
    lines.append("-" * 70)
    warm_budget = sum(protocol(r.name).cpu_budget_s or 0 for r in results)
    in_budget = (COLD_BUDGET_S if cold else warm_budget) if profile == "cpu" else 0
    lines.append(f"{len(results)} notebooks, {failed} failed, {total:.1f} s of notebook time"
                 + (f" ({jobs} at a time)" if jobs > 1 else ""))
    if wall is not None:
        caches = "from empty caches, setup not counted here" if cold else "with warm caches"
        verdict = (f" -- budget {in_budget:,} s {caches}: " + ("kept" if wall <= in_budget else
                                                                      f"over ({wall / in_budget:.1f}x)")
                   if in_budget else "")
        lines.append(f"wall clock {wall:.1f} s ({wall / 60:.1f} min){verdict}")
    return "\n".join(lines)


def last_seconds(figures_dir: Path, stem: str, profile: str) -> float | None:
    """How long ``stem`` took the last time it ran with ``profile`` here (its headline.json), if known. None also
    when that run read per-model results kept for other code (its ``kept_code``,
    :func:`~sinklib.pipeline.model_results.kept_code`): after a code change the notebook
    measures its models again, so its last (warm) time says nothing -- the caller falls back to the protocol's
    ``first_run_s``, and 10 starts first, not last."""
    try:
        headline = json.loads((Path(figures_dir) / stem / "headline.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if headline.get("profile") != profile or "seconds" not in headline:
        return None
    if headline.get("kept_code"):
        from sinklib.pipeline.model_results import kept_code

        if headline["kept_code"] != kept_code(stem):
            return None
    return float(headline["seconds"])


def progress(remaining: list[Path], figures_dir: Path, profile: str, elapsed: float, jobs: int = 1) -> str:
    """"elapsed 3.2 min, ~5.0 min to go": the estimate sums the last run times of the notebooks still to run, divided
    by the notebooks run at once. On the CPU profile a notebook never run here counts with its time from empty caches
    on the 2-core machine (its protocol's ``first_run_s``), and the estimate says how many it took from there; others
    are left out, and the estimate says so."""
    from sinklib.pipeline.protocols import protocol

    known = [last_seconds(figures_dir, b.stem, profile) for b in remaining]
    first = [protocol(b.stem).first_run_s if t is None and profile == "cpu" else None
             for b, t in zip(remaining, known)]
    estimate = (sum(t for t in known if t is not None) + sum(f for f in first if f is not None)) / jobs
    guessed = sum(f is not None for f in first)
    missing = sum(t is None and f is None for t, f in zip(known, first))
    notes = ([f"{guessed} from a first run on 2 cores"] if guessed else []) + (
        [f"+{missing} never timed here"] if missing else [])
    rest = f"~{estimate / 60:.1f} min to go" + (f" ({', '.join(notes)})" if notes else "")
    return f"-- elapsed {elapsed / 60:.1f} min, {rest}"


def default_jobs(profile: str) -> int:
    """Notebooks run at once by default: two on CPU profiles when there are two or more cores (each kernel with
    cores // 2 threads), one on the GPU profile (one device). Measured on the 2-core machine (CPU profile, warm
    caches): all notebooks in 1,097 s two at a time against 1,288 s one at a time with both threads -- token-by-token
    loops (streaming, decoding) cannot use a second thread, a second notebook can. Each notebook then takes longer
    on its own, so the summary judges the wall clock, not the notebooks."""
    return 2 if profile != "gpu" and (os.cpu_count() or 1) >= 2 else 1


def gpu_slots(profile: str, device: str, jobs: int) -> list[str]:
    """One CUDA device per notebook running at once: ``["cuda:0", ..., "cuda:{n-1}"]`` when the run is on CUDA with
    no index given (``device`` or the profile's), ``jobs`` > 1 and ``n = min(jobs, visible GPUs)`` > 1; else ``[]``
    (every notebook gets ``device`` as given, and a model larger than one GPU spreads over all of them,
    :func:`sinklib.models.load.device_map_for`)."""
    import torch

    from sinklib.pipeline.profiles import PROFILES

    wanted = (device or PROFILES[profile].device or "").lower()
    if wanted not in ("cuda", "auto") or jobs < 2 or not torch.cuda.is_available():
        return []
    n = min(jobs, torch.cuda.device_count())
    return [f"cuda:{i}" for i in range(n)] if n > 1 else []


def makespan(seconds: Sequence[float], jobs: int) -> float:
    """When the last of ``seconds`` (in this order) ends if each starts on the first of ``jobs`` workers to be free --
    what a pool of ``jobs`` threads does with a list of notebooks."""
    free = [0.0] * jobs
    for s in seconds:
        heapq.heapreplace(free, free[0] + s)
    return max(free)


def best_order(seconds: Sequence[float], jobs: int, exhaustive: int = 8) -> list[int]:
    """Indices of ``seconds`` in the order that finishes soonest on ``jobs`` workers (:func:`makespan`).

    Longest first (LPT) is within 4/3 of the best but can leave a worker idle at the end: [3, 3, 2, 2, 2] on 2 workers
    ends at 7 in that order, at 6 as [2, 3, 2, 3, 2] ({3, 3} on one worker, {2, 2, 2} on the other). Up to
    ``exhaustive`` items every order is tried (8! = 40,320 orders, well under a second); the first of the shortest in
    the permutations of the longest-first order is kept. More items: longest first."""
    lpt = sorted(range(len(seconds)), key=lambda i: -seconds[i])
    if jobs < 2 or len(seconds) > exhaustive:
        return lpt
    best, best_time = lpt, makespan([seconds[i] for i in lpt], jobs)
    for order in itertools.permutations(lpt):
        t = makespan([seconds[i] for i in order], jobs)
        if t < best_time - 1e-9:
            best, best_time = list(order), t
    return best


def order_notebooks(books: list[Path], figures_dir: Path, profile: str, jobs: int = 2) -> tuple[list[Path], list[Path]]:
    """(notebooks that can run side by side, in the order that finishes soonest by their last run's seconds, else
    their protocol's ``first_run_s`` -- the seconds each takes on the 2-core machine from empty caches, two at a time,
    measured in a fresh clone's make figures, so that in a first run 03's 24 trainings and 10's conversions start at
    once, not last (:func:`best_order`; a notebook never timed goes first); notebooks that read the others' results,
    run after them in their numbered order -- 90_scorecard)."""
    import papermill as pm

    from sinklib.pipeline.protocols import protocol

    last = [b for b in books if "figures_dir" in pm.inspect_notebook(str(b))]
    first = [b for b in books if b not in last]
    seconds = [last_seconds(figures_dir, b.stem, profile) or protocol(b.stem).first_run_s for b in first]
    unknown = [b for b, s in zip(first, seconds) if s is None]
    timed = [(b, s) for b, s in zip(first, seconds) if s is not None]
    order = best_order([s for _, s in timed], jobs)
    return unknown + [timed[i][0] for i in order], last


def unreadable_notebooks(books: list[Path]) -> dict[str, NotebookResult]:
    """stem -> a failed result naming the file, for each notebook nbformat cannot read (truncated, merge conflict
    markers): the run goes on without it. A ``.py`` twin edited after its ``.ipynb`` is a warning (the run executes
    the ``.ipynb``)."""
    import nbformat

    bad = {}
    for book in books:
        try:
            nb = nbformat.read(str(book), as_version=4)
        except Exception as err:  # NotJSONError, a JSON error, a missing field: one fault, several kinds
            bad[book.stem] = NotebookResult(book.stem, False, 0.0, f"{book} is not a readable notebook "
                                            f"({last_error_line(err)}); restore it (git checkout {book.name}) or "
                                            f"rebuild it from its twin (jupytext --sync {book.with_suffix('.py')})")
            continue
        stale = stale_twin(book, nb)
        if stale:
            print(f"warning: {stale}", flush=True)
    return bad


def stale_twin(book: Path, nb) -> str:
    """A sentence when ``book``'s jupytext ``.py`` twin is newer and its cells differ (the run executes the
    ``.ipynb``, not the edit), else ""."""
    twin = book.with_suffix(".py")
    if not twin.exists() or twin.stat().st_mtime <= book.stat().st_mtime:
        return ""
    import jupytext

    try:
        same = [c.source for c in jupytext.read(twin).cells] == [c.source for c in nb.cells]
    except Exception:  # a twin jupytext cannot read: the .ipynb runs, nothing to compare
        return ""
    return "" if same else (f"{twin.name} was edited after {book.name} and differs from it: this run executes "
                            f"{book.name} -- run jupytext --sync {twin} to run the edit")
