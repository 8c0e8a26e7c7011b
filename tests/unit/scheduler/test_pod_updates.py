"""A pod's update read from what its unchanged spec gave before (:func:`pod_info_update`): the
same view and the same errors as reading the whole pod, the spec read once."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from fluxinfra.scheduler import pods
from fluxinfra.scheduler.pods import PodSpecError, pod_info, pod_info_update

from .kube_double import make_pod

LABEL_PODGROUP = pods.LABEL_PODGROUP


def base() -> dict[str, Any]:
    pod = make_pod("p", labels={LABEL_PODGROUP: "g"}, annotations={"fluxinfra.io/duration": "60s"},
                   priority=5, spec={
                       "nodeSelector": {"bench": "yes"},
                       "tolerations": [{"key": "k", "operator": "Exists"}],
                       "schedulingGates": [{"name": "wait"}],
                       "affinity": {"podAntiAffinity": {
                           "requiredDuringSchedulingIgnoredDuringExecution": [{
                               "labelSelector": {"matchLabels": {"app": "a"}},
                               "topologyKey": "kubernetes.io/hostname"}]}}})
    pod["metadata"]["uid"] = "uid-p"
    return pod


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(pod: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        at = pod
        for key in parents:
            at = at.setdefault(key, {})
        if value is _DELETE:
            at.pop(last, None)
        else:
            at[last] = value
    return edit


_DELETE = object()

#: (what changed, whether the spec can be reused)
CHANGES = [
    ("bound", _set("spec.nodeName", "n1"), True),
    ("running", _set("status", {"phase": "Running", "startTime": "2026-01-01T00:01:00Z",
                                "conditions": [{"type": "PodScheduled", "status": "True"},
                                               {"type": "Ready", "status": "True"}]}), True),
    ("being deleted", _set("metadata.deletionTimestamp", "2026-01-01T00:02:00Z"), True),
    ("nominated", _set("status.nominatedNodeName", "n2"), True),
    ("a disruption target", _set("status.conditions", [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]),
     True),
    ("unschedulable", _set("status.conditions", [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes"}]), True),
    ("a new resourceVersion", _set("metadata.resourceVersion", "99"), True),
    ("its gate removed", _set("spec.schedulingGates", _DELETE), False),
    ("a toleration added", _set("spec.tolerations", [{"key": "k", "operator": "Exists"},
                                                     {"key": "x", "operator": "Exists"}]),
     False),
    ("another PodGroup", _set("metadata.labels", {LABEL_PODGROUP: "h"}), False),
    ("another duration", _set("metadata.annotations", {"fluxinfra.io/duration": "90s"}),
     False),
    ("adopted by a DaemonSet", _set("metadata.ownerReferences", [
        {"kind": "DaemonSet", "name": "d", "controller": True}]), False),
    ("another uid (recreated)", _set("metadata.uid", "uid-q"), False),
    ("another creation time", _set("metadata.creationTimestamp", "2026-02-01T00:00:00Z"),
     False),
    # the errors pod_info gives, field named
    ("a phase that is a number", _set("status.phase", 5), True),
    ("a condition message that is a list", _set("status.conditions", [
        {"type": "PodScheduled", "status": "False", "message": ["x"]}]), True),
    ("a nodeName that is a number", _set("spec.nodeName", 7), True),
    ("a generateName that is a number", _set("metadata.generateName", 7), True),
    ("labels that are a list", _set("metadata.labels", []), False),
    ("a status that is a list", _set("status", []), False),
]


def _read(read: Callable[[], Any]) -> Any:
    try:
        return read()
    except PodSpecError as exc:
        return f"PodSpecError: {exc}"


@pytest.mark.parametrize(("what", "edit", "reused"), CHANGES, ids=[c[0] for c in CHANGES])
def test_an_update_reads_as_the_whole_pod(what: str, edit: Callable[[dict[str, Any]], None],
                                          reused: bool, monkeypatch) -> None:
    before = base()
    previous = pod_info(before)
    after = copy.deepcopy(before)
    edit(after)
    whole = _read(lambda: pod_info(after))
    parsed = []
    real = pods.pod_info
    monkeypatch.setattr(pods, "pod_info", lambda pod: (parsed.append(1), real(pod))[1])
    update = _read(lambda: pod_info_update(after, previous))
    assert update == whole
    assert (not parsed) == reused, "the spec read again only when it changed"


def test_a_pod_never_seen_is_read_whole() -> None:
    assert pod_info_update(base(), None) == pod_info(base())


def test_the_spec_it_was_read_from_follows_the_updates() -> None:
    """Bound, then Running: each update compares with the spec the one before came with."""
    pod = base()
    info = pod_info(pod)
    for edit in (_set("spec.nodeName", "n1"), _set("status.phase", "Running")):
        pod = copy.deepcopy(pod)
        edit(pod)
        info = pod_info_update(pod, info)
        assert info.source is not None and info.source[0] is pod["spec"]
    assert (info.node_name, info.phase, info.group_name) == ("n1", "Running", "g")
