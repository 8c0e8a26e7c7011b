"""The express lane (``fluxinfra/matcher/express.py``) decides exactly what the traversal does.

Random operation sequences on random graphs run on two matchers, one with the express lane
turned off (``trav.express = None``); every outcome, every planner, ``first``'s child weights
must agree after every step; a fixed sequence checks that the lane really answers.
"""

from __future__ import annotations

import random

import pytest
from matcher_testlib import check_invariants
from test_fast_paths import core_job, nodes_job, outcome, planner_state

import fluxinfra.matcher.matcher as matcher_module
from fluxinfra.matcher import Matcher, MatcherError
from fluxinfra.matcher.express import Express
from fluxinfra.matcher.recipe import graph_from_recipe
from fluxinfra.matcher.traverser import dfu

POLICIES = ["first", "firstnodex", "policy=low node_exclusive=true stop_on_1_matches=true",
            "policy=high node_centric=true node_exclusive=true stop_on_1_matches=true"]
#: first-fit policies that hold no node whole: one-slot requests take shape C
SLOT_POLICIES = ["first", "policy=high stop_on_1_matches=true",
                 "policy=low node_centric=true stop_on_1_matches=true"]


def random_recipe(rng: random.Random) -> dict:
    return {"cluster": "x", "racks": rng.randint(1, 3), "nodes_per_rack": rng.randint(1, 6),
            "sockets": rng.randint(1, 2), "cores_per_socket": rng.randint(1, 4),
            "gpus_per_socket": rng.randint(0, 1), "memory_per_socket": [rng.randint(1, 2), 4]}


def random_op(rng: random.Random):
    kind = rng.random()
    duration = rng.choice([10, 100, 0])
    if kind < 0.35:
        count, slots = rng.randint(1, 4), rng.randint(1, 6)
        spec = nodes_job(count, slots, duration)
        if rng.random() < 0.3:
            del spec["resources"][0]["exclusive"]  # whole node only if the policy says so
        op = rng.choice(["allocate", "allocate", "allocate_orelse_reserve"])
        return lambda m: m.match(spec, op=op)
    if kind < 0.6:
        spec = core_job(rng.randint(1, 5), duration)
        return lambda m: m.match(spec)
    if kind < 0.75:
        pick = rng.random()
        return lambda m: m.cancel(sorted(m.jobs)[int(pick * len(m.jobs))]) if m.jobs else None
    if kind < 0.82:
        pick = rng.random()

        def partial(m: Matcher):
            if not m.jobs:
                return None
            job = sorted(m.jobs)[int(pick * len(m.jobs))]
            return m.partial_cancel(job, m.info(job).nodes[:1])
        return partial
    if kind < 0.9:
        pick, state = rng.random(), rng.choice(["down", "up"])

        def status(m: Matcher):
            nodes = [v for v in range(len(m.graph)) if m.graph.type[v] == "node"]
            m.set_status(m.graph.path(nodes[int(pick * len(nodes))]), state)
        return status
    step = rng.choice([5, 50])

    def advance(m: Matcher):
        m.now += step
    return advance


def weights_state(m: Matcher) -> dict:
    return {u: dict(w) for u, w in m.trav.weights.items() if w}


def jobs_state(m: Matcher) -> dict:
    """Everything each job holds, emitted vertices in order (the express commit must leave
    what the general commit leaves, not only the same outcome)."""
    out = {}
    for jobid, job in m.jobs.items():
        agg = {a: (span, m.trav.agg[a].amounts(span)) for a, span in job.agg.items()}
        out[jobid] = (list(job.vertices), job.used, job.sched, job.xspans, agg,
                      set(job.whole), job.reweigh)
    held = {p: dict(hk.kids) for p, hk in m.trav._held_kids.items() if hk.kids}
    return {"jobs": out, "held": held, "whole": {v: n for v, n in m.trav._whole.items() if n}}


