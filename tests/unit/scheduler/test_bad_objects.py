"""Kubernetes objects the scheduler cannot read: each is skipped with one log line naming the
object and the field (and an Event where there is an object to attach it to), start-up and
the loop go on, and nothing is half applied. tests/fuzz/test_fuzz_scheduler.py throws
generated objects at the same contract; the cases here are the ones worth naming."""

from __future__ import annotations

import copy
import logging

import pytest

from fluxinfra.matcher.errors import GraphError
from fluxinfra.scheduler.fluxion import FluxionAllocator

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod, make_podgroup


def harness(*nodes: dict) -> Harness:
    api = KubeApiDouble()
    for node in nodes or (make_node("n0", cpu="4"),):
        api.create("nodes", node)
    return Harness(api, FluxionAllocator(policy="first"))


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not any(r.exc_info for r in records), "a traceback was logged"
    return records


def graph_nodes(h: Harness) -> list[str]:
    g = h.core.allocator.backend.matcher.graph
    return sorted(g.name[v] for v in range(len(g)) if g.type[v] == "node" and not g.removed[v])


@pytest.mark.parametrize(("bad", "logged"), [
    ({"apiVersion": "v1", "kind": "Node", "status": {"allocatable": {"cpu": "4"}}},
     "cannot read a Node without metadata.name, skipped: metadata: None is null"),
    ({"metadata": {"name": "x"}, "status": {"allocatable": {"cpu": "9" * 5000}}},
     "cannot read node x, skipped: status.allocatable.cpu: '999"),
    ({"metadata": {"name": "x", "labels": {"rack": 7}}, "status": {}},
     "cannot read node x, skipped: metadata.labels[rack]: 7 is a number"),
    ({"metadata": {"name": "x"}, "status": {"allocatable": {"cpu": "1e5000"}}},
     "cannot read node x, skipped: status.allocatable.cpu: '1e5000' is not a Kubernetes"),
])
def test_start_up_skips_a_node_it_cannot_read_and_places_pods_on_the_rest(
        caplog: pytest.LogCaptureFixture, bad: dict, logged: str) -> None:
    h = harness()
    h.api.objects["nodes"]["bad"] = bad  # what a LIST could return
    h.api.create("pods", make_pod("p0"))
    with caplog.at_level(logging.WARNING):
        h.start()
        h.step()
    del h.api.objects["nodes"]["bad"]  # the invariants read every Node of the cluster
    assert [r.getMessage() for r in warnings_of(caplog)][0].startswith(logged)
    assert sorted(h.core.nodes) == ["n0"] and graph_nodes(h) == ["n0"]
    assert h.node_of("p0") == "n0"
    named = "metadata" in bad
    assert [e["regarding"]["name"] for e in h.events("InvalidNode")] == (["x"] if named else [])
    check_invariants(h)


def test_a_bad_update_keeps_the_last_readable_node_and_is_reported_once(
        caplog: pytest.LogCaptureFixture) -> None:
    h = harness(make_node("n0", cpu="4"), make_node("n1", cpu="4")).start()
    h.api.create("pods", make_pod("p0", cpu="3"))
    h.step()
    bound_to = h.node_of("p0")
    broken = copy.deepcopy(h.api.get("nodes", f"/{bound_to}"))
    broken["status"]["allocatable"]["cpu"] = "16Gi" * 40
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # heartbeats of the same broken object
            h.api.update("nodes", broken)
            h.step()
    assert len(warnings_of(caplog)) == 1 and len(h.events("InvalidNode")) == 1
    assert h.core.nodes[bound_to]["status"]["allocatable"]["cpu"] == "4"
    assert graph_nodes(h) == ["n0", "n1"]
    h.api.create("pods", make_pod("p1", cpu="3"))
    h.step()
    assert {h.node_of("p0"), h.node_of("p1")} == {"n0", "n1"}  # the old node still counts
    fixed = copy.deepcopy(broken)
    fixed["status"]["allocatable"]["cpu"] = "4"
    h.api.update("nodes", fixed)
    h.step()
    assert not h.core.skipped
    check_invariants(h)


