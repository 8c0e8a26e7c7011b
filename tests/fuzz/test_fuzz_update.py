"""Rs and JGFs through ``Matcher.update_allocate`` (resource-query's ``update``, the service's
``UpdateAllocate``), ``partial_cancel`` (``partial-cancel``) and ``register_amounts``: a
result, or a FluxinfraError that leaves the matcher's jobs and graph as they were."""

from __future__ import annotations

import json
from pathlib import Path

from fuzzlib import EDGE_INTS, clean, fuzz, json_values, mutations, scalars
from graphgen import snapshot
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.errors import FluxinfraError
from fluxinfra.matcher import Matcher, load_graph

GRAPH = load_graph(str(Path(__file__).resolve().parents[2] / "examples" / "graph.json"))
JOB = {"version": 1, "resources": [{"type": "node", "count": 1, "with": [
    {"type": "slot", "count": 2, "label": "task", "with": [{"type": "core", "count": 1}]}]}],
    "attributes": {"system": {"duration": 3600}}}


def _held() -> tuple[Matcher, dict]:
    m = Matcher(GRAPH, policy="low")
    r = m.match(JOB)
    return m, r.R


_, R = _held()
SLOT_R = Matcher(GRAPH, policy="low")
SLOT_R.match(JOB)
SLOT_R = SLOT_R.slot_R(1, 0)


def state(m: Matcher) -> tuple:
    return (sorted(m.jobs), [json.dumps(m.results[j].R, sort_keys=True) for j in sorted(m.jobs)],
            snapshot(m.graph))


def unchanged_on_error(m: Matcher, fn, *args, **kwargs):
    before = state(m)
    try:
        return fn(*args, **kwargs)
    except FluxinfraError as exc:
        assert str(exc)
        assert state(m) == before, f"{fn.__name__} failed ({exc}) and changed the matcher"
        return exc


def ids(usual: int):
    """Job id ``usual`` most of the time (the one the operation fits), else anything."""
    return st.integers(0, 9).flatmap(
        lambda i: st.sampled_from([1, 2, 7] + EDGE_INTS) | scalars() if i == 5
        else st.just(usual))


def _empty() -> Matcher:
    return Matcher(GRAPH, policy="low")


@fuzz(mutations(R) | mutations(R["scheduling"]) | json_values(8),
       st.sampled_from(["auto", "jgf", "jgf_shorthand", "rv1exec", "x"]),
       ids(2), st.booleans(), st.sampled_from([0, 5, 2**62, 2**63, -1]) | scalars(),
       st.none() | st.sampled_from([0, 60, 2**62, 2**64, -5]) | scalars())
@example(R, "auto", 2, False, 0, None)
@example({"execution": {"starttime": "x", "expiration": 5}}, "auto", 2, False, 0, None)
@example({"graph": {"nodes": [{"id": "0", "metadata": []}]}}, "jgf", 2, False, 0, None)
@example(R, "auto", 2**63, False, 0, None)
def test_update_allocate(doc, reader, jobid, held, at, duration):
    m = _held()[0] if held else _empty()
    unchanged_on_error(m, m.update_allocate, jobid, doc, at=at, duration=duration,
                       reader=reader)


@fuzz(mutations(R) | mutations(SLOT_R) | json_values(8)
       | st.lists(st.sampled_from(["node0", "/demo0/rack0/node0", "nope", ""]) | scalars(),
                  max_size=3),
       ids(1))
@example({**SLOT_R, "attributes": []}, 1)
@example({**SLOT_R, "attributes": {"user": [1]}}, 1)
@example({"scheduling": {"graph": {"nodes": [5]}}}, 1)
@example({"execution": {"R_lite": [{"rank": []}]}}, 1)
@example(["node0", 5], 1)
@example(SLOT_R, [1])
def test_partial_cancel(what, jobid):
    m, _ = _held()
    unchanged_on_error(m, m.partial_cancel, jobid, what)


@fuzz(ids(3), st.sampled_from(["node0", "/demo0/rack0/node1", "socket0", "nope"]) | scalars(),
       st.dictionaries(st.sampled_from(["core", "memory", "gpu", "x"]) | st.text(max_size=4),
                       st.integers(-2, 40) | scalars(), max_size=3) | json_values(4),
       st.none() | scalars(), st.none() | scalars())
@example(3, "node0", {"core": 2}, None, None)
@example(3, "node0", {"core": 2}, float("nan"), None)
def test_register_amounts(jobid, node, amounts, at, duration):
    m, _ = _held()
    unchanged_on_error(m, m.register_amounts, jobid, node, amounts, at=at, duration=duration)
    clean(m.find, "sched-now=allocated")
