"""Fast mode's shortcuts choose exactly what the plain fast traversal chooses.

* whole free subtrees replayed by shape (``Traverser._template_key`` / ``_replay``);
* children held whole skipped by a set lookup (``HeldKids``);
* held subtrees listed lazily (``JobState.vertices``), ``first``'s order kept incrementally,
  the commit walk over marked children only.

Each test runs the same operations on two matchers, one with the shortcuts disabled, and
compares every result (vertices, amounts, slots, nodes) and the planners' state.
"""

from __future__ import annotations

import pytest
from matcher_testlib import TESTDATA, check_invariants

from fluxinfra.matcher import Busy, Matcher, load_graph
from fluxinfra.matcher.recipe import graph_from_recipe, recipe_to_grug

POLICIES = ["first", "low", "high", "lonode", "hinode", "lonodex", "hinodex", "firstnodex",
            "variation"]

GRUGS = TESTDATA / "data" / "resource" / "grugs"

RECIPE = {"cluster": "c", "racks": 2, "nodes_per_rack": 4, "sockets": 2, "cores_per_socket": 4,
          "gpus_per_socket": 1, "memory_per_socket": [2, 8]}


def nodes_job(count: int, slots: int, duration: int = 100) -> dict:
    return {"version": 1, "resources": [{"type": "node", "count": count, "exclusive": True,
            "with": [{"type": "slot", "count": slots, "label": "t",
                      "with": [{"type": "core", "count": 1}]}]}],
            "attributes": {"system": {"duration": duration}},
            "tasks": [{"command": ["a"], "slot": "t", "count": {"per_slot": 1}}]}


def core_job(cores: int = 1, duration: int = 100) -> dict:
    return {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "t",
            "with": [{"type": "core", "count": cores}]}],
            "attributes": {"system": {"duration": duration}},
            "tasks": [{"command": ["a"], "slot": "t", "count": {"per_slot": 1}}]}


def plain(m: Matcher) -> Matcher:
    """Disable the replay and the held-children skip on ``m``."""
    m.trav._untouched = lambda u: False
    m.trav._held_kids = _Never()
    return m


class _Never(dict):
    def __setitem__(self, key, value) -> None:  # never remember a held child
        pass


def outcome(m: Matcher, op):
    try:
        r = op(m)
    except Busy:
        return "busy"
    if r is None or isinstance(r, bool):
        return r
    return (r.status, r.at, r.nodes, r.slots, sorted(r.emitted), r.R["execution"])


def planner_state(m: Matcher) -> dict:
    t = m.trav
    out = {}
    for kind, table in (("s", t.sched), ("x", t.xcheck)):
        for v, p in table.items():
            if p.spans:
                out[(kind, v)] = (list(p.times), list(p.usage))
    for v, p in t.agg.items():
        if p.spans:
            for rtype in p.types:
                out[("a", v, rtype)] = (list(p.times), p.column(rtype))
    return out


def run_both(policy: str, ops) -> None:
    fast = Matcher(graph_from_recipe(RECIPE), policy=policy)
    ref = plain(Matcher(graph_from_recipe(RECIPE), policy=policy))
    for op in ops:
        assert outcome(fast, op) == outcome(ref, op), op
        assert planner_state(fast) == planner_state(ref)
        check_invariants(fast)
    return fast


@pytest.mark.parametrize("policy", POLICIES)
def test_node_exclusive_jobs_replayed_as_traversed(policy: str) -> None:
    ops = [lambda m: m.match(core_job(2)),
           lambda m: m.match(nodes_job(2, 8)),
           lambda m: m.match(nodes_job(1, 3)),
           lambda m: m.match(nodes_job(3, 8), op="allocate_orelse_reserve"),
           lambda m: m.cancel(2),
           lambda m: m.match(nodes_job(2, 8)),
           lambda m: m.partial_cancel(5, m.info(5).nodes[:1]),
           lambda m: m.match(nodes_job(1, 8)),
           lambda m: m.cancel(1),
           lambda m: m.match(nodes_job(4, 8), op="allocate_orelse_reserve")]
    fast = run_both(policy, ops)
    assert fast.trav._templates, "no subtree was recorded for replay"


