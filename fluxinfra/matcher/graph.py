"""The resource graph: vertices in parallel arrays, edges grouped by subsystem.

A vertex is an ``int`` index. Its attributes live in one list per field (``type``, ``name``,
``size`` ...), so a 16,384-node cluster (about 1.2 million vertices) costs a few hundred bytes per
vertex rather than an object each. Edges are kept per subsystem as ``children[v]`` lists in
insertion order (Fluxion's out-edge order, which fixes the order its writers emit vertices) and a
``parent`` array; ``containment`` is the default (dominant) subsystem, and any other subsystem
(e.g. ``power``, or a second ``flex`` containment for the flex-container case) is a second forest
over the same vertices, selected with ``Matcher(..., subsystems="flex")`` / ``-S``.

>>> g = ResourceGraph()
>>> c = g.add_vertex(type="cluster", name="c0")
>>> n = g.add_vertex(type="node", id=0)
>>> g.add_edge(c, n)
>>> g.finalize()
>>> g.name[n], g.path(n), g.subtree_totals(c)
('node0', '/c0/node0', {'node': 1})
"""

from __future__ import annotations

from collections.abc import Iterable

from fluxinfra.inputs import INT64_MAX, INT64_MIN, MAX_VERTICES, parse_json, shown
from fluxinfra.matcher.errors import GraphError

__all__ = ["ResourceGraph", "CONTAINMENT", "read_jgf"]

CONTAINMENT = "containment"
#: most levels a subsystem may nest (Fluxion's graphs have about 10; each costs the traversals
#: about three frames of Python's stack)
MAX_GRAPH_DEPTH = 100
#: shared by every leaf until it gets a child (saves a list per vertex on million-vertex graphs)
_NO_CHILDREN: tuple = ()
_STATUS = {"up": 1, "down": 0}


class GraphCheckpoint:
    """A graph's state at :meth:`ResourceGraph.checkpoint` (and the edges added since)."""

    __slots__ = ("vertices", "subsystems", "multi_parent", "layouts", "finalized", "edges")

    def __init__(self, vertices: int, subsystems: set[str], multi_parent: bool,
                 layouts: dict[int, int], finalized: bool, edges: list) -> None:
        self.vertices = vertices
        self.subsystems = subsystems
        self.multi_parent = multi_parent
        self.layouts = layouts
        self.finalized = finalized
        #: (subsystem, parent, child, the child's parent before, the parent's child count
        #: before or -1 for none) per logged edge
        self.edges = edges


