"""The matcher: Fluxion's match operations over a :class:`ResourceGraph`.

>>> g = ResourceGraph()
>>> root = g.add_vertex(type="cluster", name="c0")
>>> for n in range(2):
...     node = g.add_vertex(type="node", id=n)
...     g.add_edge(root, node)
...     for c in range(4):
...         g.add_edge(node, g.add_vertex(type="core", id=c, uniq_id=10 + 4 * n + c))
>>> m = Matcher(g, policy="low")
>>> r = m.match({"version": 1, "resources": [{"type": "slot", "count": 1, "label": "a",
...     "with": [{"type": "core", "count": 2}]}]})
>>> r.jobid, r.status, r.at, r.nodes, r.slots
(1, 'ALLOCATED', 0, ['node0'], [{'node0': {'core': 2}}])
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

from fluxinfra.inputs import INT64_MAX, INT64_MIN, MAX_VERTICES, finite, shown, type_name
from fluxinfra.matcher import stdsort
from fluxinfra.matcher.errors import Busy, GraphError, MatcherError, UnknownJob, Unsatisfiable
from fluxinfra.matcher.express import Express
from fluxinfra.matcher.graph import CONTAINMENT, ResourceGraph
from fluxinfra.matcher.jobspec import Jobspec, aggregate
from fluxinfra.matcher.planner import HORIZON
from fluxinfra.matcher.policies import parse_policy
from fluxinfra.matcher.traverser import (
    AT_ALLOC,
    AT_NO_ALLOC,
    AT_RESERVE,
    AT_SAT,
    FlexibleTraverser,
    JobState,
    Meta,
    Traverser,
    expand_slots,
    prime_flexible,
)
from fluxinfra.matcher.writers import write_jgf, write_rv1

__all__ = ["Matcher", "MatchResult", "OPS"]

#: parsed requests kept by Matcher._parse
_MAX_PARSED = 256

#: what a committed match reports, by allocation type
_STATUS = {AT_ALLOC: "ALLOCATED", AT_RESERVE: "RESERVED", AT_NO_ALLOC: "MATCHED"}

OPS = ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability", "satisfiability",
       "without_allocating")


def check_jobid(jobid: Any, what: str = "job id") -> int:
    """``jobid`` if it is a job id Fluxion can hold (a 64-bit signed integer), else
    MatcherError naming it."""
    if jobid.__class__ is not int:
        if isinstance(jobid, bool) or not isinstance(jobid, int):
            raise MatcherError(f"{what}: {shown(jobid)} is {type_name(jobid)}; give an integer "
                               f"from 1 to {INT64_MAX}")
        jobid = int(jobid)
    if not INT64_MIN <= jobid <= INT64_MAX:
        raise MatcherError(f"{what}: {jobid} is outside Fluxion's job ids (64-bit signed "
                           f"integers); give one from 1 to {INT64_MAX}")
    return jobid


@dataclass(slots=True)
class MatchResult:
    """The outcome of one match (or of ``info`` / ``update_allocate``). (Slots: one is kept
    per job, and a dict per instance was the larger part of it.)"""

    jobid: int
    status: str  # ALLOCATED | RESERVED | MATCHED (without_allocating) | SATISFIABLE | CANCELED
    at: int
    overhead: float
    nodes: list[str]
    #: slots and emitted vertices: lists, or None until first read, then built from the
    #: job ``_source`` committed (no closure kept per job for that)
    _slots: Any = field(default=None, repr=False)
    _emitted: Any = field(default=None, repr=False)
    duration: int = 0
    _graph: ResourceGraph | None = field(default=None, repr=False)
    _r: dict | None = field(default=None, repr=False)
    _job: Any = field(default=None, repr=False)  # the JobState committed
    _source: Any = field(default=None, repr=False)  # the Matcher that committed it

    @property
    def slots(self) -> list[dict[str, dict[str, int]]]:
        """Per slot instance (one pod of a group): node name -> {type: amount}."""
        if self._slots is None and self._source is not None:
            self._slots = self._source._slots(self._job)
        return self._slots or []

    @property
    def emitted(self) -> list:
        """The vertices held: (level, vertex, amount, exclusive, exclusive parent),
        post-order (what the writers print)."""
        if self._emitted is None:
            self._emitted = self._job.vertices if self._job is not None else []
        return self._emitted

    @property
    def raw_emitted(self) -> list:
        """:attr:`emitted` as the commit left it: a subtree held whole may still be one lazy
        entry (``Traverser``'s ``HeldSubtree``, with ``simple_text``) standing for every vertex
        below it; :func:`~fluxinfra.matcher.writers.write_simple` takes either form."""
        if self._emitted is None and self._job is not None:
            return self._job.raw_vertices
        return self.emitted

    @property
    def R(self) -> dict:  # noqa: N802 - RFC 20 calls it R
        """RFC 20 Rv1 (``execution`` + ``scheduling`` JGF), built on first use."""
        if self._r is None:
            self._r = write_rv1(self._graph, self.emitted, self.at, self.at + self.duration)
        return self._r

    @property
    def jgf(self) -> dict:
        return write_jgf(self._graph, self.emitted)

    def to_dict(self) -> dict[str, Any]:
        return {"jobid": self.jobid, "status": self.status, "at": self.at,
                "overhead": self.overhead, "nodes": self.nodes, "slots": self.slots, "R": self.R}


class Matcher:
    """Match jobspecs against one graph, keeping allocations and reservations over time.

    Building one changes nothing process-wide: a command that owns its process settles the
    cyclic collector beside a large graph with :func:`fluxinfra.matcher.gcpolicy.tune_for`."""

    def __init__(self, graph: ResourceGraph, policy: str = "first", *,
                 subsystem: str = CONTAINMENT, prune_filters: str | None = None,
                 now: int = 0, exact_pools: bool = False, exact: bool = False,
                 flexible: bool = False) -> None:
        if not graph.finalized:
            graph.finalize()
        if subsystem not in graph.children:
            raise GraphError(f"subsystem {shown(subsystem)} is not in the graph "
                             f"(it has {', '.join(sorted(graph.children))})")
        self.graph = graph
        self.policy = parse_policy(policy)
        prune_types = _parse_prune_filters(prune_filters)
        cls = FlexibleTraverser if flexible else Traverser
        self.trav = cls(graph, self.policy, subsystem, prune_types, exact_pools)
        #: the express lane: whole-node and one-slot first-fit requests without a walk
        #: (it declines every other request, and every request of a flexible traverser)
        self.trav.express = Express(self.trav)
        self._kind = "flexible" if flexible else "plain"  # how requests are primed (_need)
        #: exact: Fluxion's full walk step by step (every candidate scored and ranked, every
        #: vertex of a subtree held whole booked); the default chooses the same, faster
        self.exact = bool(exact)
        self.trav.fast = not self.exact
        if (self.exact or not self.policy.stop_on_k) and max(
                graph.subtree_totals(graph.root).values(), default=0) >= stdsort.BYTES_FROM:
            # a ranking policy on a machine this big ranks lists long enough for numpy (its
            # cores under low/high, its nodes under locality): import it now, once per process
            # (about 60 ms), not in the first match that needs it (when it is installed)
            stdsort.vectorized()
        self.jobs: dict[int, JobState] = {}
        self.results: dict[int, MatchResult] = {}
        self.now = now
        self._next_jobid = 1
        self._cancelled: tuple[set[int], set[int]] = (set(), set())
        self._up_count: int | None = None
        #: (vertices, edges) for stat(), counted again after add/remove_subgraph only
        self._size: tuple[int, int] | None = None
        self._node_cache = None
        #: recent requests: id(dict) or text -> (source, snapshot, parsed Jobspec)
        self._parsed: dict[Any, tuple[Any, Any, Jobspec]] = {}
        self.stats = {"match_count": 0, "match_succeeded": 0, "match_failed": 0,
                      "min_match": 0.0, "max_match": 0.0, "sum_match": 0.0}

    # -- matching ---------------------------------------------------------------------------
    def match(self, jobspec: Any, op: str = "allocate", jobid: int | None = None,
              now: int | None = None) -> MatchResult:
        """Run ``op`` for ``jobspec``; raises Busy (not now) or Unsatisfiable (never)."""
        if op not in OPS:
            raise MatcherError(f"unknown match op {shown(op)}; use one of {', '.join(OPS)}")
        js = self._parse(jobspec)
        if jobid is None:
            jobid = self._next_jobid
            if jobid > INT64_MAX:
                raise MatcherError(f"no job id left to give: job {INT64_MAX}, the largest "
                                   "Fluxion holds, was given; pass jobid= explicitly")
        else:
            jobid = check_jobid(jobid)
        if jobid in self.jobs:
            raise MatcherError(f"job id {jobid} is already in use; cancel it first")
        self._next_jobid = max(self._next_jobid, jobid + 1)
        now = self.now if now is None else now
        start = time.perf_counter()
        try:
            result = self._run(js, op, jobid, now)
        except MatcherError:
            self.record_match(time.perf_counter() - start, False)
            raise
        result.overhead = time.perf_counter() - start
        self.record_match(result.overhead, True)
        return result

    def _parse(self, source: Any) -> Jobspec:
        """Jobspec.parse, remembering the last requests: a scheduler submits the same few
        shapes over and over, and the traversal keeps what it derives from a request for as
        long as the parsed request lives. A dict is looked up by identity and checked against
        a snapshot taken the second time it is seen (so one mutated in place is parsed again);
        text by value."""
        if isinstance(source, Jobspec):
            return source
        cache = self._parsed
        if isinstance(source, dict):
            key: Any = id(source)
            hit = cache.get(key)
            if hit is not None and hit[0] is source:
                if hit[1] is not None and hit[1] == source:
                    return hit[2]
                # seen again: worth a snapshot now (a one-off request never pays for one)
                js = Jobspec.parse(source)
                entry = (source, copy.deepcopy(source), js)
            else:
                js = Jobspec.parse(source)
                entry = (source, None, js)
        elif isinstance(source, (str, bytes)):
            hit = cache.get(source)
            if hit is not None:
                return hit[2]
            js = Jobspec.parse(source)
            entry, key = (source, source, js), source
        else:
            return Jobspec.parse(source)  # raises the typed error
        if len(cache) >= _MAX_PARSED:
            cache.clear()
        cache[key] = entry
        return js

    def record_match(self, elapsed: float, ok: bool) -> None:
        """Count one match-like operation of ``elapsed`` seconds in :meth:`stat` (a caller that
        re-registers allocations itself, like resource-query's ``update``, counts them too)."""
        st = self.stats
        st["match_count"] += 1
        st["match_succeeded" if ok else "match_failed"] += 1
        if ok:
            if st["match_succeeded"] == 1 or elapsed < st["min_match"]:
                st["min_match"] = elapsed
            if elapsed > st["max_match"]:
                st["max_match"] = elapsed
            st["sum_match"] += elapsed

    def _duration(self, js: Jobspec, at: int) -> int:
        """The job's duration: the jobspec's, but never past the end of the planners' time
        (0, or longer: until then, as Fluxion's traverser takes it)."""
        d = js.duration
        return d if 0 < d <= HORIZON - at else HORIZON - at

    def _run(self, js: Jobspec, op: str, jobid: int, now: int) -> MatchResult:
        trav, g = self.trav, self.graph
        root = g.roots[trav.sub]
        resources = js.resources
        memo = js.memo
        x = memo.get(("root_exclusive", g.type[root]))
        if x is None:
            x = memo[("root_exclusive", g.type[root])] = any(
                r.exclusive and r.type == g.type[root] for r in resources)
        saved_excl = trav.excl_types
        excl = memo.get("exclusive_types")
        if excl is None:
            excl = memo["exclusive_types"] = _exclusive_types(resources)
        if not excl <= saved_excl:
            trav.excl_types = saved_excl | excl  # for this request only (restored below)
        try:
            self._precheck(js, op)
            if op == "satisfiability":
                self._check_satisfiable(js, x)
                return MatchResult(jobid, "SATISFIABLE", 0, 0.0, [], [], [], 0, g)
            alloc_type = AT_NO_ALLOC if op == "without_allocating" else AT_ALLOC
            meta = Meta(now, self._duration(js, now), alloc_type, jobid, now, js.constraint)
            ok = trav.select(resources, meta, x)
            if not ok and op == "allocate_orelse_reserve":
                meta.alloc_type = AT_RESERVE
                ok = self._reserve(js, meta, x)
            if not ok:
                if op in ("allocate_with_satisfiability", "allocate_orelse_reserve"):
                    self._check_satisfiable(js, x)
                raise Busy(f"no resources free now for job {jobid}; "
                           "retry later or use allocate_orelse_reserve")
            return self._commit(meta, jobid, now)
        finally:
            trav.excl_types = saved_excl

    def _precheck(self, js: Jobspec, op: str) -> None:
        """Fluxion's node-count precheck: more nodes asked than are up is Busy (or, for the
        satisfiability ops, Unsatisfiable) without a traversal."""
        want = self._need(js).get("node", 0)
        if not want:
            return
        up = self._nodes_up()
        sat = op in ("allocate_with_satisfiability", "satisfiability")
        if want > up:
            if sat:
                raise Unsatisfiable(f"the request needs {want} nodes but only {up} are up")
            raise Busy(f"the request needs {want} nodes but only {up} are up")
        constraint = js.constraint
        if constraint is None:
            return
        # Fluxion's request_feasible with a constraint: enough nodes must match it (and be up,
        # and, for an allocation now, not be held whole now)
        g, trav = self.graph, self.trav
        now_only = op in ("allocate", "without_allocating")
        found = 0
        for v in self._nodes():
            if not constraint.matches(g.name[v], g.rank[v], g.properties[v]):
                continue
            if not sat and not g.status[v]:
                continue
            if now_only and trav.avail(v, self.now, 1) < 1:
                continue
            found += 1
            if found >= want:
                return
        why = f"the request needs {want} nodes but only {found} match its constraints"
        if sat:
            raise Unsatisfiable(why)
        raise Busy(why)

    def _need(self, js: Jobspec) -> dict[str, int]:
        """The least of each type the request needs (alternative slots count their minimum).
        Also primes the request's per-resource needs the way this traverser reads them."""
        kind = self._kind
        memo = js.memo
        if memo.get("primed") != kind:
            prime = prime_flexible if kind == "flexible" else aggregate
            memo["need"], memo["primed"] = prime(js.resources), kind
        return memo["need"]

    def _nodes_up(self) -> int:
        if self._up_count is None:
            g = self.graph
            if 0 not in g.status and True not in g.removed:
                # nothing down or removed (C-speed scans): the containment totals count them
                root = g.roots[CONTAINMENT]
                self._up_count = (g.subtree_totals(root).get("node", 0)
                                  + (g.type[root] == "node"))
            else:
                status = g.status
                self._up_count = sum(1 for v in self._nodes() if status[v])
        return self._up_count

    def _nodes(self) -> list[int]:
        cache = self._node_cache
        if cache is None or cache[0] != len(self.graph):
            g = self.graph
            cache = (len(g), [v for v, t in enumerate(g.type) if t == "node" and not g.removed[v]])
            self._node_cache = cache
        return cache[1]

    def _reserve(self, js: Jobspec, meta: Meta, x: bool) -> bool:
        trav, g = self.trav, self.graph
        root = g.roots[trav.sub]
        need = self._need(js)
        times: set[int] = set()
        xp = trav.xcheck.get(root)
        if xp is not None:
            times.update(xp.times)
        held = trav.agg.get(root)
        if held is not None:
            times.update(held.times)
        for t in sorted(t for t in times if meta.now < t < HORIZON):
            # like Fluxion, a job may not start at the end of time and ends there at the latest
            duration = min(self._duration(js, t), HORIZON - t)
            if any(trav.sub_avail(root, rtype, t, duration) < n
                   for rtype, n in need.items() if rtype in trav.totals(root)):
                continue
            meta.at, meta.duration = t, duration
            if trav.select(js.resources, meta, x):
                return True
        return False

    def _check_satisfiable(self, js: Jobspec, x: bool) -> None:
        duration = js.duration if js.duration > 0 else 1
        meta = Meta(HORIZON - duration - 1, duration, AT_SAT, 0, self.now, js.constraint)
        if not self.trav.select(js.resources, meta, x):
            raise Unsatisfiable("the request can never be satisfied by this resource graph "
                                "(check counts, types and exclusivity against the graph)")

    def _commit(self, meta: Meta, jobid: int, now: int) -> MatchResult:
        job = JobState(jobid, now)
        job.at, job.duration = meta.at, meta.duration
        job.reserved = meta.alloc_type == AT_RESERVE
        self.trav.update(meta, job)
        if job.reweigh or job.reweigh_inner:
            self.trav.reweigh(job.reweigh, now, job.reweigh_inner,
                              meta.at <= now < meta.at + meta.duration)
        job.reweigh = job.reweigh_inner = ()  # done (the express commit re-ranks as it goes)
        self._record_slots(job)
        result = self._result(job, _STATUS[meta.alloc_type])
        if meta.alloc_type != AT_NO_ALLOC:
            self.jobs[jobid] = job
            self.results[jobid] = result
        return result

    def _result(self, job: JobState, status: str) -> MatchResult:
        g = self.graph
        nodes = [g.name[v] for v in job.node_vertices(g, self.trav.sub)]
        return MatchResult(job.jobid, status, job.at, 0.0, nodes, duration=job.duration,
                           _graph=g, _job=job, _source=self)

    def _record_slots(self, job: JobState) -> None:
        """Remember the slot instances of the selection just committed (resolved lazily)."""
        job.slot_edges = self.trav.reached_slots()
        job.slots = None

    def _resolve_slots(self, job: JobState) -> list:
        """Per slot instance: its vertices and amounts (the slot's own members at their share,
        everything held below them whole), in the order the commit emitted their first
        member (the order Fluxion ranked them in depends on its sort: not an answer)."""
        if job.slots is not None:
            return job.slots
        g = self.graph
        held = {}
        order = {}
        for i, (_, v, amount, excl, _) in enumerate(job.vertices):
            order[v] = i
            if excl:
                held[v] = amount
        slots = []
        for edges in expand_slots(job.slot_edges):
            if not all(c in held for c, _ in edges):
                continue  # a slot of a subtree the selection did not keep
            members: dict[int, int] = {}
            for c, amount in edges:
                members[c] = members.get(c, 0) + amount
                for v in g.preorder(c, self.trav.sub)[1:]:
                    if v in held:
                        members[v] = held[v]
            slots.append((min(map(order.__getitem__, members)), members))
        slots.sort(key=_first)
        job.slots = [members for _, members in slots]
        return job.slots

    def _slots(self, job: JobState) -> list[dict[str, dict[str, int]]]:
        """Per live slot instance: node name -> {type: amount}."""
        g = self.graph
        parent = g.parent[self.trav.sub]
        out = []
        for members in self._resolve_slots(job):
            if members is None:
                continue
            inst: dict[str, dict[str, int]] = {}
            for v, amount in members.items():
                host = v
                while host != -1 and g.type[host] != "node":
                    host = parent[host]
                per = inst.setdefault(g.name[host] if host != -1 else g.name[v], {})
                per[g.type[v]] = per.get(g.type[v], 0) + amount
            out.append(inst)
        return out

    def slot_R(self, jobid: int, index: int) -> dict:  # noqa: N802 - RFC 20 calls it R
        """An R holding just slot ``index`` of a job (one pod of a group), for
        :meth:`partial_cancel`."""
        job = self.jobs.get(check_jobid(jobid))
        if job is None:
            raise UnknownJob(f"unknown job id {jobid}")
        if index.__class__ is not int:
            raise MatcherError(f"slot index {shown(index)}: give an integer")
        if not 0 <= index < len(self._resolve_slots(job)) or job.slots[index] is None:
            raise MatcherError(f"job {jobid} has no live slot {index} "
                               f"(it has {len(job.slots)} slots)")
        members = job.slots[index]
        emitted = [(lvl, v, members[v], True, False) for lvl, v, _, _, _ in job.vertices
                   if v in members]
        r = write_rv1(self.graph, emitted, job.at, job.at + job.duration)
        r["attributes"] = {"user": {"fluxinfra.slot": index}}
        return r

    # -- other operations -------------------------------------------------------------------
    def cancel(self, jobid: int) -> None:
        """Release every resource of ``jobid`` (now and in the future)."""
        job = self.jobs.pop(jobid, None) if jobid.__class__ is int else None
        if job is None:
            raise UnknownJob(f"unknown job id {jobid}; nothing to cancel")
        self.results.pop(jobid, None)
        # Fluxion's cancel walk: every vertex the job tagged, plus each untagged child it
        # looks at before stopping (reported by resource-query's ``cancel ID stats``)
        # counted on demand (last_cancel_counts): the tags, and the subtrees held whole,
        # whose every vertex Fluxion's commit tags (ours books them on their root alone)
        self._cancelled = (set(job.xspans), set(job.whole))
        self.trav.release(job)

    @property
    def last_cancel_counts(self) -> tuple[int, int]:
        """(preorder, postorder) vertex visits of the last cancel, as Fluxion counts them:
        every vertex the job tagged, plus each untagged child it looks at before stopping
        (resource-query's ``cancel ID stats``)."""
        tagged, whole = self._cancelled
        kids = self.graph.children[self.trav.sub]
        below = self.trav.below_count
        post = len(tagged) + sum(map(below, whole))
        return post + sum(1 for u in tagged if u not in whole
                          for c in kids[u] if c not in tagged), post

    def partial_cancel(self, jobid: int, what: Any) -> bool:
        """Release part of a job: node names (str/list), or an R (dict: ``scheduling`` JGF,
        or ``execution`` R_lite naming ranks and child ids).

        Returns True when the job is now fully released (and forgotten).
        """
        job = self.jobs.get(check_jobid(jobid))
        if job is None:
            raise UnknownJob(f"unknown job id {jobid}; nothing to cancel")
        shrink: dict[int, int] = {}
        self._resolve_slots(job)
        release = self._release_set(job, what, shrink)
        if not release and not shrink:
            raise MatcherError(f"job {jobid} holds none of the resources given; nothing released")
        for v, amount in shrink.items():
            self.trav.shrink(job, v, amount)
        if isinstance(what, dict):
            index = _slot_index(what)
            if index is not None and 0 <= index < len(job.slots):
                job.slots[index] = None
        done = self.trav.release(job, release) if release else not job.sched
        # a released vertex takes everything below it (a subtree held whole has spans on
        # its root only, yet lists all its vertices)
        gone = set(release)
        kids = self.graph.children[self.trav.sub]
        for u in release:
            if kids[u]:
                gone.update(self.graph.preorder(u, self.trav.sub))
        job.vertices = [(lvl, v, job.used.get(v, {}).get(self.graph.type[v], amount), x, xp)
                        for lvl, v, amount, x, xp in job.vertices if v not in gone]
        job.slots = [None if m is None or any(v in gone for v in m) else m
                     for m in job.slots]
        if done:
            del self.jobs[jobid]
            self.results.pop(jobid, None)
        else:
            self.results[jobid] = self._result(job, self.results[jobid].status)
        return done

    def _release_set(self, job: JobState, what: Any,
                     shrink: dict[int, int] | None = None) -> set[int]:
        """Vertices to release; amounts smaller than what the job holds go to ``shrink``."""
        g = self.graph
        held = set(job.sched) | set(job.xspans)
        sub = self.trav.sub
        if isinstance(what, str):
            what = [what]
        if isinstance(what, (list, tuple)):
            out: set[int] = set()
            for name in what:
                if not isinstance(name, str):
                    raise MatcherError(f"partial cancel: {shown(name)} is {type_name(name)}; name "
                                       "vertices by name or containment path (strings)")
                out.update(v for v in g.preorder(g.resolve(name), sub) if v in held)
            return self._close_upwards(out, held)
        if not isinstance(what, dict):
            raise MatcherError(f"partial cancel: {type_name(what)}; give node names (a string "
                               "or a list of them) or an R (an object)")
        sched = what.get("scheduling", what if "graph" in what else None)
        nodes = _jgf_nodes(sched, "partial cancel: R")
        leaves: set[int] = set()
        if nodes:
            for n, md in nodes:
                path = (md.get("paths") or {}).get(sub)
                v = self._by_path(path) if path else g.by_uniq_id(_jgf_uniq(n, md))
                if v is None:
                    raise MatcherError(f"partial cancel: vertex {n.get('id')} is not in the graph")
                if v not in held:
                    continue
                have = job.used.get(v, {}).get(g.type[v])
                size = md.get("size", 1)
                if shrink is not None and have is not None and isinstance(size, int) \
                        and 0 < size < have:
                    shrink[v] = size  # part of a pool (one pod's memory)
                elif not g.children[sub][v] or have is not None:
                    leaves.add(v)  # held whole (shared ancestors go once nothing is left)
        else:
            # like Fluxion, an R_lite releases whole ranks the job holds there
            from fluxinfra.matcher.rv1exec import rlite_entries
            ranks = {rank for rank, _, _ in rlite_entries(what)}
            for v in self._nodes():
                if g.rank[v] in ranks and v in held:
                    leaves.add(v)
        release: set[int] = set()
        for v in leaves:
            release.update(u for u in g.preorder(v, sub) if u in held)
        return self._close_upwards(release, held)

    def _close_upwards(self, release: set[int], held: set[int]) -> set[int]:
        """Add every ancestor (below the root) left holding nothing of the job."""
        g = self.graph
        parent, kids = g.parent[self.trav.sub], g.children[self.trav.sub]
        frontier = {parent[v] for v in release if parent[v] != -1}
        while frontier:
            nxt = set()
            for a in frontier:
                if a in release or a not in held or parent[a] == -1:
                    continue
                if all(c in release or c not in held for c in kids[a]):
                    release.add(a)
                    nxt.add(parent[a])
            frontier = nxt
        return release

    def _by_path(self, path: str) -> int | None:
        g = self.graph
        for v in g.by_name(path.rsplit("/", 1)[-1]):
            if g.path(v, self.trav.sub) == path:
                return v
        return None

    def info(self, jobid: int) -> MatchResult:
        result = self.results.get(check_jobid(jobid))
        if result is None:
            raise UnknownJob(f"unknown job id {jobid}")
        return result

    #: how ``update_allocate`` reads an R (Fluxion's update readers)
    UPDATE_READERS = ("jgf", "jgf_shorthand", "rv1exec")

    def update_allocate(self, jobid: int, R: dict, at: int = 0,  # noqa: N803
                        duration: int | None = None, *, reader: str = "auto",
                        reserve: bool = False) -> MatchResult:
        """Re-register an allocation that already exists (e.g. after a scheduler restart)
        from the R this package wrote (vertices are found by ``uniq_id``), from ``at`` for
        ``duration`` seconds (default: the R's ``starttime``..``expiration``, else until the
        end of time).

        ``reader`` says how R names the vertices (Fluxion's update readers):

        * ``jgf``: a JGF (``{"graph": ...}``) or an R with a ``scheduling`` JGF; every vertex
          held is listed;
        * ``jgf_shorthand``: the same, but a vertex held exclusively stands for its whole
          containment subtree (Fluxion's ``jgf_shorthand`` writer omits what lies below it);
        * ``rv1exec``: only R's ``execution`` (``R_lite`` ranks and child ids, ``nodelist``):
          each rank's node is held shared (exclusively once all of its vertices are listed)
          and the children named are held whole;
        * ``auto`` (default): ``jgf_shorthand`` when the JGF's ``writer`` says so, ``jgf``
          when R has a JGF, else ``rv1exec``.

        The result is ``RESERVED`` when ``reserve`` is set or ``at`` is after :attr:`now`,
        else ``ALLOCATED``.

        All or nothing: every vertex of R must exist and have the units R names free (and
        be held by nobody else when R holds it exclusively) during the window, exactly what
        a match would need. Otherwise nothing changes and this raises :class:`GraphError`
        (naming the vertex) when R names a vertex that is not in the graph or more units
        than it has, or :class:`Busy` when another job holds them in that window (both
        carry the vertex index as ``.vertex`` when there is one).

        Re-registering a job id that is already held *replaces* its allocation: R is checked
        against every other job (not against the stale holds of ``jobid`` itself), and only
        once it fits is the old allocation released and R committed. Registering the same R
        twice under one id is therefore idempotent, while the same R under a second id
        raises :class:`Busy`.
        """
        if reader not in ("auto",) + self.UPDATE_READERS:
            raise MatcherError(f"update_allocate: reader {shown(reader)}; use one of auto, "
                               f"{', '.join(self.UPDATE_READERS)}")
        if not isinstance(R, dict):
            raise GraphError("update_allocate: R must be a dict (an R or a JGF), got "
                             f"{type(R).__name__}")
        if at.__class__ is not int or not 0 <= at < HORIZON:
            raise MatcherError(f"update_allocate: at {shown(at)}: give a whole number of seconds "
                               f"from 0 to {HORIZON - 1}")
        if duration is not None:
            if duration.__class__ is not int:
                raise MatcherError(f"update_allocate: duration {shown(duration)}: give a whole "
                                   "number of seconds (or None: R's own)")
            duration = min(duration, HORIZON - at)  # (past the end of time: until then)
        jobid = check_jobid(jobid, "update_allocate: job id")
        jgf = R if "graph" in R else R.get("scheduling")
        if reader == "auto":
            if isinstance(jgf, dict) and "graph" in jgf:
                reader = "jgf_shorthand" if jgf.get("writer") == "fluxion:jgf_shorthand" \
                    else "jgf"
            else:
                reader = "rv1exec"
        execution = R.get("execution") or {}
        if not isinstance(execution, dict):
            raise GraphError(f"update_allocate: R's execution must be an object, got "
                             f"{type_name(execution)}")
        if duration is None or duration <= 0:
            start, end = execution.get("starttime", at), execution.get("expiration", 0)
            for key, value in (("starttime", start), ("expiration", end)):
                if not finite(value) or value < 0:
                    raise GraphError(f"update_allocate: R's execution.{key} {shown(value)}: give a "
                                     "number of seconds >= 0")
            duration = int(end - start) if end and end > start else HORIZON - at
            duration = min(duration, HORIZON - at)
        marks: dict[int, tuple[int, bool, int]] = {}
        try:
            if reader == "rv1exec":
                self._marks_from_rlite(R, marks)
            else:
                self._marks_from_jgf(jgf, reader == "jgf_shorthand", marks)
        except GraphError:
            # like Fluxion, which checks each vertex as it reads it: a busy vertex listed
            # before the bad one is reported first
            self._check_free(marks, at, duration, jobid, "update_allocate", partial=True)
            raise
        g = self.graph
        # an R written by a traversal of another subsystem (its root, not ours): like
        # Fluxion, hold its exclusive vertices' own planners only, without a traversal
        foreign = g.roots[self.trav.sub] not in marks and any(
            r in marks for sub, r in g.roots.items() if sub != self.trav.sub)
        self._check_free(marks, at, duration, jobid, "update_allocate", partial=foreign)
        if jobid in self.jobs:
            self.cancel(jobid)  # R fits without the job's old holds: replace them
        if foreign:
            result = self._hold_planners(jobid, marks, at, duration)
        else:
            result = self._commit_marks(jobid, marks, at, duration, "update_allocate: R")
        if reserve or at > self.now:
            result.status = "RESERVED"
        return result

    def _hold_planners(self, jobid: int, marks: dict[int, tuple[int, bool, int]], at: int,
                       duration: int) -> MatchResult:
        """Hold each exclusive mark in its own planner (no aggregates, tags or emitted
        vertices: nothing of R lies on this traversal's subsystem)."""
        job = JobState(jobid, self.now)
        job.at, job.duration = at, duration
        meta = Meta(at, duration, AT_ALLOC, jobid, self.now)
        for v, (needs, excl, _) in marks.items():
            if excl:
                self.trav._add_sched(v, needs, meta, job)
        self._next_jobid = max(self._next_jobid, jobid + 1)
        result = self._result(job, "ALLOCATED")
        self.jobs[jobid] = job
        self.results[jobid] = result
        return result

    def _marks_from_jgf(self, jgf: Any, shorthand: bool,
                        marks: dict[int, tuple[int, bool, int]]) -> None:
        """Fill ``marks`` (vertex -> (units, exclusive, parent)) from a JGF's vertices, in
        file order; ``shorthand``: an exclusive vertex adds its whole containment subtree
        after it."""
        nodes = _jgf_nodes(jgf, "update_allocate: R")
        if not nodes:
            raise GraphError("update_allocate: R has no JGF (R['scheduling']['graph']['nodes'] "
                             "or R['graph']['nodes']); pass the R or JGF the matcher wrote")
        g = self.graph
        by_id: dict[str, int] = {}
        for n, md in nodes:
            v = self._vertex_of(n, md, "update_allocate")
            by_id[str(n.get("id"))] = v
            try:
                size = int(md.get("size", 1))
            except (TypeError, ValueError, OverflowError):
                raise GraphError(f"update_allocate: vertex {n.get('id')} of R: size "
                                 f"{md.get('size')!r}; give a whole number") from None
            excl = bool(md.get("exclusive", False))
            below = self._subtree_edges(v) if shorthand and excl else []
            for u, parent in [(v, -1)] + below:
                if u in marks:
                    err = GraphError(f"update_allocate: vertex {g.path(u)} is listed twice"
                                     + (" (a jgf_shorthand R lists no vertex below an "
                                        "exclusive one)" if shorthand else ""))
                    err.vertex = u
                    err.duplicate = True
                    raise err
                marks[u] = (size, excl, -1) if u == v else (g.size[u], True, parent)
        # the parent each vertex was held through (where a vertex has several parents)
        sub = self.trav.sub
        edges = jgf["graph"].get("edges") or ()
        for e in edges if isinstance(edges, list) else ():
            if not isinstance(e, dict) or not isinstance(e.get("metadata") or {}, dict):
                continue
            esub = ((e.get("metadata") or {}).get("subsystem")) or CONTAINMENT
            src, tgt = by_id.get(str(e.get("source"))), by_id.get(str(e.get("target")))
            if esub == sub and src is not None and tgt in marks:
                marks[tgt] = marks[tgt][:2] + (src,)

    def _subtree_edges(self, top: int) -> list[tuple[int, int]]:
        """(vertex, parent) below ``top`` in containment, depth first in graph order."""
        kids = self.graph.children[CONTAINMENT]
        out: list[tuple[int, int]] = []
        stack = [(c, top) for c in reversed(kids[top])]
        while stack:
            c, parent = stack.pop()
            out.append((c, parent))
            stack.extend((cc, c) for cc in reversed(kids[c]))
        return out

    def _marks_from_rlite(self, R: dict,  # noqa: N803
                          marks: dict[int, tuple[int, bool, int]]) -> None:
        """Fill ``marks`` from an R's ``execution`` (Fluxion's rv1exec update reader): the
        root shared, each rank's node (a child of the root named by ``nodelist``) shared
        unless every vertex of that rank is listed, each child (``<type><id>`` below it)
        whole."""
        from fluxinfra.matcher.rv1exec import rlite_entries
        g = self.graph
        sub = self.trav.sub
        root = g.roots[sub]
        kids = g.children[sub]
        marks[root] = (g.size[root], False, -1)
        for rank, host, children in rlite_entries(R):
            node = self._rank_child(root, host, rank, "node")
            marks[node] = (g.size[node], False, root)
            listed = 0
            for rtype, ids in children.items():
                for i in ids:
                    c = self._rank_child(node, f"{rtype}{i}", rank, rtype)
                    marks[c] = (g.size[c], True, node)
                    listed += 1
            below = sum(1 for u in g.preorder(node, sub)[1:] if g.rank[u] == rank)
            if listed == below and kids[node]:
                marks[node] = (g.size[node], True, root)

    def _rank_child(self, parent: int, name: str, rank: int, rtype: str) -> int:
        """The child ``name`` of ``parent`` with ``rank`` (and unit size, below a node)."""
        g = self.graph
        for c in g.children[self.trav.sub][parent]:
            if g.name[c] == name and g.rank[c] == rank and g.type[c] == rtype \
                    and not g.removed[c] and (rtype == "node" or g.size[c] == 1):
                return c
        err = GraphError(f"update_allocate: R names {name} (rank {rank}) below "
                         f"{g.path(parent, self.trav.sub)}; the graph has no such vertex")
        err.missing = name
        raise err

    def _check_free(self, marks: dict[int, tuple[int, bool, int]], at: int, duration: int,
                    jobid: int, what: str, partial: bool = False) -> None:
        """Raise unless every marked vertex can be held as marked during [at, at+duration)
        by ``jobid`` (its own current holds, if any, do not count); changes nothing.
        ``partial``: the marks are the first part of an R (the root need not be there)."""
        g, trav = self.graph, self.trav
        if not partial and g.roots[trav.sub] not in marks:
            raise GraphError(f"{what}: R does not include the graph root")
        own = self.jobs.get(jobid)
        kids = g.children[trav.sub]
        for v, (needs, x, _) in marks.items():
            size = g.size[v]
            where = g.path(v, trav.sub)
            if g.removed[v]:
                raise GraphError(f"{what}: vertex {where} was removed from the graph "
                                 "(remove_subgraph); add it back before holding it")
            if needs < 0 or needs > size:
                raise GraphError(f"{what}: vertex {where}: R holds {needs} units of it, it "
                                 f"has {size}; pass an R written for this graph")
            want = needs if x else size  # a shared vertex: nobody may hold it exclusively
            p = trav.sched.get(v)
            if p is not None:
                free = size - p.used_without(at, duration,
                                             own.sched.get(v) if own is not None else None)
                if free < want:
                    err = Busy(f"{what}: vertex {where} has {free} of {size} free from {at} "
                               f"for {duration}s, job {jobid} needs {want}; another job "
                               "holds it (cancel that job first)")
                    err.vertex, err.exclusive = v, x
                    raise err
        if partial:
            return
        # then (like a match, stricter than Fluxion's reader, which checks planners only)
        # an exclusive hold needs a vertex nobody shares
        for v, (_, x, _) in marks.items():
            xp = trav.xcheck.get(v)
            if x and kids[v] and xp is not None and xp.used_without(
                    at, duration, own.xspans.get(v) if own is not None else None) > 0:
                where = g.path(v, trav.sub)
                err = Busy(f"{what}: vertex {where} is shared with another job from {at} "
                           f"for {duration}s, job {jobid} holds it exclusively; cancel that "
                           "job first")
                err.vertex, err.exclusive = v, x
                raise err

    def _vertex_of(self, n: dict, md: dict, what: str) -> int:
        """The graph vertex of an R's JGF node: by ``uniq_id`` (the JGF id; an index
        lookup), checked against its containment path when the R has one; by path (the
        name index) when the uniq_id is absent or names another vertex."""
        g = self.graph
        path = (md.get("paths") or {}).get(self.trav.sub)
        v = None
        v = g.by_uniq_id(_jgf_uniq(n, md))
        if v is not None and path and g.path(v, self.trav.sub) != path:
            v = None
        if v is None and path:
            v = self._by_path(path)
        if v is None:
            err = GraphError(f"{what}: vertex {n.get('id')} (path {shown(path)}) of R is not in "
                             "the graph")
            err.missing, err.path, err.jgf_id = path, path, n.get("id")
            raise err
        return v

    def _commit_marks(self, jobid: int, marks: dict[int, tuple[int, bool, int]], at: int,
                      duration: int, what: str) -> MatchResult:
        g, trav = self.graph, self.trav
        root = g.roots[trav.sub]
        if root not in marks:
            raise GraphError(f"{what} does not include the graph root")
        trav.marks = marks
        trav.root_mark = marks[root][:2]
        meta = Meta(at, duration, AT_ALLOC, jobid, self.now)
        self._next_jobid = max(self._next_jobid, jobid + 1)
        trav.chosen_slots = []
        return self._commit(meta, jobid, self.now)

    def register_amounts(self, jobid: int, node: str, amounts: dict[str, int], *,
                         at: int | None = None, duration: int | None = None) -> MatchResult:
        """Record that job ``jobid`` uses ``amounts`` (type -> units) on vertex ``node`` (a
        name or containment path) from ``at`` (default: ``now``) for ``duration`` seconds
        (default: until the end of time), e.g. a running pod re-learnt after a restart::

            m.register_amounts(7, "node3", {"core": 3, "memory": 5120, "gpu": 1})

        For each type, the lowest free vertices below ``node`` (graph order) are taken
        whole until their sizes cover the amount (a 4,096 MiB memory vertex serves any
        request up to 4,096). Raises :class:`Busy` when the node lacks them and
        :class:`GraphError` when ``node`` or a type is not in the graph; nothing is held then.
        """
        jobid = check_jobid(jobid, "register_amounts: job id")
        if jobid in self.jobs:
            raise MatcherError(f"job id {jobid} is already in use; cancel it first")
        if not isinstance(node, str) or not isinstance(amounts, dict):
            raise MatcherError(f"register_amounts: node {shown(node)}, amounts {shown(amounts)}: "
                               "give a vertex name and an object of type -> units")
        g, trav = self.graph, self.trav
        if at is not None and (at.__class__ is not int or not 0 <= at < HORIZON):
            raise MatcherError(f"register_amounts: at {shown(at)}: give a whole number of seconds "
                               f"from 0 to {HORIZON - 1}")
        at = self.now if at is None else at
        if duration is not None and duration.__class__ is not int:
            raise MatcherError(f"register_amounts: duration {shown(duration)}: give a whole number "
                               "of seconds")
        if duration is None or duration <= 0:
            duration = HORIZON - at
        duration = min(duration, HORIZON - at)
        found = [v for v in g.by_name(node) if not g.removed[v]] \
            if not node.startswith("/") else [g.resolve(node)]
        if len(found) != 1:
            what = "no vertex" if not found else f"{len(found)} vertices"
            raise GraphError(f"register_amounts: node: {what} named {shown(node)}; give the "
                             "name of one vertex (or its containment path)")
        top = found[0]
        below = g.preorder(top, trav.sub)
        totals = trav.totals(top)
        marks: dict[int, tuple[int, bool, int]] = {}
        kids = g.children[trav.sub]
        for rtype, amount in amounts.items():
            if not isinstance(amount, int) or amount < 0:
                raise MatcherError(f"register_amounts: amounts[{shown(rtype)}]: {shown(amount)}; "
                                   "give a whole number >= 0")
            if not amount:
                continue
            if rtype not in totals:
                raise GraphError(f"register_amounts: amounts: {node} has no {shown(rtype)} "
                                 f"below it (it has {', '.join(sorted(totals)) or 'nothing'})")
            got = 0
            for v in below:
                if g.type[v] != rtype or kids[v] or not g.status[v] or v in marks:
                    continue
                if trav.avail(v, at, duration) < g.size[v] or trav.xcheck_busy(v, at, duration):
                    continue
                marks[v] = (g.size[v], True, -1)
                got += g.size[v]
                if got >= amount:
                    break
            if got < amount:
                raise Busy(f"register_amounts: {node} has {got} {rtype} free from {at}, "
                           f"job {jobid} needs {amount}")
        parent = g.parent[trav.sub]
        for v in list(marks):
            a = parent[v]
            while a != -1 and a not in marks:
                marks[a] = (g.size[a], False, -1)
                a = parent[a]
        if not marks:
            marks[g.roots[trav.sub]] = (1, False, -1)
        # the leaves are free; their ancestors may still be held whole (node-exclusive jobs)
        self._check_free(marks, at, duration, jobid, "register_amounts")
        return self._commit_marks(jobid, marks, at, duration, "register_amounts")

    def find(self, criteria: str) -> dict:
        """Vertices matching ``criteria`` (and their ancestors) as an R (``scheduling`` JGF).

        ``m.find("status=up and sched-now=free")``; see :mod:`fluxinfra.matcher.find`.
        """
        from fluxinfra.matcher.find import find_vertices
        g = self.graph
        emitted = [(lvl, v, g.size[v], True, False) for lvl, v in find_vertices(self, criteria)]
        return write_rv1(g, emitted, 0, 0)

    def find_text(self, criteria: str, fmt: str = "simple") -> str:
        """resource-query's ``find`` output lines (``simple`` / ``pretty_simple``)."""
        from fluxinfra.matcher.find import find_vertices
        from fluxinfra.matcher.writers import write_pretty_simple, write_simple
        g = self.graph
        emitted = [(lvl, v, g.size[v], True, False) for lvl, v in find_vertices(self, criteria)]
        writer = write_pretty_simple if fmt == "pretty_simple" else write_simple
        return writer(g, emitted)

    def add_subgraph(self, jgf: Any) -> list[int]:
        """Attach a JGF subgraph (dict or text): vertices whose containment path already exists
        are reused, the others are added under their parents. Returns the new vertices.

        All or nothing: a subgraph the graph cannot take (malformed, a second root, a vertex
        left unattached, a cycle) raises GraphError and leaves the graph as it was."""
        from fluxinfra.matcher.graph import read_jgf_parts
        g = self.graph
        nodes, edges = read_jgf_parts(jgf)
        if len(g) + len(nodes) > MAX_VERTICES:
            raise GraphError(f"add_subgraph: {len(nodes):,} more vertices would make the graph "
                             f"larger than the {MAX_VERTICES:,} a graph may have")
        index: dict[str, int] = {}
        added: list[int] = []
        mark = g.checkpoint()
        next_uniq = None
        try:
            for vid, kwargs in nodes:
                path = (kwargs.get("paths") or {}).get(CONTAINMENT)
                v = self._by_path(path) if path else None
                if v is None:
                    uniq = kwargs.get("uniq_id")
                    if uniq is not None and g.by_uniq_id(uniq) is not None:
                        if next_uniq is None:
                            next_uniq = max(g.uniq_id) + 1
                        while g.by_uniq_id(next_uniq) is not None:
                            next_uniq += 1
                        kwargs["uniq_id"] = next_uniq
                    v = g.add_vertex(**kwargs)
                    added.append(v)
                index[vid] = v
            for src, tgt, sub in edges:
                g.add_edge_logged(index[src], index[tgt], sub, mark)
            g.finalize()
        except GraphError as exc:
            g.rollback(mark)
            raise GraphError(f"add_subgraph: {exc}; the graph is unchanged") from None
        self.trav.invalidate()
        self._node_cache = None
        self._up_count = None
        self._size = None
        return added

    def remove_subgraph(self, path_or_name: str) -> int:
        """Remove a vertex and everything below it (jobs lose those resources first).
        Returns how many vertices were removed."""
        g = self.graph
        top = g.resolve(path_or_name)
        if top == g.root:
            raise GraphError("remove_subgraph: cannot remove the root of the graph")
        doomed = set(g.preorder(top, CONTAINMENT))
        for jobid, job in list(self.jobs.items()):
            mine = doomed & (set(job.sched) | set(job.xspans))
            if mine and self.trav.release(job, self.trav_closure(job, mine)):
                del self.jobs[jobid]
                self.results.pop(jobid, None)
        for sub, kids in g.children.items():
            parents = g.parent[sub]
            for v in doomed:
                p = parents[v]
                if p != -1 and p not in doomed and v in kids[p]:
                    kids[p].remove(v)
        for v in doomed:
            g.removed[v] = True
        g.finalize()
        self.trav.invalidate()
        self._node_cache = None
        self._up_count = None
        self._size = None
        return len(doomed)

    def trav_closure(self, job: JobState, vertices: set[int]) -> set[int]:
        held = set(job.sched) | set(job.xspans)
        return self._close_upwards(set(vertices), held)

    def set_status(self, path_or_name: str, status: str) -> None:
        if status not in ("up", "down"):
            raise MatcherError(f"status must be 'up' or 'down', got {shown(status)}")
        v = self.graph.resolve(path_or_name)
        flag = 1 if status == "up" else 0
        for u in self.graph.preorder(v, self.trav.sub):
            self.graph.status[u] = flag
            self.graph.drop_layout(u)
            self.trav.mark_dirty(u)
        self.trav.invalidate_status()
        self._up_count = None

    def set_property(self, v: int, key: str, value: str) -> None:
        """Set property ``key`` of vertex ``v`` (resource-query's ``set-property``). What the
        traversal worked out from properties (``variation``'s perf classes, shapes shared by
        subtrees built alike) is forgotten."""
        g = self.graph
        props = dict(g.properties[v] or {})
        props[key] = value
        g.properties[v] = props
        g.drop_layout(v)
        self.trav.invalidate()

    def stat(self) -> dict:
        g = self.graph
        st = dict(self.stats)
        if self._size is None:
            self._size = (len(g) - sum(g.removed),
                          sum(len(k) for kids in g.children.values() for k in kids))
        st["vertices"], st["edges"] = self._size
        st["jobs"] = len(self.jobs)
        st["avg_match"] = st["sum_match"] / st["match_succeeded"] if st["match_succeeded"] else 0
        return st


def _first(pair: tuple) -> int:
    return pair[0]


def _exclusive_types(resources) -> set[str]:
    out = set()
    for r in resources:
        if r.exclusive:
            out.add(r.type)
        out |= _exclusive_types(r.with_)
    return out


def _parse_prune_filters(text: str | None) -> tuple[str, ...]:
    """Types whose subtree totals Fluxion tracks (``ALL:core,ALL:node`` by default)."""
    if text is None or not text.strip():
        return ("core", "node")
    types = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        _, _, rtype = item.rpartition(":")
        if rtype and rtype not in types:
            types.append(rtype)
    return tuple(types)


def _jgf_nodes(jgf: Any, what: str) -> list[tuple[dict, dict]] | None:
    """The (vertex, metadata) pairs of a JGF an R names vertices with (None: it has none),
    each checked to be an object, with ``paths`` (when given) an object of strings."""
    if jgf is None:
        return None
    if not isinstance(jgf, dict):
        raise GraphError(f"{what}: its JGF must be an object, got {type_name(jgf)}")
    graph = jgf.get("graph")
    nodes = graph.get("nodes") if isinstance(graph, dict) else graph
    if nodes is None:
        return None
    if not isinstance(nodes, list):
        raise GraphError(f"{what}: graph.nodes must be a list, got {type_name(nodes)}")
    out = []
    for i, n in enumerate(nodes):
        md = n.get("metadata") if isinstance(n, dict) else None
        if md is None:
            md = {}
        if not isinstance(n, dict) or not isinstance(md, dict):
            raise GraphError(f"{what}: graph.nodes[{i}]: a vertex is an object with an object "
                             f"of metadata, got {shown(n)}")
        paths = md.get("paths")
        if paths is not None and (not isinstance(paths, dict) or not all(
                isinstance(p, str) for p in paths.values())):
            raise GraphError(f"{what}: graph.nodes[{i}].metadata.paths: must be an object of "
                             f"strings, got {shown(paths)}")
        out.append((n, md))
    return out


def _jgf_uniq(n: dict, md: dict) -> int | None:
    """The ``uniq_id`` an R's JGF vertex names (its metadata's, else its id read as an
    integer), None when neither is one."""
    uniq = md.get("uniq_id", n.get("id"))
    if uniq.__class__ is int:
        return uniq
    if isinstance(uniq, str) and uniq.strip().lstrip("+-").isdigit() and len(uniq) < 20:
        try:
            return int(uniq)
        except ValueError:
            return None
    return None


def _slot_index(R: dict) -> int | None:  # noqa: N803 - RFC 20 calls it R
    """The slot an R from :meth:`Matcher.slot_R` holds (``attributes.user.fluxinfra.slot``),
    None when it names none."""
    attributes = R.get("attributes")
    user = attributes.get("user") if isinstance(attributes, dict) else None
    index = user.get("fluxinfra.slot") if isinstance(user, dict) else None
    return index if index.__class__ is int else None
