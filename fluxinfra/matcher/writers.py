"""Match writers: RFC 20 R (Rv1), JGF, and resource-query's ``simple`` / ``pretty_simple`` text.

Every writer takes the emitted vertex list of a job, ``(level, vertex, amount, exclusive,
exclusive_parent)`` in Fluxion's post-order, so the text writers reproduce resource-query byte
for byte.
"""

from __future__ import annotations

import json

from fluxinfra.hostlist import HostlistError
from fluxinfra.hostlist import encode as encode_hostlist
from fluxinfra.idset import encode as idset
from fluxinfra.matcher.errors import MatcherError
from fluxinfra.matcher.graph import CONTAINMENT, ResourceGraph

__all__ = ["write_simple", "write_pretty_simple", "write_jgf", "write_rv1", "idset", "QueryWriter",
           "WriterError", "QUERY_FORMATS", "rlite_of", "encode_hostlist",
           "MATCH_FORMATS"]

MATCH_FORMATS = ("simple", "pretty_simple", "jgf", "rlite", "rv1", "rv1_nosched", "rv1_sched")
Emitted = list[tuple[int, int, int, bool, bool]]


def write_simple(g: ResourceGraph, emitted: Emitted) -> str:
    """resource-query's ``simple`` lines. ``emitted`` may also hold the matcher's lazy
    entries for subtrees held whole (anything with ``simple_text(names)``, see
    ``MatchResult.raw_emitted``): they write their lines without a tuple per vertex. The
    lines of the vertices above a match (the same racks and nodes, match after match) are
    kept, per graph, and written again rather than formatted again; a vertex held
    exclusively (a core of this job, rarely the next job's too) is formatted each time."""
    out = []
    names = g.name
    lines = _SIMPLE_LINES.get(id(names))
    if lines is None or lines[0] is not names or lines[1] != len(names):
        if len(_SIMPLE_LINES) >= 4:
            _SIMPLE_LINES.clear()
        lines = _SIMPLE_LINES[id(names)] = (names, len(names), {})
    lines = lines[2]
    for entry in emitted:
        if len(entry) != 5:
            out.append(entry.simple_text(names))
            continue
        if entry[3]:  # held exclusively: formatted, not kept
            out.append(f"      {'---' * entry[0]}{names[entry[1]]}[{entry[2]}:x]\n")
            continue
        text = lines.get(entry)
        if text is None:
            level, v, amount, _, _ = entry
            text = f"      {'---' * level}{names[v]}[{amount}:s]\n"
            if len(lines) >= _MAX_SIMPLE_LINES:
                lines.clear()
            lines[entry] = text
        out.append(text)
    return "".join(out)


#: id(graph's names) -> (the names, how many, {simple entry: its line}); names only grow
_SIMPLE_LINES: dict[int, tuple[list[str], int, dict[tuple, str]]] = {}
_MAX_SIMPLE_LINES = 1 << 16


def write_pretty_simple(g: ResourceGraph, emitted: Emitted) -> str:
    """resource-query's pretty_simple: the simple lines reversed, modes spelled out."""
    out = []
    for level, v, amount, excl, _ in reversed(emitted):
        mode = "exclusive" if excl else "shared"
        out.append(f"      {'---' * level}{g.name[v]}[{amount}:{mode}]\n")
    return "".join(out)


def _vertex_json(g: ResourceGraph, v: int, amount: int, excl: bool, compact: bool) -> dict:
    """One JGF vertex. ``compact`` is Fluxion's match writer: fields equal to the reader's
    defaults (basename = type, name = basename + id, size 1, not exclusive, no unit) omitted.
    Otherwise every field is written (what R's ``scheduling`` key carries here)."""
    if not compact:
        md = {"type": g.type[v], "basename": g.basename[v], "name": g.name[v], "id": g.id[v],
              "uniq_id": g.uniq_id[v], "rank": g.rank[v], "exclusive": bool(excl),
              "unit": g.unit[v], "size": amount}
        if g.properties[v]:
            md["properties"] = dict(g.properties[v])
        md["paths"] = _paths(g, v) if len(g.parent) > 1 else {CONTAINMENT: g.path(v)}
        return {"id": str(g.uniq_id[v]), "metadata": md}
    return _query_vertex(g, v, amount, excl)


