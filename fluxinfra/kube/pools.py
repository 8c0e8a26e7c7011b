"""The scheduler's exact graph of Kubernetes Nodes: one pool per resource name per node.

Amounts are in base units (millicores, KiB, counts), so a pod's request is taken exactly; the
whole-core graph of Fluence-style scheduling is :mod:`fluxinfra.kube.graph`. Shape of the graph
(containment subsystem)::

    cluster0
      <zone value>                 type zone (one vertex type per configured topology level,
        <rack value>               outermost first; a node without a level's label hangs
          <node name>              directly under the level above)
            cpu                    size = allocatable millicores, unit "m"
            memory                 size = allocatable KiB (+ slack, below), unit "KiB"
            pods                   size = allocatable pod count
            ephemeral-storage, hugepages-2Mi, nvidia.com_gpu, ...   one pool per resource

A pool's type is the resource's exact name ("nvidia.com/gpu", never a generic "gpu"), its name
the same with "/" as "_" (vertex names form paths). Matched with ``Matcher(exact_pools=True)``
a pod's slot takes its request out of each pool: millicores and counts exactly. Byte-valued
resources (memory, ephemeral-storage, hugepages-*) are counted in KiB, because a jobspec count
is a 32-bit unsigned integer in Fluxion (a 5 GiB request does not fit in bytes): a pod takes
ceil(bytes / 1024) KiB, and the node's pool holds floor(allocatable / 1024) + its pods
allocatable KiB. That slack (<= 1 KiB per pod the node can hold) makes the pool never refuse
what fits in exact bytes; the other way round (the pool admits up to that slack more than the
bytes allow) is caught by the scheduler's exact ledger before anything is bound (see
docs/scheduler.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fluxinfra.inputs import shown
from fluxinfra.kube.graph import ZONE_LABEL, add_node_subgraph, vertex_fields
from fluxinfra.kube.resources import K8sInputError, node_allocatable

__all__ = [
    "DEFAULT_TOPOLOGY",
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
    vertices = [vertex_fields("node", name, rank, rank, "up")]
    for resource, amount in pools.items():
        vertices.append(vertex_fields(resource, pool_vertex_name(resource), 0, rank, "up",
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
