"""`make figures` semantics: a failing notebook keeps its old figures and does not stop the others."""

import itertools
import json

from helpers import write_notebook

from sinklib.pipeline import runner


def test_failure_keeps_previous_figures_and_others_run(tmp_path, capsys):
    books, figures = tmp_path / "notebooks", tmp_path / "figures"
    books.mkdir()
    save = ("from pathlib import Path\nfrom sinklib.core import plotting\n"
            "fig = plotting.dom_ratio_by_layer([1, 2], [1, 1])\n"
            "plotting.save(fig, Path(out_dir) / 'fig01_demo', caption=f'profile {profile}')")
    write_notebook(books / "00_good.ipynb", save)
    write_notebook(books / "01_bad.ipynb", save + "\nraise ValueError('deliberate failure')")
    old = figures / "01_bad"
    old.mkdir(parents=True)
    (old / "fig01_demo.png").write_bytes(b"previous good figure")

    status = runner.run_all(profile="smoke", figures_dir=figures, build_dir=tmp_path / "build", notebook_dir=books)
    out = capsys.readouterr().out
    assert status == 1
    assert (figures / "00_good" / "fig01_demo.png").stat().st_size > 1000
    assert (figures / "00_good" / "fig01_demo.txt").read_text().strip() == "profile smoke"
    assert (old / "fig01_demo.png").read_bytes() == b"previous good figure"
    assert "FAILED" in out and "deliberate failure" in out and "2 notebooks, 1 failed" in out
    html = (figures / "index.html").read_text()
    assert "00_good/fig01_demo.png" in html and "profile smoke" in html
    executed = json.loads((tmp_path / "build" / "notebooks" / "00_good.ipynb").read_text())
    assert any("injected-parameters" in c["metadata"].get("tags", []) for c in executed["cells"])


def test_discover_filters_by_number(tmp_path):
    for name in ("00_a", "01_b", "10_c"):
        write_notebook(tmp_path / f"{name}.ipynb", "pass")
    assert [p.stem for p in runner.discover(tmp_path, ["01", "10_c"])] == ["01_b", "10_c"]


def test_unknown_notebook_is_a_one_line_error(tmp_path):
    import pytest

    from sinklib.core.errors import InputError

    write_notebook(tmp_path / "00_a.ipynb", "pass")
    with pytest.raises(InputError, match="no notebook matches"):
        runner.discover(tmp_path, ["99"])


def test_progress_estimates_from_the_last_run_times(tmp_path):
    import json as _json
    from pathlib import Path as _Path

    from sinklib.pipeline.protocols import PROTOCOLS
    from sinklib.pipeline.schedule import progress

    (tmp_path / "00_a").mkdir()
    (tmp_path / "00_a" / "headline.json").write_text(_json.dumps({"profile": "cpu", "seconds": 120}))
    (tmp_path / "01_b").mkdir()
    (tmp_path / "01_b" / "headline.json").write_text(_json.dumps({"profile": "smoke", "seconds": 5}))
    line = progress([_Path("00_a.ipynb"), _Path("01_b.ipynb")], tmp_path, "cpu", elapsed=90)
    assert line == "-- elapsed 1.5 min, ~2.0 min to go (+1 never timed here)"
    # a notebook never run here counts with its first-run time on the 2-core machine (CPU profile only)
    line = progress([_Path("00_a.ipynb"), _Path("03_mitigation.ipynb")], tmp_path, "cpu", elapsed=0, jobs=2)
    assert line == f"-- elapsed 0.0 min, ~{(120 + PROTOCOLS['03_mitigation'].first_run_s) / 2 / 60:.1f} min to go (1 from a first run on 2 cores)"
    line = progress([_Path("03_mitigation.ipynb")], tmp_path, "smoke", elapsed=0)
    assert line == "-- elapsed 0.0 min, ~0.0 min to go (+1 never timed here)"


def test_summary_prints_time_against_the_cpu_budget():
    from sinklib.pipeline.protocols import PROTOCOLS
    from sinklib.pipeline.schedule import NotebookResult, summary_table

    budgets = {name: p.cpu_budget_s for name, p in PROTOCOLS.items()}
    assert all(budgets.values()) and sum(budgets.values()) <= 12 * 60  # the warm-cache budget for every notebook
    table = summary_table([NotebookResult("00_tour", True, 3 * budgets["00_tour"]),
                           NotebookResult("13_vit", True, 1.0)], profile="cpu")
    assert "over budget (3.0x)" in table and table.count("over budget") == 1
    assert "budget" not in summary_table([NotebookResult("00_tour", True, 500.0)], profile="gpu").splitlines()[2]


