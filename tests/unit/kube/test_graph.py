"""Kubernetes nodes + pods -> resource graph: accounting, node selection, subgraphs, jobspecs."""

from __future__ import annotations

import pytest

from fluxinfra.errors import FluxinfraError
from fluxinfra.kube.graph import (
    diff_inventories,
    graph_from_inventory,
    graph_from_k8s,
    k8s_inventory,
    node_insertion,
    node_skip_reason,
    node_status,
    node_subgraph,
    pod_amounts,
    pod_jobspec,
)
from fluxinfra.kube.resources import K8sInputError, pod_requests
from fluxinfra.kube.selectors import LabelSelector


def make_node(name, cpu="4", memory="16Gi", *, labels=None, taints=None, ready="True",
              unschedulable=False, **extended):
    allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
    # nvidia_com_gpu="2" -> "nvidia.com/gpu": "2"
    allocatable.update({k.replace("_com_", ".com/"): v for k, v in extended.items()})
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {},
        "status": {
            "allocatable": allocatable,
            "capacity": dict(allocatable),
            "conditions": [{"type": "MemoryPressure", "status": "False"},
                           {"type": "Ready", "status": ready}],
        },
    }
    if taints:
        node["spec"]["taints"] = taints
    if unschedulable:
        node["spec"]["unschedulable"] = True
    return node


def container(requests=None, limits=None, **extra):
    resources = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": "c", "image": "busybox", "resources": resources, **extra}


def make_pod(name, node=None, containers=(), *, init=(), overhead=None, phase="Running",
             namespace="default"):
    spec = {"containers": list(containers) or [container()]}
    if init:
        spec["initContainers"] = list(init)
    if overhead:
        spec["overhead"] = overhead
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec,
            "status": {"phase": phase}}


# ---------------------------------------------------------------------------- pod requests


def test_pod_requests_sum_app_containers():
    pod = make_pod("p", containers=[container({"cpu": "250m", "memory": "64Mi"}),
                                    container({"cpu": "1", "memory": "1Gi"})])
    assert pod_requests(pod) == {"cpu": 1250, "memory": 64 * 2**20 + 2**30}


def test_limit_without_request_counts_as_request():
    pod = make_pod("p", containers=[container(limits={"cpu": "2", "nvidia.com/gpu": "1"})])
    assert pod_requests(pod) == {"cpu": 2000, "nvidia.com/gpu": 1}


def test_request_wins_over_limit():
    pod = make_pod("p", containers=[container({"cpu": "500m"}, {"cpu": "2"})])
    assert pod_requests(pod) == {"cpu": 500}


def test_init_container_peak_dominates_when_larger():
    pod = make_pod("p", containers=[container({"cpu": "1", "memory": "1Gi"})],
                   init=[container({"cpu": "3"}), container({"memory": "512Mi"})])
    assert pod_requests(pod) == {"cpu": 3000, "memory": 2**30}


def test_sidecars_add_to_app_containers_and_to_later_inits():
    # sidecar 1 cpu (restartPolicy Always), then a plain init of 2 cpu: the init phase peaks at
    # 1 + 2 = 3; the run phase needs app 1 + sidecar 1 = 2; max is 3.
    pod = make_pod("p", containers=[container({"cpu": "1"})],
                   init=[container({"cpu": "1"}, restartPolicy="Always"),
                         container({"cpu": "2"})])
    assert pod_requests(pod) == {"cpu": 3000}
    # With a small plain init the run phase dominates: 1 + 1.
    pod["spec"]["initContainers"][1] = container({"cpu": "100m"})
    assert pod_requests(pod) == {"cpu": 2000}


def test_overhead_is_added_after_the_max():
    pod = make_pod("p", containers=[container({"cpu": "1"})], init=[container({"cpu": "2"})],
                   overhead={"cpu": "250m", "memory": "120Mi"})
    assert pod_requests(pod) == {"cpu": 2250, "memory": 120 * 2**20}


def test_pod_level_resources_replace_container_sum():
    pod = make_pod("p", containers=[container({"cpu": "1"}), container({"cpu": "1"})])
    pod["spec"]["resources"] = {"requests": {"cpu": "3"}}
    assert pod_requests(pod) == {"cpu": 3000}


