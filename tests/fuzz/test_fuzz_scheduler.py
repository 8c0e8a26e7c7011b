"""The scheduler core: broken Node, Pod, PodGroup, Namespace and PodDisruptionBudget objects
through start-up (``load``), the event handlers (through the runner's ``apply_pending``, as
the daemon feeds them) and the scheduling cycle.

The contract: nothing raises (start-up completes, the runner's catch-all for a failed event is
never reached, every cycle runs); an object that cannot be read is skipped with log lines that
carry no traceback, at most one per object; a Node update that cannot be read changes nothing
(the node as it was, in the graph, the ledger and the core alike), and the graph, the
allocator's books and the ledger always agree on which nodes exist.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from services_fuzz import QUANTITIES, broken, fuzz, json_values

from fluxinfra.kube.shapes import ShapeError, check_node
from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.pods import PodInfo
from fluxinfra.scheduler.runner import Runner


def node(name: str, cpu: Any = "8", memory: Any = "32Gi") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": f"uid-{name}",
                         "labels": {"kubernetes.io/hostname": name,
                                    "topology.kubernetes.io/zone": "z1"}},
            "spec": {"taints": [{"key": "k", "value": "v", "effect": "PreferNoSchedule"}]},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110",
                                       "nvidia.com/gpu": "2"},
                       "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod(name: str, *, node_name: str = "", labels: dict[str, str] | None = None,
        cpu: Any = "1") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "fluxion", "priority": 10, "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"anti": "x"}},
                "topologyKey": "kubernetes.io/hostname"}]}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                                       "whenUnsatisfiable": "DoNotSchedule",
                                       "labelSelector": {"matchLabels": {"app": "a"}}}],
        "containers": [{"name": "c", "image": "busybox",
                        "ports": [{"containerPort": 80, "hostPort": 9000 + len(name)}],
                        "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "labels": {"app": "a", **(labels or {})},
                         "annotations": {"fluxinfra.io/duration": "600s"},
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec,
            "status": {"phase": "Running" if node_name else "Pending",
                       "conditions": [{"type": "PodScheduled", "status": "False"}]}}


PODGROUP = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g",
                         "annotations": {"fluxinfra.io/topology-preferred": "zone"}},
            "spec": {"minMember": 2, "minResources": {"cpu": "2"},
                     "scheduleTimeoutSeconds": 30}}
NAMESPACE = {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "ns", "labels": {"team": "a"}}}
PDB = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
       "metadata": {"name": "b", "namespace": "ns"},
       "spec": {"selector": {"matchLabels": {"app": "a"}}},
       "status": {"disruptionsAllowed": 1, "disruptedPods": {}}}
NODES = [node("n0"), node("n1")]
PODS = [pod("run", node_name="n0"), pod("wait"),
        pod("g-0", labels={"scheduling.x-k8s.io/pod-group": "g"}),
        pod("l-0", labels={"fluxinfra.io/group": "l", "fluxinfra.io/group-size": "2"})]


class RecordingBinder:
    """A TEST DOUBLE of the core's ``Binder``: every bind succeeds at once, every report is
    recorded (what the KubeBinder would send to the API server)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def bind(self, assignments: list[tuple[PodInfo, str]]) -> list[Exception | None]:
        return [None] * len(assignments)

    def pod_event(self, pod: PodInfo, reason: str, note: str, action: str) -> None:
        self.events.append((pod.key, reason, note))

    def pod_unschedulable(self, pod: PodInfo, message: str) -> None:
        pass

    def podgroup_event(self, namespace: str, name: str, uid: str, reason: str,
                       note: str) -> None:
        self.events.append((f"{namespace}/{name}", reason, note))

    def podgroup_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        pass

    def node_event(self, name: str, uid: str, reason: str, note: str) -> None:
        self.events.append((name, reason, note))

    def preempt(self, victim: PodInfo, preemptor: PodInfo, node: str) -> bool:
        return True

    def nominate(self, pod: PodInfo, node: str) -> None:
        pass