class ResourceGraph:
    """A Fluxion resource graph (build with ``add_vertex``/``add_edge``, then ``finalize``)."""

    def __init__(self) -> None:
        self.type: list[str] = []
        self.basename: list[str] = []
        self.name: list[str] = []
        self.id: list[int] = []
        self.uniq_id: list[int] = []
        self.rank: list[int] = []
        self.size: list[int] = []
        self.unit: list[str] = []
        self.exclusive: list[bool] = []
        self.properties: list[dict | None] = []
        self.status: list[int] = []  # 1 up, 0 down
        self.given_paths: dict[int, dict[str, str]] = {}
        #: subsystem -> children lists / parent array / root
        self.children: dict[str, list[list[int]]] = {}
        self.parent: dict[str, list[int]] = {}
        self.roots: dict[str, int] = {}
        self.removed: list[bool] = []
        self._by_uniq: dict[int, int] = {}
        self._by_name: dict[str, list[int]] | None = None
        self._totals: dict[int, dict[str, int]] = {}
        #: the same per other subsystem (computed when first asked for)
        self._sub_totals: dict[str, dict[int, dict[str, int]]] = {}
        self._paths: dict[int, str] = {}
        self.finalized = False
        self._intern: dict[str, str] = {}
        #: some vertex has two parents in one subsystem (Fluxion's ASSOCIATE_IN)
        self.multi_parent = False
        #: builder hint: vertices with the same layout id have identical subtrees (tree,
        #: types, sizes, ids and so names, statuses, properties, children ascending by
        #: uniq_id), so a traversal may work a subtree's shape (and a writer its lines) out
        #: once per layout. finalize() drops every hint (the structure may have changed); a
        #: status change drops the hints above it.
        self.layouts: dict[int, int] = {}

    # -- building ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.type)

    def _s(self, text: str) -> str:
        return self._intern.setdefault(text, text)

    def add_vertex(self, type: str, basename: str | None = None, name: str | None = None,  # noqa: A002
                   id: int | None = None, uniq_id: int | None = None, rank: int = -1,  # noqa: A002
                   size: int = 1, unit: str = "", exclusive: bool = False,
                   properties: dict | None = None, status: str = "up",
                   paths: dict[str, str] | None = None) -> int:
        """Add a vertex with Fluxion's defaults; returns its index."""
        v = len(self.type)
        if uniq_id is None:
            uniq_id = v
        if id is None:
            id = uniq_id  # noqa: A001
        by_uniq = self._by_uniq
        if (uniq_id in by_uniq or type.__class__ is not str or not type
                or size.__class__ is not int or size < 0 or status not in _STATUS):
            self._reject_vertex(v, type, uniq_id, size, status)
        intern = self._intern
        type = intern.setdefault(type, type)  # noqa: A001
        basename = type if basename is None else intern.setdefault(basename, basename)
        by_uniq[uniq_id] = v
        self.type.append(type)
        self.basename.append(basename)
        self.name.append(f"{basename}{id}" if name is None else name)
        self.id.append(id)
        self.uniq_id.append(uniq_id)
        self.rank.append(rank)
        self.size.append(size)
        self.unit.append(intern.setdefault(unit, unit) if unit else "")
        self.exclusive.append(bool(exclusive))
        self.properties.append(properties or None)
        self.status.append(1 if status == "up" else 0)
        self.removed.append(False)
        if paths:
            self.given_paths[v] = dict(paths)
        for sub in self.parent.values():
            sub.append(-1)
        for kids in self.children.values():
            kids.append(_NO_CHILDREN)
        self.finalized = False
        self._by_name = None
        return v

    def add_vertices(self, type: str, basename: str, names: list[str],  # noqa: A002
                     ids: list[int], ranks: list[int] | int = -1, size: int = 1,
                     unit: str = "") -> range:
        """Add ``len(names)`` up, shared, property-less vertices of one kind at once.

        Same result as ``add_vertex`` per name (uniq_id = index, ``ranks`` one per vertex or
        one for all), at a fraction of the cost on million-vertex graphs; returns the indices.
        """
        start, count = len(self.type), len(names)
        if len(ids) != count or (not isinstance(ranks, int) and len(ranks) != count):
            raise GraphError(f"add_vertices: {count} names but {len(ids)} ids / ranks given")
        new = range(start, start + count)
        by_uniq = self._by_uniq
        if (type.__class__ is not str or not type or size.__class__ is not int or size < 0
                or not by_uniq.keys().isdisjoint(new)):
            clash = next((u for u in new if u in by_uniq), start)
            self._reject_vertex(clash, type, clash, size, "up")
        intern = self._intern
        type = intern.setdefault(type, type)  # noqa: A001
        basename = intern.setdefault(basename, basename)
        unit = intern.setdefault(unit, unit) if unit else ""
        idx = list(new)
        by_uniq.update(zip(idx, idx, strict=True))
        self.type += [type] * count
        self.basename += [basename] * count
        self.name += names
        self.id += ids
        self.uniq_id += idx
        self.rank += [ranks] * count if isinstance(ranks, int) else ranks
        self.size += [size] * count
        self.unit += [unit] * count
        self.exclusive += [False] * count
        self.properties += [None] * count
        self.status += [1] * count
        self.removed += [False] * count
        for sub in self.parent.values():
            sub += [-1] * count
        for kids in self.children.values():
            kids += [_NO_CHILDREN] * count
        self.finalized = False
        self._by_name = None
        return new

    def _reject_vertex(self, v: int, type, uniq_id, size, status) -> None:  # noqa: A002
        if not isinstance(type, str) or not type:
            raise GraphError(f"vertex type must be a non-empty string, got {shown(type)}")
        if uniq_id in self._by_uniq:
            raise GraphError(f"duplicate vertex uniq_id {uniq_id} "
                             f"(vertices {self._by_uniq[uniq_id]} and {v}); ids must be unique")
        if not isinstance(size, int) or size < 0:
            raise GraphError(f"vertex {uniq_id}: size must be a non-negative integer, got "
                             f"{shown(size)}")
        raise GraphError(f"vertex {uniq_id}: status must be 'up' or 'down', got {shown(status)}")

    def _subsystem(self, subsystem: str) -> tuple[list[list[int]], list[int]]:
        if subsystem not in self.children:
            n = len(self.type)
            self.children[subsystem] = [_NO_CHILDREN] * n
            self.parent[subsystem] = [-1] * n
        return self.children[subsystem], self.parent[subsystem]

    def add_edge(self, parent: int, child: int, subsystem: str = CONTAINMENT) -> None:
        """Add a parent -> child edge in ``subsystem``."""
        n = len(self.type)
        if not (parent.__class__ is int and child.__class__ is int
                and 0 <= parent < n and 0 <= child < n):
            for role, v in (("source", parent), ("target", child)):
                if not isinstance(v, int) or not 0 <= v < n:
                    raise GraphError(f"edge {parent} -> {child}: {role} vertex {shown(v)} "
                                     "does not exist")
        if parent == child:
            raise GraphError(f"edge {parent} -> {child}: a vertex cannot contain itself")
        kids, parents = self._subsystem(subsystem)
        if parents[child] != -1:
            if parents[child] == parent or child in kids[parent]:
                return  # the same edge again (or given in both directions)
            # a second parent makes this subsystem a DAG (Fluxion allows it, e.g. two
            # containers sharing nodes); traversals visit such a vertex once, first path wins
            self.multi_parent = True
        else:
            parents[child] = parent
        mine = kids[parent]
        if mine is _NO_CHILDREN:
            kids[parent] = [child]
        else:
            mine.append(child)
        self.finalized = False

    def finalize(self) -> None:
        """Validate (one root per subsystem, no cycles or orphans) and index the graph."""
        if not self.type:
            raise GraphError("the resource graph has no vertices")
        self.layouts = {}
        if CONTAINMENT not in self.children:
            self._subsystem(CONTAINMENT)
        n = len(self.type)
        removed = self.removed
        several = len(self.parent) > 1
        member = [False] * n
        if several:  # a vertex only in another subsystem is no containment orphan
            for sub, parents in self.parent.items():
                kids = self.children[sub]
                for v, p in enumerate(parents):
                    if p != -1 or kids[v]:
                        member[v] = True
        for sub, parents in self.parent.items():
            kids = self.children[sub]
            roots = [v for v, p in enumerate(parents)
                     if p == -1 and not removed[v]
                     and (kids[v] or (sub == CONTAINMENT and not member[v]))]
            if len(roots) != 1:
                names = ", ".join(self.name[v] for v in roots[:4])
                raise GraphError(f"subsystem {shown(sub)} must have exactly one root vertex, "
                                 f"found {len(roots)} ({names}); connect them under one root")
            self.roots[sub] = roots[0]
        order = self.preorder(self.roots[CONTAINMENT])
        if several or any(removed):
            cparents, ckids = self.parent[CONTAINMENT], self.children[CONTAINMENT]
            live = sum(1 for v in range(n) if not removed[v]
                       and (cparents[v] != -1 or ckids[v] or not member[v]))
        else:
            live = n
        if len(order) != live:
            raise GraphError(f"{live - len(order)} vertices are not reachable from the "
                             f"containment root {self.name[self.roots[CONTAINMENT]]} "
                             "(cycle or orphan)")
        if self.multi_parent:
            # a vertex with two parents can close a cycle the first parents do not show
            for sub in self.children:
                self._check_acyclic(sub)
        for sub, root in self.roots.items():
            self._check_depth(sub, root)
        self._compute_totals(order)
        self._paths = {}
        self._by_name = None
        self.finalized = True

    def _check_depth(self, sub: str, root: int) -> None:
        """Raise GraphError if ``sub`` nests more than MAX_GRAPH_DEPTH levels below ``root``
        (the traversals recurse once per level: a deeper graph would exhaust the stack)."""
        kids, parents = self.children[sub], self.parent[sub]
        frontier, depth = [root], 1
        multi = self.multi_parent
        while frontier:
            if depth > MAX_GRAPH_DEPTH:
                raise GraphError(f"subsystem {shown(sub)} nests more than {MAX_GRAPH_DEPTH} levels "
                                 f"below its root {self.name[root]} (at {self.name[frontier[0]]})"
                                 "; no Fluxion graph is that deep")
            below: list[int] = []
            if multi:
                below = [c for v in frontier for c in kids[v] if parents[c] == v]
            else:
                extend = below.extend
                for v in frontier:
                    ch = kids[v]
                    if ch:
                        extend(ch)
            frontier = below
            depth += 1

    def _check_acyclic(self, sub: str) -> None:
        """Raise GraphError if the edges of ``sub`` (every parent of a vertex, not only its
        first) form a cycle; iterative, O(vertices + edges)."""
        kids = self.children[sub]
        state = bytearray(len(self.type))  # 0 new, 1 on the current path, 2 done
        for start in range(len(kids)):
            if state[start] or not kids[start]:
                continue
            state[start] = 1
            stack = [(start, iter(kids[start]))]
            while stack:
                v, todo = stack[-1]
                for c in todo:
                    if state[c] == 1:
                        raise GraphError(f"subsystem {shown(sub)}: the edges form a cycle through "
                                         f"{self.name[c]} and {self.name[v]}; a vertex cannot "
                                         "contain what contains it")
                    if state[c] == 0:
                        state[c] = 1
                        stack.append((c, iter(kids[c])))
                        break
                else:
                    state[v] = 2
                    stack.pop()

    def checkpoint(self) -> GraphCheckpoint:
        """What :meth:`rollback` needs to put the graph back as it is now, taken before a
        change that may be refused (``Matcher.add_subgraph``); edges added meanwhile must go
        through :meth:`add_edge_logged`."""
        return GraphCheckpoint(len(self.type), set(self.children), self.multi_parent,
                               dict(self.layouts), self.finalized, [])

    def add_edge_logged(self, parent: int, child: int, subsystem: str,
                        mark: GraphCheckpoint) -> None:
        """:meth:`add_edge`, remembering in ``mark`` how to take it back."""
        kids = self.children.get(subsystem)
        if kids is not None and 0 <= parent < len(kids) and 0 <= child < len(kids):
            before = self.parent[subsystem][child]
            mark.edges.append((subsystem, parent, child, before,
                               -1 if kids[parent] is _NO_CHILDREN else len(kids[parent])))
        self.add_edge(parent, child, subsystem)

    def rollback(self, mark: GraphCheckpoint) -> None:
        """Put the graph back as it was at :meth:`checkpoint` ``mark``: vertices added since
        are dropped, logged edges taken back, new subsystems forgotten, the graph finalized
        again (as it was) with its layout hints."""
        n = mark.vertices
        for sub, parent, child, before, length in reversed(mark.edges):
            if sub not in mark.subsystems:
                continue
            self.parent[sub][child] = before
            if length < 0:
                self.children[sub][parent] = _NO_CHILDREN
            else:
                del self.children[sub][parent][length:]
        for sub in list(self.children):
            if sub not in mark.subsystems:
                del self.children[sub], self.parent[sub]
                self.roots.pop(sub, None)
                self._sub_totals.pop(sub, None)
        for column in (self.type, self.basename, self.name, self.id, self.uniq_id, self.rank,
                       self.size, self.unit, self.exclusive, self.properties, self.status,
                       self.removed, *self.children.values(), *self.parent.values()):
            del column[n:]
        for v in [v for v in self.given_paths if v >= n]:
            del self.given_paths[v]
        for u in [u for u, v in self._by_uniq.items() if v >= n]:
            del self._by_uniq[u]
        self._by_name = None
        self.multi_parent = mark.multi_parent
        if mark.finalized:
            self.finalize()
        self.layouts = mark.layouts

    def _compute_totals(self, order: list[int], subsystem: str = CONTAINMENT) -> None:
        """Per non-leaf vertex: total size of each resource type below it in ``subsystem``
        (a vertex with two parents counts below its first one)."""
        kids, parent = self.children[subsystem], self.parent[subsystem]
        totals: dict[int, dict[str, int]] = {}
        typ, size = self.type, self.size
        multi = self.multi_parent
        shared = False  # some vertex has two parents in this subsystem
        for v in reversed(order):
            ch = kids[v]
            if not ch:
                continue
            if multi:
                n = len(ch)
                ch = [c for c in ch if parent[c] == v]
                shared = shared or len(ch) < n
            agg: dict[str, int] = {}
            for c in ch:
                t = typ[c]
                agg[t] = agg.get(t, 0) + size[c]
                sub = totals.get(c)
                if sub:
                    for k, m in sub.items():
                        agg[k] = agg.get(k, 0) + m
            totals[v] = agg
        if subsystem == CONTAINMENT:
            self._totals = totals
            self._sub_totals = {}
        else:
            # Another subsystem that is a DAG (fluxinfra's flex containers sharing nodes)
            # keeps the containment totals: counted below a first parent only, a container
            # would read its shared nodes as missing and be pruned for requests it can take.
            self._sub_totals[subsystem] = self._totals if shared else totals

    # -- queries ----------------------------------------------------------------------------
    def preorder(self, root: int, subsystem: str = CONTAINMENT) -> list[int]:
        """Vertices below ``root`` (each once, through its first parent), parents first."""
        kids = self.children[subsystem]
        parent = self.parent[subsystem]
        out: list[int] = []
        stack = [root]
        push, pop, emit = stack.extend, stack.pop, out.append
        if self.multi_parent:
            while stack:
                v = pop()
                emit(v)
                push(c for c in reversed(kids[v]) if parent[c] == v)
        else:
            while stack:
                v = pop()
                emit(v)
                ch = kids[v]
                if ch:
                    push(ch[::-1])
        if len(out) > len(self.type):
            raise GraphError("the containment edges form a cycle")
        return out

    def drop_layout(self, v: int) -> None:
        """Forget the layout hints of ``v`` and of every vertex above it (``v`` changed)."""
        if self.layouts:
            for parents in self.parent.values():
                a = v
                while a != -1:
                    self.layouts.pop(a, None)
                    a = parents[a]

    def subtree_totals(self, v: int, subsystem: str = CONTAINMENT) -> dict[str, int]:
        """Total size of each resource type below ``v`` in ``subsystem`` ({} for a leaf; a
        subsystem other than containment in which a vertex has two parents answers with the
        containment totals)."""
        if subsystem == CONTAINMENT:
            return self._totals.get(v, {})
        totals = self._sub_totals.get(subsystem)
        if totals is None:
            self._compute_totals(self.preorder(self.roots[subsystem], subsystem), subsystem)
            totals = self._sub_totals[subsystem]
        return totals.get(v, {})

    @property
    def root(self) -> int:
        return self.roots[CONTAINMENT]

    def path(self, v: int, subsystem: str = CONTAINMENT) -> str:
        given = self.given_paths.get(v)
        if given and subsystem in given:
            return given[subsystem]
        if subsystem == CONTAINMENT:
            cached = self._paths.get(v)
            if cached is not None:
                return cached
            up = self.parent[CONTAINMENT][v]
            base = self._paths.get(up) if up != -1 else ""
            if base is not None:  # the parent's name path is known: one concatenation
                cached = self._paths[v] = f"{base}/{self.name[v]}"
                return cached
        parents = self.parent.get(subsystem)
        parts = []
        u = v
        while u != -1:
            parts.append(self.name[u])
            u = parents[u] if parents else -1
        p = "/" + "/".join(reversed(parts))
        if subsystem == CONTAINMENT:
            self._paths[v] = p
        return p

    def by_name(self, name: str) -> list[int]:
        if self._by_name is None:
            idx: dict[str, list[int]] = {}
            for v, n in enumerate(self.name):
                if not self.removed[v]:
                    idx.setdefault(n, []).append(v)
            self._by_name = idx
        return self._by_name.get(name, [])

    def by_uniq_id(self, uniq_id: int) -> int | None:
        return self._by_uniq.get(uniq_id)

    def resolve(self, path_or_name: str) -> int:
        """A vertex by containment path (``/c0/node3``) or unique name (``node3``)."""
        if path_or_name.startswith("/"):
            name = path_or_name.rsplit("/", 1)[-1]
            for v in self.by_name(name):
                if self.path(v) == path_or_name:
                    return v
            raise GraphError(f"no vertex at path {shown(path_or_name)}")
        found = self.by_name(path_or_name)
        if len(found) != 1:
            what = "no vertex" if not found else f"{len(found)} vertices"
            raise GraphError(f"{what} named {shown(path_or_name)}; give the containment path "
                             "instead")
        return found[0]

    def types(self) -> set[str]:
        return set(self.type)

    def __repr__(self) -> str:
        return f"ResourceGraph({len(self.type)} vertices, subsystems={sorted(self.children)})"


