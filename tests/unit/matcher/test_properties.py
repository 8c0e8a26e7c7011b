"""Property-based tests: random graphs, jobspecs and operation sequences keep the invariants.

* no crash: anything raised is a typed ``FluxinfraError`` (Busy, Unsatisfiable, JobspecError ...);
* no vertex is ever allocated beyond its size, and an exclusively held vertex (or anything below
  it) is in no other job that overlaps it in time — checked from the matcher's planners
  (``conftest.check_invariants``) and, independently, from the R of every live job;
* ``cancel`` restores the exact prior state (planners, exclusivity checkers, subtree
  aggregates), and the same request then gets the same answer (except under ``first``, whose
  child order follows how free children are, as in Fluxion);
* ``partial_cancel`` of some nodes followed by the rest leaves the same state as one ``cancel``.

Examples per test: 100 (``FLUXINFRA_HYPOTHESIS_EXAMPLES`` overrides), no deadline.
"""

from __future__ import annotations

import contextlib
import os

import pytest
from conftest import check_invariants
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from fluxinfra.errors import FluxinfraError
from fluxinfra.matcher import Busy, GraphError, Jobspec, JobspecError, Matcher, Unsatisfiable
from fluxinfra.matcher.recipe import graph_from_recipe

PROPS = settings(
    max_examples=int(os.environ.get("FLUXINFRA_HYPOTHESIS_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
POLICIES = ["first", "low", "high", "lonode", "hinode", "lonodex", "hinodex", "firstnodex"]
OPS = ["allocate", "allocate_orelse_reserve"]

# ---------------------------------------------------------------------------------- strategies

recipes = st.fixed_dictionaries(
    {
        "racks": st.integers(0, 2),
        "nodes_per_rack": st.integers(1, 4),
        "sockets": st.integers(0, 2),
        "cores_per_socket": st.integers(1, 4),
        "gpus_per_socket": st.integers(0, 2),
        "memory_per_socket": st.tuples(st.integers(0, 2), st.integers(1, 4)).map(list),
    }
)


def small(top: int):
    """Counts from 1 to ``top``, mostly 1 so that most requests fit the small graphs."""
    return st.sampled_from([1, 1, 1, *range(1, top + 1)])


@st.composite
def leaves(draw) -> list[dict]:
    chosen = draw(st.lists(st.sampled_from(["core", "gpu", "memory"]), min_size=1, max_size=3,
                           unique=True))
    top = {"core": 4, "gpu": 2, "memory": 6}
    return [{"type": kind, "count": draw(small(top[kind]))} for kind in chosen]


@st.composite
def jobspecs(draw) -> dict:
    """Canonical jobspecs in the shapes Fluxion's tests use, sized to fit small graphs or not."""
    slot = {"type": "slot", "label": "task", "count": draw(small(3)),
            "with": draw(leaves())}
    if draw(st.booleans()):
        slot["with"] = [{"type": "socket", "count": draw(small(2)),
                         "with": slot["with"]}]
    shape = draw(st.sampled_from(["slot", "node", "node-socket"]))
    if shape == "slot":
        resources = [slot]
    else:
        inner = [slot]
        if shape == "node-socket" and slot["with"][0]["type"] != "socket":
            inner = [{"type": "socket", "count": draw(small(2)), "with": [slot]}]
        node = {"type": "node", "count": draw(small(3)), "with": inner}
        if draw(st.booleans()):
            node["exclusive"] = True
        resources = [node]
    return {"version": 1, "resources": resources,
            "attributes": {"system": {"duration": draw(st.sampled_from([0, 10, 100, 3600]))}},
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}


steps = st.one_of(
    st.tuples(st.just("match"), jobspecs(), st.sampled_from(OPS)),
    st.tuples(st.just("cancel"), st.integers(0, 1000)),
    st.tuples(st.just("partial"), st.integers(0, 1000), st.integers(1, 3)),
    st.tuples(st.just("advance"), st.integers(1, 200)),
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 5) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "count", "with", "label", "exclusive", "version", "resources",
                         "tasks", "slot", "min", "max", "operator", "operand", "attributes"]),
        inner, max_size=4),
    max_leaves=12,
)

# ---------------------------------------------------------------------------------- checks