def test_best_effort_pod_requests_nothing():
    assert pod_requests(make_pod("p")) == {}


def test_bad_pod_quantity_names_pod_and_field():
    pod = make_pod("web", containers=[container({"cpu": "lots"})], namespace="prod")
    with pytest.raises(FluxinfraError) as info:
        pod_requests(pod)
    assert "prod/web" in str(info.value)
    assert "spec.containers[0].resources.requests.cpu" in str(info.value)
    assert "'lots'" in str(info.value)


# ---------------------------------------------------------------------------- node selection


@pytest.mark.parametrize(
    ("node", "reason"),
    [
        (make_node("cp", labels={"node-role.kubernetes.io/control-plane": ""}), "control-plane"),
        (make_node("m", labels={"node-role.kubernetes.io/master": ""}), "control-plane"),
        (make_node("cp2", taints=[{"key": "node-role.kubernetes.io/control-plane",
                                   "effect": "NoSchedule"}]), "control-plane"),
        (make_node("c", unschedulable=True), "cordoned"),
        (make_node("t", taints=[{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]),
         "taint dedicated=db:NoSchedule"),
    ],
)
def test_unschedulable_nodes_are_skipped_with_reason(node, reason):
    assert reason in node_skip_reason(node)


def test_lifecycle_and_prefer_taints_do_not_skip():
    node = make_node("n", taints=[
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "spot", "effect": "PreferNoSchedule"},
    ])
    assert node_skip_reason(node) is None


def test_tolerated_taint_keeps_node():
    node = make_node("g", taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}])
    assert node_skip_reason(node, tolerations=["nvidia.com/gpu"]) is None
    assert node_skip_reason(node, tolerations=["*"]) is None


DEDICATED_DB = {"key": "dedicated", "value": "db", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "kept"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "db"}, True),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"operator": "Exists"}, True),
        ("dedicated", True),  # a key alone: Exists, every effect
        # by key only these would keep the node; kube-scheduler's rule does not
        ({"key": "dedicated", "operator": "Equal", "value": "web"}, False),
        ({"key": "dedicated", "value": "db", "effect": "NoExecute"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
    ],
)
def test_tolerations_follow_kube_schedulers_full_rule(toleration, kept):
    """A toleration mapping is judged by key, operator, value and effect (``v1.Toleration.
    ToleratesTaint``), as the scheduler's TaintToleration filter judges it: the graph never
    holds a node the scheduler would refuse for that taint."""
    node = make_node("db1", taints=[DEDICATED_DB])
    reason = node_skip_reason(node, tolerations=[toleration])
    assert (reason is None) is kept
    if not kept:
        assert reason == ("taint dedicated=db:NoSchedule not tolerated (add 'dedicated' to "
                          "tolerations)")
    inventory = k8s_inventory([node], tolerations=[toleration])
    assert [n.name for n in inventory.nodes] == (["db1"] if kept else [])


def test_a_bad_toleration_names_the_field():
    with pytest.raises(K8sInputError, match=r"tolerations\[1\].operator: 'Maybe'"):
        k8s_inventory([make_node("n")], tolerations=["a", {"key": "b", "operator": "Maybe"}])


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ("pool=hpc", {"pool": "hpc"}, True),
        ("pool=hpc", {"pool": "web"}, False),
        ("pool==hpc,tier!=gold", {"pool": "hpc", "tier": "silver"}, True),
        ("pool!=hpc", {}, True),
        ("gpu", {"gpu": "yes"}, True),
        ("!gpu", {"gpu": "yes"}, False),
        ("zone in (a, b),pool notin (web)", {"zone": "b", "pool": "hpc"}, True),
        ("zone in (a,b)", {"zone": "c"}, False),
        ({"pool": "hpc"}, {"pool": "hpc"}, True),
        ({"matchLabels": {"pool": "hpc"},
          "matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]},
         {"pool": "hpc", "gpu": "1"}, False),
    ],
)
def test_label_selector(selector, labels, expected):
    assert LabelSelector.from_any(selector).matches(labels) is expected
    kept = k8s_inventory([make_node("n", labels=labels)], node_selector=selector).nodes
    assert bool(kept) is expected


