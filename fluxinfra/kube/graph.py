"""The whole-core resource graph of Kubernetes ``Node`` and ``Pod`` objects.

Input is API JSON: the dicts ``kubectl get nodes,pods -A -o json`` prints (``items``), or what the
python client's ``ApiClient().sanitize_for_serialization(obj)`` returns. Nothing here talks to an
API server. The Fluxion service (a Node list sent to it) and ``fluxinfra query -f k8s`` build
this graph; the scheduler's exact graph, one pool per resource, is :mod:`fluxinfra.kube.pools`.

Shape of the graph (containment subsystem)::

    cluster0                                     type cluster
      <zone label value>                         type zone   (only for nodes with the zone label)
        <node name>                              type node, rank = position in the sorted node list
          core0 .. core{N-1}                     type core,   N = whole free cores
          memory0 .. memory{M-1}                 type memory, size = chunk MiB, unit MiB
          gpu0 .. gpu{G-1}                       type gpu,    property vendor=nvidia|amd|...

Nodes whose zone label is missing hang directly under the cluster vertex.

How Kubernetes amounts become vertices:

* **CPU.** Allocatable CPU is in millicores. A node gets ``floor(free_millicores / 1000)`` core
  vertices; the fractional remainder (e.g. the 0.9 core of a ``"3900m"`` node) is not schedulable
  by the matcher and is reported as the node property ``cpu-remainder-m``. A pod's CPU request turns
  into ``ceil(request / 1000)`` cores when the pod is matched or registered (:func:`pod_jobspec`),
  so two 500m pods take two cores: whole-core granularity is Fluxion's model.
* **Memory.** Free memory is cut into chunks of ``memory_chunk_mib`` MiB (default 1024): ``M =
  floor(free_MiB / chunk)`` memory vertices of ``size`` = chunk, ``unit`` = ``"MiB"`` (the
  remainder is the node property ``memory-remainder-mib``). Chunks, not one pool, because Fluxion
  gives everything under a slot exclusively to one job: a single per-node pool would let only one
  pod per node have memory (Fluxion's own GRUGs likewise model 4 x 16 GB pools per socket). A
  jobspec asks for MiB (``{"type": "memory", "count": 2048}``); :func:`pod_jobspec` rounds a pod's
  request up to whole chunks, which is what it then holds.
* **GPUs.** Each unit of an extended GPU resource (``nvidia.com/gpu``, ``amd.com/gpu``, ... see
  ``gpu_resources``) is one ``gpu`` vertex, numbered per node across vendors, with the property
  ``vendor``.

Which nodes are in the graph (the rest are listed, with the reason, in ``K8sInventory.skipped``):

* skipped: control-plane nodes (label ``node-role.kubernetes.io/control-plane`` or ``.../master``,
  or the control-plane ``NoSchedule`` taint); cordoned nodes (``spec.unschedulable``); nodes the
  ``node_selector`` rejects; nodes with a ``NoSchedule``/``NoExecute`` taint no toleration
  tolerates (kube-scheduler's rule, :mod:`fluxinfra.kube.selectors`; a toleration is a
  ``v1.Toleration`` mapping, a taint key alone, which tolerates that key whatever its value, or
  ``"*"``, which tolerates everything; ``node.kubernetes.io/*`` taints are lifecycle taints
  mirrored by conditions and are ignored).
* kept but ``status="down"``: nodes whose ``Ready`` condition is not ``"True"`` (a node object
  without any ``Ready`` condition, as in hand-written fixtures, counts as ready).

Pods already running: a pod counts when it is bound (``spec.nodeName``) to a node in the graph and
its phase is not ``Succeeded``/``Failed``. Its request follows the Kubernetes rule
(:func:`fluxinfra.kube.resources.pod_requests`). Two ways to account for them:

* ``graph_from_k8s(nodes, pods, subtract_pods=True)`` (default): the pods' requests are subtracted
  from each node before its vertices are made; the graph holds only free capacity. Simple, but the
  capacity only returns when the graph is rebuilt.
* ``subtract_pods=False``: the graph holds the full allocatable capacity and the caller registers
  each running pod as an allocation, ``matcher.match(pod_jobspec(pod), ...)`` or with
  ``Matcher.register_amounts(jobid, node, pod_amounts(pod))`` (or ``update_allocate`` with the
  R it returned), so that
  ``Matcher.cancel`` frees it when the pod finishes. The scheduler does this.

Incremental updates as the cluster changes use the same plain data: keep the last
``K8sInventory``; :func:`diff_inventories` says which nodes were added, removed, resized or
flipped up/down; :func:`node_insertion` gives the vertices and edges of a new node (and of its
zone when that is new) with the path to attach them under, for the core's subgraph insertion;
``Matcher.set_status(node_name, "down")`` handles a status flip. Until the core can add and
remove subgraphs of a live graph, rebuild with :func:`graph_from_inventory` when ``added``,
``removed`` or ``resized`` are non-empty and re-register the running pods.

>>> node = {"metadata": {"name": "n1", "labels": {}},
...         "status": {"allocatable": {"cpu": "3900m", "memory": "8Gi", "nvidia.com/gpu": "1"}}}
>>> inv = k8s_inventory([node], [])
>>> spec = inv.nodes[0]
>>> spec.cores, spec.memory_mib, spec.gpus
(3, 8192, ('nvidia',))
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.inputs import shown
from fluxinfra.kube import selectors
from fluxinfra.kube.resources import (
    K8sInputError,
    node_allocatable,
    pod_is_active,
    pod_name,
    pod_requests,
)

__all__ = [
    "DEFAULT_GPU_RESOURCES",
    "DEFAULT_MEMORY_CHUNK_MIB",
    "K8sInventory",
    "NodeSpec",
    "InventoryChanges",
    "ZONE_LABEL",
    "add_node_subgraph",
    "diff_inventories",
    "graph_from_inventory",
    "graph_from_k8s",
    "k8s_inventory",
    "node_insertion",
    "node_skip_reason",
    "node_status",
    "node_subgraph",
    "pod_amounts",
    "pod_jobspec",
    "vertex_fields",
]

ZONE_LABEL = "topology.kubernetes.io/zone"
#: Extended resources that count as GPUs, mapped to the ``vendor`` property of their vertices.
DEFAULT_GPU_RESOURCES: Mapping[str, str] = {
    "nvidia.com/gpu": "nvidia",
    "amd.com/gpu": "amd",
    "gpu.intel.com/i915": "intel",
    "gpu.intel.com/xe": "intel",
}
CONTROL_PLANE_KEYS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
MIB = 2**20
DEFAULT_MEMORY_CHUNK_MIB = 1024
#: most vertices of one kind (cores, memory chunks, GPUs) a node gets in the graph, far past any
#: machine's core count: what is past it is a quantity typed wrong ("16Gi" of cpu would be 17
#: billion cores)
MAX_NODE_VERTICES = 1 << 16
#: taint effects that keep a node out of the graph (PreferNoSchedule only discourages)
_SKIPPING_EFFECTS = ("NoSchedule", "NoExecute")


# ----------------------------------------------------------------------------------------------
# Which nodes, and how much of each is free.
# ----------------------------------------------------------------------------------------------


def node_skip_reason(
    node: Mapping[str, Any],
    selector: selectors.LabelSelector | None = None,
    tolerations: Iterable[str | Mapping[str, Any] | selectors.Toleration] = (),
) -> str | None:
    """Why ``node`` stays out of the graph, or ``None`` when it belongs in it.

    A ``NoSchedule``/``NoExecute`` taint keeps a node out unless a toleration tolerates it by
    kube-scheduler's rule (:func:`fluxinfra.kube.selectors.tolerates`: key, operator, value and
    effect); a control-plane taint keeps it out whatever tolerates it, and the
    ``node.kubernetes.io/*`` lifecycle taints are left to the node's ``Ready`` status.
    """
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = node.get("spec") or {}
    if any(key in labels for key in CONTROL_PLANE_KEYS):
        return "control-plane node (node-role label)"
    tolerated = _tolerations(tolerations)
    for taint in spec.get("taints") or []:
        key, effect = taint.get("key", ""), taint.get("effect", "")
        if effect not in _SKIPPING_EFFECTS:
            continue
        if key in CONTROL_PLANE_KEYS:
            return f"control-plane node (taint {key}:{effect})"
        value = str(taint.get("value") or "")
        if key.startswith("node.kubernetes.io/") or any(
                selectors.tolerates(t, selectors.Taint(key, value, effect)) for t in tolerated):
            continue
        said = f"{key}={value}" if value else key
        return f"taint {said}:{effect} not tolerated (add {shown(key)} to tolerations)"
    if spec.get("unschedulable"):
        return "cordoned (spec.unschedulable)"
    if selector is not None and not selector.matches(labels):
        return "excluded by node_selector"
    return None


def _tolerations(entries: Iterable[Any]) -> tuple[selectors.Toleration, ...]:
    try:
        return tuple(selectors.Toleration.from_entry(entry, f"tolerations[{i}]")
                     for i, entry in enumerate(entries))
    except selectors.SelectorError as exc:
        raise K8sInputError(str(exc)) from None


def _node_selector(selector: Any) -> selectors.LabelSelector:
    try:
        return selectors.LabelSelector.from_any(selector, "node_selector")
    except selectors.SelectorError as exc:
        raise K8sInputError(str(exc)) from None


def node_status(node: Mapping[str, Any]) -> str:
    """``"up"`` when the node's ``Ready`` condition is ``"True"`` (or absent), else ``"down"``."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return "up" if condition.get("status") == "True" else "down"
    return "up"


@dataclass(frozen=True)
class NodeSpec:
    """What one Kubernetes node contributes to the graph (plain data)."""

    name: str
    zone: str | None
    status: str
    cores: int
    memory_mib: int  # free memory, whole MiB
    gpus: tuple[str, ...]  # one vendor string per GPU vertex, e.g. ("nvidia", "nvidia")
    cpu_remainder_m: int
    memory_chunk_mib: int
    allocatable: Mapping[str, int]
    requested: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass
class K8sInventory:
    """Nodes kept (sorted by name), nodes skipped with the reason, and the pods counted."""

    nodes: list[NodeSpec]
    skipped: dict[str, str]
    pods: dict[str, list[str]]  # node name -> "namespace/name" of the active pods on it


def _node_spec(
    node: Mapping[str, Any],
    requested: Mapping[str, int],
    zone_label: str,
    gpu_resources: Mapping[str, str],
    memory_chunk_mib: int,
) -> NodeSpec:
    meta = node.get("metadata") or {}
    labels = dict(meta.get("labels") or {})
    allocatable = node_allocatable(node)
    free = {k: max(0, v - requested.get(k, 0)) for k, v in allocatable.items()}
    free_m = free.get("cpu", 0)
    name = meta["name"]
    for what, count, fix in (
            ("cpu", free_m // 1000, "cores"),
            ("memory", free.get("memory", 0) // MIB // memory_chunk_mib,
             f"memory vertices of {memory_chunk_mib} MiB (raise memory_chunk_mib)"),
            *((r, free.get(r, 0), "GPUs") for r in gpu_resources)):
        if count > MAX_NODE_VERTICES:
            raise K8sInputError(f"node {name}: status.allocatable.{what}: {count:,} {fix}, more "
                                f"than the {MAX_NODE_VERTICES:,} one node may have in the graph")
    gpus: list[str] = []
    for resource, vendor in gpu_resources.items():
        gpus.extend([vendor] * free.get(resource, 0))
    return NodeSpec(
        name=name,
        zone=labels.get(zone_label),
        status=node_status(node),
        cores=free_m // 1000,
        memory_mib=free.get("memory", 0) // MIB,
        memory_chunk_mib=memory_chunk_mib,
        gpus=tuple(gpus),
        cpu_remainder_m=free_m % 1000,
        allocatable=allocatable,
        requested=dict(requested),
        labels=labels,
    )


def k8s_inventory(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    *,
    zone_label: str = ZONE_LABEL,
    node_selector: str | Mapping[str, Any] | selectors.LabelSelector | None = None,
    tolerations: Iterable[str | Mapping[str, Any]] = (),
    subtract_pods: bool = True,
    gpu_resources: Mapping[str, str] = DEFAULT_GPU_RESOURCES,
    memory_chunk_mib: int = DEFAULT_MEMORY_CHUNK_MIB,
) -> K8sInventory:
    """Decide which nodes are in the graph and how much of each is free (see module docstring)."""
    if (
        isinstance(memory_chunk_mib, bool)
        or not isinstance(memory_chunk_mib, int)
        or (memory_chunk_mib < 1)
    ):
        raise K8sInputError(f"memory_chunk_mib: {shown(memory_chunk_mib)}; give an integer >= 1")
    selector = _node_selector(node_selector)
    tolerations = _tolerations(tolerations)
    kept: dict[str, Mapping[str, Any]] = {}
    skipped: dict[str, str] = {}
    for i, node in enumerate(nodes):
        name = (node.get("metadata") or {}).get("name")
        if not name or not isinstance(name, str):
            raise K8sInputError(f"nodes[{i}].metadata.name: {shown(name)}; every Node needs a name")
        if name in kept or name in skipped:
            raise K8sInputError(f"nodes[{i}].metadata.name: {shown(name)} appears twice; pass "
                                "each once")
        reason = node_skip_reason(node, selector, tolerations)
        if reason is None:
            kept[name] = node
        else:
            skipped[name] = reason
    requested: dict[str, dict[str, int]] = {name: {} for name in kept}
    pods_on: dict[str, list[str]] = {name: [] for name in kept}
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name not in kept or not pod_is_active(pod):
            continue
        pods_on[node_name].append(pod_name(pod))
        if subtract_pods:
            for resource, amount in pod_requests(pod).items():
                requested[node_name][resource] = requested[node_name].get(resource, 0) + amount
    specs = [
        _node_spec(kept[name], requested[name], zone_label, gpu_resources, memory_chunk_mib)
        for name in sorted(kept)
    ]
    return K8sInventory(nodes=specs, skipped=skipped, pods=pods_on)


def vertex_fields(
    kind: str,
    name: str,
    vid: int,
    rank: int,
    status: str,
    *,
    basename: str | None = None,
    size: int = 1,
    unit: str = "",
    properties: dict | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``ResourceGraph.add_vertex`` for one vertex."""
    return dict(
        type=kind,
        basename=basename or kind,
        name=name,
        id=vid,
        rank=rank,
        size=size,
        unit=unit,
        properties=properties,
        status=status,
    )


def node_subgraph(spec: NodeSpec, *, node_id: int, rank: int) -> dict[str, Any]:
    """The vertices and edges of one node as plain data, ready for ``ResourceGraph.add_vertex``.

    Returns ``{"vertices": [kwargs, ...], "edges": [(parent_pos, child_pos), ...]}`` where the
    positions index ``vertices``; position 0 is the node vertex, whose parent (the zone vertex, or
    the cluster) the caller attaches. Core, memory and GPU ids are local to the node; every
    vertex carries the node's rank and status (a NotReady node is down all the way down).
    """
    chunk = spec.memory_chunk_mib
    chunks, memory_left = divmod(spec.memory_mib, chunk)
    props = {}
    if spec.cpu_remainder_m:
        props["cpu-remainder-m"] = str(spec.cpu_remainder_m)
    if memory_left:
        props["memory-remainder-mib"] = str(memory_left)
    st = spec.status
    vertices = [vertex_fields("node", spec.name, node_id, rank, st, properties=props or None)]
    vertices += [vertex_fields("core", f"core{i}", i, rank, st) for i in range(spec.cores)]
    vertices += [
        vertex_fields("memory", f"memory{i}", i, rank, st, size=chunk, unit="MiB")
        for i in range(chunks)
    ]
    vertices += [
        vertex_fields("gpu", f"gpu{i}", i, rank, st, properties={"vendor": vendor})
        for i, vendor in enumerate(spec.gpus)
    ]
    return {"vertices": vertices, "edges": [(0, child) for child in range(1, len(vertices))]}


def add_node_subgraph(graph, parent: int, subgraph: Mapping[str, Any]) -> list[int]:
    """Add a :func:`node_subgraph` under vertex ``parent``; returns the new vertex indices."""
    index = [graph.add_vertex(**vertex) for vertex in subgraph["vertices"]]
    graph.add_edge(parent, index[0])
    for src, dst in subgraph["edges"]:
        graph.add_edge(index[src], index[dst])
    return index


def graph_from_inventory(inventory: K8sInventory, *, cluster: str = "cluster"):
    """Build and finalize the :class:`~fluxinfra.matcher.ResourceGraph` of an inventory.

    Vertex order: the cluster, the zones (sorted), then each node followed by its cores, memory
    and GPUs; node ``k`` of ``inventory.nodes`` has id and rank ``k``.
    """
    from fluxinfra.matcher.graph import ResourceGraph

    graph = ResourceGraph()
    root = graph.add_vertex(type="cluster", basename=cluster, name=f"{cluster}0", id=0)
    zones: dict[str, int] = {}
    for i, zone in enumerate(sorted({n.zone for n in inventory.nodes if n.zone is not None})):
        zones[zone] = graph.add_vertex(type="zone", basename="zone", name=zone, id=i)
        graph.add_edge(root, zones[zone])
    for k, spec in enumerate(inventory.nodes):
        parent = root if spec.zone is None else zones[spec.zone]
        add_node_subgraph(graph, parent, node_subgraph(spec, node_id=k, rank=k))
    graph.finalize()
    return graph


def graph_from_k8s(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]] = (),
    *,
    zone_label: str = ZONE_LABEL,
    node_selector: str | Mapping[str, Any] | selectors.LabelSelector | None = None,
    tolerations: Iterable[str | Mapping[str, Any]] = (),
    subtract_pods: bool = True,
    gpu_resources: Mapping[str, str] = DEFAULT_GPU_RESOURCES,
    memory_chunk_mib: int = DEFAULT_MEMORY_CHUNK_MIB,
    cluster: str = "cluster",
):
    """The resource graph of a Kubernetes cluster (see the module docstring for the model).

    ``graph_from_inventory(k8s_inventory(...))`` in one call; use those two to also get the
    skipped nodes and their reasons (``K8sInventory.skipped``).
    """
    inventory = k8s_inventory(
        nodes,
        pods,
        zone_label=zone_label,
        node_selector=node_selector,
        tolerations=tolerations,
        subtract_pods=subtract_pods,
        gpu_resources=gpu_resources,
        memory_chunk_mib=memory_chunk_mib,
    )
    return graph_from_inventory(inventory, cluster=cluster)


def pod_jobspec(
    pod: Mapping[str, Any],
    gpu_resources: Mapping[str, str] = DEFAULT_GPU_RESOURCES,
    memory_chunk_mib: int = DEFAULT_MEMORY_CHUNK_MIB,
) -> dict[str, Any]:
    """A canonical (RFC 14 v1) jobspec asking for what ``pod`` requests on one node.

    CPU rounds up to whole cores, memory up to whole chunks (counted in MiB), GPUs of every vendor
    add up; a pod that requests nothing still asks for one node-local slot with one core (Fluxion
    slots need at least one resource), the scheduler's unit of accounting for best-effort pods.

    The slot is the top-level resource: a slot's resources all come from below one vertex (its
    nearest common parent, here the node, since a node's cores, memory and GPUs are its direct
    children), and Fluxion does not match a top-level *shared* ``node`` request at all.
    """
    requests = pod_requests(pod)
    cores = max(1, math.ceil(requests.get("cpu", 0) / 1000))
    slot: list[dict[str, Any]] = [{"type": "core", "count": cores}]
    memory_mib = _chunks(requests.get("memory", 0), memory_chunk_mib) * memory_chunk_mib
    if memory_mib:
        slot.append({"type": "memory", "count": memory_mib})
    gpus = sum(requests.get(resource, 0) for resource in gpu_resources)
    if gpus:
        slot.append({"type": "gpu", "count": gpus})
    return {
        "version": 1,
        "resources": [{"type": "slot", "count": 1, "label": "task", "with": slot}],
        "attributes": {"system": {"duration": 0}},
        "tasks": [{"command": ["pod", pod_name(pod)], "slot": "task", "count": {"per_slot": 1}}],
    }


def pod_amounts(
    pod: Mapping[str, Any],
    gpu_resources: Mapping[str, str] = DEFAULT_GPU_RESOURCES,
) -> dict[str, int]:
    """What a running pod holds in this graph's units, for ``Matcher.register_amounts``: whole
    cores (rounded up), memory in MiB (rounded up; the matcher takes whole chunks) and GPUs of
    every vendor.

    >>> pod_amounts({"spec": {"containers": [{"resources": {"requests": {
    ...     "cpu": "1500m", "memory": "1500Mi", "nvidia.com/gpu": "1"}}}]}})
    {'core': 2, 'memory': 1500, 'gpu': 1}
    """
    requests = pod_requests(pod)
    return {"core": -(-requests.get("cpu", 0) // 1000),
            "memory": -(-requests.get("memory", 0) // MIB),
            "gpu": sum(requests.get(resource, 0) for resource in gpu_resources)}


def _chunks(nbytes: int, chunk_mib: int) -> int:
    return math.ceil(nbytes / (chunk_mib * MIB))


# ----------------------------------------------------------------------------------------------
# Incremental updates: what changed between two inventories, and where a new node goes.
# ----------------------------------------------------------------------------------------------


@dataclass
class InventoryChanges:
    """Node-level differences between two inventories (names sorted)."""

    added: list[NodeSpec]  # new nodes: insert with node_insertion(...)
    removed: list[str]  # gone, cordoned, tainted or deselected: remove their subgraphs
    status: dict[str, str]  # same node, Ready flipped: name -> "up" | "down" (set_status)
    resized: list[NodeSpec]  # same node, different free vertices: remove, then insert again

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.status or self.resized)


def _vertex_shape(spec: NodeSpec) -> tuple:
    return (spec.zone, spec.cores, spec.memory_mib // spec.memory_chunk_mib,
            spec.memory_chunk_mib, spec.gpus)


def diff_inventories(old: K8sInventory, new: K8sInventory) -> InventoryChanges:
    """What to do to a graph built from ``old`` so that it matches ``new``.

    Capacity changes of a node (new allocatable, moved zone) count as ``resized``; a status flip
    alone is a ``status`` change. Pods are not compared: with ``subtract_pods=False`` they are
    allocations, registered and cancelled by the caller.
    """
    before = {spec.name: spec for spec in old.nodes}
    after = {spec.name: spec for spec in new.nodes}
    changes = InventoryChanges(
        added=[after[name] for name in sorted(after.keys() - before.keys())],
        removed=sorted(before.keys() - after.keys()),
        status={},
        resized=[],
    )
    for name in sorted(before.keys() & after.keys()):
        was, now = before[name], after[name]
        if _vertex_shape(was) != _vertex_shape(now):
            changes.resized.append(now)
        elif was.status != now.status:
            changes.status[name] = now.status
    return changes


def node_insertion(graph, spec: NodeSpec, *, cluster: str | None = None) -> dict[str, Any]:
    """Plain data to insert ``spec`` into a built ``graph``: ``{"parent", "vertices", "edges"}``.

    ``parent`` is the containment path of the existing vertex to attach under (the cluster, or
    the node's zone); when the zone does not exist yet, the zone vertex comes first in
    ``vertices`` and the node hangs under it. The node gets the next unused node id and rank.
    Positions in ``edges`` index ``vertices``; the first vertex attaches to ``parent``.
    """
    root = graph.roots["containment"] if cluster is None else graph.resolve(f"/{cluster}0")
    root_path = graph.path(root)
    node_ids = [graph.id[v] for v in range(len(graph))
                if graph.type[v] == "node" and not graph.removed[v]]
    ranks = [graph.rank[v] for v in range(len(graph)) if graph.type[v] == "node"]
    node_id = max(node_ids, default=-1) + 1
    rank = max(ranks, default=-1) + 1
    sub = node_subgraph(spec, node_id=node_id, rank=rank)
    if spec.zone is None:
        return {"parent": root_path, **sub}
    zone_path = f"{root_path}/{spec.zone}"
    if any(graph.path(v) == zone_path for v in graph.by_name(spec.zone)):
        return {"parent": zone_path, **sub}
    zone_ids = [graph.id[v] for v in range(len(graph)) if graph.type[v] == "zone"]
    zone = vertex_fields("zone", spec.zone, max(zone_ids, default=-1) + 1, -1, "up")
    shifted = [(a + 1, b + 1) for a, b in sub["edges"]]
    return {"parent": root_path, "vertices": [zone, *sub["vertices"]],
            "edges": [(0, 1), *shifted]}
