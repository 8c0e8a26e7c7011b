"""The traverser's books and the walks that change them: Fluxion's ``dfu_impl_update.cpp``.

:class:`Booking` holds what a traverser keeps of one graph (each vertex's planner, exclusivity
checker and subtree aggregates; ``first``'s child weights and orders; the walk's caches) and
the walks that change it: ``update`` commits the last selection (adds the planner spans along
the marked edges and emits the allocated vertices post-order, as Fluxion's ``upd_dfv``),
``release`` and ``shrink`` undo a job or part of it (Fluxion's ``rem_*``), ``reweigh``
re-ranks ``first``'s children after a commit. The selection walk that leaves the marks,
:class:`~fluxinfra.matcher.traverser.dfu.Traverser`, extends it; a Booking is never used
alone (its walks call the traverser's child order: ``_children``, ``hold_kid``, ...).

One compiled extension type keeps its fields in one declaration (``update.pxd``); its
methods may live in the modules of its subclasses, as flux-sched's ``dfu_impl_t`` keeps its
methods in ``dfu_impl.cpp`` and ``dfu_impl_update.cpp``.
"""

from __future__ import annotations

from array import array
from functools import partial
from typing import TYPE_CHECKING

from fluxinfra.matcher.graph import CONTAINMENT, ResourceGraph
from fluxinfra.matcher.planner import MultiPlanner, Planner
from fluxinfra.matcher.policies import Policy
from fluxinfra.matcher.traverser.job import AT_ALLOC, AT_NO_ALLOC, AT_RESERVE
from fluxinfra.matcher.traverser.memo import inner_below, inner_plan, walk_below
from fluxinfra.matcher.traverser.order import UNTOUCHED, ChildOrder, HeldKids, order_key
from fluxinfra.matcher.traverser.text import HeldSubtree, simple_lines

if TYPE_CHECKING:  # pragma: no cover - typing only
    from fluxinfra.matcher.jobspec import Resource
    from fluxinfra.matcher.traverser.job import JobState, Meta

__all__ = ["Booking", "X_NJOBS"]

#: an exclusivity checker's capacity (Fluxion's X_CHECKER_NJOBS): jobs sharing a vertex
X_NJOBS = 0x40000000
_EMPTY: dict[str, int] = {}


