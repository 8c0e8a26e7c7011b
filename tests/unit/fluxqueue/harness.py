"""The scheduler with the queue hosted in it, wired to the API double, stepped by hand."""

from __future__ import annotations

import os
from collections import defaultdict
from concurrent import futures
from typing import Any

from scheduler.harness import Clock, check_allocator_books
from scheduler.kube_double import make_node

from fluxinfra.kube.fluxjob import GATE, LABEL_QUEUE_NAME
from fluxinfra.kube.resources import node_allocatable
from fluxinfra.queue.binding import QueueBinder
from fluxinfra.queue.controller import SLOT_PREFIX, QueueConfig, QueueCore
from fluxinfra.queue.kube import QUEUE_KINDS
from fluxinfra.scheduler.binder import KubeBinder
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.pods import pod_info
from fluxinfra.scheduler.runner import Runner

from .queue_double import QueueApiDouble


def job(name: str, pods: int = 2, *, cpu: str = "2", memory: str = "1Gi", gpu: int = 0,
        duration: str | None = None, queue: str = "default", namespace: str = "team-a",
        priority: int | None = None, completions: int | None = None) -> dict[str, Any]:
    """A Job as the webhook leaves it: suspended, our scheduler, labelled with its queue."""
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    spec: dict[str, Any] = {"schedulerName": "fluxion", "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "busybox",
                                            "resources": {"requests": requests}}]}
    if priority is not None:
        spec["priority"] = priority
    annotations = {"fluxinfra.io/duration": duration} if duration else {}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {LABEL_QUEUE_NAME: queue}},
            "spec": {"parallelism": pods, "completions": completions or pods, "suspend": True,
                     "template": {"metadata": {"annotations": annotations}, "spec": spec}}}


