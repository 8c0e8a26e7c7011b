"""What the Fluxion service accepts: every request field checked at the edge (no gRPC here).

The service reads each request in two steps. These checks run first, before the matcher's
lock is taken: the types and ranges of every field, the JSON documents (R, JGF, Node lists)
parsed and their shapes checked, and every count an R or JGF could make the matcher expand
(an idset ``0-99999999999``, a hostlist ``node[0-99999999]``) bounded by the graph it is
about. A request that fails raises :class:`InvalidRequest`, which the server answers with
``INVALID_ARGUMENT`` and the message: the field, the value and the fix. Only requests that
pass reach the matcher.

Limits (each message says which was passed):

- job ids: 1 to :data:`MAX_JOBID` (2^62-1) when given; ids the service assigns continue from
  the largest one seen, so they stay inside int64 for as long as anyone could call;
- times and durations (``at``, ``now``, ``duration``): 0 to the matcher's planning horizon
  (2^62 s);
- a jobspec: at most :data:`MAX_JOBSPEC_BYTES` (4 MiB); JSON documents: nested at most
  :data:`MAX_JSON_DEPTH` (64) deep;
- a graph built from Node objects (``load_nodes``): at most :data:`MAX_NODE_VERTICES` (65,536)
  vertices for one node, :data:`MAX_GRAPH_VERTICES` (about 4 million) in all: a Node with
  ``cpu: 16Gi`` would otherwise be 17e9 core vertices;
- an R or a JGF: no idset, hostlist or vertex list longer than the graph has vertices.

>>> try:
...     check_jobid(2**63 - 1, "jobid")
... except InvalidRequest as exc:
...     print(exc)
jobid: 9223372036854775807 is out of range; give a job id from 1 to 4611686018427387903
>>> idset_size("0-3,7", "R.execution.R_lite[0].rank")
5
>>> hostlist_size("node[0-99999999],login1", "R.execution.nodelist[0]")
100000001
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from fluxinfra import hostlist, idset
from fluxinfra.errors import FluxinfraError
from fluxinfra.kube.graph import DEFAULT_GPU_RESOURCES, DEFAULT_MEMORY_CHUNK_MIB
from fluxinfra.kube.shapes import INT64_MAX, ShapeError, check_node, quantity_map, shown
from fluxinfra.matcher.planner import HORIZON

__all__ = ["MAX_GRAPH_VERTICES", "MAX_JOBID", "MAX_JOBSPEC_BYTES", "MAX_JSON_DEPTH",
           "MAX_NODE_VERTICES", "MAX_TIME", "InvalidRequest", "check_amount", "check_jgf",
           "check_jobid", "check_jobspec_text", "check_nodes", "check_r", "check_time",
           "hostlist_size", "idset_size", "json_field"]

MAX_JOBID = HORIZON - 1
MAX_TIME = HORIZON - 1
MAX_JOBSPEC_BYTES = 4 * 2**20
MAX_JSON_DEPTH = 64
MAX_NODE_VERTICES = 1 << 16
MAX_GRAPH_VERTICES = 1 << 22
_MIB = 2**20


class InvalidRequest(FluxinfraError):
    """A request field the service will not act on (``INVALID_ARGUMENT``)."""


# -- numbers --------------------------------------------------------------------------------------

def check_jobid(value: int, field: str) -> int:
    """A job id a client names: 1 to :data:`MAX_JOBID`."""
    if not 1 <= value <= MAX_JOBID:
        raise InvalidRequest(f"{field}: {value} is out of range; give a job id from 1 to "
                             f"{MAX_JOBID}")
    return value


def check_time(value: int, field: str) -> int:
    """A time or duration in seconds: 0 to :data:`MAX_TIME` (0: now / the default)."""
    if not 0 <= value <= MAX_TIME:
        raise InvalidRequest(f"{field}: {value} is out of range; give seconds from 0 to "
                             f"{MAX_TIME}")
    return value


def check_amount(value: int, field: str) -> int:
    """A count of resources (cores, MiB, GPUs, slots): 0 or more."""
    if value < 0:
        raise InvalidRequest(f"{field}: {value}; amounts must be >= 0")
    return value


# -- documents ------------------------------------------------------------------------------------

def check_jobspec_text(text: str, field: str = "jobspec") -> str:
    """A jobspec's text (YAML or JSON), before it is parsed: bounded in size and in nesting
    (brackets, and block indentation), so no parser recursion runs away on it."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_JOBSPEC_BYTES:
        raise InvalidRequest(f"{field}: {size} bytes; a jobspec may have at most "
                             f"{MAX_JOBSPEC_BYTES} (send the request, not its data)")
    depth = deepest = 0
    for ch in text:  # quotes are not skipped: 64 open brackets inside a string is no jobspec
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    indents: list[int] = []
    for line in text.splitlines():
        stripped = line.lstrip(" -")
        if not stripped or stripped.startswith("#"):
            continue
        indent = len(line) - len(stripped)
        while indents and indents[-1] >= indent:
            indents.pop()
        indents.append(indent)
        deepest = max(deepest, len(indents))
    if deepest > MAX_JSON_DEPTH:
        raise InvalidRequest(f"{field}: nested more than {MAX_JSON_DEPTH} levels deep; send "
                             "a canonical jobspec (RFC 14)")
    return text


