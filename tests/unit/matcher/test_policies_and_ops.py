"""Policies, find, status, subgraphs, satisfiability and the fast traversal."""

from __future__ import annotations

import pytest
from matcher_testlib import build_cluster, check_invariants

from fluxinfra.matcher import Busy, Matcher, MatcherError, Unsatisfiable
from fluxinfra.matcher.policies import parse_policy


def cores(n=1, duration=100):
    return {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "a",
                                         "with": [{"type": "core", "count": n}]}],
            "attributes": {"system": {"duration": duration}}}


def nodes(n=1, duration=100):
    return {"version": 1, "resources": [{"type": "node", "count": n, "exclusive": True, "with": [
        {"type": "slot", "count": 1, "label": "a", "with": [{"type": "core", "count": 1}]}]}],
        "attributes": {"system": {"duration": duration}}}


@pytest.fixture(scope="module")
def graph():
    return build_cluster(nodes=4, sockets=2, cores=4)


@pytest.mark.parametrize("text, error", [
    ("policy=medium", "accepts only low or high"),
    ("policy=low node_exclusive=maybe", "requires true or false"),
    ("bogus", "invalid option"),
])
def test_bad_policy_strings_are_rejected(text, error):
    with pytest.raises(MatcherError, match=error):
        parse_policy(text)


@pytest.mark.parametrize("policy, first_node", [
    ("low", "node0"), ("high", "node3"), ("lonodex", "node0"), ("hinodex", "node3"),
    ("first", "node3"), ("policy=low node_centric=true", "node0"),
])
def test_each_policy_picks_its_end_of_the_graph(graph, policy, first_node):
    assert Matcher(graph, policy=policy).match(cores()).nodes == [first_node]


def test_node_exclusive_policy_gives_whole_nodes(graph):
    m = Matcher(graph, policy="lonodex")
    r = m.match(cores())
    assert sum(1 for e in r.emitted if graph.type[e[1]] == "core") == 8  # the whole node
    assert m.match(cores()).nodes == ["node1"]
    check_invariants(m)


def test_first_policy_prefers_untouched_children(graph):
    m = Matcher(graph, policy="first")
    assert [m.match(cores()).nodes[0] for _ in range(3)] == ["node3", "node2", "node1"]


def test_variation_prefers_low_perf_class():
    g = build_cluster(nodes=3, sockets=1, cores=2)
    g.properties[g.resolve("node1")] = {"perf_class": "1"}
    assert Matcher(g, policy="variation").match(nodes()).nodes == ["node1"]


def test_busy_means_not_now_and_unsatisfiable_means_never(graph):
    m = Matcher(graph, policy="low")
    m.match(nodes(4))
    with pytest.raises(Busy):
        m.match(nodes(1), op="allocate_with_satisfiability")
    with pytest.raises(Unsatisfiable):
        m.match(nodes(5), op="allocate_with_satisfiability")
    assert m.match(nodes(1), op="satisfiability").status == "SATISFIABLE"


def test_without_allocating_commits_nothing(graph):
    m = Matcher(graph, policy="low")
    r = m.match(nodes(4), op="without_allocating")
    assert r.status == "MATCHED" and not m.jobs
    assert m.match(nodes(4)).status == "ALLOCATED"


def test_cancel_frees_the_future_too(graph):
    m = Matcher(graph, policy="low")
    first = m.match(nodes(4, duration=100))
    later = m.match(nodes(4, duration=100), op="allocate_orelse_reserve")
    assert (later.status, later.at) == ("RESERVED", 100)
    m.cancel(later.jobid)
    again = m.match(nodes(4, duration=50), op="allocate_orelse_reserve")
    assert again.at == 100
    m.cancel(first.jobid)
    assert m.match(nodes(2, duration=50)).at == 0
    check_invariants(m)


def test_down_node_is_skipped_and_up_again_used(graph):
    m = Matcher(graph, policy="low")
    m.set_status("node0", "down")
    assert m.match(cores()).nodes == ["node1"]
    with pytest.raises(Busy):  # 4 nodes asked, 3 up: not now
        m.match(nodes(4))
    m.set_status("node0", "up")
    assert m.match(cores()).nodes == ["node0"]


def test_find_by_status_and_allocation(graph):
    m = Matcher(graph, policy="low")
    r = m.match(cores(2))
    text = m.find_text("sched-now=allocated")
    assert "core0[1:x]" in text and "core1[1:x]" in text and "core2" not in text
    found = m.find("status=up and names=node[0-1]")
    assert found["execution"]["nodelist"] == ["node[0-1]"]
    m.cancel(r.jobid)
    assert m.find_text("sched-now=allocated") == ""
    with pytest.raises(MatcherError):
        m.find("colour=red")


