"""Compact recipes -> resource graphs named, numbered and ordered like Fluxion's GRUG graphs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fluxinfra.errors import FluxinfraError
from fluxinfra.matcher.recipe import (
    RecipeError,
    graph_from_recipe,
    load_recipe,
    parse_recipe,
    recipe_to_grug,
    recipe_vertex_count,
)

TESTDATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "fluxion-testdata"
TINY = {
    "cluster": "tiny",
    "racks": 1,
    "nodes_per_rack": 2,
    "sockets": 2,
    "cores_per_socket": 18,
    "gpus_per_socket": 1,
    "memory_per_socket": [4, 2],
}


def vertex_rows(g):
    return [
        (
            g.type[v],
            g.basename[v],
            g.name[v],
            g.id[v],
            g.uniq_id[v],
            g.rank[v],
            g.size[v],
            g.unit[v],
            g.path(v),
        )
        for v in range(len(g))
    ]


@pytest.fixture(scope="module")
def tiny_jgf():
    path = TESTDATA / "data" / "resource" / "jgfs" / "tiny.json"
    if not path.exists():
        pytest.skip(f"Fluxion test data not found at {path} (needs ../shared beside the repo)")
    return json.loads(path.read_text())


def test_tiny_recipe_reproduces_fluxions_tiny_graph_vertex_for_vertex(tiny_jgf):
    """tiny.json is what Fluxion's GRUG reader made from tiny.graphml: same order, names, ids."""
    expected = []
    for node in sorted(tiny_jgf["graph"]["nodes"], key=lambda n: n["metadata"]["uniq_id"]):
        md = node["metadata"]
        expected.append(
            (
                md["type"],
                md["basename"],
                md["name"],
                md["id"],
                md["uniq_id"],
                md["rank"],
                md["size"],
                md["unit"],
                md["paths"]["containment"],
            )
        )
    assert vertex_rows(graph_from_recipe(TINY)) == expected


def test_tiny_recipe_has_fluxions_edges(tiny_jgf):
    g = graph_from_recipe(TINY)
    expected = sorted(
        (int(e["source"]), int(e["target"]))
        for e in tiny_jgf["graph"]["edges"]
        if e["metadata"].get("subsystem", "containment") == "containment"
    )
    parents = g.parent["containment"]
    assert sorted((parents[v], v) for v in range(len(g)) if parents[v] != -1) == expected


def test_core_ids_are_node_local_and_span_sockets():
    g = graph_from_recipe({"nodes_per_rack": 2, "racks": 2, "sockets": 2, "cores_per_socket": 3})
    node3 = g.resolve("node3")
    assert g.path(node3) == "/cluster0/rack1/node3"
    cores = [
        g.name[c] for s in g.children["containment"][node3] for c in g.children["containment"][s]
    ]
    assert cores == ["core0", "core1", "core2", "core3", "core4", "core5"]
    assert g.rank[node3] == 3


def test_no_racks_and_no_sockets_flatten_the_tree():
    g = graph_from_recipe(
        {
            "cluster": "k8s",
            "racks": 0,
            "nodes_per_rack": 3,
            "sockets": 0,
            "cores_per_socket": 4,
            "memory_per_socket": {"count": 1, "size": 64, "unit": "GiB"},
        }
    )
    assert len(g) == 1 + 3 * (1 + 4 + 1)
    mem = g.resolve("/k8s0/node2/memory0")
    assert (g.size[mem], g.unit[mem]) == (64, "GiB")
    assert g.path(g.resolve("/k8s0/node1/core3")) == "/k8s0/node1/core3"


def test_node_properties_are_set_on_every_node():
    g = graph_from_recipe({"nodes_per_rack": 2, "node_properties": {"arch": "x86_64"}})
    nodes = [v for v in range(len(g)) if g.type[v] == "node"]
    assert [g.properties[v] for v in nodes] == [{"arch": "x86_64"}] * 2


def test_vertex_count_matches_the_graph():
    recipe = {
        "racks": 3,
        "nodes_per_rack": 5,
        "sockets": 2,
        "cores_per_socket": 4,
        "gpus_per_socket": 1,
        "memory_per_socket": [2, 8],
    }
    assert recipe_vertex_count(parse_recipe(recipe)) == len(graph_from_recipe(recipe))


