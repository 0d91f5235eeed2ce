"""The package layout: folders mirror the design card, imports only run downward, and nothing imports in a loop.

Layers, bottom to top (a module may import its own folder and any folder listed before it, never one after it):

    core                                   shared machinery; imports nothing else of sinklib
    models                                 where every model comes from
    utilization | interpretation | mitigation   the survey's dimensions (01, 02, 03); none imports another
    architectures.{llm,moe,mllm,vit}       10-13; each may use the dimensions, none imports another architecture
    teaching, reproduction                 above the research (the exercises; the scorecard, verify, environment)
    pipeline                               on top (it runs the notebooks and may use all of the above)

Imports are read with ``ast`` from the source, including those inside functions, so a lazy import counts too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import sinklib

PACKAGE = Path(sinklib.__file__).resolve().parent
NOTEBOOKS = PACKAGE.parent / "notebooks"

DIMENSIONS = ("utilization", "interpretation", "mitigation")
ARCHITECTURES = tuple(f"architectures.{a}" for a in ("llm", "moe", "mllm", "vit"))
BELOW_RESEARCH = {"core", "models"}
ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "models": {"core", "models"},
    **{d: BELOW_RESEARCH | {d} for d in DIMENSIONS},
    **{a: BELOW_RESEARCH | set(DIMENSIONS) | {a} for a in ARCHITECTURES},
    "architectures": {"architectures"},  # the folder's own __init__ (a docstring)
}
ALLOWED["teaching"] = set().union(*ALLOWED.values()) | {"teaching"}
ALLOWED["reproduction"] = ALLOWED["teaching"] - {"teaching"} | {"reproduction"}
ALLOWED["pipeline"] = ALLOWED["teaching"] | ALLOWED["reproduction"] | {"pipeline"}
ALLOWED[""] = ALLOWED["pipeline"]  # sinklib/__init__.py and __main__.py: the facade over everything

# which folder holds the code behind each research notebook
NOTEBOOK_FOLDER = {"01": "utilization", "02": "interpretation", "03": "mitigation", "10": "architectures.llm",
                   "11": "architectures.moe", "12": "architectures.mllm", "13": "architectures.vit"}


# ------------------------------------------------------------------------------------------------ reading imports
def module_name(path: Path, root: Path) -> str:
    """``root/core/capture.py`` -> ``sinklib.core.capture``; a package's ``__init__.py`` names the package."""
    parts = ("sinklib",) + path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, root: Path, known: set[str]) -> set[str]:
    """Every sinklib module ``path`` imports anywhere in its body: ``from a.b import c`` names module ``a.b.c`` when it
    exists, else ``a.b``; relative imports are resolved against the module's package."""
    inside = path.is_relative_to(root)  # a notebook's .py twin lies outside the package
    name = module_name(path, root) if inside else path.stem
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "sinklib")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "sinklib":
                continue
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
    return found - {name}


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the sinklib modules it imports, for every ``.py`` under ``root``."""
    files = sorted(root.rglob("*.py"))
    known = {module_name(f, root) for f in files}
    return {module_name(f, root): imported_modules(f, root, known) for f in files}


def folder(module: str) -> str:
    """The layer a module belongs to: ``core``, ``models``, a dimension, ``architectures.<arch>``, ``pipeline``,
    ``teaching``, or "" for the package's own ``__init__`` / ``__main__``."""
    parts = module.split(".")[1:]
    if not parts or parts[0] == "__main__":
        return ""
    if parts[0] == "architectures" and len(parts) > 1:
        return f"architectures.{parts[1]}"
    return parts[0]


def layering_violations(graph: dict[str, set[str]]) -> list[str]:
    """``"a -> b"`` for every import of a module from a folder that ``a``'s folder may not use (see :data:`ALLOWED`);
    a folder missing from the table is a violation too, so a new folder has to be placed in a layer."""
    bad = []
    for module, deps in sorted(graph.items()):
        own = folder(module)
        if own not in ALLOWED:
            bad.append(f"{module}: folder {own!r} has no layer (add it to ALLOWED)")
            continue
        bad += [f"{module} -> {dep}" for dep in sorted(deps) if folder(dep) not in ALLOWED[own]]
    return bad


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import loops: strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