def live_results(m: Matcher) -> dict:
    return {jobid: m.info(jobid) for jobid in m.jobs}


def check_r_invariants(m: Matcher) -> None:
    """From the R of every live job alone: leaves within size, exclusive holders alone."""
    g = m.graph
    held = []  # (start, end, {vertex: (amount, exclusive)})
    for result in live_results(m).values():
        execution = result.R["execution"]
        vertices = {}
        for node in result.R["scheduling"]["graph"]["nodes"]:
            md = node["metadata"]
            vertices[g.by_uniq_id(md["uniq_id"])] = (md["size"], md["exclusive"])
        held.append((execution["starttime"], execution["expiration"], vertices))
    for i, (start, end, mine) in enumerate(held):
        overlapping = [other for j, (s, e, other) in enumerate(held)
                       if j != i and s < end and start < e]
        for v, (amount, exclusive) in mine.items():
            if not g.children["containment"][v]:  # leaves: amounts add up within the size
                concurrent = [other[v][0] for other in overlapping if v in other]
                assert amount + sum(concurrent) <= g.size[v] or not concurrent, (
                    f"{g.path(v)}: {amount} + {concurrent} > size {g.size[v]}")
                assert amount <= g.size[v], f"{g.path(v)}: {amount} > size {g.size[v]}"
            if exclusive:
                prefix = g.path(v)
                for other in overlapping:
                    clash = [g.path(u) for u in other
                             if g.path(u) == prefix or g.path(u).startswith(prefix + "/")]
                    assert not clash, f"{prefix} is exclusive but another job holds {clash}"


def _profile(planner, rtype: str | None = None) -> tuple | None:
    points, last = [], None
    usage = planner.usage if rtype is None else planner.column(rtype)
    for t, used in zip(planner.times, usage, strict=True):
        if used != last:
            points.append((t, used))
            last = used
    return None if points == [(0, 0)] else tuple(points)


def state(m: Matcher) -> dict:
    """Every planner's usage profile (redundant breakpoints and idle planners dropped)."""
    trav = m.trav
    out = {}
    for kind, planners in (("sched", trav.sched), ("x", trav.xcheck)):
        for v, planner in planners.items():
            profile = _profile(planner)
            if profile:
                out[(kind, v)] = profile
    for v, planner in trav.agg.items():
        for rtype in planner.types:
            profile = _profile(planner, rtype)
            if profile:
                out[("agg", v, rtype)] = profile
    return out


def selection(result) -> list:
    return [(v, amount, excl) for _, v, amount, excl, _ in result.emitted]


def run_steps(m: Matcher, plan) -> None:
    """Apply a random operation sequence; only typed errors may escape the matcher."""
    for step in plan:
        kind = step[0]
        live = sorted(m.jobs)
        if kind == "match":
            try:
                event(m.match(step[1], op=step[2]).status)
            except (Busy, Unsatisfiable) as exc:
                event(type(exc).__name__)
        elif kind == "cancel" and live:
            m.cancel(live[step[1] % len(live)])
        elif kind == "partial" and live:
            jobid = live[step[1] % len(live)]
            nodes = m.info(jobid).nodes
            if nodes:
                event(f"partial_cancel done={m.partial_cancel(jobid, nodes[: step[2]])}")
        elif kind == "advance":
            m.now += step[1]
        check_invariants(m)
        check_r_invariants(m)


# ---------------------------------------------------------------------------------- properties


@PROPS
@given(recipe=recipes, policy=st.sampled_from(POLICIES),
       plan=st.lists(steps, min_size=2, max_size=16))
def test_random_operation_sequences_keep_invariants(recipe, policy, plan):
    run_steps(Matcher(graph_from_recipe(recipe), policy=policy), plan)


@PROPS
@given(recipe=recipes, policy=st.sampled_from(POLICIES), plan=st.lists(steps, max_size=8),
       jobspec=jobspecs(), op=st.sampled_from(OPS))
