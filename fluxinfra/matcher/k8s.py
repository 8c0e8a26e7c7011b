"""Resource graphs from Kubernetes ``Node`` and ``Pod`` objects.

Input is API JSON: the dicts ``kubectl get nodes,pods -A -o json`` prints (``items``), or what the
python client's ``ApiClient().sanitize_for_serialization(obj)`` returns. Nothing here talks to an
API server; the scheduler feeds this module from its informers.

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
``max(sum(containers) + sum(sidecars), max over init containers) + overhead`` (sidecars are init
containers with ``restartPolicy: Always``; a limit without a request counts as the request; a
pod-level ``spec.resources.requests`` replaces the container sum). Two ways to account for them:

* ``graph_from_k8s(nodes, pods, subtract_pods=True)`` (default): the pods' requests are subtracted
  from each node before its vertices are made; the graph holds only free capacity. Simple, but the
  capacity only returns when the graph is rebuilt.
* ``subtract_pods=False``: the graph holds the full allocatable capacity and the caller registers
  each running pod as an allocation, ``matcher.match(pod_jobspec(pod), ...)`` or with
  ``Matcher.register_amounts`` (or ``update_allocate`` with the R it returned), so that
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
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from fluxinfra.errors import FluxinfraError
from fluxinfra.inputs import shown
from fluxinfra.kube import selectors
from fluxinfra.matcher.quantity import parse_quantity

__all__ = [
    "DEFAULT_GPU_RESOURCES",
    "K8sInputError",
    "K8sInventory",
    "NodeSpec",
    "LabelSelector",
    "pod_requests",
    "resource_amounts",
    "node_allocatable",
    "node_skip_reason",
    "node_status",
    "k8s_inventory",
    "node_subgraph",
    "add_node_subgraph",
    "graph_from_inventory",
    "graph_from_k8s",
    "pod_jobspec",
    "InventoryChanges",
    "diff_inventories",
    "node_insertion",
    "POOL_UNITS",
    "TopologyLevel",
    "node_domains",
    "node_pools",
    "parse_topology",
    "pool_graph",
    "pool_hold_jgf",
    "pool_jobspec",
    "pool_node_jgf",
    "pool_request",
    "pool_unit",
    "pool_vertex_name",
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
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})
MIB = 2**20
DEFAULT_MEMORY_CHUNK_MIB = 1024
#: most vertices of one kind (cores, memory chunks, GPUs) a node gets in the graph, far past any
#: machine's core count: what is past it is a quantity typed wrong ("16Gi" of cpu would be 17
#: billion cores)
MAX_NODE_VERTICES = 1 << 16


class K8sInputError(FluxinfraError, ValueError):
    """A Node or Pod object that cannot be read (names the object, the field and the fix)."""


# ----------------------------------------------------------------------------------------------
# Resource amounts: dicts of resource name -> integer (cpu in millicores, the rest rounded up).
# ----------------------------------------------------------------------------------------------


def resource_amounts(resources: Mapping[str, Any] | None, where: str) -> dict[str, int]:
    """Resource quantities in base units (cpu: millicores, the rest: Value(), rounded up)."""
    return {name: _base_units(name, q) for name, q in _exact(resources, where).items()}


def _base_units(name: str, quantity: Fraction) -> int:
    return math.ceil(quantity * 1000) if name == "cpu" else math.ceil(quantity)


def _exact(resources: Mapping[str, Any] | None, where: str) -> dict[str, Fraction]:
    """Resource quantities as exact numbers (Kubernetes adds Quantities, then rounds)."""
    if not resources:
        return {}
    if not isinstance(resources, Mapping):
        raise K8sInputError(f"{where}: {shown(resources)} is not a mapping of resource name to "
                            "quantity")
    out: dict[str, Fraction] = {}
    for name, value in resources.items():
        field_name = f"{where}.{name}"
        amount = parse_quantity(value, field_name)
        if amount < 0:
            raise K8sInputError(f"{field_name}: {shown(value)} is negative; resource quantities "
                                "must be >= 0")
        out[name] = amount
    return out


def _add(total: dict, more: Mapping) -> dict:
    for name, value in more.items():
        total[name] = total.get(name, 0) + value
    return total


def _max(total: dict, more: Mapping) -> dict:
    for name, value in more.items():
        total[name] = max(total.get(name, 0), value)
    return total


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    limits = _exact(resources.get("limits"), f"{where}.resources.limits")
    requests = _exact(resources.get("requests"), f"{where}.resources.requests")
    # The API server defaults a missing request to the limit; do the same for raw manifests.
    return {**limits, **requests}


def _pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '?')}"


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """The effective request of a pod: cpu in millicores, memory in bytes, others as integers.

    >>> pod_requests({"spec": {"containers": [
    ...     {"resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}},
    ...     {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}}]}})
    {'cpu': 1250, 'memory': 67108864, 'nvidia.com/gpu': 1}
    """
    spec = pod.get("spec") or {}
    key = _request_key(spec)
    if key is not None:
        cached = _REQUESTS.get(key)
        if cached is not None:
            return dict(cached)
    name = _pod_name(pod)
    apps: dict[str, Fraction] = {}
    for i, container in enumerate(spec.get("containers") or []):
        _add(apps, _container_requests(container, f"pod {name}: spec.containers[{i}]"))
    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        request = _container_requests(container, f"pod {name}: spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(sidecars, request)
            _max(init_peak, sidecars)
        else:
            _max(init_peak, _add(dict(request), sidecars))
    total = _max(_add(apps, sidecars), init_peak)
    # Pod-level resources (KEP 2837) replace the per-container figures they name (cpu, memory).
    total.update(
        _exact(
            (spec.get("resources") or {}).get("requests"), f"pod {name}: spec.resources.requests"
        )
    )
    _add(total, _exact(spec.get("overhead"), f"pod {name}: spec.overhead"))
    # summed exactly, rounded once (resource.PodRequests adds Quantities; MilliValue/Value)
    out = {k: _base_units(k, v) for k, v in sorted(total.items()) if v}
    if key is not None:
        if len(_REQUESTS) >= 4096:
            _REQUESTS.clear()
        _REQUESTS[key] = out
    return dict(out)


#: pod requests by what they are computed from: the pods of one workload share their template
_REQUESTS: dict[tuple, dict[str, int]] = {}


def _amounts_key(resources: Any) -> tuple | None:
    if not resources:
        return ()
    if not isinstance(resources, Mapping):
        return None
    try:
        return tuple(sorted((k, str(v)) for k, v in resources.items()))
    except TypeError:
        return None


def _request_key(spec: Mapping[str, Any]) -> tuple | None:
    """Everything :func:`pod_requests` reads from a pod spec, hashable (None: not cacheable,
    e.g. a malformed value, which then fails with its error message)."""
    parts: list[Any] = []
    for field_name in ("containers", "initContainers"):
        for c in spec.get(field_name) or []:
            if not isinstance(c, Mapping):
                return None
            res = c.get("resources") or {}
            if not isinstance(res, Mapping):
                return None
            req, lim = _amounts_key(res.get("requests")), _amounts_key(res.get("limits"))
            if req is None or lim is None:
                return None
            parts.append((field_name, req, lim, c.get("restartPolicy")))
    for field_name in ("resources", "overhead"):
        value = spec.get(field_name)
        sub = (value or {}).get("requests") if field_name == "resources" else value
        if value is not None and not isinstance(value, Mapping):
            return None
        k = _amounts_key(sub)
        if k is None:
            return None
        parts.append((field_name, k))
    return tuple(parts)


def pod_is_active(pod: Mapping[str, Any]) -> bool:
    """True for a pod that holds node resources: bound and not Succeeded/Failed."""
    node_name = (pod.get("spec") or {}).get("nodeName")
    phase = (pod.get("status") or {}).get("phase")
    return bool(node_name) and phase not in TERMINATED_PHASES


def node_allocatable(node: Mapping[str, Any]) -> dict[str, int]:
    """``status.allocatable`` (falling back to ``status.capacity``) as integer amounts."""
    status = node.get("status") or {}
    name = (node.get("metadata") or {}).get("name", "?")
    if status.get("allocatable"):
        return resource_amounts(status["allocatable"], f"node {name}: status.allocatable")
    return resource_amounts(status.get("capacity"), f"node {name}: status.capacity")


# ----------------------------------------------------------------------------------------------
# Label selectors and tolerations: kube-scheduler's rules (fluxinfra.kube.selectors), read from
# the forms a caller of this module writes.
# ----------------------------------------------------------------------------------------------


class LabelSelector(selectors.LabelSelector):
    """A node selector given as the string ``kubectl -l`` takes, a ``{key: value}`` mapping or
    a ``metav1.LabelSelector``; kube-scheduler's matching rules."""

    @classmethod
    def parse(cls, selector: str | Mapping[str, Any] | selectors.LabelSelector | None,
              where: str = "node_selector") -> selectors.LabelSelector:
        """From ``"a=b,c!=d,e,!f,g in (x,y)"``, ``{"a": "b"}``, ``{"matchLabels": ...,
        "matchExpressions": [...]}`` or a selector object; ``None`` selects every node."""
        if selector is None:
            return selectors.LabelSelector()
        if isinstance(selector, selectors.LabelSelector):
            return selector
        try:
            if isinstance(selector, str):
                return selectors.LabelSelector.from_text(selector, where)
            if (isinstance(selector, Mapping) and "matchLabels" not in selector
                    and "matchExpressions" not in selector):
                return selectors.LabelSelector.from_labels(
                    {str(k): str(v) for k, v in selector.items()})
            if not isinstance(selector, Mapping):
                raise selectors.SelectorError(
                    f"{where}: {shown(selector)} is not a label selector; use 'key=value,...' "
                    "or {'key': 'value'} or {'matchLabels': ..., 'matchExpressions': [...]}")
            return selectors.LabelSelector.parse(selector, where)
        except selectors.SelectorError as exc:
            raise K8sInputError(str(exc)) from None