def test_remove_and_add_subgraph(graph):
    g = build_cluster(nodes=2, sockets=1, cores=2)
    m = Matcher(g, policy="low")
    r = m.match(cores(1))
    m.remove_subgraph("/cluster0/node0")
    assert r.jobid not in m.jobs  # its only node went away
    assert m.match(cores(2)).nodes == ["node1"]
    with pytest.raises(Busy):
        m.match(cores(1))
    jgf = {"graph": {"nodes": [
        {"id": "0", "metadata": {"type": "cluster", "paths": {"containment": "/cluster0"}}},
        {"id": "100", "metadata": {"type": "node", "name": "node9",
                                   "paths": {"containment": "/cluster0/node9"}}},
        {"id": "101", "metadata": {"type": "core", "id": 0}}],
        "edges": [{"source": "0", "target": "100"}, {"source": "100", "target": "101"}]}}
    added = m.add_subgraph(jgf)
    assert len(added) == 2
    assert m.match(cores(1)).nodes == ["node9"]


def test_stat_counts_matches(graph):
    m = Matcher(graph, policy="low")
    m.match(cores())
    with pytest.raises(Busy):
        m.match(nodes(5))
    st = m.stat()
    assert (st["match_succeeded"], st["match_failed"], st["jobs"]) == (1, 1, 1)


@pytest.mark.parametrize("policy", ["low", "high", "first", "lonodex", "hinodex"])
def test_fast_traversal_keeps_invariants_while_filling(policy):
    g = build_cluster(nodes=6, sockets=2, cores=4)
    m = Matcher(g, policy=policy, exact=False)
    held = 0
    while True:
        try:
            m.match(cores(3))
        except Busy:
            break
        held += 1
        check_invariants(m)
    # two 3-core slots per node (a slot never spans sockets); node-exclusive: one per node
    assert held == (6 if policy.endswith("nodex") else 12)


def test_slot_below_a_skipped_level_is_reachable():
    # node -> slot -> core on a graph with sockets between node and core
    g = build_cluster(nodes=1, sockets=2, cores=2)
    spec = {"version": 1, "resources": [{"type": "node", "count": 1, "with": [
        {"type": "slot", "count": 1, "label": "a", "with": [{"type": "core", "count": 2}]}]}]}
    r = Matcher(g, policy="low").match(spec)
    assert [g.name[e[1]] for e in r.emitted] == ["core0", "core1", "socket0", "node0",
                                                   "cluster0"]


def test_locality_prefers_the_highest_run_of_free_ids():
    # 8 one-socket nodes. Facts checked against Fluxion v0.54's resource-query -P locality on
    # the same machine (GRUG from recipe_to_grug): the top-level candidates are ranked by the
    # run of consecutive free ids they fall in, highest run first; candidates of one run tie
    # and keep graph order (exact mode), where ``high`` takes the highest ids.
    g = build_cluster(nodes=8, sockets=1, cores=2)

    def picks(policy, exact):
        m = Matcher(g, policy=policy, exact=exact)
        got = [m.match(nodes(1)).nodes, m.match(nodes(2)).nodes, m.match(nodes(1)).nodes]
        m.cancel(2)
        got.append(m.match(nodes(3)).nodes)
        check_invariants(m)
        return got

    assert picks("locality", True) == [["node0"], ["node1", "node2"], ["node3"],
                                       ["node4", "node5", "node6"]]
    assert picks("high", True) == [["node7"], ["node5", "node6"], ["node4"],
                                   ["node3", "node5", "node6"]]
    # without exact=True the walk starts from the policy's first candidates, under a guard
    # that ranks every candidate when the first found might not be Fluxion's: the same picks
    assert picks("locality", False) == picks("locality", True)
    assert picks("high", False) == picks("high", True)


def test_locality_is_a_named_policy_only():
    with pytest.raises(MatcherError, match="accepts only low or high"):
        parse_policy("policy=locality node_exclusive=true")


@pytest.mark.parametrize("policy", ["first", "low", "high", "lonode", "hinode", "locality",
                                    "variation", "lonodex", "hinodex", "firstnodex"])
def test_a_shared_node_with_its_slot_a_level_down_is_allocated(policy):
    # node[1] -> slot[1] -> core[1] on Fluxion's tiny machine: the slot forms at a socket,
    # one level below the node. Fluxion v0.54 answers "No matching resources found" under
    # every policy that does not hold whole nodes (a defect: its commit walk cannot reach a
    # slot below an unmarked socket; tests/conformance/known_live_differences.tsv has the
    # evidence); we allocate one core, on a node shared with other jobs
    from fluxinfra.matcher.recipe import graph_from_recipe

    g = graph_from_recipe({"cluster": "tiny", "nodes_per_rack": 2, "sockets": 2,
                           "cores_per_socket": 18, "gpus_per_socket": 1,
                           "memory_per_socket": [4, 2]})
    m = Matcher(g, policy=policy)
    job = {"version": 1, "resources": [{"type": "node", "count": 1, "with": [
        {"type": "slot", "count": 1, "label": "t", "with": [{"type": "core", "count": 1}]}]}],
        "attributes": {"system": {"duration": 3600}},
        "tasks": [{"command": ["a"], "slot": "t", "count": {"per_slot": 1}}]}
    r = m.match(job)
    cores = [v for _, v, _, _, _ in r.emitted if g.type[v] == "core"]
    whole = policy.endswith("nodex")  # node-exclusive policies hold the node: every core
    assert len(r.nodes) == 1 and len(cores) == (36 if whole else 1)
    assert len(r.slots) == 1