@pytest.mark.parametrize(
    ("recipe", "fragment"),
    [
        ({}, "recipe.nodes_per_rack: missing"),
        ({"nodes_per_rack": 0}, "recipe.nodes_per_rack: 0 is not an integer >= 1"),
        ({"nodes_per_rack": "4"}, "recipe.nodes_per_rack: '4'"),
        ({"nodes_per_rack": True}, "recipe.nodes_per_rack: True"),
        ({"nodes_per_rack": 1, "sockets": -1}, "recipe.sockets: -1"),
        ({"nodes_per_rack": 1, "cores": 4}, "unknown key(s) ['cores']"),
        ({"nodes_per_rack": 1, "memory_per_socket": [4]}, "give [count, size]"),
        ({"nodes_per_rack": 1, "memory_per_socket": [4, 0]}, "size 0 is not an integer >= 1"),
        ({"nodes_per_rack": 1, "memory_per_socket": {"n": 1}}, "unknown key(s) ['n']"),
        ({"nodes_per_rack": 1, "cluster": "a/b"}, "recipe.cluster: 'a/b'"),
        ({"nodes_per_rack": 1, "node_properties": ["x"]}, "recipe.node_properties"),
        ({"nodes_per_rack": 10**6, "cores_per_socket": 100}, "exceeds the"),
        ([1, 2], "is not a mapping"),
    ],
)
def test_bad_recipes_name_field_value_and_fix(recipe, fragment):
    with pytest.raises(RecipeError) as info:
        parse_recipe(recipe)
    assert fragment in str(info.value)
    assert isinstance(info.value, FluxinfraError)


def test_recipe_error_is_a_graph_error_once_the_core_has_one():
    errors = pytest.importorskip("fluxinfra.matcher.errors")
    assert issubclass(RecipeError, errors.GraphError)


def test_load_recipe_from_yaml_json_files_and_text(tmp_path):
    (tmp_path / "r.yaml").write_text("cluster: c\nnodes_per_rack: 2\nmemory_per_socket: [4, 16]\n")
    (tmp_path / "r.json").write_text(
        json.dumps({"cluster": "c", "nodes_per_rack": 2, "memory_per_socket": [4, 16]})
    )
    from_yaml = load_recipe(tmp_path / "r.yaml")
    assert from_yaml == load_recipe(str(tmp_path / "r.json"))
    assert from_yaml == load_recipe("cluster: c\nnodes_per_rack: 2\nmemory_per_socket: [4, 16]\n")
    assert (from_yaml.memory_count, from_yaml.memory_size) == (4, 16)


@pytest.mark.parametrize("text", ["nodes_per_rack: [\n", "{not json}\n"])
def test_load_recipe_syntax_errors_are_typed(text):
    with pytest.raises(RecipeError, match="fix the syntax"):
        load_recipe(text)


def test_missing_recipe_file_is_typed(tmp_path):
    with pytest.raises(RecipeError, match="check the path"):
        load_recipe(tmp_path / "nope.yaml")


def test_grug_text_mirrors_fluxions_tiny_graphml():
    """Same recipe graph (types, scales, id scopes, sizes) as Fluxion's tiny.graphml."""
    ns = {"g": "http://graphml.graphdrawing.org/xmlns"}
    root = ET.fromstring(recipe_to_grug(TINY))
    graph = root.find("g:graph", ns)
    data = {
        n.get("id"): {d.get("key"): d.text for d in n.findall("g:data", ns)}
        for n in graph.findall("g:node", ns)
    }
    assert data["cluster"] == {"root": "1", "type": "cluster", "basename": "tiny"}
    assert data["memory"] == {"type": "memory", "basename": "memory", "size": "2", "unit": "GB"}
    edges = {
        (e.get("source"), e.get("target")): {d.get("key"): d.text for d in e.findall("g:data", ns)}
        for e in graph.findall("g:edge", ns)
    }
    assert edges == {
        ("cluster", "rack"): {"multi_scale": "1"},
        ("rack", "node"): {"multi_scale": "2", "id_scope": "1"},
        ("node", "socket"): {"multi_scale": "2"},
        ("socket", "core"): {"multi_scale": "18", "id_scope": "1"},
        ("socket", "gpu"): {"multi_scale": "1", "id_scope": "1"},
        ("socket", "memory"): {"multi_scale": "4", "id_scope": "1"},
    }


@pytest.mark.parametrize(
    "recipe",
    [
        TINY,
        {"cluster": "c", "racks": 3, "nodes_per_rack": 2, "sockets": 2, "cores_per_socket": 3,
         "gpus_per_socket": 2, "memory_per_socket": [2, 8]},
        {"racks": 0, "nodes_per_rack": 3, "sockets": 0, "cores_per_socket": 2},
    ],
)
def test_core_grug_reader_builds_the_same_graph_from_recipe_to_grug(recipe):
    from fluxinfra.matcher import load_graph

    assert vertex_rows(load_graph(recipe_to_grug(recipe), fmt="grug")) == vertex_rows(
        graph_from_recipe(recipe))


def test_recipe_reproduces_fluxions_medium_graphml():
    """medium.graphml: 4 racks x 18 nodes x 2 sockets x (18 cores, 1 gpu, 4 x 32 GB memory)."""
    from fluxinfra.matcher import load_graph

    path = TESTDATA / "data" / "resource" / "grugs" / "medium.graphml"
    if not path.exists():
        pytest.skip(f"Fluxion test data not found at {path} (needs ../shared beside the repo)")
    recipe = {"cluster": "medium", "racks": 4, "nodes_per_rack": 18, "sockets": 2,
              "cores_per_socket": 18, "gpus_per_socket": 1, "memory_per_socket": [4, 32]}
    assert vertex_rows(graph_from_recipe(recipe)) == vertex_rows(load_graph(path, fmt="grug"))