def _toleration(entry: str | Mapping[str, Any] | selectors.Toleration,
                where: str) -> selectors.Toleration:
    """A toleration from a taint key (tolerates it whatever its value), ``"*"`` (tolerates
    every taint) or a ``v1.Toleration`` mapping."""
    if isinstance(entry, selectors.Toleration):
        return entry
    if isinstance(entry, str):
        return selectors.Toleration("" if entry == "*" else entry, "Exists")
    try:
        return selectors.Toleration.parse(entry, where)
    except selectors.SelectorError as exc:
        raise K8sInputError(str(exc)) from None


# ----------------------------------------------------------------------------------------------
# Which nodes, and how much of each is free.
# ----------------------------------------------------------------------------------------------


def node_skip_reason(
    node: Mapping[str, Any],
    selector: selectors.LabelSelector | None = None,
    tolerations: Iterable[str | Mapping[str, Any]] = (),
) -> str | None:
    """Why ``node`` stays out of the graph, or ``None`` when it belongs in it."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    spec = node.get("spec") or {}
    if any(key in labels for key in CONTROL_PLANE_KEYS):
        return "control-plane node (node-role label)"
    tolerated = [_toleration(t, f"tolerations[{i}]") for i, t in enumerate(tolerations)]
    for taint in spec.get("taints") or []:
        key, effect = taint.get("key", ""), taint.get("effect", "")
        if effect not in ("NoSchedule", "NoExecute"):
            continue
        if key in CONTROL_PLANE_KEYS:
            return f"control-plane node (taint {key}:{effect})"
        value = taint.get("value")
        if key.startswith("node.kubernetes.io/") or any(
                selectors.tolerates(t, selectors.Taint(key, str(value or ""), effect))
                for t in tolerated):
            continue
        said = f"{key}={value}" if value else key
        return f"taint {said}:{effect} not tolerated (add {shown(key)} to tolerations)"
    if spec.get("unschedulable"):
        return "cordoned (spec.unschedulable)"
    if selector is not None and not selector.matches(labels):
        return "excluded by node_selector"
    return None


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
    selector = LabelSelector.parse(node_selector)
    tolerations = tuple(tolerations)
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
        pods_on[node_name].append(_pod_name(pod))
        if subtract_pods:
            _add(requested[node_name], pod_requests(pod))
    specs = [
        _node_spec(kept[name], requested[name], zone_label, gpu_resources, memory_chunk_mib)
        for name in sorted(kept)
    ]
    return K8sInventory(nodes=specs, skipped=skipped, pods=pods_on)


def _vertex(
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
    vertices = [_vertex("node", spec.name, node_id, rank, st, properties=props or None)]
    vertices += [_vertex("core", f"core{i}", i, rank, st) for i in range(spec.cores)]
    vertices += [
        _vertex("memory", f"memory{i}", i, rank, st, size=chunk, unit="MiB") for i in range(chunks)
    ]
    vertices += [
        _vertex("gpu", f"gpu{i}", i, rank, st, properties={"vendor": vendor})
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
        "tasks": [{"command": ["pod", _pod_name(pod)], "slot": "task", "count": {"per_slot": 1}}],
    }


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
    zone = _vertex("zone", spec.zone, max(zone_ids, default=-1) + 1, -1, "up")
    shifted = [(a + 1, b + 1) for a, b in sub["edges"]]
    return {"parent": root_path, "vertices": [zone, *sub["vertices"]],
            "edges": [(0, 1), *shifted]}


# ----------------------------------------------------------------------------------------------
# The scheduler's exact model: one pool per resource name per node, amounts in base units.
# ----------------------------------------------------------------------------------------------
#
#     cluster0
#       <zone value>                 type zone (one vertex type per configured topology level,
#         <rack value>               outermost first; a node without a level's label hangs
#           <node name>              directly under the level above)
#             cpu                    size = allocatable millicores, unit "m"
#             memory                 size = allocatable KiB (+ slack, below), unit "KiB"
#             pods                   size = allocatable pod count
#             ephemeral-storage, hugepages-2Mi, nvidia.com_gpu, ...   one pool per resource
#
# A pool's type is the resource's exact name ("nvidia.com/gpu", never a generic "gpu"), its name
# the same with "/" as "_" (vertex names form paths). Matched with ``Matcher(exact_pools=True)``
# a pod's slot takes its request out of each pool: millicores and counts exactly. Byte-valued
# resources (memory, ephemeral-storage, hugepages-*) are counted in KiB, because a jobspec count
# is a 32-bit unsigned integer in Fluxion (a 5 GiB request does not fit in bytes): a pod takes
# ceil(bytes / 1024) KiB, and the node's pool holds floor(allocatable / 1024) + its pods
# allocatable KiB. That slack (<= 1 KiB per pod the node can hold) makes the pool never refuse
# what fits in exact bytes; the other way round (the pool admits up to that slack more than the
# bytes allow) is caught by the scheduler's exact ledger before anything is bound (see
# docs/scheduler.md).

#: units of the pools that have one (everything else is a plain count)
POOL_UNITS: Mapping[str, str] = {"cpu": "m", "memory": "KiB", "ephemeral-storage": "KiB"}
#: base units (bytes) per graph unit of the byte-valued pools
KIB = 1024
#: the node label used when no topology level is configured
DEFAULT_TOPOLOGY = (("zone", ZONE_LABEL),)
_LEVEL_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_RESERVED_TYPES = frozenset({"cluster", "node", "slot"})


@dataclass(frozen=True)
class TopologyLevel:
    """A level of the graph between the cluster and the nodes: vertex type ``name``, one
    vertex per value of the node label ``label``."""

    name: str
    label: str


def parse_topology(spec: str | Iterable[Any] | None) -> tuple[TopologyLevel, ...]:
    """Topology levels from ``"zone=topology.kubernetes.io/zone,rack=example.com/rack"`` (or
    pairs / TopologyLevel objects), outermost first; ``""`` means none.

    >>> [lvl.name for lvl in parse_topology("zone=topology.kubernetes.io/zone,rack=x.io/rack")]
    ['zone', 'rack']
    """
    if spec is None:
        spec = DEFAULT_TOPOLOGY
    items: list[tuple[str, str]] = []
    if isinstance(spec, str):
        for part in (p.strip() for p in spec.split(",")):
            if not part:
                continue
            name, sep, label = part.partition("=")
            if not sep:
                raise K8sInputError(f"topology: {shown(part)} is not NAME=LABEL; write e.g. "
                                    "'zone=topology.kubernetes.io/zone,rack=example.com/rack'")
            items.append((name.strip(), label.strip()))
    else:
        for item in spec:
            if isinstance(item, TopologyLevel):
                items.append((item.name, item.label))
            else:
                name, label = item
                items.append((str(name), str(label)))
    levels: list[TopologyLevel] = []
    for name, label in items:
        if not _LEVEL_NAME.match(name) or name in _RESERVED_TYPES:
            raise K8sInputError(f"topology: level name {shown(name)} must be a lowercase word "
                                "(a-z, 0-9, -, _) other than cluster, node and slot")
        if not label or any(c.isspace() for c in label):
            raise K8sInputError(f"topology: level {shown(name)} needs a node label key, got "
                                f"{shown(label)}")
        if any(lvl.name == name or lvl.label == label for lvl in levels):
            raise K8sInputError(f"topology: level {shown(name)} / label {shown(label)} given twice")
        levels.append(TopologyLevel(name, label))
    return tuple(levels)


def pool_unit(resource: str) -> str:
    """``m`` for cpu, ``KiB`` for memory, ephemeral-storage and hugepages-*, "" for counts."""
    return POOL_UNITS.get(resource) or ("KiB" if resource.startswith("hugepages-") else "")


def pool_request(resource: str, amount: int) -> int:
    """What a request of ``amount`` base units takes from the pool (bytes: whole KiB, up)."""
    return -(-amount // KIB) if pool_unit(resource) == "KiB" else amount


def pool_vertex_name(resource: str) -> str:
    """The vertex name of a resource's pool (``nvidia.com/gpu`` -> ``nvidia.com_gpu``)."""
    return resource.replace("/", "_")