@pytest.mark.parametrize("bad", ["a in b", "=x", "a=b c", 42,
                                 {"matchExpressions": [{"key": "a", "operator": "Gt"}]}])
def test_bad_selector_is_a_typed_error(bad):
    with pytest.raises(K8sInputError, match="node_selector"):
        k8s_inventory([make_node("n")], node_selector=bad)


def test_not_ready_node_is_down_and_missing_condition_is_up():
    assert node_status(make_node("a", ready="False")) == "down"
    assert node_status(make_node("a", ready="Unknown")) == "down"
    assert node_status({"metadata": {"name": "x"}}) == "up"


# ---------------------------------------------------------------------------- inventory


def cluster():
    nodes = [
        make_node("w2", "8", "32Gi", labels={"topology.kubernetes.io/zone": "z1"},
                  nvidia_com_gpu="2"),
        make_node("w1", "3900m", "16Gi", labels={"topology.kubernetes.io/zone": "z1"}),
        make_node("w3", "4", "1000M", ready="False"),
        make_node("cp", labels={"node-role.kubernetes.io/control-plane": ""}),
        make_node("off", unschedulable=True),
    ]
    pods = [
        make_pod("a", "w2", [container({"cpu": "1500m", "memory": "4Gi",
                                        "nvidia.com/gpu": "1"})]),
        make_pod("b", "w2", [container({"cpu": "600m"})]),
        make_pod("done", "w2", [container({"cpu": "4"})], phase="Succeeded"),
        make_pod("failed", "w2", [container({"cpu": "4"})], phase="Failed"),
        make_pod("pending", None, [container({"cpu": "4"})], phase="Pending"),
        make_pod("on-cp", "cp", [container({"cpu": "4"})]),
        make_pod("starting", "w1", [container({"cpu": "1"})], phase="Pending"),
    ]
    return nodes, pods


def test_inventory_subtracts_active_pods_and_skips_with_reasons():
    nodes, pods = cluster()
    inv = k8s_inventory(nodes, pods)
    assert [n.name for n in inv.nodes] == ["w1", "w2", "w3"]
    assert set(inv.skipped) == {"cp", "off"}
    w1, w2, w3 = inv.nodes
    # w2: 8000m - 2100m = 5900m -> 5 cores + 900m remainder; 32Gi - 4Gi; 2 - 1 GPUs.
    assert (w2.cores, w2.cpu_remainder_m, w2.memory_mib, w2.gpus) == (5, 900, 28 * 1024,
                                                                     ("nvidia",))
    assert w2.zone == "z1" and w2.status == "up"
    assert sorted(inv.pods["w2"]) == ["default/a", "default/b"]
    # w1: a bound Pending pod holds its request too.
    assert (w1.cores, w1.cpu_remainder_m) == (2, 900)
    # w3: 1000M bytes = 953 MiB (floor), NotReady -> down, no zone label.
    assert (w3.memory_mib, w3.status, w3.zone) == (953, "down", None)


def test_inventory_without_subtraction_keeps_full_capacity():
    nodes, pods = cluster()
    inv = k8s_inventory(nodes, pods, subtract_pods=False)
    w2 = inv.nodes[1]
    assert (w2.cores, w2.memory_mib, w2.gpus) == (8, 32 * 1024, ("nvidia", "nvidia"))
    assert sorted(inv.pods["w2"]) == ["default/a", "default/b"]


def test_overcommitted_node_clamps_at_zero():
    inv = k8s_inventory([make_node("n", "1", "1Gi")],
                        [make_pod("big", "n", [container({"cpu": "2", "memory": "2Gi"})])])
    assert (inv.nodes[0].cores, inv.nodes[0].memory_mib) == (0, 0)


