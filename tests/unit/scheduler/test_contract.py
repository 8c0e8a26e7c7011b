"""The Kubernetes pod contract, probe by probe (issue 11's "Why"), on the API double.

Every probe the issue lists is a test here, run with each allocator (Fluxion's matcher in
process, the same over the real gRPC service on loopback, and the kube-scheduler-like spread
baseline; the real API server runs the same probes in
``tests/e2e/test_scheduler_contract.py``). Each ends with :func:`check_invariants`: no node
over-committed in any resource, the ledger and the allocator's books equal to what runs, the
graph's pools equal to the books.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from fluxinfra.scheduler.allocator import Allocator, SpreadAllocator
from fluxinfra.scheduler.core import SchedulerConfig
from fluxinfra.scheduler.fluxion import FluxionAllocator, RemoteBackend
from fluxinfra.scheduler.pods import LABEL_GROUP, LABEL_GROUP_SIZE, LABEL_PODGROUP

from .harness import Harness, check_invariants
from .kube_double import KubeApiDouble, make_node, make_pod, make_podgroup

ZONE, RACK = "topology.kubernetes.io/zone", "example.com/rack"
ALLOCATORS: dict[str, Callable[[], Allocator]] = {
    "fluxion": lambda: FluxionAllocator(policy="first", levels=f"zone={ZONE},rack={RACK}"),
    "spread": lambda: SpreadAllocator(levels=FluxionAllocator(
        levels=f"zone={ZONE},rack={RACK}").levels),
}


@pytest.fixture(params=[*sorted(ALLOCATORS), "fluxion-grpc"])
def cluster(request: pytest.FixtureRequest) -> Callable[..., Harness]:
    if request.param == "fluxion-grpc":
        target = request.getfixturevalue("fluxion_service")
        factory: Callable[[], Allocator] = lambda: FluxionAllocator(  # noqa: E731
            backend=RemoteBackend(target, timeout=10), levels=f"zone={ZONE},rack={RACK}")
    else:
        factory = ALLOCATORS[request.param]

    def build(*nodes: dict[str, Any], config: SchedulerConfig | None = None) -> Harness:
        api = KubeApiDouble()
        for node in nodes:
            api.create("nodes", node)
        return Harness(api, factory(), config).start()
    return build


def gang(api: KubeApiDouble, name: str, size: int, *, podgroup: bool = False,
         count: int | None = None, start: int = 0, **pod: Any) -> list[str]:
    labels = ({LABEL_PODGROUP: name} if podgroup
              else {LABEL_GROUP: name, LABEL_GROUP_SIZE: str(size)})
    labels.update(pod.pop("labels", {}))
    names = [f"{name}-{i}" for i in range(start, start + (size if count is None else count))]
    for n in names:
        api.create("pods", make_pod(n, labels=labels, **pod))
    return names


def condition(h: Harness, pod: str) -> dict[str, Any]:
    return h.conditions(pod).get("PodScheduled", {})


def waiting(h: Harness, pod: str, *words: str) -> bool:
    """The pod is unbound, PodScheduled=False reason Unschedulable, the message naming
    ``words``."""
    c = condition(h, pod)
    return (h.node_of(pod) == "" and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
            and all(w in c.get("message", "") for w in words))


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    out = {"key": key, "effect": effect}
    if value:
        out["value"] = value
    return out


# -- probe 1: nodeSelector ------------------------------------------------------------------------
def test_node_selector_is_honoured(cluster) -> None:
    h = cluster(make_node("b", labels={"pool": "b"}))
    for i in range(3):
        h.api.create("pods", make_pod(f"p{i}", spec={"nodeSelector": {"pool": "a"}}))
    h.step()
    assert not h.api.bindings, "never on a pool=b node"
    assert waiting(h, "p0", "0/1 nodes are available",
                   "1 node(s) didn't match Pod's node affinity/selector")
    h.api.create("nodes", make_node("a", labels={"pool": "a"}))
    h.step()
    assert {h.node_of(f"p{i}") for i in range(3)} == {"a"}
    check_invariants(h)


# -- probe 2: a gated member holds its gang back --------------------------------------------------
def test_a_gated_member_keeps_the_whole_gang_waiting(cluster) -> None:
    h = cluster(make_node("n0", cpu="8"))
    names = gang(h.api, "g", 4, count=3)
    gated = make_pod("g-3", labels={LABEL_GROUP: "g", LABEL_GROUP_SIZE: "4"},
                     spec={"schedulingGates": [{"name": "example.com/quota"}]})
    h.api.create("pods", gated)
    h.step()
    h.step(5)
    assert not h.api.bindings, "never 3 of 4"
    assert all(waiting(h, n, "3 of minMember 4", "1 gated by schedulingGates") for n in names)
    assert "PodScheduled" not in h.conditions("g-3"), "the gated pod keeps its own condition"
    ungated = h.api.get("pods", "default/g-3")
    ungated["spec"]["schedulingGates"] = []
    h.api.update("pods", ungated)
    h.step()
    assert len(h.api.bindings) == 4
    check_invariants(h)


# -- probe 3: taints and tolerations --------------------------------------------------------------
def test_tolerated_gpu_taint_and_condition_taints(cluster) -> None:
    h = cluster(make_node("gpu", gpu=1, taints=[taint("nvidia.com/gpu")]),
                make_node("disk", taints=[taint("node.kubernetes.io/disk-pressure")]),
                make_node("net", taints=[taint("node.kubernetes.io/network-unavailable")]),
                make_node("down", taints=[taint("node.kubernetes.io/not-ready", "NoExecute")]))
    h.api.create("pods", make_pod("trainer", gpu=1, spec={"tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}))
    h.api.create("pods", make_pod("web"))
    h.step()
    assert h.node_of("trainer") == "gpu"
    assert waiting(h, "web", "0/4 nodes are available",
                   "node(s) had untolerated taint {node.kubernetes.io/disk-pressure: }",
                   "node(s) had untolerated taint {nvidia.com/gpu: }")
    check_invariants(h)


@pytest.mark.parametrize("toleration, lands", [
    ({"operator": "Exists"}, True),                                  # empty key: every taint
    ({"key": "k", "operator": "Exists"}, True),                      # no effect: every effect
    ({"key": "k", "value": "v"}, True),                              # Equal is the default
    ({"key": "k", "value": "w"}, False),
    ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
    ({"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}, False),
])
def test_toleration_semantics(cluster, toleration, lands) -> None:
    h = cluster(make_node("t", taints=[taint("k", value="v")]))
    h.api.create("pods", make_pod("p", spec={"tolerations": [toleration]}))
    h.step()
    assert (h.node_of("p") == "t") is lands


def test_cordoned_node_takes_only_pods_tolerating_unschedulable(cluster) -> None:
    h = cluster(make_node("c", unschedulable=True))
    h.api.create("pods", make_pod("plain"))
    h.api.create("pods", make_pod("ds", spec={"tolerations": [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
         "effect": "NoSchedule"}]}))
    h.step()
    assert h.node_of("ds") == "c"
    assert waiting(h, "plain", "node(s) were unschedulable")
    check_invariants(h)


# -- probe 4: foreign pods and half cores are counted exactly -------------------------------------
def test_a_node_of_half_cores_and_foreign_pods_is_never_overcommitted(cluster) -> None:
    h = cluster(make_node("n0", cpu="4"))
    for i in range(4):
        h.api.create("pods", make_pod(f"ours{i}", cpu="500m", memory="128Mi"))
    for i in range(2):
        h.api.create("pods", make_pod(f"theirs{i}", cpu="1", memory="128Mi",
                                      scheduler="default-scheduler", node="n0",
                                      phase="Running"))
    h.step()
    assert all(h.node_of(f"ours{i}") == "n0" for i in range(4)), "4 x 500m + 2 x 1 = 4 cores"
    h.api.create("pods", make_pod("fifth", cpu="500m", memory="128Mi"))
    h.step()
    assert waiting(h, "fifth", "Insufficient cpu"), "4,500m on 4,000m would be over-committed"
    h.api.set_phase("default/theirs0", "Succeeded")
    h.step()
    assert h.node_of("fifth") == "n0"
    check_invariants(h)


# -- probe 5: every resource by name --------------------------------------------------------------
def test_ephemeral_storage_pod_count_and_vendor_resources(cluster) -> None:
    h = cluster(make_node("disk", extra={"ephemeral-storage": "50Gi"}, pods="3"),
                make_node("nv", gpu=8))
    for i in range(2):
        h.api.create("pods", make_pod(f"big{i}", cpu="100m",
                                      extra={"ephemeral-storage": "40Gi"}))
    h.step()
    on_disk = [i for i in range(2) if h.node_of(f"big{i}") == "disk"]
    assert len(on_disk) == 1, "two 40Gi pods never share a 50Gi node"
    for i in range(6):
        h.api.create("pods", make_pod(f"tiny{i}", cpu="10m", memory="1Mi",
                                      spec={"nodeSelector": {"kubernetes.io/hostname": "disk"}}))
    h.api.create("pods", make_pod("amd", extra={"amd.com/gpu": "1"}))
    h.step()
    assert sum(h.node_of(f"tiny{i}") == "disk" for i in range(6)) == 2, "pods: 3 (one is big)"
    assert waiting(h, "amd", "Insufficient amd.com/gpu"), "never on an NVIDIA-only node"
    check_invariants(h)


def test_effective_request_counts_init_containers_sidecars_and_overhead(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"))
    spec = {"initContainers": [
        {"name": "sidecar", "image": "b", "restartPolicy": "Always",
         "resources": {"requests": {"cpu": "500m"}}},
        {"name": "init", "image": "b", "resources": {"requests": {"cpu": "1200m"}}}],
        "overhead": {"cpu": "100m"}}
    # max(1 app + 0.5 sidecar, 1.2 init + 0.5 sidecar) + 0.1 = 1.8 cores
    h.api.create("pods", make_pod("p", cpu="1", spec=spec))
    h.api.create("pods", make_pod("q", cpu="300m"))
    h.step()
    assert h.node_of("p") == "n0" and waiting(h, "q", "Insufficient cpu")
    check_invariants(h)


# -- probe 6: minMember ---------------------------------------------------------------------------
def test_min_member_binds_as_soon_as_min_member_fit_and_the_rest_join(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"))
    h.api.create("podgroups", make_podgroup("pg", 2))
    names = gang(h.api, "pg", 4, podgroup=True, cpu="1")
    h.step()
    bound = [n for n in names if h.node_of(n)]
    assert len(bound) == 2, "Coscheduling binds minMember as soon as they fit"
    rest = [n for n in names if n not in bound]
    assert all(waiting(h, n) for n in rest)
    h.api.create("nodes", make_node("n1", cpu="1"))
    h.step()
    assert sum(bool(h.node_of(n)) for n in names) == 3, "later members join one by one"
    check_invariants(h)


# -- probe 7: a launcher and its workers ----------------------------------------------------------
def test_members_with_different_requests_each_get_their_own(cluster) -> None:
    h = cluster(make_node("g0", cpu="16", gpu=8), make_node("g1", cpu="16", gpu=8))
    labels = {LABEL_GROUP: "mpi", LABEL_GROUP_SIZE: "3"}
    h.api.create("pods", make_pod("launcher", cpu="1", labels=labels))
    for i in range(2):
        h.api.create("pods", make_pod(f"worker{i}", cpu="8", gpu=8, labels=labels))
    h.step()
    assert {h.node_of("worker0"), h.node_of("worker1")} == {"g0", "g1"}
    assert h.node_of("launcher") in ("g0", "g1")
    check_invariants(h)


# -- probe 8: every waiting pod says why ----------------------------------------------------------
def test_every_waiting_pod_of_a_gang_is_unschedulable_with_the_reason(cluster) -> None:
    h = cluster(make_node("n0", cpu="4"), make_node("n1", cpu="4"))
    h.api.create("pods", make_pod("theirs", cpu="3", scheduler="default-scheduler",
                                  node="n0", phase="Running"))
    h.api.create("podgroups", make_podgroup("big", 6))
    names = gang(h.api, "big", 6, podgroup=True, cpu="1")
    h.step()
    assert not h.api.bindings
    assert all(waiting(h, n, "podgroup default/big: 6 pod(s) to place",
                       "they do not fit all at once (2/2 nodes are available") for n in names)
    h.api.create("podgroups", make_podgroup("never", 9))
    never = gang(h.api, "never", 9, podgroup=True, cpu="1")
    h.step()
    assert all(waiting(h, n, "can never fit") for n in never)
    patches = len(h.api.status_patches)
    h.step(5)
    h.step(5)
    assert len(h.api.status_patches) == patches, "set once per change, not once per cycle"
    check_invariants(h)


def test_a_pod_naming_a_missing_podgroup_is_told_so(cluster) -> None:
    h = cluster(make_node("n0"))
    gang(h.api, "ghost", 2, podgroup=True)
    h.step()
    assert waiting(h, "ghost-0", "PodGroup default/ghost not found")
    assert any("not found" in e["note"] for e in h.events("FailedScheduling"))
    h.api.create("podgroups", make_podgroup("ghost", 2))
    h.step()
    assert len(h.api.bindings) == 2
    check_invariants(h)


def test_min_resources_must_be_free_before_the_group_is_tried(cluster) -> None:
    h = cluster(make_node("n0", cpu="4"))
    h.api.create("podgroups", make_podgroup("pg", 2, minResources={"cpu": "6"}))
    names = gang(h.api, "pg", 2, podgroup=True, cpu="1")
    h.step()
    assert all(waiting(h, n, "minResources", "cpu=2000m") for n in names)
    h.api.create("nodes", make_node("n1", cpu="2"))
    h.step()
    assert all(h.node_of(n) for n in names)
    check_invariants(h)


# -- node affinity, inter-pod affinity, spread, ports ---------------------------------------------
@pytest.mark.parametrize("expr, fields, node", [
    ({"key": "cores", "operator": "Gt", "values": ["8"]}, None, "big"),
    ({"key": "cores", "operator": "Lt", "values": ["8"]}, None, "small"),
    ({"key": "gpu", "operator": "Exists"}, None, "big"),
    ({"key": "gpu", "operator": "DoesNotExist"}, None, "small"),
    ({"key": "pool", "operator": "NotIn", "values": ["a"]}, None, "small"),
    (None, {"key": "metadata.name", "operator": "In", "values": ["small"]}, "small"),
])
def test_required_node_affinity_operators(cluster, expr, fields, node) -> None:
    h = cluster(make_node("big", labels={"cores": "16", "gpu": "x", "pool": "a"}),
                make_node("small", labels={"cores": "4", "pool": "b"}))
    term: dict[str, Any] = {}
    if expr:
        term["matchExpressions"] = [expr]
    if fields:
        term["matchFields"] = [fields]
    h.api.create("pods", make_pod("p", spec={"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}}))
    h.step()
    assert h.node_of("p") == node


def test_pod_anti_affinity_spreads_replicas_and_existing_anti_affinity_is_respected(
        cluster) -> None:
    h = cluster(*[make_node(f"n{i}") for i in range(3)])
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "web"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    for i in range(4):
        h.api.create("pods", make_pod(f"web{i}", labels={"app": "web"},
                                      spec={"affinity": anti}))
    h.step()
    placed = [h.node_of(f"web{i}") for i in range(4)]
    assert sorted(n for n in placed if n) == ["n0", "n1", "n2"]
    assert waiting(h, f"web{placed.index('')}", "didn't match pod anti-affinity rules")
    h.api.create("pods", make_pod("intruder", labels={"app": "web"}))
    h.step()
    assert waiting(h, "intruder", "didn't satisfy existing pods anti-affinity rules")
    check_invariants(h)


def minicluster_pods(size: int, scheduler: str = "fluxion") -> tuple[dict, list[dict]]:
    """The MiniCluster's own PodGroup and pods (rendered by ``fluxinfra.k8s.minicluster``: one
    broker per node by required pod anti-affinity on ``kubernetes.io/hostname``), as its
    indexed Job would create them."""
    from fluxinfra.k8s.minicluster import MiniClusterArgs, minicluster_manifests

    args = MiniClusterArgs(name="mc", namespace="default", size=size, max_size=size,
                           pod_group=True, scheduler_name=scheduler)
    out = {o["kind"]: o for o in minicluster_manifests(args)}
    template = out["Job"]["spec"]["template"]
    assert template["spec"]["affinity"]["podAntiAffinity"]
    pods = []
    for i in range(size):
        pod = make_pod(f"mc-{i}", cpu="1", labels=template["metadata"]["labels"],
                       spec={"affinity": template["spec"]["affinity"]})
        pods.append(pod)
    return out["PodGroup"], pods


def test_a_gang_with_required_anti_affinity_takes_one_node_per_member(cluster) -> None:
    """Flux on Kubernetes needs one broker per node: a MiniCluster's pods form a gang whose
    members repel each other by hostname. The members must land on distinct nodes, and while
    fewer nodes than members exist none is bound (never a half-started instance), even though
    every node has the cores for all of them."""
    h = cluster(*[make_node(f"n{i}", cpu="8") for i in range(3)])
    group, pods = minicluster_pods(4)
    h.api.create("podgroups", make_podgroup("mc", group["spec"]["minMember"]))
    for pod in pods:
        h.api.create("pods", pod)
    h.step()
    assert not h.api.bindings, "3 nodes for 4 brokers: nothing bound"
    assert all(waiting(h, f"mc-{i}", "4 pod(s) to place, only 3 fit now", "3 member(s) placed",
                       "3 node(s) didn't match pod anti-affinity rules") for i in range(4))
    h.api.create("nodes", make_node("n3", cpu="8"))
    h.step()
    h.step(6)
    placed = [h.node_of(f"mc-{i}") for i in range(4)]
    assert sorted(placed) == ["n0", "n1", "n2", "n3"], placed
    check_invariants(h)


def test_pod_affinity_colocates_with_its_peer(cluster) -> None:
    h = cluster(*[make_node(f"n{i}", labels={ZONE: f"z{i}"}) for i in range(3)])
    h.api.create("pods", make_pod("db", labels={"app": "db"}, scheduler="default-scheduler",
                                  node="n2", phase="Running"))
    aff = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": ZONE}]}}
    for i in range(3):
        h.api.create("pods", make_pod(f"app{i}", spec={"affinity": aff}))
    h.step()
    assert {h.node_of(f"app{i}") for i in range(3)} == {"n2"}
    check_invariants(h)


def test_topology_spread_with_min_domains_and_match_label_keys(cluster) -> None:
    h = cluster(*[make_node(f"n{i}", labels={ZONE: f"z{i % 2}"}) for i in range(4)])
    spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
               "labelSelector": {"matchLabels": {"app": "a"}}, "minDomains": 3,
               "matchLabelKeys": ["rev"]}]
    for i in range(3):
        h.api.create("pods", make_pod(f"a{i}", labels={"app": "a", "rev": "1"},
                                      spec={"topologySpreadConstraints": spread}))
    h.step()
    # minDomains 3 with 2 zones: the global minimum counts as 0, so each zone takes one pod
    placed = sorted(h.node_of(f"a{i}") for i in range(3))
    zones = [int(n[1]) % 2 for n in placed if n]
    assert sorted(zones) == [0, 1] and "" in placed
    h.api.create("pods", make_pod("b0", labels={"app": "a", "rev": "2"},
                                  spec={"topologySpreadConstraints": spread}))
    h.step()
    assert h.node_of("b0"), "another revision is counted on its own (matchLabelKeys)"
    check_invariants(h)


def test_host_ports_conflict_only_on_the_same_node_protocol_and_ip(cluster) -> None:
    h = cluster(make_node("n0"), make_node("n1"))
    port = [{"containerPort": 80, "hostPort": 8080}]
    for i in range(3):
        h.api.create("pods", make_pod(f"p{i}", ports=port))
    h.api.create("pods", make_pod("udp", ports=[{"containerPort": 80, "hostPort": 8080,
                                                  "protocol": "UDP"}]))
    h.step()
    assert sorted(h.node_of(f"p{i}") for i in range(3)) == ["", "n0", "n1"]
    assert h.node_of("udp")
    assert any(waiting(h, f"p{i}", "didn't have free ports") for i in range(3))
    check_invariants(h)


# -- topology-aware gangs -------------------------------------------------------------------------
def racks() -> list[dict[str, Any]]:
    return [make_node(f"r{r}n{k}", cpu="2", labels={ZONE: f"z{r // 2}", RACK: f"rack{r}"})
            for r in range(4) for k in range(2)]


@pytest.mark.parametrize("level", ["rack", "zone"])
def test_a_gang_required_in_one_domain(cluster, level) -> None:
    h = cluster(*racks())
    size = 4 if level == "rack" else 8
    h.api.create("podgroups", make_podgroup(
        "pg", size, annotations={"fluxinfra.io/topology-required": level}))
    names = gang(h.api, "pg", size, podgroup=True, cpu="1")
    h.step()
    nodes = [h.node_of(n) for n in names]
    assert all(nodes)
    key = RACK if level == "rack" else ZONE
    labels = {h.api.get("nodes", f"/{n}")["metadata"]["labels"][key] for n in nodes}
    assert len(labels) == 1
    check_invariants(h)


def test_required_topology_that_no_domain_holds_waits_and_preferred_falls_back(
        cluster) -> None:
    h = cluster(*racks())
    h.api.create("podgroups", make_podgroup(
        "strict", 5, annotations={"fluxinfra.io/topology-required": "rack"}))
    strict = gang(h.api, "strict", 5, podgroup=True, cpu="1")
    h.api.create("podgroups", make_podgroup(
        "loose", 5, annotations={"fluxinfra.io/topology-preferred": "rack"}))
    loose = gang(h.api, "loose", 5, podgroup=True, cpu="1")
    h.step()
    assert all(waiting(h, n, "required in one rack") for n in strict)
    assert all(h.node_of(n) for n in loose)
    check_invariants(h)


# -- binds ----------------------------------------------------------------------------------------
def test_a_failed_bind_in_a_gang_is_retried_to_its_reserved_node(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"), make_node("n1", cpu="2"),
                config=SchedulerConfig(bind_retry_after=2))
    names = gang(h.api, "g", 4, cpu="1")
    real = h.api.bind
    failed: dict[str, str] = {}

    def flaky(namespace: str, pod: str, uid: str, node: str) -> None:
        if pod == "g-2" and not failed:
            failed[pod] = node
            raise __import__("fluxinfra.scheduler.kube", fromlist=["ApiError"]).ApiError(
                503, "ServiceUnavailable", "etcd leader changed")
        real(namespace, pod, uid, node)

    h.api.bind = flaky  # type: ignore[method-assign]
    h.step()
    assert sorted(n for n in names if h.node_of(n)) == ["g-0", "g-1", "g-3"]
    check_invariants(h)  # g-2 still holds its reservation
    h.api.create("pods", make_pod("thief", cpu="1"))
    h.step(1)
    assert h.node_of("thief") == "", "nobody takes the reserved core"
    h.step(2)
    assert h.node_of("g-2") == failed["g-2"]
    check_invariants(h)


def test_a_bind_that_keeps_failing_gives_up_with_one_condition_and_event(cluster) -> None:
    h = cluster(make_node("n0", cpu="2"),
                config=SchedulerConfig(bind_retry_after=1, bind_timeout=10))
    h.api.create("podgroups", make_podgroup("pg", 1, scheduleTimeoutSeconds=5))
    gang(h.api, "pg", 1, podgroup=True)
    h.api.fail_next("bind", 500, times=100)
    for _ in range(10):
        h.step(1)
    msg = condition(h, "pg-0").get("message", "")
    assert "failed" in msg and "queued again" in msg and "5s" in msg
    gave_up = [e for e in h.events("FailedBinding") if "queued again" in e["note"]]
    assert len(gave_up) == 2, "one on the pod, one on the PodGroup"
    h.api.failures["bind"].clear()
    h.step(3)
    assert h.node_of("pg-0") == "n0"
    check_invariants(h)


def test_overcommit_metric_is_exported(cluster) -> None:
    h = cluster(make_node("n0", cpu="1"))
    for i in range(2):  # someone binds by nodeName past the node's capacity
        h.api.create("pods", make_pod(f"x{i}", cpu="1", scheduler="none", node="n0",
                                      phase="Running"))
    h.step()
    assert h.core.metrics.overcommitted.value() == 1
    assert "fluxinfra_scheduler_overcommitted 1" in h.core.metrics.render()
    h.api.create("pods", make_pod("ours", cpu="100m"))
    h.step()
    assert h.node_of("ours") == "", "never onto an over-committed node"