def node_pools(node: Mapping[str, Any]) -> dict[str, int]:
    """The pool sizes of a Node: every positive allocatable amount by resource name, in graph
    units (byte-valued ones in KiB, down, plus one KiB per pod it can hold)."""
    allocatable = node_allocatable(node)
    slack = allocatable.get("pods", 0)
    out = {}
    for name, amount in sorted(allocatable.items()):
        if amount > 0:
            out[name] = amount // KIB + slack if pool_unit(name) == "KiB" else amount
    return out


def node_domains(labels: Mapping[str, str],
                 levels: Iterable[TopologyLevel]) -> tuple[tuple[str, str], ...]:
    """The (level, value) pairs a node with ``labels`` sits under, outermost first."""
    return tuple((lvl.name, labels[lvl.label]) for lvl in levels if labels.get(lvl.label))


def _pool_vertices(name: str, pools: Mapping[str, int], rank: int) -> list[dict[str, Any]]:
    vertices = [_vertex("node", name, rank, rank, "up")]
    for resource, amount in pools.items():
        vertices.append(_vertex(resource, pool_vertex_name(resource), 0, rank, "up",
                                basename=pool_vertex_name(resource), size=amount,
                                unit=pool_unit(resource)))
    return vertices


def pool_graph(nodes: Iterable[Mapping[str, Any]], levels: Iterable[TopologyLevel] = (),
               *, ranks: Mapping[str, int] | None = None, cluster: str = "cluster"):
    """The exact-pool graph of some Node objects; returns ``(graph, ranks)``.

    ``ranks`` (node name -> rank) keeps the ranks of a previous graph; new nodes get the next
    free ones. A node's rank is also its vertex id. Use the graph with
    ``Matcher(graph, exact_pools=True)``.

    >>> g, ranks = pool_graph([{"metadata": {"name": "w1", "labels": {}}, "status": {
    ...     "allocatable": {"cpu": "3900m", "memory": "1Gi", "pods": "110",
    ...                     "amd.com/gpu": "2"}}}])
    >>> [(g.type[v], g.size[v]) for v in range(2, len(g))]
    [('amd.com/gpu', 2), ('cpu', 3900), ('memory', 1048686), ('pods', 110)]
    """
    from fluxinfra.matcher.graph import ResourceGraph

    levels = tuple(levels)
    ranks = dict(ranks or {})
    nodes = sorted(nodes, key=lambda n: ranks.get(n["metadata"]["name"], 1 << 62))
    nxt = max(ranks.values(), default=-1) + 1
    graph = ResourceGraph()
    root = graph.add_vertex(type="cluster", basename=cluster, name=f"{cluster}0", id=0)
    domains: dict[tuple[tuple[str, str], ...], int] = {(): root}
    counters: dict[str, int] = {}
    seen: set[str] = set()
    for node in nodes:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if not name or not isinstance(name, str) or name in seen:
            raise K8sInputError(f"nodes: metadata.name {shown(name)} is missing or repeated; every "
                                "Node needs a unique name")
        seen.add(name)
        if name not in ranks:
            ranks[name] = nxt
            nxt += 1
        path = node_domains(meta.get("labels") or {}, levels)
        parent = root
        for depth in range(1, len(path) + 1):
            key = path[:depth]
            v = domains.get(key)
            if v is None:
                level, value = key[-1]
                vid = counters[level] = counters.get(level, -1) + 1
                v = graph.add_vertex(type=level, basename=level, name=value, id=vid)
                graph.add_edge(parent, v)
                domains[key] = v
            parent = v
        sub = _pool_vertices(name, node_pools(node), ranks[name])
        add_node_subgraph(graph, parent, {"vertices": sub,
                                          "edges": [(0, i) for i in range(1, len(sub))]})
    graph.finalize()
    return graph, ranks


