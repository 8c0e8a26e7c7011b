"""The queue's API writes, made off the scheduling loop: FluxJob creates, un-suspend patches,
binds of a Job's pods, status patches, the un-gating of gated pods.

No Kueue piece does this: Kueue's reconcilers each write from a goroutine of their own. Here
one loop thread runs the scheduler and the queue, so it never waits for the API server: a
write joins a pool of ``workers`` threads, its answer comes back on :attr:`Writes.done` and is
applied by the loop at the start of a later cycle (:meth:`Writes.collect`), and the first answer
after a collect wakes the loop (the answer to a write is work no watch event announces: a Job's
un-suspend answered after its watch event came, the last write of a burst). With one worker
each write is made in place, in order.

>>> writes = Writes(workers=1)
>>> seen = []
>>> writes.write(lambda: 42, seen.append)
>>> seen
[42]
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from fluxinfra.queue.workload import log
from fluxinfra.scheduler.binder import done as done_future
from fluxinfra.scheduler.kube import ApiError

__all__ = ["Writes", "guarded"]


class Writes:
    def __init__(self, workers: int) -> None:
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="queue") \
            if workers > 1 else None
        #: writes answered and not applied yet: (what to do with the answer, the answer)
        self.done: queue.SimpleQueue[tuple[Callable[[Any], None], Any]] = queue.SimpleQueue()
        self.in_flight = 0
        self.waker: Callable[[], None] | None = None
        self._wake_lock = threading.Lock()
        self._wake_owed = False  # a wake sent, the loop not yet collecting

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """``fn(*args)`` on the queue's pool (at once without one); its Future."""
        if self.pool is None:
            return done_future(fn(*args))
        return self.pool.submit(fn, *args)

    def map(self, fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
        if self.pool is None or len(items) < 2:
            return [fn(i) for i in items]
        return list(self.pool.map(fn, items))

    def write(self, call: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """Make one API write; ``then(result)`` runs on the loop's thread once it is back.

        With a pool the loop does not wait: the write joins the pool's queue (at most
        ``workers`` in flight; the rest wait their turn in submission order) and ``then``
        runs at the start of a later cycle (:meth:`collect`). ``call`` returns its
        ``ApiError`` rather than raising it.
        """
        if self.pool is None:
            then(guarded(call))
            return
        self.in_flight += 1
        self.pool.submit(self._run, call, then)

    def _run(self, call: Callable[[], Any], then: Callable[[Any], None]) -> None:
        """On a pool thread: the write, its result handed to the loop, and the loop woken
        (once until it collects)."""
        self.done.put((then, guarded(call)))
        with self._wake_lock:
            if self._wake_owed:
                return
            self._wake_owed = True
        waker = self.waker
        if waker is not None:
            waker()

    def due(self) -> float | None:
        """With writes out and no waker to say when they are back, a short poll."""
        return 0.05 if self.in_flight and self.waker is None else None

    def collect(self, wait: float = 0.0) -> int:
        """Apply the results of the writes that are back (waiting up to ``wait`` seconds for
        every write in flight to return); returns how many are still in flight."""
        deadline = time.monotonic() + wait
        with self._wake_lock:
            self._wake_owed = False  # a write answered from now on wakes the loop again
        while self.in_flight:
            try:
                left = deadline - time.monotonic()
                then, result = (self.done.get(timeout=left) if left > 0
                                else self.done.get_nowait())
            except queue.Empty:
                break
            self.in_flight -= 1
            then(result)
        return self.in_flight

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)


def guarded(call: Callable[[], Any]) -> Any:
    """``call()``, or the exception it raised (a write's failure is its result)."""
    try:
        return call()
    except ApiError as exc:
        return exc
    except Exception as exc:  # noqa: BLE001 - handed to the loop, which counts it
        log.warning("API write failed: %s", exc, exc_info=True)
        return exc
