"""Express selection for whole-node requests under first-fit policies (fast mode only).

Two request shapes dominate first-fit scheduling of whole nodes:

* **A** ``node[k]`` held whole (the policy makes nodes exclusive, or the jobspec marks the node
  exclusive), whatever it asks for inside each node;
* **B** one ``slot`` under a ``node_exclusive`` first-fit policy (``firstnodex``): the slot is
  formed inside the first node that can hold it, and that node is held whole.

For both, the general traversal (:class:`~fluxinfra.matcher.traverser.Traverser.select`) spends
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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fluxinfra.matcher.jobspec import Resource
from fluxinfra.matcher.planner import MultiPlanner, Planner

if TYPE_CHECKING:  # pragma: no cover - typing only
    from fluxinfra.matcher.traverser import Meta, Traverser

__all__ = ["Express"]

_MAX_SLOT_TEMPLATES = 4096

# names from traverser.py (which imports this module), bound once by _bind()
_TRAVERSER = _AT_ALLOC = _PRISTINE_NONE = _RESOURCE_KIND = _MATCH_MET = _REPLAYED = None
_PER_REQUEST = _HELD = _X_NJOBS = _STD_SORTED = None


def _bind() -> None:
    global _TRAVERSER, _AT_ALLOC, _PRISTINE_NONE, _RESOURCE_KIND, _MATCH_MET, _REPLAYED
    global _PER_REQUEST, _HELD, _X_NJOBS, _STD_SORTED
    if _TRAVERSER is None:
        from fluxinfra.matcher import traverser as tr

        _TRAVERSER, _AT_ALLOC, _PRISTINE_NONE = tr.Traverser, tr.AT_ALLOC, tr._PRISTINE_NONE
        _RESOURCE_KIND, _MATCH_MET, _REPLAYED = tr._RESOURCE, tr.MATCH_MET, tr._Replayed
        _PER_REQUEST, _HELD = tr.per_request, tr._Held
        _X_NJOBS = tr.X_NJOBS
        _STD_SORTED = tr.std_sorted


_UNKNOWN = object()  # nothing recorded (yet) under a template key


class _Abort(Exception):
    """The request left the express lane's ground: run the general traversal."""


class Express:
    """The express lane of one traverser (see the module docstring)."""

    def __init__(self, trav: Traverser) -> None:
        _bind()
        self.t = trav
        #: id(request list) -> (the list, plan or None); a plan is ("A", R, k, ...) or
        #: ("B", S, 1, ...), then caches of tree facts it read: vertex -> passes through
        #: (Traverser._test); node shape -> [template key, recorded selection or _UNKNOWN];
        #: vertex -> what its prune reads (_prune_checks); vertex -> what "cannot supply"
        #: reads (_supply_checks)
        self._plans: dict[int, tuple[list[Resource], tuple | None]] = {}
        #: shape B: template key -> chosen slot as (position in the node's post-order, amount)
        self._slot_tpl: dict[tuple, tuple[tuple[int, int], ...]] = {}
        #: vertex -> (it and its ancestors bottom-up, their types); the tree never changes
        #: without Traverser.invalidate (which calls forget)
        self._chains: dict[int, tuple[tuple[int, ...], frozenset[str]]] = {}
        #: node shape -> what holding such a node whole books (see _facts)
        self._node_facts: dict[int, tuple[int, dict[str, int], dict[str, int]]] = {}
        self._pending: tuple | None = None
        #: the last selection, for :meth:`commit`: (marks dict, node, ancestors bottom-up)
        self._hit: tuple | None = None

    # -- applicability ----------------------------------------------------------------------
    def _plan(self, resources: list[Resource]) -> tuple | None:
        return _PER_REQUEST(self._plans, resources, self._make_plan)

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
            return ("B", r, 1, {}, {}, {}, {})
        return None

    def _passes(self, plan: tuple, u: int, resources: list[Resource]) -> bool:
        """``u`` neither is nor holds what the request asks at this level (the traversal's
        test answers "pristine, none"): a fact of the tree, kept per plan."""
        verdicts = plan[3]
        hit = verdicts.get(u)
        if hit is None:
            hit = verdicts[u] = self.t._test(u, resources, True)[2] == _PRISTINE_NONE
        return hit

    def usable(self, meta: Meta, excl: bool) -> bool:
        t = self.t
        return (t.fast and t.policy.stop_on_k > 0 and type(t) is _TRAVERSER
                and not t.g.multi_parent and not excl and meta.alloc_type == _AT_ALLOC
                and meta.at == meta.now and "node" in t.excl_types)

    # -- selection --------------------------------------------------------------------------
    def select(self, resources: list[Resource], meta: Meta, excl: bool) -> bool | None:
        """True / False as :meth:`Traverser.select` would answer, or None: not express."""
        self._pending = self._hit = None
        if not self.usable(meta, excl):
            return None
        plan = self._plan(resources)
        if plan is None:
            return None
        t = self.t
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
        best = _STD_SORTED(gathered, _second, t.policy.high)[:k]
        t.marks = marks = {}
        for node, _ in best:
            p = parent[node]
            marks[node] = (size[node], x, p)
            while p != -1 and parent[p] != -1 and p not in marks:
                marks[p] = (size[p], False, parent[p])
                p = parent[p]
        return True

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
        if hit is None or hit[0] is not t.marks or meta.alloc_type != _AT_ALLOC:
            return None
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
        raw.append(_HELD((depth + 1, t._post_below, size, n)))
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
        job.alloc_vertices.append(n)
        if t.policy.stop_on_k:
            job.reweigh_inner += t.inner_edges(n)
        t.hold_kid(ancestors[0], n, at, at + duration, jobid)
        job.xspans[n] = None
        whole = t._whole
        whole[n] = whole.get(n, 0) + 1
        whole = t._whole_alloc
        whole[n] = whole.get(n, 0) + 1
        job.whole.add(n)
        job.used[n] = used.copy()
        job.node_hint = [n]
        raw.append((depth, n, needs, True, False))
        # every ancestor: a job-count span, the node's amounts on its aggregates
        xcheck, agg = t.xcheck, t.agg
        xspans, job_agg, owners = job.xspans, job.agg, job.agg_owners
        first = t.policy.stop_on_k > 0
        reweigh = job.reweigh
        child = n
        for a in ancestors:
            if first:
                reweigh.append((a, child))
            x = xcheck.get(a)
            if x is None:
                x = xcheck[a] = Planner(_X_NJOBS)
            xspans[a] = x.add_span(at, duration, 1)
            if amounts:
                pl = agg.get(a)
                if pl is None:
                    pl = agg[a] = MultiPlanner(t.totals(a))
                job_agg[a] = (pl.add_span(at, duration, amounts), amounts)
                owners.add(a)
            depth -= 1
            raw.append((depth, a, size[a], False, False))
            child = a
        return 2

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
                        slots.append(_REPLAYED((t._post_below, c, found[0])))
                else:
                    slots.append(_REPLAYED((t._post_below, c, (found,))))
                out.append((c, _MATCH_MET + g.id[c] + 1))
                return
        # not recorded, or partly used: the general visit's own tests decide; a candidate
        # that survives them needs the general walk
        want = _RESOURCE_KIND if plan[0] == "A" else _PRISTINE_NONE
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
        self._plans.clear()  # their caches read the tree and its shapes
        self._hit = None


def _second(item: tuple[int, int]) -> int:
    return item[1]


def _types_below(r: Resource):
    for c in r.with_:
        yield c
        yield from _types_below(c)
