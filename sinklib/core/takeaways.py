"""Takeaways rendered from the run: the "What we saw" paragraphs of the notebooks, written by code.

Every number and every direction word ("holds", "helps", "falls to") in a takeaway comes from the run's own results
and claims, so the executed notebook, the gallery and ``claims.json`` agree on any model and profile. Each
notebook's folder has a ``takeaways`` module with one function per section, returning Markdown; the notebook
displays it with :func:`show`. Hand-written markdown around it explains and interprets, but carries no measured
number (``tests/test_takeaways.py`` checks the executed notebooks).

The helpers here are the shared vocabulary: :func:`num` formats a number the way the text needs it, :func:`verdict`
turns a claim into words, :func:`compare` picks the direction word from the numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from sinklib.core.claims import Claim, draw_summary

HEADING = "**What we saw"  # every rendered takeaway starts with this; hand-written cells may not carry numbers


def num(x: float, digits: int = 3) -> str:
    """A measured number for prose: ``digits`` significant digits, thousands separators for large values,
    "n/a" for NaN / None. 22406.3 -> "22,406"; 0.14336 -> "0.143"; 3.0 -> "3"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) >= 1):
        return f"{int(x):,}"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def pct(x: float, digits: int = 2) -> str:
    """A share as a percentage: 0.0213 -> "2.1%"."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{num(100 * x, digits)}%"


def layer_ranges(layers: Sequence[int]) -> str:
    """Layer indices as ranges: [0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8" (sorted first; "" for none)."""
    runs: list[list[int]] = []
    for i in sorted(layers):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def windows(n: int, what: str = "windows", tokens: int | None = None) -> str:
    """A measurement size from the run's own numbers: (16, "held-out windows", 256) -> "16 held-out windows of 256
    tokens"; (1, "passages") -> "1 passage" (singular for one)."""
    noun = what[:-1] if n == 1 and what.endswith("s") else what
    return f"{num(n)} {noun}" + (f" of {num(tokens)} tokens" if tokens is not None else "")


def span(values: Sequence[float], digits: int = 3) -> str:
    """"a-b" over ``values`` (one value: just it)."""
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    return num(lo, digits) if num(lo, digits) == num(hi, digits) else f"{num(lo, digits)}-{num(hi, digits)}"


def listing(items: Sequence[str], conjunction: str = "and") -> str:
    """Items as prose: ["a"] -> "a"; ["a", "b"] -> "a and b"; ["a", "b", "c"] -> "a, b and c"."""
    items = [str(i) for i in items]
    return ", ".join(items[:-1]) + f" {conjunction} " + items[-1] if len(items) > 1 else "".join(items)


def which_models(names: Sequence[str], total: int, noun: str = "models") -> str:
    """Which of ``total`` models a statement is true of, as prose: [] -> "none of the models"; all of three -> "all
    three models"; ["SmolLM2", "Qwen"] of three -> "SmolLM2 and Qwen" (:func:`listing`)."""
    if not names:
        return f"none of the {noun}"
    if len(names) == total and total > 1:
        return f"all {('two', 'three')[total - 2] if total <= 3 else num(total)} {noun}"
    return listing(names)


def against_cut(value: float, bounds: tuple[float, float], cut: float, level: float, fmt=num, unit: str = "") -> str:
    """A pooled number, its ``level`` interval and the side of ``cut`` the whole interval lies on: (0.79, (0.75,
    0.82), 0.3, 0.95) -> "0.79 (95% interval 0.75-0.82, above the 0.3 cut)"; "across" when the interval straddles it
    (the verdict's "unsettled"). ``fmt`` formats each number, ``unit`` follows it ("x")."""
    lo, hi = bounds
    side = "above" if lo > cut else "below" if hi < cut else "across"
    return f"{fmt(value)}{unit} ({pct(level)} interval {fmt(lo)}-{fmt(hi)}{unit}, {side} the {fmt(cut)}{unit} cut)"


def compare(a: float, b: float, more: str = "higher than", less: str = "lower than", same: str = "the same as",
            rel_tol: float = 0.0) -> str:
    """The direction word for a against b: ``more`` / ``less`` / ``same`` (within ``rel_tol`` of b); "not comparable
    with" when either does not exist (None or NaN)."""
    if any(v is None or v != v for v in (a, b)):
        return "not comparable with"
    if abs(a - b) <= rel_tol * abs(b):
        return same
    return more if a > b else less


def verdict(claim: Claim | None) -> str:
    """A claim's verdict as prose -- one of the four: "holds", "does not hold", "is unsettled (why)", "cannot be
    judged here (why)" -- with the draws and the random-weight control when they were run. A verdict that is not
    "holds" or "does not hold" always states its reason (the record's note), never a draw count alone: a claim that
    cannot be judged is never rendered as "3 of 3 draws hold"."""
    if claim is None:
        return "was not judged (nothing to judge it on)"
    word = claim.verdict()
    text = {"holds": "holds", "does NOT hold": "does not hold", "unsettled": "is unsettled",
            "cannot be judged here": "cannot be judged here"}[word]
    if claim.holds is None:
        reason = _reason(claim)
        if reason:
            text += f" ({reason})"
    extras = []
    if claim.draws and len(claim.draws) > 1 and claim.holds is not None:
        extras.append(draw_summary(claim.draws) + (f" over {claim.draws_of}" if claim.draws_of else ""))
    if claim.control is not None:
        extras.append(f"on random weights it {'holds' if claim.control else 'fails'}")
    return text + (f" ({'; '.join(extras)})" if extras else "")


def _reason(claim: Claim) -> str:
    """Why a claim is unsettled or cannot be judged: its note's first clause; for an unsettled claim without one, the
    draws (or the margin) that make it so."""
    first = first_clause(claim.note)
    if claim.unsettled and not first:
        if claim.draws and len(claim.draws) > 1:
            first = draw_summary(claim.draws) + (f" ({claim.draws_of})" if claim.draws_of else "")
        elif isinstance(claim.margin, dict):
            m = claim.margin
            first = f"{num(m['value'])} is within {num(m['spread'])} of the cut {num(m['cut'])}"
    if claim.unsettled and first.startswith("unsettled: "):
        first = first[len("unsettled: "):]
    if claim.unsettled and first.startswith("draw ") and " -- " in first:  # a close call leads: it is the reason
        first = first.split(" -- ")[0]
    return first


def first_clause(text: str) -> str:
    """Up to the first ";" outside parentheses: "a (b; c); d" -> "a (b; c)"."""
    depth = 0
    for i, ch in enumerate(text or ""):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ";" and depth <= 0:
            return text[:i].strip()
    return (text or "").strip()


def claim_line(claim: Claim | None, name: str | None = None) -> str:
    """"`id` holds (3 of 3 draws hold over 3 seeds; on random weights it fails)"."""
    if claim is None:
        return f"`{name}` was not judged"
    return f"`{name or claim.id}` {verdict(claim)}"


def find(claims: Sequence[Claim], claim_id: str, model: str | None = None) -> Claim | None:
    """The recorded claim with this id (and model, where a notebook compares several)."""
    for c in claims:
        if c.id == claim_id and (model is None or c.model == model):
            return c
    return None


def paragraph(title: str, *sentences: str) -> str:
    """A takeaway: "**What we saw (title).** s1 s2 ..." (empty sentences dropped)."""
    head = f"{HEADING} ({title}).**" if title else f"{HEADING}.**"
    return " ".join([head, *[s.strip() for s in sentences if s and s.strip()]])


# what a measurement size names: the data a number was measured on (a count, or "N-token", before one of these)
SIZE_UNITS = ("token", "window", "text", "sequence", "stream", "image", "digit", "photo", "picture", "seed", "step",
              "draw", "prompt", "sample", "patch", "position", "forward", "caption", "byte", "run", "example", "claim", "verdict")
_COUNT = r"(?:\d[\d,.]*k?|one|two|three|four|five|six|seven|eight|nine|ten|twelve|sixteen)"
_SIZE = re.compile(rf"\b{_COUNT}(?:[- ](?:[\w.'-]+ ){{0,3}}?|-)(?:{'|'.join(SIZE_UNITS)})(?:e?s)?\b", re.IGNORECASE)


def heading_of(markdown: str) -> str:
    """The parenthesis of a rendered takeaway's heading: "**What we saw (X).** ..." -> "X" ("" when it has none)."""
    if not markdown.startswith(HEADING + " ("):
        return ""
    end = markdown.find(").**")
    return markdown[len(HEADING) + 2:end] if end > 0 else ""


def measurement_size(markdown: str) -> str | None:
    """The measurement size a takeaway names in its heading ("one 24-token window", "16 held-out windows of 256
    tokens", "3 seeds"): the first count followed within a few words by a unit of :data:`SIZE_UNITS`; None if none."""
    match = _SIZE.search(heading_of(markdown))
    return match.group(0) if match else None


def unmeasured(markdown: str) -> bool:
    """True for a takeaway that states a number (a digit in its body) but not, in its heading, what it was measured
    on -- the same perplexity reads differently on 128 and 512 tokens, so every number carries its measurement size."""
    body = markdown.split(").**", 1)[-1] if markdown.startswith(HEADING + " (") else markdown
    return bool(re.search(r"\d", body)) and measurement_size(markdown) is None


def say(title: str, *sentences: str) -> str:
    """Write a takeaway in the notebook cell it concludes and display it: ``say(f"{model}, {num(n)} windows",
    f"The sink rate is {pct(rate)} ...", ...)`` shows "**What we saw (title).** s1 s2 ..." and returns it. Every
    number in it is formatted from the run's values (``num``, ``pct``, ``span``, ``compare``, ``verdict``); digits
    typed into its literal text are refused by the tests (:func:`typed_numbers`) unless they cite a paper."""
    markdown = paragraph(title, *sentences)
    show(markdown)
    return markdown


# digits a takeaway's literal text may carry: citations of a paper's table, figure, equation, year or model size,
# and the notebook's own section numbers -- never a measured value
CITED = re.compile(r"(?:Table|Tables|Figure|Fig\.|Eq\.|equation|section|sections|Section|arXiv:?|et al\.,?)\s*[\d.]+"
                   r"(?:\s*(?:and|-|,)\s*\d+)*|\b\d+(?:\.\d+)?[BM]\b|\b\d+-\d+B\b|(?:\b|[a-z])(?:19|20)\d\d[a-z]?\b"
                   r"|\b[A-Za-z]\w*_\{?\d+\}?")  # ... and a symbol's subscript: alpha_0, h_{1}


def typed_numbers(source: str, calls: Sequence[str] = ("say", "paragraph")) -> list[str]:
    """The digits typed into the literal text of every ``say(...)`` / ``paragraph(...)`` call in ``source`` (a
    notebook's code), beyond those :data:`CITED` allows, and every literal number formatted into one (``{num(0.7)}``):
    a takeaway's numbers must come from the run. Returns one line per offence (empty: fine)."""
    import ast

    problems: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) in calls):
            continue
        for arg in node.args:
            for part in ast.walk(arg):
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    typed = re.findall(r"\d[\d.,]*", CITED.sub("", part.value))
                    if typed:
                        problems.append(f"line {part.lineno}: typed {typed} in {part.value[:60]!r}")
                elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Constant) \
                        and isinstance(part.value.value, (int, float)):
                    problems.append(f"line {part.lineno}: a literal {part.value.value} formatted into a takeaway")
                elif isinstance(part, ast.Call) and getattr(part.func, "id", "") in ("num", "pct") and part.args \
                        and isinstance(part.args[0], ast.Constant):
                    problems.append(f"line {part.lineno}: {part.func.id}({part.args[0].value!r}) of a literal")
    return problems


