"""RFC 31 constraints (``attributes.system.constraints``) as Fluxion v0.54 parses and applies them.

The match and validation cases are Fluxion's own (``resource/libjobspec/test/constraint.cpp``,
facts only: a node ``foo0`` of rank 0 with properties ``xx`` and ``yy``); the traversal cases pin
where Fluxion applies a constraint (``dfu_impl_t::by_constraint``: at ``node`` and
``storage_node`` vertices only, a mismatch prunes the subtree, never the request). The last test
replays the same jobspecs through ``fluxinfra query`` and a real resource-query when one is on
this machine.
"""

from __future__ import annotations

import io
import json
import subprocess

import pytest
from test_query_update import RESOURCE_QUERY

from fluxinfra.cli import main
from fluxinfra.matcher import Busy, Jobspec, JobspecError, Matcher, ResourceGraph, Unsatisfiable
from fluxinfra.matcher.constraint import format_idset, parse_constraint, parse_hostlist

FOO0 = ("foo0", 0, {"xx": "", "yy": ""})


@pytest.mark.parametrize("doc, expected", [
    ({}, True),
    ({"properties": []}, True),
    ({"properties": ["xx"]}, True),
    ({"properties": ["^xx"]}, False),
    ({"properties": ["^zz"]}, True),
    ({"properties": ["xx", "yy"]}, True),
    ({"properties": ["xx", "zz"]}, False),
    ({"properties": ["zz"]}, False),
    ({"and": [{"properties": ["xx"]}, {"properties": ["yy"]}]}, True),
    ({"and": [{"properties": ["xx"]}, {"properties": ["zz"]}]}, False),
    ({"or": [{"properties": ["xx"]}, {"properties": ["yy"]}]}, True),
    ({"or": [{"properties": ["zz"]}, {"properties": ["yy"]}]}, True),
    ({"or": [{"properties": ["zz"]}, {"properties": ["aa"]}]}, False),
    ({"not": [{"or": [{"properties": ["zz"]}, {"properties": ["yy"]}]}]}, False),
    ({"hostlist": ["foo[0-2]"]}, True),
    ({"hostlist": ["foo[1-3]"]}, False),
    ({"ranks": ["0-2"]}, True),
    ({"ranks": ["1-3"]}, False),
    ({"and": []}, True),
    ({"or": []}, False),
    ({"not": []}, False),
])
def test_fluxion_match_cases(doc, expected) -> None:
    assert parse_constraint(doc).matches(*FOO0) is expected


@pytest.mark.parametrize("doc, message", [
    ([], "constraint is not a mapping"),
    ({"foo": []}, "unknown constraint operator: foo"),
    ({"properties": ["xx"], "hostlist": ["foo"]}, "constraint map may not contain > 1 operation"),
    ({"and": "foo"}, "and operator value must be an array"),
    ({"or": "foo"}, "or operator value must be an array"),
    ({"properties": "foo"}, "properties operator value must be an array"),
    ({"properties": [1]}, "non-string property specified"),
    ({"properties": ["a&b"]}, "a&b is invalid"),
    ({"properties": ["^^a"]}, "^^a is invalid"),
    ({"hostlist": ["foo[1-"]}, "Invalid hostlist `foo[1-'"),
    ({"ranks": ["3-1"]}, "invalid idset '3-1'"),
    ({"and": [{"ranks": ["x"]}]}, "attributes.system.constraints.and[0].ranks[0]: invalid idset"),
])
def test_fluxion_validation_cases(doc, message) -> None:
    with pytest.raises(JobspecError, match=message.replace("[", r"\[").replace("^", r"\^")):
        parse_constraint(doc)


def test_ranks_hostlists_and_idsets() -> None:
    c = parse_constraint({"ranks": ["[0-3]", "7", "5-6"]})
    assert [r for r in range(10) if c.matches("n", r, None)] == [0, 1, 2, 3, 5, 6, 7]
    assert not c.matches("n", -1, None)  # vertices without a rank never match ranks
    assert parse_hostlist("node[08-10],login1") == ["node08", "node09", "node10", "login1"]
    assert parse_hostlist("rack[1-2]-gpu") == ["rack1-gpu", "rack2-gpu"]
    assert format_idset(set()) == "" and format_idset([3, 1, 2, 9]) == "1-3,9"


def _graph() -> ResourceGraph:
    """cluster0 -> rack0 (node0, node1), rack1 (node2, node3); two cores per node; node1 and
    node3 have property gpu; rack1 has property gpu too (never tested: not a node)."""
    g = ResourceGraph()
    root = g.add_vertex(type="cluster", name="cluster0", id=0)
    for r in range(2):
        rack = g.add_vertex(type="rack", id=r, properties={"gpu": ""} if r else None)
        g.add_edge(root, rack)
        for k in range(2):
            n = 2 * r + k
            node = g.add_vertex(type="node", id=n, rank=n,
                                properties={"gpu": "1"} if n % 2 else None)
            g.add_edge(rack, node)
            for c in range(2):
                g.add_edge(node, g.add_vertex(type="core", id=c, rank=n))
    g.finalize()
    return g


def _slots(count: int, constraint=None, cores: int = 1, top: str = "slot") -> dict:
    slot = {"type": "slot", "count": count, "label": "t",
            "with": [{"type": "core", "count": cores}]}
    res = [slot] if top == "slot" else [{"type": top, "count": 1, "with": [slot]}]
    system = {"duration": 60}
    if constraint is not None:
        system["constraints"] = constraint
    return {"version": 1, "resources": res, "attributes": {"system": system},
            "tasks": [{"command": ["x"], "slot": "t", "count": {"per_slot": 1}}]}


