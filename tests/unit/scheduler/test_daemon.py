"""The daemon loop for real: informer threads, the apply/schedule loop, /healthz and /metrics,
the loop sleeping when idle and waking for timed work, and the watchdog."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

from fluxinfra.scheduler.binder import KubeBinder
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.kube import ApiError
from fluxinfra.scheduler.metrics import Metrics, serve_http
from fluxinfra.scheduler.runner import Runner

from .kube_double import KubeApiDouble, make_node, make_pod


def wait_for(predicate, timeout: float = 20.0, state=None) -> None:
    """Wait until ``predicate()``; on timeout, say what ``state()`` reports."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out; {state() if state else ''}"
        time.sleep(0.05)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_daemon_binds_watched_pods_and_serves_health_and_metrics() -> None:
    api = KubeApiDouble()
    api.create("nodes", make_node("n0", cpu="8", memory="32Gi"))
    api.create("pods", make_pod("early", cpu="2"))
    metrics = Metrics()
    binder = KubeBinder(api, metrics=metrics, workers=4, async_events=True)
    core = SchedulerCore(FluxionAllocator(), binder, metrics=metrics)
    runner = Runner(api, core)
    server = serve_http(metrics, runner.health, "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    assert get(base + "/healthz")[0] == 503, "not ready before the initial sync"
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: api.get("pods", "default/early")["spec"].get("nodeName"))
        wait_for(lambda: get(base + "/healthz") == (200, "ok\n"))
        for i in range(3):  # arrive through the watch
            api.create("pods", make_pod(f"late{i}", cpu="2"))
        wait_for(lambda: all(api.get("pods", f"default/late{i}")["spec"].get("nodeName")
                             for i in range(3)))
        binder.flush()
        # the loop takes the binds' results in after they return
        wait_for(lambda: "fluxinfra_scheduler_pods_bound_total 4" in get(base + "/metrics")[1])
        status, text = get(base + "/metrics")
        assert status == 200
        assert "fluxinfra_scheduler_queue_depth 0" in text
        assert 'fluxinfra_scheduler_match_duration_seconds_bucket{le="+Inf"}' in text
        # The core reports Scheduled after the bind returns, so the last Event may still be on
        # its way when the pods already show their nodeName.
        wait_for(lambda: len([e for e in api.events if e["reason"] == "Scheduled"]) == 4)
    finally:
        runner.stop()
        thread.join(10)
        server.shutdown()
        binder.close()
    assert not thread.is_alive()


def test_forbidden_initial_list_is_a_clear_error() -> None:
    import pytest

    from fluxinfra.scheduler.runner import StartupError

    api = KubeApiDouble()
    api.fail_next("list_pods", 403)
    runner = Runner(api, SchedulerCore(FluxionAllocator(), KubeBinder(api)))
    with pytest.raises(StartupError, match="listing pods failed: 403.*ClusterRole"):
        runner.start()


class Daemon:
    """A runner on the API double in a thread, stopped by the context manager."""

    def __init__(self, api: KubeApiDouble, config: SchedulerConfig | None = None,
                 **runner_args) -> None:
        self.api = api
        self.binder = KubeBinder(api)
        self.core = SchedulerCore(FluxionAllocator(), self.binder, config)
        self.runner = Runner(api, self.core, **runner_args)
        self.thread = threading.Thread(target=self.runner.run, daemon=True)

    def __enter__(self) -> Daemon:
        self.thread.start()
        wait_for(lambda: self.core.ready)
        return self

    def __exit__(self, *exc: object) -> None:
        self.runner.stop()
        self.thread.join(10)
        self.binder.close()
        assert not self.thread.is_alive()

    def bound(self, pod: str) -> str:
        return self.api.get("pods", f"default/{pod}")["spec"].get("nodeName", "")

    def state(self) -> dict:
        """What the daemon is doing (for a wait that timed out)."""
        r = self.runner
        return {"loop alive": self.thread.is_alive(), "wakeups": r.wakeups, "cycles": r.cycles,
                "queued events": r.events.qsize(), "busy since": r.busy_since,
                "last cycle": r.last_cycle, "pending pods": self.core.pending_pods(),
                "informers": {kind: (inf.synced.is_set(), sorted(inf.store))
                              for kind, inf in r.informers.items()},
                "threads": sorted(t.name for t in threading.enumerate())}


def test_an_idle_scheduler_does_no_work() -> None:
    """No events and nothing due: the loop sleeps (it used to run a cycle every second)."""
    api = KubeApiDouble()
    api.create("nodes", make_node("n0"))
    api.create("pods", make_pod("p0"))
    with Daemon(api) as d:
        wait_for(lambda: d.bound("p0"))
        # the bind comes back through the watch (one more wakeup): wait until that is in
        store = d.runner.informers["pods"].store
        wait_for(lambda: all(p["spec"].get("nodeName") for p in store.values())
                 and d.runner.events.empty() and d.runner.busy_since is None)
        time.sleep(0.5)
        wakeups, cycles = d.runner.wakeups, d.runner.cycles
        time.sleep(2.5)
        assert (d.runner.wakeups, d.runner.cycles) == (wakeups, cycles)
        assert d.core.metrics.loop_wakeups.value() == wakeups
        api.create("pods", make_pod("p1"))  # an event wakes it
        wait_for(lambda: d.bound("p1"), state=d.state)
        assert d.runner.cycles > cycles


