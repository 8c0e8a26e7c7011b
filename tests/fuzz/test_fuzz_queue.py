"""The queue controller (hosted in the scheduler): broken Jobs, FluxJobs, FluxJobQueues,
PriorityClasses and gated pods through the runner's ``apply_pending``, as the daemon feeds
them, then scheduling cycles.

The contract: nothing raises (the runner's catch-all for a failed event is never reached, every
cycle runs, the log has no traceback); an object the queue cannot read is skipped with one
log line naming it and the field, and a namespaced one with a uid gets a Warning Event
(``Invalid<Kind>``); the readable work around it is still queued and admitted.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from services_fuzz import broken, fuzz, json_values
from test_fuzz_scheduler import NODES, RecordingBinder, Records

from fluxinfra.kube.fluxjob import API_VERSION, GATE, LABEL_QUEUE_NAME
from fluxinfra.queue import objects
from fluxinfra.queue.binding import QueueBinder
from fluxinfra.queue.controller import QueueConfig, QueueCore
from fluxinfra.queue.kube import QUEUE_KINDS
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.runner import Runner


class RecordingQueueApi:
    """A TEST DOUBLE of the queue's API (``QueueApi``): every write succeeds at once and is
    recorded; a created FluxJob comes back with a uid, as the API server stores it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, str, Any]] = []

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        self.events.append(event)

    def create_fluxjob(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(body)
        stored["metadata"].update(uid=f"fj-{len(self.created)}",
                                  creationTimestamp="2026-01-01T00:00:00Z")
        self.created.append(stored)
        return stored

    def patch_fluxjob_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.patched.append(("fluxjobs", f"{namespace}/{name}", status))

    def patch_fluxjobqueue_status(self, namespace: str, name: str,
                                  status: dict[str, Any]) -> None:
        self.patched.append(("fluxjobqueues", f"{namespace}/{name}", status))

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.patched.append(("jobs", f"{namespace}/{name}", patch))

    def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self.patched.append(("pods", f"{namespace}/{name}", ops))

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        self.patched.append(("bind", f"{namespace}/{pod}", node))


RECORDS = Records()
logging.getLogger("fluxinfra.queue").addHandler(RECORDS)
logging.getLogger("fluxinfra.scheduler").addHandler(RECORDS)

JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "train", "namespace": "ns", "uid": "uid-job",
                    "labels": {LABEL_QUEUE_NAME: "default"},
                    "annotations": {"fluxinfra.io/admitted-nodes": "n0"},
                    "ownerReferences": [{"kind": "CronJob", "name": "c", "uid": "uid-c",
                                         "controller": True}]},
       "spec": {"parallelism": 2, "completions": 2, "suspend": True,
                "template": {"metadata": {"annotations": {"fluxinfra.io/duration": "600s"},
                                          "labels": {"app": "a"}},
                             "spec": {"schedulerName": "fluxion", "priorityClassName": "high",
                                      "containers": [{"name": "c", "image": "busybox",
                                                      "resources": {"requests": {
                                                          "cpu": "1", "memory": "1Gi"}}}]}}},
       "status": {"succeeded": 0, "conditions": [{"type": "Suspended", "status": "True",
                                                  "reason": "JobSuspended"}]}}
FLUXJOB = {"apiVersion": API_VERSION, "kind": "FluxJob",
           "metadata": {"name": "job-old", "namespace": "ns", "uid": "uid-fj",
                        "creationTimestamp": "2026-01-01T00:00:00Z"},
           "spec": {"owner": {"kind": "Job", "name": "old", "uid": "uid-old"},
                    "podSets": [{"name": "main", "count": 2, "requests": {"cpu": "1"}}],
                    "queueName": "default", "priority": 0, "duration": 600,
                    "queuedAt": "2026-01-01T00:00:00.000001Z"},
           "status": {"state": "Reserved", "reason": "Reserved", "message": "m",
                      "estimatedStart": "2026-01-01T01:00:00Z", "nodes": ["n0"]}}
QUEUE = {"apiVersion": API_VERSION, "kind": "FluxJobQueue",
         "metadata": {"name": "default", "namespace": "ns", "uid": "uid-q"},
         "spec": {"maxRunning": 4, "maxCores": "16", "maxMemory": "64Gi", "maxGPUs": 2}}
