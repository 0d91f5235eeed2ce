"""``make figures``: execute every notebook with papermill, keep good figures, summarise, build the gallery.

Each notebook writes into a staging folder private to the run; only when it succeeds does the staging folder replace
``figures/<notebook>/``, by renames that never leave a half-written folder (:mod:`sinklib.pipeline.publish`). A
failing notebook therefore never destroys that notebook's previous figures, and does not stop the others. One run
holds a figures folder and a build folder at a time (a second stops with the first's PID); the folders are checked
for room and writability before the first notebook. Each notebook runs in a child process: Ctrl-C stops them all at
once (their kernels shut down, nothing half-done is published), prints what finished and exits 130. The run ends
with a table (notebook, status, seconds) and a non-zero exit if anything failed.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from sinklib.core.errors import InputError
from sinklib.core.paths import NOTEBOOK_DIR, cache_dir
from sinklib.pipeline import publish
from sinklib.reproduction.environment import KERNEL_ISA_VARIABLES, thread_env

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
KERNEL_HASH_SEED = "0"  # PYTHONHASHSEED of every kernel


@dataclass
class NotebookResult:
    name: str
    ok: bool
    seconds: float
    message: str = ""


def discover(notebook_dir: Path = NOTEBOOK_DIR, only: list[str] | None = None) -> list[Path]:
    """Numbered notebooks in order; ``only`` filters by stem or number prefix (e.g. ``00`` or ``00_tour``)."""
    books = sorted(p for p in notebook_dir.glob("[0-9][0-9]_*.ipynb"))
    if only:
        books = [p for p in books if any(p.stem == o or p.stem.startswith(o + "_") for o in only)]
        if not books:
            raise InputError(f"no notebook matches {only}; available: "
                             f"{', '.join(p.stem for p in sorted(notebook_dir.glob('*.ipynb')))}")
    return books


def _last_error_line(err: BaseException) -> str:
    name = getattr(err, "ename", type(err).__name__)
    value = str(getattr(err, "evalue", err)).strip().splitlines()
    return f"{name}: {value[-1] if value else ''}"[:300]


def render_html(executed: Path, target: Path) -> Path | None:
    """The executed notebook as one self-contained HTML page (nbconvert's lab template; figures embedded), so the
    gallery can link to it and it opens without Jupyter. The template's two CDN scripts (require.js, MathJax) are
    left out: the page must open offline, where they fail to load (formulas then show as their TeX source). None
    (and a printed reason) when rendering fails: the figures matter more than this page."""
    try:
        import nbformat
        from nbconvert import HTMLExporter

        nb = nbformat.read(str(executed), as_version=4)
        # widget state (tqdm's progress bars in a kernel with ipywidgets) makes the page fetch a widget manager from a
        # CDN; without it each widget output shows its text form, which is what a static page can show anyway
        nb.metadata.pop("widgets", None)
        body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    except Exception as err:  # a missing template or a malformed output must not cost the figures
        print(f"      could not render {executed.name} to HTML ({_last_error_line(err)}); gallery links skip it")
        return None
    from sinklib.core.paths import atomic_write_bytes

    body = re.sub(r"<script[^>]*\bsrc=\"https?://[^\"]*\"[^>]*>\s*</script>", "", body)
    atomic_write_bytes(target, body.encode())
    return target


def write_takeaways(executed: Path, target: Path) -> Path:
    """The executed notebook's rendered "What we saw" paragraphs (:func:`sinklib.core.takeaways.collect`) as JSON
    beside its figures: the gallery shows what this run found, not what a notebook's source once said.
    ``kernel_env``: the variables its kernel inherited that change which kernels run and how they split -- the
    OpenMP / MKL threads (:func:`thread_env`), ``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``, ``MKL_CBWR`` (None:
    unset, the library's default) -- which ``make verify`` compares with the reference's."""
    from sinklib.core.results import write_json
    from sinklib.core.takeaways import collect

    kernel_env = {k: os.environ.get(k) for k in (*thread_env(1), *KERNEL_ISA_VARIABLES)}
    return write_json(target, {"notebook": executed.stem, "kernel_env": kernel_env,
                               "takeaways": collect(json.loads(executed.read_text(encoding="utf-8")))})


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
) -> NotebookResult:
    """Execute one notebook into a private staging folder and publish it (see the module docstring). ``parent``:
    the PID of the run this child belongs to -- if that run died meanwhile, nothing is published (another run may
    hold the folder by now)."""
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
                                kernel_name="python3", progress_bar=progress_bar)
        except Exception as err:  # papermill raises PapermillExecutionError with the cell's exception
            return NotebookResult(path.stem, False, time.perf_counter() - start, _last_error_line(err))
    seconds = time.perf_counter() - start
    try:
        write_takeaways(executed, staging / "takeaways.json")
        render_html(executed, staging / f"{path.stem}.html")
        if parent is not None and os.getppid() != parent:
            shutil.rmtree(staging, ignore_errors=True)
            return NotebookResult(path.stem, False, seconds, "its run ended before it finished; nothing published")
        with _signals_held():  # a stop asked for now waits for the two renames
            publish.publish(staging, figures_dir / path.stem)
    except OSError as err:  # a full or failing disk: the previous figures stay, complete
        shutil.rmtree(staging, ignore_errors=True)
        return NotebookResult(path.stem, False, seconds, f"could not publish ({err.strerror or err}); previous "
                                                         f"figures kept")
    return NotebookResult(path.stem, True, seconds)


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM (in the main thread) for the block: they are delivered when it ends."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


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
    shuts the kernel down, nothing is published."""
    import signal

    args = json.loads(payload)
    path = Path(args.pop("path"))
    result_path = args.pop("result_path", None)
    for key in ("figures_dir", "build_dir"):
        args[key] = Path(args[key])

    def stop(signum, frame):  # a stop from the run: kill the kernel at once (no traceback of its cell), report, exit
        _kill_kernels()
        shutil.rmtree(publish.staging_root(args["figures_dir"]), ignore_errors=True)
        if result_path:
            Path(result_path).write_text(json.dumps(asdict(NotebookResult(
                path.stem, False, 0.0, "interrupted; previous figures kept"))), encoding="utf-8")
        os._exit(130)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    result = run_notebook(path, **args)
    shutil.rmtree(publish.staging_root(args["figures_dir"]), ignore_errors=True)  # this child's staging area
    if result_path:
        Path(result_path).write_text(json.dumps(asdict(result)))
    else:
        print(json.dumps(asdict(result)))


def _kill_kernels() -> None:
    """SIGKILL every descendant of this process (the notebook's kernel runs in a session of its own, so no signal
    to this process reaches it) and remove the kernels' connection files."""
    import psutil

    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            cmd = proc.cmdline()
            proc.kill()
            for i, arg in enumerate(cmd[:-1]):
                if arg == "-f" and cmd[i + 1].endswith(".json"):
                    Path(cmd[i + 1]).unlink(missing_ok=True)


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
    """How long ``stem`` took the last time it ran with ``profile`` here (its headline.json), if known."""
    try:
        headline = json.loads((Path(figures_dir) / stem / "headline.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return float(headline["seconds"]) if headline.get("profile") == profile and "seconds" in headline else None


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


def _schedule(books: list[Path], figures_dir: Path, profile: str, jobs: int = 2) -> tuple[list[Path], list[Path]]:
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


def run_all(
    profile: str = "cpu", model: str = "", device: str = "", seed: int = 0, only: list[str] | None = None,
    figures_dir: str | Path = "figures", build_dir: str | Path = "build", notebook_dir: Path = NOTEBOOK_DIR,
    jobs: int | None = None,
) -> int:
    """Run the notebooks (``jobs`` at a time; None: :func:`default_jobs`), print the summary, build the gallery;
    return the exit status (1 if any failed, 130 when interrupted by Ctrl-C)."""
    # The "python3" kernel must be this interpreter (the one with sinklib installed), whatever PATH says.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    figures_dir, build_dir = Path(figures_dir).resolve(), Path(build_dir).resolve()
    os.environ.update(absolute_paths({k: os.environ[k] for k in PATH_VARIABLES if os.environ.get(k)}))
    from sinklib.pipeline.profiles import PROFILES

    if profile not in PROFILES:  # refused here, before any kernel starts
        raise InputError(f"unknown profile {profile!r}; use one of {', '.join(PROFILES)}.")
    books = discover(notebook_dir, only)
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
                           figures_dir=figures_dir, build_dir=build_dir)


def _run_locked(books: list[Path], models: dict[str, str], slots: list[str], jobs: int, *, profile: str, device: str,
                seed: int, figures_dir: Path, build_dir: Path) -> int:
    """:func:`run_all` once it holds its folders: the pool of child processes, the summary, the gallery."""
    from concurrent.futures import ThreadPoolExecutor, wait

    from sinklib.pipeline.gallery import build_gallery

    free = queue.SimpleQueue()
    for slot in slots:
        free.put(slot)
    side_by_side, after = _schedule(books, figures_dir, profile, jobs)
    threads = max(1, (os.cpu_count() or 1) // jobs)
    print(f"{len(books)} notebooks, {jobs} at a time ({threads} thread(s) each)", flush=True)
    results: dict[str, NotebookResult] = {}
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

    interrupted = False
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        with kernel_env(**env):
            wait([pool.submit(one, b) for b in side_by_side])
            for book in after:
                one(book)
    except KeyboardInterrupt:
        interrupted = True
        import signal

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # one Ctrl-C is enough: the rest of the stop is not interrupted
        print(f"\ninterrupted: stopping {len(children.procs)} running notebook(s); nothing half-done is published",
              flush=True)
        children.stop()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    wall = time.perf_counter() - started
    ordered = [results.get(b.stem) or NotebookResult(b.stem, False, 0.0, "not started: the run was interrupted")
               for b in books]
    print(summary_table(ordered, profile, wall=wall, jobs=jobs, cold=cold), flush=True)
    if interrupted and not any(r.ok for r in ordered):  # nothing published: the gallery is as it was; a stop is at
        print(f"gallery: unchanged ({figures_dir / 'index.html'})")  # once, not after a rebuild under load
    else:
        print(f"gallery: {build_gallery(figures_dir)}")
    if interrupted:
        import signal

        signal.signal(signal.SIGINT, signal.default_int_handler)
        return 130
    return 0 if all(r.ok for r in ordered) else 1


if __name__ == "__main__":
    _run_from_json(sys.argv[1])