def json_field(text: str, field: str, what: str) -> Any:
    """Parse one JSON field of a request; nested at most :data:`MAX_JSON_DEPTH` deep."""
    # Bound the nesting before parsing: the decoder recurses once per level.
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    raise InvalidRequest(f"{field}: nested more than {MAX_JSON_DEPTH} levels "
                                         f"deep; send {what} as plain JSON")
        elif ch in "]}":
            depth -= 1
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"{field}: not valid JSON ({exc}); send {what} as a JSON "
                             "string") from None


def _object(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        raise InvalidRequest(f"{field}: missing; it must be a JSON object")
    if not isinstance(value, Mapping):
        raise InvalidRequest(f"{field}: {shown(value)} is not a JSON object")
    return value


def _optional(doc: Mapping[str, Any], key: str, types: tuple[type, ...], field: str,
              what: str) -> Any:
    value = doc.get(key)
    if value is not None and (not isinstance(value, types)
                              or (isinstance(value, bool) and bool not in types)):
        raise InvalidRequest(f"{field}.{key}: {shown(value)} is not {what}")
    return value


def _list(value: Any, field: str, limit: int) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidRequest(f"{field}: {shown(value)} is not a JSON list")
    if len(value) > limit:
        raise InvalidRequest(f"{field}: {len(value)} entries, more than the graph's {limit} "
                             "vertices; send only what the graph holds")
    return value


def idset_size(text: Any, field: str) -> int:
    """How many ids an RFC 22 idset (``0-3,7``; a lone id may be a number) names, without
    listing them."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise InvalidRequest(f"{field}: {shown(text)} is not an idset string like '0-3,7'")
    try:
        spans = idset.ranges(text, strict=False)
    except idset.IdsetError as exc:
        raise InvalidRequest(f"{field}: {shown(text)} is not an idset ({exc}); write ids and "
                             "ranges of ids from 0 to 2^63-1, e.g. '0-3,7'") from None
    return sum(hi - lo + 1 for lo, hi in spans)


def hostlist_size(text: Any, field: str) -> int:
    """How many hosts an RFC 29 hostlist (``node[0-3,7],login1``) names, without listing
    them."""
    try:
        return hostlist.count(hostlist.parse(text))
    except hostlist.HostlistError as exc:
        raise InvalidRequest(f"{field}: {shown(text)} is not a hostlist ({exc}); write e.g. "
                             "'node[0-3,7],login1'") from None


def _bounded(count: int, field: str, limit: int) -> int:
    if count > limit:
        raise InvalidRequest(f"{field}: names {count} ids or hosts, more than the graph's "
                             f"{limit} vertices; send an R of this graph")
    return count


def check_r(doc: Any, field: str, limit: int) -> Mapping[str, Any]:
    """An RFC 20 R (``execution`` and/or ``scheduling``) or a bare JGF, as ``update_allocate``
    and ``partial_cancel`` read it; ``limit``: the graph's vertex count."""
    doc = _object(doc, field)
    if "graph" in doc:
        check_jgf(doc, field, limit)
        return doc
    if "execution" not in doc and "scheduling" not in doc:
        raise InvalidRequest(f"{field}: has neither 'execution' nor 'scheduling' nor "
                             "'graph'; send an RFC 20 R or a JGF")
    if doc.get("scheduling") is not None:
        check_jgf(doc["scheduling"], f"{field}.scheduling", limit)
    if "execution" in doc:
        _check_execution(doc["execution"], f"{field}.execution", limit)
    return doc


def _check_execution(execution: Any, field: str, limit: int) -> None:
    execution = _object(execution, field)
    named = 0
    for i, entry in enumerate(_list(execution.get("R_lite"), f"{field}.R_lite", limit)):
        at = f"{field}.R_lite[{i}]"
        entry = _object(entry, at)
        ranks = _bounded(idset_size(entry.get("rank"), f"{at}.rank"), f"{at}.rank", limit)
        children = _object(entry.get("children") or {}, f"{at}.children")
        for rtype, ids in children.items():
            if not rtype:
                raise InvalidRequest(f"{at}.children: a resource type is empty")
            count = idset_size(ids, f"{at}.children.{rtype}")
            named += _bounded(count * ranks, f"{at}.children.{rtype}", limit)
        _bounded(named, f"{field}.R_lite", limit)
    nodelist = execution.get("nodelist")
    if nodelist is not None:
        hosts = 0
        items = [nodelist] if isinstance(nodelist, str) else _list(
            nodelist, f"{field}.nodelist", limit)
        for i, item in enumerate(items):
            hosts += hostlist_size(item, f"{field}.nodelist[{i}]")
            _bounded(hosts, f"{field}.nodelist", limit)
    for name, ids in _object(execution.get("properties") or {}, f"{field}.properties").items():
        _bounded(idset_size(ids, f"{field}.properties.{name}"), f"{field}.properties.{name}",
                 limit)
    for key in ("starttime", "expiration"):
        value = _optional(execution, key, (int, float), field, "a number of seconds")
        if value is not None and not (math.isfinite(value) and 0 <= value <= INT64_MAX):
            raise InvalidRequest(f"{field}.{key}: {shown(value)}; give seconds since the "
                                 "epoch, from 0 to 2^63-1")


_VERTEX_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "type": ((str,), "a string"), "basename": ((str,), "a string"), "name": ((str,), "a string"),
    "unit": ((str,), "a string"), "id": ((int,), "a whole number"),
    "uniq_id": ((int,), "a whole number"), "rank": ((int,), "a whole number"),
    "size": ((int,), "a whole number"), "exclusive": ((bool,), "true or false"),
    "status": ((int, str), "0, 1, 'up' or 'down'"), "properties": ((dict,), "an object"),
    "paths": ((dict,), "an object"),
}