class Records(logging.Handler):
    """The scheduler's log records of one input."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


RECORDS = Records()
logging.getLogger("fluxinfra.scheduler").addHandler(RECORDS)


def fresh() -> tuple[SchedulerCore, RecordingBinder]:
    binder = RecordingBinder()
    core = SchedulerCore(FluxionAllocator(policy="first"), binder,
                         SchedulerConfig(async_binds=False))
    RECORDS.records.clear()
    return core, binder


def readable(obj: Any) -> str | None:
    try:
        return check_node(obj)
    except ShapeError:
        return None


def consistent(core: SchedulerCore) -> None:
    """The core, the allocator, its graph and the ledger agree on the nodes; the log has no
    traceback."""
    names = set(core.nodes)
    assert all(readable(n) == name for name, n in core.nodes.items())
    assert set(core.allocator.nodes) == names
    assert {s.name for s in core.ledger.existing()} == names
    graph = core.allocator.backend.matcher.graph
    assert {graph.name[v] for v in range(len(graph))
            if graph.type[v] == "node" and not graph.removed[v]} == names
    assert not [r for r in RECORDS.records if r.exc_info or r.levelno >= logging.ERROR], \
        [r.getMessage() for r in RECORDS.records if r.exc_info or r.levelno >= logging.ERROR]


def nodes_like(seeds: list[dict[str, Any]]) -> st.SearchStrategy:
    odd = st.builds(node, st.sampled_from(["n0", "n2", "x"]), st.sampled_from(QUANTITIES),
                    st.sampled_from(QUANTITIES))
    return st.one_of(broken(seeds), odd, json_values())


@fuzz
@given(st.lists(nodes_like(NODES), max_size=3), st.lists(broken([PODGROUP]), max_size=2),
       st.lists(st.one_of(broken(PODS), json_values()), max_size=4))
@example([{"status": {"allocatable": {"cpu": "4"}}}], [], [])
@example([node("x", cpu="9" * 5000)], [], [])
@example([node("x", cpu=1e308)], [], [])  # found: the message's number overflowed a float
@example([node("x", cpu="16Gi")], [], [pod("big", cpu="16")])
@example([{"metadata": {"name": "x", "labels": {"rack": 7}}}], [], [])
@example([], [{"metadata": {"name": "g", "namespace": "ns"},
               "spec": {"minMember": 2, "minResources": {"cpu": "9" * 5000}}}], [])
def test_load(extra_nodes: list[Any], podgroups: list[Any], pods: list[Any]) -> None:
    core, _ = fresh()
    nodes = [*NODES, *extra_nodes]
    core.load(copy.deepcopy(nodes), podgroups, [*PODS, *pods], now=0)
    assert core.ready
    expected = {name: n for n in nodes if (name := readable(n)) is not None}
    assert set(core.nodes) == set(expected)
    consistent(core)
    unreadable = sum(readable(n) is None for n in nodes) + len(podgroups) + len(pods)
    warnings = [r for r in RECORDS.records if r.levelno == logging.WARNING]
    assert len(warnings) <= unreadable + len(PODS), [r.getMessage() for r in warnings]
    core.schedule(1)
    core.schedule(2)
    consistent(core)


def snapshot(core: SchedulerCore, name: str) -> tuple[Any, ...]:
    state = core.ledger.nodes.get(name)
    return (copy.deepcopy(core.nodes.get(name)), core.allocator.shapes.get(name),
            None if state is None else (state.allocatable, state.labels, state.taints,
                                        state.exists))


@fuzz
@given(st.lists(st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
                          nodes_like(NODES)), min_size=1, max_size=5))
@example([("MODIFIED", node("n0", cpu="9" * 5000)), ("MODIFIED", node("n0", cpu="4"))])
@example([("MODIFIED", {"metadata": {"name": "n0"}, "status": "broken"})])
@example([("DELETED", {"metadata": {"name": "n1"}, "status": "broken"})])
def test_node_events(events: list[tuple[str, Any]]) -> None:
    core, _ = fresh()
    core.load(copy.deepcopy(NODES), [], copy.deepcopy(PODS), now=0)
    core.schedule(1)
    for etype, obj in events:
        name = readable(obj)
        if name is None and etype != "DELETED":
            label = obj.get("metadata", {}).get("name") if isinstance(obj, dict) and \
                isinstance(obj.get("metadata"), dict) else None
            before = snapshot(core, label) if isinstance(label, str) else None
            core.on_node(etype, obj, 2)
            if before is not None:
                assert snapshot(core, label) == before, f"{label}: half a change"
        else:
            core.on_node(etype, obj, 2)
        consistent(core)
        core.schedule(3)
        consistent(core)


OTHER_KINDS = {"pods": st.one_of(broken(PODS), json_values()),
               "podgroups": st.one_of(broken([PODGROUP]), json_values()),
               "namespaces": st.one_of(broken([NAMESPACE]), json_values()),
               "poddisruptionbudgets": st.one_of(broken([PDB]), json_values()),
               "nodes": nodes_like(NODES)}


@st.composite
def watch_events(draw) -> tuple[str, str, Any]:
    kind = draw(st.sampled_from(sorted(OTHER_KINDS)))
    return kind, draw(st.sampled_from(["ADDED", "MODIFIED", "DELETED"])), draw(OTHER_KINDS[kind])


@fuzz
@given(st.lists(watch_events(), min_size=1, max_size=6))
@example([("pods", "ADDED", {"metadata": 5})])
@example([("pods", "ADDED", pod("p", cpu="9" * 5000))])
@example([("poddisruptionbudgets", "ADDED", {**PDB, "status": {"disruptionsAllowed": "x"}}),
          ("pods", "ADDED", pod("hi", cpu="8"))])
def test_watch_events(events: list[tuple[str, str, Any]]) -> None:
    core, binder = fresh()
    runner = Runner(None, core)  # only its apply step: no API calls are made
    core.load(copy.deepcopy(NODES), [PODGROUP], copy.deepcopy(PODS), now=0)
    for event in events:
        runner.events.put(event)
    runner.apply_pending()
    assert core.metrics.errors.value(source="apply") == 0, "an event reached the catch-all"
    runner.cycle()
    runner.cycle()
    consistent(core)
    for kind, etype, obj in events:
        if kind == "pods" and etype != "DELETED" and _ours_and_waiting(obj) \
                and _unreadable_pod(obj):
            key = f"{obj['metadata'].get('namespace', 'default')}/{obj['metadata']['name']}"
            assert any(k == key and reason == "InvalidPod" for k, reason, _ in binder.events)


def _ours_and_waiting(obj: Any) -> bool:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    spec = obj.get("spec") if isinstance(obj, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"] \
        and isinstance(meta.get("namespace", ""), str) and isinstance(meta.get("uid", ""), str) \
        and isinstance(spec, dict) and spec.get("schedulerName") == "fluxion" \
        and not spec.get("nodeName")


def _unreadable_pod(obj: Any) -> bool:
    from fluxinfra.scheduler.pods import PodSpecError, pod_info

    try:
        pod_info(obj)
    except PodSpecError:
        return True
    return False


@fuzz
@given(st.sampled_from(PODS), broken(PODS, edits=2))
@example(PODS[1], {**PODS[1], "status": {"phase": 5}})
@example(PODS[1], {**PODS[1], "metadata": {**PODS[1]["metadata"], "labels": []}})
def test_an_update_reads_as_a_whole_pod_would(before: Any, after: Any) -> None:
    """:func:`pod_info_update` (the watch's updates, reusing what an unchanged spec gave)
    answers what :func:`pod_info` of the whole pod answers: the same view, or the same error
    naming the same field."""
    from fluxinfra.scheduler.pods import PodSpecError, pod_info, pod_info_update

    previous = pod_info(before)
    try:
        whole: Any = pod_info(after)
    except PodSpecError as exc:
        whole = str(exc)
    try:
        update: Any = pod_info_update(after, previous)
    except PodSpecError as exc:
        update = str(exc)
    assert update == whole
