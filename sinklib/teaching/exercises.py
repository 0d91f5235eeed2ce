"""Exercise notebooks from their solutions: one source, two notebooks.

``notebooks/exercises/solutions/NN_name.py`` (py:percent) holds the worked solutions between ``# BEGIN SOLUTION`` and
``# END SOLUTION`` lines; :func:`write_exercises` writes ``notebooks/exercises/NN_name.py`` with each such block
replaced by a stub that raises ``NotImplementedError`` (indented like the block), and pairs both with ``.ipynb``
twins through jupytext. ``python -m sinklib exercises`` runs it; a test checks that the files on disk are in sync.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from sinklib.core.paths import NOTEBOOK_DIR

EXERCISE_DIR = NOTEBOOK_DIR / "exercises"
SOLUTION_DIR = EXERCISE_DIR / "solutions"
_BLOCK = re.compile(r"^(?P<indent>[ \t]*)# BEGIN SOLUTION\n.*?^[ \t]*# END SOLUTION\n", re.S | re.M)
STUB = "raise NotImplementedError  # your code here"
HEADER = ("# > Generated from `solutions/{name}` by `python -m sinklib exercises`: edit the solution file, then "
          "regenerate.\n")


SMOKE_ENV = "SINKLIB_EXERCISES_SMOKE"
SMOKE_TWINS = {"llava-standin": "llava-standin-smoke", "smollm2-moe": "smollm2-moe-smoke"}  # registry name -> twin


def try_it_model(name: str) -> str:
    """The registry model a solution's try-it cells load: ``name`` -- the stand-in ``make figures`` built -- or, when
    ``SINKLIB_EXERCISES_SMOKE=1``, its smoke-size twin (:data:`SMOKE_TWINS`, the same code on a stand-in built in
    seconds): how ``make test`` runs every try-it cell without building the full stand-ins for them alone."""
    return SMOKE_TWINS.get(name, name) if os.environ.get(SMOKE_ENV) == "1" else name


def strip_solutions(text: str) -> str:
    """Replace every ``# BEGIN SOLUTION`` ... ``# END SOLUTION`` block by a one-line stub at the block's indent.

    Raises ValueError when a BEGIN has no END (the block would otherwise leak into the exercise)."""
    if text.count("# BEGIN SOLUTION") != text.count("# END SOLUTION"):
        raise ValueError("unbalanced # BEGIN SOLUTION / # END SOLUTION markers")
    out = _BLOCK.sub(lambda m: f"{m['indent']}{STUB}\n", text)
    if "# BEGIN SOLUTION" in out:
        raise ValueError("a # BEGIN SOLUTION marker is not on its own line")
    return out


def exercise_text(solution: Path) -> str:
    """The exercise notebook's py:percent text for one solution file (a note on where it comes from first)."""
    text = strip_solutions(solution.read_text())
    first_cell_end = text.index("\n\n") if text.startswith("# %% [markdown]") else 0
    note = "#\n" + HEADER.format(name=solution.name)
    return text[:first_cell_end] + "\n" + note + text[first_cell_end:] if first_cell_end else text


def solution_files(solution_dir: Path = SOLUTION_DIR) -> list[Path]:
    return sorted(solution_dir.glob("[0-9][0-9]_*.py"))


def check_solutions(solutions: list[Path]) -> dict[str, tuple[bool, str]]:
    """Run each solution file as a script (its try-it cells on real models included) and call every
    ``check.<name>(<solution>)`` its source contains on the solution it names: {check name: (passed, message)}.

    ``python -m sinklib.teaching.exercises SOLUTION...`` prints this as JSON (the tests run it in a child process,
    beside the notebook runs)."""
    import runpy

    from sinklib.teaching import check

    results = {}
    for solution in solutions:
        names = runpy.run_path(str(solution))
        for name, arg in re.findall(r"^check\.(\w+)\((\w+)\)", Path(solution).read_text(), flags=re.M):
            result = check.ALL[name](names[arg], quiet=True)
            results[name] = (bool(result), result.message)
    return results


def write_exercises(solution_dir: Path = SOLUTION_DIR, exercise_dir: Path = EXERCISE_DIR,
                    notebooks: bool = True) -> list[Path]:
    """Write every exercise (``.py``, and its ``.ipynb`` twin and the solution's when ``notebooks``); return paths."""
    import jupytext

    written = []
    for solution in solution_files(solution_dir):
        target = exercise_dir / solution.name
        target.write_text(exercise_text(solution))
        written.append(target)
        if notebooks:
            for source in (solution, target):
                nb = jupytext.read(source, fmt="py:percent")
                nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
                for i, cell in enumerate(nb.cells):  # stable ids: regenerating an unchanged notebook changes nothing
                    cell["id"] = hashlib.sha1(f"{i}:{cell.source}".encode()).hexdigest()[:8]
                jupytext.write(nb, source.with_suffix(".ipynb"))
    return written


if __name__ == "__main__":
    import json
    import sys

    print(json.dumps(check_solutions([Path(p) for p in sys.argv[1:]])))
