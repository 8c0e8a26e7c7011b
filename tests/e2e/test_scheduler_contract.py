"""The scheduler's pod contract against a real API server, controller-manager and kubelet.

Every probe of issue 11's "Why" runs here as in ``tests/unit/scheduler/test_contract.py``, but
against the real thing: the real ``fluxinfra scheduler`` process (the official ``kubernetes``
client, the RBAC the stack renders, a token of its ServiceAccount), Node objects with the
capacity, labels and taints a probe needs (the bed's hollow nodes, kept Ready by their Leases),
kube-scheduler placing the "other scheduler's" pods, the controller-manager's pod GC, and the
bed's real kubelet running a pod we placed. After each test, no node holds more than it
allocates (requests summed from the API server's own objects) and the scheduler's
``overcommitted`` metric is 0.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from e2e_cluster import Cluster, wait_for
from fluxion_scheduler import SchedulerProcess, running_scheduler

from fluxinfra.kube.resources import node_allocatable
from fluxinfra.scheduler.pods import pod_info

PIN = "e2e.fluxinfra.io/test"
ZONE, RACK = "topology.kubernetes.io/zone", "e2e.fluxinfra.io/rack"
GROUP = "scheduling.x-k8s.io"


class Fluxion:
    """The running scheduler, its name, and how to talk to the API as an admin."""

    def __init__(self, cluster: Cluster, api_client: Any, proc: SchedulerProcess,
                 name: str, sa: str, namespace: str) -> None:
        from kubernetes import client

        self.cluster = cluster
        self.proc = proc
        self.name = name          #: the schedulerName pods ask for
        self.sa, self.sa_namespace = sa, namespace
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.policy = client.PolicyV1Api(api_client)


@pytest.fixture(scope="module")
def fluxion(cluster: Cluster, api_client: Any,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fluxion]:
    with running_scheduler(cluster, tmp_path_factory.mktemp("fluxion"), "--topology",
                           f"zone={ZONE},rack={RACK}") as run:
        yield Fluxion(cluster, api_client, run.proc, run.name, run.sa, run.namespace)


class Probe:
    """One test's view: its own hollow nodes (labelled ``PIN=<id>``) and namespace; every pod
    it makes is pinned to those nodes, and checked against them when the test ends."""

    def __init__(self, fx: Fluxion, namespace: str, hollow: Any) -> None:
        self.fx, self.ns, self.hollow = fx, namespace, hollow
        self.id = uuid.uuid4().hex[:6]
        self.nodes: list[str] = []

    def node(self, name: str, *, cpu: str = "4", memory: str = "16Gi", **shape: Any) -> str:
        labels = {PIN: self.id, **shape.pop("labels", {})}
        [made] = self.hollow(1, prefix=f"{name}-{self.id}", cpu=cpu, memory=memory,
                             labels=labels, **shape)
        self.nodes.append(made)
        return made

    def condition(self, node: str, kind: str, taint_key: str) -> None:
        """Set a node condition True (as its kubelet would) and wait for the controller's
        taint."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.fx.core.patch_node_status(node, {"status": {"conditions": [{
            "type": kind, "status": "True", "reason": "E2E", "message": "set by the test",
            "lastHeartbeatTime": now, "lastTransitionTime": now}]}})
        wait_for(lambda: any(t["key"] == taint_key for t in self.fx.cluster.get(
            "node", node)["spec"].get("taints") or []), 90, f"{taint_key} on {node}", 1)

    def pod(self, name: str, *, cpu: str = "500m", memory: str = "128Mi",
            scheduler: str | None = None, labels: dict[str, str] | None = None,
            extra: dict[str, str] | None = None, pin: bool = True, **spec: Any) -> str:
        requests = {"cpu": cpu, "memory": memory, **(extra or {})}
        # extended resources cannot be overcommitted: the API server wants limit == request
        limits = {k: v for k, v in requests.items() if "/" in k or k.startswith("hugepages-")}
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "labels": labels or {},
                         "annotations": spec.pop("annotations", {})},
            "spec": {"schedulerName": scheduler or self.fx.name,
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "main", "image": "e2e.invalid/never:1",
                                     "resources": {"requests": requests, "limits": limits},
                                     **spec.pop("container", {})}],
                     **spec}}
        if pin:
            selector = body["spec"].setdefault("nodeSelector", {})
            selector[PIN] = self.id
        self.fx.core.create_namespaced_pod(self.ns, body)
        return name

    def gang(self, group: str, size: int, *, podgroup: bool = True, count: int | None = None,
             start: int = 0, **pod: Any) -> list[str]:
        labels = ({f"{GROUP}/pod-group": group} if podgroup else
                  {"fluxinfra.io/group": group, "fluxinfra.io/group-size": str(size)})
        labels.update(pod.pop("labels", {}))
        return [self.pod(f"{group}-{i}", labels=labels, **pod)
                for i in range(start, start + (size if count is None else count))]

    def podgroup(self, name: str, min_member: int, annotations: dict[str, str] | None = None,
                 **spec: Any) -> None:
        self.fx.custom.create_namespaced_custom_object(GROUP, "v1alpha1", self.ns, "podgroups", {
            "apiVersion": f"{GROUP}/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": {"minMember": min_member, **spec}})

    def get(self, name: str) -> dict[str, Any]:
        return self.fx.core.api_client.sanitize_for_serialization(
            self.fx.core.read_namespaced_pod(name, self.ns))

    def node_of(self, name: str) -> str:
        return self.get(name)["spec"].get("nodeName") or ""

    def bound(self, names: list[str], timeout: float = 90) -> dict[str, str]:
        got = wait_for(lambda: (lambda m: m if all(m.values()) else None)(
            {n: self.node_of(n) for n in names}), timeout, f"{names} bound")
        return got

    def waiting(self, name: str, *words: str, timeout: float = 90) -> str:
        """Wait for ``PodScheduled=False, reason=Unschedulable`` naming ``words``; the message."""
        def check() -> str | None:
            pod = self.get(name)
            if pod["spec"].get("nodeName"):
                raise AssertionError(f"{name} was bound to {pod['spec']['nodeName']}")
            cond = next((c for c in pod["status"].get("conditions") or []
                         if c["type"] == "PodScheduled"), {})
            msg = cond.get("message") or ""
            ok = cond.get("status") == "False" and cond.get("reason") == "Unschedulable" and \
                all(w in msg for w in words)
            return msg if ok else None
        return wait_for(check, timeout, f"{name} Unschedulable with {words}")

    def seen(self, since: str, wanted: dict[str, Callable[[dict[str, Any]], bool]],
             timeout: float) -> None:
        """Watch this namespace's pods from resourceVersion ``since`` until every predicate of
        ``wanted`` (what it means -> test of one pod state) has held for some state seen."""
        from kubernetes import watch

        left = dict(wanted)
        stream = watch.Watch()
        serialize = self.fx.core.api_client.sanitize_for_serialization
        for event in stream.stream(self.fx.core.list_namespaced_pod, self.ns,
                                   resource_version=since, timeout_seconds=int(timeout)):
            pod = serialize(event["object"])
            for what in [w for w, test in left.items() if test(pod)]:
                del left[what]
            if not left:
                stream.stop()
                return
        raise AssertionError(f"not seen within {timeout:.0f}s: {sorted(left)}")

    def events(self, name: str, reason: str) -> list[dict[str, Any]]:
        from kubernetes import client

        api = client.EventsV1Api(self.fx.core.api_client)
        items = api.list_namespaced_event(
            self.ns, field_selector=f"regarding.name={name}").items
        return [e for e in (api.api_client.sanitize_for_serialization(i) for i in items)
                if e.get("reason") == reason]

    def set_phase(self, name: str, phase: str) -> None:
        """What the kubelet would report (hollow nodes run nothing)."""
        self.fx.core.patch_namespaced_pod_status(name, self.ns, {"status": {"phase": phase}})

    def check(self) -> None:
        """No node of this probe holds more than it allocates; the metric agrees."""
        pods = self.fx.core.api_client.sanitize_for_serialization(
            self.fx.core.list_pod_for_all_namespaces().items)
        used: dict[str, dict[str, int]] = {}
        count: dict[str, int] = {}
        for pod in pods:
            info = pod_info(pod)
            if info.node_name in self.nodes and info.holds_resources:
                count[info.node_name] = count.get(info.node_name, 0) + 1
                for r, n in info.request.items():
                    used.setdefault(info.node_name, {})[r] = \
                        used.setdefault(info.node_name, {}).get(r, 0) + n
        for name in self.nodes:
            node = self.fx.cluster.get("node", name)
            alloc = node_allocatable(node)
            for r, n in used.get(name, {}).items():
                assert n <= alloc.get(r, 0), f"{name}: {n} {r} requested of {alloc.get(r)}"
            assert count.get(name, 0) <= alloc.get("pods", 0)
        metrics = self.fx.proc.metrics()
        assert metrics.get("fluxinfra_scheduler_overcommitted") == 0, metrics