def check_jgf(doc: Any, field: str, limit: int) -> Mapping[str, Any]:
    """A JSON Graph Format document: ``graph.nodes`` and ``graph.edges`` with the field types
    the JGF reader takes; at most ``limit`` vertices and edges."""
    doc = _object(doc, field)
    if "graph" not in doc:
        raise InvalidRequest(f"{field}: top-level key 'graph' is missing; a JGF is "
                             "{\"graph\": {\"nodes\": [...], \"edges\": [...]}}")
    graph = _object(doc["graph"], f"{field}.graph")
    nodes = _list(graph.get("nodes"), f"{field}.graph.nodes", limit)
    edges = _list(graph.get("edges"), f"{field}.graph.edges", limit)
    for i, node in enumerate(nodes):
        at = f"{field}.graph.nodes[{i}]"
        node = _object(node, at)
        if not isinstance(node.get("id"), str):
            raise InvalidRequest(f"{at}.id: {shown(node.get('id'))} is not a string")
        md = _object(node.get("metadata"), f"{at}.metadata")
        for key, (types, what) in _VERTEX_FIELDS.items():
            value = _optional(md, key, types, f"{at}.metadata", what)
            if isinstance(value, int) and not isinstance(value, bool) and \
                    not -INT64_MAX - 1 <= value <= INT64_MAX:
                raise InvalidRequest(f"{at}.metadata.{key}: {shown(value)} is past int64")
        if isinstance(md.get("size"), int) and md["size"] < 0:
            raise InvalidRequest(f"{at}.metadata.size: {md['size']}; sizes are >= 0")
        for key in ("properties", "paths"):
            for k, v in (md.get(key) or {}).items():
                if not isinstance(v, str):
                    raise InvalidRequest(f"{at}.metadata.{key}.{k}: {shown(v)} is not a "
                                         "string")
    for i, edge in enumerate(edges):
        at = f"{field}.graph.edges[{i}]"
        edge = _object(edge, at)
        for key in ("source", "target"):
            if not isinstance(edge.get(key), str):
                raise InvalidRequest(f"{at}.{key}: {shown(edge.get(key))} is not a vertex id "
                                     "(a string)")
        md = _object(edge.get("metadata") or {}, f"{at}.metadata")
        _optional(md, "subsystem", (str,), f"{at}.metadata", "a string")
        name = md.get("name")
        if name is not None and not isinstance(name, (str, dict)):
            raise InvalidRequest(f"{at}.metadata.name: {shown(name)} is not a string or an "
                                 "object")
    return doc


