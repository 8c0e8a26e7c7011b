"""The default matcher decides exactly what Fluxion's full walk decides (``exact=True``).

The default walk explores children in the policy's order and stops early under a guard, and
its commit books a subtree held whole on the subtree's root alone (with the express lane,
templates, held-children sets, free orders...). ``Matcher(..., exact=True)`` does none of
that: every candidate is scored and ranked (libstdc++'s sort order), every vertex of a held
subtree gets its own spans, as in Fluxion. Random operation sequences on random graphs run on
both; after every step the outcome (vertices in emission order, amounts, R, slots), what
``find`` reports and what a cancel counts (resource-query's ``cancel ID stats``) must agree.
"""

from __future__ import annotations

import random

import pytest
from matcher_testlib import check_invariants
from test_express import random_op, random_recipe
from test_fast_paths import core_job, nodes_job

from fluxinfra.matcher import Matcher, MatcherError
from fluxinfra.matcher.find import find_vertices
from fluxinfra.matcher.recipe import graph_from_recipe
from fluxinfra.matcher.traverser import dfu

POLICIES = ["first", "firstnodex", "low", "high", "lonode", "hinode", "lonodex", "hinodex",
            "locality", "variation", "policy=low node_exclusive=true",
            "policy=high node_centric=true node_exclusive=true stop_on_1_matches=true"]
FINDS = ["sched-now=allocated", "sched-future=reserved", "status=down"]
PER_JOB = ["jobid-alloc", "jobid-tag", "jobid-span", "jobid-reserved"]


def slot_job(slots: int, cores: int, gpus: int, duration: int) -> dict:
    """A pod group: ``slots`` x {core[cores], gpu[gpus]} at the top (slots merged from every
    socket: the ranking the guard has to get right)."""
    members = [{"type": "core", "count": cores}]
    if gpus:
        members.append({"type": "gpu", "count": gpus})
    return {"version": 1, "resources": [{"type": "slot", "count": slots, "label": "t",
                                         "with": members}],
            "attributes": {"system": {"duration": duration}},
            "tasks": [{"command": ["a"], "slot": "t", "count": {"per_slot": 1}}]}


def shared_nodes_job(nodes: int, cores: int, duration: int) -> dict:
    return {"version": 1, "resources": [{"type": "node", "count": nodes, "with": [
        {"type": "socket", "count": 1, "with": [
            {"type": "slot", "count": 1, "label": "t",
             "with": [{"type": "core", "count": cores}]}]}]}],
            "attributes": {"system": {"duration": duration}},
            "tasks": [{"command": ["a"], "slot": "t", "count": {"per_slot": 1}}]}


def mixed_op(rng: random.Random):
    kind = rng.random()
    duration = rng.choice([10, 100, 0])
    if kind < 0.25:
        spec = slot_job(rng.randint(1, 4), rng.randint(1, 2), rng.randint(0, 1), duration)
        op = rng.choice(["allocate", "allocate", "allocate_orelse_reserve"])
        return lambda m: m.match(spec, op=op)
    if kind < 0.35:
        spec = shared_nodes_job(rng.randint(1, 2), rng.randint(1, 3), duration)
        return lambda m: m.match(spec)
    if kind < 0.45:
        spec = core_job(rng.randint(1, 3), duration) if rng.random() < 0.5 else \
            nodes_job(rng.randint(1, 2), rng.randint(1, 4), duration)
        return lambda m: m.match(spec, op="allocate_with_satisfiability")
    return random_op(rng)


def observe(m: Matcher, op):
    """What a user sees of ``op``: its result (or error), then ``find`` and cancel counts."""
    try:
        r = op(m)
    except MatcherError as exc:
        got = f"{type(exc).__name__}: {exc}"
    else:
        if r is None or isinstance(r, bool):
            got = r
        else:
            got = (r.status, r.at, r.nodes, list(r.emitted), r.R, r.slots)
    seen = [find_vertices(m, expr) for expr in FINDS]
    for jobid in sorted(m.jobs):
        seen += [find_vertices(m, f"{key}={jobid}") for key in PER_JOB]
    return got, seen, m.last_cancel_counts


def replay(policy: str, seed: int, steps: int) -> None:
    rng = random.Random(f"exact/{policy}/{seed}")
    recipe = random_recipe(rng)
    ours = Matcher(graph_from_recipe(recipe), policy=policy)
    ref = Matcher(graph_from_recipe(recipe), policy=policy, exact=True)
    for step in range(steps):
        op = mixed_op(rng)
        assert observe(ours, op) == observe(ref, op), (recipe, step)
        check_invariants(ours)


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(8))
def test_the_default_walk_is_fluxions_walk(policy: str, seed: int) -> None:
    replay(policy, seed, 40)


