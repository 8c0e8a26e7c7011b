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

from fluxinfra.inputs import MAX_VERTICES, shown
from fluxinfra.matcher.errors import GraphError
from fluxinfra.matcher.graph import ResourceGraph

__all__ = ["read_grug"]

_NS = "{http://graphml.graphdrawing.org/xmlns}"
_INT_KEYS = {"root", "size", "id_scope", "id_start", "id_stride", "multi_scale", "as_tgt_uplvl",
             "as_src_uplvl"}
#: most (source, target) pairs an ASSOCIATE edge compares: Fluxion's reader compares every
#: source with every vertex of the target type (and ASSOCIATE_IN links every pair)
_MAX_PAIRS = MAX_VERTICES
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
            value = out[k]
            text = value.strip() if isinstance(value, str) else value
            if isinstance(text, str) and len(text.lstrip("+-")) > 18:
                raise GraphError(f"GRUG: {el.get('id')}: {k} must be an integer of at most 18 "
                                 f"digits, got {shown(value)}")
            try:
                out[k] = int(text)
            except (TypeError, ValueError):
                raise GraphError(f"GRUG: {el.get('id')}: {k} must be an integer, "
                                 f"got {shown(value)}") from None
        if out["multi_scale"] < 0:
            raise GraphError(f"GRUG: {el.get('id')}: multi_scale must be >= 0, got "
                             f"{out['multi_scale']}")
        for k in ("type", "basename", "unit", "subsystem", "e_subsystem", "gen_method",
                  "as_tgt_subsystem"):
            if k in out and not isinstance(out[k], str):
                raise GraphError(f"GRUG: {el.get('id')}: {k} must be a string, got "
                                 f"{shown(out[k])}")
        out["_element"] = el.get("id")
        return out

    kinds: list[tuple[str, dict]] = []
    index: dict[str, int] = {}
    for node in graph.findall(f"{_NS}node"):
        nid = node.get("id")
        if nid in index:
            raise GraphError(f"GRUG: duplicate recipe node id {shown(nid)}")
        index[nid] = len(kinds)
        kind = attrs(node)
        for k in ("type", "basename"):
            if not kind.get(k):
                raise GraphError(f"GRUG: node {nid}: {k} is missing; every recipe node needs "
                                 "a type and a basename")
        kinds.append((nid, kind))
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
    paths = _Paths(g)
    scales: deque[int] = deque()
    node_rank = -1

    def emit_root(kind: int) -> int:
        nonlocal node_rank
        k = kinds[kind][1]
        sub = k["subsystem"]
        if sub in roots:
            return roots[sub]
        if k["type"] == "node":
            node_rank += 1
        v = g.add_vertex(type=k["type"], basename=k["basename"], name=k["basename"] + "0", id=0,
                         uniq_id=len(g), rank=node_rank if k["type"] == "node" else rank,
                         size=k["size"], unit=k["unit"])
        paths.added(1)
        paths.set_root(v, sub)
        roots[sub] = v
        by_type.setdefault(k["type"], []).append(v)
        return v

    def multiply(src_kind: int, tgt_kind: int, e: dict) -> list[int]:
        nonlocal node_rank
        k = kinds[tgt_kind][1]
        srcs = made.get(src_kind, [])
        scale = e["multi_scale"]
        if len(g) + len(srcs) * scale > MAX_VERTICES:
            raise GraphError(f"GRUG: edge {e['_element']}: multi_scale {scale} makes {len(srcs)} x "
                             f"{scale} {k['type']} vertices, past the {MAX_VERTICES:,} a "
                             "graph may have; give a smaller multi_scale")
        ids = _gen_ids(e, len(srcs), scales)
        base = k["basename"]
        names = [f"{base}{i}" if i != -1 else base for i in ids]
        if k["type"] == "node":
            ranks: list[int] | int = list(range(node_rank + 1, node_rank + 1 + len(names)))
            node_rank += len(names)
        else:
            ranks = rank
        new = g.add_vertices(k["type"], base, names, ids, ranks, k["size"], k["unit"])
        paths.added(len(new))
        targets = g.uniq_id[new.start:]  # the same int objects as the indices
        sub = e["e_subsystem"]
        if not targets:
            scales.appendleft(scale)
            return targets
        kids, parents = g._subsystem(sub)  # new vertices: no parent yet, no duplicate edge
        for j, src in enumerate(srcs):
            mine = targets[j * scale:(j + 1) * scale]
            parents[new.start + j * scale:new.start + (j + 1) * scale] = [src] * scale
            if not kids[src]:
                kids[src] = mine
            else:
                kids[src] += mine
        paths.set_children(srcs, targets, scale, k["subsystem"], sub)
        scales.appendleft(scale)
        by_type.setdefault(k["type"], []).extend(targets)
        return targets

    def associate(src_kind: int, tgt_kind: int, e: dict, by_path: bool) -> list[int]:
        targets: list[int] = []
        sub = e["e_subsystem"]
        tgt_type = kinds[tgt_kind][1]["type"]
        insub = e["as_tgt_subsystem"]
        fixed = insub != sub  # else the paths compared change as the loop sets them
        tgt_prefix: dict[int, str | None] = {}
        if len(made.get(src_kind, [])) * len(by_type.get(tgt_type, [])) > _MAX_PAIRS:
            raise GraphError(f"GRUG: edge {e['_element']}: {e['gen_method']} would compare "
                             f"{len(made.get(src_kind, [])):,} sources with "
                             f"{len(by_type.get(tgt_type, [])):,} {tgt_type} vertices, more "
                             f"than the {_MAX_PAIRS:,} pairs read; associate fewer vertices")
        for src in made.get(src_kind, []):
            src_prefix: list[str | None] = []  # [the source's prefix] once computed
            for v in by_type.get(tgt_type, []):
                if by_path:
                    if fixed and v in tgt_prefix:
                        a = tgt_prefix[v]
                    else:
                        a = tgt_prefix[v] = _path_prefix(paths.get(v, insub) or "",
                                                         e["as_tgt_uplvl"])
                    if a is None:
                        continue
                    if not (fixed and src_prefix):
                        src_prefix[:] = [_path_prefix(paths.get(src, insub) or "",
                                                      e["as_src_uplvl"])]
                    if a != src_prefix[0]:
                        continue
                paths.set_explicit(v, sub, (paths.get(src, sub) or "") + "/" + g.name[v])
                paths.before_link(v, sub)
                _link(g, src, v, sub)
                targets.append(v)
        return targets

    tree: list[tuple[int, int, dict]] = []  # the recipe edges expanded, in order

    def tree_edge(src_kind: int, tgt_kind: int, e: dict) -> None:
        tree.append((src_kind, tgt_kind, e))
        if kinds[src_kind][1]["root"] and not made.get(src_kind):
            made[src_kind] = [emit_root(src_kind)]
        method = e["gen_method"]
        if method == "MULTIPLY":
            made[tgt_kind] = multiply(src_kind, tgt_kind, e)
        elif method in ("ASSOCIATE_IN", "ASSOCIATE_BY_PATH_IN"):
            made[tgt_kind] = associate(src_kind, tgt_kind, e, method == "ASSOCIATE_BY_PATH_IN")
        else:
            raise GraphError(f"GRUG: unknown gen_method {shown(method)} (MULTIPLY, ASSOCIATE_IN, "
                             "ASSOCIATE_BY_PATH_IN)")

    # depth-first over the recipe, every kind once, in file order (boost's DFS)
    color = [0] * len(kinds)

    def dfs(start: int) -> None:
        # (iterative: a recipe may chain more kinds than Python's stack holds frames)
        color[start] = 1
        stack = [(start, iter(out_edges[start]))]
        while stack:
            u, todo = stack[-1]
            for tgt, e in todo:
                if color[tgt] == 0:
                    tree_edge(u, tgt, e)
                    color[tgt] = 1
                    stack.append((tgt, iter(out_edges[tgt])))
                    break
            else:
                stack.pop()
                color[u] = 2
                if scales:
                    scales.popleft()

    for u in range(len(kinds)):
        if color[u] == 0:
            dfs(u)
    paths.store()
    g.finalize()
    g.layouts = _layouts(kinds, tree, made)
    return g


