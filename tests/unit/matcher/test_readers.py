"""Graph readers: Fluxion's defaults, GRUG expansion order, and one-line errors for bad input."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from matcher_testlib import TESTDATA

from fluxinfra.matcher import GraphError, ResourceGraph, load_graph

DATA = TESTDATA / "data" / "resource"
needs_data = pytest.mark.skipif(not DATA.exists(), reason=f"Fluxion test data not at {DATA}")


@pytest.fixture(scope="module")
def tiny():
    return load_graph(DATA / "grugs" / "tiny.graphml", "grug")


@needs_data
def test_grug_expands_level_by_level_like_fluxion(tiny):
    assert len(tiny) == 100
    assert [tiny.name[v] for v in range(8)] == [
        "tiny0", "rack0", "node0", "node1", "socket0", "socket1", "socket0", "socket1"]
    # id_scope=1 below the socket numbers cores, gpus and memory per node
    assert tiny.path(tiny.by_uniq_id(99)) == "/tiny0/rack0/node1/socket1/memory7"
    assert tiny.rank[tiny.resolve("/tiny0/rack0/node1")] == 1
    assert tiny.size[tiny.by_uniq_id(99)] == 2 and tiny.unit[tiny.by_uniq_id(99)] == "GB"


@needs_data
def test_grug_and_jgf_of_the_same_machine_agree(tiny):
    jgf = load_graph(DATA / "jgfs" / "tiny.json", "jgf")
    assert Counter(jgf.type) == Counter(tiny.type)
    assert sorted(map(jgf.path, range(len(jgf)))) == sorted(map(tiny.path, range(len(tiny))))


@needs_data
def test_grug_associate_in_makes_a_second_subsystem():
    g = load_graph(DATA / "grugs" / "power.graphml", "grug")
    assert set(g.children) == {"containment", "power"}
    assert g.type[g.roots["power"]] == "powerpanel"


def test_jgf_defaults_match_fluxion():
    doc = {"graph": {"nodes": [
        {"id": "0", "metadata": {"type": "cluster"}},
        {"id": "7", "metadata": {"type": "node", "name": "host12"}},
        {"id": "8", "metadata": {"type": "memory", "size": 64, "unit": "GB"}}],
        "edges": [{"source": "0", "target": "7"},
                  {"source": "7", "target": "0", "metadata": {"name": {"containment": "in"}}},
                  {"source": "7", "target": "8",
                   "metadata": {"name": {"containment": "contains"}}}]}}
    g = load_graph(doc, "jgf")
    assert (g.basename[0], g.name[0], g.uniq_id[1], g.id[1]) == ("cluster", "cluster0", 7, 12)
    assert g.name[2] == "memory8" and g.size[2] == 64 and g.rank[2] == -1
    assert g.children["containment"][1] == [2]


@pytest.mark.parametrize("doc, message", [
    ("{nope", "malformed JSON"),
    ({"graph": {"nodes": [{"id": "0", "metadata": {"type": "a"}},
                          {"id": "0", "metadata": {"type": "b"}}], "edges": []}},
     "duplicate vertex id '0'"),
    ({"graph": {"nodes": [{"id": "0", "metadata": {"type": "a"}},
                          {"id": "1", "metadata": {"type": "b"}}], "edges": []}},
     "exactly one root"),
    ({"graph": {"nodes": [{"id": "0", "metadata": {"type": "a"}}],
                "edges": [{"source": "0", "target": "9"}]}},
     "vertex '9' does not exist"),
])
def test_bad_jgf_is_one_clear_graph_error(doc, message):
    text = doc if isinstance(doc, str) else json.dumps(doc)
    with pytest.raises(GraphError, match=message) as err:
        load_graph(text, "jgf")
    assert "\n" not in str(err.value)


def test_builder_rejects_duplicate_uniq_ids_and_dangling_edges():
    g = ResourceGraph()
    g.add_vertex(type="cluster", uniq_id=5)
    with pytest.raises(GraphError, match="duplicate vertex uniq_id 5"):
        g.add_vertex(type="node", uniq_id=5)
    with pytest.raises(GraphError, match="does not exist"):
        g.add_edge(0, 3)


def test_rv1exec_builds_cluster_node_children():
    r = {"version": 1, "execution": {"R_lite": [{"rank": "0-1", "children": {
        "core": "0-3", "gpu": "0"}}], "nodelist": ["fluke[7-8]"],
        "properties": {"amd": "1"}}}
    g = load_graph(json.dumps(r), "rv1exec")
    assert [g.name[v] for v in g.children["containment"][g.root]] == ["fluke7", "fluke8"]
    assert Counter(g.type) == {"cluster": 1, "node": 2, "core": 8, "gpu": 2}
    assert g.properties[g.resolve("fluke8")] == {"amd": ""}


@needs_data
def test_hwloc_allowlist_keeps_listed_types():
    xml = TESTDATA / "data" / "hwloc-data" / "001N" / "amd_gpu" / "corona11.xml"
    g = load_graph(xml, "hwloc", allowlist="node,socket,core,gpu")
    assert Counter(g.type) == {"core": 48, "gpu": 4, "socket": 2, "node": 1, "cluster": 1}
    assert g.path(g.resolve("corona11")) == "/cluster0/corona11"


def test_the_collector_is_paused_while_a_graph_loads_and_restored_after(monkeypatch):
    """Loading pauses the cyclic collector (a graph's millions of objects make almost no
    cycles) and leaves it as it found it: on after a load, on after a load that failed, off
    if the caller had turned it off, and a pause inside a pause does not end the outer one."""
    import gc

    from fluxinfra.matcher import readers

    seen = []

    def spy(source, fmt, **options):
        seen.append(gc.isenabled())
        if source == "bad":
            raise GraphError("bad graph")
        return ResourceGraph()

    monkeypatch.setattr(readers, "_load", spy)
    was = gc.isenabled()
    try:
        gc.enable()
        load_graph("{}", "jgf")
        assert seen == [False] and gc.isenabled()
        with pytest.raises(GraphError, match="bad graph"):
            load_graph("bad", "jgf")
        assert seen == [False, False] and gc.isenabled()
        with readers.collector_paused():
            load_graph("{}", "jgf")
            assert not gc.isenabled()  # the outer pause still holds
        assert gc.isenabled()
        gc.disable()
        load_graph("{}", "jgf")
        assert not gc.isenabled()  # the caller's choice stands
    finally:
        (gc.enable if was else gc.disable)()


#: a GRUG whose edge has id_scope -1: the child vertex (``cluster``) is made without an id (-1)
NO_ID = """<?xml version="1.0" encoding="UTF-8"?>
<graphml xmlns="http://graphml.graphdrawing.org/xmlns">
<key id="root" for="node" attr.name="root" attr.type="int"><default>0</default></key>
<key id="type" for="node" attr.name="type" attr.type="string"/>
<key id="basename" for="node" attr.name="basename" attr.type="string"/>
<key id="id_scope" for="edge" attr.name="id_scope" attr.type="string"/>
<graph id="g" edgedefault="directed">
<node id="k0"><data key="type">node</data><data key="basename">node</data>
<data key="root">1</data></node>
<node id="k1"><data key="type">cluster</data><data key="basename">cluster</data></node>
<edge id="e0" source="k0" target="k1"><data key="id_scope">-1</data></edge>
</graph>
</graphml>
"""


def test_a_vertex_without_an_id_is_written_in_r_lite_as_minus_one():
    """R's writer keeps a leaf without an id (and a node without a rank) as ``-1``, as it always
    has, rather than failing the match: an RFC 22 idset holds no negative id."""
    from fluxinfra.matcher import Matcher
    g = load_graph(NO_ID, "grug")
    assert g.id[g.children["containment"][g.roots["containment"]][0]] == -1
    r = Matcher(g).find("status=up")
    assert r["execution"]["R_lite"] == [{"rank": "0", "children": {"cluster": "-1"}}]
    assert r["execution"]["nodelist"] == ["node0"]
