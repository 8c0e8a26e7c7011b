"""Kubernetes node lists (``kubectl get nodes -o json``, ``fluxinfra query -f k8s``) through
``graph_from_node_list``: a graph that can be matched and written, or a FluxinfraError with a
message (never a quantity that builds billions of vertices)."""

from __future__ import annotations

import json
from pathlib import Path

from fuzzlib import clean, fuzz, json_values, mutations
from graphgen import usable
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.cli.graphs import graph_from_node_list

NODES = json.loads((Path(__file__).resolve().parents[2] / "examples" / "nodes.json").read_text())
QUANTITIES = st.sampled_from(["16Gi", "1e18", "99999999999999999999", "-1", "1.5", "500m",
                              "1" * 5000, "0x10", "", "1E+64", "8Ei"])


def _load(doc):
    g = graph_from_node_list(doc, "nodes")
    usable(g)
    return g


def node(cpu, memory="8Gi", gpu=None) -> dict:
    allocatable = {"cpu": cpu, "memory": memory}
    if gpu is not None:
        allocatable["nvidia.com/gpu"] = gpu
    return {"items": [{"kind": "Node", "metadata": {"name": "n1"},
                       "status": {"allocatable": allocatable}}]}


@fuzz(mutations(NODES, json_values(6) | QUANTITIES) | json_values(8))
@example(node("16Gi"))
@example(node("2", memory="8Ei"))
@example(node("2", gpu="1e9"))
@example(node("1" * 5000))
@example({"items": [{"kind": "Node", "metadata": {"name": "1" * 5000},
                     "status": {"allocatable": {"cpu": "2", "memory": "1Gi"}}}]})
@example({"items": [{"kind": "Node", "metadata": {"name": "n\u00b2"},
                     "status": {"allocatable": {"cpu": "2", "memory": "1Gi"}}}]})
def test_node_lists(doc):
    clean(_load, doc)