def test_cancel_restores_the_exact_prior_state(recipe, policy, plan, jobspec, op):
    m = Matcher(graph_from_recipe(recipe), policy=policy)
    run_steps(m, plan)
    before = state(m)
    try:
        first = m.match(jobspec, op=op)
    except (Busy, Unsatisfiable):
        assert state(m) == before, "a failed match changed the state"
        return
    m.cancel(first.jobid)
    assert state(m) == before
    check_invariants(m)
    if policy in ("first", "firstnodex"):
        # Like Fluxion, ``first`` re-ranks children by how free they are as jobs come and go
        # (by_outedges weights are not rolled back on cancel), so the answer may differ.
        return
    again = m.match(jobspec, op=op)
    assert (again.status, again.at, selection(again)) == (first.status, first.at,
                                                         selection(first))


@PROPS
@given(recipe=recipes.map(lambda r: {**r, "nodes_per_rack": max(r["nodes_per_rack"], 2)}),
       policy=st.sampled_from(POLICIES), plan=st.lists(steps, max_size=6),
       nodes=st.integers(2, 3), cores=st.integers(1, 2), keep=st.integers(1, 2))
def test_partial_cancel_then_the_rest_equals_full_cancel(recipe, policy, plan, nodes, cores,
                                                         keep):
    jobspec = {"version": 1, "resources": [{"type": "node", "count": nodes, "with": [
        {"type": "slot", "count": 1, "label": "task",
         "with": [{"type": "core", "count": cores}]}]}],
        "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}],
        "attributes": {"system": {"duration": 100}}}
    whole = Matcher(graph_from_recipe(recipe), policy=policy)
    parts = Matcher(graph_from_recipe(recipe), policy=policy)
    run_steps(whole, plan)
    run_steps(parts, plan)
    assert state(whole) == state(parts)
    try:
        a = whole.match(jobspec)
    except (Busy, Unsatisfiable):
        return
    b = parts.match(jobspec)
    assert selection(a) == selection(b)
    assume(len(b.nodes) >= 2)
    whole.cancel(a.jobid)
    first, rest = b.nodes[:keep], b.nodes[keep:]
    event(f"partial cancel of {len(first)} of {len(b.nodes)} nodes")
    assert parts.partial_cancel(b.jobid, first) is (not rest)
    check_invariants(parts)
    check_r_invariants(parts)
    if rest:
        assert parts.partial_cancel(b.jobid, rest) is True
    assert b.jobid not in parts.jobs
    assert state(parts) == state(whole)


@PROPS
@given(doc=json_values)
def test_garbage_jobspecs_raise_only_typed_errors(doc):
    m = Matcher(graph_from_recipe({"nodes_per_rack": 2, "cores_per_socket": 2}), policy="first")
    with contextlib.suppress(JobspecError):
        Jobspec.parse(doc)
    with contextlib.suppress(FluxinfraError):
        m.match(doc)
    check_invariants(m)


@PROPS
@given(jobspec=jobspecs(), mutation=st.sampled_from(["count0", "countneg", "nowith", "badtype",
                                                      "nolabel", "strcount", "dropversion"]))
def test_mutated_jobspecs_raise_only_typed_errors(jobspec, mutation):
    leaf = jobspec["resources"][0]
    if mutation == "count0":
        leaf["count"] = 0
    elif mutation == "countneg":
        leaf["count"] = -1
    elif mutation == "nowith":
        jobspec["resources"] = [{"type": "slot", "count": 1, "label": "task"}]
    elif mutation == "badtype":
        leaf["type"] = 7
    elif mutation == "nolabel":
        jobspec["resources"] = [{"type": "slot", "count": 1, "with": [{"type": "core"}]}]
    elif mutation == "strcount":
        leaf["count"] = "two"
    else:
        del jobspec["version"]
    m = Matcher(graph_from_recipe({"nodes_per_rack": 2, "cores_per_socket": 2}), policy="low")
    if mutation in ("nowith", "dropversion"):  # Fluxion accepts these too
        with contextlib.suppress(FluxinfraError):
            m.match(jobspec)
    else:
        with pytest.raises(JobspecError):
            m.match(jobspec)
    check_invariants(m)


