"""A repeated Event is one ``events.k8s.io/v1`` Event with a ``series``, as client-go's event
broadcaster (kube-scheduler's) writes it: created once, its count patched at once on the first
repeat, then at most every ``SERIES_REFRESH`` seconds, and at shutdown. A PodGroup status still
queued is replaced by a newer one. The API double checks every Event and patch against the
Kubernetes schemas."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fluxinfra.scheduler import binder as binder_module
from fluxinfra.scheduler.binder import SERIES_REFRESH, SERIES_WINDOW, KubeBinder
from fluxinfra.scheduler.pods import PodInfo, Request, pod_info

from .kube_double import KubeApiDouble, make_node, make_pod, make_podgroup


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def pod(name: str = "p0") -> PodInfo:
    return PodInfo(uid=f"uid-{name}", namespace="ns", name=name, scheduler_name="fluxion",
                   node_name="", phase="Pending", request=Request())


def failed(binder: KubeBinder, name: str = "p0", note: str = "0/4 nodes are available") -> None:
    binder.pod_event(pod(name), "FailedScheduling", note, "Scheduling")


@pytest.fixture()
def clock() -> Clock:
    return Clock()


@pytest.fixture()
def api() -> KubeApiDouble:
    return KubeApiDouble()


def counts(api: KubeApiDouble) -> list[int]:
    return [(e.get("series") or {}).get("count", 1) for e in api.events]


def test_a_repeat_is_counted_into_the_first_event(api: KubeApiDouble, clock: Clock) -> None:
    binder = KubeBinder(api, clock=clock)
    failed(binder)
    clock.now += 1
    failed(binder)
    assert counts(api) == [2], "the first repeat is written at once"
    assert api.events[0]["series"]["lastObservedTime"].startswith("1970-01-12T13:46:41")
    for _ in range(3):
        clock.now += 1
        failed(binder)
    assert counts(api) == [2] and api.calls["patch_event"] == 1, "later repeats wait"
    assert binder.refresh_series() == 0, "not before the refresh period"
    clock.now += SERIES_REFRESH
    assert binder.refresh_series() == 1
    assert counts(api) == [5]
    assert binder.refresh_series() == 0, "nothing grew since"


def test_a_repeat_after_the_refresh_period_is_written_with_it(api: KubeApiDouble,
                                                             clock: Clock) -> None:
    binder = KubeBinder(api, clock=clock)
    for _ in range(3):
        failed(binder)
    clock.now += SERIES_REFRESH
    failed(binder)
    assert counts(api) == [4]


def test_another_note_object_or_reason_is_another_event(api: KubeApiDouble,
                                                        clock: Clock) -> None:
    binder = KubeBinder(api, clock=clock)
    failed(binder)
    failed(binder, note="0/5 nodes are available")
    failed(binder, name="p1")
    binder.pod_event(pod(), "Scheduled", "0/4 nodes are available", "Scheduling")
    assert counts(api) == [1, 1, 1, 1]
    assert [e["note"] for e in api.events][:2] == ["0/4 nodes are available",
                                                   "0/5 nodes are available"]


def test_a_series_ends_after_its_window(api: KubeApiDouble, clock: Clock) -> None:
    binder = KubeBinder(api, clock=clock)
    failed(binder)
    failed(binder)
    clock.now += SERIES_WINDOW + 1
    failed(binder)
    assert counts(api) == [2, 1], "a new Event, not a patch of the old series"


def test_the_series_remembered_are_bounded(api: KubeApiDouble, clock: Clock,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binder_module, "SERIES_CAPACITY", 3)
    binder = KubeBinder(api, clock=clock)
    for i in range(5):
        failed(binder, name=f"p{i}")
    failed(binder, name="p4")  # remembered: counted
    failed(binder, name="p0")  # forgotten (the least recently seen): a new Event
    assert counts(api) == [1, 1, 1, 1, 2, 1]
    assert len(binder._series) == 3


def test_a_series_whose_event_is_gone_is_created_again(api: KubeApiDouble,
                                                       clock: Clock) -> None:
    binder = KubeBinder(api, clock=clock)
    failed(binder)
    api.events.clear()  # the Event's time to live ran out
    failed(binder)
    assert counts(api) == [2]
    assert api.events[0]["note"] == "0/4 nodes are available"


def test_shutdown_writes_every_grown_series(api: KubeApiDouble, clock: Clock) -> None:
    binder = KubeBinder(api, clock=clock, async_events=True, senders=2)
    for _ in range(4):
        failed(binder)
    failed(binder, name="p1")
    assert binder.drain(time.monotonic() + 10) == 0
    assert sorted(counts(api)) == [1, 4]


class SlowStatusApi(KubeApiDouble):
    """The API double whose PodGroup status patches wait at a gate: an API server that is
    behind, so the binder's queue holds writes."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def patch_podgroup_status(self, namespace, name, patch) -> None:
        self.entered.set()
        assert self.gate.wait(10), "the test never opened the gate"
        super().patch_podgroup_status(namespace, name, patch)


