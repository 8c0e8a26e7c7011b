"""Subgraphs through ``Matcher.add_subgraph`` (resource-query's ``attach``, the service's
``UpdateGraph``): either the graph takes the subgraph whole and stays a tree or DAG the
matcher can walk, or it refuses with a GraphError and is exactly as it was."""

from __future__ import annotations

import json
from pathlib import Path

from fuzzlib import clean, fuzz
from graphgen import jgf_docs, snapshot, usable
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.matcher import Matcher, load_graph
from fluxinfra.matcher.errors import GraphError

GRAPH_FILE = Path(__file__).resolve().parents[2] / "examples" / "graph.json"
#: vertices of examples/graph.json a subgraph may hang under or point at
EXISTING = ["/demo0", "/demo0/rack0", "/demo0/rack0/node1", "/demo0/rack0/node1/socket0"]


def existing(path: str) -> dict:
    """A JGF vertex naming an existing one by its path (its id is read as its uniq_id)."""
    return {"id": str(9000 + EXISTING.index(path)), "metadata": {
        "type": "x", "paths": {"containment": path}}}


@st.composite
def subgraphs(draw) -> dict:
    """A subgraph hung under an existing vertex (named by its path), sometimes with edges
    back up into the graph (a cycle), a second top, or no top at all."""
    top = draw(st.sampled_from(EXISTING))
    doc = draw(jgf_docs(base=1000, prefix=top, size=6))
    graph = doc.get("graph")
    if not isinstance(graph, dict) or not isinstance(graph.get("nodes"), list) \
            or not isinstance(graph.get("edges"), list):
        return doc
    graph["nodes"].append(existing(top))
    if draw(st.integers(0, 9)) != 5:  # (usually: the subgraph hangs under its top)
        graph["edges"].append({"source": str(9000 + EXISTING.index(top)), "target": "1000"})
    for _ in range(draw(st.integers(0, 2))):
        other = draw(st.sampled_from(EXISTING))
        node = existing(other)
        if node not in graph["nodes"]:
            graph["nodes"].append(node)
        src, tgt = str(1000 + draw(st.integers(0, 5))), node["id"]
        graph["edges"].append({"source": src, "target": tgt} if draw(st.booleans())
                              else {"source": tgt, "target": src})
    return doc


def attach(doc, as_text: bool) -> None:
    m = Matcher(load_graph(str(GRAPH_FILE)))
    clean(m.match, {"version": 1, "resources": [{"type": "core", "count": 2}]})
    before = snapshot(m.graph)
    try:
        m.add_subgraph(json.dumps(doc) if as_text else doc)
    except GraphError as exc:
        assert str(exc)
        assert snapshot(m.graph) == before, "a refused subgraph changed the graph"
        usable(m.graph)
        return
    for sub in m.graph.children:
        m.graph._check_acyclic(sub)
    usable(m.graph)
    clean(m.match, {"version": 1, "resources": [{"type": "core", "count": 1}]})


SECOND_ROOT = {"graph": {"nodes": [{"id": "a", "metadata": {"type": "node", "uniq_id": 1000}}],
                         "edges": []}}
#: an edge from a new vertex back up to an existing one: a containment cycle
CYCLE = {"graph": {"nodes": [
    {"id": "r", "metadata": {"type": "rack", "uniq_id": 1,
                             "paths": {"containment": "/demo0/rack0"}}},
    {"id": "x", "metadata": {"type": "node", "uniq_id": 1000,
                             "paths": {"containment": "/demo0/rack0/x"}}}],
    "edges": [{"source": "r", "target": "x"}, {"source": "x", "target": "r"}]}}
UNREACHABLE = {"graph": {"nodes": [
    {"id": "a", "metadata": {"type": "node", "uniq_id": 1000, "paths": {"containment": "/x/a"}}},
    {"id": "b", "metadata": {"type": "core", "uniq_id": 1001}}],
    "edges": [{"source": "a", "target": "b"}, {"source": "b", "target": "a"}]}}


@fuzz(subgraphs(), st.booleans())
@example(SECOND_ROOT, False)
@example(CYCLE, False)
@example(UNREACHABLE, True)
def test_attach(doc, as_text):
    attach(doc, as_text)
