"""Fluxion's ``jgf_shorthand``: the match writer that leaves out what lies below an exclusive
vertex (``QueryWriter``), and ``Matcher.update_allocate`` reading it back (plus the rv1exec
reader and the other update_allocate options)."""

from __future__ import annotations

import json

import pytest
from matcher_testlib import build_cluster, check_invariants

from fluxinfra.matcher import Busy, GraphError, Matcher, load_graph
from fluxinfra.matcher.writers import QueryWriter, encode_hostlist, rlite_of

SOCKET = {"version": 1, "resources": [{"type": "node", "count": 1, "with": [
    {"type": "slot", "count": 1, "label": "s", "with": [
        {"type": "socket", "count": 1, "with": [{"type": "core", "count": 4}]}]}]}],
    "attributes": {"system": {"duration": 100}},
    "tasks": [{"command": ["x"], "slot": "s", "count": {"per_slot": 1}}]}
CORE = {"version": 1, "resources": [{"type": "node", "count": 1, "with": [
    {"type": "socket", "count": 1, "with": [
        {"type": "slot", "count": 1, "label": "s", "with": [{"type": "core", "count": 1}]}]}]}],
    "attributes": {"system": {"duration": 100}},
    "tasks": [{"command": ["x"], "slot": "s", "count": {"per_slot": 1}}]}


def fresh() -> Matcher:
    return Matcher(build_cluster(nodes=2, sockets=2, cores=4, gpus=0, mem_per_socket=4),
                   policy="low")


def shorthand_of(m: Matcher, result) -> dict:
    return json.loads(QueryWriter("jgf_shorthand").write(m.graph, result.emitted))


def test_the_writer_leaves_out_what_lies_below_exclusive_vertices() -> None:
    m = fresh()
    doc = shorthand_of(m, m.match(SOCKET, jobid=1))
    assert [n["metadata"]["paths"]["containment"] for n in doc["graph"]["nodes"]] == [
        "/cluster0/node0/socket0", "/cluster0/node0", "/cluster0"]
    assert doc["graph"]["edges"] == [{"source": "1", "target": "2"},
                                     {"source": "0", "target": "1"}]
    assert doc["writer"] == "fluxion:jgf_shorthand"
    assert doc["graph"]["nodes"][0]["metadata"]["exclusive"] is True


def test_the_writer_uri_sticks_once_something_was_left_out() -> None:
    m = fresh()
    w = QueryWriter("jgf_shorthand")
    assert '"writer"' not in w.write(m.graph, m.match(CORE, jobid=1).emitted)
    assert '"writer"' in w.write(m.graph, m.match(SOCKET, jobid=2).emitted)
    # like resource-query's writer object: later complete sets still carry it
    assert '"writer"' in w.write(m.graph, m.match(CORE, jobid=3).emitted)


def test_update_allocate_expands_a_shorthand_R_to_the_whole_subtree() -> None:
    src = fresh()
    r = src.match(SOCKET, jobid=1)
    short = shorthand_of(src, r)
    m = fresh()
    got = m.update_allocate(1, short)  # reader auto: the writer URI says shorthand
    # everything below the exclusive socket, as in Fluxion's reader: the match's cores and
    # also the memory pool the match did not name (the socket was held whole anyway)
    extra = set(got.emitted) - set(r.emitted)
    assert set(r.emitted) <= set(got.emitted)
    assert [(m.graph.name[v], amount, x, xp) for _, v, amount, x, xp in extra] == [
        ("memory0", 4, True, True)]
    # the cores are held: the next core job lands on socket1
    assert m.match(CORE, jobid=2).R["execution"]["R_lite"] == [
        {"rank": "0", "children": {"core": "4"}}]
    check_invariants(m)


def test_a_shorthand_R_read_as_plain_jgf_holds_only_what_it_lists() -> None:
    src = fresh()
    short = shorthand_of(src, src.match(SOCKET, jobid=1))
    m = fresh()
    m.update_allocate(1, short, reader="jgf")  # socket0 held exclusively, cores not listed
    assert [m.graph.name[v] for _, v, _, _, _ in m.info(1).emitted] == [
        "socket0", "node0", "cluster0"]
    core0 = fresh().match(CORE, jobid=2).R
    assert "/cluster0/node0/socket0/core0" in json.dumps(core0)
    with pytest.raises(Busy) as info:  # yet nobody else may use socket0
        m.update_allocate(2, core0)
    assert m.graph.name[info.value.vertex] == "socket0" and not info.value.exclusive


def test_a_full_R_read_as_shorthand_lists_vertices_twice() -> None:
    src = fresh()
    r = src.match(SOCKET, jobid=1).R
    m = fresh()
    with pytest.raises(GraphError, match="listed twice") as info:
        m.update_allocate(1, r, reader="jgf_shorthand")
    assert m.graph.name[info.value.vertex] == "core0" and not m.jobs


def test_busy_names_the_first_vertex_in_file_order_even_before_a_bad_one() -> None:
    src = fresh()
    r = src.match(SOCKET, jobid=1).R
    m = fresh()
    m.match(CORE, jobid=7)  # core0
    with pytest.raises(Busy) as info:  # core0 comes before the duplicates
        m.update_allocate(1, r, reader="jgf_shorthand")
    assert m.graph.name[info.value.vertex] == "core0" and info.value.exclusive