def status(scheduled: int) -> dict:
    return {"phase": "Scheduled" if scheduled >= 16 else "Scheduling",
            "scheduled": scheduled, "running": 0, "succeeded": 0, "failed": 0}


def test_a_queued_podgroup_status_is_replaced_by_a_newer_one() -> None:
    api = SlowStatusApi()
    for name in ("pg", "other"):
        api.create("podgroups", make_podgroup(name, 16, "ns"))
    binder = KubeBinder(api, async_events=True, senders=1)
    try:
        binder.podgroup_status("ns", "pg", status(0))
        assert api.entered.wait(5), "the first status is taken by the sender at once"
        for scheduled in (3, 7, 12):  # queued behind it, each replacing the last
            binder.podgroup_status("ns", "pg", status(scheduled))
        binder.podgroup_status("ns", "other", status(4))
        binder.podgroup_status("ns", "pg", status(16))
        api.gate.set()
        binder.flush()
    finally:
        binder.close()
    sent = [(name, patch["status"]["scheduled"]) for _, name, patch in api.podgroup_patches]
    assert sent == [("pg", 0), ("pg", 16), ("other", 4)]
    assert api.get("podgroups", "ns/pg")["status"]["scheduled"] == 16
    assert binder.metrics.status_coalesced.value() == 3


def test_a_status_whose_queued_write_was_dropped_is_queued_again() -> None:
    api = SlowStatusApi()
    api.create("podgroups", make_podgroup("pg", 16, "ns"))
    binder = KubeBinder(api, async_events=True, senders=1, event_queue=1, backpressure=0.05)
    try:
        binder.podgroup_status("ns", "pg", status(0))
        assert api.entered.wait(5)
        binder.pod_event(pod("p1"), "Scheduled", "assigned", "Binding")  # fills the queue
        binder.podgroup_status("ns", "pg", status(5))  # dropped: the queue stays full
        assert binder.metrics.errors.value(source="event_dropped") == 1
        api.gate.set()
        binder.flush()
        binder.podgroup_status("ns", "pg", status(16))  # not folded into the lost write
        binder.flush()
    finally:
        binder.close()
    assert [p["status"]["scheduled"] for _, _, p in api.podgroup_patches] == [0, 16]