PRIORITY = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": "high"}, "value": 1000}
GATED = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": "solo", "namespace": "ns", "uid": "uid-solo",
                      "labels": {LABEL_QUEUE_NAME: "default", "fluxinfra.io/group": "g",
                                 "fluxinfra.io/group-size": "1"},
                      "creationTimestamp": "2026-01-01T00:00:00Z"},
         "spec": {"schedulerName": "fluxion", "schedulingGates": [{"name": GATE}],
                  "containers": [{"name": "c", "image": "busybox",
                                  "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]},
         "status": {"phase": "Pending"}}
#: a Job that is always readable: whatever else arrives, it is queued
GOOD_JOB = copy.deepcopy(JOB)
GOOD_JOB["metadata"].update(name="good", uid="uid-good")
del GOOD_JOB["metadata"]["annotations"], GOOD_JOB["metadata"]["ownerReferences"]

SEEDS = {"jobs": JOB, "fluxjobs": FLUXJOB, "fluxjobqueues": QUEUE, "priorityclasses": PRIORITY,
         "pods": GATED}


def fresh() -> tuple[QueueCore, RecordingQueueApi, Runner]:
    api = RecordingQueueApi()
    binder = QueueBinder(RecordingBinder())
    core = SchedulerCore(FluxionAllocator(policy="first"), binder,
                         SchedulerConfig(async_binds=False))
    queue = QueueCore(core, api, QueueConfig(workers=1), binder=binder)
    runner = Runner(None, queue, hosted_kinds=QUEUE_KINDS)  # its apply step: no API calls
    RECORDS.records.clear()
    return queue, api, runner


@st.composite
def watch_events(draw) -> tuple[str, str, Any]:
    kind = draw(st.sampled_from(sorted(SEEDS)))
    obj = draw(st.one_of(broken([SEEDS[kind]]), json_values()))
    return kind, draw(st.sampled_from(["ADDED", "MODIFIED", "DELETED"])), obj


@fuzz
@given(st.lists(watch_events(), min_size=1, max_size=6))
@example([("jobs", "ADDED", {**JOB, "spec": {**JOB["spec"], "parallelism": "2"}})])
@example([("jobs", "ADDED", {**JOB, "metadata": {**JOB["metadata"], "ownerReferences": [5]}})])
@example([("jobs", "MODIFIED", {**JOB, "status": {"conditions": [{"type": "Failed",
                                                                  "status": "True",
                                                                  "reason": 7}]}})])
@example([("fluxjobs", "ADDED", {**FLUXJOB, "spec": {**FLUXJOB["spec"], "podSets": [
    {"count": "2", "requests": {"cpu": "9" * 5000}}]}})])
@example([("fluxjobs", "ADDED", {**FLUXJOB, "spec": {"owner": {"uid": ["x"]}}})])
@example([("fluxjobqueues", "ADDED", {**QUEUE, "spec": {"maxRunning": "four"}})])
@example([("priorityclasses", "ADDED", {**PRIORITY, "value": "1000"})])
@example([("pods", "ADDED", {**GATED, "spec": {**GATED["spec"], "schedulingGates": [GATE]}})])
# a gated pod without a uid: its FluxJob could not name it as an owner (KeyError before)
@example([("pods", "ADDED", {**GATED, "metadata": {k: v for k, v in GATED["metadata"].items()
                                                   if k != "uid"}})])
@example([("pods", "ADDED", {**GATED, "spec": {**GATED["spec"], "containers": [
    {"name": "c", "image": "busybox", "resources": True}]}})])
def test_queue_watch_events(events: list[tuple[str, str, Any]]) -> None:
    queue, api, runner = fresh()
    queue.load(copy.deepcopy(NODES), [], [], now=0)
    for kind, etype, obj in [("jobs", "ADDED", copy.deepcopy(GOOD_JOB)), *events]:
        runner.events.put((kind, etype, obj))
    runner.apply_pending()
    assert queue.core.metrics.errors.value(source="apply") == 0, \
        "an event reached the runner's catch-all"
    for _ in range(3):
        runner.cycle()
    assert any(f["spec"]["owner"]["uid"] == "uid-good" for f in api.created), \
        "the readable Job was not queued"
    bad = [r for r in RECORDS.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]
    for kind, etype, obj in events:
        if kind == "pods":
            continue
        why = objects.problem(kind, etype, obj)
        if not why:
            continue
        assert any(why in r.getMessage() or why.split(": ", 1)[-1] in r.getMessage()
                   for r in RECORDS.records), f"not reported: {why}"
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        if kind != "priorityclasses" and isinstance(meta, dict) and \
                isinstance(meta.get("uid"), str) and meta["uid"] and \
                isinstance(meta.get("name"), str) and meta["name"] and \
                isinstance(meta.get("namespace"), str) and meta["namespace"]:
            assert any(e["reason"] == f"Invalid{objects.KINDS[kind]}" and
                       e["regarding"]["uid"] == meta["uid"] for e in api.events), \
                f"no Event for {why}"
