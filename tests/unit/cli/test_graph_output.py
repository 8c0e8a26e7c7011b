"""``fluxinfra query -g dot|graphml|svg|png -o BASENAME`` and ``fluxinfra draw``.

The dot and GraphML texts follow resource-query's writer code (Fluxion v0.54.0
resource-query.cpp: write_to_graphviz / write_to_graphml, Boost 1.74's write_graphviz /
write_graphml); v0.54.0 itself no longer writes them (its fini_resource_query is never called),
so the checks here are the format those functions define. Pictures go through the real
Graphviz ``dot`` (scripts/apt-packages.txt installs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fluxinfra.cli import main
from fluxinfra.cli.draw import MAX_BOXES, DrawError, picture_dot
from fluxinfra.matcher import Matcher, load_graph
from fluxinfra.matcher.graphout import write_dot, write_graphml
from fluxinfra.matcher.recipe import graph_from_recipe

REPO = Path(__file__).resolve().parents[3]
GRAPH = str(REPO / "examples" / "graph.json")
JOB = str(REPO / "examples" / "job.yaml")
GANG = str(REPO / "examples" / "gang.yaml")
needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot is not installed (scripts/setup installs "
                                      "graphviz as root)")
GML = "{http://graphml.graphdrawing.org/xmlns}"


def query(tmp_path: Path, commands: str, *extra: str) -> int:
    cmds = tmp_path / "cmds.in"
    cmds.write_text(commands)
    return main(["query", "-L", GRAPH, "-f", "jgf", "--commands", str(cmds),
                 "-t", str(tmp_path / "out.txt"), *extra])


def test_dot_is_boost_write_graphviz_with_names_and_subsystems(tmp_path, capsys):
    assert query(tmp_path, "quit\n", "-g", "dot", "-o", str(tmp_path / "g")) == 0
    assert capsys.readouterr().out == "INFO: Write the target graph of the matcher...\n"
    lines = (tmp_path / "g.dot").read_text().splitlines()
    g = load_graph(GRAPH, "jgf")
    assert lines[0] == "digraph G {" and lines[-1] == "}"
    assert lines[1:3] == ['0[label="demo0"];', '1[label="rack0"];']
    vertices = [line for line in lines if re.fullmatch(r'\d+\[label="\w+"\];', line)]
    edges = [line for line in lines if re.fullmatch(r'\d+->\d+ \[label="containment"\];', line)]
    assert len(vertices) == len(g) and len(edges) == len(g) - 1
    assert len(vertices) + len(edges) + 2 == len(lines)


def test_an_edge_outside_the_dominant_subsystem_is_labelled_with_the_dominant_one():
    g = graph_from_recipe({"nodes_per_rack": 2})
    pdu = g.add_vertex(type="pdu", id=0)
    g.add_edge(pdu, g.by_name("node0")[0], "power")
    g.add_edge(g.by_name("node1")[0], pdu, "power")
    g.finalize()
    text = write_dot(g)
    # 7 containment edges (the pdu is in power only) and the 2 power edges
    assert text.count('[label="containment"]') == 9
    assert '[label="power"]' in write_dot(g, dominant="power")


def test_graphml_is_boost_write_graphml_of_resource_querys_properties(tmp_path):
    assert query(tmp_path, "quit\n", "-g", "graphml", "-o", str(tmp_path / "g")) == 0
    text = (tmp_path / "g.graphml").read_text()
    root = ET.fromstring(text)
    keys = [(k.get("id"), k.get("for"), k.get("attr.name"), k.get("attr.type"))
            for k in root.iter(GML + "key")]
    assert [k[2] for k in keys] == ["basename", "id", "member_of", "member_of", "name", "paths",
                                    "props", "size", "type", "uniq_id", "unit"]
    assert keys[1] == ("key1", "node", "id", "long") and keys[3][1] == "edge"
    nodes = list(root.iter(GML + "node"))
    edges = list(root.iter(GML + "edge"))
    assert len(nodes) == 70 and len(edges) == 69
    mem = next(n for n in nodes if n.find(f"{GML}data[@key='key4']").text == "memory0")
    data = {d.get("key"): d.text for d in mem}
    assert data["key5"] == "{containment=/demo0/rack0/node0/socket0/memory0}"
    # -f jgf keeps no units, as Fluxion's JGF reader
    assert (data["key7"], data["key10"], data["key6"]) == ("16", None, "{}")
    assert edges[0].find(GML + "data").text == "{,containment=containment}"  # Fluxion's comma
    assert text.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<graphml xmlns=')


def test_graphml_escapes_like_boost_property_tree():
    g = graph_from_recipe({"nodes_per_rack": 1})
    g.properties[g.by_name("node0")[0]] = {"note": 'a<b & "c"'}
    assert "{note=a&lt;b &amp; &quot;c&quot;}" in write_graphml(g)


def test_g_without_o_writes_nothing_and_says_so(tmp_path, capsys):
    assert query(tmp_path, "quit\n", "-g", "graphml") == 0
    assert "-g graphml without -o writes nothing" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.graphml"))


def test_an_unwritable_graph_output_is_one_line_and_exit_1(tmp_path, capsys):
    assert query(tmp_path, "quit\n", "-o", str(tmp_path / "missing" / "g")) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write" in err and "g.dot" in err


# -- pictures ------------------------------------------------------------------------------------
def test_a_picture_colours_each_job_and_folds_alike_leaves():
    m = Matcher(load_graph(GRAPH, "jgf"))
    first = m.match(Path(JOB).read_text())
    m.match(Path(GANG).read_text())
    reserved = m.match(Path(GANG).read_text(), op="allocate_orelse_reserve")
    assert reserved.at > 0
    text = picture_dot(m.graph, m)
    assert text.count("<td bgcolor=") == 3  # one legend row per job
    assert "RESERVED at 3600 (dashed border)" in text  # when job 1 leaves node3
    held = re.findall(r'label="(core\[?[\d,-]+\]?)[^"]*", fillcolor="(#\w+)"', text)
    assert ("core[6-7]", "#8dd3c7") in held, held  # job 1's two cores, one box
    assert first.nodes == ["node3"]
    assert "core[4-5] ×2" in text  # node3's free cores on socket1, one box
    assert text.count(" -> ") < len(m.graph) - 1


def test_a_down_vertex_is_grey():
    m = Matcher(load_graph(GRAPH, "jgf"))
    m.set_status("/demo0/rack0/node1", "down")
    assert re.search(r'label="node1\\ndown", fillcolor="#d9d9d9"', picture_dot(m.graph, m))


def test_too_large_a_picture_is_refused_with_the_reason():
    g = graph_from_recipe({"nodes_per_rack": MAX_BOXES + 1})
    with pytest.raises(DrawError, match=r"would have \d+ boxes .*at most 3000"):
        picture_dot(g)


@needs_dot
@pytest.mark.parametrize("fmt", ["svg", "png"])
def test_query_draws_the_session_end_state(tmp_path, fmt):
    assert query(tmp_path, f"match allocate {JOB}\nquit\n", "-g", fmt,
                 "-o", str(tmp_path / "end")) == 0
    data = (tmp_path / f"end.{fmt}").read_bytes()
    assert data.startswith(b"\x89PNG") if fmt == "png" else b"<svg" in data[:400]


@needs_dot
def test_draw_writes_an_svg_with_every_job(tmp_path, capsys):
    out = tmp_path / "alloc.svg"
    assert main(["draw", GRAPH, JOB, GANG, str(REPO / "examples" / "big.yaml"),
                 "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert "job 1 ALLOCATED now on node3" in printed.out
    assert "big.yaml: not placed" in printed.err
    svg = out.read_text()
    assert ">job 1<" in svg and ">job 2<" in svg and "core[4&#45;5] ×2" in svg


def test_draw_dot_needs_no_graphviz(tmp_path):
    out = tmp_path / "graph.dot"
    env = {**os.environ, "PATH": str(tmp_path)}  # no dot on PATH
    proc = subprocess.run([sys.executable, "-m", "fluxinfra", "draw", GRAPH, "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("digraph resources {")
    proc = subprocess.run([sys.executable, "-m", "fluxinfra", "draw", GRAPH,
                           "-o", str(tmp_path / "g.svg")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1
    assert "needs Graphviz's 'dot', which is not installed (Debian: apt-get install graphviz)" \
        in proc.stderr


def test_draw_refuses_an_unknown_picture_format(capsys):
    assert main(["draw", GRAPH, "-o", "graph.gif"]) == 2
    assert "unknown picture format 'gif'; use a file name ending in .svg, .png, .dot" in \
        capsys.readouterr().err
