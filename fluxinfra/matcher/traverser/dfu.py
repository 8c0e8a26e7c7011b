"""Depth-first-and-up (DFU) selection: Fluxion's ``dfu_impl.cpp``.

This follows Fluxion's ``dfu_impl`` semantics (facts, not code): a pre-order walk from the root
pairs graph vertices with jobspec levels (``test``), prunes subtrees that cannot help (status,
own availability, exclusivity checker, subtree aggregates), scores every qualifying child, keeps
the best ``count`` per requested type at each constrained level (``enforce`` marks the chosen
edges). The second walk (``update``), which follows the marked edges in graph order to add
planner spans and emit the allocated vertices post-order, and the cancel are
:class:`~fluxinfra.matcher.traverser.update.Booking`'s, which :class:`Traverser` extends.

State lives in lazily created dicts keyed by vertex index, so vertices no job ever touched cost
nothing. Subtree aggregates (free amount of every type below a vertex, over time) make pruning
O(request) rather than O(graph) once a cluster is busy.

Why this file is long (about 1,400 lines): it is the methods of one compiled extension type,
which Cython keeps in the type's own module; what could leave did (the books and commit walks
in ``update``, child order, memo records, scoring). The sections below follow the paths the
package docstring draws: the guarded walk, the full walk remembered per subtree, whole free
subtrees replayed by shape, and first-fit's dynamic walk.
"""

from __future__ import annotations

from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING

from fluxinfra.matcher.evaluators import (
    MATCH_MET,
    MATCH_UNMET,
    Candidate,
    Evals,
    Scoring,
    cmod,
    perf_class,
    score_runs,
    worse,
)
from fluxinfra.matcher.jobspec import Resource
from fluxinfra.matcher.planner import type_set
from fluxinfra.matcher.traverser.job import AT_ALLOC, AT_NO_ALLOC, AT_SAT
from fluxinfra.matcher.traverser.memo import (
    ChosenSlot,
    Rebound,
    ReplayedSlots,
    expand_slots,
    per_request,
    request_key,
)
from fluxinfra.matcher.traverser.order import (
    UNTOUCHED,
    ChildOrder,
    HeldKids,
    by_place,
    order_key,
    untouched_keys,
)
from fluxinfra.matcher.traverser.update import X_NJOBS, Booking

if TYPE_CHECKING:  # pragma: no cover - typing only (compiled: dfu.pxd cimports Meta)
    from fluxinfra.matcher.traverser.job import Meta

__all__ = ["Traverser"]



NONE_MATCH, PRISTINE_NONE_MATCH, RESOURCE_MATCH, SLOT_MATCH = range(4)
_EMPTY: dict[str, int] = {}


#: what a guarded walk left unexplored: one child, a vertex's children from one on, or
#: the slots a slot vertex would still form (see Traverser._bound)
_ONE, _KIDS, _SLOTS = range(3)




#: recorded subtree selections kept at most (one per subtree shape x request shape)
MAX_TEMPLATES = 4096


#: subtrees the full walk remembers at most (then it starts over)
_MAX_MEMO = 400_000


#: changed vertices (``_dirty``) a commit or cancel lets pile up before it stamps them (see
#: _restamp): the express lane commits without a full walk, which alone stamped them
_RESTAMP_AT = 1024


_LAYOUT = "layout"  # key of what one untouched subtree of a layout found, for all of them


_WIDE_KEY = "wide"  # key of the last exploration of a vertex's children


#: vertices with more children than this keep their last exploration (_explore_kept)
_WIDE = 16


#: a wide vertex's children are passed up in blocks of this many (Traverser._explore_wide)
_BLOCK = 16


#: policies whose rankings the guard could seldom vouch for: locality ranks the top level
#: by runs of every candidate's score, variation ties every vertex of a performance class
_UNGUARDED = ("locality", "variation")


class _GuardFailed(Exception):
    """A selection made from the first candidates found might differ from Fluxion's ranking
    of every candidate: rank them all (see Traverser.select)."""


