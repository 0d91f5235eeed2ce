"""``make figures``: execute every notebook with papermill, keep good figures, summarise, build the gallery.

Each notebook writes into a staging folder private to the run; only when it succeeds does the staging folder replace
``figures/<notebook>/``, by renames that never leave a half-written folder (:mod:`sinklib.pipeline.publish`). A
failing notebook therefore never destroys that notebook's previous figures, and does not stop the others. One run
holds a figures folder and a build folder at a time (a second stops with the first's PID); the folders are checked
for room and writability before the first notebook. Each notebook runs in a child process: Ctrl-C or SIGTERM stops
them all at once (their kernels shut down, nothing half-done is published), prints what finished and exits 130 or
143; a child whose run died stops by itself (:mod:`sinklib.pipeline.stopping`). The run ends with a table (notebook,
status, seconds), printed before the gallery is built, and a non-zero exit if anything failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path

from sinklib.core.errors import InputError
from sinklib.core.paths import NOTEBOOK_DIR, cache_dir
from sinklib.pipeline import publish, stopping
from sinklib.pipeline.executed import last_error_line, render_html, write_takeaways
from sinklib.pipeline.schedule import (
    NotebookResult,
    caches_empty,
    default_jobs,
    gpu_slots,
    order_notebooks,
    progress,
    summary_table,
    unreadable_notebooks,
)
from sinklib.reproduction.environment import thread_env

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
KERNEL_HASH_SEED = "0"  # PYTHONHASHSEED of every kernel


def discover(notebook_dir: Path = NOTEBOOK_DIR, only: list[str] | None = None) -> list[Path]:
    """Numbered notebooks in order; ``only`` filters by stem or number prefix (e.g. ``00`` or ``00_tour``)."""
    books = sorted(p for p in notebook_dir.glob("[0-9][0-9]_*.ipynb"))
    if only:
        books = [p for p in books if any(p.stem == o or p.stem.startswith(o + "_") for o in only)]
        if not books:
            raise InputError(f"no notebook matches {only}; available: "
                             f"{', '.join(p.stem for p in sorted(notebook_dir.glob('*.ipynb')))}")
    return books


@contextlib.contextmanager
def kernel_env(**variables: str):
    """Set environment variables for the kernels started inside the block (they inherit this process's environment)
    and put the previous values back afterwards. Nested blocks that set the same value leave it unchanged."""
    saved = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_notebook(
    path: Path, *, profile: str, model: str, device: str, seed: int, figures_dir: Path, build_dir: Path,
    progress_bar: bool = True, parent: int | None = None,
    publishing: Callable[[], contextlib.AbstractContextManager] = stopping.signals_held,
) -> NotebookResult:
    """Execute one notebook into a private staging folder and publish it (see the module docstring). ``parent``:
    the PID of the run this child belongs to -- if that run died meanwhile, nothing is published (another run may
    hold the folder by now). ``publishing``: the block no stop may split (a child's
    :meth:`~sinklib.pipeline.stopping.StopGuard.publishing`)."""
    import papermill as pm

    staging = publish.staging_dir(figures_dir, path.stem)  # private to this run, on the figures' filesystem
    executed = build_dir / "notebooks" / path.name
    executed.parent.mkdir(parents=True, exist_ok=True)
    params = {"profile": profile, "model": model, "device": device, "seed": seed, "out_dir": str(staging.resolve())}
    if "figures_dir" in pm.inspect_notebook(str(path)):  # a notebook that reads the others' results (90_scorecard)
        params["figures_dir"] = str(Path(figures_dir).resolve())
    start = time.perf_counter()
    # The kernel draws figures inline (whatever MPLBACKEND the shell exported for scripts), so the executed notebook
    # and its HTML page show every figure beside the code that made it; it shows no widgets (sinklib.explore then
    # draws a static figure).
    # PYTHONHASHSEED: a fixed string-hash order in every kernel, so no set or dict of strings can order a run
    # differently from the next (benchmarks/determinism.py measures what moves the numbers).
    with kernel_env(MPLBACKEND=INLINE_BACKEND, SINKLIB_HEADLESS="1", PYTHONHASHSEED=KERNEL_HASH_SEED):
        try:
            pm.execute_notebook(str(path), str(executed), parameters=params, cwd=str(path.parent),
                                kernel_name="python3", progress_bar=progress_bar, stderr_file=CacheNotes(path.stem))
        except Exception as err:  # papermill raises PapermillExecutionError with the cell's exception
            return NotebookResult(path.stem, False, time.perf_counter() - start, last_error_line(err))
    seconds = time.perf_counter() - start
    try:
        write_takeaways(executed, staging / "takeaways.json")
        render_html(executed, staging / f"{path.stem}.html")
        if parent is not None and os.getppid() != parent:
            shutil.rmtree(staging, ignore_errors=True)
            return NotebookResult(path.stem, False, seconds, "its run ended before it finished; nothing published")
        with publishing():  # a stop asked for now waits for the two renames
            publish.publish(staging, figures_dir / path.stem)
    except OSError as err:  # a full or failing disk: the previous figures stay, complete
        shutil.rmtree(staging, ignore_errors=True)
        return NotebookResult(path.stem, False, seconds, f"could not publish ({err.strerror or err}); previous "
                                                         f"figures kept")
    return NotebookResult(path.stem, True, seconds)


class CacheNotes:
    """papermill's ``stderr_file``: the kernel's ``[sinklib] ...`` notes (a cache rebuilt, a model converted) echoed
    to this terminal with the notebook's name -- not only inside the executed notebook -- and nothing else of its
    stderr (progress bars stay in the notebook)."""

    def __init__(self, stem: str):
        self.stem, self._partial = stem, ""

    def write(self, text: str) -> None:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in (x.rsplit("\r", 1)[-1] for x in lines):  # what a terminal shows of a line a bar redrew
            if line.startswith("[sinklib] "):
                print(f"      {self.stem}: {line}", file=sys.stderr, flush=True)

    def flush(self) -> None:
        pass


# Folders named by the environment: a kernel runs in notebooks/, so a relative one would name another folder there
PATH_VARIABLES = ("SINKLIB_CACHE", "HF_HOME", "HF_HUB_CACHE")


def absolute_paths(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with each of :data:`PATH_VARIABLES` made absolute against this process's working directory (a run
    started with ``SINKLIB_CACHE=build/cache`` from the repository used to build its models under
    ``notebooks/build/cache``, where the kernel runs)."""
    return {k: str(Path(v).expanduser().resolve()) if k in PATH_VARIABLES and v else v for k, v in env.items()}


def run_isolated(path: Path, env: dict[str, str] | None = None, **kwargs) -> NotebookResult:
    """:func:`run_notebook` (same keywords) in a child process whose environment is this one's plus ``env``.

    Runs that need different environments -- another cache, a fake CUDA device, a hub cache -- can then share one
    pool of threads: each kernel inherits its own child's environment, and no thread changes ``os.environ`` under
    another. A child that dies before it reports gives a failed result with its last line of stderr."""
    args = {"path": str(path), **{k: str(v) if isinstance(v, Path) else v for k, v in kwargs.items()}}
    start = time.perf_counter()
    child = subprocess.run([sys.executable, "-m", "sinklib.pipeline.runner", json.dumps(args)],
                           env=absolute_paths({**os.environ, **(env or {})}), capture_output=True, text=True)
    lines = child.stdout.strip().splitlines()
    if child.returncode or not lines:
        err = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return NotebookResult(path.stem, False, time.perf_counter() - start, f"child exited {child.returncode}: {err}")
    return NotebookResult(**json.loads(lines[-1]))


def _run_from_json(payload: str) -> None:
    """``python -m sinklib.pipeline.runner '<json>'``: the child of :func:`run_isolated` and :func:`run_all`; prints
    the result as JSON (and writes it to ``result_path`` when given). SIGTERM stops it as Ctrl-C would: papermill
    shuts the kernel down, nothing is published; so does the death of the run (``parent``), and neither splits a
    publish (:class:`~sinklib.pipeline.stopping.StopGuard`)."""
    args = json.loads(payload)
    path = Path(args.pop("path"))
    result_path = args.pop("result_path", None)
    for key in ("figures_dir", "build_dir"):
        args[key] = Path(args[key])

    def stop() -> None:  # a stop from the run, or its death: kill the kernel at once (no traceback of its cell), exit
        stopping.kill_kernels()
        shutil.rmtree(publish.staging_root(args["figures_dir"]), ignore_errors=True)
        if result_path:
            with contextlib.suppress(OSError):
                Path(result_path).write_text(json.dumps(asdict(NotebookResult(
                    path.stem, False, 0.0, "interrupted; previous figures kept"))), encoding="utf-8")
        os._exit(130)

    guard = stopping.StopGuard(stop)
    guard.install()
    if args.get("parent") is not None:
        stopping.watch_parent(args["parent"], guard.request)
    result = run_notebook(path, **args, publishing=guard.publishing)
    shutil.rmtree(publish.staging_root(args["figures_dir"]), ignore_errors=True)  # this child's staging area
    if result_path:
        Path(result_path).write_text(json.dumps(asdict(result)))
    else:
        print(json.dumps(asdict(result)))


class _Children:
    """The child processes of a run (:func:`run_all`), so that Ctrl-C can stop every one of them at once."""

    def __init__(self):
        import threading

        self.procs: dict[str, subprocess.Popen] = {}
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def run(self, book: Path, result_dir: Path, **kwargs) -> NotebookResult:
        """:func:`run_notebook` in a child process of its own session (the terminal's Ctrl-C reaches this process
        only); its output streams to this terminal, its result comes back through a file."""
        result = result_dir / f"{book.stem}.json"
        result.unlink(missing_ok=True)
        args = {"path": str(book), "result_path": str(result), "parent": os.getpid(),
                **{k: str(v) if isinstance(v, Path) else v for k, v in kwargs.items()}}
        start = time.perf_counter()
        with self._lock:
            if self.stopping.is_set():
                return NotebookResult(book.stem, False, 0.0, "not started: the run was interrupted")
            proc = subprocess.Popen([sys.executable, "-m", "sinklib.pipeline.runner", json.dumps(args)],
                                    start_new_session=True)
            self.procs[book.stem] = proc
        code = proc.wait()
        with self._lock:
            self.procs.pop(book.stem, None)
        if self.stopping.is_set():
            return NotebookResult(book.stem, False, time.perf_counter() - start, "interrupted; previous figures kept")
        try:
            return NotebookResult(**json.loads(result.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return NotebookResult(book.stem, False, time.perf_counter() - start,
                                  f"child exited {code} without a result")

    def stop(self, grace_s: float = 10.0) -> None:
        """Ask every running child to stop (SIGTERM: it kills its kernel and leaves), then -- after ``grace_s`` --
        SIGKILL what is left: the child and every process it started (its kernel runs in a session of its own, and
        a kernel left alive would keep the run's output pipes open until its cell ends)."""
        import psutil

        with self._lock:
            self.stopping.set()
            procs = list(self.procs.values())
        family: list[psutil.Process] = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                family += psutil.Process(proc.pid).children(recursive=True)  # before the child can die and orphan them
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
        deadline = time.perf_counter() + grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.perf_counter()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(psutil.Error):
                    family += psutil.Process(proc.pid).children(recursive=True)
                proc.kill()
                proc.wait()
        for p in family:
            with contextlib.suppress(psutil.Error):
                p.kill()


def run_all(
    profile: str = "cpu", model: str = "", device: str = "", seed: int = 0, only: list[str] | None = None,
    figures_dir: str | Path = "figures", build_dir: str | Path = "build", notebook_dir: Path = NOTEBOOK_DIR,
    jobs: int | None = None,
) -> int:
    """Run the notebooks (``jobs`` at a time; None: :func:`default_jobs`), print the summary, build the gallery;
    return the exit status (1 if any failed, 130 when interrupted by Ctrl-C, 143 when stopped by SIGTERM)."""
    # The "python3" kernel must be this interpreter (the one with sinklib installed), whatever PATH says.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    figures_dir, build_dir = Path(figures_dir).resolve(), Path(build_dir).resolve()
    os.environ.update(absolute_paths({k: os.environ[k] for k in PATH_VARIABLES if os.environ.get(k)}))
    from sinklib.pipeline.profiles import PROFILES

    if profile not in PROFILES:  # refused here, before any kernel starts
        raise InputError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}.")
    from sinklib.core.loaded import resolve_device

    resolve_device(device or PROFILES[profile].device)  # CUDA asked for on a CPU machine: one line now, not per kernel
    books = discover(notebook_dir, only)
    unreadable = unreadable_notebooks(books)
    for res in unreadable.values():
        print(f"warning: {res.message}", flush=True)
    from sinklib.pipeline.protocols import route

    models, line = route(model, [b.stem for b in books], explicit=only is not None)
    if line:
        print(line, flush=True)
    jobs = max(1, min(jobs or default_jobs(profile), len(books)))
    slots = gpu_slots(profile, device, jobs)  # JOBS=N on N GPUs: each notebook its own
    if slots:
        jobs = len(slots)
        print(f"{jobs} GPUs: each notebook runs on its own ({', '.join(slots)})", flush=True)
    publish.preflight({"figures folder": figures_dir, "build folder": build_dir}, [b.stem for b in books],
                      figures_dir)  # before the first notebook: a full or read-only folder is found now
    with publish.FolderLock(figures_dir, "figures folder"), publish.FolderLock(build_dir, "build folder"):
        for line in publish.recover(figures_dir):
            print(line, flush=True)
        return _run_locked(books, models, slots, jobs, profile=profile, device=device, seed=seed,
                           figures_dir=figures_dir, build_dir=build_dir, unreadable=unreadable)


def _run_locked(books: list[Path], models: dict[str, str], slots: list[str], jobs: int, *, profile: str, device: str,
                seed: int, figures_dir: Path, build_dir: Path, unreadable: dict[str, NotebookResult]) -> int:
    """:func:`run_all` once it holds its folders: the pool of child processes, the summary, the gallery."""
    from concurrent.futures import ThreadPoolExecutor, wait

    from sinklib.pipeline.gallery import build_gallery

    free = queue.SimpleQueue()
    for slot in slots:
        free.put(slot)
    side_by_side, after = order_notebooks([b for b in books if b.stem not in unreadable], figures_dir, profile, jobs)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    print(f"{len(books)} notebooks, {jobs} at a time ({threads} thread(s) each)", flush=True)
    results: dict[str, NotebookResult] = dict(unreadable)
    cold = caches_empty(cache_dir())  # read before the first notebook writes there
    started = time.perf_counter()
    env = {"MPLBACKEND": INLINE_BACKEND, "SINKLIB_HEADLESS": "1"}  # once for every kernel, before the threads start
    if jobs > 1:
        env |= thread_env(threads)
    count = iter(range(1, len(books) + 1))
    children = _Children()
    result_dir = build_dir / "results"
    result_dir.mkdir(parents=True, exist_ok=True)

    def one(book: Path) -> NotebookResult:
        if children.stopping.is_set():
            return NotebookResult(book.stem, False, 0.0, "not started: the run was interrupted")
        done = [b for b in books if b.stem in results]
        eta = progress([b for b in books if b not in done], figures_dir, profile, time.perf_counter() - started,
                       jobs)
        mine = models[book.stem]
        where = free.get() if slots else device
        print(f"[{next(count)}/{len(books)}] {book.stem} (profile={profile}{', model=' + mine if mine else ''}"
              f"{', device=' + where if where else ''}) {eta}", flush=True)
        try:
            res = children.run(book, result_dir, profile=profile, model=mine, device=where, seed=seed,
                               figures_dir=figures_dir, build_dir=build_dir, progress_bar=jobs == 1)
        finally:
            if slots:
                free.put(where)
        status = "ok" if res.ok else f"FAILED: {res.message} (previous figures kept; see {build_dir}/notebooks)"
        print(f"      {book.stem}: {status} in {res.seconds:.1f} s", flush=True)
        results[book.stem] = res
        return res

    stop_code, ignored = 0, {}  # 130 after Ctrl-C, 143 after SIGTERM
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        with kernel_env(**env), stopping.terminate_as_interrupt():
            wait([pool.submit(one, b) for b in side_by_side])
            for book in after:
                one(book)
    except KeyboardInterrupt as stop:
        stop_code = 143 if isinstance(stop, stopping.Terminated) else 130
        ignored = stopping.ignore_stop_signals()
        print(f"\n{'terminated' if stop_code == 143 else 'interrupted'}: stopping {len(children.procs)} running "
              f"notebook(s); nothing half-done is published", flush=True)
        children.stop()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    wall = time.perf_counter() - started
    ordered = [results.get(b.stem) or NotebookResult(b.stem, False, 0.0, "not started: the run was interrupted")
               for b in books]
    print(summary_table(ordered, profile, wall=wall, jobs=jobs, cold=cold), flush=True)
    code = stop_code or (0 if all(r.ok for r in ordered) else 1)
    try:
        if stop_code and not any(r.ok for r in ordered):  # nothing published: the gallery is as it was; a stop is
            print(f"gallery: unchanged ({figures_dir / 'index.html'})")  # at once, not after a rebuild under load
        else:
            print(f"gallery: {build_gallery(figures_dir)}")
    except (KeyboardInterrupt, Exception) as err:  # the notebooks' results are published: one line, not a traceback
        what = "interrupted" if isinstance(err, KeyboardInterrupt) else f"{type(err).__name__}: {err}"
        print(f"gallery: not rebuilt ({what}); the published figures are kept -- rebuild it with python -m sinklib "
              f"gallery --figures-dir {figures_dir}", flush=True)
        code = code or (130 if isinstance(err, KeyboardInterrupt) else 1)
    finally:
        stopping.restore_signals(ignored)
    return code

if __name__ == "__main__":
    _run_from_json(sys.argv[1])