def _paths(g: ResourceGraph, v: int) -> dict[str, str]:
    return {sub: g.path(v, sub) for sub in g.children
            if sub == CONTAINMENT or g.parent[sub][v] != -1 or g.roots.get(sub) == v}


def write_jgf(g: ResourceGraph, emitted: Emitted, compact: bool = True) -> dict:
    """JGF of a match: the emitted vertices (children first) and the edges among them."""
    for entry in reversed(emitted):  # parents first: each path is its parent's plus a name
        g.path(entry[1])
    nodes = [_vertex_json(g, v, amount, excl, compact) for _, v, amount, excl, _ in emitted]
    present = {v for _, v, _, _, _ in emitted}
    edges = []
    uid = g.uniq_id
    subsystems = list(g.parent.items())
    for _, v, _, _, _ in emitted:
        for sub, parents in subsystems:
            p = parents[v]
            if p != -1 and p in present:
                edges.append({"source": str(uid[p]), "target": str(uid[v]),
                              "metadata": {"subsystem": sub}})
    return {"graph": {"nodes": nodes, "edges": edges}}


def _rlite(g: ResourceGraph, emitted: Emitted) -> tuple[list[dict], list[str]]:
    parent = g.parent[CONTAINMENT]
    by_rank: dict[int, dict[str, list[int]]] = {}
    hosts: dict[int, str] = {}
    for _, v, _, _, _ in emitted:
        t = g.type[v]
        if t == "node":
            hosts.setdefault(g.rank[v], g.name[v])
            by_rank.setdefault(g.rank[v], {})
            continue
        if g.children[CONTAINMENT][v]:
            continue
        # leaf: count it under the rank of its node
        a = parent[v]
        while a != -1 and g.type[a] != "node":
            a = parent[a]
        if a == -1:
            continue
        hosts.setdefault(g.rank[a], g.name[a])
        by_rank.setdefault(g.rank[a], {}).setdefault(t, []).append(g.id[v])
    # group ranks with identical children
    groups: list[tuple[list[int], dict[str, str]]] = []
    for rank in sorted(by_rank):
        children = {t: _ids(ids) for t, ids in sorted(by_rank[rank].items())}
        if groups and groups[-1][1] == children:
            groups[-1][0].append(rank)
        else:
            groups.append(([rank], children))
    rlite = [{"rank": _ids(ranks), "children": children} for ranks, children in groups]
    return rlite, [hosts[r] for r in sorted(hosts)]


def _nodelist(names: list[str]) -> str:
    """``names`` as one RFC 29 hostlist; names no hostlist can hold (an empty one, one with a
    comma or bracket, as a graph's readers may give) are joined by commas, as this writer
    always has."""
    try:
        return encode_hostlist(names)
    except HostlistError:
        return ",".join(names)


def _ids(ids: list[int]) -> str:
    """The ids of an R_lite entry (its ranks, or a child type's ids); a graph may hold a node
    added without a rank or a vertex without an id (-1), and this writer has always written
    them as ``-1`` (an idset holds none: resource-query's own writer refuses them, which
    :class:`QueryWriter` mirrors)."""
    ordered = sorted(set(ids))
    if not ordered or ordered[0] >= 0:
        return idset(ordered)
    negative = [i for i in ordered if i < 0]
    rest = idset([i for i in ordered if i >= 0])
    return ",".join([str(i) for i in negative] + ([rest] if rest else []))


def write_rv1(g: ResourceGraph, emitted: Emitted, starttime: int, expiration: int,
              scheduling: bool = True) -> dict:
    """RFC 20 R version 1 with the ``scheduling`` JGF key (Fluxion's rv1 writer)."""
    rlite, nodes = _rlite(g, emitted)
    r: dict = {"version": 1, "execution": {"R_lite": rlite,
                                            "nodelist": [_nodelist(nodes)] if nodes
                                            else [], "starttime": starttime,
                                            "expiration": expiration}}
    if scheduling:
        r["scheduling"] = write_jgf(g, emitted, compact=False)
    return r


# -- resource-query's match formats, as text ----------------------------------------------

#: ``-F`` formats of resource-query (``fluxinfra query``)
QUERY_FORMATS = ("simple", "pretty_simple", "jgf", "jgf_shorthand", "rlite", "rv1",
                 "rv1_nosched", "rv1_shorthand")