@pytest.fixture
def probe(fluxion: Fluxion, namespace: str, hollow_nodes: Any) -> Iterator[Probe]:
    p = Probe(fluxion, namespace, hollow_nodes)
    yield p
    try:
        p.check()
    finally:
        if not fluxion.proc.healthy():
            print(fluxion.proc.log_tail())


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


# -- the probes of issue 11 ------------------------------------------------------------------------
def test_node_selector(probe: Probe) -> None:
    probe.node("b", labels={"pool": "b"})
    names = [probe.pod(f"sel{i}", nodeSelector={"pool": "a"}) for i in range(3)]
    probe.waiting(names[0], "0/", "didn't match Pod's node affinity/selector")
    a = probe.node("a", labels={"pool": "a"})
    assert set(probe.bound(names).values()) == {a}


def test_gated_member_holds_the_gang(probe: Probe) -> None:
    probe.node("n", cpu="8")
    names = probe.gang("gated", 4, podgroup=False, count=3)
    probe.pod("gated-3", labels={"fluxinfra.io/group": "gated",
                                 "fluxinfra.io/group-size": "4"},
              schedulingGates=[{"name": "example.com/quota"}])
    probe.waiting(names[0], "3 of minMember 4", "1 gated by schedulingGates")
    time.sleep(3)
    assert not any(probe.node_of(n) for n in names), "never 3 of 4"
    gate = probe.get("gated-3")
    assert next(c for c in gate["status"]["conditions"] if c["type"] == "PodScheduled")[
        "reason"] == "SchedulingGated", "the API server's own condition stays"
    probe.fx.core.patch_namespaced_pod("gated-3", probe.ns, {"spec": {"schedulingGates": None}})
    probe.bound(names + ["gated-3"])


