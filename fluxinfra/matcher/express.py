"""Express selection for the common first-fit requests (fast mode only).

Three request shapes dominate first-fit scheduling:

* **A** ``node[k]`` held whole (the policy makes nodes exclusive, or the jobspec marks the node
  exclusive), whatever it asks for inside each node;
* **B** one ``slot`` under a ``node_exclusive`` first-fit policy (``firstnodex``): the slot is
  formed inside the first node that can hold it, and that node is held whole;
* **C** one ``slot`` of one unit of each of a few leaf types (``slot[1]{core[1]}``) under a
  first-fit policy that holds no node whole (``first``): a depth-first search for the first
  vertex whose children offer a free leaf of every member type (:meth:`Express._select_slot`),
  committed by :meth:`Express._commit_slot`. Its cost grows with the depth of the tree and the
  children passed by, not with the size of the machine.

For A and B, the general traversal (:class:`~fluxinfra.matcher.traverser.Traverser.select`) spends
most of a match on generic per-level work: test, prune, score and merge at every vertex above the
nodes, then rank the gathered candidates at the root. The outcome, though, is fixed by a few
facts: the order in which ``first`` visits children, which children it prunes, when each level
has gathered enough, and the selection recorded for an untouched node of the same shape (the
traverser's templates). This module walks the same children in the same order, applies the same
pruning calls, stops at the same points, ranks the gathered nodes the same way and leaves the
same marks, chosen slots and root mark for :meth:`Traverser.update` to commit. Anything off the
common path (a partly used candidate node, a node shape without a recorded selection, a down or
busy root, reservations, multi-parent graphs, the flexible traverser) answers "not mine" and the
general traversal runs instead — and, for shape B, teaches the express lane that node shape.

``tests/unit/matcher/test_express.py`` replays random operation sequences on random graphs with
and without this lane and requires identical results and identical planner state after every step.

Why this file is long (about 800 lines): it is one concern, the lane, and nearly all of it is
the methods of one class, which ``express.pxd`` declares a compiled extension type; Cython
keeps an extension type's methods in the type's own module. Its sections run in the order a
request meets them: the plan and ``select``, shape C's search, the commit of each shape, the
walk of shapes A and B with the traversal's pruning checks, and what the lane remembers
between matches (``freed``, ``learn``, ``forget``).
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING

from fluxinfra.matcher.evaluators import MATCH_MET, std_sorted
from fluxinfra.matcher.jobspec import Resource
from fluxinfra.matcher.planner import MultiPlanner, Planner
from fluxinfra.matcher.traverser.dfu import PRISTINE_NONE_MATCH, RESOURCE_MATCH
from fluxinfra.matcher.traverser.job import AT_ALLOC
from fluxinfra.matcher.traverser.memo import ChosenSlot, ReplayedSlots, per_request
from fluxinfra.matcher.traverser.text import HeldSubtree
from fluxinfra.matcher.traverser.update import X_NJOBS

if TYPE_CHECKING:  # pragma: no cover - typing only (compiled: express.pxd cimports them)
    from fluxinfra.matcher.traverser.dfu import Traverser
    from fluxinfra.matcher.traverser.job import Meta

__all__ = ["Express"]

_MAX_SLOT_TEMPLATES = 4096


_UNKNOWN = object()  # nothing recorded (yet) under a template key


class _Abort(Exception):
    """The request left the express lane's ground: run the general traversal."""