# ------------------------------------------------------------------------------------------------ the checks on sinklib
def test_imports_only_run_downward():
    assert layering_violations(import_graph()) == []


def test_no_import_loop():
    assert import_cycles(import_graph()) == []


def test_every_folder_has_a_layer_and_the_design_cards_folders_exist():
    folders = {folder(m) for m in import_graph()}
    assert folders <= set(ALLOWED)
    assert {"core", "models", *DIMENSIONS, *ARCHITECTURES, "pipeline", "reproduction", "teaching"} <= folders


@pytest.mark.parametrize("number", sorted(NOTEBOOK_FOLDER))
def test_a_notebooks_research_code_lives_in_its_own_folder(number):
    """Notebook NN imports research code only from the folder named after its dimension or architecture (and the
    shared core / models / pipeline), so "where is the code behind NN?" has one answer."""
    source = next(NOTEBOOKS.glob(f"{number}_*.py"))
    imported = imported_modules(source, PACKAGE, set(import_graph()))
    research = {folder(m) for m in imported} - {"core", "models", "pipeline", "reproduction", "teaching", ""}
    assert research == {NOTEBOOK_FOLDER[number]}, f"{source.name} imports research code from {sorted(research)}"


# ------------------------------------------------------------------------------------------------ the checker can fail
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "sinklib"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_checker_flags_an_upward_a_sideways_and_a_lazy_import(tmp_path):
    root = _tree(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/metrics.py": "def f():\n    from sinklib.models import load  # lazy, still upward\n",
        "models/__init__.py": "",
        "models/load.py": "from sinklib.core import metrics\n",
        "utilization/__init__.py": "",
        "utilization/streaming.py": "from sinklib.interpretation.origin import x\n",
        "interpretation/__init__.py": "",
        "interpretation/origin.py": "x = 1\n",
        "architectures/__init__.py": "",
        "architectures/vit/__init__.py": "",
        "architectures/vit/registers.py": "from sinklib.architectures.llm import placement\n",
        "architectures/llm/__init__.py": "",
        "architectures/llm/placement.py": "from sinklib.interpretation import origin\n",
        "stray/__init__.py": "",
    })
    graph = import_graph(root)
    assert graph["sinklib.core.metrics"] == {"sinklib.models.load"}
    assert layering_violations(graph) == [
        "sinklib.architectures.vit.registers -> sinklib.architectures.llm.placement",
        "sinklib.core.metrics -> sinklib.models.load",
        "sinklib.stray: folder 'stray' has no layer (add it to ALLOWED)",
        "sinklib.utilization.streaming -> sinklib.interpretation.origin",
    ]


def test_checker_finds_the_loop_the_old_layout_had(tmp_path):
    """core/data -> core/models -> core/upcycle -> core/data (a lazy import closed it), as in the layout before."""
    root = _tree(tmp_path, {
        "__init__.py": "", "core/__init__.py": "",
        "core/data.py": "from sinklib.core.models import LoadedModel\n",
        "core/models.py": "def load():\n    from sinklib.core.upcycle import build\n",
        "core/upcycle.py": "def build():\n    from sinklib.core.data import text_windows\n",
        "core/metrics.py": "from . import data\n",
    })
    graph = import_graph(root)
    assert graph["sinklib.core.metrics"] == {"sinklib.core.data"}  # relative import resolved
    assert import_cycles(graph) == [["sinklib.core.data", "sinklib.core.models", "sinklib.core.upcycle"]]
    assert layering_violations(graph) == []


def test_notebook_folders_match_the_notebooks_on_disk():
    numbers = {m.group(1) for p in NOTEBOOKS.glob("*.py") if (m := re.match(r"(\d\d)_", p.name))}
    assert set(NOTEBOOK_FOLDER) == numbers - {"00", "90"}  # the tour and the scorecard use every folder