def test_gpu_toleration_and_condition_taints(probe: Probe) -> None:
    gpu = probe.node("gpu", extended={"nvidia.com/gpu": "1"}, taints=[taint("nvidia.com/gpu")])
    # the node-lifecycle controller taints nodes from their conditions (TaintNodesByCondition)
    probe.condition(probe.node("disk"), "DiskPressure", "node.kubernetes.io/disk-pressure")
    probe.condition(probe.node("net"), "NetworkUnavailable",
                    "node.kubernetes.io/network-unavailable")
    probe.pod("trainer", extra={"nvidia.com/gpu": "1"}, tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    probe.pod("web")
    assert probe.bound(["trainer"]) == {"trainer": gpu}
    probe.waiting("web", "node(s) had untolerated taint {node.kubernetes.io/disk-pressure: }",
                  "{node.kubernetes.io/network-unavailable: }")


def test_foreign_pods_and_half_cores_are_counted_exactly(probe: Probe) -> None:
    node = probe.node("n", cpu="4")
    ours = [probe.pod(f"ours{i}", cpu="500m") for i in range(4)]
    theirs = [probe.pod(f"theirs{i}", cpu="1", scheduler="default-scheduler")
              for i in range(2)]
    probe.bound(ours + theirs)
    probe.pod("fifth", cpu="500m")
    probe.waiting("fifth", "Insufficient cpu")
    probe.fx.core.delete_namespaced_pod("theirs0", probe.ns, grace_period_seconds=0)
    assert probe.bound(["fifth"]) == {"fifth": node}


def test_every_resource_by_name(probe: Probe) -> None:
    disk = probe.node("disk", ephemeral_storage="50Gi", pods="3")
    probe.node("nv", extended={"nvidia.com/gpu": "8"})
    big = [probe.pod(f"big{i}", cpu="100m", extra={"ephemeral-storage": "40Gi"},
                     nodeSelector={"kubernetes.io/hostname": disk}) for i in range(2)]
    tiny = [probe.pod(f"tiny{i}", cpu="10m", memory="1Mi",
                      nodeSelector={"kubernetes.io/hostname": disk}) for i in range(6)]
    probe.pod("amd", extra={"amd.com/gpu": "1"})
    probe.waiting("amd", "Insufficient amd.com/gpu")
    time.sleep(5)
    on_disk = [n for n in big + tiny if probe.node_of(n) == disk]
    assert len(on_disk) == 3, f"pods: 3 on {disk}: {on_disk}"
    assert sum(1 for n in big if probe.node_of(n)) == 1, "two 40Gi pods never share 50Gi"


def test_min_member_binds_what_fits_and_the_rest_joins(probe: Probe) -> None:
    probe.node("n", cpu="2")
    probe.podgroup("mm", 2)
    names = probe.gang("mm", 4, cpu="1")
    wait_for(lambda: sum(1 for n in names if probe.node_of(n)) == 2, 90, "2 of 4 bound")
    rest = [n for n in names if not probe.node_of(n)]
    probe.waiting(rest[0])
    probe.node("m", cpu="1")
    wait_for(lambda: sum(1 for n in names if probe.node_of(n)) == 3, 90, "a third joins")


def test_launcher_and_workers_each_get_their_own(probe: Probe) -> None:
    g0 = probe.node("g0", cpu="16", extended={"nvidia.com/gpu": "8"})
    g1 = probe.node("g1", cpu="16", extended={"nvidia.com/gpu": "8"})
    labels = {"fluxinfra.io/group": "mpi", "fluxinfra.io/group-size": "3"}
    probe.pod("launcher", cpu="1", labels=labels)
    workers = [probe.pod(f"worker{i}", cpu="8", labels=labels,
                         extra={"nvidia.com/gpu": "8"}) for i in range(2)]
    got = probe.bound(["launcher", *workers])
    assert {got[w] for w in workers} == {g0, g1}


def test_waiting_gang_pods_say_why(probe: Probe) -> None:
    probe.node("n", cpu="4")
    probe.podgroup("wide", 6)
    names = probe.gang("wide", 6, cpu="1")
    for n in names:
        probe.waiting(n, "podgroup", "6 pod(s) to place", "they do not fit all at once")
    assert probe.events(names[0], "FailedScheduling")


def test_a_label_change_wakes_waiting_pods_without_a_rebuild(probe: Probe) -> None:
    node = probe.node("n")
    before = probe.fx.proc.metrics().get("fluxinfra_scheduler_graph_rebuilds", 0)
    probe.pod("picky", nodeSelector={"team": "x"})
    probe.waiting("picky", "node affinity/selector")
    probe.fx.core.patch_node(node, {"metadata": {"labels": {"team": "x"}}})
    assert probe.bound(["picky"]) == {"picky": node}
    assert probe.fx.proc.metrics().get("fluxinfra_scheduler_graph_rebuilds", 0) == before


# -- the rest of the contract --------------------------------------------------------------------
def test_missing_podgroup_is_reported(probe: Probe) -> None:
    probe.node("n")
    names = probe.gang("ghost", 2)
    probe.waiting(names[0], "PodGroup", "ghost not found")
    probe.podgroup("ghost", 2)
    probe.bound(names)


def test_topology_required_rack(probe: Probe) -> None:
    for r in range(3):
        for k in range(2):
            probe.node(f"r{r}n{k}", cpu="2", labels={ZONE: f"z-{probe.id}", RACK: f"rk{r}"})
    probe.podgroup("rackjob", 4, annotations={"fluxinfra.io/topology-required": "rack"})
    names = probe.gang("rackjob", 4, cpu="1")
    got = probe.bound(names)
    racks = {probe.fx.cluster.get("node", n)["metadata"]["labels"][RACK] for n in got.values()}
    assert len(racks) == 1, got


def test_anti_affinity_and_host_ports(probe: Probe) -> None:
    for i in range(2):
        probe.node(f"n{i}")
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": f"web-{probe.id}"}},
         "topologyKey": "kubernetes.io/hostname"}]}}
    names = [probe.pod(f"web{i}", labels={"app": f"web-{probe.id}"}, affinity=anti)
             for i in range(3)]
    wait_for(lambda: sum(1 for n in names if probe.node_of(n)) == 2, 90, "2 replicas bound")
    late = next(n for n in names if not probe.node_of(n))
    probe.waiting(late, "didn't match pod anti-affinity rules")
    ports = {"ports": [{"containerPort": 80, "hostPort": 18080}]}
    hp = [probe.pod(f"hp{i}", container=ports) for i in range(3)]
    wait_for(lambda: sum(1 for n in hp if probe.node_of(n)) == 2, 90, "2 host-port pods")