def _layouts(kinds: list[tuple[str, dict]], tree: list[tuple[int, int, dict]],
             made: dict[int, list[int]]) -> dict[int, int]:
    """Layout hints (``ResourceGraph.layouts``): the vertices of a recipe kind are built alike
    when everything below them is made by MULTIPLY edges whose ids restart within each of
    them (``id_scope`` at most the depth of the edge's source below the kind; 0 or less:
    the same ids everywhere). Only the topmost such kinds are marked, and only for a recipe
    whose every kind and edge is in one subsystem (containment) and made by MULTIPLY."""
    if any(e["gen_method"] != "MULTIPLY" or e["e_subsystem"] != "containment"
           for _, _, e in tree) or any(k["subsystem"] != "containment" for _, k in kinds):
        return {}
    below: dict[int, list[tuple[int, dict]]] = {}
    parent: dict[int, int] = {}
    for src, tgt, e in tree:
        below.setdefault(src, []).append((tgt, e))
        parent[tgt] = src

    def alike(kind: int) -> bool:
        stack = [(kind, 0)]
        while stack:
            src, depth = stack.pop()
            for tgt, e in below.get(src, ()):
                if e["id_scope"] > depth:
                    return False  # ids counted across instances of ``kind``
                stack.append((tgt, depth + 1))
        return True

    good = {kind for kind in parent if alike(kind)}
    out: dict[int, int] = {}
    for kind in good:
        a = parent[kind]
        while a in parent and a not in good:
            a = parent[a]
        if a not in good:  # topmost
            out.update(dict.fromkeys(made.get(kind, ()), kind))
    return out


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