def pool_node_jgf(graph, node: Mapping[str, Any], levels: Iterable[TopologyLevel],
                  rank: int) -> dict[str, Any]:
    """JGF for ``Matcher.add_subgraph``: ``node``'s pools under its (possibly new) topology
    vertices; vertices that exist already are named by their containment path (reused)."""
    meta = node.get("metadata") or {}
    name = meta["name"]
    root = graph.roots["containment"]
    path = graph.path(root)
    nodes: list[dict[str, Any]] = [{"id": "v0", "metadata": {
        "type": graph.type[root], "name": graph.name[root], "uniq_id": graph.uniq_id[root],
        "paths": {"containment": path}}}]
    edges: list[dict[str, Any]] = []
    next_uniq = max(graph.uniq_id) + 1
    parent_id = "v0"
    ids_by_type: dict[str, int] = {}
    for level, value in node_domains(meta.get("labels") or {}, levels):
        path = f"{path}/{value}"
        vid = f"v{len(nodes)}"
        existing = [v for v in graph.by_name(value) if graph.path(v) == path]
        if existing:
            v = existing[0]
            md = {"type": graph.type[v], "name": value, "uniq_id": graph.uniq_id[v],
                  "id": graph.id[v], "paths": {"containment": path}}
        else:
            if level not in ids_by_type:
                ids_by_type[level] = max((graph.id[v] for v in range(len(graph))
                                          if graph.type[v] == level), default=-1) + 1
            md = {"type": level, "basename": level, "name": value, "id": ids_by_type[level],
                  "uniq_id": next_uniq, "paths": {"containment": path}}
            ids_by_type[level] += 1
            next_uniq += 1
        nodes.append({"id": vid, "metadata": md})
        edges.append({"source": parent_id, "target": vid, "metadata": {"subsystem": "containment"}})
        parent_id = vid
    node_path = f"{path}/{name}"
    for k, vertex in enumerate(_pool_vertices(name, node_pools(node), rank)):
        vid = f"v{len(nodes)}"
        vpath = node_path if k == 0 else f"{node_path}/{vertex['name']}"
        md = {key: vertex[key] for key in ("type", "basename", "name", "id", "rank", "size",
                                           "unit")}
        md.update(uniq_id=next_uniq, status=0, paths={"containment": vpath})
        next_uniq += 1
        nodes.append({"id": vid, "metadata": md})
        source = parent_id if k == 0 else f"v{len(nodes) - 1 - k}"
        edges.append({"source": source, "target": vid, "metadata": {"subsystem": "containment"}})
    return {"graph": {"nodes": nodes, "edges": edges}}


