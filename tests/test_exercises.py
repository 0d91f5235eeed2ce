"""The teaching track: every check passes on its solution, fails on the stub and on a deliberately wrong answer, and
the exercise notebooks are the solutions with the answers taken out."""

import json
import os
import re
import subprocess
import sys
from functools import partial

import jupytext
import pytest
import torch

from sinklib.teaching import check, exercises

SOLUTIONS = exercises.solution_files()


def test_strip_solutions_keeps_the_indent_and_refuses_unbalanced_markers():
    text = "def f(x):\n    # BEGIN SOLUTION\n    y = x + 1\n    return y\n    # END SOLUTION\n\n\nprint(1)\n"
    assert exercises.strip_solutions(text) == f"def f(x):\n    {exercises.STUB}\n\n\nprint(1)\n"
    with pytest.raises(ValueError, match="unbalanced"):
        exercises.strip_solutions("# BEGIN SOLUTION\nx = 1\n")


def test_one_exercise_per_notebook_in_sync_with_its_solution():
    from sinklib.core.paths import NOTEBOOK_DIR

    taught = {p.stem for p in NOTEBOOK_DIR.glob("[01][0-9]_*.py")}  # dimensions 00-03 and architectures 10-13
    assert {p.stem for p in SOLUTIONS} == taught, "one exercise notebook per research and architecture notebook"
    for solution in SOLUTIONS:
        exercise = exercises.EXERCISE_DIR / solution.name
        assert exercise.read_text() == exercises.exercise_text(solution), (
            f"{exercise} is out of date: run python -m sinklib exercises")
        assert "# BEGIN SOLUTION" not in exercise.read_text()
        for twin in (solution, exercise):
            ipynb = twin.with_suffix(".ipynb")
            assert ipynb.exists(), f"{ipynb} missing: run python -m sinklib exercises"
            assert [c.source for c in jupytext.read(ipynb).cells] == [c.source for c in jupytext.read(twin).cells], (
                f"{ipynb.name} differs from its .py: run python -m sinklib exercises")
        tasks = len(re.findall(r"^# ## Task \d", exercise.read_text(), flags=re.M))
        assert 3 <= tasks <= 6, f"{exercise.name}: {tasks} tasks"


# Estimated seconds of each solution run (one thread; the first load of a model converts it): the session's pool
# starts the longest first. Measured by make test's "sinklib jobs" summary; only the order depends on them.
SOLUTION_SECONDS = {"00_tour": 16, "01_utilization": 35, "02_interpretation": 16, "03_mitigation": 17, "10_llm": 55,
                    "11_moe": 22, "12_mllm": 35, "13_vit": 27}


# Solutions per child process: each child pays ~8 s of imports (torch, transformers, sinklib) before its first
# solution, so two children, not eight, check them beside the notebook runs.
SOLUTION_GROUPS = 2


def solution_groups(seconds: dict[str, float], groups: int = SOLUTION_GROUPS) -> list[list[str]]:
    """The solutions' stems split into ``groups`` lists of about equal estimated seconds (longest first, each to the
    lightest list so far); an empty list is dropped."""
    out: list[list[str]] = [[] for _ in range(groups)]
    load = [0.0] * groups
    for stem in sorted(seconds, key=lambda s: (-seconds[s], s)):
        i = load.index(min(load))
        out[i].append(stem)
        load[i] += seconds[stem]
    return [g for g in out if g]


def plan_jobs(tmp_path_factory) -> dict:
    """The solutions in :data:`SOLUTION_GROUPS` child processes (:func:`sinklib.teaching.exercises.check_solutions`),
    beside the notebook runs: key -> (estimated seconds, call returning {check name: (passed, message)})."""
    by_stem = {p.stem: p for p in SOLUTIONS}
    seconds = {stem: SOLUTION_SECONDS.get(stem, 30) for stem in by_stem}
    return {f"exercises:{'+'.join(group)}": (sum(seconds[s] for s in group),
                                             partial(_check, [by_stem[s] for s in group]))
            for group in solution_groups(seconds)}