def _gen_ids(e: dict, nsrc: int, scales: deque[int]) -> list[int]:
    """The ids of the ``multi_scale`` children of each of ``nsrc`` sources, in creation order."""
    scale, scope = e["multi_scale"], e["id_scope"]
    if not nsrc or not scale:
        return []  # (a scale past any graph's size with no source to multiply makes nothing)
    if scope < 0:
        return [-1] * (nsrc * scale)
    start, stride = e["id_start"], e["id_stride"]
    if scope == 0:
        return list(range(start, start + scale)) * nsrc
    wrap = 1
    for h in range(min(scope, len(scales))):
        wrap *= scales[h] or 1  # (a scale of 0 above made nothing: no wrap to take from it)
    ids: list[int] = []
    for j in range(nsrc):
        first = start + (j % wrap * scale * stride)
        ids += range(first, first + scale * stride, stride) if stride else [first] * scale
    return ids


class _Paths:
    """The path the reader gives each vertex in each subsystem, kept compactly.

    Fluxion names a vertex's path from its *generating* source (``prefix/name``), which is
    nearly always its parent in that subsystem: such paths (flag ``ok``) are the names along
    the parent chain, which ``ResourceGraph.path`` derives itself, so only the others (an
    ``ASSOCIATE_*`` target, a child made over an edge of another subsystem) are stored as
    given paths. This saves two strings and a dict per vertex on million-vertex graphs.
    """

    def __init__(self, g: ResourceGraph) -> None:
        self.g = g
        self.ok: dict[str, bytearray] = {}
        self.explicit: dict[str, dict[int, str]] = {}

    def _sub(self, sub: str) -> tuple[bytearray, dict[int, str]]:
        if sub not in self.ok:
            self.ok[sub] = bytearray(len(self.g))
            self.explicit[sub] = {}
        return self.ok[sub], self.explicit[sub]

    def added(self, count: int) -> None:
        for ok in self.ok.values():
            ok += bytes(count)

    def get(self, v: int, sub: str) -> str | None:
        ok = self.ok.get(sub)
        if ok is None:
            return None
        if ok[v]:
            return self._chain(v, sub)
        return self.explicit[sub].get(v)

    def _chain(self, v: int, sub: str) -> str:
        parents = self.g.parent.get(sub)
        names = self.g.name
        parts = []
        while v != -1:
            parts.append(names[v])
            v = parents[v] if parents else -1
        return "/" + "/".join(reversed(parts))

    def set_root(self, v: int, sub: str) -> None:
        self._sub(sub)[0][v] = 1  # "/name", and v has no parent in any subsystem yet

    def set_explicit(self, v: int, sub: str, path: str) -> None:
        ok, explicit = self._sub(sub)
        ok[v] = 0
        explicit[v] = path

    def before_link(self, v: int, sub: str) -> None:
        """Linking a parentless ``v`` in ``sub`` changes its descendants' parent chains:
        freeze every derived path of ``sub`` first (rare: a root made an association target)."""
        parents, kids = self.g.parent.get(sub), self.g.children.get(sub)
        if parents is None or parents[v] != -1 or not kids[v] or sub not in self.ok:
            return
        ok, explicit = self._sub(sub)
        for u in range(len(ok)):
            if ok[u]:
                explicit[u] = self._chain(u, sub)
                ok[u] = 0

    def set_children(self, srcs: list[int], targets: list[int], scale: int, sub: str,
                     edge_sub: str) -> None:
        """Paths in ``sub`` of ``targets`` made ``scale`` per source over an ``edge_sub`` edge."""
        ok, explicit = self._sub(sub)
        names = self.g.name
        first = targets[0]
        for j, src in enumerate(srcs):
            if edge_sub == sub and ok[src]:  # parent is src: the path is derived
                ok[first + j * scale:first + (j + 1) * scale] = b"\x01" * scale
                continue
            prefix = self.get(src, sub)
            if prefix is None:
                raise GraphError(f"GRUG: {names[src]} has no path in subsystem {shown(sub)}; "
                                 "generate it from a vertex of that subsystem")
            for v in targets[j * scale:(j + 1) * scale]:
                explicit[v] = prefix + "/" + names[v]

    def store(self) -> None:
        given = self.g.given_paths
        for sub, explicit in self.explicit.items():
            for v, path in explicit.items():
                given.setdefault(v, {})[sub] = path


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