def pool_hold_jgf(node: Mapping[str, Any], levels: Iterable[TopologyLevel],
                  amounts: Mapping[str, int], *, graph=None,
                  cluster: str = "cluster") -> dict[str, Any]:
    """A JGF for ``Matcher.update_allocate`` holding ``amounts`` (base units) of ``node``'s
    pools, as a match of one slot of those amounts would: how pods already running are
    registered without a traversal. With the ``graph`` the JGF is for, vertices carry their
    ``uniq_id`` (an index lookup); without, they are found by path (a scan per name).

    >>> jgf = pool_hold_jgf({"metadata": {"name": "w1", "labels": {}}}, (),
    ...                     {"cpu": 1500, "memory": 3000, "pods": 2})
    >>> [(n["metadata"]["paths"]["containment"], n["metadata"]["size"])
    ...  for n in jgf["graph"]["nodes"]]  # doctest: +NORMALIZE_WHITESPACE
    [('/cluster0', 1), ('/cluster0/w1', 1), ('/cluster0/w1/cpu', 1500),
     ('/cluster0/w1/memory', 3), ('/cluster0/w1/pods', 2)]
    """
    meta = node.get("metadata") or {}
    path = f"/{cluster}0"
    vertices = [(path, 1, False)]
    for _, value in node_domains(meta.get("labels") or {}, levels):
        path = f"{path}/{value}"
        vertices.append((path, 1, False))
    path = f"{path}/{meta['name']}"
    vertices.append((path, 1, False))
    for resource, amount in sorted(amounts.items()):
        if amount > 0:
            vertices.append((f"{path}/{pool_vertex_name(resource)}",
                             pool_request(resource, amount), True))
    uniq = _uniq_ids(graph, meta["name"], len(vertices) - 1 - sum(
        1 for _, _, excl in vertices if excl)) if graph is not None else {}
    # without uniq_ids, ids that are none: vertices are then found by path (a node attached
    # again after a resize has new uniq_ids; its old, removed vertices keep the same paths)
    nodes = []
    for i, (p, size, excl) in enumerate(vertices):
        md: dict[str, Any] = {"size": size, "exclusive": excl, "paths": {"containment": p}}
        if p in uniq:
            md["uniq_id"] = uniq[p]
        nodes.append({"id": f"p{i}", "metadata": md})
    return {"graph": {"nodes": nodes, "edges": []}}


