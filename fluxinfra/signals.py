"""Waiting for SIGTERM/SIGINT in a process full of threads (the scheduler, the service).

A Python signal handler runs only when the *main* thread runs bytecode, but the kernel hands a
process-directed signal to any thread that does not block it. When it lands in one of gRPC's or
a thread pool's threads while the main thread sleeps in a lock (``Event.wait()``, a queue
``get`` with a long timeout), the handler waits until that sleep ends: the kubelet's SIGTERM
was seen to go unanswered until its SIGKILL. So the signals are blocked in the calling thread
before any other thread exists (threads inherit the mask, including pool threads started
later) and taken synchronously with ``sigwait``, in the main thread or a thread of its own.

>>> import signal
>>> with termination_signals() as wait:
...     signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set())
True
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["TERMINATION", "signal_disposition", "termination_signals"]

TERMINATION = frozenset({signal.SIGTERM, signal.SIGINT})


@contextlib.contextmanager
def termination_signals() -> Iterator[Callable[[], int]]:
    """Block SIGTERM and SIGINT here and in every thread started from here inside the block;
    yields a function that waits for one of them and returns its number. The previous mask
    is restored on leaving (a signal still pending then is delivered as usual)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINATION)
    try:
        yield lambda: signal.sigwait(TERMINATION)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def signal_disposition(pid: int, signum: int = signal.SIGTERM, *, samples: int = 10,
                       interval: float = 0.05) -> dict[str, str]:
    """Thread id -> ``blocked``, ``sigwait`` (the thread waiting for it: the kernel unblocks
    the waited signals while it sleeps there) or ``open`` (the signal could land there), for
    each thread of process ``pid`` (Linux ``/proc``; how the tests check that no thread can
    swallow a SIGTERM). Read ``samples`` times: a thread seen in ``sigwait`` once is that one
    (on its way in or out of the wait it shows the signal unblocked for an instant)."""
    seen: dict[str, set[str]] = {}
    for n in range(samples):
        if n:
            time.sleep(interval)
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                status = (task / "status").read_text()
                wchan = (task / "wchan").read_text()
            except OSError:
                continue  # the thread ended meanwhile
            mask = int(next(ln.split()[1] for ln in status.splitlines()
                            if ln.startswith("SigBlk:")), 16)
            if mask & (1 << (signum - 1)):
                state = "blocked"
            else:
                state = "sigwait" if wchan.startswith("do_sigtimedwait") else "open"
            seen.setdefault(task.name, set()).add(state)
    return {tid: "sigwait" if "sigwait" in states else "open" if "open" in states
            else "blocked" for tid, states in seen.items()}
