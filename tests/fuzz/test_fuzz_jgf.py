"""JSON Graph Format through ``load_graph(..., "jgf")``: a graph that can be matched and
written, or a GraphError with a message."""

from __future__ import annotations

import json
from pathlib import Path

from fuzzlib import clean, fuzz, mutated, nested
from graphgen import jgf_docs, usable
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.matcher import ResourceGraph, load_graph

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [(ROOT / "examples" / "graph.json").read_text(),
         json.dumps({"graph": {"nodes": [{"id": "0", "metadata": {"type": "cluster"}},
                                         {"id": "1", "metadata": {"type": "core"}}],
                               "edges": [{"source": "0", "target": "1"}]}})]
SNIPPETS = ['"', "{", "}", "[", "]", ",", ":", "null", "NaN", "Infinity", "-1", "1e999",
            "99999999999999999999999", '"uniq_id": [1], ', '"rank": "x", ', '"size": 1.5, ',
            '"id": 5, ', '"properties": {"a": 1}, ', '"paths": [], ', "\\ud800", "\x00"]


def _load(source):
    g = load_graph(source, "jgf")
    assert isinstance(g, ResourceGraph) and g.finalized
    usable(g)
    return g


@fuzz(jgf_docs(), st.booleans())
@example({"graph": {"nodes": [{"id": "0", "metadata": {"type": "cluster", "basename": [1]}}],
                    "edges": []}}, True)
@example({"graph": {"nodes": [{"id": "0", "metadata": {"type": "cluster", "uniq_id": [1]}}],
                    "edges": []}}, False)
@example({"graph": {"nodes": [{"id": "0", "metadata": {"type": "cluster"}}],
                    "edges": [{"source": [1], "target": "0"}]}}, True)
@example({"graph": {"nodes": [{"id": "0", "metadata": {"type": "node", "name": "n" + "9" * 30}}],
                    "edges": []}}, True)
@example({"graph": {"nodes": [{"id": "0", "metadata": {"type": "cluster"}},
                              {"id": "1", "metadata": {"type": "node", "rank": None}},
                              {"id": "2", "metadata": {"type": "node", "rank": 0}},
                              {"id": "3", "metadata": {"type": "core"}},
                              {"id": "4", "metadata": {"type": "core"}}],
                    "edges": [{"source": "0", "target": "1"}, {"source": "0", "target": "2"},
                              {"source": "1", "target": "3"}, {"source": "2", "target": "4"}]}},
          False)
def test_jgf_documents(doc, as_text):
    clean(_load, json.dumps(doc) if as_text else doc)


@fuzz(mutated(SEEDS, SNIPPETS) | st.binary(max_size=300).map(
    lambda b: b.decode("latin-1")))
@example("[" * 100000 + "]" * 100000)
def test_jgf_text(text):
    clean(_load, text)
    clean(_load, text.encode("utf-8", "surrogatepass"))


def test_a_graph_nested_past_the_recursion_limit_is_refused():
    """(Kept out of @example: hypothesis' printer recurses into what it is given.)"""
    doc = {"graph": {"nodes": [{"id": "0", "metadata": {"type": "cluster",
                                                        "properties": nested(5000)}}],
                     "edges": []}}
    assert "must be an object of strings" in str(clean(_load, doc))
    chain = {"graph": {"nodes": [{"id": str(i), "metadata": {"type": "node"}}
                                 for i in range(3000)],
                       "edges": [{"source": str(i), "target": str(i + 1)} for i in range(2999)]}}
    assert "nests more than 100 levels" in str(clean(_load, chain))