def test_selector_and_zone_label_options():
    nodes, pods = cluster()
    inv = k8s_inventory(nodes, pods, node_selector="topology.kubernetes.io/zone=z1",
                        zone_label="missing/label")
    assert [n.name for n in inv.nodes] == ["w1", "w2"]
    assert inv.skipped["w3"] == "excluded by node_selector"
    assert all(n.zone is None for n in inv.nodes)


def test_amd_and_nvidia_gpus_share_one_numbering():
    inv = k8s_inventory([make_node("g", nvidia_com_gpu="1", amd_com_gpu="2")])
    assert inv.nodes[0].gpus == ("nvidia", "amd", "amd")


@pytest.mark.parametrize(
    ("nodes", "match"),
    [
        ([{"metadata": {}}], r"nodes\[0\].metadata.name"),
        ([make_node("a"), make_node("a")], "appears twice"),
        ([make_node("a", cpu="four")], "node a: status.allocatable.cpu"),
    ],
)
def test_bad_nodes_are_typed_errors(nodes, match):
    with pytest.raises(FluxinfraError, match=match):
        k8s_inventory(nodes)


# ---------------------------------------------------------------------------- subgraph, jobspec


def test_node_subgraph_is_plain_data_rooted_at_the_node():
    spec = k8s_inventory([make_node("w", "2500m", "3584Mi", nvidia_com_gpu="1")]).nodes[0]
    sub = node_subgraph(spec, node_id=7, rank=7)
    names = [v["name"] for v in sub["vertices"]]
    assert names == ["w", "core0", "core1", "memory0", "memory1", "memory2", "gpu0"]
    assert sub["vertices"][0]["properties"] == {"cpu-remainder-m": "500",
                                                "memory-remainder-mib": "512"}
    memory = sub["vertices"][3]
    assert (memory["size"], memory["unit"]) == (1024, "MiB")
    assert sub["vertices"][6]["properties"] == {"vendor": "nvidia"}
    assert sub["edges"] == [(0, i) for i in range(1, 7)]
    assert {v["rank"] for v in sub["vertices"]} == {7}


def test_memory_chunk_size_is_configurable():
    spec = k8s_inventory([make_node("w", memory="4Gi")], memory_chunk_mib=512).nodes[0]
    sub = node_subgraph(spec, node_id=0, rank=0)
    assert [v["size"] for v in sub["vertices"] if v["type"] == "memory"] == [512] * 8
    with pytest.raises(K8sInputError, match="memory_chunk_mib"):
        k8s_inventory([make_node("w")], memory_chunk_mib=0)


def test_pod_jobspec_rounds_up_to_cores_and_mib():
    pod = make_pod("p", "w", [container({"cpu": "1100m", "memory": "100M",
                                         "amd.com/gpu": "1"})])
    js = pod_jobspec(pod)
    slot = js["resources"][0]
    assert (slot["type"], slot["count"]) == ("slot", 1)
    # 100M bytes -> one 1024 MiB chunk, asked for in MiB
    assert slot["with"] == [{"type": "core", "count": 2}, {"type": "memory", "count": 1024},
                            {"type": "gpu", "count": 1}]
    assert js["tasks"][0]["slot"] == slot["label"]


def test_best_effort_pod_jobspec_takes_one_core():
    assert pod_jobspec(make_pod("p"))["resources"][0]["with"] == [{"type": "core", "count": 1}]


# ---------------------------------------------------------------------------- graphs and matching


def types_under(g, name):
    v = g.resolve(name)
    out = {}
    for c in g.children["containment"][v]:
        out[g.type[c]] = out.get(g.type[c], 0) + g.size[c]
    return out


def test_graph_shape_zones_nodes_and_leaves():
    nodes, pods = cluster()
    g = graph_from_k8s(nodes, pods)
    assert g.path(g.resolve("w2")) == "/cluster0/z1/w2"
    assert g.path(g.resolve("w3")) == "/cluster0/w3"  # no zone label: under the cluster
    assert types_under(g, "w2") == {"core": 5, "memory": 28 * 1024, "gpu": 1}
    assert types_under(g, "w1") == {"core": 2, "memory": 16 * 1024}
    w3 = g.resolve("w3")
    assert g.status[w3] == 0  # NotReady -> down
    assert [g.rank[g.resolve(n)] for n in ("w1", "w2", "w3")] == [0, 1, 2]
    assert not g.by_name("cp") and not g.by_name("off")


