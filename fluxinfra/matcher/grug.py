"""GRUG reader: expand a Fluxion GraphML generation recipe into a resource graph.

A recipe is a small GraphML graph of resource *kinds*; each edge says how many children of the
target kind each source instance gets (``multi_scale``) and how their ids are numbered
(``id_start``, ``id_stride``, ``id_scope``: 0 numbers per parent, 1 per grandparent, ...).
Expansion walks the recipe depth-first and, at each recipe edge, creates the children of *every*
instance of the source kind before descending, so vertex indices (``uniq_id``) and child order
are exactly those of Fluxion's GRUG reader, and so is every writer's output order.
``ASSOCIATE_IN`` / ``ASSOCIATE_BY_PATH_IN`` edges link already-made vertices into another
subsystem (e.g. ``power``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import deque

from fluxinfra.matcher.errors import GraphError
from fluxinfra.matcher.graph import ResourceGraph

__all__ = ["read_grug"]

_NS = "{http://graphml.graphdrawing.org/xmlns}"
_INT_KEYS = {"root", "size", "id_scope", "id_start", "id_stride", "multi_scale", "as_tgt_uplvl",
             "as_src_uplvl"}
_DEFAULTS = {"root": 0, "size": 1, "unit": "", "subsystem": "containment",
             "e_subsystem": "containment", "relation": "contains", "rrelation": "in",
             "id_scope": 0, "id_start": 0, "id_stride": 1, "gen_method": "MULTIPLY",
             "multi_scale": 1, "as_tgt_subsystem": "containment", "as_tgt_uplvl": 1,
             "as_src_uplvl": 1}


def _parse(text: str):
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise GraphError(f"GRUG: malformed GraphML ({exc})") from None
    keys: dict[str, tuple[str, object]] = {}
    for key in root.iter(f"{_NS}key"):
        name = key.get("attr.name") or key.get("id")
        default_el = key.find(f"{_NS}default")
        default = default_el.text.strip() if default_el is not None and default_el.text else None
        keys[key.get("id")] = (name, default)
    graph = root.find(f"{_NS}graph")
    if graph is None:
        raise GraphError("GRUG: no <graph> element in the recipe")

    def attrs(el) -> dict:
        out = dict(_DEFAULTS)
        for name, default in keys.values():
            if default is not None:
                out[name] = default
        for data in el.findall(f"{_NS}data"):
            name = keys.get(data.get("key"), (data.get("key"), None))[0]
            out[name] = (data.text or "").strip()
        for k in _INT_KEYS:
            try:
                out[k] = int(out[k])
            except (TypeError, ValueError):
                raise GraphError(f"GRUG: {el.get('id')}: {k} must be an integer, "
                                 f"got {out[k]!r}") from None
        return out

    kinds: list[tuple[str, dict]] = []
    index: dict[str, int] = {}
    for node in graph.findall(f"{_NS}node"):
        nid = node.get("id")
        if nid in index:
            raise GraphError(f"GRUG: duplicate recipe node id {nid!r}")
        index[nid] = len(kinds)
        kinds.append((nid, attrs(node)))
    out_edges: list[list[tuple[int, dict]]] = [[] for _ in kinds]
    for edge in graph.findall(f"{_NS}edge"):
        src, tgt = edge.get("source"), edge.get("target")
        if src not in index or tgt not in index:
            raise GraphError(f"GRUG: edge {edge.get('id')} refers to a missing recipe node "
                             f"({src} -> {tgt})")
        out_edges[index[src]].append((index[tgt], attrs(edge)))
    return kinds, out_edges


def read_grug(text: str, rank: int = -1) -> ResourceGraph:
    """Expand a GRUG GraphML recipe (text) into a finalized :class:`ResourceGraph`."""
    kinds, out_edges = _parse(text)
    if not kinds:
        raise GraphError("GRUG: the recipe has no nodes")
    g = ResourceGraph()
    made: dict[int, list[int]] = {}
    roots: dict[str, int] = {}
    by_type: dict[str, list[int]] = {}
    paths: dict[tuple[int, str], str] = {}
    scales: deque[int] = deque()
    node_rank = -1

    def emit(kind: int, src: int | None, e: dict | None, i: int, sz: int, j: int) -> int:
        nonlocal node_rank
        k = kinds[kind][1]
        sub = k["subsystem"]
        if src is None and sub in roots:
            return roots[sub]
        if src is None:
            vid = 0
            prefix = ""
        else:
            vid = _gen_id(e, i, sz, j, scales)
            prefix = paths[(src, sub)]
        if k["type"] == "node":
            node_rank += 1
            vrank = node_rank
        else:
            vrank = rank
        name = k["basename"] + (str(vid) if vid != -1 else "")
        v = g.add_vertex(type=k["type"], basename=k["basename"], name=name, id=vid,
                         uniq_id=len(g), rank=vrank, size=k["size"], unit=k["unit"])
        paths[(v, sub)] = prefix + "/" + name
        if src is None:
            roots[sub] = v
        by_type.setdefault(k["type"], []).append(v)
        return v

    def tree_edge(src_kind: int, tgt_kind: int, e: dict) -> None:
        if kinds[src_kind][1]["root"] and not made.get(src_kind):
            made[src_kind] = [emit(src_kind, None, None, 0, 1, 0)]
        targets: list[int] = []
        sub = e["e_subsystem"]
        method = e["gen_method"]
        if method == "MULTIPLY":
            for j, src in enumerate(made.get(src_kind, [])):
                for i in range(e["multi_scale"]):
                    v = emit(tgt_kind, src, e, i, e["multi_scale"], j)
                    _link(g, src, v, sub)
                    targets.append(v)
            scales.appendleft(e["multi_scale"])
        elif method in ("ASSOCIATE_IN", "ASSOCIATE_BY_PATH_IN"):
            tgt_type = kinds[tgt_kind][1]["type"]
            for src in made.get(src_kind, []):
                for v in by_type.get(tgt_type, []):
                    if method == "ASSOCIATE_BY_PATH_IN":
                        insub = e["as_tgt_subsystem"]
                        a = _path_prefix(paths.get((v, insub), ""), e["as_tgt_uplvl"])
                        b = _path_prefix(paths.get((src, insub), ""), e["as_src_uplvl"])
                        if a is None or a != b:
                            continue
                    paths[(v, sub)] = paths.get((src, sub), "") + "/" + g.name[v]
                    _link(g, src, v, sub)
                    targets.append(v)
        else:
            raise GraphError(f"GRUG: unknown gen_method {method!r} (MULTIPLY, ASSOCIATE_IN, "
                             "ASSOCIATE_BY_PATH_IN)")
        made[tgt_kind] = targets

    # depth-first over the recipe, every kind once, in file order (boost's DFS)
    color = [0] * len(kinds)

    def dfs(u: int) -> None:
        color[u] = 1
        for tgt, e in out_edges[u]:
            if color[tgt] == 0:
                tree_edge(u, tgt, e)
                dfs(tgt)
        color[u] = 2
        if scales:
            scales.popleft()

    for u in range(len(kinds)):
        if color[u] == 0:
            dfs(u)
    for (v, sub), p in paths.items():
        g.given_paths.setdefault(v, {})[sub] = p
    g.finalize()
    return g


def _link(g: ResourceGraph, src: int, v: int, sub: str) -> None:
    kids, parents = g._subsystem(sub)
    if parents[v] == -1:
        parents[v] = src
    elif parents[v] != src:
        g.multi_parent = True  # a DAG: traversals visit each vertex once (first path wins)
    if not kids[src]:
        kids[src] = [v]
    elif v not in kids[src]:
        kids[src].append(v)


def _gen_id(e: dict, i: int, sz: int, j: int, scales: deque[int]) -> int:
    scope = e["id_scope"]
    if scope < 0:
        return -1
    if scope == 0:
        return e["id_start"] + i
    scope = min(scope, len(scales))
    wrap = 1
    for h in range(scope):
        wrap *= scales[h]
    return e["id_start"] + (j % wrap * sz * e["id_stride"]) + i * e["id_stride"]


def _path_prefix(path: str, uplevel: int) -> str | None:
    slashes = path.count("/")
    if uplevel >= slashes:
        return None
    pos = 0
    seen = 0
    while seen != slashes - uplevel + 1:
        nxt = path.find("/", pos)
        if nxt == -1:
            break
        pos = nxt + 1
        seen += 1
    prefix = path[:pos]
    return prefix if prefix.endswith("/") else prefix + "/"