# -- JSON Graph Format reader ----------------------------------------------------------------
def _load_json(source: str | bytes | dict, what: str) -> dict:
    if isinstance(source, dict):
        return source
    if not isinstance(source, (str, bytes, bytearray)):
        raise GraphError(f"{what}: expected JSON text or an object, got "
                         f"{type(source).__name__}")
    return parse_json(source, what, GraphError)


#: metadata keys Fluxion's JGF reader unpacks as strings, and as integers
_MD_STR = ("basename", "name", "unit")
_MD_INT = ("id", "uniq_id", "rank", "size")


def _check_metadata(md: dict, where: str) -> None:
    """Each metadata field a JGF vertex gives has the type Fluxion's reader unpacks it as."""
    for key in _MD_STR:
        value = md.get(key)
        if value is not None and value.__class__ is not str:
            raise GraphError(f"{where}.{key}: must be a string, got {shown(value)}")
    for key in _MD_INT:
        value = md.get(key)
        if value is not None and (value.__class__ is not int
                                  or not INT64_MIN <= value <= INT64_MAX):
            raise GraphError(f"{where}.{key}: must be a 64-bit integer, got {shown(value)}")
    value = md.get("exclusive")
    if value is not None and value.__class__ is not bool:
        raise GraphError(f"{where}.exclusive: must be true or false, got {shown(value)}")
    value = md.get("status")
    if value is not None and (value.__class__ not in (int, str)
                              or value not in (0, 1, "up", "down")):
        raise GraphError(f"{where}.status: must be 0 (up) or 1 (down), got {shown(value)}")
    for key in ("paths", "properties"):
        value = md.get(key)
        if value is None:
            continue
        if value.__class__ is not dict:
            raise GraphError(f"{where}.{key}: must be an object of strings, got {shown(value)}")
        for k, v in value.items():
            if v.__class__ is not str:
                raise GraphError(f"{where}.{key}.{k}: must be a string, got {shown(v)}")