def guarded(m: Matcher, op):
    try:
        return outcome(m, op)
    except MatcherError as exc:
        return f"{type(exc).__name__}: {exc}"


def replay_both(policy: str, rng: random.Random, make_op, steps: int) -> list:
    """Run ``steps`` random operations on two matchers of a random graph, the express lane
    on in one and off in the other; after every step outcome, planners, ``first``'s weights
    and every job's books must agree. Returns what each express commit answered."""
    recipe = random_recipe(rng)
    fast = Matcher(graph_from_recipe(recipe), policy=policy)
    ref = Matcher(graph_from_recipe(recipe), policy=policy)
    ref.trav.express = None
    commits: list = []
    commit = fast.trav.express.commit
    fast.trav.express.commit = lambda *args: commits.append(commit(*args)) or commits[-1]
    for step in range(steps):
        op = make_op(rng)
        got, want = guarded(fast, op), guarded(ref, op)
        assert got == want, (recipe, step)
        assert planner_state(fast) == planner_state(ref), (recipe, step)
        assert weights_state(fast) == weights_state(ref), (recipe, step)
        assert jobs_state(fast) == jobs_state(ref), (recipe, step)
        check_invariants(fast)
    return commits


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(30))
def test_express_matches_the_traversal(policy: str, seed: int) -> None:
    replay_both(policy, random.Random(f"{policy}/{seed}"), random_op, 60)


def single_node_op(rng: random.Random):
    """Mostly one-node and one-core requests (what the express commit takes), with cancels,
    partial cancels, status changes and time moving on between them."""
    kind = rng.random()
    duration = rng.choice([10, 100, 0])
    if kind < 0.3:
        spec = nodes_job(1, rng.randint(1, 4), duration)
        return lambda m: m.match(spec)
    if kind < 0.6:
        spec = core_job(rng.randint(1, 2), duration)
        op = rng.choice(["allocate", "allocate_orelse_reserve"])
        return lambda m: m.match(spec, op=op)
    return random_op(rng)


@pytest.mark.parametrize("policy", POLICIES)
def test_express_commit_leaves_what_the_general_commit_leaves(policy: str) -> None:
    commits = []
    for seed in range(10):
        commits += replay_both(policy, random.Random(f"single/{policy}/{seed}"),
                               single_node_op, 80)
    if "nodex" in policy or "exclusive" in policy:  # whole nodes: the express commit ran
        assert sum(n is not None for n in commits) >= 20, commits


@pytest.mark.parametrize("policy", ["firstnodex", "first"])
def test_a_filled_graph_is_the_same_either_way(policy: str) -> None:
    recipe = {"cluster": "c", "racks": 2, "nodes_per_rack": 6, "sockets": 2,
              "cores_per_socket": 4, "gpus_per_socket": 1, "memory_per_socket": [2, 8]}
    fast = Matcher(graph_from_recipe(recipe), policy=policy)
    ref = Matcher(graph_from_recipe(recipe), policy=policy)
    ref.trav.express = None
    answered = []
    select = fast.trav.express.select
    fast.trav.express.select = lambda *args: answered.append(select(*args)) or answered[-1]
    ops = [lambda m: m.match(nodes_job(1, 8))] * 3 + [lambda m: m.match(core_job(1))] * 3
    ops += [lambda m: m.match(nodes_job(2, 4))] * 4 + [lambda m: m.cancel(2),
                                                       lambda m: m.cancel(5)]
    ops += [lambda m: m.match(nodes_job(3, 8))] * 3
    for op in ops:
        assert outcome(fast, op) == outcome(ref, op)
        assert planner_state(fast) == planner_state(ref)
        assert weights_state(fast) == weights_state(ref)
        assert jobs_state(fast) == jobs_state(ref)
    # whole-node requests answered by the lane (and, under firstnodex, one-core requests
    # after it learnt the node shape from one traversal)
    assert answered.count(True) >= (6 if policy == "firstnodex" else 4), str(answered)