def _uniq_ids(graph, name: str, depth: int) -> dict[str, int]:
    """Path -> uniq_id of node ``name``, its ancestors and its pools in ``graph``."""
    found = [v for v in graph.by_name(name) if graph.type[v] == "node" and not graph.removed[v]]
    if len(found) != 1:
        return {}
    v = found[0]
    out = {graph.path(c): graph.uniq_id[c] for c in graph.children["containment"][v]}
    parents = graph.parent["containment"]
    while v != -1:
        out[graph.path(v)] = graph.uniq_id[v]
        v = parents[v]
    return out


def pool_jobspec(count: int, amounts: Mapping[str, int], *, duration: int = 0,
                 constraint: Mapping[str, Any] | None = None, within: str | None = None,
                 count_min: int | None = None, label: str = "task") -> dict[str, Any]:
    """A jobspec of ``count`` pods of ``amounts`` (resource name -> base units: millicores,
    bytes, counts) for the pool graph: each slot wholly on one node, slots may share nodes,
    nodes stay shared.

    ``within`` asks for all slots below ONE vertex of that topology level (``rack[1] ->
    slot[count]``; the level must be the one directly above the nodes). ``count_min`` (< count)
    lets the matcher place any number between ``count_min`` and ``count`` (Fluxion takes as
    many as fit). ``constraint`` is an RFC 31 constraint.

    >>> slot = pool_jobspec(2, {"cpu": 500, "pods": 1})["resources"][0]
    >>> slot["count"], slot["with"]
    (2, [{'type': 'cpu', 'count': 500}, {'type': 'pods', 'count': 1}])
    """
    with_ = [{"type": r, "count": pool_request(r, int(n))}
             for r, n in sorted(amounts.items()) if n > 0]
    if not with_:
        raise K8sInputError(f"amounts: {shown(dict(amounts))} asks for nothing; a pod asks for at "
                            "least pods: 1")
    slot_count: Any = count
    if count_min is not None and count_min < count:
        slot_count = {"min": max(1, count_min), "max": count, "operator": "+", "operand": 1}
    slot = {"type": "slot", "count": slot_count, "label": label, "with": with_}
    resources = [slot] if within is None else [{"type": within, "count": 1, "with": [slot]}]
    system: dict[str, Any] = {"duration": int(duration)}
    if constraint:
        system["constraints"] = dict(constraint)
    return {"version": 1, "resources": resources, "attributes": {"system": system},
            "tasks": [{"command": ["pod"], "slot": label, "count": {"per_slot": 1}}]}