class Booking:
    """A traverser's state of one graph and the walks that change it (see the module
    docstring): planners, exclusivity checkers, subtree aggregates, ``first``'s order."""

    def __init__(self, graph: ResourceGraph, policy: Policy, subsystem: str = CONTAINMENT,
                 prune_types: tuple[str, ...] = ("core",), exact_pools: bool = False) -> None:
        self.g = graph
        #: fluxinfra extension: a pool (size > 1) gives exactly the amount asked, not all it has
        self.exact_pools = exact_pools
        self.policy = policy
        self.sub = subsystem
        #: v -> total of each type below v in the traversal's subsystem (Fluxion primes its
        #: subtree aggregates in the subsystem it walks, so a power walk counts power edges)
        self.totals = graph.subtree_totals if subsystem == CONTAINMENT else \
            partial(graph.subtree_totals, subsystem=subsystem)
        self.prune_types = prune_types
        self.sched: dict[int, Planner] = {}
        self.allocs: dict[int, dict[int, int]] = {}
        self.resvs: dict[int, dict[int, int]] = {}
        self.xcheck: dict[int, Planner] = {}
        #: vertex -> what jobs hold below it, every type on one time axis
        self.agg: dict[int, MultiPlanner] = {}
        self.excl_types: set[str] = set(policy.exclusive_types)
        #: first-policy child order: vertex -> {child: weight}
        self.weights: dict[int, dict[int, int]] = {}
        #: vertices with a weighted vertex at or below them (their subtree's order moved)
        self._weighted: set[int] = set()
        #: first's child order per vertex (most free first), sort keys beside it
        self._order_cache: dict[int, ChildOrder] = {}
        #: child type -> the pruning type ``first`` weighs it by (None: not weighed)
        self._weigh_type: dict[str, str | None] = {}
        self._policy_cache: dict[int, list[int]] = {}
        self._kid_types: dict[int, frozenset[str]] = {}
        #: id(resources list) -> (the list, leaf plan); lists live as long as their jobspec
        self._leaf_plans: dict[int, tuple[list[Resource], dict[str, Resource] | None]] = {}
        #: id(request list) -> (the list, its request_key)
        self._request_keys: dict[int, tuple[list[Resource], tuple]] = {}
        #: explore children in policy order and stop once a level is satisfied (see Matcher)
        self.fast = False
        self.marks: dict[int, tuple[int, bool, int]] = {}
        self.chosen_slots: list[list[int]] = []
        self.root_mark: tuple[int, bool] = (1, False)
        self.preorder = 0
        self.postorder = 0
        self._ml = 0
        self._last_factor: dict[str, int] = {}
        #: fast mode, whole subtrees held exclusively: vertex -> (shape signature, its
        #: vertices in policy preorder); signature key -> recorded selection (see _template)
        self._shapes: dict[int, int] = {}
        self._shape_ids: dict[tuple, int] = {}
        self._layout_shapes: dict[int, int] = {}  # graph layout hint -> its shape
        self._templates: dict[tuple, tuple | None] = {}
        #: bulk emission target of the commit in progress (job.vertices), or None
        self._bulk: list | None = None
        self._post_cache: dict[int, list[tuple[int, int]]] = {}
        #: (level, layout) -> the ``simple`` lines of a subtree of that layout held whole
        #: (see held_text)
        self._held_texts: dict[tuple[int, int], str] = {}
        self._inner_cache: dict[int, list[tuple[int, int]]] = {}
        #: graph layout hint -> where its inner edges are (see inner_edges)
        self._inner_plans: dict[int, tuple] = {}
        self._kid_pos: dict[int, dict[int, int]] = {}
        #: parent -> its children held whole by an allocation (fast mode skips them in a
        #: set lookup instead of a planner query: busy clusters have thousands)
        self._held_kids: dict[int, HeldKids] = {}
        #: parent -> its children in exploration order without the ones held whole (None: not
        #: kept for it), so a busy wide vertex is scanned from its first free child (see
        #: _free_children); built on demand, kept in step by holds, releases and re-weighing
        self._free: dict[int, ChildOrder | None] = {}
        self._policy_pos: dict[int, dict[int, int]] = {}
        self._marked_kids: dict[int, list[int]] | None = None
        #: vertex -> how many jobs hold it whole (fast mode) with no aggregate spans on it
        self._whole: dict[int, int] = {}
        #: the same, counting only allocations (not reservations)
        self._whole_alloc: dict[int, int] = {}
        #: the express lane (fluxinfra.matcher.express.Express) its owner attaches: whole-node
        #: and one-slot requests under first-fit policies skip the generic walk; None: off
        self.express = None
        #: guarded selection (see select): per open ranking, what was left unexplored
        self._guard: list[list[tuple]] | None = None
        #: ``_post_below``, bound once: the lazy entries (ReplayedSlots, Rebound) keep it,
        #: and binding it again for each one makes one more object for the collector to scan
        self.post_below = self._post_below
        #: the full walk remembered per subtree (see _visit): key -> what it found
        self._memo: dict[tuple, tuple] = {}
        self._memo_on = False  # for the selection in progress
        self._memo_types: tuple = (frozenset(), None)
        self._ver: dict[int, int] = {}  # vertex -> stamp of its subtree's state
        self._clock = 0
        self._dirty: list[int] = []
        #: remembered subtrees met in this selection whose rankings left marks inside
        self._replayed: dict[int, tuple] = {}
        self._fresh: set[int] = set()  # vertices walked (not remembered) in this selection
        self._inside = 0  # rankings and replays made so far (tells a subtree had some)
        self._meta: Meta | None = None
        #: the full walk: every child, in graph order (Fluxion's static exploration)
        self._static = False
        #: (type, high) -> vertex -> best relative score of a vertex of that type below it
        self._rel: dict[tuple[str, bool], dict[int, int | None]] = {}
        self._rel_layout: dict[tuple[str, bool], dict[int, int | None]] = {}
        #: (vertex, type, high) -> best relative score over each suffix of its policy order
        self._suffix: dict[tuple[int, tuple, bool], list] = {}
        self._unit_types: dict[str, bool] = {}

    def invalidate(self) -> None:
        """Forget cached graph facts (after vertices or edges were added or removed)."""
        self._memo.clear()
        self._ver.clear()
        self._dirty.clear()
        self._rel.clear()
        self._rel_layout.clear()
        self._suffix.clear()
        self._unit_types.clear()
        self._order_cache.clear()
        self._free.clear()
        self._policy_pos.clear()
        self._policy_cache.clear()
        self._kid_types.clear()
        self.invalidate_status()
        self._post_cache.clear()
        self._held_texts.clear()
        self._inner_cache.clear()
        self._inner_plans.clear()
        self._kid_pos.clear()
        self._held_kids = {
            p: hk for p, hk in self._held_kids.items()
            if all(not self.g.removed[c] for c in hk.kids)} if self._held_kids else {}

    def invalidate_status(self) -> None:
        """Forget subtree shapes (after a vertex status changed)."""
        if self.express is not None:
            self.express.forget()
        self._shapes.clear()
        self._layout_shapes.clear()
        self._shape_ids.clear()
        self._templates.clear()

    # -- availability -----------------------------------------------------------------------
    def avail(self, v: int, at: int, duration: int) -> int:
        p = self.sched.get(v)
        return self.g.size[v] if p is None else p.avail_during(at, duration)

    def xcheck_busy(self, v: int, at: int, duration: int) -> bool:
        """Some job holds ``v`` (shared) during the window."""
        p = self.xcheck.get(v)
        return p is not None and p.used_during(at, duration) > 0

    def sub_avail(self, v: int, rtype: str, at: int, duration: int) -> int:
        total = self.totals(v).get(rtype, 0)
        if self._whole and v in self._whole and self.sched[v].used_during(at, duration):
            return 0  # held whole by a job during the window (see _hold_whole)
        p = self.agg.get(v)
        return total if p is None else total - p.used_during(rtype, at, duration)

    # -- commit -----------------------------------------------------------------------------
    def update(self, meta: Meta, job: JobState, emit=None) -> int:
        """Commit the last selection: add spans, emit vertices (post-order) to ``emit(level,
        vertex, needs, exclusive, exclusive_parent)`` or, by default, to ``job.vertices``;
        fill ``job``."""
        self._bound_backlog()
        if emit is None and self.express is not None:
            n = self.express.commit(meta, job)
            if n is not None:
                return n
        self._level = 0
        self._upd_seen: set[int] | None = set() if self.g.multi_parent else None
        root = self.g.roots[self.sub]
        needs, excl = self.root_mark
        to_parent: dict[str, int] = {}
        self._marked_kids = self._children_marked() if self._upd_seen is None else None
        if emit is None:  # into job.vertices (held subtrees are emitted in bulk)
            self._bulk = job.raw_vertices
            emit = _appender(job.raw_vertices)
        try:
            return self._upd_dfv(root, needs, excl, meta, job, emit, to_parent, False, False)
        finally:
            self._bulk = None

    def _children_marked(self) -> dict[int, list[int]]:
        """Parent -> its marked children in graph order (so the commit walk looks at the
        chosen vertices only, not at every child of each vertex on the path)."""
        parent = self.g.parent[self.sub]
        out: dict[int, list[int]] = {}
        for c in self.marks:
            p = parent[c]
            if p != -1:
                out.setdefault(p, []).append(c)
        for p, cs in out.items():
            if len(cs) > 1:
                pos = self._kid_pos.get(p)
                if pos is None:
                    pos = self._kid_pos[p] = {c: i for i, c in enumerate(self._children(p))}
                cs.sort(key=pos.__getitem__)
        return out

    def _upd_dfv(self, u: int, needs: int, excl: bool, meta: Meta, job: JobState, emit,
                 to_parent: dict[str, int], emit_shadow: bool, excl_parent: bool) -> int:
        g = self.g
        mod = emit_shadow or g.type[u] in self.excl_types
        excl = excl or mod
        if (mod and not emit_shadow and self.fast and meta.alloc_type != AT_NO_ALLOC
                and needs >= g.size[u] and self._upd_seen is None and self.totals(u)):
            return self._hold_whole(u, needs, meta, job, emit, to_parent, excl_parent)
        self._level += 1
        n_plans = 0
        below: dict[str, int] = {}
        marks = self.marks
        first = self.policy.stop_on_k > 0
        kids = g.children[self.sub]
        seen = self._upd_seen
        if seen is not None:
            seen.add(u)
        marked = self._marked_kids
        for c in (self._children(u) if mod or marked is None else marked.get(u, ())):
            if seen is not None and c in seen:
                continue
            mark = marks.get(c)
            if mark is not None and seen is not None and mark[2] not in (-1, u):
                mark = None  # marked through its other parent
            if mark is None and not mod:
                continue
            if mod:
                x, cneeds = True, g.size[c]
            else:
                cneeds, x = mark[0], mark[1]
            if x and not kids[c] and meta.alloc_type != AT_NO_ALLOC \
                    and g.type[c] not in self.excl_types:
                # a leaf held exclusively: the same bookkeeping as the full visit, inline
                self._add_sched(c, cneeds, meta, job)
                if cneeds >= g.size[c]:
                    job.xspans[c] = None
                else:
                    self._add_meta(c, cneeds, True, meta, job, _EMPTY, below)
                    emit(self._level + 1, c, cneeds, True, excl)
                    n_plans += 1
                    continue
                ctype = g.type[c]
                below[ctype] = below.get(ctype, 0) + cneeds
                job.used[c] = {ctype: cneeds}
                emit(self._level + 1, c, cneeds, True, excl)
                n_plans += 1
                if first:
                    job.reweigh.append((u, c))
                continue
            n = self._upd_dfv(c, cneeds, x, meta, job, emit, below, mod, excl)
            if n > 0:
                n_plans += n
                if first:
                    job.reweigh.append((u, c))
        # upd_sched
        if meta.alloc_type == AT_NO_ALLOC:
            if excl:
                n_plans += 1
        else:
            if excl:
                n_plans += 1
                self._add_sched(u, needs, meta, job)
            if n_plans > 0:
                self._add_meta(u, needs, excl, meta, job, below, to_parent)
        if n_plans > 0:
            emit(self._level, u, needs, excl, excl_parent)
        self._level -= 1
        return n_plans

    def _hold_whole(self, u: int, needs: int, meta: Meta, job: JobState, emit,
                    to_parent: dict[str, int], excl_parent: bool) -> int:
        """Fast mode: hold ``u``'s whole subtree with one span on ``u``. Every descendant is
        reached only through ``u``, whose planner now reads 0 free for the window, so spans
        on the descendants would change no decision; they are still emitted (R, slots)."""
        g = self.g
        base = self._level + 1
        if self._bulk is not None:
            # listed when first asked for (R, slots): a 64-node job holds ~5,000 vertices
            self._bulk.append(HeldSubtree((base + 1, self, u)))
        else:
            depths, below_u = self._post_below(u)
            for d, v in zip(depths, below_u, strict=True):
                emit(base + 1 + d, v, g.size[v], True, True)
        self._add_sched(u, needs, meta, job)
        if self.policy.stop_on_k:
            job.reweigh_inner += self.inner_edges(u)
        if meta.alloc_type == AT_ALLOC:
            p = g.parent[self.sub][u]
            if p != -1:
                self.hold_kid(p, u, meta.at, meta.at + meta.duration, job.jobid)
        totals = self.totals(u)
        # ancestors get the whole subtree's amounts
        self._add_meta(u, needs, True, meta, job, totals, to_parent, whole=True)
        used = job.used[u] = dict(totals)
        used[g.type[u]] = used.get(g.type[u], 0) + needs
        emit(base, u, needs, True, excl_parent)
        return 1 + bool(totals)  # u and (at least) what is below it

    def inner_edges(self, u: int) -> list[tuple[int, int]]:
        """The edges (vertex, child) below ``u`` whose child has children of its own, in the
        order Fluxion's commit walks them (its ``first`` re-ranks those children)."""
        hit = self._inner_cache.get(u)
        if hit is not None:
            return hit
        kids = self.g.children[self.sub]
        layout = self.g.layouts.get(u) if self.g.layouts else None
        plan = self._inner_plans.get(layout) if layout is not None else None
        if plan is None:
            # the vertices with children, from u down in post-order, found without
            # reading a leaf's own list of children
            inner = [u]
            inner_below(kids, u, inner)
            hit = [(v, c) for v in inner for c in kids[v] if kids[c]]
            if layout is not None:  # the same tree below every vertex of the layout:
                plan = self._inner_plans[layout] = inner_plan(kids, u, hit)  # by place
        else:
            # each edge by its place below u (the path of child indices to v, c's index
            # among v's children): only the vertices with children are read. Reading every
            # leaf's list of children as well (each its own object, elsewhere in memory)
            # was 15% of a 64-node fill's match at 16,384 nodes (36% listing them all)
            hit = []
            for path, j in plan:
                v = u
                for i in path:
                    v = kids[v][i]
                hit.append((v, kids[v][j]))
        self._inner_cache[u] = hit
        return hit

    def _inner_list(self, u: int) -> list[int]:
        """``u`` and each vertex with children below it, in :meth:`inner_edges`' order
        (the same order for every subtree of one shape)."""
        inner = [u]
        inner += [c for _, c in self.inner_edges(u)]
        return inner

    def held_text(self, level: int, u: int, names: list[str]) -> str:
        """The ``simple`` writer's lines of the vertices below ``u``, held whole, whose
        children are at ``level``. A vertex with a layout hint prints what every subtree of
        its layout prints (the same tree, types, sizes and ids below, so the same names):
        the text is made once per layout and level, without listing the vertices again (a
        64-node job's output lists about 5,000; listing them was half the time of a
        ``fluxinfra query`` 64-node match at 16,384 nodes)."""
        g = self.g
        layout = g.layouts.get(u) if g.layouts and names is g.name else None
        if layout is None:
            return simple_lines(level, *self._post_below(u), names, g.size)
        text = self._held_texts.get((level, layout))
        if text is None:
            text = self._held_texts[(level, layout)] = simple_lines(
                level, *self._post_below(u), names, g.size)
        return text

    def below_count(self, u: int) -> int:
        """How many vertices lie below ``u`` (in the traversal's subsystem)."""
        return len(self._post_below(u)[1])

    def _post_below(self, u: int) -> tuple[bytes | tuple[int, ...], array]:
        """The vertices below ``u`` in post-order (children in graph order) and their
        depths relative to u's children (cached: the commit of a held subtree emits them
        all; shapes and templates index them). The vertex sequence is an array: the cyclic
        collector does not walk an array's entries (they are not objects), as it walked a
        list's in every young collection until the list grew old (a 64-node fill cached
        two lists per node, about 80 and 11 vertices: 69% of the references a young
        collection followed at 16,384 nodes)."""
        hit = self._post_cache.get(u)
        if hit is not None:
            return hit
        kids = self.g.children[self.sub]
        depths: list[int] = []
        out: list[int] = []
        walk_below(kids, u, 0, depths, out)
        hit = (bytes(depths) if not depths or max(depths) < 256 else tuple(depths),
               array("q", out))
        self._post_cache[u] = hit
        return hit

    def _add_sched(self, u: int, needs: int, meta: Meta, job: JobState) -> None:
        self._dirty.append(u)
        p = self.sched.get(u)
        if p is None:
            p = self.sched[u] = Planner(self.g.size[u])
        span = p.add_span(meta.at, meta.duration, needs)
        job.sched[u] = span
        if meta.alloc_type == AT_ALLOC:
            self.allocs.setdefault(u, {})[meta.jobid] = span
        elif meta.alloc_type == AT_RESERVE:
            self.resvs.setdefault(u, {})[meta.jobid] = span

    def _add_meta(self, u: int, needs: int, excl: bool, meta: Meta, job: JobState,
                  below: dict[str, int], to_parent: dict[str, int],
                  whole: bool = False) -> None:
        """Tag ``u`` for ``job`` and add what it holds below to its aggregates and to
        ``to_parent``. ``whole`` (fast mode, the subtree held whole through u's own planner):
        no aggregate spans on u itself, sub_avail reads 0 below u while it is held."""
        self._dirty.append(u)
        if excl and needs >= self.g.size[u]:
            # held whole: its own planner already reads 0 free for this window, so an
            # exclusivity-checker span would prune nothing more (tag only, no span)
            job.xspans[u] = None
        else:
            x = self.xcheck.get(u)
            if x is None:
                x = self.xcheck[u] = Planner(X_NJOBS)
            job.xspans[u] = x.add_span(meta.at, meta.duration, 1)
        if whole:
            self._whole[u] = self._whole.get(u, 0) + 1
            job.hold_whole(u)
            if meta.alloc_type == AT_ALLOC:
                self._whole_alloc[u] = self._whole_alloc.get(u, 0) + 1
        elif below and self.totals(u):
            amounts = {t: n for t, n in below.items() if n > 0}
            if amounts:
                p = self.agg.get(u)
                if p is None:
                    p = self.agg[u] = MultiPlanner(self.totals(u))
                job.agg[u] = p.add_span(meta.at, meta.duration, amounts)
        rtype = self.g.type[u]
        used = needs if excl else 0
        if used:
            to_parent[rtype] = to_parent.get(rtype, 0) + used
            job.used[u] = {rtype: used}
        for t, n in below.items():
            to_parent[t] = to_parent.get(t, 0) + n

    # -- release ----------------------------------------------------------------------------
    def release(self, job: JobState, vertices: set[int] | None = None) -> bool:
        """Undo ``job`` (all of it, or only ``vertices`` and their aggregate share).

        Returns True when nothing of the job remains.
        """
        self._bound_backlog()
        if vertices is None:
            return self._release_all(job)
        job.node_hint = None
        released: dict[int, dict[str, int]] = {}  # ancestor -> type -> amount released below
        parent = self.g.parent[self.sub]
        self._dirty += vertices
        if self.express is not None:
            self.express.freed(vertices)
        for u in vertices:
            span = job.sched.pop(u, None)
            if span is not None:
                self._release_own(job, u, span, parent[u])
            span = job.xspans.pop(u, None)
            if span is not None:
                self.xcheck[u].remove_span(span)
            span = job.agg.pop(u, None)
            if span is not None:
                self.agg[u].remove_span(span)
        # shrink the aggregate spans of ancestors that stay in the job
        for u in vertices:
            used = job.used.get(u)
            if not used:
                continue
            a = parent[u]
            while a != -1:
                if a not in vertices:
                    per = released.setdefault(a, {})
                    for t, n in used.items():
                        per[t] = per.get(t, 0) + n
                a = parent[a]
        for a, per in released.items():
            span = job.agg.get(a)
            if span is None:
                continue
            amounts = self.agg[a].amounts(span)
            if per.keys().isdisjoint(amounts):
                continue
            left = {t: n - per.get(t, 0) for t, n in amounts.items() if n > per.get(t, 0)}
            self._resize_agg(job, a, span, left)
        # (Fluxion does not re-rank children on cancel)
        # the job is gone once no vertex it holds exclusively remains
        remaining = any(job.used.get(u) for u in job.xspans) or any(job.sched)
        if not remaining:
            for u in list(job.xspans):
                span = job.xspans.pop(u)
                if span is not None:
                    self.xcheck[u].remove_span(span)
            for a, span in job.agg.items():
                self.agg[a].remove_span(span)
            job.agg.clear()
        return not remaining

    def _release_all(self, job: JobState) -> bool:
        """:meth:`release` of every vertex of ``job`` (a cancel): the same spans go, without
        working out what the ancestors keep (nothing: every aggregate span goes too)."""
        job.node_hint = None
        vertices = job.sched.keys() | job.xspans.keys()
        self._dirty += vertices
        if self.express is not None:
            self.express.freed(vertices)
        parent = self.g.parent[self.sub]
        for u, span in job.sched.items():
            self._release_own(job, u, span, parent[u])
        xcheck = self.xcheck
        for u, span in job.xspans.items():
            if span is not None:
                xcheck[u].remove_span(span)
        agg = self.agg
        for u, span in job.agg.items():
            agg[u].remove_span(span)
        job.sched.clear()
        job.xspans.clear()
        job.agg.clear()
        return True

    def _release_own(self, job: JobState, u: int, span: int, p: int) -> None:
        """Give back ``job``'s span ``span`` on ``u``'s own planner (``p``: u's parent): the
        whole-hold counts, u as a held child of p, u's allocation or reservation entry."""
        self.sched[u].remove_span(span)
        jobid = job.jobid
        if u in job.whole:
            job.whole.discard(u)
            _count_down(self._whole, u)
            if jobid in self.allocs.get(u, ()):
                _count_down(self._whole_alloc, u)
        self.unhold_kid(p, u, jobid)
        for table in (self.allocs, self.resvs):
            spans = table.get(u)
            if spans is not None and spans.pop(jobid, None) is not None and not spans:
                del table[u]

    def shrink(self, job: JobState, u: int, amount: int) -> None:
        """Give back ``amount`` of what ``job`` holds of pool vertex ``u`` (and of the
        aggregate spans of its ancestors)."""
        rtype = self.g.type[u]
        have = job.used.get(u, {}).get(rtype, 0)
        amount = min(amount, have)
        if amount <= 0:
            return
        self._dirty.append(u)
        if self.express is not None:
            self.express.freed((u,))
        span = job.sched.get(u)
        if span is not None:
            new = _resize(self.sched[u], span, have - amount)
            job.sched[u] = new
            for table in (self.allocs, self.resvs):
                spans = table.get(u)
                if spans is not None and job.jobid in spans:
                    spans[job.jobid] = new
        job.used[u][rtype] = have - amount
        parent = self.g.parent[self.sub]
        a = parent[u]
        while a != -1:
            span = job.agg.get(a)
            amounts = self.agg[a].amounts(span) if span is not None else None
            if amounts is not None and rtype in amounts:
                left = {t: n - amount if t == rtype else n for t, n in amounts.items()}
                self._resize_agg(job, a, span, {t: n for t, n in left.items() if n > 0})
            a = parent[a]

    def _resize_agg(self, job: JobState, a: int, span: int, left: dict[str, int]) -> None:
        """Shrink ``job``'s aggregate span on ``a`` to ``left``; once nothing is left the
        span and the job's ``jobid-span`` mark on ``a`` go (Fluxion's reduce-to-empty)."""
        new = self.agg[a].resize_span(span, left)
        if new is None:
            del job.agg[a]
        else:
            job.agg[a] = new

    def reweigh(self, pairs: list[tuple[int, int]], now: int,
                inner: list[tuple[int, int]] = (), held_now: bool = False) -> None:
        """Re-rank children for ``first``: Fluxion orders a vertex's children by the free amount
        (at ``now``) of the last pruning type below each child, most free first; children no
        job touched yet come before all others. ``inner``: the edges inside subtrees the job
        holds whole (booked on their roots alone), which Fluxion's commit re-ranks too: with
        nothing free below them while the job holds them at ``now``."""
        if inner:
            self._reweigh_inner(inner, now, held_now)
        g = self.g
        gtype = g.type
        weigh_type = self._weigh_type
        kids = g.children[self.sub]
        totals_of = self.totals
        walked: set[int] | None = None  # vertices the job was committed below
        for u, c in pairs:
            if len(kids[u]) < 2:
                continue  # a sole child has no siblings to be ranked against
            totals = totals_of(c)
            if totals:
                self.rerank(u, c, now, totals)
                continue
            if not kids[c]:
                continue  # leaves keep their initial rank
            rtype = weigh_type.get(gtype[c], 0)
            if rtype == 0:
                rtype = self._weigh_type_of(c)
            if rtype is None:
                continue
            # children that all count below another parent (two-parent graphs): an
            # all-zero aggregate, which reads as nothing free once a job went below it
            if walked is None:
                walked = {p for p, _ in pairs}
            if c in walked:
                self._weigh(u, c, 0)

    def rerank(self, u: int, c: int, now: int, totals: dict[str, int]) -> None:
        """``first``'s rank of child ``c`` under ``u`` once a job was committed below ``c``
        (``totals``: what ``c`` has below it, not empty): by the free amount at ``now`` of
        the last pruning type below it (nothing while a job holds ``c`` whole); left as it
        is when ``c`` has none of that type free and no aggregate span was ever booked."""
        rtype = self._weigh_type.get(self.g.type[c], 0)
        if rtype == 0:
            rtype = self._weigh_type_of(c)
        if rtype is None:
            return
        whole = self._whole
        if c in whole and self.sched[c].used_during(now, 1):
            avail = 0  # held whole (sub_avail's first answer)
        else:
            # sub_avail(c, rtype, now, 1), its held-whole answer ruled out just above
            held = self.agg.get(c)
            total = totals.get(rtype)
            if total is None:
                avail = 0
            elif held is None:
                avail = total
            else:
                avail = total - held.used_during(rtype, now, 1)
            if avail == 0 and c not in whole and (held is None or not held.spans):
                return
        w = self.weights.get(u)
        if w is None or w.get(c, UNTOUCHED) != avail:
            self._weigh(u, c, avail)

    def _reweigh_inner(self, inner: list[tuple[int, int]], now: int, held_now: bool) -> None:
        kids = self.g.children[self.sub]
        for u, c in inner:
            if len(kids[u]) < 2:
                continue
            rtype = self._weigh_type_of(c)
            if rtype is None:
                continue
            if held_now:
                avail = 0
            else:
                totals = self.totals(c)
                avail = self.sub_avail(c, rtype, now, 1) if rtype in totals else 0
            self._weigh(u, c, avail)

    def _weigh_type_of(self, c: int) -> str | None:
        """The pruning type ``first`` weighs child ``c`` by (None: not weighed)."""
        ctype = self.g.type[c]
        rtype = self._weigh_type.get(ctype, 0)
        if rtype == 0:
            types = [t for t in self.prune_types if t != ctype]
            rtype = self._weigh_type[ctype] = types[-1] if types else None
        return rtype

    def _weigh(self, u: int, c: int, avail: int) -> None:
        """Give child ``c`` of ``u`` the weight ``avail`` (moving it in u's order)."""
        w = self.weights.get(u)
        if w is None:
            w = self.weights[u] = {}
            a = u  # u and everything above it now has a weighted vertex at or below it
            parent = self.g.parent[self.sub]
            while a != -1 and a not in self._weighted:
                self._weighted.add(a)
                a = parent[a]
        old = w.get(c, UNTOUCHED)
        if old != avail:
            self._move_child(u, w, c, old, avail)

    def _move_child(self, u: int, w: dict[int, int], c: int, old: int, avail: int) -> None:
        """Set c's weight, moving it within u's cached order (most free first, then higher
        uniq_id) instead of sorting every child again: wide roots have thousands."""
        order = self._order_cache.get(u)
        if order is not None:
            uid = self.g.uniq_id[c]
            old_key = order_key(old, uid)
            if order.remove(c, old_key):
                w[c] = avail
                key = order_key(avail, uid)
                order.insert(c, key)
                free = self._free.get(u)
                if free is not None:
                    hk = self._held_kids.get(u)
                    if hk is None or c not in hk.kids:  # c is in the free order: move it too
                        if free.remove(c, old_key):
                            free.insert(c, key)
                        else:
                            del self._free[u]
                return
            self._order_cache.pop(u, None)
        self._free.pop(u, None)
        w[c] = avail


def _appender(out: list):
    def emit(*entry) -> None:
        out.append(entry)
    return emit


def _count_down(counts: dict[int, int], key: int) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]


def _resize(planner: Planner, span: int, amount: int) -> int:
    """Replace ``span`` by one of ``amount`` over the same window; returns the new span id."""
    at, end, _ = planner.spans[span]
    planner.remove_span(span)
    return planner.add_span(at, end - at, amount)