def test_the_loop_wakes_for_a_bind_retry_without_any_event() -> None:
    api = KubeApiDouble()
    api.create("nodes", make_node("n0"))
    api.fail_next("bind", 500)
    api.create("pods", make_pod("p0"))
    with Daemon(api, SchedulerConfig(bind_retry_after=0.5)) as d:
        wait_for(lambda: d.bound("p0"), timeout=10)
        assert api.calls["bind"] == 2, "failed once, retried after the cool-down"


def test_watchdog_fails_health_while_one_cycle_hangs_and_recovers() -> None:
    """A bind that never returns freezes the loop: /healthz must say so (the Lease alone
    must not keep such a scheduler in charge); when the call returns, health comes back."""
    api = KubeApiDouble()
    api.create("nodes", make_node("n0"))
    release = threading.Event()
    real_bind = api.bind

    def hanging_bind(*args) -> None:
        release.wait(20)
        real_bind(*args)

    api.bind = hanging_bind  # type: ignore[method-assign]
    with Daemon(api, stall_seconds=0.5) as d:
        assert d.runner.health() == (True, "ok")
        api.create("pods", make_pod("p0"))
        wait_for(lambda: not d.runner.healthy(), timeout=10)
        ok, why = d.runner.health()
        assert not ok and why.startswith("scheduling loop stalled")
        assert d.runner.stalled() == why
        release.set()
        wait_for(lambda: d.bound("p0"))
        wait_for(d.runner.healthy)


def test_watchdog_fails_health_when_the_api_server_goes_silent() -> None:
    api = KubeApiDouble()
    api.create("nodes", make_node("n0"))
    with Daemon(api, watch_timeout=1, stall_seconds=0.5) as d:
        assert d.runner.healthy()

        def silent(*args, **kwargs):
            raise ApiError(0, "ReadTimeoutError", "Read timed out. (read timeout=31)")

        api.watch_objects = silent  # type: ignore[method-assign]
        api.list_objects = silent  # type: ignore[method-assign]
        wait_for(lambda: not d.runner.healthy(), timeout=10)
        assert "no answer from the API server" in d.runner.health()[1]


def test_a_burst_of_finished_binds_queues_one_wake() -> None:
    """Binds finishing on the binder's threads wake the loop with one marker at a time: a
    burst of 500 costs one wake-up and one cycle, not 500; once the loop has taken the marker,
    the next finished bind queues another (none is lost)."""
    api = KubeApiDouble()
    core = SchedulerCore(FluxionAllocator(), KubeBinder(api))
    runner = Runner(api, core)
    threads = [threading.Thread(target=lambda: [runner.wake() for _ in range(50)])
               for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert runner.events.qsize() == 1
    runner.apply_pending()
    assert runner.events.empty()
    runner.wake()
    runner.wake()
    assert runner.events.qsize() == 1


class _GatedBinds(KubeApiDouble):
    """The API double whose binds each wait for a permit (``gate.release()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Semaphore(0)

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        assert self.gate.acquire(timeout=30), "a bind waited 30 s for its permit"
        super().bind(namespace, pod, uid, node)


def test_binds_finishing_one_by_one_are_taken_in_together_and_the_last_at_once() -> None:
    """With nothing left to place, binds finishing one after another are taken in at most
    one cycle per burst gap (each used to cost a cycle of its own); the last one out is taken
    in at once, not a gap later, with every pod bound."""
    api = _GatedBinds()
    api.create("nodes", make_node("n0"))
    for i in range(20):
        api.create("pods", make_pod(f"p{i:02d}"))
    binder = KubeBinder(api, workers=20)
    core = SchedulerCore(FluxionAllocator(), binder)
    gap = 3.0  # long, so that the test does not depend on this machine's speed
    runner = Runner(api, core, burst_gap=gap)
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(core.inflight) == 20)
        assert not core.cycle_can_wait()  # the placed groups are dropped from the queue ...
        api.gate.release()  # ... by the cycle the first finished bind brings
        wait_for(lambda: len(core.inflight) == 19 and core.cycle_can_wait())
        cycles, t0 = runner.cycles, time.monotonic()
        for _ in range(17):
            api.gate.release()
            time.sleep(0.01)
        wait_for(lambda: len(core.inflight) - len(core._finished) == 2)
        assert runner.cycles - cycles <= (time.monotonic() - t0) / gap + 1
        wait_for(lambda: len(core.inflight) == 2, timeout=2 * gap)  # the gap's cycle came
        api.gate.release()  # one of the two: the loop sleeps out a gap ...
        wait_for(lambda: runner._napping)
        cycles, t0 = runner.cycles, time.monotonic()
        api.gate.release()  # ... which the last, with no bind out behind it, ends
        wait_for(lambda: not core.inflight)
        assert time.monotonic() - t0 < gap / 2 and runner.cycles > cycles
        assert not core.cycle_can_wait()
        assert all(p["spec"].get("nodeName") for p in api.objects["pods"].values())
    finally:
        api.gate.release(20)
        runner.stop()
        thread.join(10)
        binder.close()