def test_a_run_from_empty_caches_is_judged_against_the_cold_budget(tmp_path):
    """The same 1,500 s wall clock is over the warm budget (720 s) and within the 30-minute one from empty caches;
    the cache counts as empty while it holds no file (folders alone do not count)."""
    from sinklib.pipeline.protocols import PROTOCOLS
    from sinklib.pipeline.schedule import COLD_BUDGET_S, NotebookResult, caches_empty, summary_table

    results = [NotebookResult(name, True, 100.0) for name in PROTOCOLS]
    warm = summary_table(results, "cpu", wall=1500.0, jobs=2).splitlines()[-1]
    cold = summary_table(results, "cpu", wall=1500.0, jobs=2, cold=True).splitlines()[-1]
    assert warm.endswith(f"budget {sum(p.cpu_budget_s for p in PROTOCOLS.values())} s with warm caches: over (2.1x)")
    assert cold.endswith(f"budget {COLD_BUDGET_S:,} s from empty caches, setup not counted here: kept")
    assert "over (1.1x)" in summary_table(results, "cpu", wall=1.1 * COLD_BUDGET_S, jobs=2, cold=True)
    assert caches_empty(tmp_path / "absent")
    (tmp_path / "cache" / "converted").mkdir(parents=True)
    assert caches_empty(tmp_path / "cache")
    (tmp_path / "cache" / "converted" / "model.safetensors").write_bytes(b"x")
    assert not caches_empty(tmp_path / "cache")


def test_two_at_a_time_with_a_thread_each_and_the_reader_last(tmp_path, capsys):
    """jobs=2: the two independent notebooks overlap in time, each kernel gets cores // 2 torch threads, and a
    notebook that reads the others' results (it takes ``figures_dir``) starts only after both have published."""
    import os

    books, figures = tmp_path / "notebooks", tmp_path / "figures"
    books.mkdir()
    work = ("import json, time, torch\nfrom pathlib import Path\nstart = time.time()\ntime.sleep(3)\n"
            "Path(out_dir).mkdir(parents=True, exist_ok=True)\n"
            "(Path(out_dir) / 'span.json').write_text(json.dumps([start, time.time(), torch.get_num_threads()]))")
    write_notebook(books / "00_a.ipynb", work)
    write_notebook(books / "01_b.ipynb", work)
    reader = ("import json\nfrom pathlib import Path\n"
              "spans = [json.loads((Path(figures_dir) / n / 'span.json').read_text()) for n in ('00_a', '01_b')]\n"
              "assert len(spans) == 2")
    write_notebook(books / "90_reader.ipynb", reader)
    nb = json.loads((books / "90_reader.ipynb").read_text())
    nb["cells"][0]["source"] += '\nfigures_dir = "."'
    (books / "90_reader.ipynb").write_text(json.dumps(nb))

    status = runner.run_all(profile="smoke", figures_dir=figures, build_dir=tmp_path / "build", notebook_dir=books,
                            jobs=2)
    out = capsys.readouterr().out
    assert status == 0, out
    (s0, e0, t0), (s1, e1, t1) = (json.loads((figures / n / "span.json").read_text()) for n in ("00_a", "01_b"))
    assert s1 < e0 and s0 < e1  # they ran side by side
    assert t0 == t1 == max(1, (os.cpu_count() or 1) // 2)
    assert "2 at a time" in out and "wall clock" in out


def test_a_first_run_starts_the_longest_notebook_first_in_the_order_that_ends_soonest(tmp_path):
    """With no times in figures/ (a fresh clone), the order comes from the protocols' first-run seconds: the longest
    (10's models, with the scale rung's 1.5B) starts first, the two workers end no later than longest-first would (every order tried), 90_scorecard
    last."""
    from sinklib.pipeline.protocols import PROTOCOLS
    from sinklib.pipeline.runner import discover
    from sinklib.pipeline.schedule import makespan, order_notebooks

    first, last = order_notebooks(discover(), tmp_path / "figures", "cpu", jobs=2)
    seconds = [PROTOCOLS[b.stem].first_run_s for b in first]
    timed = sorted(name for name, p in PROTOCOLS.items() if p.first_run_s)
    assert sorted(b.stem for b in first) == timed and [b.stem for b in last] == ["90_scorecard"]
    assert first[0].stem == max(timed, key=lambda name: PROTOCOLS[name].first_run_s) == "10_llm"
    assert makespan(seconds, 2) <= makespan(sorted(seconds, reverse=True), 2)
    assert makespan(seconds, 2) == min(makespan(p, 2) for p in itertools.permutations(seconds))


def test_a_notebook_whose_kept_results_are_for_other_code_is_ordered_by_its_first_run_time(tmp_path):
    """After a code change 10 measures its models again: its last (warm) time must not put it last."""
    from sinklib.pipeline.model_results import kept_code
    from sinklib.pipeline.protocols import PROTOCOLS
    from sinklib.pipeline.runner import discover
    from sinklib.pipeline.schedule import last_seconds, order_notebooks

    figures = tmp_path / "figures"
    for stem in ("03_mitigation", "10_llm"):
        (figures / stem).mkdir(parents=True)
    (figures / "03_mitigation" / "headline.json").write_text(json.dumps({"profile": "cpu", "seconds": 20.0}))
    head = figures / "10_llm" / "headline.json"
    head.write_text(json.dumps({"profile": "cpu", "seconds": 10.0, "kept_code": kept_code("10_llm")}))
    assert last_seconds(figures, "10_llm", "cpu") == 10.0  # kept for this code: it reads them back
    first, _ = order_notebooks(discover(), figures, "cpu", jobs=2)
    assert first[0].stem != "10_llm"  # 10 s: one of the last to start
    head.write_text(json.dumps({"profile": "cpu", "seconds": 10.0, "kept_code": "another commit's digest"}))
    assert last_seconds(figures, "10_llm", "cpu") is None
    first, _ = order_notebooks(discover(), figures, "cpu", jobs=2)
    assert first[0].stem == "10_llm" and PROTOCOLS["10_llm"].first_run_s > 1000  # longest first, as in a first run


def test_makespan_and_best_order_by_hand():
    """List scheduling on 2 workers, worked by hand: [3, 3, 2, 2, 2] longest first ends at 7 (3 | 3, then 2 + 2 on
    the two, the last 2 on either); [2, 3, 2, 3, 2] puts {3, 3} on one worker and {2, 2, 2} on the other: 6."""
    from sinklib.pipeline.schedule import best_order, makespan

    assert makespan([3, 3, 2, 2, 2], 2) == 7 and makespan([2, 3, 2, 3, 2], 2) == 6
    assert makespan([5, 1, 1], 1) == 7 and makespan([4, 1, 1, 1, 1], 2) == 4
    seconds = [3, 3, 2, 2, 2]
    order = best_order(seconds, 2)
    assert sorted(order) == [0, 1, 2, 3, 4] and makespan([seconds[i] for i in order], 2) == 6
    assert best_order(seconds, 1) == [0, 1, 2, 3, 4]  # one worker: any order ends at the sum; longest first kept
    assert best_order(list(range(10)), 2) == list(range(9, -1, -1))  # beyond 8 items: longest first


GRANDPARENT = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a child that does not stop when asked\n"
    "kernel = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
    "print(kernel.pid, flush=True)\n"
    "time.sleep(120)\n")