@pytest.mark.parametrize("policy", ["low", "first", "hinodex"])
def test_holds_that_ended_free_their_nodes(policy: str) -> None:
    """Children held until t=10 are candidates again once the clock passes 10."""
    def advance(m: Matcher) -> None:
        m.now = 20

    ops = [lambda m: m.match(nodes_job(4, 8, duration=10)),
           lambda m: m.match(nodes_job(4, 8, duration=10)),
           lambda m: m.match(nodes_job(1, 8)),
           advance,
           lambda m: m.match(nodes_job(4, 8)),
           lambda m: m.match(nodes_job(3, 8))]
    run_both(policy, ops)


@pytest.mark.parametrize("policy", ["low", "first"])
def test_a_down_core_changes_the_shape(policy: str) -> None:
    def down(m: Matcher) -> None:
        m.set_status(m.graph.path(next(v for v in range(len(m.graph))
                                       if m.graph.type[v] == "core")), "down")

    ops = [lambda m: m.match(nodes_job(1, 8)), down,
           lambda m: m.cancel(1),
           lambda m: m.match(nodes_job(8, 8)),
           lambda m: m.match(nodes_job(7, 8))]
    run_both(policy, ops)


def test_partial_cancel_of_a_held_node_drops_its_vertices_from_R() -> None:
    m = Matcher(graph_from_recipe(RECIPE), policy="lonodex")
    r = m.match(nodes_job(2, 8))
    first, second = r.nodes
    assert m.partial_cancel(r.jobid, [first]) is False
    names = {n["metadata"]["name"] for n in m.info(r.jobid).R["scheduling"]["graph"]["nodes"]}
    paths = [m.graph.path(v) for _, v, _, _, _ in m.info(r.jobid).emitted]
    assert first not in names and second in names
    assert not [p for p in paths if f"/{first}/" in p]
    assert m.info(r.jobid).slots and all(list(s) == [second] for s in m.info(r.jobid).slots)


def test_first_order_kept_incrementally_matches_a_fresh_sort() -> None:
    m = Matcher(graph_from_recipe(RECIPE), policy="first")
    for _ in range(12):
        m.match(core_job(1))
    m.cancel(3)
    m.match(nodes_job(1, 8))
    trav = m.trav
    for u, order in trav._order_cache.items():
        w = trav.weights.get(u, {})
        uid = m.graph.uniq_id
        assert list(order) == sorted(trav._children(u),
                                     key=lambda c: (w.get(c, 1 << 64), uid[c]), reverse=True)


def test_a_full_template_table_starts_over(monkeypatch) -> None:
    from fluxinfra.matcher.traverser import dfu

    monkeypatch.setattr(dfu, "MAX_TEMPLATES", 1)
    ops = [lambda m: m.match(nodes_job(2, 8)), lambda m: m.match(nodes_job(2, 3)),
           lambda m: m.match(nodes_job(1, 5)), lambda m: m.match(nodes_job(2, 8))]
    fast = run_both("low", ops)
    assert len(fast.trav._templates) <= 1


def assert_hinted_shapes_are_walked(g, nodes: list[int], policy: str) -> None:
    """Each node's shape worked out through its layout hint is the full walk's, and alike."""
    hinted = Matcher(g, policy=policy).trav
    walked = Matcher(g, policy=policy).trav
    saved, g.layouts = g.layouts, {}
    full = [walked._shape(v) for v in nodes]
    g.layouts = saved
    assert [hinted._shape(v) for v in nodes] == [full[0]] * len(nodes) == full