def gated_pod(name: str, *, cpu: str = "1", labels: dict[str, str] | None = None,
              namespace: str = "team-a", duration: str | None = None) -> dict[str, Any]:
    """A pod as the webhook leaves it: gated, our scheduler, labelled with its queue."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {LABEL_QUEUE_NAME: "default", **(labels or {})},
                         "annotations": {"fluxinfra.io/duration": duration} if duration else {},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "fluxion", "schedulingGates": [{"name": GATE}],
                     "containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": "Pending"}}


class QueueHarness:
    """``workers`` > 1 (the default, as in production): the queue's API writes run on its
    pool and the loop does not wait for them; each pump is followed by collecting every write
    that is out, so a step is deterministic. ``workers=1``: each write made in place."""

    def __init__(self, api: QueueApiDouble, *, policy: str = "first",
                 workers: int = int(os.environ.get("FLUXQUEUE_TEST_WORKERS", "4"))) -> None:
        self.api = api
        self.clock = Clock()
        self.binder = KubeBinder(api)
        queue_binder = QueueBinder(self.binder)  # given to the core, as the daemon does
        self.sched = SchedulerCore(FluxionAllocator(policy), queue_binder, SchedulerConfig(),
                                   clock=self.clock)
        self.queue = QueueCore(self.sched, api, QueueConfig(workers=workers),
                               wall=lambda: self.clock.t, binder=queue_binder)
        self.runner = Runner(api, self.queue, clock=self.clock, hosted_kinds=QUEUE_KINDS)
        self.runner.t0 = self.clock.t

    def start(self) -> QueueHarness:
        self.runner.start()
        return self

    def step(self, seconds: float = 0.0, rounds: int = 3) -> None:
        """Time passes; the Job controller and the scheduler each take a few turns."""
        self.clock.t += seconds
        for _ in range(rounds):
            self.api.run_job_controller()
            self.pump()

    def pump(self) -> None:
        """One cycle of the scheduler, then every API write it started comes back."""
        self.runner.pump()
        assert self.queue.collect(wait=10.0) == 0, "API writes still out after 10 s"
        # the core's asynchronous binds (gated pods un-gated and bound on the queue's pool):
        # done before the next cycle takes their results in, as the waker makes it in the daemon
        _, late = futures.wait([entry[2] for entry in self.sched.inflight.values()],
                               timeout=10.0)
        assert not late, "binds still out after 10 s"

    def fluxjob(self, name: str, namespace: str = "team-a") -> dict[str, Any]:
        return self.api.get("fluxjobs", f"{namespace}/{name}")  # type: ignore[arg-type]

    def state(self, name: str, namespace: str = "team-a") -> str:
        return (self.fluxjob(name, namespace).get("status") or {}).get("state", "")

    def pods_of(self, job_name: str, namespace: str = "team-a") -> list[dict[str, Any]]:
        return sorted((p for p in self.api.objects["pods"].values()
                       if p["metadata"]["namespace"] == namespace and any(
                           o.get("name") == job_name and o.get("kind") == "Job"
                           for o in p["metadata"].get("ownerReferences") or [])),
                      key=lambda p: p["metadata"]["name"])

    def finish(self, job_name: str, phase: str = "Succeeded") -> None:
        for pod in self.pods_of(job_name):
            if pod["spec"].get("nodeName") and pod["status"]["phase"] not in ("Succeeded",
                                                                                 "Failed"):
                self.api.set_phase(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}",
                                   phase)

    def run(self, job_name: str) -> None:
        for pod in self.pods_of(job_name):
            if pod["spec"].get("nodeName") and pod["status"]["phase"] == "Pending":
                self.api.set_phase(f"{pod['metadata']['namespace']}/{pod['metadata']['name']}",
                                   "Running")


def nodes(api: QueueApiDouble, count: int, cpu: str = "4", **kwargs: Any) -> None:
    for i in range(count):
        api.create("nodes", make_node(f"n{i}", cpu=cpu, memory="64Gi", **kwargs))


def check_books(h: QueueHarness) -> None:
    """The one set of books is right:

    - no node over-committed by the pods that really run (real requests vs allocatable);
    - every running pod is held exactly once, on its node: under its own uid, or as the slot of
      its FluxJob that it took;
    - every held slot belongs to a placed, unreleased slot of a live FluxJob, and vice versa;
    - the allocator's books and graph agree with the core's exact ledger.
    """
    api, core = h.api, h.sched
    node_objs = {n["metadata"]["name"]: n for n in api.objects["nodes"].values()}
    used: dict[str, int] = defaultdict(int)
    running: dict[str, str] = {}
    for pod in api.objects["pods"].values():
        info = pod_info(pod)
        if info.holds_resources:
            running[info.uid] = info.node_name
            used[info.node_name] += info.request.cpu_milli
    for node, cpu in used.items():
        assert cpu <= node_allocatable(node_objs[node]).get("cpu", 0), f"{node} over-committed"
    held: dict[str, str] = {}
    for node, shares in core.held().items():
        for uid, _ in shares:
            assert uid not in held, f"{uid} held twice"
            held[uid] = node
    shown = {h.queue.shown.get(uid, uid): (uid, node) for uid, node in running.items()}
    for shown_uid, (uid, node) in shown.items():
        assert held.get(shown_uid) == node, f"running pod {uid} ({shown_uid}) not held on {node}"
    slots = {h.queue._slot_uid(u, s.index): s.node for u in h.queue.units.values()
             for s in u.slots if s.node and not s.released}
    for uid, node in held.items():
        if uid.startswith(SLOT_PREFIX):
            assert slots.get(uid) == node, f"slot {uid} held on {node} but not a live slot"
        else:
            assert uid in running, f"{uid} held but not running"
    for uid, node in slots.items():
        assert held.get(uid) == node, f"live slot {uid} on {node} not held"
    check_allocator_books(core)


def check_empty(h: QueueHarness) -> None:
    """Nothing left held when nothing runs: no leaked allocation anywhere."""
    check_books(h)
    assert not h.sched.held(), f"still held: {h.sched.held()}"
    assert not h.sched.allocator.jobs, f"allocator still holds {h.sched.allocator.jobs}"