def read_jgf_parts(source: str | bytes | dict) -> tuple[list[tuple[str, dict]], list]:
    """Parse JGF into (vertex id, add_vertex kwargs) pairs and (source, target, subsystem)
    edges, applying Fluxion's JGF defaults; reverse ("in") edges are dropped. Every field is
    checked to have the JSON type Fluxion's reader takes (GraphError naming it otherwise)."""
    doc = _load_json(source, "JGF")
    graph = doc.get("graph") if isinstance(doc, dict) else None
    if not isinstance(graph, dict):
        raise GraphError("JGF: top-level key 'graph' (an object) is missing")
    nodes, edges = graph.get("nodes"), graph.get("edges")
    if not isinstance(nodes, list) or not isinstance(edges, list):
        raise GraphError("JGF: 'graph.nodes' and 'graph.edges' must both be lists")
    if len(nodes) > MAX_VERTICES:
        raise GraphError(f"JGF: graph.nodes: {len(nodes):,} vertices, more than the "
                         f"{MAX_VERTICES:,} a graph may have")
    out_nodes: list[tuple[str, dict]] = []
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or not isinstance(node.get("id"), str):
            raise GraphError(f"JGF: graph.nodes[{i}].id: must be a string")
        md = node.get("metadata")
        if not isinstance(md, dict) or not isinstance(md.get("type"), str) or not md["type"]:
            raise GraphError(f"JGF: graph.nodes[{i}].metadata.type: missing or not a "
                             f"non-empty string (vertex {node['id']})")
        _check_metadata(md, f"JGF: graph.nodes[{i}].metadata")
        vid = node["id"]
        if vid in seen:
            raise GraphError(f"JGF: graph.nodes[{i}]: duplicate vertex id {shown(vid)}")
        seen.add(vid)
        uniq = md.get("uniq_id")
        if uniq is None:
            uniq = _int_id(vid)
            if uniq is None:
                raise GraphError(f"JGF: graph.nodes[{i}]: uniq_id cannot be inferred from id "
                                 f"{shown(vid)}; add metadata.uniq_id") from None
        name = md.get("name")
        rid = md.get("id")
        if rid is None:
            rid = uniq
            if md["type"] == "node" and name:
                digits = _trailing_int(name)
                if digits is not None:
                    rid = digits
        status = md.get("status", 0)
        out_nodes.append((vid, {
            "type": md["type"], "basename": md.get("basename"), "name": name, "id": rid,
            "uniq_id": uniq, "rank": _given(md, "rank", -1), "size": _given(md, "size", 1),
            "unit": md.get("unit") or "", "exclusive": bool(md.get("exclusive")),
            "properties": md.get("properties"),
            "status": "down" if status in (1, "down") else "up", "paths": md.get("paths")}))
    out_edges = []
    for i, edge in enumerate(edges):
        if not isinstance(edge, dict):
            raise GraphError(f"JGF: graph.edges[{i}]: must be an object")
        src, tgt = edge.get("source"), edge.get("target")
        if src.__class__ is not str or tgt.__class__ is not str:
            raise GraphError(f"JGF: graph.edges[{i}]: source and target must be vertex ids "
                             f"(strings), got {shown(src)} -> {shown(tgt)}")
        if src not in seen or tgt not in seen:
            missing = src if src not in seen else tgt
            raise GraphError(f"JGF: graph.edges[{i}]: vertex {shown(missing)} does not exist "
                             f"({src} -> {tgt})")
        md = edge.get("metadata")
        if md is None:
            md = {}
        elif md.__class__ is not dict:
            raise GraphError(f"JGF: graph.edges[{i}].metadata: must be an object, got {shown(md)}")
        sub = md.get("subsystem")
        named = md.get("name")
        if sub is not None and (sub.__class__ is not str or not sub):
            raise GraphError(f"JGF: graph.edges[{i}].metadata.subsystem: must be a non-empty "
                             f"string, got {shown(sub)}")
        if sub is None and isinstance(named, dict) and named:
            sub, relation = next(iter(named.items()))
            if not sub or relation.__class__ is not str:
                raise GraphError(f"JGF: graph.edges[{i}].metadata.name: must map a "
                                 f"subsystem to a relation (strings), got {shown(named)}")
            if relation == "in":
                continue
        if md.get("relation") == "in" or named == "in":
            continue
        out_edges.append((src, tgt, sub or CONTAINMENT))
    return out_nodes, out_edges