@pytest.mark.parametrize("policy", ["low", "high", "variation", "locality"])
@pytest.mark.parametrize("seed", range(3))
def test_long_candidate_lists_rank_as_fluxion(policy: str, seed: int) -> None:
    # a machine large enough that one ranking merges hundreds of slots from remembered
    # subtrees (ranked from their scores, std::sort's ties included)
    rng = random.Random(f"long/{policy}/{seed}")
    recipe = {"cluster": "x", "racks": 2, "nodes_per_rack": 8, "sockets": 2,
              "cores_per_socket": 8, "gpus_per_socket": 1, "memory_per_socket": [2, 4]}
    ours = Matcher(graph_from_recipe(recipe), policy=policy)
    ref = Matcher(graph_from_recipe(recipe), policy=policy, exact=True)
    for step in range(30):
        op = mixed_op(rng)
        assert observe(ours, op) == observe(ref, op), (recipe, step)


@pytest.mark.parametrize("policy", ["low", "high", "locality", "variation",
                                    "policy=low node_exclusive=true"])
@pytest.mark.parametrize("seed", range(2))
def test_wide_vertices_pass_their_children_up_in_blocks_as_fluxion_walks_them(
        policy: str, seed: int) -> None:
    # racks of 37 nodes and sockets of 18 cores: more children than dfu._WIDE, so the
    # default walk passes them up in blocks of dfu._BLOCK (the last one short), each
    # block reused whole while none of its subtrees changed; the candidates must come out
    # in the order the full walk gathers them child by child
    rng = random.Random(f"wide/{policy}/{seed}")
    recipe = {"cluster": "x", "racks": 1, "nodes_per_rack": 37, "sockets": 1,
              "cores_per_socket": 18, "gpus_per_socket": 1, "memory_per_socket": [1, 4]}
    assert recipe["nodes_per_rack"] % dfu._BLOCK and \
        recipe["nodes_per_rack"] > dfu._WIDE < recipe["cores_per_socket"]
    ours = Matcher(graph_from_recipe(recipe), policy=policy)
    ref = Matcher(graph_from_recipe(recipe), policy=policy, exact=True)
    for step in range(25):
        op = mixed_op(rng)
        assert observe(ours, op) == observe(ref, op), (recipe, step)
        check_invariants(ours)
    blocks = [kept[2] for key, kept in ours.trav._memo.items()
              if type(key) is tuple and key[0] == dfu._WIDE_KEY]
    assert blocks and max(map(len, blocks)) == 3  # the block path ran (37 = 16 + 16 + 5)


def node_slots_job(nodes: int, slot_min: int, slot_max: int, cores: int) -> dict:
    """``node[n]{slot[min:max, *2]{socket[1]{core[c]}}}``: each node ranks its slots (Fluxion's
    t3009/min_max jobspecs, on a smaller machine)."""
    count = {"min": slot_min, "max": slot_max, "operator": "*", "operand": 2} \
        if slot_max > slot_min else slot_min
    return {"version": 9999, "resources": [{"type": "node", "count": nodes, "with": [
        {"type": "slot", "label": "t", "count": count, "with": [
            {"type": "socket", "count": 1, "with": [{"type": "core", "count": cores}]}]}]}],
            "attributes": {"system": {"duration": 57600}},
            "tasks": [{"command": ["a"], "slot": "t", "count": {"per_slot": 1}}]}


@pytest.mark.parametrize("policy", ["locality", "variation", "high", "low"])
def test_a_node_replayed_from_its_layout_inside_a_remembered_rack(policy: str) -> None:
    # t3009/min_max/001's sequence: a later match takes a node whose outcome was replayed
    # from its layout while walking a rack now remembered whole; the rankings inside that
    # node must still be made again for the commit (they were not: the job held nothing)
    recipe = {"cluster": "x", "racks": 2, "nodes_per_rack": 2, "sockets": 2,
              "cores_per_socket": 4, "gpus_per_socket": 0, "memory_per_socket": [1, 4]}
    ours = Matcher(graph_from_recipe(recipe), policy=policy)
    ref = Matcher(graph_from_recipe(recipe), policy=policy, exact=True)
    pair, many = node_slots_job(1, 1, 2, 4), node_slots_job(2, 1, 1, 4)
    ops = [lambda m: m.match(pair), lambda m: m.match(many), lambda m: m.match(pair),
           lambda m: m.cancel(2), lambda m: m.match(pair), lambda m: m.match(pair),
           lambda m: m.match(pair)]
    for step, op in enumerate(ops):
        got, want = observe(ours, op), observe(ref, op)
        assert got == want, step
        check_invariants(ours)
