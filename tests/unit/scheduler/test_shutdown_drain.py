"""Shutdown drains what the scheduler owes the API server: the binds already started, then every
queued Event and status write, within the grace period; what is left is logged and counted.

``SlowWriteServer`` is a TEST DOUBLE of the API server's write endpoints (``events.k8s.io/v1``
Events, pod and PodGroup status patches, pod bindings) on loopback, answering with the shapes
the real server gives (the object written, 201 / 200; a ``Status`` for a binding) after a
fixed delay per request: the production client (:class:`ClientKubeApi`, its connection pool)
talks to it over real HTTP.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest
from fluxqueue.http_double import JsonHandler

from fluxinfra.scheduler.binder import BindWorkers, KubeBinder
from fluxinfra.scheduler.client import ClientKubeApi, connect
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.metrics import Metrics
from fluxinfra.scheduler.pods import PodInfo, Request
from fluxinfra.scheduler.runner import Runner

from .kube_double import KubeApiDouble, make_node, make_pod


class SlowWriteServer(JsonHandler):
    """The API server's write endpoints, each answer ``delay`` seconds late (a test double)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as the real server: no 40 ms wait per answer
    delay = 0.0
    lock = threading.Lock()
    writes: list[tuple[str, str, Any]] = []
    connections: set[int] = set()

    def _answer(self, code: int) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        time.sleep(self.delay)
        with self.lock:
            self.writes.append((self.command, self.path, body))
            self.connections.add(self.client_address[1])
        if self.path.endswith("/binding"):
            body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "code": 201}
        self._reply(code, body)

    def do_POST(self) -> None:  # noqa: N802
        self._answer(201)

    def do_PATCH(self) -> None:  # noqa: N802
        self._answer(200)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture()
def slow_api() -> Iterator[ClientKubeApi]:
    from kubernetes import client

    SlowWriteServer.writes, SlowWriteServer.connections = [], set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), SlowWriteServer)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    config.connection_pool_maxsize = 10
    yield ClientKubeApi(client.ApiClient(config))
    server.shutdown()
    server.server_close()


def pod(i: int) -> PodInfo:
    return PodInfo(uid=f"uid-{i}", namespace="ns", name=f"p{i}", scheduler_name="fluxion",
                   node_name="n0", phase="Pending", request=Request())


def burst(binder: KubeBinder, pods: int, groups: int) -> None:
    """What the core reports after a burst of gangs: a Scheduled Event per pod, then each
    PodGroup's status (reported several times as its members bind: only the last may stay;
    while the first is still queued, the later ones replace it)."""
    for i in range(pods):
        binder.pod_event(pod(i), "Scheduled", f"Successfully assigned ns/p{i} to n0", "Binding")
    for scheduled in (1, 8, 16):
        for g in range(groups):
            binder.podgroup_status("ns", f"g{g}", {"phase": "Scheduled", "scheduled": scheduled})


def test_shutdown_writes_every_pending_event_and_status_in_order(
        slow_api: ClientKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    SlowWriteServer.delay = 0.002
    binder = KubeBinder(slow_api, async_events=True)
    burst(binder, 600, 40)
    assert binder.pending() > 300, "the burst is still queued when the signal comes"
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO):
        left = binder.drain(time.monotonic() + 30)
    took = time.monotonic() - t0
    assert left == 0
    kinds = Counter("events" if path.endswith("/events") else "podgroups"
                    for _, path, _ in SlowWriteServer.writes)
    # each PodGroup's three statuses were queued behind the Events: one write sends the newest
    assert kinds == {"events": 600, "podgroups": 40}
    assert binder.metrics.status_coalesced.value() == 80
    last: dict[str, int] = {}
    for _, path, body in SlowWriteServer.writes:
        if "/podgroups/" in path:
            last[path] = body["status"]["scheduled"]
    assert set(last.values()) == {16}, "a PodGroup's status was written out of order"
    assert len(SlowWriteServer.connections) <= 10, "more connections than the pool keeps"
    # the drain's own figure is measured inside the test's: read it, do not match its digits
    said = [float(m[1]) for r in caplog.records if (m := re.search(
        r"pending Events and status writes sent in ([\d.]+) s", r.getMessage()))]
    assert said and said[0] <= took + 0.01, (said, took)


def test_writes_left_when_the_grace_runs_out_are_counted_and_logged(
        slow_api: ClientKubeApi, caplog: pytest.LogCaptureFixture) -> None:
    SlowWriteServer.delay = 0.2
    metrics = Metrics()
    binder = KubeBinder(slow_api, async_events=True, metrics=metrics)
    burst(binder, 200, 0)
    t0 = time.monotonic()
    with caplog.at_level(logging.WARNING):
        left = binder.drain(time.monotonic() + 0.5)
    assert time.monotonic() - t0 < 2.5, "the grace period was not kept"
    # (a write the server took but had not answered yet counts as left)
    assert 200 - len(SlowWriteServer.writes) <= left < 200
    assert metrics.errors.value(source="event_unsent") == left
    [record] = [r for r in caplog.records if "not sent within the grace" in r.getMessage()]
    assert record.getMessage().startswith(f"shutdown: {left} Events and status writes not sent")