def test_reserve_and_future_start_say_reserved() -> None:
    src = fresh()
    r = src.match(CORE, jobid=1).R
    m = fresh()
    assert m.update_allocate(1, r, at=0, duration=50).status == "ALLOCATED"
    assert m.update_allocate(2, src.match(CORE, jobid=2).R, at=500,
                             duration=50).status == "RESERVED"
    assert m.update_allocate(3, src.match(CORE, jobid=3).R, at=0, duration=50,
                             reserve=True).status == "RESERVED"
    with pytest.raises(Exception, match="reader 'xml'"):
        m.update_allocate(4, r, reader="xml")


def test_rv1exec_reader_holds_the_children_and_the_node_shared() -> None:
    graph_r = {"version": 1, "execution": {"R_lite": [
        {"rank": "0-1", "children": {"core": "0-3", "gpu": "0"}}], "nodelist": ["n[0-1]"]}}
    job = {"version": 1, "execution": {"R_lite": [{"rank": "1", "children": {"core": "2-3"}}],
                                       "nodelist": ["n1"], "starttime": 0,
                                       "expiration": 100}}
    m = Matcher(load_graph(graph_r, "rv1exec"), policy="high")
    got = m.update_allocate(5, job)  # auto: no JGF -> rv1exec
    g = m.graph
    assert [(g.name[v], x) for _, v, _, x, _ in got.emitted] == [
        ("core2", True), ("core3", True), ("n1", False), ("cluster0", False)]
    assert got.duration == 100
    # n1's other cores stay free; a whole-rank R holds the node too
    whole = {"version": 1, "execution": {"R_lite": [
        {"rank": "0", "children": {"core": "0-3", "gpu": "0"}}], "nodelist": ["n0"]}}
    assert [x for _, v, _, x, _ in m.update_allocate(6, whole).emitted if g.name[v] == "n0"] \
        == [True]
    with pytest.raises(Busy) as info:
        m.update_allocate(7, job)
    assert g.name[info.value.vertex] == "core2"
    with pytest.raises(GraphError) as missing:
        m.update_allocate(8, {"version": 1, "execution": {"R_lite": [
            {"rank": "1", "children": {"asic": "0"}}], "nodelist": ["n1"]}})
    assert missing.value.missing == "asic0"
    check_invariants(m)


def test_rlite_groups_nodes_by_children_text_and_keeps_properties() -> None:
    g = load_graph({"version": 1, "execution": {"R_lite": [
        {"rank": "0-2", "children": {"core": "0-1", "gpu": "0"}}], "nodelist": ["n[0-2]"],
        "properties": {"fast": "1"}}}, "rv1exec")
    m = Matcher(g, policy="low")
    emitted = [(lvl, v, g.size[v], True, False) for lvl, v in
               ((2, v) for v in g.preorder(g.root)[::-1])]
    # ranks 0 and 2 share children, rank 1 lost its gpu: grouped by children text
    emitted = [e for e in emitted if not (g.rank[e[1]] == 1 and g.type[e[1]] == "gpu")]
    rlite, nodelist, props = rlite_of(g, emitted)
    # (std::map order of the children text: '{"core": "0-1", "gpu"' < '{"core": "0-1"}')
    assert rlite == [{"rank": "0,2", "children": {"core": "0-1", "gpu": "0"}},
                     {"rank": "1", "children": {"core": "0-1"}}]
    assert nodelist == ["n[0-2]"] and props == {"fast": "1"}
    assert m.graph is g


@pytest.mark.parametrize(("hosts", "text"), [
    (["node0", "node1", "node2", "node5"], "node[0-2,5]"),
    (["node1"], "node1"),
    (["node3", "node1"], "node[3,1]"),
    (["a1", "b2", "a3"], "a1,b2,a3"),
    (["node01", "node02"], "node[01-02]"),
    (["login", "node9", "node10"], "login,node[9-10]"),
])
def test_hostlists_are_encoded_in_the_order_given(hosts, text) -> None:
    assert encode_hostlist(hosts) == text


def test_a_held_planner_below_is_reported_before_a_shared_exclusive_vertex() -> None:
    """Fluxion's reader checks the planners of the R's vertices in file order (a node held
    whole stands for its sockets and cores); only then does fluxinfra's stricter check that
    nobody shares an exclusive vertex apply."""
    whole = {**CORE, "resources": [{"type": "node", "count": 1, "exclusive": True, "with": [
        {"type": "slot", "count": 1, "label": "s", "with": [{"type": "core", "count": 1}]}]}]}
    src = fresh()
    short = shorthand_of(src, src.match(whole, jobid=1))
    assert [n["metadata"]["type"] for n in short["graph"]["nodes"]] == ["node", "cluster"]
    m = fresh()
    m.match(SOCKET, jobid=9)  # socket0 of node0, exclusively
    with pytest.raises(Busy) as info:
        m.update_allocate(1, short)
    assert m.graph.name[info.value.vertex] == "socket0"
    m.cancel(9)
    m.match(CORE, jobid=8)  # a core of node0: node0 now shared, its planners free but core0
    with pytest.raises(Busy) as info:
        m.update_allocate(1, short)
    assert m.graph.name[info.value.vertex] == "core0"