def test_graph_without_subtraction_and_skipped_report():
    nodes, pods = cluster()
    inv = k8s_inventory(nodes, pods, subtract_pods=False)
    g = graph_from_inventory(inv)
    assert types_under(g, "w2") == {"core": 8, "memory": 32 * 1024, "gpu": 2}
    assert set(inv.skipped) == {"cp", "off"}


def test_pods_match_and_fill_a_node_exactly():
    from fluxinfra.matcher.errors import Busy
    from fluxinfra.matcher.matcher import Matcher

    g = graph_from_k8s([make_node("w", "4", "8Gi", nvidia_com_gpu="1")])
    m = Matcher(g, policy="first")
    pod = make_pod("p", containers=[container({"cpu": "2", "memory": "3Gi"})])
    first, second = m.match(pod_jobspec(pod)), m.match(pod_jobspec(pod))
    assert first.nodes == ["w"] == second.nodes
    with pytest.raises(Busy):
        m.match(pod_jobspec(pod))  # 4 cores used up
    m.cancel(first.jobid)
    gpu_pod = make_pod("g", containers=[container(limits={"nvidia.com/gpu": "1"})])
    assert m.match(pod_jobspec(gpu_pod)).slots == [{"w": {"core": 1, "gpu": 1}}]


def test_down_node_is_never_matched():
    from fluxinfra.matcher.errors import MatcherError
    from fluxinfra.matcher.matcher import Matcher

    g = graph_from_k8s([make_node("sick", ready="False")])
    with pytest.raises(MatcherError):
        Matcher(g).match(pod_jobspec(make_pod("p")))


def test_running_pods_registered_with_register_amounts_then_released():
    from fluxinfra.matcher.errors import Busy
    from fluxinfra.matcher.matcher import Matcher

    nodes = [make_node("w1", "4", "4Gi", labels={"topology.kubernetes.io/zone": "a"},
                       nvidia_com_gpu="2")]
    running = make_pod("r", "w1", [container({"cpu": "1500m", "memory": "1500Mi",
                                              "nvidia.com/gpu": "1"})])
    g = graph_from_k8s(nodes, [running], subtract_pods=False)
    m = Matcher(g, policy="first")
    registered = m.register_amounts(101, "w1", pod_amounts(running))
    assert registered.nodes == ["w1"]
    assert registered.R["execution"]["R_lite"] == [{"rank": "0", "children": {
        "core": "0-1", "gpu": "0", "memory": "0-1"}}]
    # 2 of 4 cores, 2 of 4 memory chunks, 1 of 2 GPUs are held: a 3-core pod does not fit.
    big = make_pod("big", containers=[container({"cpu": "3"})])
    with pytest.raises(Busy):
        m.match(pod_jobspec(big))
    again = m.register_amounts(102, "w1", pod_amounts(running))  # the next free vertices
    assert again.R["execution"]["R_lite"][0]["children"] == {"core": "2-3", "gpu": "1",
                                                             "memory": "2-3"}
    with pytest.raises(Busy, match="w1 has 0 core free"):
        m.register_amounts(103, "w1", pod_amounts(running))  # a third would over-commit
    # a restarted matcher re-learns both from their R; the same R under another id is refused
    restarted = Matcher(graph_from_k8s(nodes, [running], subtract_pods=False), policy="first")
    restarted.update_allocate(101, registered.R)
    restarted.update_allocate(102, again.R)
    with pytest.raises(Busy):
        restarted.update_allocate(103, registered.R)
    m.cancel(101)  # the pod finished
    m.cancel(102)
    assert m.match(pod_jobspec(big)).nodes == ["w1"]


def test_register_amounts_needs_a_known_node():
    from fluxinfra.matcher.errors import GraphError
    from fluxinfra.matcher.matcher import Matcher

    m = Matcher(graph_from_k8s([make_node("w")]))
    with pytest.raises(GraphError, match="no vertex named 'elsewhere'"):
        m.register_amounts(1, "elsewhere", {"core": 1})
    assert not m.jobs