class SlowEventsApi(KubeApiDouble):
    """The API double with Events and binds that take their time (a test double)."""

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        time.sleep(0.01)
        super().create_event(namespace, event)

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        time.sleep(0.05)
        super().bind(namespace, pod, uid, node)


def test_a_stop_right_after_a_burst_still_reports_every_bind() -> None:
    """The loop stops while binds are in flight: their results are taken in and their
    Scheduled Events sent before the process would exit."""
    api = SlowEventsApi()
    for i in range(4):
        api.create("nodes", make_node(f"n{i}", cpu="64", memory="256Gi"))
    binder = KubeBinder(api, workers=16, async_events=True)
    core = SchedulerCore(FluxionAllocator(), binder, SchedulerConfig())
    runner = Runner(api, core)
    for i in range(24):  # (the double checks every Binding and Event against the schemas)
        api.create("pods", make_pod(f"p{i}", cpu="1", memory="1Gi"))
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not core.inflight and time.monotonic() < deadline:
        time.sleep(0.001)
    runner.stop()  # SIGTERM: binds are running, most Events not sent yet
    thread.join(10)
    assert len([e for e in api.events if e["reason"] == "Scheduled"]) < 24
    grace = time.monotonic() + 30
    assert runner.finish(grace) == 0
    assert binder.drain(grace) == 0
    bound = [p for p in api.objects["pods"].values() if p["spec"].get("nodeName")]
    scheduled = [e for e in api.events if e["reason"] == "Scheduled"]
    assert len(bound) == 24 == len(scheduled)


def test_bind_workers_run_each_bind_once_and_shutdown_starts_none_after() -> None:
    """The binder's workers: every submit runs once on one of them, its result or error in its
    future; ``map`` keeps the order; shutdown cancels what has not started (its future's
    callbacks run, as the core's bookkeeping needs), lets the running ones end and refuses new
    ones."""
    workers = BindWorkers(4)
    assert workers.map(lambda x: x * x, list(range(50))) == [x * x for x in range(50)]
    failed = workers.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result(5)
    after: list[int] = []
    assert workers.submit(lambda: 7, then=after.append).result(5) == 7
    for _ in range(8):  # a follow-up that raises is logged; its worker goes on
        assert workers.submit(lambda: 8, then=lambda r: 1 / 0).result(5) == 8
    assert workers.map(lambda x: x, list(range(8))) == list(range(8))
    deadline = time.monotonic() + 5
    while not after and time.monotonic() < deadline:
        time.sleep(0.001)
    assert after == [7]
    gate, started = threading.Event(), threading.Semaphore(0)

    def held(i: int) -> int:
        started.release()
        gate.wait(10)
        return i
    running = [workers.submit(held, i) for i in range(4)]
    for _ in range(4):  # every worker holds one
        assert started.acquire(timeout=5)
    queued = [workers.submit(held, i) for i in range(4, 10)]
    cancelled: list[Any] = []
    for future in queued:
        future.add_done_callback(cancelled.append)
    workers.shutdown()
    gate.set()
    assert [f.result(5) for f in running] == [0, 1, 2, 3]
    assert all(f.cancelled() for f in queued) and cancelled == queued
    with pytest.raises(RuntimeError, match="shut down"):
        workers.submit(held, 11)
    with pytest.raises(ValueError, match="workers 0"):
        BindWorkers(0)


@pytest.mark.parametrize("backpressure", [5.0, 0.0])
def test_a_full_event_queue_holds_the_reporter_back_instead_of_dropping(
        backpressure: float) -> None:
    api = SlowEventsApi()
    metrics = Metrics()
    binder = KubeBinder(api, async_events=True, senders=1, event_queue=2,
                        backpressure=backpressure, metrics=metrics)
    for i in range(20):  # 10 ms a write: the queue of 2 is full at once
        binder.pod_event(pod(i), "Scheduled", f"Successfully assigned ns/p{i} to n0", "Binding")
    assert binder.drain(time.monotonic() + 10) == 0
    dropped = metrics.errors.value(source="event_dropped")
    if backpressure:
        assert dropped == 0 and len(api.events) == 20
    else:
        assert dropped > 0 and len(api.events) == 20 - dropped


def test_the_client_pool_holds_as_many_connections_as_asked(unreachable_kubeconfig) -> None:
    api = connect(str(unreachable_kubeconfig), connections=27)
    pool = api._core.api_client.rest_client.pool_manager
    assert pool.connection_pool_kw["maxsize"] == 27


@pytest.mark.parametrize(("argv", "message"), [
    (["--shutdown-grace", "-1"], "--shutdown-grace -1.0: use seconds from 0 to 300"),
    (["--bind-workers", "0"], "--bind-workers 0: use >= 1"),
])
def test_the_shutdown_flags_are_checked(argv: list[str], message: str) -> None:
    from fluxinfra.errors import ConfigError
    from fluxinfra.scheduler.main import main

    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        main(argv)
