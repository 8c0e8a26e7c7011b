"""One rule for a graph file's format across ``match``, ``query``, ``draw`` and ``service``."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluxinfra.cli import main
from fluxinfra.cli.graphs import load_graph_file
from fluxinfra.cli.service import build_graph, parser
from fluxinfra.matcher.errors import GraphError

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples"
TESTDATA = REPO.parent / "shared" / "fluxion-testdata" / "data" / "resource"
TINY = TESTDATA / "grugs" / "tiny.graphml"


@pytest.mark.skipif(not TINY.exists(), reason=f"Fluxion test data not at {TINY}")
def test_service_guesses_graphml_from_the_name_like_match():
    graph = build_graph(parser().parse_args(["--graph", str(TINY)]))
    assert len(graph) == 100 and graph.name[graph.root] == "tiny0"


def test_service_reads_a_node_list_and_an_r_by_what_they_hold(tmp_path):
    nodes = build_graph(parser().parse_args(["--graph", str(EXAMPLES / "nodes.json")]))
    assert sorted(nodes.name[v] for v in range(len(nodes)) if nodes.type[v] == "node") == [
        "worker1", "worker2", "worker3"]  # the tainted control plane is left out
    r = build_graph(parser().parse_args(["--graph", str(EXAMPLES / "node3.R.json")]))
    assert [r.name[v] for v in range(len(r))] == ["cluster0", "node3", "core2", "core3"]


@pytest.mark.parametrize("argv", [
    ["match", str(EXAMPLES / "job.yaml"), str(EXAMPLES / "graph.json")],  # arguments swapped
    ["match", str(EXAMPLES / "cluster.yaml"), str(EXAMPLES / "job.yaml")],
])
def test_a_yaml_graph_is_named_as_such(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "a YAML file is not a resource graph" in err and "JSON" not in err.split(";")[0]
    assert "the order is: fluxinfra match GRAPH JOBSPEC" in err


def test_service_names_recipe_for_a_yaml_graph():
    with pytest.raises(GraphError, match="--graph .*cluster.yaml: a YAML file .*--recipe"):
        build_graph(parser().parse_args(["--graph", str(EXAMPLES / "cluster.yaml")]))


def test_a_json_that_is_nothing_known_keeps_the_jgf_message(tmp_path):
    other = tmp_path / "other.json"
    other.write_text('{"nodes": []}')
    with pytest.raises(GraphError, match="JGF: top-level key 'graph'"):
        load_graph_file(str(other), None)


def test_rv1exec_force_loads_like_rv1exec(tmp_path, capsys):
    cmds = tmp_path / "cmds.in"
    cmds.write_text(f"match allocate {EXAMPLES / 'job.yaml'}\nfind status=up\nquit\n")
    outputs = []
    for fmt in ("rv1exec", "rv1exec_force"):
        out = tmp_path / f"{fmt}.txt"
        assert main(["query", "-L", str(EXAMPLES / "node3.R.json"), "-f", fmt,
                     "--commands", str(cmds), "-t", str(out)]) == 0
        outputs.append(out.read_text())
    assert outputs[0] == outputs[1] and "core3[1:x]" in outputs[0]


def test_match_takes_a_kubernetes_node_list(capsys):
    assert main(["match", str(EXAMPLES / "nodes.json"), str(EXAMPLES / "job.yaml"),
                 "--indent", "0"]) == 0
    assert '"nodes": ["worker3"]' in capsys.readouterr().out


def test_a_node_list_without_nodes_is_one_line(tmp_path):
    empty = tmp_path / "nodes.json"
    empty.write_text('{"kind": "List", "items": []}')
    with pytest.raises(GraphError, match="holds no Node objects"):
        load_graph_file(str(empty), "k8s")