#: the ``writer`` URI of a JGF that leaves out what lies below exclusive vertices (RFC 40)
SHORTHAND_URI = "fluxion:jgf_shorthand"
#: the node-level types whose held cores and GPUs R_lite gathers (Fluxion's rlite writer)
_RLITE_HOSTS = ("node", "storage_node")
_RLITE_LEAVES = ("core", "gpu")


def _dumps(doc) -> str:
    """JSON as jansson's ``json_dumps(JSON_INDENT(0))`` writes it (one line, ``", "``)."""
    return json.dumps(doc, ensure_ascii=False)


class WriterError(MatcherError):
    """resource-query's writer refused to emit (``errno`` name and its strerror text)."""

    def __init__(self, errno_name: str, text: str) -> None:
        super().__init__(text)
        self.errno_name = errno_name


class QueryWriter:
    """resource-query's match writer for one session and one ``-F`` format.

    ``write(...)`` feeds one emission (a match, an update or a find) and renders it byte for
    byte as resource-query does: "" where it prints nothing, :class:`WriterError` where its
    writer fails (``rlite`` with no node holding cores or GPUs: EINVAL; a JGF with vertices
    but no edges: ENOENT). Like resource-query's writer object, what a failed or skipped
    emission gathered stays and comes out with the next one, and the ``jgf_shorthand`` /
    ``rv1_shorthand`` writers keep saying ``"writer": "fluxion:jgf_shorthand"`` once one
    emission has left vertices out.
    """

    def __init__(self, fmt: str = "simple") -> None:
        if fmt not in QUERY_FORMATS:
            raise ValueError(f"match format {fmt!r}; use one of {', '.join(QUERY_FORMATS)}")
        self.fmt = fmt
        self.shorthand = fmt in ("jgf_shorthand", "rv1_shorthand")
        self.incomplete = False
        self._nodes: list[dict] = []
        self._edges: list[dict] = []
        self._rlite = _Rlite()

    def write(self, g: ResourceGraph, emitted: Emitted, subsystem: str = CONTAINMENT,
              starttime: int = 0, expiration: int = 0) -> str:
        fmt = self.fmt
        if fmt == "simple":
            return write_simple(g, emitted)
        if fmt == "pretty_simple":
            return write_pretty_simple(g, emitted)
        if fmt != "rlite" and fmt != "rv1_nosched":
            self._feed_jgf(g, emitted, subsystem)
        if fmt in ("jgf", "jgf_shorthand"):
            doc = self._emit_jgf()
            return _dumps(doc) + "\n" if doc else ""
        self._rlite.feed(g, emitted)
        if fmt == "rlite":
            if not self._rlite.groups:
                raise WriterError("EINVAL", "Invalid argument")
            return _dumps(self._rlite.emit(g)[0]) + "\n"
        if not self._rlite.groups or (fmt != "rv1_nosched"
                                      and not self._nodes and not self._edges):
            return ""
        rlite, nodelist, props = self._rlite.emit(g)
        execution: dict = {"R_lite": rlite, "nodelist": nodelist}
        if props:
            execution["properties"] = props
        execution["starttime"] = starttime
        execution["expiration"] = expiration
        doc = {"version": 1, "execution": execution}
        if fmt != "rv1_nosched":
            doc["scheduling"] = self._emit_jgf()
        return _dumps(doc) + "\n"

    def _feed_jgf(self, g: ResourceGraph, emitted: Emitted, subsystem: str) -> None:
        """Fluxion's JGF match writer: vertices in post-order with the fields that differ
        from the reader's defaults, the dominant subsystem's edges into them (metadata
        only off ``containment``)."""
        # the parent of an entry is the first one after it a level up (post-order): the
        # edge the traversal took, also where a vertex has several parents
        parents = [-1] * len(emitted)
        last: dict[int, int] = {}
        for i in range(len(emitted) - 1, -1, -1):
            level, v = emitted[i][0], emitted[i][1]
            parents[i] = last.get(level - 1, -1)
            last[level] = v
            g.path(v)  # parents first: each path is its parent's plus a name
        uid = g.uniq_id
        nodes, edges = self._nodes, self._edges
        for i, (_, v, amount, excl, excl_parent) in enumerate(emitted):
            if self.shorthand and excl_parent:
                self.incomplete = True
                continue
            nodes.append(_query_vertex(g, v, amount, excl))
            p = parents[i]
            if p != -1:
                edge: dict = {"source": str(uid[p]), "target": str(uid[v])}
                if subsystem != CONTAINMENT:
                    edge["metadata"] = {"subsystem": subsystem}
                edges.append(edge)

    def _emit_jgf(self) -> dict | None:
        """The JGF gathered so far (then forgotten); None if empty; vertices without edges
        (or edges without vertices) stay and are :class:`WriterError` ENOENT."""
        if not self._nodes and not self._edges:
            return None
        if not self._nodes or not self._edges:
            raise WriterError("ENOENT", "No such file or directory")
        doc: dict = {"graph": {"nodes": self._nodes, "edges": self._edges}}
        if self.shorthand and self.incomplete:
            doc["writer"] = SHORTHAND_URI
        self._nodes, self._edges = [], []
        return doc