def test_a_stop_kills_a_child_that_ignores_it_and_the_kernel_it_started_so_no_pipe_stays_open():
    """A run's Ctrl-C waited as long as anything its children started still held its output pipes: a child that does
    not leave when asked is killed after the grace, and so is the kernel it started in a session of its own."""
    import subprocess
    import sys
    import time

    import psutil

    child = subprocess.Popen([sys.executable, "-c", GRANDPARENT], stdout=subprocess.PIPE, text=True)
    kernel = psutil.Process(int(child.stdout.readline()))
    children = runner._Children()
    children.procs["00_demo"] = child
    started = time.perf_counter()
    children.stop(grace_s=1.0)
    assert child.poll() is not None and time.perf_counter() - started < 10
    gone, alive = psutil.wait_procs([kernel], timeout=5)
    assert not alive
    assert child.stdout.read() == ""  # EOF: nothing holds the pipe any more


def test_a_relative_cache_names_the_folder_the_run_was_started_from(tmp_path, monkeypatch):
    """A kernel runs in the notebooks' folder: SINKLIB_CACHE=build/cache given from the repository used to put the
    models under notebooks/build/cache (benchmarks/cross_setting.py trained 12's stand-ins there)."""
    books = tmp_path / "notebooks"
    books.mkdir()
    write_notebook(books / "00_cache.ipynb", "from sinklib.core.paths import cache_dir\n"
                                             "cache_dir().mkdir(parents=True, exist_ok=True)\n"
                                             "(cache_dir() / 'marker').write_text('here')")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SINKLIB_CACHE", "run/cache")
    assert runner.absolute_paths({"SINKLIB_CACHE": "run/cache", "OMP_NUM_THREADS": "1"}) == {
        "SINKLIB_CACHE": str(tmp_path / "run" / "cache"), "OMP_NUM_THREADS": "1"}
    status = runner.run_all(profile="smoke", figures_dir="figures", build_dir="build", notebook_dir=books, jobs=1)
    assert status == 0
    assert (tmp_path / "run" / "cache" / "marker").read_text() == "here"
    assert not (books / "run").exists()