def slot_job(members: list[str], duration: int = 100) -> dict:
    return {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "t",
            "with": [{"type": t, "count": 1} for t in members]}],
            "attributes": {"system": {"duration": duration}},
            "tasks": [{"command": ["a"], "slot": "t", "count": {"per_slot": 1}}]}


def slot_op(rng: random.Random):
    """Mostly one-slot requests of one unit of each member (the lane's shape C: one core,
    a core and a GPU, a memory pool, ...), between cancels, partial cancels, status
    changes, time moving on and the other shapes."""
    if rng.random() < 0.55:
        members = rng.choice([["core"], ["core"], ["core"], ["core", "gpu"], ["memory"],
                              ["gpu", "core", "memory"], ["gpu"]])
        spec = slot_job(members, rng.choice([10, 100, 0]))
        op = rng.choice(["allocate", "allocate", "allocate", "allocate_orelse_reserve"])
        return lambda m: m.match(spec, op=op)
    return single_node_op(rng)


@pytest.mark.parametrize("policy", SLOT_POLICIES)
def test_one_slot_express_is_the_traversal(policy: str, monkeypatch) -> None:
    """Shape C (``slot[1]{core[1]}`` under ``first``): the lane's selection and commit leave
    what the traversal and the general commit leave, after every step of random
    sequences, and the lane really answers most of those requests."""
    answered = []

    class Counted(Express):  # (compiled, Express is an extension type: its methods stay put)
        def _commit_slot(self, *args):
            answered.append(super()._commit_slot(*args))
            return answered[-1]

    monkeypatch.setattr(matcher_module, "Express", Counted)
    for seed in range(12):
        rng = random.Random(f"slot/{policy}/{seed}")
        replay_both(policy, rng, slot_op, 70)
    assert sum(n is not None for n in answered) >= 150, len(answered)


def test_one_core_stream_fills_a_machine_the_same_either_way() -> None:
    """A 1-core stream under ``first`` until the machine is full, then cancels and matches
    again: every answer and the final state as without the lane."""
    recipe = {"cluster": "c", "racks": 2, "nodes_per_rack": 3, "sockets": 2,
              "cores_per_socket": 3, "gpus_per_socket": 1, "memory_per_socket": [1, 4]}
    fast = Matcher(graph_from_recipe(recipe), policy="first")
    ref = Matcher(graph_from_recipe(recipe), policy="first")
    ref.trav.express = None
    ops = [lambda m: m.match(core_job(1))] * 40 + [lambda m: m.cancel(5),
                                                    lambda m: m.cancel(17)]
    ops += [lambda m: m.match(core_job(1))] * 3
    for op in ops:
        assert guarded(fast, op) == guarded(ref, op)
        assert planner_state(fast) == planner_state(ref)
        assert weights_state(fast) == weights_state(ref)
        assert jobs_state(fast) == jobs_state(ref)
    assert len(fast.jobs) == 36


def shared_slot_op(specs: dict):
    """slot_op, but a request of the same members and duration is the same object every
    time (as a scheduler's repeated request is): the lane then keeps, per vertex, how many
    of its leaves it already found busy in that window, and must forget it when a cancel,
    a partial cancel, a status change or time moving on makes one free again."""

    def make(rng: random.Random):
        if rng.random() < 0.6:
            members = rng.choice([("core",), ("core",), ("core",), ("core", "gpu")])
            duration = rng.choice([10, 100])
            spec = specs.setdefault((members, duration), slot_job(list(members), duration))
            return lambda m: m.match(spec)
        return single_node_op(rng)
    return make