def test_a_node_the_graph_refuses_on_resize_is_put_back_whole(monkeypatch) -> None:
    h = harness(make_node("n0", cpu="4"), make_node("n1", cpu="4")).start()
    h.api.create("pods", make_pod("p0", cpu="2"))
    h.step()
    node = h.node_of("p0")
    backend = h.core.allocator.backend
    refuse = {"once": True}
    real_add = backend.add_node

    def add_node(obj, rank):  # a graph that refuses the resized node once
        if refuse.pop("once", False):
            raise GraphError("refused for the test")
        return real_add(obj, rank)

    monkeypatch.setattr(backend, "add_node", add_node)
    bigger = copy.deepcopy(h.api.get("nodes", f"/{node}"))
    bigger["status"]["allocatable"]["cpu"] = "8"
    h.api.update("nodes", bigger)
    h.step()
    assert graph_nodes(h) == ["n0", "n1"], "the node was removed and not put back"
    assert h.core.nodes[node]["status"]["allocatable"]["cpu"] == "4"
    assert [e["regarding"]["name"] for e in h.events("InvalidNode")] == [node]
    check_invariants(h)  # p0's share is still held on its node
    h.api.update("nodes", bigger)  # the same change again, now accepted
    h.step()
    assert h.core.nodes[node]["status"]["allocatable"]["cpu"] == "8"
    check_invariants(h)


@pytest.mark.parametrize(("change", "field"), [
    ({"spec": {"containers": [{"name": "c", "image": "busybox", "resources": {
        "requests": {"cpu": "9" * 5000}}}]}}, "spec.containers[0].resources.requests.cpu"),
    ({"metadata": {"annotations": {"fluxinfra.io/duration": "9" * 400}}},
     "metadata.annotations[fluxinfra.io/duration]"),
    ({"metadata": {"labels": {"fluxinfra.io/group": "g", "fluxinfra.io/group-size": "9" * 5000}}},
     "metadata.labels[fluxinfra.io/group-size]"),
    ({"spec": {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "zone",
                                              "whenUnsatisfiable": "DoNotSchedule"}]}},
     "spec.topologySpreadConstraints[0]"),
])
def test_a_pod_of_ours_it_cannot_read_gets_an_event_naming_the_field(
        caplog: pytest.LogCaptureFixture, change: dict, field: str) -> None:
    """Pods an API server can hold (they pass its schema) that the scheduler cannot read."""
    h = harness().start()
    pod = make_pod("bad")
    for part, fields in change.items():
        pod[part].update(fields)
    h.api.create("pods", pod)
    h.api.create("pods", make_pod("good"))
    with caplog.at_level(logging.WARNING):
        h.step()
        h.step()
    assert len(warnings_of(caplog)) == 1
    [event] = h.events("InvalidPod")
    assert event["regarding"]["name"] == "bad" and field in event["note"]
    assert h.node_of("good") == "n0"


def test_objects_without_a_readable_identity_are_skipped_with_one_line(
        caplog: pytest.LogCaptureFixture) -> None:
    h = harness().start()
    with caplog.at_level(logging.WARNING):
        for kind, obj in (("pods", {"metadata": 5}), ("pods", "not an object"),
                          ("podgroups", {"metadata": {"namespace": "ns"}}),
                          ("nodes", {"metadata": {"name": ["n9"]}})):
            h.runner.events.put((kind, "ADDED", obj))
        h.runner.apply_pending()
    messages = [r.getMessage() for r in warnings_of(caplog)]
    assert messages == [
        "cannot read pod ?/?, skipped: metadata: 5 is not an object",
        "cannot read pod ?/?, skipped: pod: 'not an object' is not an object",
        "cannot read PodGroup ns/?, skipped: metadata.name: None is null; give a non-empty "
        "string",
        "cannot read a Node without metadata.name, skipped: metadata.name: ['n9'] is a list; "
        "give a non-empty string"]
    assert h.core.metrics.errors.value(source="invalid_object") == 4
    assert h.core.metrics.errors.value(source="apply") == 0


def test_a_podgroup_with_an_unreadable_quantity_gets_an_event_and_its_pods_wait() -> None:
    h = harness().start()
    h.api.create("podgroups", make_podgroup("g", 2, minResources={"cpu": "9" * 5000}))
    for i in range(2):
        h.api.create("pods", make_pod(f"g-{i}", labels={"scheduling.x-k8s.io/pod-group": "g"}))
    h.step()
    [event] = h.events("InvalidPodGroup")
    assert "spec.minResources.cpu" in event["note"]
    assert not h.node_of("g-0") and not h.node_of("g-1")


def test_a_pdb_that_cannot_be_read_is_skipped_and_preemption_still_runs(
        caplog: pytest.LogCaptureFixture) -> None:
    h = harness().start()
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "b", "namespace": "default"},
           "spec": {"selector": {}}, "status": {"disruptionsAllowed": "many"}}
    with caplog.at_level(logging.WARNING):
        h.core.on_object("poddisruptionbudgets", "ADDED", pdb)
    assert "status.disruptionsAllowed" in warnings_of(caplog)[0].getMessage()
    assert not h.core.pdbs
    h.api.create("pods", make_pod("low", cpu="4", priority=0))
    h.step()
    h.api.create("pods", make_pod("high", cpu="4", priority=100))
    h.step()
    h.step()
    assert h.events("Preempted"), "the cycle that preempts read no broken budget"