def test_minicluster_brokers_one_per_node(probe: Probe) -> None:
    """Flux on Kubernetes needs one broker per node: the MiniCluster as the stack renders it
    (indexed Job, PodGroup, required pod anti-affinity on ``kubernetes.io/hostname``), its pods
    made by the real Job controller. Three nodes with room for every broker hold none of the
    four (never a half-started instance); a fourth node and all four start, one per node."""
    import json

    from fluxinfra.k8s.minicluster import MiniClusterArgs, minicluster_manifests

    nodes = [probe.node(f"mc{i}", cpu="8") for i in range(3)]
    args = MiniClusterArgs(name=f"mc-{probe.id}", namespace=probe.ns, size=4, max_size=4,
                           pod_group=True, scheduler_name=probe.fx.name,
                           node_selector={PIN: probe.id})
    made = minicluster_manifests(args)
    assert any(o["kind"] == "Job" and o["spec"]["template"]["spec"]["affinity"]
               ["podAntiAffinity"] for o in made)
    probe.fx.cluster.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": made}))

    def brokers() -> list[str]:
        pods = probe.fx.core.list_namespaced_pod(
            probe.ns, label_selector=f"job-name={args.name}").items
        return sorted(p.metadata.name for p in pods)

    names = wait_for(lambda: (lambda b: b if len(b) == 4 else None)(brokers()), 90,
                     "the Job's 4 pods")
    probe.waiting(names[0], "only 3 fit now", "didn't match pod anti-affinity rules")
    time.sleep(3)
    assert not any(probe.node_of(n) for n in names), "never some brokers of 4"
    nodes.append(probe.node("mc3", cpu="8"))
    got = probe.bound(names)
    assert sorted(got.values()) == sorted(nodes), got