# ---------------------------------------------------------------------------- incremental updates


def zoned(name, zone, **kw):
    return make_node(name, labels={"topology.kubernetes.io/zone": zone}, **kw)


def test_diff_inventories_classifies_node_changes():
    old = k8s_inventory([zoned("a", "z1"), zoned("b", "z1"), zoned("c", "z1"), zoned("d", "z1")],
                        [make_pod("p", "c", [container({"cpu": "1"})])])
    new = k8s_inventory(
        [zoned("a", "z1", ready="False"), zoned("c", "z1"), zoned("d", "z1", unschedulable=True),
         zoned("e", "z2")],
        [])
    changes = diff_inventories(old, new)
    assert [n.name for n in changes.added] == ["e"]
    assert changes.removed == ["b", "d"]
    assert changes.status == {"a": "down"}
    assert [n.name for n in changes.resized] == ["c"]  # its pod finished: 4 free cores, not 3
    assert not changes.empty and diff_inventories(new, new).empty


def rows(g):
    return sorted((g.path(v), g.type[v], g.id[v], g.rank[v], g.size[v], g.status[v])
                  for v in range(len(g)) if not g.removed[v])


@pytest.mark.parametrize("zone", ["z1", "z2", None])
def test_node_insertion_rebuilds_the_same_graph(zone):
    from fluxinfra.matcher import ResourceGraph

    first = zoned("a", "z1", nvidia_com_gpu="1")
    second = zoned("b", zone, cpu="2") if zone else make_node("b", cpu="2")
    graph = graph_from_k8s([first])
    spec = k8s_inventory([second]).nodes[0]
    plan = node_insertion(graph, spec)
    # Apply it the way a subgraph insertion would, on a copy rebuilt from the same inventory.
    copy = ResourceGraph()
    built = graph_from_k8s([first])
    for v in range(len(built)):
        copy.add_vertex(type=built.type[v], basename=built.basename[v], name=built.name[v],
                        id=built.id[v], rank=built.rank[v], size=built.size[v],
                        unit=built.unit[v], properties=built.properties[v],
                        status="up" if built.status[v] else "down")
        if built.parent["containment"][v] != -1:
            copy.add_edge(built.parent["containment"][v], v)
    parent = copy.resolve(plan["parent"])
    index = [copy.add_vertex(**vertex) for vertex in plan["vertices"]]
    copy.add_edge(parent, index[0])
    for a, b in plan["edges"]:
        copy.add_edge(index[a], index[b])
    copy.finalize()
    expected = graph_from_k8s([first, second])
    if zone == "z2":  # zone ids follow insertion order, not the sorted order of a rebuild
        assert plan["vertices"][0]["type"] == "zone"
    assert rows(copy) == rows(expected)


def test_a_pod_is_never_split_across_nodes():
    from fluxinfra.matcher.errors import Busy
    from fluxinfra.matcher.matcher import Matcher

    m = Matcher(graph_from_k8s([make_node("a", "2"), make_node("b", "2")]), policy="low")
    with pytest.raises(Busy):
        m.match(pod_jobspec(make_pod("p", containers=[container({"cpu": "3"})])))
    result = m.match(pod_jobspec(make_pod("q", containers=[container({"cpu": "2"})])))
    assert len(result.nodes) == 1


def test_update_allocate_refuses_an_R_whose_vertices_are_already_held():
    from fluxinfra.matcher.errors import Busy
    from fluxinfra.matcher.matcher import Matcher

    m = Matcher(graph_from_k8s([make_node("w", "1")]), policy="low")
    pod = make_pod("r", "w", [container({"cpu": "100m"})])
    R = m.register_amounts(1, "w", pod_amounts(pod)).R
    fresh = Matcher(graph_from_k8s([make_node("w", "1")]), policy="low")
    fresh.update_allocate(1, R)
    before = fresh.stat()
    with pytest.raises(Busy, match="core0"):
        fresh.update_allocate(2, R)
    assert fresh.stat() == before and sorted(fresh.jobs) == [1]