class Traverser(Booking):
    """Fluxion's traverser of one graph: the selection walk (``dfu_impl.cpp``) over the books
    and commit walks of :class:`~fluxinfra.matcher.traverser.update.Booking`."""

    # -- selection --------------------------------------------------------------------------
    def select(self, resources: list[Resource], meta: Meta, excl: bool) -> bool:
        """Choose what Fluxion's traversal chooses for ``resources`` (marks for the commit).

        ``first``-fit policies explore each vertex's children in Fluxion's dynamic order and
        stop once a level has what it needs, as Fluxion does. The other policies rank every
        candidate in Fluxion; here their children are explored in the policy's order first
        and the walk stops as ``first``'s does, under a guard: at every ranking, each
        candidate left unexplored must score strictly worse than the last one chosen (by a
        bound from the ids below it) and the chosen must not tie with the next. Only then is
        the choice Fluxion's; otherwise every candidate is ranked (the full walk)."""
        express = self.express if meta.constraint is None else None
        if express is not None:
            hit = express.select(resources, meta, excl)
            if hit is not None:
                return hit
        if self.fast and not self.policy.stop_on_k and self.visited_free() and \
                self.policy.kind not in _UNGUARDED:
            self._guard = [[]]
            try:
                return self._select(resources, meta, excl)
            except _GuardFailed:
                pass
            finally:
                self._guard = None
        if self.policy.stop_on_k:
            return self._select(resources, meta, excl)
        self._static = True
        try:
            return self._select(resources, meta, excl)
        finally:
            self._static = False

    def visited_free(self) -> bool:
        """The guarded walk applies: no vertex has two parents (the full walk's graph order
        decides which parent claims it) and sibling slots are not alternatives (flexible)."""
        return not self.g.multi_parent and type(self) is Traverser

    def _select(self, resources: list[Resource], meta: Meta, excl: bool) -> bool:
        express = self.express
        if self._dirty:
            self._restamp()
        self._meta = meta
        self._replayed = {}
        self._fresh = set()
        self._memo_on = self._static and self.fast and not self.policy.factors \
            and self.visited_free()
        # what the full walk finds also depends on the request's exclusive types and RFC 31
        # constraint (tested at nodes by name, rank and properties: no layout sharing then)
        self._memo_types = (frozenset(self.excl_types),
                            None if meta.constraint is None else repr(meta.constraint))
        self.marks = {}
        self.visited: set[int] | None = set() if self.g.multi_parent else None
        self.chosen_slots = []
        self._ml = 0
        self.preorder = self.postorder = 0
        root = self.g.roots[self.sub]
        dfu = Scoring()
        ok, x_in = self._dom_dfv(meta, root, resources, True, excl, dfu)
        if not ok:
            return False
        dfu.evals(self.g.type[root]).add(Candidate(
            dfu.overall, dfu.avail, 0, excl, True, ((dfu.avail, dfu.avail, excl, root, -1),)))
        needs = self._resolve_graph(root, resources, dfu)
        if needs is None:
            return False
        self.root_mark = (needs, x_in)
        if express is not None:
            express.learn()
        return True

    def _test(self, u: int, resources: list[Resource], pristine: bool):
        utype = self.g.type[u]
        slot_res = match_res = None
        nslots = 0
        matched = False
        for r in resources:
            if r.type == utype:
                if matched:
                    return resources, 0, NONE_MATCH, pristine
                match_res = r
                for c in r.with_:
                    if c.type == "slot":
                        slot_res = c
                        nslots = c.effective_max
                matched = True
            elif r.type == "slot":
                if matched:
                    return resources, 0, NONE_MATCH, pristine
                slot_res = r
                nslots = r.effective_max
                matched = True
        if slot_res is not None and self._slot_match(u, slot_res):
            return slot_res.with_, nslots, SLOT_MATCH, False
        if match_res is not None:
            return match_res.with_, nslots, RESOURCE_MATCH, False
        return resources, nslots, (PRISTINE_NONE_MATCH if pristine else NONE_MATCH), pristine

    def _slot_match(self, u: int, slot: Resource) -> bool:
        kid_types = self._kid_types.get(u)
        if kid_types is None:
            get = self.g.type.__getitem__
            children = self.g.children
            if len(children) == 1:  # one subsystem (most graphs)
                kid_types = map(get, next(iter(children.values()))[u])
            else:
                kid_types = frozenset().union(*(map(get, kids[u]) for kids in children.values()))
            kid_types = self._kid_types[u] = type_set(kid_types)
        return all(c.type in kid_types for c in slot.with_)

    def _cannot_supply(self, meta: Meta, u: int, resources: list[Resource]) -> bool:
        """True when ``u``'s subtree cannot give even one instance of any request at this
        level (it would contribute nothing, so skipping it changes no result)."""
        g = self.g
        if g.status[u] == 0 and meta.alloc_type != AT_SAT:
            return True
        totals = self.totals(u)
        utype = g.type[u]
        for r in resources:
            if r.type == utype or r.type == "slot":
                return False  # u itself is (or holds) the candidate: let the full checks run
            if r.type not in totals:
                continue
            if self.sub_avail(u, r.type, meta.at, meta.duration) < 1:
                continue
            if all(self.sub_avail(u, t, meta.at, meta.duration) >= n
                   for t, n in r.user_data.items() if t in totals):
                return False
        return True

    def _prune(self, meta: Meta, x_in: bool, u: int, resources: list[Resource]) -> bool:
        """True when ``u`` cannot contribute (Fluxion's prune)."""
        g = self.g
        if meta.alloc_type != AT_SAT and not g.status[u]:
            return True
        if meta.constraint is not None and self._by_constraint(meta, u):
            return True
        if self.avail(u, meta.at, meta.duration) == 0:
            return True
        return self._prune_resources(meta, x_in, u, resources)

    def _by_constraint(self, meta: Meta, u: int) -> bool:
        """Fluxion's by_constraint: a node (or storage_node) the RFC 31 constraint rejects."""
        g = self.g
        return (meta.constraint.applies_to(g.type[u])
                and not meta.constraint.matches(g.name[u], g.rank[u], g.properties[u]))

    def _prune_resources(self, meta: Meta, x_in: bool, u: int,
                         resources: list[Resource]) -> bool:
        g = self.g
        utype = g.type[u]
        for r in resources:
            if r.type != utype and r.type != "slot":
                continue
            if r.type != "slot" and self._by_excl(meta, u, x_in, r):
                return True
            if r.user_data and self.totals(u) and self._by_subplan(meta, u, r):
                return True
        return False

    def _by_excl(self, meta: Meta, u: int, x_in: bool, r: Resource) -> bool:
        if x_in and r.exclusive is False:
            return True
        if x_in or r.exclusive:
            if self.exact_pools and self.g.size[u] > 1:
                return False  # a split pool is shared by amount; its planner decides
            if (meta.at == meta.now and meta.alloc_type in (AT_ALLOC, AT_NO_ALLOC)
                    and (self.allocs.get(u) or self._whole_alloc and self._allocated_above(u))):
                return True
            p = self.xcheck.get(u)
            if p is not None and p.avail_during(meta.at, meta.duration) < X_NJOBS:
                return True
        return False

    def _by_subplan(self, meta: Meta, u: int, r: Resource) -> bool:
        totals = self.totals(u)
        for rtype, need in r.user_data.items():
            if rtype not in totals:
                if rtype in self.prune_types:
                    return True
                continue
            if self.sub_avail(u, rtype, meta.at, meta.duration) < need:
                return True
        return False

    def _discover(self, u: int) -> None:
        factors = self.policy.factors
        if factors:
            f = factors.get(self.g.type[u])
            if f is not None:
                add_by, mul_by = f
                factor = (self.g.id[u] + 1 + add_by) * mul_by + abs(
                    cmod(self.g.uniq_id[u], mul_by) - 1)
                self._ml += factor
                self._last_factor[self.g.type[u]] = factor

    def _dom_dfv(self, meta: Meta, u: int, resources: list[Resource], pristine: bool,
                 excl: bool, to_parent: Scoring) -> tuple[bool, bool]:
        g = self.g
        x_in = excl or any(r.exclusive and r.type == g.type[u] for r in resources)
        nxt, nslots, kind, check_pres = self._test(u, resources, pristine)
        self.preorder += 1
        if kind == NONE_MATCH:
            return False, excl
        if self._prune(meta, x_in, u, resources):
            return False, excl
        if self.visited is not None:
            self.visited.add(u)
        self._discover(u)
        key = None
        if (kind == RESOURCE_MATCH and self.fast and g.type[u] in self.excl_types
                and meta.alloc_type != AT_NO_ALLOC and self.visited is None
                and meta.constraint is None and self._untouched(u)):
            key = self._template_key(u, nxt, x_in, check_pres, meta)
            if key is not None and key in self._templates:
                return self._replay(u, resources, key, to_parent), x_in
            first_slot, pre0, post0 = len(self.chosen_slots), self.preorder, self.postorder
        dfu = Scoring()
        guard = self._guard
        if guard is not None and kind == RESOURCE_MATCH and nxt:
            guard.append([])  # u ranks its children's candidates: a scope of its own
            try:
                avail = self._visit_below(meta, u, resources, nxt, nslots, kind, check_pres,
                                          x_in, dfu)
            finally:
                guard.pop()
        else:
            avail = self._visit_below(meta, u, resources, nxt, nslots, kind, check_pres,
                                      x_in, dfu)
        if avail == 0:
            return False, x_in
        if avail < 0:
            if key is not None and len(self._templates) < MAX_TEMPLATES:
                self._templates[key] = None
            return False, x_in
        self._resolve(u, dfu, to_parent)
        if key is not None and dfu.hier:
            self._record(u, key, first_slot, self.preorder - pre0, self.postorder - post0)
        to_parent.avail = avail
        to_parent.overall = dfu.overall
        self.postorder += 1
        return True, x_in

    def _visit_below(self, meta: Meta, u: int, resources: list[Resource],
                     nxt: list[Resource], nslots: int, kind: int, pristine: bool, x_in: bool,
                     dfu: Scoring) -> int:
        """Explore below ``u`` (its slot, or its children) and finish it: u's availability,
        0 when it has none (Fluxion then skips the finish, score factor included), -1 when
        the finish fails."""
        if kind == SLOT_MATCH:
            self._dom_slot(meta, u, nxt, nslots, pristine, dfu)
        else:
            self._explore(meta, u, nxt, pristine, x_in, dfu, 1)
        avail = self.avail(u, meta.at, meta.duration)
        if avail == 0:
            return 0
        return avail if self._finish_vtx(u, resources, dfu) else -1

    # -- whole free subtrees (fast mode) -----------------------------------------------------
    # A vertex the commit will hold whole (its type is exclusive; fast mode) whose subtree
    # carries no span at all (no job ever holds anything below it now or later) is explored
    # exactly like any other such subtree of the same *shape*: the same types, sizes, ids,
    # statuses and perf classes, with children in the same policy order. Nothing else is read
    # below it (no planner has a span, the commit ignores the marks below a held vertex), so
    # the selection is recorded once per shape and replayed by position: only the slot
    # instances are kept, mapped onto the vertex's own subtree.

    def _allocated_above(self, u: int) -> bool:
        """An ancestor of ``u`` is held whole by an allocation: Fluxion's commit would have
        booked that allocation on ``u`` too (its exclusivity check refuses a vertex with any
        allocation, ended or not, until the job is cancelled)."""
        parent = self.g.parent[self.sub]
        whole = self._whole_alloc
        a = parent[u]
        while a != -1:
            if a in whole:
                return True
            a = parent[a]
        return False

    def _untouched(self, u: int) -> bool:
        """No span on ``u`` nor anywhere below it (every span below shows in u's aggregates)."""
        if self._whole_alloc and self._allocated_above(u):
            return False
        return self._untouched_here(u)

    def _untouched_here(self, u: int) -> bool:
        p = self.sched.get(u)
        if p is not None and p.spans:
            return False
        p = self.xcheck.get(u)
        if p is not None and p.spans:
            return False
        p = self.agg.get(u)
        return p is None or not p.spans

    def _template_key(self, u: int, resources: list[Resource], x_in: bool, pristine: bool,
                      meta: Meta) -> tuple | None:
        factors = self.policy.factors
        if factors and any(t in factors for t in self.totals(u)):
            return None  # a score factor below u would rank its subtree by absolute ids
        shape = self._shapes.get(u)
        if shape is None:
            shape = self._shape(u)
        weights = None
        if self.policy.stop_on_k and u in self._weighted:
            # ``first`` orders children by how free they were when last committed: the
            # weights of u and of each vertex with children below it (inner_edges' order),
            # each child by its place among its parent's (subtrees of one shape share them;
            # no list of every vertex below u is needed)
            inner = self._inner_list(u)
            found = list(map(self.weights.get, inner))
            if any(found):
                kids = self.g.children[self.sub]
                weights = tuple(by_place(kids[v], w) if w else ()
                                for v, w in zip(inner, found, strict=True))
        rkey = per_request(self._request_keys, resources, request_key)
        return (shape, weights, rkey, x_in, pristine, meta.alloc_type == AT_SAT)

    def _shape(self, u: int) -> int:
        """A small int naming everything the selection below ``u`` reads of its subtree:
        the tree (post-order depths, graph order), types, sizes, ids, statuses, the uniq_id
        order of siblings (``first``) and perf classes (``variation``); u's own id only
        shifts its score, so subtrees built alike share one shape."""
        g = self.g
        layout = g.layouts.get(u) if g.layouts else None
        if layout is not None:
            shape = self._layout_shapes.get(layout)
            if shape is not None:  # built alike: the shape worked out for its first vertex
                self._shapes[u] = shape
                return shape
        depths, post = self._post_below(u)
        uid_order = None
        if self.policy.stop_on_k:
            kids, uid = g.children[self.sub], g.uniq_id
            uid_order = []
            for v in self._inner_list(u):
                us = list(map(uid.__getitem__, kids[v]))
                if us == sorted(us):
                    uid_order.append(None)  # ascending in graph order (the usual case)
                else:
                    uid_order.append(tuple(sorted(range(len(us)), key=us.__getitem__)))
            uid_order = tuple(uid_order)
        perf = None
        if self.policy.kind == "variation":
            props = g.properties
            perf = tuple((i, perf_class(props[v])) for i, v in enumerate(post) if props[v])
        key = (g.type[u], g.size[u], g.status[u], depths,
               tuple(map(g.type.__getitem__, post)), tuple(map(g.size.__getitem__, post)),
               tuple(map(g.id.__getitem__, post)), tuple(map(g.status.__getitem__, post)),
               uid_order, perf)
        shape = self._shape_ids.get(key)
        if shape is None:
            shape = self._shape_ids[key] = len(self._shape_ids)
        self._shapes[u] = shape
        if layout is not None:
            self._layout_shapes[layout] = shape
        return shape

    def _record(self, u: int, key: tuple, first_slot: int, pre: int, post: int) -> None:
        where = {v: i for i, v in enumerate(self._post_below(u)[1])}
        chosen = expand_slots([item for item in self.chosen_slots[first_slot:]
                               if self.reached(item, u)])
        if any(c not in where for edges in chosen for c, _ in edges):
            return  # a slot of u itself: not replayable by position below u
        slots = tuple(tuple((where[c], amount) for c, amount in edges) for edges in chosen)
        if len(self._templates) >= MAX_TEMPLATES:
            self._templates.clear()  # many request shapes: start over rather than grow
        self._templates[key] = (slots, pre, post)

    def reached(self, item, stop: int) -> bool:
        """Slot ``item`` of :attr:`chosen_slots` was chosen on the path the commit walks
        down from ``stop`` (the root, or a vertex being recorded): a ranking chooses slots
        at every vertex it visits, even below candidates left out higher up. Its ranking
        vertex (a replayed subtree's root) must hang from ``stop`` by marks."""
        v = item[1] if type(item) is ReplayedSlots else item.top
        if v == -1:
            return stop == self.g.roots[self.sub]  # chosen by the root's ranking
        marks = self.marks
        while v != stop:
            mark = marks.get(v)
            if mark is None or mark[2] == -1:
                return False
            v = mark[2]
        return True

    def reached_slots(self) -> list:
        """The slots of the last selection that the commit reaches (see :meth:`reached`)."""
        root = self.g.roots[self.sub]
        return [item for item in self.chosen_slots if self.reached(item, root)]

    def _replay(self, u: int, resources: list[Resource], key: tuple, to_parent: Scoring) -> bool:
        g = self.g
        factors = self.policy.factors
        if factors and g.type[u] in factors:
            self._ml -= self._last_factor.get(g.type[u], 0)
        tpl = self._templates[key]
        if tpl is None:
            return False
        slots, pre, post = tpl
        self._inside += 1
        if slots:
            self.chosen_slots.append(ReplayedSlots((self.post_below, u, slots)))  # expanded later
        self.preorder += pre
        self.postorder += post + 1
        to_parent.avail = g.size[u]
        if self.policy.kind == "variation":
            to_parent.overall = MATCH_MET + perf_class(g.properties[u])
        else:
            to_parent.overall = MATCH_MET + self._ml + g.id[u] + 1
        return True

    def _finish_vtx(self, u: int, resources: list[Resource], dfu: Scoring) -> bool:
        g = self.g
        utype = g.type[u]
        met = True
        high = self.policy.high
        for r in resources:
            if r.type != utype:
                continue
            for c in r.with_:
                count = c.calc_count(dfu.qual(c.type))
                if count == 0:
                    met = False
                    break
                ev = dfu.evals(c.type)
                if ev.choose_best_k(count, high):
                    dfu.hier = True
                    if self._guard is not None:
                        self._check(ev, c, high)
        factors = self.policy.factors
        if factors and utype in factors:
            self._ml -= self._last_factor.get(utype, 0)
        if not met:
            dfu.overall = MATCH_UNMET
        elif self.policy.kind == "variation":
            dfu.overall = MATCH_MET + perf_class(g.properties[u])
        else:
            dfu.overall = MATCH_MET + self._ml + g.id[u] + 1
        return met

    def _resolve(self, u: int, dfu: Scoring, to_parent: Scoring) -> None:
        if dfu.overall > MATCH_UNMET:
            if dfu.hier:
                self._enforce(dfu, False, u)
            else:
                to_parent.merge(dfu)

    def _children(self, u: int) -> list[int]:
        return self.g.children[self.sub][u]

    def _explore(self, meta: Meta, u: int, resources: list[Resource], pristine: bool,
                 excl: bool, dfu: Scoring, multiplier: int) -> bool:
        if self.policy.stop_on_k:
            return self._explore_dynamic(meta, u, resources, pristine, excl, dfu, multiplier,
                                         self._ordered_children(u))
        if self._guard is not None:
            return self._explore_dynamic(meta, u, resources, pristine, excl, dfu, multiplier,
                                         self._policy_children(u))
        if self._memo_on:
            return self._explore_kept(meta, u, resources, pristine, excl, dfu)
        found = False
        gtype = self.g.type
        visited = self.visited
        leaves = self._leaf_plan(resources)
        kids = self.g.children[self.sub]
        for c in self._children(u):
            if visited is not None and c in visited:
                continue
            if leaves is not None and not kids[c] and gtype[c] in leaves:
                hit = self._leaf(meta, c, leaves[gtype[c]], excl)
                if hit is None:
                    continue
                score, cnt, x = hit
            else:
                ok, x = self._dom_dfv(meta, c, resources, pristine, excl, dfu)
                if not ok:
                    continue
                score, cnt = dfu.overall, dfu.avail
            dfu.evals(gtype[c]).add(Candidate(score, cnt, 0, x, False, ((cnt, cnt, x, c, u),)))
            found = True
        return found

    # -- the full walk, remembered per subtree ---------------------------------------------
    # What the full walk finds below a vertex (whether it qualifies, its score, the
    # candidates it passes up) depends only on the request, the window and what its subtree
    # holds: it is kept per (vertex, request, window) until something in that subtree changes
    # (every change marks its vertex, and the next selection re-stamps it and its ancestors),
    # so a selection re-walks only the paths that changed since the last one. A subtree
    # nothing is held in answers for any window. The rankings a remembered subtree made
    # inside it (its marks, the slots it chose) are made again if a ranking above chooses
    # it (_rederive).

    def _explore_kept(self, meta: Meta, u: int, resources: list[Resource], pristine: bool,
                      excl: bool, dfu: Scoring) -> bool:
        """The full walk's exploration of ``u``'s children, each remembered (_visit); for a
        wide vertex, the last exploration is kept too, so a child whose subtree did not change
        since is taken from it without even a look-up."""
        context = (per_request(self._request_keys, resources, request_key), pristine, excl,
                   meta.alloc_type, self._memo_types)
        window = (meta.at, meta.duration, meta.at == meta.now)
        children = self._children(u)
        ver = self._ver
        stamps = [ver.get(c, 0) for c in children]
        if len(children) > _WIDE:
            return self._explore_wide(meta, u, children, stamps, context, window, resources,
                                      pristine, excl, dfu)
        leaves = self._leaf_plan(resources)
        kids = self.g.children[self.sub]
        gtype = self.g.type
        replayed = self._replayed
        found = False
        fresh = self._fresh
        for c in children:
            out = self._child_outcome(meta, u, c, leaves, kids, gtype, context, window,
                                      resources, pristine, excl)
            if out is None:
                continue
            group, merged, ctx, pre, post = out
            self.preorder += pre
            self.postorder += post
            for rtype, got in merged:
                dfu.evals(rtype).merge(got, True)
            if ctx is not None and c not in fresh:  # walked just now: its marks are made
                replayed[c] = ctx
            dfu.evals(gtype[c]).add(group)
            found = True
        return found

    def _child_outcome(self, meta: Meta, u: int, c: int, leaves, kids, gtype, context: tuple,
                       window: tuple, resources: list[Resource], pristine: bool,
                       excl: bool) -> tuple | None:
        """What child ``c`` of ``u`` gives it (see _visit): a leaf by the short path, else
        remembered or walked."""
        if leaves is not None and not kids[c] and gtype[c] in leaves:
            hit = self._leaf(meta, c, leaves[gtype[c]], excl)
            return None if hit is None else (
                Candidate(hit[0], hit[1], 0, hit[2], False, ((hit[1], hit[1], hit[2], c, u),)),
                (), None, 1, 1)
        return self._visit(context, window, meta, c, resources, pristine, excl, u)

    def _explore_wide(self, meta: Meta, u: int, children: list[int], stamps: list[int],
                      context: tuple, window: tuple, resources: list[Resource], pristine: bool,
                      excl: bool, dfu: Scoring) -> bool:
        """_explore_kept for a vertex of many children (a rack's nodes, a machine's racks),
        in blocks of _BLOCK children. The last exploration is kept with, per block, what its
        children pass up gathered once (Evals per type, merged by reference: never changed
        again), so a block none of whose subtrees changed since is passed up whole, not child
        by child: a match that changed one node of a 256-node rack merges 16 blocks and walks
        the 16 children of one. The candidates come out in the same order, child by child."""
        stale = bool(self._whole_alloc) and (u in self._whole_alloc
                                             or self._allocated_above(u))
        wide = (_WIDE_KEY, u, context, window, stale)
        kept = self._memo.get(wide)
        old_stamps, old, old_blocks = kept if kept is not None else (None, None, None)
        leaves = self._leaf_plan(resources)
        kids = self.g.children[self.sub]
        gtype = self.g.type
        replayed = self._replayed
        fresh = self._fresh
        outcomes: list = []
        blocks: list = []
        found = False
        for lo in range(0, len(children), _BLOCK):
            hi = lo + _BLOCK
            if old is not None and old_stamps[lo:hi] == stamps[lo:hi]:
                block = old_blocks[lo // _BLOCK]
                outcomes += old[lo:hi]
            else:
                got_here = Scoring()  # (only its evals: an Evals per type, in order)
                pre = post = 0
                replays = []
                for i in range(lo, min(hi, len(children))):
                    c = children[i]
                    if old is not None and old_stamps[i] == stamps[i]:
                        out = old[i]
                    else:
                        out = self._child_outcome(meta, u, c, leaves, kids, gtype, context,
                                                  window, resources, pristine, excl)
                    outcomes.append(out)
                    if out is None:
                        continue
                    group, merged, ctx, c_pre, c_post = out
                    pre += c_pre
                    post += c_post
                    for rtype, got in merged:
                        got_here.evals(rtype).merge(got, True)
                    if ctx is not None:
                        replays.append((c, ctx))
                    got_here.evals(gtype[c]).add(group)
                block = (tuple(got_here.ev.items()), pre, post, tuple(replays))
            blocks.append(block)
            evs, pre, post, replays = block
            if not evs:
                continue
            self.preorder += pre
            self.postorder += post
            for rtype, got in evs:
                dfu.evals(rtype).merge(got, True)
            for c, ctx in replays:
                if c not in fresh:  # walked just now: its marks are made
                    replayed[c] = ctx
            found = True
        self._memo[wide] = (stamps, outcomes, blocks)
        return found

    def _visit(self, context: tuple, window: tuple, meta: Meta, c: int,
               resources: list[Resource], pristine: bool, excl: bool, u: int) -> tuple | None:
        """``_dom_dfv(c)`` below ``u``, remembered (see above): None when ``c`` does not
        qualify, else what it gives its parent: (its group, the candidates it passes up,
        (resources, pristine, excl) when rankings inside it made marks, visit counts).
        ``context`` is the request, ``pristine``, ``excl``, the allocation type and the
        exclusive types; ``window`` (at, duration, at is now) counts unless nothing is held
        below ``c``."""
        layout = None
        if self._whole_alloc and self._allocated_above(c):
            key = (c, context, window, True)  # an ended allocation above still counts
        elif self._untouched_here(c):
            key = (c, context)
            # one outcome per layout, every policy (locality's runs and variation's perf
            # classes included: the replayed scores carry them); an RFC 31 constraint
            # names nodes, so none then
            layout = self.g.layouts.get(c) if self.g.layouts and context[-1][1] is None \
                else None
            if layout is not None:
                shared = self._memo.get((_LAYOUT, layout, context))
                if shared is not None:
                    return self._replay_layout(c, u, shared, resources, pristine, excl)
        else:
            key = (c, context, window)
        stamp = self._ver.get(c, 0)
        memo = self._memo
        hit = memo.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        capture = Scoring()
        pre, post, inner = self.preorder, self.postorder, self._inside
        ok, x = self._dom_dfv(meta, c, resources, pristine, excl, capture)
        self._fresh.add(c)
        pre, post = self.preorder - pre, self.postorder - post
        self.preorder -= pre  # counted again by the caller
        self.postorder -= post
        if ok:
            cnt = capture.avail
            out = (Candidate(capture.overall, cnt, 0, x, False, ((cnt, cnt, x, c, u),)),
                   tuple(capture.ev.items()),
                   (resources, pristine, excl) if self._inside != inner else None, pre, post)
        else:
            out = None
        if len(memo) >= _MAX_MEMO:
            memo.clear()
        memo[key] = (stamp, out)
        if layout is not None:
            # untouched and built like others: what it found holds for all of them, by
            # position in its subtree (scores below depend on ids, which they share)
            memo[(_LAYOUT, layout, context)] = self._positional(c, out)
        return out

    def _positional(self, c: int, out: tuple | None) -> tuple | None:
        """``c``'s outcome with every vertex named by its position below ``c`` (-1: c)."""
        if out is None:
            return None
        group, merged, ctx, pre, post = out
        pos = {v: i for i, v in enumerate(self._post_below(c)[1])}
        pos[c] = -1
        where = pos.__getitem__
        kinds = []
        for rtype, got in merged:
            groups = tuple((g.score, g.count, g.exclusive, g.root,
                            tuple((e[0], e[1], e[2], where(e[3]), where(e[4])) for e in g.edges))
                           for g in got.groups())
            scores = got.scores()
            kinds.append((rtype, (groups, got.qual, got.total, scores,
                                  (min(scores), max(scores)), frozenset(scores), {})))
        return (group.score - self._own_score(c), group.count, group.exclusive, tuple(kinds),
                ctx is not None, pre, post)

    def _own_score(self, c: int) -> int:
        """What ``c``'s own id adds to its score (its layout's others have their own)."""
        if self.policy.kind == "variation":
            return 0
        return self.g.id[c]

    def _replay_layout(self, c: int, u: int, shared: tuple | None, resources: list[Resource],
                       pristine: bool, excl: bool) -> tuple | None:
        if shared is None:
            return None
        score, cnt, x, kinds, inner, pre, post = shared
        if inner:
            # rankings inside c made marks (made again by _unfold if c is chosen): the
            # subtrees around c must say so too, as a walk of c would have made them
            self._inside += 1
        merged = tuple((rtype, Rebound(kind, self.post_below, c)) for rtype, kind in kinds)
        return (Candidate(score + self._own_score(c), cnt, 0, x, False, ((cnt, cnt, x, c, u),)),
                merged,
                (resources, pristine, excl) if inner else None, pre, post)

    def _unfold(self, x: int) -> None:
        """``x`` was chosen: if it lies in (or is) a remembered subtree, walk the remembered
        subtrees around it again, from the outermost down, until the rankings inside ``x``
        have left their marks and slots for the commit."""
        replayed = self._replayed
        parent = self.g.parent[self.sub]
        while True:
            a = x
            while a != -1 and a not in replayed:
                a = parent[a]
            if a == -1:
                return
            resources, pristine, excl = replayed.pop(a)
            self._dom_dfv(self._meta, a, resources, pristine, excl, Scoring())
            if a == x:
                return

    def mark_dirty(self, v: int) -> None:
        """Something in ``v`` changed (a span, its status): forget what the full walk
        remembered of ``v`` and of every vertex above it (at the next selection)."""
        self._dirty.append(v)

    def _restamp(self) -> None:
        """Give every vertex changed since the last stamp, and each vertex above it, a new
        stamp (the full walk's memo is good for a subtree while its stamp is unchanged).
        The full walk stamps first; a commit or cancel stamps too once ``_RESTAMP_AT``
        changes wait (first-fit streams the express lane serves walk rarely: the list grew
        by every vertex of every job until a walk met it, 9-13 ms at once at 16,384 nodes
        after 180 jobs of 64 nodes)."""
        clock = self._clock = self._clock + 1
        ver = self._ver
        parent = self.g.parent[self.sub]
        for v in self._dirty:
            while v != -1 and ver.get(v) != clock:
                ver[v] = clock
                v = parent[v]
        self._dirty.clear()

    def _bound_backlog(self) -> None:
        """Stamp the waiting changes once ``_RESTAMP_AT`` wait (a commit's or cancel's
        first step: see :meth:`_restamp`)."""
        if len(self._dirty) >= _RESTAMP_AT:
            self._restamp()

    def _leaf_plan(self, resources: list[Resource]) -> dict[str, Resource] | None:
        """type -> request, when every request at this level is a plain leaf request (no
        slot, no children, no repeated type, no score factor): leaves then take a short path
        with the same outcome as the full visit."""
        return per_request(self._leaf_plans, resources, self._make_leaf_plan)

    def _make_leaf_plan(self, resources: list[Resource]) -> dict[str, Resource] | None:
        plan: dict[str, Resource] = {}
        factors = self.policy.factors
        for r in resources:
            if r.type == "slot" or r.with_ or r.type in plan or r.type in factors:
                return None
            plan[r.type] = r
        return plan

    def _leaf(self, meta: Meta, c: int, r: Resource, excl: bool):
        """Visit leaf ``c`` for request ``r``: (score, amount free, exclusive) or None."""
        g = self.g
        self.preorder += 1
        x_in = excl or bool(r.exclusive)
        if meta.alloc_type != AT_SAT and not g.status[c]:
            return None
        if meta.constraint is not None and self._by_constraint(meta, c):
            return None
        p = self.sched.get(c)
        avail = g.size[c] if p is None else p.avail_during(meta.at, meta.duration)
        if avail == 0 or self._by_excl(meta, c, x_in, r):
            return None
        if self.visited is not None:
            self.visited.add(c)
        self.postorder += 1
        if self.policy.kind == "variation":
            return MATCH_MET + perf_class(g.properties[c]), avail, x_in
        return MATCH_MET + self._ml + g.id[c] + 1, avail, x_in

    def _ordered_children(self, u: int) -> ChildOrder:
        """Children for ``first``: untouched ones first, then most free; higher uniq_id first."""
        cached = self._order_cache.get(u)
        if cached is None:
            w = self.weights.get(u)
            uid = self.g.uniq_id
            if w:
                kids = sorted(self._children(u),
                              key=lambda c: (w.get(c, UNTOUCHED), uid[c]), reverse=True)
                keys = [order_key(w.get(c, UNTOUCHED), uid[c]) for c in kids]
            else:  # no child weighed yet (first visits of a spreading ``first``): by uniq_id
                kids = self._children(u)
                ids = list(map(uid.__getitem__, kids))
                if ids == sorted(ids):  # made in uniq_id order (a generated graph): reversed
                    kids = kids[::-1]
                else:
                    kids = sorted(kids, key=uid.__getitem__, reverse=True)
                # the keys only once a move needs them (a vertex of leaves never moves any)
                cached = self._order_cache[u] = ChildOrder(kids, make=partial(untouched_keys, uid))
                return cached
            # the sort keys, ascending, beside the order (moves bisect them at C speed)
            cached = self._order_cache[u] = ChildOrder(kids, keys)
        return cached

    def _policy_children(self, u: int) -> list[int]:
        """Children in the order the policy prefers them (high: largest id first)."""
        cached = self._policy_cache.get(u)
        if cached is None:
            ids = self.g.id
            kids = self._children(u)
            if self.policy.kind == "variation":
                props = self.g.properties
                cached = sorted(kids, key=lambda c: perf_class(props[c]))
            elif self.policy.high:
                cached = sorted(kids, key=lambda c: -ids[c])
            else:
                cached = sorted(kids, key=ids.__getitem__)
            self._policy_cache[u] = cached
        return cached

    # -- children not held whole ------------------------------------------------------------
    def _free_children(self, u: int) -> ChildOrder | None:
        """``u``'s children in exploration order (``first``'s weights, or the policy's) minus
        those held whole (``_held_kids``, whatever their windows: use it only when every
        hold covers the match). None when the order's keys are not all distinct."""
        free = self._free.get(u, _MISSING)
        if free is _MISSING:
            if self.policy.stop_on_k:
                order, keys = self._ordered_children(u).lists()
            else:
                order = self._policy_children(u)
                keys = self._policy_keys(u, order)
            hk = self._held_kids.get(u)
            out = hk.kids if hk is not None else {}
            free = None
            if all(a < b for a, b in pairwise(keys)):
                free = ChildOrder([c for c in order if c not in out],
                              [k for c, k in zip(order, keys, strict=True) if c not in out])
            self._free[u] = free
        return free

    def unheld_children(self, u: int, children, at: int):
        """What to walk below ``u`` for a match at ``at`` (fast mode): ``children`` and the
        holds to skip one by one, or, when every child held whole is held over ``at``, the
        same order without them (and nothing left to skip)."""
        held = self._held_kids.get(u)
        if held is None or not held.covers(at):
            return children, None
        if held.kids:
            free = self._free_children(u)
            if free is not None:
                return free, None
        return children, held

    def _policy_keys(self, u: int, order: list[int]) -> list[int]:
        pos = self._policy_pos.get(u)
        if pos is None:
            pos = self._policy_pos[u] = {c: i for i, c in enumerate(order)}
        return list(range(len(order)))

    def _order_key_of(self, u: int, c: int) -> int:
        if self.policy.stop_on_k:
            return order_key(self.weights.get(u, _EMPTY).get(c, UNTOUCHED), self.g.uniq_id[c])
        return self._policy_pos[u][c]

    def hold_kid(self, p: int, c: int, start: int, end: int, jobid: int) -> None:
        """Child ``c`` of ``p`` is held whole by ``jobid`` during [start, end)."""
        hk = self._held_kids.get(p)
        if hk is None:
            hk = self._held_kids[p] = HeldKids()
        fresh = c not in hk.kids
        hk.add(c, start, end, jobid)
        free = self._free.get(p)
        if fresh and free is not None and not free.remove(c, self._order_key_of(p, c)):
            del self._free[p]

    def unhold_kid(self, p: int, c: int, jobid: int) -> None:
        """``jobid`` no longer holds child ``c`` of ``p`` whole."""
        hk = self._held_kids.get(p)
        if hk is not None and hk.discard(c, jobid):
            free = self._free.get(p)
            if free is not None:
                free.insert(c, self._order_key_of(p, c))

    def _explore_dynamic(self, meta: Meta, u: int, resources: list[Resource], pristine: bool,
                         excl: bool, dfu: Scoring, multiplier: int, children: list[int]) -> bool:
        gtype = self.g.type
        per_share = {r.type: r.effective_max for r in resources}
        tallies = {t: [0, 0, 0] for t in per_share}  # prev_total, accum, shares
        sat: set[str] = set()
        found = False
        visited = self.visited
        # (a vertex with two parents is claimed by the first walk that visits it: skipping
        # children that cannot supply anything would change who claims what)
        fast = self.fast and visited is None
        sched = self.sched
        leaves = self._leaf_plan(resources)
        kids = self.g.children[self.sub]
        held = None
        if fast:
            children, held = self.unheld_children(u, children, meta.at)
        guard = self._guard
        children = iter(children)
        for c in children:
            if held is not None and c in held.kids:
                continue  # held whole by an allocation over meta.at: nothing free now
            ctype = gtype[c]
            if ctype in sat:
                if guard is not None:  # Fluxion's full walk would visit it: bound it
                    guard[-1].append((_ONE, c, self._ml))
                continue
            if visited is not None and c in visited:
                continue
            if leaves is not None and not kids[c] and ctype in leaves:
                hit = self._leaf(meta, c, leaves[ctype], excl)  # checks its own availability
                if hit is None:
                    continue
                score, cnt, x = hit
            else:
                if fast:
                    p = sched.get(c)
                    if p is not None and p.avail_during(meta.at, meta.duration) == 0:
                        continue
                    if kids[c] and self._cannot_supply(meta, c, resources):
                        continue
                ok, x = self._dom_dfv(meta, c, resources, pristine, excl, dfu)
                if not ok:
                    continue
                score, cnt = dfu.overall, dfu.avail
            dfu.evals(ctype).add(Candidate(score, cnt, 0, x, False, ((cnt, cnt, x, c, u),)))
            found = True
            enough = True
            for t, tally in tallies.items():
                ev = dfu.ev.get(t)
                total = ev.total if ev else 0
                if total > tally[0]:
                    tally[1] += total - tally[0]
                    tally[0] = total
                    if per_share[t] > 0 and tally[1] >= per_share[t]:
                        tally[2] += 1
                        tally[1] = 0
                done = per_share[t] == 0 or tally[2] >= multiplier
                if done:
                    sat.add(t)
                else:
                    enough = False
            if enough:
                if guard is not None:
                    rest = next(children, None)
                    if rest is not None:  # the children from here on were not visited
                        guard[-1].append((_KIDS, u, rest, self._ml))
                break
        return found

    def _dom_slot(self, meta: Meta, u: int, shape: list[Resource], nslots: int,
                  pristine: bool, dfu: Scoring) -> bool:
        slot_dfu = Scoring()
        guard = self._guard
        if guard is not None:
            guard.append([])  # the members' own ranking
            try:
                self._explore(meta, u, shape, pristine, True, slot_dfu, nslots)
            finally:
                unexplored = guard.pop()
        else:
            self._explore(meta, u, shape, pristine, True, slot_dfu, nslots)
        high = self.policy.slot_high
        for ev in slot_dfu.ev.values():
            if ev.qual:
                ev.choose_best_k(ev.qual, high, full=True)
        if guard is not None:
            made = self._form_slots(u, shape, nslots, slot_dfu, dfu)
            self._check_members(shape, slot_dfu, unexplored, high)
            return made
        return self._form_slots(u, shape, nslots, slot_dfu, dfu)

    def _form_slots(self, u: int, shape: list[Resource], nslots: int, slot_dfu: Scoring,
                    dfu: Scoring) -> bool:
        """Form slot instances from the ranked members (Fluxion's dom_slot) into ``dfu``."""
        # how many whole slots the candidates can form (greedy whole-group packing, or
        # amount packing when pools are split exactly)
        exact = self.exact_pools
        qual_slots = None
        counts = []
        for elem in shape:
            count = elem.calc_count(slot_dfu.qual(elem.type))
            counts.append(count)
            shares = 0
            ev = slot_dfu.ev.get(elem.type)
            if count and ev:
                if exact:
                    shares = sum(group.edges[0][0] for group in ev.eg) // count
                else:
                    acc = 0
                    for group in ev.eg:
                        acc += group.edges[0][0]
                        if acc >= count:
                            shares += 1
                            acc = 0
            qual_slots = shares if qual_slots is None else min(qual_slots, shares)
        qual_slots = min(qual_slots or 0, nslots) if exact else (qual_slots or 0)
        if not qual_slots:
            return False
        cursor = {elem.type: [0, -1] for elem in shape}  # egroup index, amount left in it
        slot_dfu.used = used = {}
        made = []
        for _ in range(qual_slots):
            edges = []
            score = MATCH_MET
            for elem, count in zip(shape, counts, strict=True):
                ev = slot_dfu.ev[elem.type]
                cur = cursor[elem.type]
                j = 0
                while j < count:
                    k = cur[0]
                    if k >= len(ev.eg):
                        return False
                    group = ev.eg[k]
                    edge = group.edges[0]
                    left = edge[0] if cur[1] < 0 else cur[1]
                    take = min(left, count - j) if exact else left
                    edges.append((edge[0], take, True, edge[3], edge[4]))
                    score += group.score
                    j += take
                    if left - take > 0:
                        cur[1] = left - take
                    else:
                        cur[0], cur[1] = k + 1, -1
                    used[elem.type] = cur[0] + (cur[1] >= 0)
            made.append(Candidate(score, 1, 0, True, False, tuple(edges)))
        ev = dfu.evals("slot")
        for group in made:
            ev.add(group)
        return True

    # -- the guard of a first-found selection (see select) ---------------------------------
    def _check(self, ev: Evals, req: Resource, high: bool, runs: bool = False) -> None:
        """After ``ev`` ranked its candidates for ``req``: the chosen are Fluxion's only if
        the first one left out does not tie with the last one in, a partly taken last group
        ties with no other chosen group (which one is partial would depend on Fluxion's
        order), and everything left unexplored in this ranking scores strictly worse."""
        eg, i = ev.eg, ev.best_i
        last = eg[i - 1].score
        if runs:
            if self._guard[-1]:
                raise _GuardFailed  # the runs depend on every candidate's score
            run = score_runs(eg)
            if i < len(eg) and run[eg[i].score] == run[last]:
                raise _GuardFailed
            if eg[i - 1].needs < eg[i - 1].count and any(
                    run[g.score] == run[last] for g in eg[:i - 1]):
                raise _GuardFailed
            return
        if i < len(eg) and eg[i].score == last:
            raise _GuardFailed
        if eg[i - 1].needs < eg[i - 1].count and any(g.score == last for g in eg[:i - 1]):
            raise _GuardFailed
        bound = self._bound_all(self._guard[-1], req, high)
        if bound is not None and not worse(bound, last, high):
            raise _GuardFailed

    def _check_members(self, shape: list[Resource], slot_dfu: Scoring, unexplored: list,
                       high: bool) -> None:
        """A slot vertex formed its slots from the members it found first: they are the
        ones Fluxion forms them from if no two members tie and every member left
        unexplored ranks strictly after the last one taken. The slots Fluxion would form
        here from the rest go to the enclosing ranking as a bound on their score."""
        used = slot_dfu.used or {}
        outer = self.policy.high  # how the enclosing ranking orders slots
        best = max if outer else min
        bound_slots = MATCH_MET
        more = bool(unexplored)
        for elem in shape:
            ev = slot_dfu.ev.get(elem.type)
            scores = [g.score for g in ev.eg] if ev else []
            if len(set(scores)) != len(scores):
                raise _GuardFailed  # tied members: Fluxion's order decides who goes together
            taken = used.get(elem.type, 0)
            if taken and unexplored:
                bound = self._bound_all(unexplored, elem, high)
                if bound is not None and not worse(bound, scores[taken - 1], high):
                    raise _GuardFailed
            if not more:
                continue
            rest = scores[taken:]
            bound = self._bound_all(unexplored, elem, outer)
            if bound is not None:
                rest.append(bound)
            if not rest:
                more = False  # no member of this type left: no further slot here
                continue
            bound_slots += self._per_slot(elem, outer) * best(rest)
        if more:
            self._guard[-1].append((_SLOTS, bound_slots))

    def _per_slot(self, member: Resource, high: bool) -> int:
        """How many ranked groups of ``member``'s type a slot adds up, bounded the way the
        ranking needs: at most its count (high: an upper bound, scores are positive), at
        least its minimum count when every vertex of the type is one unit (low), else 1."""
        if high:
            return member.effective_max
        return member.count_min if self._unit(member.type) else 1

    def _unit(self, rtype: str) -> bool:
        """Every vertex of ``rtype`` has size 1 (one vertex, one ranked group of one unit)."""
        unit = self._unit_types.get(rtype)
        if unit is None:
            g = self.g
            unit = self._unit_types[rtype] = all(
                sz == 1 for t, sz in zip(g.type, g.size, strict=True) if t == rtype)
        return unit

    def _bound_all(self, records: list, req: Resource, high: bool) -> int | None:
        """The best score any unexplored candidate for ``req`` could have (None: none)."""
        out = None
        for rec in records:
            b = self._bound(rec, req, high)
            if b is not None and (out is None or worse(out, b, high)):
                out = b
        return out

    def _bound(self, rec: tuple, req: Resource, high: bool) -> int | None:
        kind = rec[0]
        if kind == _SLOTS:
            return rec[1] if req.type == "slot" else None
        sig = self._signature(req, high)
        if kind == _ONE:
            rel = self._rel_sig(sig, high, rec[1])
        else:
            rel = self._suffix_rel(rec[1], rec[2], sig, high)
        if rel is None:
            return None
        base = MATCH_MET if self.policy.kind == "variation" else MATCH_MET + rec[-1] + 1
        if sig[0] is not None:
            return base + rel
        return MATCH_MET + sum(q for _, q in sig[1]) * base + rel  # a slot adds its members

    def _signature(self, req: Resource, high: bool) -> tuple:
        """(type, ()) for a vertex candidate; (None, ((member type, per slot), ...)) for a
        slot candidate."""
        if req.type != "slot":
            return (req.type, ())
        return (None, tuple((m.type, self._per_slot(m, high)) for m in req.with_))

    def _rel_sig(self, sig: tuple, high: bool, v: int) -> int | None:
        if sig[0] is not None:
            return self._rel_of(sig[0], high, v)
        total = 0
        for rtype, q in sig[1]:
            rel = self._rel_of(rtype, high, v)
            if rel is None:
                return None
            total += q * rel
        return total

    def _suffix_rel(self, u: int, first: int, sig: tuple, high: bool) -> int | None:
        """Best relative score over ``u``'s children from ``first`` on, in policy order."""
        key = (u, sig, high)
        suffix = self._suffix.get(key)
        order = self._policy_children(u)
        if suffix is None:
            suffix = [None] * (len(order) + 1)
            acc = None
            for i in range(len(order) - 1, -1, -1):
                rel = self._rel_sig(sig, high, order[i])
                if rel is not None and (acc is None or worse(acc, rel, high)):
                    acc = rel
                suffix[i] = acc
            self._suffix[key] = suffix
        pos = self._policy_pos.get(u)
        if pos is None:
            pos = self._policy_pos[u] = {c: i for i, c in enumerate(order)}
        return suffix[pos[first]]

    def _rel_of(self, rtype: str, high: bool, v: int) -> int | None:
        """The best score (less the parts every candidate at the ranking shares) of a
        ``rtype`` vertex at or below ``v``: its id (variation: its perf class) plus the score
        factors of the vertices from v down to it; None when there is none. A fact of the
        graph, kept per vertex (and per layout for what lies below a vertex)."""
        memo = self._rel.setdefault((rtype, high), {})
        hit = memo.get(v, _MISSING)
        if hit is not _MISSING:
            return hit
        g = self.g
        variation = self.policy.kind == "variation"
        own = None
        if g.type[v] == rtype:
            own = perf_class(g.properties[v]) if variation else g.id[v]
        layout = g.layouts.get(v) if g.layouts else None
        lmemo = self._rel_layout.setdefault((rtype, high), {}) if layout is not None else None
        below = lmemo.get(layout, _MISSING) if lmemo is not None else _MISSING
        if below is _MISSING:
            below = None
            for c in self._children(v):
                rel = self._rel_of(rtype, high, c)
                if rel is not None and (below is None or worse(below, rel, high)):
                    below = rel
            if lmemo is not None:
                lmemo[layout] = below
        if below is not None and not variation:
            factor = self.policy.factors.get(g.type[v])
            if factor is not None:
                add_by, mul_by = factor
                below += (g.id[v] + 1 + add_by) * mul_by + abs(cmod(g.uniq_id[v], mul_by) - 1)
        if own is None:
            out = below
        elif below is None or worse(below, own, high):
            out = own
        else:
            out = below
        memo[v] = out
        return out

    def _resolve_graph(self, root: int, resources: list[Resource], dfu: Scoring) -> int | None:
        high = self.policy.high
        runs = self.policy.kind == "locality"
        for r in resources:
            count = r.calc_count(dfu.qual(r.type))
            if count == 0:
                return None
            ev = dfu.evals(r.type)
            ev.choose_best_k(count, high, runs)
            if self._guard is not None:
                self._check(ev, r, high, runs)
        self._ml = 0
        needs = 1
        rtype = self.g.type[root]
        for r in resources:
            if r.type == rtype:
                count = r.calc_count(dfu.avail)
                if count == 0:
                    return None
                needs = count
        if any(ev.qual == 0 for ev in dfu.ev.values()):
            return None
        self._enforce(dfu, True)
        return needs

    def _enforce(self, dfu: Scoring, unconstrained: bool, top: int = -1) -> None:
        self._inside += 1
        replayed = self._replayed
        marks = self.marks
        parent = self.g.parent[self.sub]
        gtype, size = self.g.type, self.g.size
        split: dict[int, int] = {}
        for rtype, ev in dfu.ev.items():
            if not ev.best_k:
                continue
            for i in range(ev.best_i):
                group = ev.eg[i]
                if group.root:
                    continue
                if rtype == "slot":
                    self.chosen_slots.append(ChosenSlot(top, [(edge[3], edge[1])
                                                           for edge in group.edges]))
                for edge in group.edges:
                    child = edge[3]
                    if replayed:
                        self._unfold(child)
                    if split and child in split:
                        # one pool shared by several slot instances of this job
                        split[child] += edge[1]
                        marks[child] = (split[child], True, edge[4])
                    else:
                        marks[child] = (edge[1], bool(edge[2]), edge[4])
                        if rtype == "slot" and self.exact_pools:
                            split[child] = edge[1]
                    if not unconstrained:
                        # a slot formed below this level (jobspec skipped a graph level):
                        # keep the path to it, shared, so the commit walk reaches it
                        pv = edge[4]
                        while pv != top and pv != -1 and pv not in marks:
                            marks[pv] = (size[pv], False, parent[pv])
                            pv = parent[pv]
                        continue
                    pv = edge[4] if edge[4] != -1 else parent[child]
                    while pv != -1 and parent[pv] != -1:
                        if pv in marks:
                            break
                        tgt = pv
                        pv = parent[pv]
                        tev = dfu.ev.get(gtype[tgt])
                        if tev is not None and not tev.best_k:
                            marks[tgt] = (size[tgt], False, pv)



_MISSING = object()