def test_solution_groups_cover_every_solution_once_and_balance_their_seconds():
    groups = solution_groups({"a": 50, "b": 30, "c": 25, "d": 5})
    assert sorted(s for g in groups for s in g) == ["a", "b", "c", "d"]
    assert groups == [["a", "d"], ["b", "c"]]  # 55 and 55
    assert solution_groups({"a": 1}, groups=2) == [["a"]]


def _check(solutions) -> dict:
    from sinklib.reproduction.environment import thread_env
    from sinklib.teaching.exercises import SMOKE_ENV

    child = subprocess.run([sys.executable, "-m", "sinklib.teaching.exercises", *map(str, solutions)],
                           env={**os.environ, **thread_env(1), SMOKE_ENV: "1"}, capture_output=True, text=True)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def solved(jobs):
    """Every solution notebook run as a script (its try-it cells on real models included) and every
    ``check.<name>(<solution>)`` line of it called on the solution it names: {check name: (passed, message)}."""
    found = {}
    for key in sorted(k for k in jobs.planned() if k.startswith("exercises:")):
        found |= jobs.result(key)
    return found


def test_every_check_is_used_and_passes_on_its_solution(solved):
    assert set(solved) == set(check.ALL), f"checks without an exercise: {set(check.ALL) - set(solved)}"
    failed = {name: message for name, (passed, message) in solved.items() if not passed}
    assert not failed, failed


def _stub(*args, **kwargs):
    raise NotImplementedError


def _wrong_attention_function(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Plain softmax: the off-by-one is missing."""
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    logits = query @ key.transpose(-1, -2) * (scaling or query.shape[-1] ** -0.5)
    T, N = logits.shape[-2:]
    logits = logits + attention_mask[..., :N] if attention_mask is not None else logits.masked_fill(
        torch.ones(T, N, dtype=torch.bool).triu(N - T + 1), float("-inf"))
    w = torch.softmax(logits, dim=-1)
    return (w @ value).transpose(1, 2), w


class _UnturnedSinks:
    """A sink + window layer that forgets to turn the sinks forward by the evicted count (RoPE)."""

    def __new__(cls, n_sink, window, rope):
        from sinklib.utilization.sink_cache import SinkWindowLayer
        return SinkWindowLayer(n_sink, window, lambda positions: (torch.ones(1, 1), torch.zeros(1, 1)))


def _in_place_mask(mask, k):
    mask[k] = float("-inf")
    mask[k, k] = 0.0
    return mask


def _in_place_registers(acts, neurons, n_registers):
    """Zeroes the neurons in the caller's tensor and never fills the register."""
    acts[:, :, neurons] = 0
    return acts


def _mass_by_kind_keeping_the_last_keys(mass, kinds, skip_last):
    """Forgets to leave out the last keys."""
    from sinklib.architectures.llm.placement import mass_by_kind
    return mass_by_kind(mass, kinds, 0)


def _train_step_without_the_shift(model, ids, optimizer):
    """Scores each position's logits against its own token, not the next one."""
    loss = torch.nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach())


