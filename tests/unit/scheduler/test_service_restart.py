"""A Fluxion service restarted (or gone) under the scheduler, over real gRPC on loopback.

The restarted service starts with a graph of its own and no jobs (as ``fluxinfra service
--from-cluster`` would). The scheduler must notice (the epoch on every answer), replay every
allocation before it matches again, and never place anything twice. Each test runs in plain
text and over mutual TLS (as deployed).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

import pytest

from fluxinfra.kube.graph import graph_from_k8s
from fluxinfra.matcher import Matcher
from fluxinfra.pki import make_service_tls
from fluxinfra.scheduler.fluxion import BackendUnavailable, FluxionAllocator, RemoteBackend
from fluxinfra.service.client import FluxionClient
from fluxinfra.service.server import serve
from fluxinfra.service.tls import TlsFiles

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """A real ``fluxinfra service`` on one fixed loopback port, restartable; with ``mtls``
    it speaks only mutual TLS, and ``client_tls`` is what the scheduler presents."""

    def __init__(self, mtls: bool) -> None:
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.server = None
        self.epochs: list[str] = []
        self.server_tls = self.client_tls = None
        if mtls:
            pki = make_service_tls(["127.0.0.1"], "fluxion-scheduler")
            self.server_tls = TlsFiles(pki.ca_cert.encode(), pki.server_cert.encode(),
                                       pki.server_key.encode())
            self.client_tls = TlsFiles(pki.ca_cert.encode(), pki.client_cert.encode(),
                                       pki.client_key.encode())

    def client(self) -> FluxionClient:
        return FluxionClient(self.target, timeout=5, tls=self.client_tls)

    def start(self) -> None:
        # The graph a freshly started in-cluster service would build: not ours.
        matcher = Matcher(graph_from_k8s([make_node("n0", cpu="64")], [], subtract_pods=False))
        self.server, port = serve(matcher, host="127.0.0.1", port=self.port, workers=2,
                                  tls=self.server_tls)
        assert port == self.port
        with self.client() as c:
            self.epochs.append(c.service_epoch()["epoch"])

    def stop(self) -> None:
        self.server.stop(grace=None).wait()

    def jobs(self) -> list[dict]:
        with self.client() as c:
            return c.dump()["jobs"]


@pytest.fixture(params=["plaintext", "mtls"])
def service(request: pytest.FixtureRequest) -> Iterator[Service]:
    svc = Service(mtls=request.param == "mtls")
    svc.start()
    yield svc
    svc.stop()


def scheduler(service: Service, nodes: int = 2) -> Harness:
    api = KubeApiDouble()
    for i in range(nodes):
        api.create("nodes", make_node(f"n{i}", cpu="4", memory="16Gi"))
    allocator = FluxionAllocator(backend=RemoteBackend(service.target, timeout=5,
                                                       tls=service.client_tls))
    h = Harness(api, allocator)
    h.runner.sync_backend = allocator.sync_backend
    return h.start()


def step_until(h: Harness, done: Callable[[], bool], timeout: float = 30.0) -> None:
    """Step the scheduler (real time passes: gRPC reconnects on its own backoff)."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        h.step(1)
        time.sleep(0.1)


def bound(h: Harness, *pods: str) -> bool:
    return all(h.node_of(p) for p in pods)


def test_every_answer_carries_the_epoch_and_a_restart_changes_it(service: Service) -> None:
    with service.client() as client:
        client.dump()
        first = client.epoch
        assert first == service.epochs[0] and "/" in first
        with pytest.raises(Exception):  # noqa: B017 - NOT_FOUND, still stamped
            client.cancel(12345)
        assert client.epoch == first
        service.stop()
        service.start()
        deadline = time.monotonic() + 20
        while client.epoch == first:
            assert time.monotonic() < deadline, "never reconnected"
            try:
                client.dump()
            except Exception:  # noqa: BLE001 - UNAVAILABLE while gRPC reconnects
                time.sleep(0.2)
        assert client.epoch == service.epochs[1] != first


def test_a_restarted_service_gets_every_allocation_replayed_and_nothing_placed_twice(
        service: Service) -> None:
    h = scheduler(service)
    for i in range(6):
        h.api.create("pods", make_pod(f"a{i}", cpu="1", memory="1Gi"))
    step_until(h, lambda: bound(h, *(f"a{i}" for i in range(6))))
    backend = h.core.allocator.backend
    before = {j["jobid"] for j in service.jobs()}
    assert before and backend.resets == 0

    service.stop()
    service.start()  # a fresh service: its own graph, none of our jobs
    assert service.jobs() == []
    for i in range(4):  # 2 fit (8 cores, 6 used); the last 2 must wait
        h.api.create("pods", make_pod(f"b{i}", cpu="1", memory="1Gi"))
    step_until(h, lambda: bound(h, "b0", "b1"))
    for _ in range(3):
        h.step(1)
    assert not h.node_of("b2") and not h.node_of("b3"), "placed on resources already in use"
    assert backend.resets == 1 and h.core.allocator.replays == 1
    assert "restarted (epoch" in backend.last_reset
    assert backend.epoch == service.epochs[1]
    check_invariants(h)
    held = sorted(n for j in service.jobs() for n in j["nodes"])
    assert held.count("n0") + held.count("n1") >= 2, f"the service holds our books: {held}"

    # Releases reach the new service: a finished pod frees exactly its core.
    h.api.set_phase("default/a0", "Succeeded")
    step_until(h, lambda: bound(h, "b2"))
    assert not h.node_of("b3")
    check_invariants(h)


def test_an_unreachable_service_stops_matching_until_it_is_back(service: Service) -> None:
    h = scheduler(service)
    h.api.create("pods", make_pod("a0", cpu="4"))
    step_until(h, lambda: bound(h, "a0"))
    service.stop()
    h.api.create("pods", make_pod("a1", cpu="4"))
    h.api.set_phase("default/a0", "Succeeded")  # a release while the service is away
    for _ in range(3):
        h.step(1)
    assert not h.node_of("a1")
    backend = h.core.allocator.backend
    assert backend.stale
    with pytest.raises(BackendUnavailable):
        backend.match({"resources": [{"count": 1}]}, "allocate", 999, 0)
    h.api.create("pods", make_pod("a2", cpu="4"))
    service.start()
    step_until(h, lambda: bound(h, "a1", "a2"))
    assert {h.node_of("a1"), h.node_of("a2")} == {"n0", "n1"}
    check_invariants(h)
    assert h.core.metrics.errors.value(source="backend") >= 1