class GatedEventsApi(KubeApiDouble):
    """The API double whose Events wait at a gate, noting which sender thread made each."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.senders: list[str] = []

    def create_event(self, namespace, event) -> None:
        assert self.gate.wait(10), "the test never opened the gate"
        self.senders.append(threading.current_thread().name)
        super().create_event(namespace, event)


def test_a_burst_of_writes_spreads_evenly_over_the_senders() -> None:
    """Writes about objects with nothing else out go to the sender with the fewest out: 40
    Events reported while the API server holds every answer are 10 for each of 4 senders."""
    api = GatedEventsApi()
    binder = KubeBinder(api, async_events=True, senders=4)
    try:
        for i in range(40):
            binder.pod_event(pod(f"p{i}"), "Scheduled", f"assigned ns/p{i}", "Binding")
        api.gate.set()
        binder.flush()
    finally:
        binder.close()
    assert sorted(api.senders.count(name) for name in set(api.senders)) == [10] * 4
    assert binder._owners == {} and binder._load == [0] * 4, "nothing kept once sent"


def test_an_objects_writes_stay_in_order_on_its_sender() -> None:
    """While a PodGroup's status write is out, the next one for it waits for the same sender
    (never overtaking it on another); the other objects' writes go to the senders that are
    free."""
    api = SlowStatusApi()
    api.create("podgroups", make_podgroup("pg", 16, "ns"))
    binder = KubeBinder(api, async_events=True, senders=4)
    try:
        binder.podgroup_status("ns", "pg", status(3))
        assert api.entered.wait(5)
        for i in range(6):
            binder.pod_event(pod(f"p{i}"), "Scheduled", f"assigned ns/p{i}", "Binding")
            deadline = time.monotonic() + 5
            while len(api.events) <= i and time.monotonic() < deadline:
                time.sleep(0.005)
        assert len(api.events) == 6, "no Event waits behind the slow status write"
        binder.podgroup_status("ns", "pg", status(16))
        assert api.podgroup_patches == []
        api.gate.set()
        binder.flush()
    finally:
        binder.close()
    assert [p["status"]["scheduled"] for _, _, p in api.podgroup_patches] == [3, 16]


class RecordingBindApi(KubeApiDouble):
    """The API double noting, for each Event, the thread that wrote it and whether the bind's
    result was already out to whoever waits for it (``futures`` by pod name)."""

    def __init__(self) -> None:
        super().__init__()
        self.futures: dict[str, Any] = {}
        self.writers: dict[str, tuple[str, bool]] = {}

    def create_event(self, namespace, event) -> None:
        name = event["regarding"]["name"]
        future = self.futures.get(name)
        self.writers[name] = (threading.current_thread().name,
                              future is not None and future.done())
        super().create_event(namespace, event)


def _bound_pods(api: KubeApiDouble, count: int) -> list[PodInfo]:
    api.create("nodes", make_node("n0"))
    for i in range(count):
        api.create("pods", make_pod(f"p{i}", "ns"))
    return [pod_info(api.objects["pods"][f"ns/p{i}"]) for i in range(count)]


def test_a_bound_pods_event_comes_from_its_bind_worker_once_the_result_is_out() -> None:
    """As kube-scheduler's binding goroutine: each pod's Scheduled Event is written by the
    worker that bound it, right after its result is in the future the core waits on (the
    core, seeing ``scheduled_events``, writes none itself)."""
    api = RecordingBindApi()
    pods = _bound_pods(api, 8)
    binder = KubeBinder(api, workers=4, async_events=True, senders=2)
    try:
        futures = binder.submit([(p, "n0") for p in pods])
        api.futures.update((p.name, f) for p, f in zip(pods, futures, strict=True))
        assert [f.result(5) for f in futures] == [None] * 8
        binder.flush()
        assert binder.pending() == 0
    finally:
        binder.close()
    assert binder.scheduled_events
    assert sorted(api.writers) == [p.name for p in pods]
    assert all(thread.startswith("bind_") and out for thread, out in api.writers.values()), \
        api.writers
    notes = sorted(e["note"] for e in api.events if e["reason"] == "Scheduled")
    assert notes == sorted(f"Successfully assigned ns/{p.name} to n0" for p in pods)


class GatedWritersApi(GatedEventsApi):
    """:class:`GatedEventsApi` noting, in one record per Event, what it is about, its reason
    and the thread that wrote it."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[tuple[str, str, str]] = []

    def create_event(self, namespace, event) -> None:
        assert self.gate.wait(10), "the test never opened the gate"
        self.written.append((event["regarding"]["name"], event["reason"],
                             threading.current_thread().name))
        KubeApiDouble.create_event(self, namespace, event)


def test_a_bound_pods_event_follows_a_write_about_it_still_out() -> None:
    """A pod with a write still out (its FailedScheduling Event, held by the API server) gets
    its Scheduled Event through that write's sender, after it; a pod with none gets it from
    its bind worker."""
    api = GatedWritersApi()
    pods = _bound_pods(api, 2)
    binder = KubeBinder(api, workers=2, async_events=True, senders=2)
    try:
        binder.pod_event(pods[0], "FailedScheduling", "0/1 nodes are available", "Scheduling")
        deadline = time.monotonic() + 5
        while binder.pending() != 1 and time.monotonic() < deadline:
            time.sleep(0.001)
        futures = binder.submit([(p, "n0") for p in pods])
        assert [f.result(5) for f in futures] == [None, None]
        api.gate.set()
        binder.flush()
    finally:
        binder.close()
    about_p0 = [(reason, thread) for name, reason, thread in api.written if name == "p0"]
    assert [reason for reason, _ in about_p0] == ["FailedScheduling", "Scheduled"]
    assert about_p0[0][1] == about_p0[1][1] and about_p0[0][1].startswith("events-")
    assert [thread for name, _, thread in api.written if name == "p1"][0].startswith("bind_")