WRONG = {  # one plausible mistake per check
    "alpha": lambda a, k: a[..., :, k].mean(-1),  # divides by T, counts queries that cannot see k
    "sink_rate": lambda a, eps: (a >= eps).float().mean().item(),  # >= instead of >
    "uniform_alpha": lambda T: 1.0 / T,  # the last query's share, not the mean over queries
    "dom_ratio": lambda h: h.abs().amax(-1) / h.mean(-1),  # mean without the absolute value
    "massive": lambda h: h.abs() > 100,  # forgets the 1000 x median condition
    "kept_positions": lambda seen, n, w: list(range(max(0, seen - n - w), seen)),  # window only, no sinks
    "fake_quantize": lambda x, bits, g: torch.round(x * (2**bits - 1)) / (2**bits - 1),  # no min/max, no groups
    "act_redistribute": lambda w, s, beta: torch.where(s[:, :, None, :], beta * w, w),  # mass lost, not moved
    "sink_window_layer": _UnturnedSinks,
    "position_variance": lambda x: x.float().var(dim=0).flatten(1).mean(1),  # unbiased (N - 1)
    "self_only_mask": _in_place_mask,  # right values, but the caller's mask is changed
    "super_neuron": lambda a: int(a.abs().amax(dim=(0, 1)).argmax()),  # any token, not the first
    "softmax_off_by_one": lambda x: torch.softmax(x, dim=-1),  # the extra 1 is missing
    "softpick": lambda x: torch.relu(torch.expm1(x)) / torch.expm1(x).abs().sum(-1, keepdim=True),  # masked keys count
    "head_rmsnorm": lambda o, g, eps: o * torch.rsqrt(o.pow(2).mean(dim=(-2, -1), keepdim=True) + eps) * g,
    "attention_function": _wrong_attention_function,
    "train_step": _train_step_without_the_shift,
    "sink_mass": lambda a: a.mean(-2),  # divides every column by T, not by the queries that see it
    "mass_by_kind": _mass_by_kind_keeping_the_last_keys,
    "position_verdict": lambda own, rep, first, orig, keep=0.5: rep >= keep * own and orig < keep * own,  # no None
    "router_entropy": lambda x: -(torch.softmax(x, -1) * torch.softmax(x, -1).log()).sum(-1),  # nan at p = 0
    "expert_output_max": lambda c, y, n: torch.stack([y[c == e].amax() if (c == e).any() else torch.tensor(0.0)
                                                      for e in range(n)]),  # signed max, not the largest |y|
    "super_experts": lambda a, inc, q, t: [tuple(x) for x in (a > torch.quantile(a.flatten(), q / 100)).nonzero().tolist()],
    "phi": lambda h, dims: (h[..., dims].abs() / h.abs().mean(-1, keepdim=True)).amax(-1),  # mean |x|, not RMS
    "image_centric_rows": lambda w, vis, img, start, rho, summ: (w * img[:, None, None]).sum(-1) >= summ,  # no rho
    "var_redistribute": lambda w, s, img, rows, p: torch.where(s[:, None, None], p * w, w),  # sink mass dropped
    "outlier_mask": lambda n, f: n > f * n.quantile(0.5, dim=-1, keepdim=True),  # averages the two middle values
    "register_scores": lambda a, p: (a.abs() * p[..., None]).sum((0, 1)) / p.sum(),  # pools positions, not images
    "move_to_registers": _in_place_registers,
}


@pytest.mark.parametrize("name", sorted(check.ALL))
def test_each_check_fails_a_stub_and_a_wrong_answer(name):
    stub = check.ALL[name](_stub, quiet=True)
    assert not stub and "not written yet" in stub.message
    wrong = check.ALL[name](WRONG[name], quiet=True)
    assert not wrong, f"{name} passed a wrong answer"
    assert wrong.message and "NotImplementedError" not in wrong.message


def test_try_it_cells_load_the_built_stand_in_and_the_tests_its_smoke_twin(monkeypatch):
    """A student's try-it cell loads the stand-in make figures built; make test (SINKLIB_EXERCISES_SMOKE=1) its
    smoke-size twin; a model with no twin is itself either way."""
    from sinklib.models.registry import REGISTRY
    from sinklib.teaching.exercises import SMOKE_ENV, SMOKE_TWINS, try_it_model

    monkeypatch.delenv(SMOKE_ENV, raising=False)
    assert try_it_model("llava-standin") == "llava-standin" and try_it_model("smollm2-135m") == "smollm2-135m"
    monkeypatch.setenv(SMOKE_ENV, "1")
    assert try_it_model("llava-standin") == "llava-standin-smoke" and try_it_model("smollm2-moe") == "smollm2-moe-smoke"
    assert try_it_model("smollm2-135m") == "smollm2-135m"
    for full, twin in SMOKE_TWINS.items():
        assert REGISTRY[twin].source == REGISTRY[full].source and "smoke size" in REGISTRY[twin].label
