"""The GRUG reader's output, pinned: a structural fingerprint of every vertex (type, names, ids,
rank, size, unit and, per subsystem, parent, children and path) taken with the reader as it was
before its bulk-expansion rewrite, so any change to vertex order, ids, ranks, names, paths,
subsystems or edges fails here."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from matcher_testlib import TESTDATA

from fluxinfra.matcher import GraphError, ResourceGraph, load_graph

GRUGS = TESTDATA / "data" / "resource" / "grugs"
needs_data = pytest.mark.skipif(not GRUGS.exists(), reason=f"Fluxion test data not at {GRUGS}")

#: sha256 of ``fingerprint`` per Fluxion GRUG file (relative to data/resource/grugs)
PINNED = {
    "advanced_test.graphml": "ba5d8303c77bec19b5cd1e5cd54f85d1af47067d5abedc3bede4adc73bcbb959",
    "coarse_iobw.graphml": "982c3ab310baffea3d3a05d04d71b6a56065507509836ec4b0e1034466c02677",
    "disaggr.graphml": "294b4fb7acb4246ce91d3d9ea7109c18a25a178fa463705b9e540af890695f4b",
    "medium.graphml": "8548bf3473b3ebb7840b2c3ad48643630e263f44b0d0b3b9bc3225709248ba53",
    "mt-storage/mtl0.graphml": "8c3c571fc9f95673f159b31300020b880e636e4962ff41fc9caefc7a5c6c379f",
    "mt-storage/mtl1.graphml": "9916736ffd9254b0ad3e1825fa30dcf2aa1d7d66dcd6bcc295c2a37190d7dc73",
    "mt-storage/mtl2.graphml": "ae4dea6d477ace16fb453986e5f962740ee707d46a4eebe9c5229adf6135c3a6",
    "mt-storage/mtl3.graphml": "7352cdd11c461c54dbf7bac9a98efecfa6648601ad40ddcd69e5640ce61151a7",
    "power.graphml": "b549d4497a0e433585590e80bc3588131dbeeda830e419b6eb0d8094b7e37232",
    "resv_test.graphml": "381018acac99ec56a4d966cfdcee431f8ed37e812d5e8a0f283d04ac64aa5d9a",
    "sierra.graphml": "3db92f0dfc58baf899b400289d98891a589fb6a070ba78f932177b3fbed0adfc",
    "small.graphml": "103c2318c6150035675edc0fb24dac0754205270537bbba5247d5d98e775126f",
    "tiny.graphml": "367b083c7fadd44c31bf2e655808df8658f77f4aab4043d3d7b8ab9051b83313",
}
#: benchmarks/matcher.py's 256-node machine as recipe_to_grug GraphML (20,226 vertices)
PINNED_BENCH_256 = "92221b0df4b97ddabb8d26a91bafa6905c778311e208be47568482c1aa52d5ad"
#: kinds made over an edge of another subsystem (``flex``), id_scope 1 with start/stride, id -1
FLEX = """<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
  <key id="root" for="node" attr.name="root" attr.type="int">
    <default>0</default></key>
  <key id="type" for="node" attr.name="type" attr.type="string"/>
  <key id="basename" for="node" attr.name="basename" attr.type="string"/>
  <key id="subsystem" for="node" attr.name="subsystem" attr.type="string">
    <default>containment</default></key>
  <key id="e_subsystem" for="edge" attr.name="e_subsystem" attr.type="string">
    <default>containment</default></key>
  <key id="id_scope" for="edge" attr.name="id_scope" attr.type="int">
    <default>0</default></key>
  <key id="id_start" for="edge" attr.name="id_start" attr.type="int">
    <default>0</default></key>
  <key id="id_stride" for="edge" attr.name="id_stride" attr.type="int">
    <default>1</default></key>
  <key id="multi_scale" for="edge" attr.name="multi_scale" attr.type="int">
    <default>1</default></key>
  <graph id="flex" edgedefault="directed">
    <node id="cluster">
      <data key="root">1</data>
      <data key="type">cluster</data>
      <data key="basename">flex</data></node>
    <node id="node">
      <data key="type">node</data>
      <data key="basename">node</data></node>
    <node id="socket">
      <data key="type">socket</data>
      <data key="basename">socket</data></node>
    <node id="core">
      <data key="type">core</data>
      <data key="basename">core</data></node>
    <node id="gpu">
      <data key="type">gpu</data>
      <data key="basename">gpu</data></node>
    <edge id="e1" source="cluster" target="node">
      <data key="multi_scale">1</data></edge>
    <edge id="e2" source="node" target="socket">
      <data key="multi_scale">1</data></edge>
    <edge id="e3" source="socket" target="core">
      <data key="multi_scale">4</data>
      <data key="id_scope">1</data>
      <data key="id_stride">2</data>
      <data key="id_start">5</data></edge>
    <edge id="e4" source="socket" target="gpu">
      <data key="multi_scale">2</data>
      <data key="id_scope">-1</data>
      <data key="e_subsystem">flex</data></edge>
  </graph>