def test_an_exclusive_gang_beside_daemonset_pods(probe: Probe, fluxion: Fluxion,
                                                tmp_path: Any) -> None:
    """Every node of a real cluster runs DaemonSet pods. A scheduler under a node-exclusive
    policy (``lonodex``) counts them as node overhead: a gang of 2 (one pod per node) takes two
    of three nodes that run only a real DaemonSet's pods, and keeps off the node where a
    Deployment's pod runs. Its PodGroup's status follows the pods to ``Finished``."""
    from kubernetes import client

    nodes = [probe.node(f"x{i}", cpu="4") for i in range(3)]
    apps = client.AppsV1Api(fluxion.core.api_client)
    template = {"metadata": {"labels": {"app": f"agent-{probe.id}"}}, "spec": {
        "nodeSelector": {PIN: probe.id}, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "agent", "image": "e2e.invalid/agent:1",
                        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]}}
    apps.create_namespaced_daemon_set(probe.ns, {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"},
        "spec": {"selector": {"matchLabels": template["metadata"]["labels"]},
                 "template": template}})

    def agents() -> list[str] | None:
        pods = fluxion.core.list_namespaced_pod(
            probe.ns, label_selector=f"app=agent-{probe.id}").items
        placed = sorted(p.spec.node_name for p in pods if p.spec.node_name)
        return placed if placed == sorted(nodes) else None
    wait_for(agents, 120, "the DaemonSet's pod on each node (placed by kube-scheduler)")
    web = template | {"metadata": {"labels": {"app": f"web-{probe.id}"}}, "spec": {
        **template["spec"], "nodeSelector": {"kubernetes.io/hostname": nodes[1]}}}
    apps.create_namespaced_deployment(probe.ns, {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": web["metadata"]["labels"]},
                 "template": web}})
    wait_for(lambda: [p for p in fluxion.core.list_namespaced_pod(
        probe.ns, label_selector=f"app=web-{probe.id}").items if p.spec.node_name], 120,
        "the Deployment's pod bound")
    exclusive = SchedulerProcess(fluxion.proc.kubeconfig, f"{fluxion.name}-x",
                                 tmp_path / "lonodex.log", "--policy", "lonodex",
                                 "--topology", "").start()
    try:
        probe.podgroup("mc", 2)
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {f"{GROUP}/pod-group": "mc"}},
            "topologyKey": "kubernetes.io/hostname"}]}}
        names = probe.gang("mc", 2, cpu="100m", scheduler=f"{fluxion.name}-x", affinity=anti,
                           annotations={"fluxinfra.io/hollow-run-seconds": "3"})
        got = probe.bound(names)
        assert sorted(got.values()) == [nodes[0], nodes[2]], got

        def status() -> dict[str, Any]:
            return fluxion.custom.get_namespaced_custom_object(
                GROUP, "v1alpha1", probe.ns, "podgroups", "mc").get("status") or {}
        wait_for(lambda: status().get("phase") == "Finished", 120, "PodGroup mc Finished")
        assert (status()["scheduled"], status()["succeeded"], status()["failed"]) == (2, 2, 0)
        metrics = exclusive.metrics()
        assert metrics.get("fluxinfra_scheduler_overcommitted") == 0, metrics
    finally:
        if exclusive.stop() != 0:
            print(exclusive.log_tail())