class Express:
    """The express lane of one traverser (see the module docstring)."""

    def __init__(self, trav: Traverser) -> None:
        self.t = trav
        #: id(request list) -> (the list, plan or None); a plan is ("A", R, k, ...) or
        #: ("B", S, 1, ...), then caches of tree facts it read: vertex -> passes through
        #: (Traverser._test); node shape -> [template key, recorded selection or _UNKNOWN];
        #: vertex -> what its prune reads (_prune_checks); vertex -> what "cannot supply"
        #: reads (_supply_checks); for B, then shape C's (members, exclusive types allowed)
        #: or None, and vertex -> its children offer every member (Traverser._slot_match)
        self._plans: dict[int, tuple[list[Resource], tuple | None]] = {}
        #: shape B: template key -> chosen slot as (position in the node's post-order, amount)
        self._slot_tpl: dict[tuple, tuple[tuple[int, int], ...]] = {}
        #: vertex -> (it and its ancestors bottom-up, their types); the tree never changes
        #: without Traverser.invalidate (which calls forget)
        self._chains: dict[int, tuple[tuple[int, ...], frozenset[str]]] = {}
        #: node shape -> what holding such a node whole books (see _facts)
        self._node_facts: dict[int, tuple[int, dict[str, int], dict[str, int]]] = {}
        #: shape C: slot vertex -> its marks and those of the vertices above it
        #: (_marks_above)
        self._above: dict[int, tuple] = {}
        #: shape C: vertex -> (its order, the order's version, at, duration, member request,
        #: n): its first n children in that order give nothing of the member during that
        #: window (true until a span below it goes: freed, or the order moves)
        self._busy: dict[int, tuple] = {}
        #: shape C: slot vertex -> what a commit there emits and re-ranks along its path up
        #: (_make_path_facts)
        self._path_facts: dict[int, tuple[tuple, tuple, list[int]]] = {}
        self._pending: tuple | None = None
        #: the last selection, for :meth:`commit`: (marks dict, node, ancestors bottom-up),
        #: or for shape C (marks dict, None, slot's vertex and ancestors bottom-up, leaves)
        self._hit: tuple | None = None

    # -- applicability ----------------------------------------------------------------------
    def _plan(self, resources: list[Resource]) -> tuple | None:
        return per_request(self._plans, resources, self._make_plan)

    def _make_plan(self, resources: list[Resource]) -> tuple | None:
        t = self.t
        if len(resources) != 1 or set(t.policy.factors) - {"node"}:
            return None
        r = resources[0]
        if r.count_min != r.count_max or r.count_min < 1:
            return None
        if r.type == "node" and r.with_:
            return ("A", r, r.count_min, {}, {}, {}, {})
        if (r.type == "slot" and r.count_min == 1 and r.with_
                and all(c.type != "node" for c in _types_below(r))):
            # shape C takes a whole vertex per member: with exact pools a member of count 1
            # is one unit of a pool, not the pool
            leaves = None if t.exact_pools else _leaf_members(r, t.policy)
            return ("B", r, 1, {}, {}, {}, {}, leaves, {})
        return None

    def _passes(self, plan: tuple, u: int, resources: list[Resource]) -> bool:
        """``u`` neither is nor holds what the request asks at this level (the traversal's
        test answers "pristine, none"): a fact of the tree, kept per plan."""
        verdicts = plan[3]
        hit = verdicts.get(u)
        if hit is None:
            hit = verdicts[u] = self.t._test(u, resources, True)[2] == PRISTINE_NONE_MATCH
        return hit

    def _now(self, meta: Meta, excl: bool) -> bool:
        """A first-fit allocation now, on a graph the lane knows (each shape asks more)."""
        t = self.t
        return (t.fast and t.policy.stop_on_k > 0 and t.visited_free()
                and not excl and meta.alloc_type == AT_ALLOC
                and meta.at == meta.now)

    # -- selection --------------------------------------------------------------------------
    def select(self, resources: list[Resource], meta: Meta, excl: bool) -> bool | None:
        """True / False as :meth:`Traverser.select` would answer, or None: not express."""
        self._pending = self._hit = None
        if not self._now(meta, excl):
            return None
        plan = self._plan(resources)
        if plan is None:
            return None
        t = self.t
        if "node" not in t.excl_types:
            if plan[0] == "B" and plan[7] is not None and t.excl_types <= plan[7][1]:
                return self._select_slot(plan, resources, meta)  # shape C
            return None
        g = t.g
        root = g.roots[t.sub]
        if (g.type[root] == "node" or t.sched.get(root) is not None
                or not self._passes(plan, root, resources)
                or self._pruned(plan, root, resources, meta)):
            return None
        k = plan[2]
        gathered: list[tuple[int, int]] = []  # (node, score) in visiting order
        chosen_slots: list = []
        try:
            self._gather(root, resources, plan, meta, gathered, chosen_slots, k)
        except _Abort:
            if plan[0] == "B":
                self._pending = (resources, meta)  # learn from the general traversal
            return None
        if len(gathered) < k:
            return False
        t.visited = None
        t._ml = 0
        t.chosen_slots = chosen_slots
        t.root_mark = (1, False)
        t.preorder = t.postorder = 0
        parent = g.parent[t.sub]
        x = bool(plan[1].exclusive) if plan[0] == "A" else False
        size = g.size
        if k == 1:
            node = gathered[0][0]
            p = parent[node]
            chain = self._chains.get(p)
            if chain is None:
                chain = self._chain(p)
            up, up_types = chain
            t.marks = marks = {node: (size[node], x, p)}
            for a in up[:-1]:  # every ancestor but the root
                marks[a] = (size[a], False, parent[a])
            if up_types.isdisjoint(t.excl_types):
                self._hit = (marks, node, up)
            return True
        # k > 1: plan A; the root ranks candidates by score as std::sort does
        best = std_sorted(gathered, _second, t.policy.high)[:k]
        t.marks = marks = {}
        for node, _ in best:
            p = parent[node]
            marks[node] = (size[node], x, p)
            while p != -1 and parent[p] != -1 and p not in marks:
                marks[p] = (size[p], False, parent[p])
                p = parent[p]
        return True

    def _select_slot(self, plan: tuple, resources: list[Resource], meta: Meta) -> bool | None:
        """Shape C: one slot of one-unit leaves (``slot[1]{core[1]}``) under a first-fit
        policy that holds no vertex above the leaves whole (``first``). The traversal walks
        down the children in ``first``'s order, passes by whatever its tests and prunes
        reject, forms the slot at the first vertex whose children offer every member, from
        the first free leaf of each member type, and stops there: a depth-first search for
        the first slot. This is that search, with the same checks in the same order, leaving
        the marks, chosen slot and root mark the traversal's ranking leaves. No slot found
        (a full machine) is left to the traversal."""
        t = self.t
        g = t.g
        root = g.roots[t.sub]
        if self._pruned(plan, root, resources, meta):
            return None
        t.visited = None
        path: list[int] = []
        try:
            found = self._find_slot(root, plan, resources, meta, path)
        except _Abort:
            return None
        if found is None:
            return None
        top = path[0]  # the vertex the slot formed at; path runs up from it
        above = self._above.get(top)
        if above is None:
            above = self._marks_above(top)
        leaf, amount = found[0]
        t.marks = marks = {leaf: (amount, True, top)}
        marks.update(above)
        if len(found) > 1:
            for leaf, amount in found[1:]:
                marks[leaf] = (amount, True, top)
            # the commit walks marked children in graph order
            pos = {c: i for i, c in enumerate(g.children[t.sub][top])}
            leaves = sorted(found, key=lambda hit: pos[hit[0]])
        else:
            leaves = found
        self._hit = (marks, None, path, leaves)
        t._ml = 0
        t.chosen_slots = [ChosenSlot(-1, list(found))]
        t.root_mark = (1, False)
        t.preorder = t.postorder = 0
        return True

    def _marks_above(self, top: int) -> tuple:
        """The selection's marks of ``top`` and every vertex above it but the root: (vertex,
        (size, False, parent)) pairs, bottom-up (a fact of the tree, kept per vertex)."""
        g = self.t.g
        parent = g.parent[self.t.sub]
        size = g.size
        out = []
        pv = top
        while pv != -1 and parent[pv] != -1:
            out.append((pv, (size[pv], False, parent[pv])))
            pv = parent[pv]
        above = self._above[top] = tuple(out)
        return above

    def _find_slot(self, root: int, plan: tuple, resources: list[Resource], meta: Meta,
                   path: list[int]) -> list[tuple[int, int]] | None:
        """Below ``root`` (tested and not pruned): the slot's (leaf, amount) pairs in the
        request's order, ``path`` filled from the slot's vertex up to ``root``; None when no
        vertex below forms a slot. A depth-first search, children in ``first``'s order."""
        t = self.t
        g = t.g
        kids = g.children[t.sub]
        status, gtype = g.status, g.type
        sched = t.sched
        at, duration = meta.at, meta.duration
        forms_at, slot, members, prune_at = plan[8], plan[1], plan[7], plan[5]
        ordered, agg = t._ordered_children, t.agg
        stack: list[tuple[int, object, object]] = []  # (vertex, its children left, holds)
        u = root
        while True:
            forms = forms_at.get(u)  # u's children offer every member (a fact of the tree)
            if forms is None:
                forms = forms_at[u] = t._slot_match(u, slot)
            if forms:
                found = self._slot_members(u, members, meta)
                if found is not None:
                    path.append(u)
                    path.extend([entry[0] for entry in reversed(stack)])
                    return found
            else:
                children, held = t.unheld_children(u, ordered(u), at)
                stack.append((u, iter(children), held))
            # the next child to descend into, from the deepest vertex with children left
            while stack:
                _, left, held = stack[-1]
                for c in left:
                    if held is not None and c in held.kids:
                        continue
                    if not kids[c]:
                        continue  # a leaf above the slot's level passes its tests, forms nothing
                    p = sched.get(c)
                    if p is not None and p.avail_during(at, duration) == 0:
                        continue
                    if not status[c]:
                        continue  # Traverser._cannot_supply (a slot request: only status counts)
                    if gtype[c] == "slot":
                        raise _Abort  # a vertex named like the request: the general tests decide
                    # _pruned(plan, c, ...), its status and own-planner checks done just above
                    checks = prune_at.get(c)
                    if checks is None:
                        checks = prune_at[c] = self._prune_checks(c, resources)
                    if checks is True:
                        continue
                    if checks:
                        below = agg.get(c)
                        short = False
                        for rtype, need, total in checks:
                            if total - (below.used_during(rtype, at, duration)
                                        if below is not None else 0) < need:
                                short = True
                                break
                        if short:
                            continue
                    u = c
                    break
                else:
                    stack.pop()
                    continue
                break
            else:
                return None

    def _slot_members(self, u: int, members: tuple, meta: Meta) -> list | None:
        """The slot formed at ``u``: the first free leaf of each member type in ``first``'s
        order (Traverser._dom_slot with one unit of each), or None."""
        t = self.t
        kids = t.g.children[t.sub]
        gtype = t.g.type
        sched = t.sched
        at, duration = meta.at, meta.duration
        members, _, want = members
        order = t._ordered_children(u)
        children, held = t.unheld_children(u, order, at)
        if len(members) == 1:  # the common slot of one type (slot[1]{core[1]})
            r = members[0]
            rtype = r.type
            chunks = order.chunks
            # a vertex of up to 512 children walked in its own order: start from the first
            # child not known to give nothing during this window (see freed), rather than
            # read again the busy leaves every match passes by
            remember = children is order and len(chunks) == 1
            start = 0
            if remember:
                these = chunks[0]
                busy = self._busy.get(u)
                if busy is not None and busy[0] is order and busy[1] == order.ver \
                        and busy[2] == at and busy[3] == duration and busy[4] is r:
                    start = busy[5]
                children = islice(these, start, None)
            for i, c in enumerate(children, start):
                if held is not None and c in held.kids:
                    continue
                if gtype[c] != rtype:
                    continue  # the traversal tests it and finds nothing of the slot in it
                if kids[c]:
                    raise _Abort  # a member type with children: the general visit decides
                p = sched.get(c)
                if p is not None and p.avail_during(at, duration) == 0:
                    continue  # (what Traverser._leaf answers first for a busy leaf)
                hit = t._leaf(meta, c, r, True)
                if hit is not None:
                    if remember:
                        self._busy[u] = (order, order.ver, at, duration, r, i)
                    return [(c, hit[1])]
            if remember:
                self._busy[u] = (order, order.ver, at, duration, r, len(these))
            return None
        got: dict[str, tuple[int, int]] = {}
        for c in children:
            if held is not None and c in held.kids:
                continue
            ctype = gtype[c]
            r = want.get(ctype)
            if r is None or ctype in got:
                continue  # the traversal tests it and finds nothing of the slot in it
            if kids[c]:
                raise _Abort  # a member type with children: the general visit decides
            hit = t._leaf(meta, c, r, True)
            if hit is not None:
                got[ctype] = (c, hit[1])
                if len(got) == len(want):
                    return [got[r.type] for r in members]
        return None

    def _chain(self, v: int) -> tuple[tuple[int, ...], frozenset[str]]:
        """``v`` and its ancestors bottom-up (root last), and their types (cached)."""
        g = self.t.g
        parent = g.parent[self.t.sub]
        up = []
        while v != -1:
            up.append(v)
            v = parent[v]
        chain = self._chains[up[0]] = (tuple(up), frozenset(g.type[a] for a in up))
        return chain

    # -- commit -----------------------------------------------------------------------------
    def commit(self, meta: Meta, job) -> int | None:
        """Commit the last express selection of one node as :meth:`Traverser.update` would
        (same spans, tags, emitted entries in the same order, ``first`` re-rank pairs), or
        None when the selection was not such (the general commit runs)."""
        hit, self._hit = self._hit, None
        t = self.t
        if hit is None or hit[0] is not t.marks or meta.alloc_type != AT_ALLOC:
            return None
        if hit[1] is None:
            return self._commit_slot(meta, job, hit[2], hit[3])
        _, n, ancestors = hit
        shape = t._shapes.get(n)
        facts = self._node_facts.get(shape) if shape is not None else None
        if facts is None:
            facts = self._facts(n, shape)
        needs, amounts, used = facts
        g = t.g
        size = g.size
        at, duration, jobid = meta.at, meta.duration, meta.jobid
        depth = len(ancestors) + 1  # the node's level (the root's is 1)
        raw = job.raw_vertices
        # the node, held whole (Traverser._hold_whole): its own span, no aggregates
        raw.append(HeldSubtree((depth + 1, t, n)))
        pl = t.sched.get(n)
        if pl is None:
            pl = t.sched[n] = Planner(needs)
        span = job.sched[n] = pl.add_span(at, duration, needs)
        t.mark_dirty(n)
        allocs = t.allocs.get(n)
        if allocs is None:
            t.allocs[n] = {jobid: span}
        else:
            allocs[jobid] = span
        if t.policy.stop_on_k:
            job.reweigh_inner += t.inner_edges(n)
        t.hold_kid(ancestors[0], n, at, at + duration, jobid)
        job.xspans[n] = None
        whole = t._whole
        whole[n] = whole.get(n, 0) + 1
        whole = t._whole_alloc
        whole[n] = whole.get(n, 0) + 1
        job.hold_whole(n)
        job.used[n] = used.copy()
        job.node_hint = [n]
        raw.append((depth, n, needs, True, False))
        # every ancestor: a job-count span, the node's amounts on its aggregates
        xcheck, agg = t.xcheck, t.agg
        xspans, job_agg = job.xspans, job.agg
        first = t.policy.stop_on_k > 0
        reweigh = job.reweigh
        child = n
        for a in ancestors:
            if first:
                reweigh.append((a, child))
            x = xcheck.get(a)
            if x is None:
                x = xcheck[a] = Planner(X_NJOBS)
            xspans[a] = x.add_span(at, duration, 1)
            if amounts:
                pl = agg.get(a)
                if pl is None:
                    pl = agg[a] = MultiPlanner(t.totals(a))
                job_agg[a] = pl.add_span(at, duration, amounts)
            depth -= 1
            raw.append((depth, a, size[a], False, False))
            child = a
        return 2

    def _commit_slot(self, meta: Meta, job, path: list[int], leaves: list) -> int | None:
        """Commit shape C's selection as :meth:`Traverser.update` would: each leaf held (its
        span, its ``used``), then from the slot's vertex up to the root a job-count span and
        an aggregate span of the leaves' amounts per vertex, the same entries emitted in the
        same order, the same ``first`` re-rank pairs. None (the general commit runs) when a
        leaf is held in part or its type is exclusive by request."""
        t = self.t
        g = t.g
        size, gtype = g.size, g.type
        leaf_node = False
        for c, amount in leaves:
            if amount < size[c] or gtype[c] in t.excl_types:
                return None
            if gtype[c] == "node":
                leaf_node = True
        at, duration, jobid = meta.at, meta.duration, meta.jobid
        level = len(path)  # the slot's vertex (the root's level is 1)
        raw = job.raw_vertices
        dirty = t._dirty
        sched, allocs = t.sched, t.allocs
        first = t.policy.stop_on_k > 0
        reweigh = job.reweigh
        u = path[0]
        totals = t.totals
        amounts: dict[str, int] = {}
        for c, amount in leaves:
            dirty.append(c)
            pl = sched.get(c)
            if pl is None:
                pl = sched[c] = Planner(size[c])
            span = job.sched[c] = pl.add_span(at, duration, amount)
            held = allocs.get(c)
            if held is None:
                allocs[c] = {jobid: span}
            else:
                held[jobid] = span
            job.xspans[c] = None
            ctype = gtype[c]
            amounts[ctype] = amounts.get(ctype, 0) + amount
            job.used[c] = {ctype: amount}
            raw.append((level + 1, c, amount, True, False))
            if first and totals(c):
                reweigh.append((u, c))  # (a leaf with nothing below keeps its rank)
        xcheck, agg = t.xcheck, t.agg
        xspans, job_agg = job.xspans, job.agg
        for a in path:
            x = xcheck.get(a)
            if x is None:
                x = xcheck[a] = Planner(X_NJOBS)
            xspans[a] = x.add_span(at, duration, 1)
            apl = agg.get(a)
            if apl is None:
                apl = agg[a] = MultiPlanner(totals(a))
            job_agg[a] = apl.add_span(at, duration, amounts)
        dirty += path
        facts = self._path_facts.get(u)
        if facts is None:
            facts = self._make_path_facts(path)
        entries, reranks, nodes = facts
        raw += entries
        if first:
            # ``first`` re-ranks each vertex of the path under its parent now, as
            # Traverser.reweigh would after the commit (what it reads of the vertex is
            # booked already; nothing above it counts)
            now = meta.now
            for p, a, below in reranks:
                if below:
                    t.rerank(p, a, now, below)
                else:
                    reweigh.append((p, a))  # two-parent aggregates: Traverser.reweigh decides
        if not leaf_node:  # (else Job.node_vertices reads the entries)
            job.node_hint = nodes  # Job.node_vertices: the nodes emitted, in order
        return len(leaves)

    def _make_path_facts(self, path: list[int]) -> tuple[tuple, tuple, list[int]]:
        """What committing a slot at ``path[0]`` emits and re-ranks along its path, facts of
        the tree kept per slot vertex: the path's entries, root last (each vertex's size,
        the root's 1); the (parent, vertex, its totals) pairs ``first`` re-ranks, bottom-up,
        leaving out the root and sole children (no siblings to be ranked against); the
        path's node vertices, in emission order."""
        t = self.t
        g = t.g
        size, kids, totals = g.size, g.children[t.sub], t.totals
        level, last = len(path), len(path) - 1
        entries = tuple((level - i, a, size[a] if i < last else 1, False, False)
                        for i, a in enumerate(path))
        reranks = tuple((path[i + 1], a, totals(a)) for i, a in enumerate(path[:last])
                        if len(kids[path[i + 1]]) >= 2)
        nodes = [a for a in path if g.type[a] == "node"]
        facts = self._path_facts[path[0]] = (entries, reranks, nodes)
        return facts

    def _facts(self, n: int, shape: int | None) -> tuple[int, dict[str, int], dict[str, int]]:
        """What holding node ``n`` whole puts on the books: its size, the amounts every
        ancestor's aggregate gets (one dict, shared by the spans of every job: spans keep it,
        releases make new ones) and the job's ``used`` entry for it (copied per job). Nodes
        of one shape (types and sizes below them included) book the same."""
        g = self.t.g
        ntype, needs = g.type[n], g.size[n]
        totals = self.t.totals(n)
        below = {ntype: needs}
        for rtype, amount in totals.items():
            below[rtype] = below.get(rtype, 0) + amount
        amounts = {rtype: amount for rtype, amount in below.items() if amount > 0}
        used = dict(totals)
        used[ntype] = used.get(ntype, 0) + needs
        facts = (needs, amounts, used)
        if shape is not None:
            self._node_facts[shape] = facts
        return facts

    def _gather(self, u: int, resources: list[Resource], plan: tuple, meta: Meta,
                out: list[tuple[int, int]], slots: list, k: int) -> None:
        """Visit the children of pass-through vertex ``u`` as ``_explore_dynamic`` does."""
        t = self.t
        g = t.g
        kids = g.children[t.sub]
        gtype = g.type
        status = g.status
        sched = t.sched
        at, duration = meta.at, meta.duration
        children, held = t.unheld_children(u, t._ordered_children(u), at)
        start = len(out)
        for c in children:
            if held is not None and c in held.kids:
                continue
            if not kids[c]:
                if gtype[c] == "node":
                    raise _Abort  # a node without children: leave it to the general walk
                continue  # a leaf of another type gathers nothing the request counts
            p = sched.get(c)
            if p is not None and p.avail_during(at, duration) == 0:
                continue
            if gtype[c] == "node":
                # the request is (A) or holds (B) the node: "cannot supply" is its status
                if status[c]:
                    self._node(c, resources, plan, meta, out, slots)
            else:
                if self._cannot_supply(plan, c, resources, meta):
                    continue
                if not self._passes(plan, c, resources):
                    raise _Abort
                if self._pruned(plan, c, resources, meta):
                    continue
                self._gather(c, resources, plan, meta, out, slots, k)
            if len(out) - start >= k:
                break

    def _node(self, c: int, resources: list[Resource], plan: tuple, meta: Meta,
              out: list[tuple[int, int]], slots: list) -> None:
        t = self.t
        g = t.g
        if t._untouched(c):
            # Nothing below c was ever held: the general visit would pass its tests and
            # prunes exactly when a subtree of its shape did before, and then replay (A) or
            # place the slot (B) as recorded, so a recorded shape answers straight away.
            # per node shape: [template key, what was recorded under it]; a recorded
            # selection never changes until the shapes are forgotten (and the plans with them)
            shape = None
            if c not in t._weighted:
                shape = t._shapes.get(c)
                if shape is None:
                    shape = t._shape(c)
            entry = plan[4].get(shape) if shape is not None else None
            if entry is None:
                entry = [self._key(c, resources, plan, meta), _UNKNOWN]
                if shape is not None:
                    plan[4][shape] = entry
            key, found = entry
            if found is _UNKNOWN and key is not None:
                found = (t._templates if plan[0] == "A" else self._slot_tpl).get(key, _UNKNOWN)
                entry[1] = found
            if found is not _UNKNOWN:
                if plan[0] == "A":
                    if found is None:
                        return
                    if found[0]:
                        slots.append(ReplayedSlots((t.post_below, c, found[0])))
                else:
                    slots.append(ReplayedSlots((t.post_below, c, (found,))))
                out.append((c, MATCH_MET + g.id[c] + 1))
                return
        # not recorded, or partly used: the general visit's own tests decide; a candidate
        # that survives them needs the general walk
        want = RESOURCE_MATCH if plan[0] == "A" else PRISTINE_NONE_MATCH
        if t._test(c, resources, True)[2] != want:
            raise _Abort
        if t._prune(meta, bool(plan[1].exclusive) if plan[0] == "A" else False, c, resources):
            return
        raise _Abort

    # -- the traversal's checks at a vertex above the nodes, their tree facts kept per plan --
    def _pruned(self, plan: tuple, u: int, resources: list[Resource], meta: Meta) -> bool:
        """Traverser._prune(meta, False, u, resources) at a pass-through vertex."""
        checks = plan[5].get(u)
        if checks is None:
            checks = plan[5][u] = self._prune_checks(u, resources)
        t = self.t
        if not t.g.status[u]:
            return True
        at, duration = meta.at, meta.duration
        p = t.sched.get(u)
        if p is not None and p.avail_during(at, duration) == 0:
            return True
        if checks is True:
            return True
        held = t.agg.get(u)  # (u, passed through, is not held whole: see the check above)
        for rtype, need, total in checks:
            if total - (held.used_during(rtype, at, duration) if held is not None else 0) < need:
                return True  # Traverser.sub_avail(u, rtype, ...) < need
        return False

    def _prune_checks(self, u: int, resources: list[Resource]) -> tuple | bool:
        """What Traverser._prune_resources reads at ``u`` (which neither is nor holds a
        request): True (always pruned) or the (type, amount, total below u) its subtree must
        have free."""
        t = self.t
        g = t.g
        if g.size[u] == 0:
            return True  # never available (Traverser.avail reads 0)
        totals = t.totals(u)
        out = []
        for r in resources:
            if r.type != "slot" or not r.user_data or not totals:
                continue  # a request of u's own type would have made u not pass through
            for rtype, need in r.user_data.items():
                if rtype not in totals:
                    if rtype in t.prune_types:
                        return True
                    continue
                out.append((rtype, need, totals[rtype]))
        return tuple(out)

    def _cannot_supply(self, plan: tuple, u: int, resources: list[Resource],
                       meta: Meta) -> bool:
        """Traverser._cannot_supply(meta, u, resources) at a vertex above the nodes."""
        if not self.t.g.status[u]:
            return True
        checks = plan[6].get(u)
        if checks is None:
            checks = plan[6][u] = self._supply_checks(u, resources)
        if checks is False:
            return False
        sub_avail = self.t.sub_avail
        at, duration = meta.at, meta.duration
        for rtype, needs in checks:
            if sub_avail(u, rtype, at, duration) < 1:
                continue
            if all(sub_avail(u, t, at, duration) >= n for t, n in needs):
                return False
        return True

    def _supply_checks(self, u: int, resources: list[Resource]) -> tuple | bool:
        """What Traverser._cannot_supply reads at ``u``: False (it can always supply: u is,
        or holds, a request) or per request (its type, what its subtree must have free)."""
        g = self.t.g
        totals = self.t.totals(u)
        utype = g.type[u]
        out = []
        for r in resources:
            if r.type == utype or r.type == "slot":
                return False
            if r.type not in totals:
                continue
            out.append((r.type, tuple((t, n) for t, n in r.user_data.items() if t in totals)))
        return tuple(out)

    def _key(self, c: int, resources: list[Resource], plan: tuple, meta: Meta) -> tuple | None:
        """The traverser's template key of node ``c`` for this plan (A: the node's request
        inside it, exclusive as asked; B: the slot, pristine)."""
        if plan[0] == "A":
            return self.t._template_key(c, plan[1].with_, bool(plan[1].exclusive), False, meta)
        return self.t._template_key(c, resources, False, True, meta)

    def freed(self, vertices) -> None:
        """Spans of ``vertices`` went (a cancel, a shrink): what was known to give nothing
        below their parents may give again."""
        busy = self._busy
        if busy:
            parent = self.t.g.parent[self.t.sub]
            for v in vertices:
                busy.pop(parent[v], None)

    # -- learning shape B from the general traversal ----------------------------------------
    def learn(self) -> None:
        """After a general selection that express declined for lack of a slot template:
        record where the slot landed inside its (untouched) node."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        resources, meta = pending
        t = self.t
        if len(t.chosen_slots) != 1 or isinstance(t.chosen_slots[0], tuple):
            return
        edges = t.chosen_slots[0]
        g = t.g
        parent = g.parent[t.sub]
        node = edges[0][0] if edges else -1
        while node != -1 and g.type[node] != "node":
            node = parent[node]
        if node == -1 or not t._untouched(node):
            return
        key = t._template_key(node, resources, False, True, meta)
        if key is None:
            return
        where = {v: i for i, v in enumerate(t._post_below(node)[1])}
        if any(v not in where for v, _ in edges):
            return
        if len(self._slot_tpl) >= _MAX_SLOT_TEMPLATES:
            self._slot_tpl.clear()
        self._slot_tpl[key] = tuple((where[v], amount) for v, amount in edges)

    def forget(self) -> None:
        """Drop recorded slot placements (shapes changed) and cached ancestor chains."""
        self._slot_tpl.clear()
        self._chains.clear()
        self._node_facts.clear()
        self._path_facts.clear()
        self._above.clear()
        self._busy.clear()
        self._plans.clear()  # their caches read the tree and its shapes
        self._hit = None


def _leaf_members(slot: Resource, policy) -> tuple[tuple[Resource, ...], frozenset] | None:
    """Shape C's members (one unit each of distinct leaf types, none scored by a policy
    factor) and the exclusive types it allows (its members'), or None. A factor (``first``
    scores nodes) only shifts scores, and shape C never ranks two candidates."""
    members = tuple(slot.with_)
    types = [r.type for r in members]
    if len(set(types)) != len(types) or any(
            r.type == "slot" or r.with_ or r.count_min != 1 or r.count_max != 1
            or r.type in policy.factors for r in members):
        return None
    return members, frozenset(types) | {"slot"}, {r.type: r for r in members}


def _second(item: tuple[int, int]) -> int:
    return item[1]


def _types_below(r: Resource):
    for c in r.with_:
        yield c
        yield from _types_below(c)