@pytest.mark.parametrize("policy", ["first", "low", "high", "lonode", "hinodex"])
def test_only_matching_nodes_are_used(policy) -> None:
    m = Matcher(_graph(), policy=policy)
    got = sorted(n for _ in range(2)
                 for n in m.match(_slots(1, {"properties": ["gpu"]})).nodes)
    assert set(got) <= {"node1", "node3"}
    for _ in range(2 if policy != "hinodex" else 0):
        m.match(_slots(1, {"properties": ["gpu"]}))
    with pytest.raises(Busy):  # both gpu nodes full: busy, never unsatisfiable
        m.match(_slots(1, {"properties": ["gpu"]}), op="allocate_with_satisfiability")
    assert set(m.match(_slots(4, {"properties": ["^gpu"]})).nodes) == {"node0", "node2"}


def test_constraints_are_tested_at_nodes_only() -> None:
    """A rack with the property does not make its nodes match, nor does a rack without it
    exclude them: only node vertices are tested (by_constraint)."""
    m = Matcher(_graph(), policy="low")
    assert m.match(_slots(2, {"properties": ["gpu"]}, top="rack")).nodes == ["node1"]
    r = m.match(_slots(1, {"hostlist": ["node2"]}, top="rack"))
    assert r.nodes == ["node2"]


def test_a_constraint_nothing_matches_is_unsatisfiable_not_busy() -> None:
    m = Matcher(_graph(), policy="first")
    with pytest.raises(Unsatisfiable):
        m.match(_slots(1, {"hostlist": ["elsewhere"]}), op="allocate_with_satisfiability")
    with pytest.raises(Unsatisfiable):
        m.match(_slots(3, {"ranks": ["0"]}, cores=1), op="allocate_orelse_reserve")
    with pytest.raises(Busy):
        m.match(_slots(1, {"hostlist": ["elsewhere"]}))


def test_reservations_honour_the_constraint() -> None:
    m = Matcher(_graph(), policy="first")
    m.match(_slots(2, {"ranks": ["3"]}))  # node3 full until t=60
    r = m.match(_slots(1, {"ranks": ["3"]}), op="allocate_orelse_reserve")
    assert (r.status, r.at, r.nodes) == ("RESERVED", 60, ["node3"])


def test_jobspec_keeps_the_constraint_and_empty_means_none() -> None:
    js = Jobspec.parse(_slots(1, {"ranks": ["1"]}))
    assert js.constraint.to_dict() == {"ranks": ["1"]}
    assert js.to_dict()["attributes"]["system"]["constraints"] == {"ranks": ["1"]}
    assert Jobspec.parse(_slots(1, {})).constraint is None
    with pytest.raises(JobspecError, match="attributes.system.constraints.ranks"):
        Jobspec.parse(_slots(1, {"ranks": "1"}))


def _write_jgf(path) -> None:
    from fluxinfra.matcher.writers import write_jgf

    g = _graph()
    emitted = [(0, v, g.size[v], False, False) for v in range(len(g))]
    path.write_text(json.dumps(write_jgf(g, emitted)))


CMD_CONSTRAINTS = [{"properties": ["gpu"]}, {"properties": ["^gpu"]}, {"ranks": ["2-3"]},
                   {"hostlist": ["node[0,3]"]}, {"not": [{"ranks": ["0"]}]},
                   {"or": [{"hostlist": ["node0"]}, {"properties": ["gpu"]}]},
                   {"hostlist": ["nowhere"]}]


def _commands(tmp_path) -> str:
    lines = []
    for i, c in enumerate(CMD_CONSTRAINTS):
        (tmp_path / f"c{i}.json").write_text(json.dumps(_slots(1, c)))
        lines.append(f"match allocate_with_satisfiability c{i}.json")
    return "\n".join(lines + ["quit", ""])


def test_query_applies_constraints(tmp_path, monkeypatch) -> None:
    _write_jgf(tmp_path / "g.json")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO(_commands(tmp_path)))
    assert main(["query", "-L", "g.json", "-f", "jgf", "-P", "low", "-t", "out.txt"]) == 0
    out = (tmp_path / "out.txt").read_text()
    nodes = [line.strip().strip("-").split("[")[0] for line in out.splitlines()
             if "node" in line and "[1:s]" in line]
    assert nodes == ["node1", "node0", "node2", "node3", "node1", "node0"]
    assert out.count("Unsatisfiable request") == 1


@pytest.mark.skipif(RESOURCE_QUERY is None,
                    reason="no real resource-query to compare with (set "
                           "FLUXINFRA_RESOURCE_QUERY=/path/to/resource-query or put it on PATH)")
@pytest.mark.parametrize("policy", ["low", "high", "first"])
def test_same_output_as_resource_query(tmp_path, monkeypatch, policy) -> None:
    _write_jgf(tmp_path / "g.json")
    cmds = _commands(tmp_path)
    real = subprocess.run([RESOURCE_QUERY, "-L", "g.json", "-f", "jgf", "-P", policy,
                           "-t", "rq.txt"], input=cmds, cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert real.returncode == 0, real.stderr
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.stdin", io.StringIO(cmds))
    assert main(["query", "-L", "g.json", "-f", "jgf", "-P", policy, "-t", "ours.txt"]) == 0
    assert (tmp_path / "ours.txt").read_text() == (tmp_path / "rq.txt").read_text()