def test_preemption_evicts_with_disruption_target_and_nominates(probe: Probe) -> None:
    node = probe.node("n", cpu="2")
    probe.fx.cluster.apply(f"""
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {{name: e2e-high-{probe.id}}}
value: 100000
""")
    victim = probe.pod("victim", cpu="2", terminationGracePeriodSeconds=30)
    probe.bound([victim])
    since = probe.get(victim)["metadata"]["resourceVersion"]
    probe.pod("urgent", cpu="2", priorityClassName=f"e2e-high-{probe.id}")

    # The bed's keeper plays the hollow node's kubelet and confirms the deletion at once, so
    # the victim's last states are read from a watch of every change since it was bound.
    def disrupted(pod: dict[str, Any]) -> bool:
        return pod["metadata"]["name"] == victim and bool(
            pod["metadata"].get("deletionTimestamp")) and any(
            c["type"] == "DisruptionTarget" and c["reason"] == "PreemptionByScheduler"
            for c in pod["status"].get("conditions") or [])

    def nominated(pod: dict[str, Any]) -> bool:
        return pod["metadata"]["name"] == "urgent" and \
            pod["status"].get("nominatedNodeName") == node
    probe.seen(since, {"the victim marked and deleted": disrupted,
                       "urgent nominated to the victim's node": nominated}, 90)
    wait_for(lambda: not _exists(probe, victim), 60, "the victim gone")
    assert probe.bound(["urgent"]) == {"urgent": node}
    probe.fx.cluster.kubectl("delete", "priorityclass", f"e2e-high-{probe.id}", check=False)