# -- Kubernetes Node objects ----------------------------------------------------------------------

def _core_graph_vertices(node: Mapping[str, Any]) -> int:
    """Vertices of one node in the whole-core graph (``graph_from_k8s``): the node, a core
    per whole cpu, a memory vertex per 1 GiB chunk, a GPU vertex per GPU."""
    status = node.get("status") or {}
    amounts = quantity_map(status.get("allocatable") or status.get("capacity"), "status")
    chunks = amounts.get("memory", 0) // _MIB // DEFAULT_MEMORY_CHUNK_MIB
    gpus = sum(amounts.get(name, 0) for name in DEFAULT_GPU_RESOURCES)
    return 1 + amounts.get("cpu", 0) // 1000 + chunks + gpus


def check_nodes(doc: Any, field: str = "load_nodes.nodes_json") -> tuple[list[Any], bool]:
    """A ``load_nodes`` document: a JSON list of Node objects, or ``{"model": "pools",
    "nodes": [...], "topology": ..., "ranks": {...}, "prune_filters": "..."}``; returns the
    Node list and whether it is the pool model. Each Node is checked field by field
    (:func:`fluxinfra.kube.shapes.check_node`) and the whole-core graph bounded."""
    pools = isinstance(doc, Mapping) and doc.get("model") == "pools"
    if pools:
        nodes = doc.get("nodes")
        topology = doc.get("topology")
        if topology is not None and not isinstance(topology, str) and not (
                isinstance(topology, list) and all(
                    isinstance(t, list) and len(t) == 2 and all(isinstance(s, str) for s in t)
                    for t in topology)):
            raise InvalidRequest(f"{field}.topology: {shown(topology)}; give "
                                 "'LEVEL=LABEL,...' or [[level, label], ...]")
        ranks = doc.get("ranks")
        if ranks is not None and not (isinstance(ranks, Mapping) and all(
                isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_JOBID
                for v in ranks.values())):
            raise InvalidRequest(f"{field}.ranks: {shown(ranks)}; give {{node name: rank}} "
                                 "with ranks from 0")
        if doc.get("prune_filters") is not None and not isinstance(doc["prune_filters"], str):
            raise InvalidRequest(f"{field}.prune_filters: {shown(doc['prune_filters'])} is not "
                                 "a string like 'ALL:core'")
        field = f"{field}.nodes"
    else:
        nodes = doc
    if not isinstance(nodes, list):
        raise InvalidRequest(f"{field}: {shown(nodes)} is not a JSON list of Node objects (or "
                             "{\"model\": \"pools\", \"nodes\": [...]})")
    if len(nodes) > MAX_GRAPH_VERTICES:
        raise InvalidRequest(f"{field}: {len(nodes)} nodes, more than {MAX_GRAPH_VERTICES}")
    total = 1
    for i, node in enumerate(nodes):
        try:
            name = check_node(node, f"{field}[{i}]")
            vertices = len((node.get("status") or {}).get("allocatable") or {}) + 1 if pools \
                else _core_graph_vertices(node)
        except ShapeError as exc:
            raise InvalidRequest(str(exc)) from None
        if vertices > MAX_NODE_VERTICES:
            raise InvalidRequest(
                f"{field}[{i}] (node {name}): its allocatable amounts make {vertices} graph "
                f"vertices (a core per cpu, one per GiB of memory, one per GPU), more than "
                f"{MAX_NODE_VERTICES} for one node; check status.allocatable (cpu '16Gi' is "
                "a memory amount, not a core count)")
        total += vertices
        if total > MAX_GRAPH_VERTICES:
            raise InvalidRequest(f"{field}: the first {i + 1} nodes already make {total} graph "
                                 f"vertices, more than {MAX_GRAPH_VERTICES}; load fewer nodes "
                                 "or use the pool model")
    return nodes, pools