@pytest.mark.parametrize("policy", SLOT_POLICIES)
def test_one_slot_lane_remembers_busy_leaves_only_while_they_are(policy: str,
                                                                   monkeypatch) -> None:
    seen: list[bool] = []

    class Spied(Express):  # (compiled, Express is an extension type: its methods stay put)
        def _slot_members(self, u, members, meta):
            before = self._busy.get(u)
            seen.append(before is not None and before[5] > 0)
            return super()._slot_members(u, members, meta)

    monkeypatch.setattr(matcher_module, "Express", Spied)
    for seed in range(10):
        specs: dict = {}
        rng = random.Random(f"shared-slot/{policy}/{seed}")
        replay_both(policy, rng, shared_slot_op(specs), 90)
    assert sum(seen) >= 50, sum(seen)  # the remembered prefix really was used


def one_socket_both_ways(cores: int, gpus: int) -> tuple[Matcher, Matcher]:
    """Two ``first`` matchers of a one-socket machine: the express lane on in the first,
    off in the second."""
    recipe = {"cluster": "c", "racks": 1, "nodes_per_rack": 1, "sockets": 1,
              "cores_per_socket": cores, "gpus_per_socket": gpus, "memory_per_socket": [1, 4]}
    fast = Matcher(graph_from_recipe(recipe), policy="first")
    ref = Matcher(graph_from_recipe(recipe), policy="first")
    ref.trav.express = None
    return fast, ref


def test_one_core_stream_passes_the_busy_cores_it_knows() -> None:
    """One request object, matched again and again: each match starts past the cores the
    last one found busy (not at the socket's first core), and a cancel brings the freed
    core back first, as the traversal would pick it."""
    fast, ref = one_socket_both_ways(cores=6, gpus=1)
    spec = core_job(1)
    for _ in range(4):
        assert fast.match(spec).emitted == ref.match(spec).emitted
    socket = next(v for v in range(len(fast.graph)) if fast.graph.type[v] == "socket")
    known = fast.trav.express._busy[socket]
    assert known[5] > 0  # cores passed by next time
    fast.cancel(2)
    ref.cancel(2)
    assert socket not in fast.trav.express._busy  # forgotten: a core below went free
    for _ in range(3):
        assert fast.match(spec).emitted == ref.match(spec).emitted
    assert planner_state(fast) == planner_state(ref)


def test_one_slot_lane_forgets_its_paths_when_the_tree_changes() -> None:
    """The lane keeps, per slot vertex, what a commit there emits and which vertices of its
    path ``first`` re-ranks (a sole child has no siblings to be ranked against). A node added
    beside the only node of a rack makes that node rankable: the kept path must go with the
    old tree, or the rack's weights would differ from the traversal's."""
    fast, ref = one_socket_both_ways(cores=4, gpus=0)
    spec = core_job(1)
    for _ in range(2):
        assert outcome(fast, lambda m: m.match(spec)) == outcome(ref, lambda m: m.match(spec))
    assert fast.trav.express._path_facts  # the socket's path was kept
    jgf = {"graph": {"nodes": [
        {"id": "0", "metadata": {"type": "rack", "paths": {"containment": "/c0/rack0"}}},
        {"id": "1", "metadata": {"type": "node", "name": "node1", "id": 1,
                                 "paths": {"containment": "/c0/rack0/node1"}}},
        {"id": "2", "metadata": {"type": "socket", "id": 0}},
        *({"id": str(3 + i), "metadata": {"type": "core", "id": i}} for i in range(4))],
        "edges": [{"source": "0", "target": "1"}, {"source": "1", "target": "2"},
                  *({"source": "2", "target": str(3 + i)} for i in range(4))]}}
    for m in (fast, ref):
        m.add_subgraph(jgf)
    assert not fast.trav.express._path_facts
    for _ in range(5):
        assert outcome(fast, lambda m: m.match(spec)) == outcome(ref, lambda m: m.match(spec))
        assert planner_state(fast) == planner_state(ref)
        assert weights_state(fast) == weights_state(ref)
    rack = fast.graph.roots["containment"] + 1
    assert fast.graph.type[rack] == "rack" and fast.trav.weights.get(rack)