def test_state_snapshot_sees_allocations_and_reservations():
    """The snapshot the properties compare is not blind: a job changes it, cancel undoes it."""
    m = Matcher(graph_from_recipe({"nodes_per_rack": 1, "cores_per_socket": 1}), policy="low")
    empty = state(m)
    spec = {"version": 1, "resources": [{"type": "slot", "count": 1, "label": "task",
                                         "with": [{"type": "core", "count": 1}]}],
            "attributes": {"system": {"duration": 50}},
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}
    now = m.match(spec)
    held = state(m)
    later = m.match(spec, op="allocate_orelse_reserve")
    assert later.status == "RESERVED" and later.at == 50
    assert empty != held != state(m)
    m.cancel(later.jobid)
    assert state(m) == held
    m.cancel(now.jobid)
    assert state(m) == empty


# ---------------------------------------------------------------------------------- k8s graphs

k8s_nodes = st.lists(
    st.fixed_dictionaries({
        "cpu": st.sampled_from(["1", "2", "3900m", "4"]),
        "memory": st.sampled_from(["1Gi", "2Gi", "3584Mi"]),
        "gpu": st.integers(0, 2),
        "zone": st.sampled_from([None, "a", "b"]),
        "ready": st.sampled_from(["True", "True", "False"]),
    }),
    min_size=1, max_size=4,
)
pod_requests_st = st.fixed_dictionaries({
    "cpu": st.sampled_from(["100m", "500m", "1", "1500m", "2"]),
    "memory": st.sampled_from(["64Mi", "512Mi", "1Gi", "1500Mi"]),
    "gpu": st.integers(0, 1),
})


def _node(i: int, spec: dict) -> dict:
    labels = {"topology.kubernetes.io/zone": spec["zone"]} if spec["zone"] else {}
    allocatable = {"cpu": spec["cpu"], "memory": spec["memory"]}
    if spec["gpu"]:
        allocatable["nvidia.com/gpu"] = str(spec["gpu"])
    return {"metadata": {"name": f"w{i}", "labels": labels},
            "status": {"allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": spec["ready"]}]}}


def _pod(name: str, node: str | None, req: dict) -> dict:
    requests = {"cpu": req["cpu"], "memory": req["memory"]}
    if req["gpu"]:
        requests["nvidia.com/gpu"] = str(req["gpu"])
    spec = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "p"}, "spec": spec,
            "status": {"phase": "Running" if node else "Pending"}}


@PROPS
@given(nodes=k8s_nodes, running=st.lists(st.tuples(st.integers(0, 3), pod_requests_st),
                                         max_size=6),
       pending=st.lists(pod_requests_st, max_size=6), policy=st.sampled_from(POLICIES))
def test_k8s_pods_registered_and_matched_keep_invariants(nodes, running, pending, policy):
    from fluxinfra.kube.graph import graph_from_k8s, pod_amounts, pod_jobspec

    node_objs = [_node(i, spec) for i, spec in enumerate(nodes)]
    bound = [_pod(f"r{j}", f"w{i % len(nodes)}", req) for j, (i, req) in enumerate(running)]
    m = Matcher(graph_from_k8s(node_objs, bound, subtract_pods=False), policy=policy)
    empty = state(m)
    for pod in bound:  # the scheduler's restart path: running pods become allocations
        amounts = pod_amounts(pod)
        jobid = m.now + 1000 + len(m.jobs)
        try:
            R = m.register_amounts(jobid, pod["spec"]["nodeName"], amounts).R
        except (Busy, GraphError):  # GraphError: it asks for GPUs the node has none of
            event("running pod over-commits its node")
            continue
        with pytest.raises(Busy):  # its vertices are held now: never booked twice
            m.update_allocate(jobid + 500, R)
        assert m.update_allocate(jobid, R).nodes == [pod["spec"]["nodeName"]]  # idempotent
        check_invariants(m)
        check_r_invariants(m)
    for j, req in enumerate(pending):
        try:
            result = m.match(pod_jobspec(_pod(f"q{j}", None, req)))
        except (Busy, Unsatisfiable) as exc:
            event(type(exc).__name__)
            continue
        event("pending pod placed")
        assert len(result.nodes) == 1, "a pod must land on exactly one node"
        down = {n["metadata"]["name"] for n in node_objs
                if n["status"]["conditions"][0]["status"] != "True"}
        assert not set(result.nodes) & down, "placed on a NotReady node"
        check_invariants(m)
        check_r_invariants(m)
    for jobid in sorted(m.jobs):
        m.cancel(jobid)
    assert state(m) == empty
