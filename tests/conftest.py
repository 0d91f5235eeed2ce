import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# Triton kernels on the fake CUDA device run in Triton's interpreter, which must be chosen before Triton is first
# imported (loading a model imports it): its own library functions are decorated for one mode at import
os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ["TRITON_INTERPRET"] == "1":  # an older Triton's interpreter under NumPy >= 2.4 (a GPU host's image)
    from tests.fake_cuda import triton_interpreter_index_fix

    triton_interpreter_index_fix()
torch.set_num_threads(max(1, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def tiny():
    from sinklib.models.load import load_model

    return load_model("tiny-llama-random", device="cpu", seed=0)


@pytest.fixture(scope="session")
def smollm2():
    from sinklib.models.load import load_model

    return load_model("smollm2-135m", device="cpu")


@pytest.fixture(scope="session")
def tiny_gemma3():
    """Builds a tiny random Gemma-3 (a sliding-window layer, then a full one; logit soft-capping), seeded, eval mode."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    def build(sliding_window: int, softcap: float) -> Gemma3ForCausalLM:
        config = Gemma3TextConfig(
            vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16, sliding_window=sliding_window,
            layer_types=["sliding_attention", "full_attention"], attn_logit_softcapping=softcap,
        )
        torch.manual_seed(0)
        return Gemma3ForCausalLM(config).eval()

    return build


class Jobs:
    """The session's long runs -- every notebook run and the exercise solutions, each in its own child process --
    in one pool of two workers with a thread each, started before the first test and longest first.

    A test module declares its runs in ``plan_jobs(tmp_path_factory) -> {key: (estimated seconds, call)}``; its
    fixtures then wait for :meth:`result`. One pool instead of one per sweep: no worker idles at the end of a sweep
    while the next waits, and the unit tests run beside the runs instead of before them."""

    def __init__(self) -> None:
        self._futures: dict = {}
        self._pool = None
        self.seconds: dict[str, float] = {}

    def start(self, planned: dict) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if not planned:
            return
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="sinklib-job")
        for key, (_, call) in sorted(planned.items(), key=lambda kv: -kv[1][0]):
            self._futures[key] = self._pool.submit(self._timed, key, call)

    def _timed(self, key: str, call):
        import time

        start = time.perf_counter()
        try:
            return call()
        finally:
            self.seconds[key] = time.perf_counter() - start

    def planned(self) -> list[str]:
        return list(self._futures)

    def result(self, key: str):
        if key not in self._futures:
            raise KeyError(f"job {key!r} was not planned: its module's plan_jobs did not return it")
        return self._futures[key].result()

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)


_JOBS = pytest.StashKey[Jobs]()


def pytest_collection_modifyitems(session, config, items):
    """The tests that read the pool's runs go last (in their order), so every other test runs beside the pool
    instead of waiting behind a test that waits for a run."""
    items[:] = sorted(items, key=lambda item: "jobs" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def jobs(_jobs_started):
    """The session's :class:`Jobs` (started by :func:`_jobs_started`)."""
    return _jobs_started


@pytest.fixture(scope="session", autouse=True)
def _jobs_started(request, tmp_path_factory):
    """Start the runs of every module with ``plan_jobs`` that has a selected test reading them (through the ``jobs``
    fixture): selecting one cheap test of such a module starts nothing."""
    planned = {}
    modules = {item.module for item in request.session.items if "jobs" in getattr(item, "fixturenames", ())}
    for module in modules:
        if hasattr(module, "plan_jobs"):
            planned |= module.plan_jobs(tmp_path_factory)
    pool = request.config.stash[_JOBS] = Jobs()
    pool.start(planned)
    if planned:  # two kernels already use both cores: the tests beside them take one thread
        torch.set_num_threads(1)
    yield pool
    pool.shutdown()


def pytest_terminal_summary(terminalreporter, config):
    pool = config.stash.get(_JOBS, None)
    if pool and pool.seconds:
        terminalreporter.section("sinklib jobs (seconds, two at a time)")
        for key, sec in sorted(pool.seconds.items(), key=lambda kv: -kv[1]):
            terminalreporter.write_line(f"{sec:8.1f}  {key}")


@pytest.fixture
def rate_settled(monkeypatch):
    """03's sink rates taken as settled (no cross-machine margin on their 2% cuts), for tests of the other gates of
    sinklib.mitigation.verdicts: the measured margin (SEED_SHARE_RATE_MARGIN, 0.071) is wider than the cut itself, so
    with it no removal is ever settled at this scale (test_the_share_rate_margin_leaves_no_removal_settled_at_this_scale)."""
    from sinklib.mitigation import verdicts

    monkeypatch.setitem(verdicts.MACHINE_MARGINS, "share sink rate", (0.0, 0.0))
    monkeypatch.setitem(verdicts.MACHINE_MARGINS, "sink rate", (0.0, 0.0))