def test_a_node_deleted_under_running_pods(probe: Probe) -> None:
    doomed = probe.node("doomed", cpu="2")
    spare = probe.node("spare", cpu="2")
    first = [probe.pod(f"run{i}", cpu="2") for i in range(2)]
    got = probe.bound(first)
    on_doomed = next(n for n in first if got[n] == doomed)
    probe.fx.core.delete_node(doomed)
    probe.nodes.remove(doomed)
    # the pod GC deletes pods bound to a node that is gone; the scheduler keeps going
    wait_for(lambda: not _exists(probe, on_doomed), 180, f"{on_doomed} garbage-collected", 2)
    assert probe.fx.proc.healthy()
    probe.pod("after", cpu="1")
    probe.waiting("after", "Insufficient cpu")  # spare is full
    assert got[next(n for n in first if n != on_doomed)] == spare


def _exists(probe: Probe, name: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        probe.fx.core.read_namespaced_pod(name, probe.ns)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_restart_in_the_middle_of_a_gang(probe: Probe, fluxion: Fluxion) -> None:
    """A gang half bound when the scheduler died: the new process counts what runs and binds
    only the rest, never twice."""
    probe.node("n", cpu="4")
    fluxion.proc.stop()
    try:
        probe.podgroup("half", 4)
        names = probe.gang("half", 4, cpu="1")
        for name in names[:2]:  # what the dead scheduler had bound
            fluxion.core.create_namespaced_pod_binding(name, probe.ns, {
                "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": probe.nodes[0]}},
                _preload_content=False)
        probe.pod("squatter", cpu="1")  # must not take the room the gang needs
    finally:
        fluxion.proc.start()
    got = probe.bound(names)
    assert set(got.values()) == {probe.nodes[0]}
    probe.waiting("squatter", "Insufficient cpu")


def test_a_pod_we_place_runs_on_the_real_node(fluxion: Fluxion, cluster: Cluster,
                                              real_node: str, namespace: str,
                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    from kubebed import BUSYBOX_IMAGE, busybox_image

    cluster.bed.import_image(busybox_image(tmp_path_factory.mktemp("images")))
    container = {"name": "main", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
                 "command": ["sh", "-c", "echo placed-by-fluxion; sleep 600"],
                 "resources": {"requests": {"cpu": "50m", "memory": "16Mi"}}}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "runs", "namespace": namespace},
           "spec": {"schedulerName": fluxion.name,
                    "nodeSelector": {"fluxinfra.io/bed-node": "real"},
                    "containers": [container]}}
    fluxion.core.create_namespaced_pod(namespace, copy.deepcopy(pod))
    cluster.kubectl("wait", "-n", namespace, "--for=condition=Ready", "pod/runs",
                    "--timeout=120s")
    got = cluster.get("pod", "runs", "-n", namespace)
    assert got["spec"]["nodeName"] in cluster.real_nodes
    assert "placed-by-fluxion" in cluster.kubectl("logs", "-n", namespace, "runs").stdout