</graphml>
"""
PINNED_FLEX = "ffb3913069412d32dbb2fd725cce67ffe7d3d32224a49a2706c8991889f343d6"


def fingerprint(g: ResourceGraph) -> str:
    h = hashlib.sha256()
    subs = sorted(g.children)
    for v in range(len(g)):
        row = [g.type[v], g.basename[v], g.name[v], g.id[v], g.uniq_id[v], g.rank[v], g.size[v],
               g.unit[v]]
        for s in subs:
            row += [s, g.parent[s][v], list(g.children[s][v]), g.path(v, s)]
        h.update(repr(row).encode())
    h.update(repr((subs, sorted(g.roots.items()), g.multi_parent)).encode())
    return h.hexdigest()


@needs_data
@pytest.mark.parametrize("name", sorted(PINNED))
def test_grug_reader_output_is_pinned(name):
    assert fingerprint(load_graph(GRUGS / name, "grug")) == PINNED[name]


def test_grug_reader_output_is_pinned_on_the_benchmark_machine():
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    try:
        from matcher import recipe_for
    finally:
        sys.path.pop(0)
    from fluxinfra.matcher.recipe import recipe_to_grug

    g = load_graph(recipe_to_grug(recipe_for(256)), "grug")
    assert len(g) == 256 * 79 + 2
    assert fingerprint(g) == PINNED_BENCH_256


def test_grug_reader_output_is_pinned_across_subsystems():
    g = load_graph(FLEX, "grug")
    assert [g.name[v] for v in range(len(g))] == [
        "flex0", "node0", "socket0", "core5", "core7", "core9", "core11", "gpu", "gpu"]
    assert g.path(7) == "/flex0/node0/socket0/gpu" and g.path(7, "flex") == "/socket0/gpu"
    assert fingerprint(g) == PINNED_FLEX


def test_add_vertices_is_add_vertex_in_bulk():
    one, bulk = ResourceGraph(), ResourceGraph()
    for g in (one, bulk):
        g.add_vertex(type="cluster", name="c0")
        g.add_edge(0, g.add_vertex(type="node", id=7, rank=3), "power")
    for i, rank in zip((4, 5, -1), (9, 10, 11), strict=True):
        one.add_vertex(type="core", basename="cpu", name=f"cpu{i}", id=i, rank=rank, size=2,
                       unit="x")
    assert bulk.add_vertices("core", "cpu", ["cpu4", "cpu5", "cpu-1"], [4, 5, -1], [9, 10, 11],
                             size=2, unit="x") == range(2, 5)
    fields = ("type", "basename", "name", "id", "uniq_id", "rank", "size", "unit", "exclusive",
              "properties", "status", "removed", "parent", "children")
    assert all(getattr(one, f) == getattr(bulk, f) for f in fields)
    assert [bulk.by_uniq_id(u) for u in (0, 4)] == [0, 4]
    with pytest.raises(GraphError, match="size must be a non-negative integer"):
        bulk.add_vertices("core", "cpu", ["a"], [0], size=-1)
    assert len(bulk) == 5
