"""How a run and its notebooks' children stop: on Ctrl-C, on SIGTERM, or when the run that started a child dies --
never in the middle of a publish.

* :class:`StopGuard`: a child's one way to stop. A signal or the run's death asks it to stop; while the child is
  publishing (:meth:`StopGuard.publishing`, the two renames of :func:`sinklib.pipeline.publish.publish`) the stop
  waits for the publish to end. Python runs a signal's handler in the main thread, whichever of the child's threads
  the operating system delivered it to, so a handler that only records the stop cannot split a publish -- blocking
  the signal in the main thread alone could (another thread took it, and the handler ran mid-rename).
* :func:`watch_parent`: a child whose run died (SIGKILL, a crash) stops by itself: its kernel lives in a session of
  its own and would otherwise run to the end of the notebook.
* :func:`kill_kernels`: every process the child started, killed, with its kernel's connection file.
* :func:`terminate_as_interrupt`: in the run itself, SIGTERM stops the children as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PARENT_POLL_S = 0.5  # how often a child looks for the run that started it


class StopGuard:
    """``guard.request()`` stops now, or -- inside ``with guard.publishing():`` -- as soon as the publish ends.

    ``stop`` does the stopping (it does not return: it ends the process). Requests may come from the main thread (a
    signal handler) or another thread (:func:`watch_parent`); the re-entrant lock lets a handler that interrupts the
    main thread inside :meth:`publishing` take it again."""

    def __init__(self, stop: Callable[[], None]):
        self._stop = stop
        self._lock = threading.RLock()
        self._publishing = False
        self.pending = False

    def request(self, *_signal_args) -> None:
        """Stop now, or record the stop for the end of the publish in progress (a signal handler's signature)."""
        with self._lock:
            if self._publishing:
                self.pending = True
                return
        self._stop()

    @contextlib.contextmanager
    def publishing(self) -> Iterator[None]:
        """The block a stop may not interrupt; a stop asked for meanwhile runs when it ends (even on an error)."""
        with self._lock:
            self._publishing = True
        try:
            yield
        finally:
            with self._lock:
                self._publishing = False
                pending = self.pending
            if pending:
                self._stop()

    def install(self) -> None:
        """Route SIGINT and SIGTERM to :meth:`request` (from the main thread)."""
        for sig in STOP_SIGNALS:
            signal.signal(sig, self.request)


def watch_parent(parent: int, on_death: Callable[[], None], poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """A daemon thread that calls ``on_death()`` once the process ``parent`` is no longer this one's parent (it
    died: the child was handed to init or a subreaper)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        on_death()

    thread = threading.Thread(target=watch, name="sinklib-watch-parent", daemon=True)
    thread.start()
    return thread


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM for the block when called in the main thread of a process with no
    :class:`StopGuard` (a notebook run in-process): they are delivered when it ends."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def kill_kernels() -> None:
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


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the run's main thread where Ctrl-C raises KeyboardInterrupt: the same stop, exit 143."""


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """In the block (main thread only), SIGTERM raises :class:`Terminated`; the previous handler is put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def ignore_stop_signals() -> dict:
    """Ignore SIGINT and SIGTERM (main thread only) while a stop is carried out -- one stop is enough, the rest of
    it is not interrupted; returns the handlers :func:`restore_signals` puts back."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, signal.SIG_IGN) for sig in STOP_SIGNALS}


def restore_signals(handlers: dict) -> None:
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