def show(markdown: str) -> None:
    """Display a rendered takeaway as Markdown in the notebook (print it outside IPython)."""
    try:
        from IPython import get_ipython
        from IPython.display import Markdown, display

        if get_ipython() is not None:
            display(Markdown(markdown))
            return
    except ImportError:  # pragma: no cover - IPython ships with jupyterlab
        pass
    print(markdown)


def audit(notebook: dict) -> tuple[list[str], int]:
    """Check a (executed) notebook's JSON: every markdown cell that says "What we saw" must carry no digit -- the
    measured numbers belong in rendered takeaways. Returns (the offending cells' first lines, the number of rendered
    takeaways found in the outputs)."""
    import re

    problems, rendered = [], 0
    for cell in notebook.get("cells", []):
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "markdown" and "What we saw" in source and re.search(r"\d", source):
            first = next(line for line in source.splitlines() if "What we saw" in line)
            problems.append(f"hand-typed number in: {first[:100]}")
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            text = "".join(output.get("data", {}).get("text/markdown", ""))
            rendered += text.startswith(HEADING)
    return problems, rendered


FIGURE_NAME = re.compile(r"[\"'](fig\d\d[\w-]*)[\"']")  # a figure a notebook cell saves: fig_dir / "fig02_alpha-heatmap"