def read_jgf(source: str | bytes | dict) -> ResourceGraph:
    """Read JSON Graph Format as Fluxion's JGF reader does (defaults included)."""
    nodes, edges = read_jgf_parts(source)
    g = ResourceGraph()
    vmap: dict[str, int] = {}
    for i, (vid, kwargs) in enumerate(nodes):
        try:
            vmap[vid] = g.add_vertex(**kwargs)
        except GraphError as exc:
            raise GraphError(f"JGF: graph.nodes[{i}]: {exc}") from None
    for src, tgt, sub in edges:
        u, v = vmap[src], vmap[tgt]
        if sub in g.children and (g.parent[sub][u] == v or v in g.children[sub][u]):
            continue  # the same edge again, or given in both directions
        g.add_edge(u, v, sub)
    g.finalize()
    return g


def _given(md: dict, key: str, default):
    """``md[key]``, or ``default`` when it is missing or null."""
    value = md.get(key)
    return default if value is None else value


def _trailing_int(name: str) -> int | None:
    """The decimal digits a name ends with as a number (None: none, or past int64, which
    Fluxion's reader cannot take either)."""
    end = len(name)
    start = end
    while start > 0 and name[start - 1] in "0123456789":
        start -= 1
    if start == end or end - start > 19:
        return None
    value = int(name[start:end])
    return value if value <= INT64_MAX else None


def _int_id(text: str) -> int | None:
    """A JGF vertex id read as C's ``stoll`` would (an optional sign, decimal digits, no
    more than int64 holds), else None."""
    body = text.strip()
    digits = body[1:] if body[:1] in "+-" else body
    if not digits or len(digits) > 19 or any(c not in "0123456789" for c in digits):
        return None
    value = int(body)
    return value if INT64_MIN <= value <= INT64_MAX else None


def iter_children(g: ResourceGraph, v: int, subsystem: str = CONTAINMENT) -> Iterable[int]:
    return g.children[subsystem][v]

