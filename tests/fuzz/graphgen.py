"""Strategies for resource graphs (JGF documents and subgraphs) and the checks the graph fuzz
tests share: a graph that loads can be matched and written; a refused change leaves it as it
was."""

from __future__ import annotations

import json
from typing import Any

from fuzzlib import EDGE_INTS, clean, json_values, scalars
from hypothesis import strategies as st

from fluxinfra.matcher import Matcher, ResourceGraph

TYPES = ["cluster", "rack", "node", "socket", "core", "gpu", "memory", "pu", ""]
ONE_CORE = {"version": 1, "resources": [{"type": "core", "count": 1}]}
#: metadata keys a JGF vertex has, and hostile values for each
FIELDS = ["type", "basename", "name", "id", "uniq_id", "rank", "size", "unit", "exclusive",
          "status", "paths", "properties"]


def hostile() -> st.SearchStrategy:
    return st.one_of(scalars(), json_values(6), st.sampled_from(EDGE_INTS),
                     st.sampled_from([{"containment": 5}, {"containment": "/x"}, {"": ""},
                                      {"gpu": 1}, ["a"], {"a": {"b": "c"}}]))


@st.composite
def jgf_docs(draw, base: int = 0, prefix: str = "", size: int = 10) -> dict[str, Any]:
    """A JGF document of a small tree (uniq_ids from ``base``, containment paths under
    ``prefix``), then a few mutations: a field set to anything, a field dropped, an edge
    added (a cycle, a self-loop, a dangling one), a vertex repeated, a part replaced."""
    n = draw(st.integers(1, size))
    parent = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    types = [draw(st.sampled_from(TYPES[:8])) for _ in range(n)]
    names = [f"{t or 'x'}{base + i}" for i, t in enumerate(types)]
    paths = []
    for i in range(n):
        paths.append((paths[parent[i]] if parent[i] >= 0 else prefix) + "/" + names[i])
    nodes = [{"id": str(base + i), "metadata": {
        "type": types[i], "basename": types[i] or "x", "name": names[i], "id": i,
        "uniq_id": base + i, "rank": draw(st.integers(-1, 3)), "size": draw(st.integers(0, 4)),
        "exclusive": draw(st.booleans()), "paths": {"containment": paths[i]}}}
        for i in range(n)]
    edges = [{"source": str(base + parent[i]), "target": str(base + i),
              "metadata": {"subsystem": "containment"}} for i in range(1, n)]
    doc: dict[str, Any] = {"graph": {"nodes": nodes, "edges": edges}}
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["set", "drop", "edge", "repeat", "edge-set"]))
        if kind in ("set", "drop"):
            md = nodes[draw(st.integers(0, n - 1))]["metadata"]
            key = draw(st.sampled_from(FIELDS))
            if kind == "set":
                md[key] = draw(hostile())
            else:
                md.pop(key, None)
        elif kind == "edge":
            src, tgt = draw(st.integers(0, n)), draw(st.integers(0, n))
            edges.append({"source": str(base + src), "target": str(base + tgt),
                          "metadata": draw(st.sampled_from([{"subsystem": "containment"},
                                                            {"subsystem": "power"}, {}]))})
        elif kind == "repeat":
            nodes.append(json.loads(json.dumps(nodes[draw(st.integers(0, n - 1))])))
        elif kind == "edge-set" and edges:
            e = edges[draw(st.integers(0, len(edges) - 1))]
            e[draw(st.sampled_from(["source", "target", "metadata"]))] = draw(hostile())
    if draw(st.integers(0, 9)) == 5:  # a whole part of the document replaced
        where = draw(st.sampled_from(["graph", "nodes", "edges", "node", "metadata"]))
        value = draw(hostile())
        if where == "graph":
            doc["graph"] = value
        elif where in ("nodes", "edges"):
            doc["graph"][where] = value
        elif where == "node":
            nodes[draw(st.integers(0, n - 1))] = value
        else:
            nodes[draw(st.integers(0, n - 1))]["metadata"] = value
    return doc


def usable(g: ResourceGraph) -> None:
    """A graph that loaded answers a match, a find and its writers without another error."""
    m = clean(Matcher, g)
    if not isinstance(m, Matcher):
        return
    r = clean(m.match, ONE_CORE)
    if not isinstance(r, Exception):
        json.dumps(r.R)
        json.dumps(r.jgf)
    clean(m.find, "status=up")
    clean(m.find_text, "sched-now=free or status=down")


def snapshot(g: ResourceGraph) -> tuple:
    """Everything a graph holds (not its caches), to compare before and after a change."""
    return (list(g.type), list(g.basename), list(g.name), list(g.id), list(g.uniq_id),
            list(g.rank), list(g.size), list(g.unit), list(g.exclusive),
            [dict(p) if p else p for p in g.properties], list(g.status), list(g.removed),
            {s: [list(k) for k in kids] for s, kids in g.children.items()},
            {s: list(p) for s, p in g.parent.items()}, dict(g.roots), dict(g._by_uniq),
            {v: dict(p) for v, p in g.given_paths.items()}, g.multi_parent, dict(g.layouts),
            g.finalized, {v: dict(t) for v, t in g._totals.items()})
