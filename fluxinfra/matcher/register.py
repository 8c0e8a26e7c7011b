"""Registering allocations that already exist: Fluxion's ``update_allocate``.

A scheduler that restarts, or a resource-query session's ``update`` command, hands the matcher
an allocation made earlier (an R, RFC 20) to hold again, without a match. This mirrors
Fluxion's ``reapi`` ``update_allocate`` with its update readers (flux-sched's
``resource/readers/resource_reader_jgf.cpp`` and ``resource_reader_rv1exec.cpp``, whose
``update`` finds each vertex an R names and books it): R is read into *marks* (vertex -> units held,
exclusive or not, the parent it was held through), every mark is checked free for the window
as a match would need it, and the marks are committed through the traverser's commit walk
(``dfu_impl_update.cpp``'s counterpart, :mod:`fluxinfra.matcher.traverser.update`), all or
nothing. :meth:`Registration.register_amounts` (amounts of each type on one node, e.g. a
running pod) is this package's own, built the same way.

>>> from fluxinfra.matcher import Matcher, ResourceGraph
>>> g = ResourceGraph()
>>> node = g.add_vertex(type="node", id=0)
>>> for c in range(2):
...     g.add_edge(node, g.add_vertex(type="core", id=c))
>>> m = Matcher(g)
>>> r = m.match({"version": 1, "resources": [{"type": "slot", "count": 1, "label": "a",
...     "with": [{"type": "core", "count": 1}]}]})
>>> R = r.R
>>> m.cancel(r.jobid)
>>> m.update_allocate(r.jobid, R).status
'ALLOCATED'
>>> m.register_amounts(9, "node0", {"core": 1}).nodes
['node0']
"""

from __future__ import annotations

from typing import Any

from fluxinfra.inputs import finite, shown, type_name
from fluxinfra.matcher.errors import Busy, GraphError, MatcherError
from fluxinfra.matcher.graph import CONTAINMENT
from fluxinfra.matcher.planner import HORIZON
from fluxinfra.matcher.result import MatchResult, check_jobid
from fluxinfra.matcher.traverser import AT_ALLOC, JobState, Meta

__all__ = ["Registration", "jgf_nodes", "jgf_uniq"]


class Registration:
    """:class:`~fluxinfra.matcher.matcher.Matcher`'s ``update_allocate`` and
    ``register_amounts`` (a mixin: it reads the matcher's ``graph``, ``trav``, ``jobs``,
    ``results`` and ``now``, and commits through its ``_commit``)."""

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
        nodes = jgf_nodes(jgf, "update_allocate: R")
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
        v = g.by_uniq_id(jgf_uniq(n, md))
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


def jgf_nodes(jgf: Any, what: str) -> list[tuple[dict, dict]] | None:
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


def jgf_uniq(n: dict, md: dict) -> int | None:
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