def collect(notebook: dict) -> list[dict]:
    """The rendered takeaways of an executed notebook, in order: {"section": the last "## " heading above it,
    "markdown": the paragraph, "figures": the figures saved by the code cells since the previous takeaway (the ones
    it reads; its own cell included)}. The runner writes them beside the figures (``takeaways.json``) and the gallery
    shows each takeaway after its figures."""
    out, section, pending = [], "", []
    for cell in notebook.get("cells", []):
        source = "".join(cell.get("source", ""))
        if cell.get("cell_type") == "markdown":
            for line in source.splitlines():
                if line.startswith("## ") or line.startswith("### "):
                    section = line.lstrip("#").strip()
            continue
        pending += [name for name in FIGURE_NAME.findall(source) if name not in pending]
        for output in cell.get("outputs", []):
            text = "".join(output.get("data", {}).get("text/markdown", ""))
            if text.startswith(HEADING):
                out.append({"section": section, "markdown": text, "figures": pending})
                pending = []
    return out


def section_problems(sections: Sequence[str]) -> list[str]:
    """The numbered sections that carry takeaways, in order (``"3 · Title"`` -> 3; unnumbered ones like
    "Scorecard" skipped), must be unique and consecutive from 0 or 1: a reader cites "takeaway 7" and finds one.
    Returns one line per repeat or gap (empty: fine)."""
    numbers = [int(m.group(1)) for s in sections if (m := re.match(r"\s*(\d+)\b(?!\w)", s))]
    problems = [f"section {n} carries {numbers.count(n)} takeaways" for n in sorted(set(numbers))
                if numbers.count(n) > 1]
    if numbers and numbers[0] not in (0, 1):
        problems.append(f"the first numbered section is {numbers[0]}, not 0 or 1")
    problems += [f"sections jump from {a} to {b}" for a, b in zip(numbers, numbers[1:], strict=False) if b > a + 1]
    problems += [f"section {b} comes after {a}" for a, b in zip(numbers, numbers[1:], strict=False) if b < a]
    return problems