@pytest.mark.parametrize("policy", ["first", "low", "variation"])
def test_layout_hints_name_the_shapes_a_full_walk_finds(policy: str) -> None:
    """graph_from_recipe marks its nodes as built alike; a traverser then works a node's shape
    out once. Every hinted shape must be the one the full walk computes; a status change
    below a node drops its hint (and the shapes), a structural change drops them all."""
    g = graph_from_recipe(RECIPE)
    nodes = [v for v in range(len(g)) if g.type[v] == "node"]
    assert set(g.layouts) == set(nodes)
    assert_hinted_shapes_are_walked(g, nodes, policy)
    m = Matcher(g, policy=policy)
    core = next(v for v in range(len(g)) if g.type[v] == "core")
    m.set_status(g.path(core), "down")
    assert nodes[0] not in g.layouts and nodes[1] in g.layouts
    assert m.trav._shape(nodes[0]) != m.trav._shape(nodes[1])
    m.remove_subgraph(g.path(nodes[-1]))
    assert g.layouts == {}


@pytest.mark.parametrize("policy", ["first", "low", "variation"])
def test_grug_layout_hints_name_the_shapes_a_full_walk_finds(policy: str) -> None:
    """The GRUG reader marks the vertices of a recipe kind as built alike when every id below
    them restarts within each (the benchmark's machines: their nodes; not the sockets, whose
    cores are numbered per node). Every hinted shape is the one the full walk computes."""
    g = load_graph(recipe_to_grug(RECIPE), fmt="grug")
    nodes = [v for v in range(len(g)) if g.type[v] == "node"]
    assert set(g.layouts) == set(nodes)
    assert_hinted_shapes_are_walked(g, nodes, policy)


@pytest.mark.parametrize("source", ["recipe", "grug", "fluxion"])
def test_subtrees_of_one_layout_list_the_same_names_sizes_and_depths(source: str) -> None:
    """What a writer may reuse per layout (Traverser.held_text): below every vertex of one
    layout, the same names, sizes and depths in post-order (both builders name a vertex by
    its basename and id)."""
    if source == "recipe":
        g = graph_from_recipe(RECIPE)
    elif source == "grug":
        g = load_graph(recipe_to_grug(RECIPE), fmt="grug")
    else:
        g = load_graph((GRUGS / "medium.graphml").read_text(), fmt="grug")
    assert g.layouts
    trav = Matcher(g, policy="first").trav
    seen: dict[int, tuple] = {}
    for v, layout in g.layouts.items():
        depths, post = trav._post_below(v)
        below = (bytes(depths), [g.name[c] for c in post], [g.size[c] for c in post])
        assert seen.setdefault(layout, below) == below, (source, v)


def test_grug_ids_counted_across_instances_give_no_layout() -> None:
    # cores numbered per rack (id_scope 2 below the socket): nodes differ, none is marked
    text = recipe_to_grug(RECIPE).replace(
        '<edge id="socket2core" source="socket" target="core"><data key="multi_scale">4</data>'
        '<data key="id_scope">1</data>',
        '<edge id="socket2core" source="socket" target="core"><data key="multi_scale">4</data>'
        '<data key="id_scope">3</data>')
    assert 'id_scope">3<' in text
    g = load_graph(text, fmt="grug")
    assert not any(g.type[v] == "node" for v in g.layouts)


@pytest.mark.parametrize("policy", ["variation", "low"])
def test_a_property_set_drops_the_layout_and_what_was_remembered(policy: str) -> None:
    # resource-query's set-property between matches (variation ranks by perf_class)
    ours = Matcher(load_graph(recipe_to_grug(RECIPE), fmt="grug"), policy=policy)
    ref = Matcher(load_graph(recipe_to_grug(RECIPE), fmt="grug"), policy=policy, exact=True)
    nodes = [v for v in range(len(ours.graph)) if ours.graph.type[v] == "node"]
    steps = [lambda m: m.match(core_job(1)), lambda m: m.match(nodes_job(1, 2))]
    steps += [lambda m, v=v, i=i: m.set_property(v, "perf_class", str(3 - i % 3))
              for i, v in enumerate(nodes)]
    steps += [lambda m: m.match(nodes_job(2, 1)), lambda m: m.match(core_job(1))] * 3
    for step in steps:
        assert outcome(ours, step) == outcome(ref, step)
    assert not any(v in ours.graph.layouts for v in nodes)