@pytest.mark.parametrize("policy", POLICIES + ["low", "locality"])
def test_a_cancel_leaves_what_releasing_each_vertex_leaves(policy: str) -> None:
    """A cancel takes ``Traverser._release_all``; releasing the same vertices named one by
    one (``release(job, vertices)``: partial cancels' path, which also works out what the
    ancestors keep) must leave the same planners, weights and books after every step."""
    from fluxinfra.matcher.traverser import Traverser

    whole_cancels = 0
    for seed in range(12):
        rng = random.Random(f"cancel/{policy}/{seed}")
        recipe = random_recipe(rng)
        fast = Matcher(graph_from_recipe(recipe), policy=policy)
        ref = Matcher(graph_from_recipe(recipe), policy=policy)
        released_all = fast.trav._release_all

        def counted(job, _all=released_all):
            nonlocal whole_cancels
            whole_cancels += 1
            return _all(job)

        fast.trav._release_all = counted

        def named(job, vertices=None, _ref=ref.trav):
            if vertices is None:
                vertices = set(job.sched) | set(job.xspans)
            return Traverser.release(_ref, job, vertices)

        ref.trav.release = named
        for step in range(70):
            op = random_op(rng)
            assert guarded(fast, op) == guarded(ref, op), (recipe, step)
            assert planner_state(fast) == planner_state(ref), (recipe, step)
            assert weights_state(fast) == weights_state(ref), (recipe, step)
            assert jobs_state(fast) == jobs_state(ref), (recipe, step)
            check_invariants(fast)
    assert whole_cancels >= 50, whole_cancels  # the fast release really ran


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("seed", range(6))
def test_stamps_made_between_walks_keep_the_walks_memo_true(policy: str, seed: int,
                                                            monkeypatch) -> None:
    """Commits and cancels stamp the vertices they changed once ``_RESTAMP_AT`` wait (here
    every time), not only the next full walk: the walk's memo must still forget exactly
    the subtrees that changed. Reference: a matcher whose memo is emptied before each step
    (every subtree walked afresh), the lane off."""
    monkeypatch.setattr(dfu, "_RESTAMP_AT", 1)
    rng = random.Random(f"stamps/{policy}/{seed}")
    recipe = random_recipe(rng)
    kept = Matcher(graph_from_recipe(recipe), policy=policy)
    bare = Matcher(graph_from_recipe(recipe), policy=policy)
    bare.trav.express = None
    clock = kept.trav._clock
    for step in range(80):
        op = single_node_op(rng)
        bare.trav._memo.clear()
        assert guarded(kept, op) == guarded(bare, op), (recipe, step)
        assert planner_state(kept) == planner_state(bare), (recipe, step)
        assert weights_state(kept) == weights_state(bare), (recipe, step)
        assert jobs_state(kept) == jobs_state(bare), (recipe, step)
    assert kept.trav._clock > clock


def test_a_stream_the_lane_serves_keeps_few_changes_waiting(monkeypatch) -> None:
    """Whole-node jobs the express lane answers (no full walk after the first) and their
    cancels: the changed vertices waiting for a stamp stay under ``_RESTAMP_AT`` plus one
    job's worth, where they used to grow with every job until a walk."""
    monkeypatch.setattr(dfu, "_RESTAMP_AT", 16)
    recipe = {"cluster": "c", "racks": 2, "nodes_per_rack": 8, "sockets": 2,
              "cores_per_socket": 4, "gpus_per_socket": 1, "memory_per_socket": [2, 8]}
    m = Matcher(graph_from_recipe(recipe), policy="firstnodex")
    answered = []
    select = m.trav.express.select
    m.trav.express.select = lambda *args: answered.append(select(*args)) or answered[-1]
    most = 0
    for _ in range(200):
        job = m.match(nodes_job(1, 1))
        most = max(most, len(m.trav._dirty))
        if len(m.jobs) > 8:
            m.cancel(min(m.jobs))
            most = max(most, len(m.trav._dirty))
    assert answered.count(True) >= 190, answered
    assert 0 < most < 16 + 2 * len(job.emitted), most
