"""Objects the queue controller cannot read: each is skipped with one log line and (for a
namespaced object with a uid) a Warning Event naming the object and the field; the loop goes
on and the readable work is admitted. tests/fuzz/test_fuzz_queue.py throws generated objects
at the same contract; the cases here are the ones worth naming."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from fluxinfra.kube.fluxjob import API_VERSION

from .harness import QueueHarness, check_books, gated_pod, job, nodes
from .queue_double import QueueApiDouble


def _with(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    *parents, last = path.split(".")
    here = obj
    for key in parents:
        here = here.setdefault(key, {})
    here[last] = value
    return obj


BAD_JOB = _with(job("bad"), "metadata.uid", "uid-bad")
FLUXJOB = {"apiVersion": API_VERSION, "kind": "FluxJob",
           "metadata": {"name": "job-gone", "namespace": "team-a", "uid": "uid-fj"},
           "spec": {"owner": {"kind": "Job", "name": "gone", "uid": "uid-gone"},
                    "podSets": [{"name": "main", "count": 1, "requests": {"cpu": "1"}}]}}


@pytest.mark.parametrize(("kind", "bad", "said"), [
    ("jobs", _with(BAD_JOB, "spec.parallelism", "2"),
     "Job team-a/bad: spec.parallelism: '2' is a string; give a whole number"),
    ("jobs", _with(BAD_JOB, "metadata.ownerReferences", [7]),
     "Job team-a/bad: metadata.ownerReferences[0]: 7 is a number, not an object"),
    ("jobs", _with(BAD_JOB, "status.conditions", [{"type": "Failed", "reason": 3}]),
     "Job team-a/bad: status.conditions[0].reason: 3 is a number, not a string"),
    ("jobs", _with(BAD_JOB, "spec.template.spec.containers", {"name": "c"}),
     "Job team-a/bad: spec.template.spec.containers: {'name': 'c'} is an object, not a list "
     "of objects"),
    ("fluxjobs", _with(FLUXJOB, "spec.podSets", [{"count": "1"}]),
     "FluxJob team-a/job-gone: spec.podSets[0].count: '1' is a string; give a whole number"),
    ("fluxjobs", _with(FLUXJOB, "spec.owner", "Job/gone"),
     "FluxJob team-a/job-gone: spec.owner: 'Job/gone' is a string, not an object"),
    ("fluxjobqueues", {"apiVersion": API_VERSION, "kind": "FluxJobQueue",
                       "metadata": {"name": "default", "namespace": "team-a", "uid": "uid-q"},
                       "spec": {"maxRunning": "four"}},
     "FluxJobQueue team-a/default: spec.maxRunning: 'four' is a string; give a whole number"),
])
def test_an_unreadable_object_is_skipped_with_an_event_and_good_work_is_admitted(
        caplog: pytest.LogCaptureFixture, kind: str, bad: dict[str, Any], said: str) -> None:
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    with caplog.at_level(logging.WARNING):
        h.runner.events.put((kind, "ADDED", bad))
        h.runner.events.put((kind, "MODIFIED", bad))  # the same problem: reported once
        api.create_job(job("good", pods=2))
        h.step()
    assert h.state("job-good") == "Admitted"
    check_books(h)
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any(r.exc_info for r in caplog.records), "a traceback was logged"
    what, _, field = said.partition(": ")
    assert logged == [f"cannot read {what}, skipped: {field}"], logged
    assert h.queue.metrics.errors.value(source="invalid_object") == 1
    assert h.sched.metrics.errors.value(source="apply") == 0
    events = [e for e in api.events if e["reason"].startswith("Invalid")]
    assert [(e["reason"], e["type"], e["regarding"]["uid"]) for e in events] == [
        (f"Invalid{bad['kind']}", "Warning", bad["metadata"]["uid"])]
    assert events[0]["note"] == f"skipped by the queue: {said}"


def test_a_job_made_readable_again_is_queued_and_a_deletion_needs_only_its_name() -> None:
    api = QueueApiDouble()
    nodes(api, 2)
    h = QueueHarness(api).start()
    stored = api.create_job(job("fixed", pods=1))
    broken = _with(stored, "spec.completions", [1])
    h.runner.events.put(("jobs", "MODIFIED", broken))
    h.step()
    assert h.state("job-fixed") == "Admitted", "the readable version seen first stays"
    h.runner.events.put(("jobs", "DELETED", broken))
    h.step()
    assert h.state("job-fixed") == "Failed"
    assert h.fluxjob("job-fixed")["status"]["reason"] == "JobDeleted"


def test_a_gated_pod_the_queue_cannot_route_is_left_to_the_core_which_reports_it(
        caplog: pytest.LogCaptureFixture) -> None:
    api = QueueApiDouble()
    nodes(api, 1)
    h = QueueHarness(api).start()
    bad = _with(gated_pod("odd"), "spec.schedulingGates", ["fluxinfra.io/queue"])
    bad["metadata"]["uid"] = "uid-odd"
    with caplog.at_level(logging.WARNING):
        h.runner.events.put(("pods", "ADDED", bad))
        api.create_pod(gated_pod("fine"))
        h.step()
    assert h.state("pod-fine") == "Admitted"
    assert not any(r.exc_info for r in caplog.records), "a traceback was logged"
    assert any("pod team-a/odd" in r.getMessage() and "spec.schedulingGates[0]" in
               r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert h.sched.metrics.errors.value(source="apply") == 0
