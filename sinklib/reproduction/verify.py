"""Did this run reproduce ours? Compare a run's claims with the committed reference of the CPU profile.

``data/reference/cpu_profile_claims.json`` holds, for every claim of a clean ``make figures`` run (CPU profile,
seed 0, the locked environment), the whole record a verdict rests on: the verdict and its ``unsettled`` flag, each
draw's outcome, the random-weight control's verdict, the flags its note raises (:data:`NOTE_FLAGS`), and every
number of ``measured``, ``control_measured``, ``spread`` and ``margin`` (flattened to ``path -> value``), each with
the quantity its rule declared (:mod:`sinklib.core.quantities`: kind, unit, tolerance, whether it is comparable
across machines at all). Beside them the environment it was made in (:mod:`sinklib.reproduction.environment`).

A value is reproduced when ``|new - ref| <= abs_tol + rel_tol * |ref|`` with the tolerance its quantity declares
(:meth:`~sinklib.core.quantities.Quantity.tolerance`); an identity (an integer naming which layer / dimension /
head / position) must be equal; a quantity declared not comparable across machines is listed apart with its
reason and never fails the check. A verdict, a draw outcome, the control's verdict, ``unsettled`` and the note's
flags must be equal, whatever the tolerance. Where something differs, the report first names every environment
difference (values here vs the reference) and which of them most plausibly moved which claims
(:func:`~sinklib.reproduction.environment.likely_causes`).

    python -m sinklib verify                   # this run (figures/) against the reference; exit 1 if it differs
    python -m sinklib verify --write           # make the reference from this run (after a clean make figures)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sinklib.core import quantities as q
from sinklib.core.paths import ROOT
from sinklib.reproduction.environment import environment, environment_differences, likely_causes

REFERENCE = ROOT / "data" / "reference" / "cpu_profile_claims.json"
SCHEMA = 4  # 4: each value's declared quantity (kind, unit, tolerance, comparable); 3: (rel, abs) tolerances guessed
#             from words; 2: the whole record (control, unsettled, note flags, control_measured, spread, margin)
ABS_TOL = 1e-9  # every non-identity value: zeros and denormals compare equal
# Flags a note raises that change what a verdict means; the rest of a note (numbers, wording) is not compared: its
# numbers are in ``measured`` already and its wording changes with the code, not with the machine.
NOTE_FLAGS = ("cannot tell training from noise",)
GROUPS = q.GROUPS  # the numbers of a record, each compared by value


def numbers(value, quantities: Mapping[str, q.Quantity], group: str, measured_on: str) -> dict[str, dict]:
    """Every number of ``value`` (one group of a record) as ``path -> {"value", "quantity", "unit", "rel_tol",
    "abs_tol"}`` (+ ``"comparable": False, "why"`` for a quantity declared not comparable): what the reference
    stores, so a reader sees what each value is and the tolerance it is checked with. A null (a NaN written out)
    is stored as NaN."""
    out = {}
    for path, x in q.flatten(value):
        number = math.nan if x is None else x
        quantity = q.declared(quantities, group, path, number)
        if group == "margin" and path == "value" and quantity.kind == q.Kind.MARGIN and isinstance(value, Mapping) \
                and quantity.abs_tol is None and quantity.comparable:
            quantity = _within_own_spread(quantity, value.get("spread"), measured_on)
        rel, absolute = quantity.tolerance(measured_on)
        entry = {"value": float(number), "quantity": quantity.kind.value, "unit": quantity.unit, "rel_tol": rel,
                 "abs_tol": absolute}
        if not quantity.comparable:
            entry |= {"comparable": False, "why": quantity.why}
        out[path] = entry
    return out


def _within_own_spread(quantity: q.Quantity, spread, measured_on: str) -> q.Quantity:
    """A verdict's number against its cut moves, by the margin's own statement, by up to ``spread`` (the measured
    cross-machine spread or 2 seed sd's): it is reproduced within that, or its kind's tolerance if larger."""
    if not isinstance(spread, int | float) or isinstance(spread, bool) or not math.isfinite(spread):
        return quantity
    rel, absolute = quantity.tolerance(measured_on)
    if spread <= absolute:
        return quantity
    return quantity.model_copy(update={"rel_tol": rel, "abs_tol": float(spread),
                                       "why": "the margin's own spread: how far its record says the number moves"})


def claim_kind(model: str, kind: str) -> str:
    """What a claim was measured on: "random weights" when its model label says so, else the scorecard's kind."""
    return "random weights" if "random weights" in model else kind


def control_word(control: bool | None, control_measured) -> str:
    """The random-weight control's verdict: holds / fails / cannot be judged (run, nothing decided) / not run."""
    if control is None:
        return "not run" if control_measured is None else "cannot be judged"
    return "holds" if control else "fails"


def note_flags(note: str) -> list[str]:
    """The :data:`NOTE_FLAGS` a note raises."""
    return [flag for flag in NOTE_FLAGS if flag in (note or "")]


def record(row) -> dict:
    """The reference record of one scorecard row (:class:`sinklib.reproduction.scorecard.Row`): its verdicts, flags and
    numbers, each number with the quantity its rule declared (``row.quantities``)."""
    kind = claim_kind(row.model, row.kind)
    declared = getattr(row, "quantities", None) or {}
    return {
        "verdict": str(row.verdict), "unsettled": bool(getattr(row, "unsettled", row.verdict == "unsettled")),
        "draws": list(row.draws), "control": control_word(row.control, row.control_measured), "at_init": row.at_init,
        "flags": note_flags(row.reason), "kind": kind, "model": row.model, "profile": row.profile,
        "measured": numbers(row.measured, declared, "measured", kind),
        "control_measured": numbers(row.control_measured, declared, "control_measured", "random weights"),
        "spread": numbers(row.spread, declared, "spread", kind),
        "margin": numbers(getattr(row, "margin", None), declared, "margin", kind),
    }


def snapshot(figures_dir: str | Path) -> dict:
    """The reference record of a run: every claim's :func:`record`, keyed by ``"<notebook>/<claim id> [<model>]"``,
    and the :func:`environment`."""
    from sinklib.reproduction import scorecard

    claims = {f"{row.notebook}/{row.id} [{row.model}]": record(row)  # one per claim and model (the Recorder's rule)
              for row in scorecard.collect(figures_dir)}
    return {"schema": SCHEMA, "environment": environment(figures_dir), "claims": claims}


@dataclass(frozen=True)
class Difference:
    key: str
    what: str  # "verdict", "unsettled", "draws", "control", "flags", "value", "missing", "new"; "apart": values of a
    #            quantity declared not comparable across machines (reported, never a failure)
    detail: str

    @property
    def fails(self) -> bool:
        return self.what != "apart"

    def line(self) -> str:
        return f"{self.what.upper():<9} {self.key}: {self.detail}"


def _close(new: float, ref: float, rel: float, abs_tol: float = ABS_TOL) -> bool:
    if math.isnan(ref) or math.isnan(new):
        return math.isnan(ref) and math.isnan(new)
    if math.isinf(ref) or math.isinf(new):
        return new == ref
    return abs(new - ref) <= abs_tol + rel * abs(ref)


def _entry_text(path: str, got: float | None, entry: dict) -> str:
    here = "missing" if got is None else f"{got:.6g}"
    unit = f" {entry['unit']}" if entry.get("unit") else ""
    return f"{path} {here} vs {entry['value']:.6g}{unit}"


def moved_numbers(ref: Mapping[str, dict], new: Mapping[str, dict]) -> tuple[list[str], list[str]]:
    """The values of one group (:data:`GROUPS`) that moved beyond the reference's tolerance for them (an identity:
    any change), that this run lacks or that only this run has -- and, apart, those of quantities declared not
    comparable across machines (``comparable: False``): ``(moved, apart)``; only ``moved`` fails a check."""
    moved, apart = [], []
    for path, entry in ref.items():
        got = new.get(path)
        comparable = entry.get("comparable", True) and (got is None or got.get("comparable", True))
        if got is not None and comparable:
            exact = entry["quantity"] == q.Kind.IDENTITY
            absolute = 0.0 if exact else max(ABS_TOL, entry.get("abs_tol", 0.0))
            if _close(got["value"], entry["value"], entry["rel_tol"], absolute):
                continue
            tol = ("exact: an identity" if exact else
                   f"{entry['quantity']}, tol {entry['rel_tol']:g} rel + {absolute:g} abs")
            moved.append(f"{_entry_text(path, got['value'], entry)} ({tol})")
        elif got is None and comparable:
            moved.append(f"{path} missing (reference {entry['value']:.6g})")
        elif got is None or not _close(got["value"], entry["value"], 0.0, 0.0):  # NaN equals NaN here
            apart.append(f"{_entry_text(path, None if got is None else got['value'], entry)} "
                         f"({entry.get('why') or got.get('why', '')})")
    for path, got in new.items():
        if path not in ref:
            (moved if got.get("comparable", True) else apart).append(f"{path} {got['value']:.6g} (not in the "
                                                                       f"reference)")
    return moved, apart


def compare_record(key: str, ref: dict, new: dict) -> list[Difference]:
    """Every way one claim's record differs from the reference's: the verdict, ``unsettled`` (where the verdict is
    equal), the draws, the control's verdict (one that now holds on random weights where the paper says training
    makes the effect is named so), the note's flags, and each group of numbers beyond its tolerance."""
    diffs = []
    if new["verdict"] != ref["verdict"]:
        diffs.append(Difference(key, "verdict", f"{ref['verdict']} in the reference, {new['verdict']} here"))
    elif new["unsettled"] != ref["unsettled"]:
        diffs.append(Difference(key, "unsettled", f"unsettled={ref['unsettled']} in the reference, "
                                                  f"{new['unsettled']} here"))
    if new["draws"] != ref["draws"]:
        diffs.append(Difference(key, "draws", f"draw outcomes {ref['draws']} in the reference, {new['draws']} here"))
    if new["control"] != ref["control"]:
        noise = (" -- it now holds on random weights, where the paper says training makes the effect: the rule "
                 "cannot tell training from noise" if new["control"] == "holds" and new.get("at_init") is False
                 else "")
        diffs.append(Difference(key, "control", f"random-weight control {ref['control']} in the reference, "
                                                f"{new['control']} here{noise}"))
    if new["flags"] != ref["flags"]:
        diffs.append(Difference(key, "flags", f"note flags {ref['flags']} in the reference, {new['flags']} here"))
    for group in GROUPS:
        moved, apart = moved_numbers(ref[group], new[group])
        for what, values in (("value", moved), ("apart", apart)):
            if values:
                diffs.append(Difference(key, what, f"{group}: " + "; ".join(values[:4])
                                        + (f"; +{len(values) - 4} more" if len(values) > 4 else "")))
    return diffs


def compare(run: dict, reference: dict) -> list[Difference]:
    """Every claim whose record differs (:func:`compare_record`), or that only one side has."""
    diffs: list[Difference] = []
    ref_claims, run_claims = reference["claims"], run["claims"]
    for key, ref in ref_claims.items():
        new = run_claims.get(key)
        if new is None:
            diffs.append(Difference(key, "missing", f"in the reference ({ref['verdict']}), not in this run"))
        else:
            diffs += compare_record(key, ref, new)
    for key, new in run_claims.items():
        if key not in ref_claims:
            diffs.append(Difference(key, "new", f"not in the reference (here: {new['verdict']})"))
    return diffs


def report(run: dict, reference: dict) -> tuple[str, bool]:
    """The text ``make verify`` prints and whether the run reproduced the reference (no difference at all): the
    environment differences first, then which setting most plausibly explains what changed, then each difference."""
    found = compare(run, reference)
    diffs = [d for d in found if d.fails]
    apart = [d for d in found if not d.fails]
    env_diffs = environment_differences(run, reference)
    n = len(reference["claims"])
    records = sum(d.what != "value" for d in diffs)
    lines = [f"reference: {n} claims from commit {reference.get('environment', {}).get('commit')}"]
    lines += [f"environment: {d.text}" for d in env_diffs]
    lines += [f"likely cause: {x}" for x in likely_causes(env_diffs, diffs, run, reference)]
    lines += [d.line() for d in diffs]
    if apart:
        lines.append(f"not compared ({len(apart)} claim group(s) whose values are declared not comparable across "
                     f"machines; their verdicts are compared above):")
        lines += [f"  {d.line()}" for d in apart]
    if diffs:
        lines.append(f"NOT reproduced: {records} difference(s) in verdicts, unsettled flags, draw outcomes, controls, "
                     f"note flags or claims present; {sum(d.what == 'value' for d in diffs)} group(s) of values beyond "
                     f"their tolerance")
    else:
        lines.append(f"reproduced: all {n} verdicts, draws and controls equal, every value within its stated tolerance")
    return "\n".join(lines), not diffs


REFERENCE_SEED = 0  # the seed the reference is made with (make figures' default)


def read_reference(path: str | Path) -> dict:
    """The reference file's object; a one-line :class:`InputError` when it is missing, not UTF-8 JSON (truncated,
    empty, a merge conflict) or not an object with claims."""
    from sinklib.core.errors import InputError

    path = Path(path)
    if not path.exists():
        raise InputError(f"no reference at {path}; make one with `python -m sinklib verify --write`")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        why = f"{err.msg} at line {err.lineno}" if isinstance(err, json.JSONDecodeError) else type(err).__name__
        raise InputError(f"{path} is not a reference ({why}: truncated, empty or a merge conflict?); restore it with "
                         f"`git checkout {path}`, or replace it from a clean run: `make reference FORCE=1`") from None
    if not isinstance(data, dict) or not isinstance(data.get("claims"), dict):
        raise InputError(f"{path} is not a reference (a JSON {type(data).__name__} without a \"claims\" object); "
                         f"restore it with `git checkout {path}`, or replace it: `make reference FORCE=1`")
    return data


def load_reference(path: str | Path) -> dict:
    """The reference at ``path`` (:func:`read_reference`); one written by another verify schema is refused with a
    one-line message that says how to regenerate it."""
    from sinklib.core.errors import InputError

    data = read_reference(path)
    if data.get("schema") != SCHEMA:
        raise InputError(f"{path}: verify schema {data.get('schema')!r}, this sinklib reads {SCHEMA}; regenerate it "
                         f"from a clean run: `make figures`, then `make reference` (python -m sinklib verify --write)")
    return data


def _profiles(records: Mapping[str, dict]) -> list[str]:
    return sorted({r.get("profile") or "?" for r in records.values()})


def _notebooks(records: Mapping[str, dict]) -> list[str]:
    return sorted({key.split("/", 1)[0] for key in records})


def _seeds(snap: dict) -> dict[int, list[str]]:
    """seed -> the notebooks that ran with it, as the run recorded them (notebooks with no recorded seed left out)."""
    out: dict[int, list[str]] = {}
    for name, seed in sorted((snap.get("environment", {}).get("notebook_seeds") or {}).items()):
        if seed is not None:
            out.setdefault(seed, []).append(name)
    return out


def _seed_text(seeds: dict[int, list[str]]) -> str:
    return "; ".join(f"seed {s} ({', '.join(names)})" for s, names in sorted(seeds.items()))


def scope_differences(run: dict, reference: dict) -> list[str]:
    """What makes the two runs incomparable before any verdict is read: other seeds, other profiles, notebooks
    missing on either side (one line each; empty when both are the same kind of run)."""
    lines = []
    here_seeds, ref_seeds = _seeds(run), _seeds(reference) or {REFERENCE_SEED: ["every notebook"]}
    if here_seeds and set(here_seeds) != set(ref_seeds):
        lines.append(f"seeds differ: this run is {_seed_text(here_seeds)}, the reference {_seed_text(ref_seeds)} -- "
                     f"every draw, window and initialisation differs, so verdicts and values below may differ for "
                     f"that reason alone (not the CPU's)")
    here, there = _profiles(run["claims"]), _profiles(reference["claims"])
    if here != there:
        lines.append(f"profiles differ: this run is {', '.join(here)}, the reference {', '.join(there)} -- sizes "
                     f"and models differ, so verdicts and values below may differ for that reason alone")
    missing = sorted(set(_notebooks(reference["claims"])) - set(_notebooks(run["claims"])))
    extra = sorted(set(_notebooks(run["claims"])) - set(_notebooks(reference["claims"])))
    if missing:
        lines.append(f"notebooks in the reference but not in this run: {', '.join(missing)} (their claims show as "
                     f"MISSING below)")
    if extra:
        lines.append(f"notebooks in this run but not in the reference: {', '.join(extra)}")
    return lines


def reference_problems(run: dict, previous: dict | None) -> list[str]:
    """Why ``run`` cannot replace the reference: it is not a CPU-profile run, or it lacks notebooks or claims the
    previous reference has (a partial or smoke run). Empty when it may."""
    problems = []
    other = {s: names for s, names in _seeds(run).items() if s != REFERENCE_SEED}
    if other:
        problems.append(f"it ran with {_seed_text(other)}, the reference is made with seed {REFERENCE_SEED}")
    if _profiles(run["claims"]) != ["cpu"]:
        problems.append(f"it is a {', '.join(_profiles(run['claims']))} run, not a CPU-profile one")
    if previous is not None:
        missing_books = sorted(set(_notebooks(previous["claims"])) - set(_notebooks(run["claims"])))
        missing = sorted(set(previous["claims"]) - set(run["claims"]))
        if missing_books:
            problems.append(f"notebooks {', '.join(missing_books)} did not run")
        elif missing:
            problems.append(f"{len(missing)} of the reference's {len(previous['claims'])} claims are missing "
                            f"(e.g. {missing[0]})")
    return problems


def verify(figures_dir: str | Path = "figures", reference: str | Path = REFERENCE, write: bool = False,
           force: bool = False) -> int:
    """Compare ``figures_dir``'s claims with ``reference`` and print the report (exit status 0 / 1); with ``write``,
    make the reference from this run instead -- refused (one line) when the run is not a complete CPU-profile run
    holding every notebook and claim of the reference it replaces, unless ``force``."""
    from sinklib.core.errors import InputError

    run = snapshot(figures_dir)  # its scorecard.collect notes what an interrupted publish left (once)
    if not run["claims"]:
        raise InputError(f"no claims under {figures_dir}; run `make figures` first")
    if write:
        # the reference it replaces, read for its claims only (an older verify schema still names them); one that
        # cannot be read is refused unless forced -- then it is replaced
        try:
            previous = read_reference(reference) if Path(reference).exists() else None
        except InputError:
            if not force:
                raise
            previous = None
        problems = reference_problems(run, previous)
        if problems and not force:
            raise InputError(f"not replacing {reference}: {'; '.join(problems)}. Run a complete `make figures` "
                             f"(PROFILE=cpu, every notebook) first, or `make reference FORCE=1` to replace it anyway.")
        from sinklib.core.paths import atomic_write_bytes

        atomic_write_bytes(Path(reference), (json.dumps(run, indent=1, sort_keys=True) + "\n").encode())
        print(f"wrote {reference}: {len(run['claims'])} claims" + (f" (forced: {'; '.join(problems)})"
                                                                     if problems else ""))
        return 0
    ref = load_reference(reference)
    for line in scope_differences(run, ref):
        print(f"FIRST: {line}")
    text, ok = report(run, ref)
    print(text)
    return 0 if ok else 1
