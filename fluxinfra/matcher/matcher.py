"""The matcher: Fluxion's match operations over a :class:`ResourceGraph`.

:class:`Matcher` offers what resource-query and Fluxion's ``reapi`` offer: match (every op of
:data:`OPS`), cancel and partial cancel, info, find and stat, here; re-registering an
allocation that exists (``update_allocate``, ``register_amounts``) in
:mod:`~fluxinfra.matcher.register`; attaching, removing and marking parts of the graph in
:mod:`~fluxinfra.matcher.elastic`; what a match returns (:class:`MatchResult`,
:func:`check_jobid`) in :mod:`~fluxinfra.matcher.result`. The selection itself is the
traverser's (:mod:`fluxinfra.matcher.traverser`).

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
from typing import Any

from fluxinfra.inputs import INT64_MAX, shown, type_name
from fluxinfra.matcher import prefixsort
from fluxinfra.matcher.elastic import GraphEdits
from fluxinfra.matcher.errors import Busy, GraphError, MatcherError, UnknownJob, Unsatisfiable
from fluxinfra.matcher.express import Express
from fluxinfra.matcher.graph import CONTAINMENT, ResourceGraph
from fluxinfra.matcher.jobspec import Jobspec, aggregate
from fluxinfra.matcher.planner import HORIZON
from fluxinfra.matcher.policies import parse_policy
from fluxinfra.matcher.register import Registration, jgf_nodes, jgf_uniq
from fluxinfra.matcher.result import MatchResult, check_jobid
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
from fluxinfra.matcher.writers import write_rv1

__all__ = ["Matcher", "MatchResult", "OPS"]

#: parsed requests kept by Matcher._parse
_MAX_PARSED = 256

#: what a committed match reports, by allocation type
_STATUS = {AT_ALLOC: "ALLOCATED", AT_RESERVE: "RESERVED", AT_NO_ALLOC: "MATCHED"}

OPS = ("allocate", "allocate_orelse_reserve", "allocate_with_satisfiability", "satisfiability",
       "without_allocating")


class Matcher(Registration, GraphEdits):
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
                graph.subtree_totals(graph.root).values(), default=0) >= prefixsort.BYTES_FROM:
            # a ranking policy on a machine this big ranks lists long enough for numpy (its
            # cores under low/high, its nodes under locality): import it now, once per process
            # (about 60 ms), not in the first match that needs it (when it is installed)
            prefixsort.vectorized()
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
        nodes = jgf_nodes(sched, "partial cancel: R")
        leaves: set[int] = set()
        if nodes:
            for n, md in nodes:
                path = (md.get("paths") or {}).get(sub)
                v = self._by_path(path) if path else g.by_uniq_id(jgf_uniq(n, md))
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


def _slot_index(R: dict) -> int | None:  # noqa: N803 - RFC 20 calls it R
    """The slot an R from :meth:`Matcher.slot_R` holds (``attributes.user.fluxinfra.slot``),
    None when it names none."""
    attributes = R.get("attributes")
    user = attributes.get("user") if isinstance(attributes, dict) else None
    index = user.get("fluxinfra.slot") if isinstance(user, dict) else None
    return index if index.__class__ is int else None