def _query_vertex(g: ResourceGraph, v: int, amount: int, excl: bool) -> dict:
    """Fluxion's JGF match-writer vertex: only the fields that differ from the reader's
    defaults, paths in the subsystems the vertex belongs to."""
    md: dict = {"type": g.type[v]}
    if g.basename[v] != g.type[v]:
        md["basename"] = g.basename[v]
    if g.name[v] != f"{g.basename[v]}{g.id[v]}":
        md["name"] = g.name[v]
    md["id"] = g.id[v]
    md["rank"] = g.rank[v]
    if g.properties[v]:
        md["properties"] = {k: str(g.properties[v][k]) for k in sorted(g.properties[v])}
    if g.unit[v]:
        md["unit"] = g.unit[v]
    if excl:
        md["exclusive"] = True
    if amount != 1:
        md["size"] = amount
    md["paths"] = {sub: g.path(v, sub) for sub in g.children
                   if g.parent[sub][v] != -1 or g.roots.get(sub) == v}
    return {"id": str(g.uniq_id[v]), "metadata": md}


def rlite_of(g: ResourceGraph, emitted: Emitted) -> tuple[list[dict], list[str], dict]:
    """Fluxion's R_lite writer over a post-order emission: the cores and GPUs seen since
    the last node are that node's children; nodes with the same children (as JSON text,
    in text order) share an entry. Returns (R_lite, nodelist, properties)."""
    state = _Rlite()
    state.feed(g, emitted)
    return state.emit(g)


class _Rlite:
    """The R_lite writer's state: ids waiting for their node, and rank groups."""

    def __init__(self) -> None:
        self.pending: dict[str, list[int]] = {t: [] for t in _RLITE_LEAVES}
        self.groups: dict[str, list[tuple[int, str]]] = {}
        self.props: dict[str, list[int]] = {}
        self.negative = False  # a core or GPU without an id (-1) was fed

    def feed(self, g: ResourceGraph, emitted: Emitted) -> None:
        pending, groups, props = self.pending, self.groups, self.props
        for _, v, _, _, _ in emitted:
            t = g.type[v]
            if t in pending:
                pending[t].append(g.id[v])
            elif t in _RLITE_HOSTS and any(pending.values()):
                if any(i < 0 for ids in pending.values() for i in ids):
                    self.negative = True
                children = _dumps({k: _ids(ids) for k, ids in pending.items() if ids})
                for ids in pending.values():
                    ids.clear()
                groups.setdefault(children, []).append((g.rank[v], g.name[v]))
                for key, value in sorted((g.properties[v] or {}).items()):
                    props.setdefault(f"{key}={value}" if value != "" else key,
                                     []).append(g.rank[v])

    def emit(self, g: ResourceGraph) -> tuple[list[dict], list[str], dict]:
        if self.negative or any(r < 0 for members in self.groups.values() for r, _ in members):
            # an idset holds no negative id or rank: resource-query's writer fails (and keeps
            # all)
            raise WriterError("EINVAL", "Invalid argument")
        rlite = []
        hosts: list[tuple[int, str]] = []
        for children in sorted(self.groups):
            members = sorted(self.groups[children], key=lambda m: m[0])
            rlite.append({"rank": idset([r for r, _ in members]),
                          "children": json.loads(children)})
            hosts.extend(members)
        hosts.sort(key=lambda m: m[0])
        nodelist = [_nodelist([h for _, h in hosts])] if hosts else []
        props = {k: idset(self.props[k]) for k in sorted(self.props)}
        self.groups, self.props = {}, {}
        return rlite, nodelist, props
