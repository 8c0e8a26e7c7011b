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

if TYPE_CHECKING:  # pragma: no cover - typing only
    from fluxinfra.matcher.traverser import Meta, Traverser

__all__ = ["Express"]

_MAX_SLOT_TEMPLATES = 4096

# names from traverser.py (which imports this module), bound once by _bind()
_TRAVERSER = _AT_ALLOC = _PRISTINE_NONE = _RESOURCE_KIND = _MATCH_MET = _REPLAYED = None
_PER_REQUEST = None


def _bind() -> None:
    global _TRAVERSER, _AT_ALLOC, _PRISTINE_NONE, _RESOURCE_KIND, _MATCH_MET, _REPLAYED
    global _PER_REQUEST
    if _TRAVERSER is None:
        from fluxinfra.matcher import traverser as tr

        _TRAVERSER, _AT_ALLOC, _PRISTINE_NONE = tr.Traverser, tr.AT_ALLOC, tr._PRISTINE_NONE
        _RESOURCE_KIND, _MATCH_MET, _REPLAYED = tr._RESOURCE, tr.MATCH_MET, tr._Replayed
        _PER_REQUEST = tr.per_request


class _Abort(Exception):
    """The request left the express lane's ground: run the general traversal."""


class Express:
    """The express lane of one traverser (see the module docstring)."""

    def __init__(self, trav: Traverser) -> None:
        _bind()
        self.t = trav
        #: id(request list) -> (the list, plan or None); a plan is ("A", R, k) or ("B", S)
        self._plans: dict[int, tuple[list[Resource], tuple | None]] = {}
        #: shape B: template key -> chosen slot as (position in the node's post-order, amount)
        self._slot_tpl: dict[tuple, tuple[tuple[int, int], ...]] = {}
        self._pending: tuple | None = None

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
            return ("A", r, r.count_min)
        if (r.type == "slot" and r.count_min == 1 and r.with_
                and all(c.type != "node" for c in _types_below(r))):
            return ("B", r)
        return None

    def usable(self, meta: Meta, excl: bool) -> bool:
        t = self.t
        return (t.fast and t.policy.stop_on_k > 0 and type(t) is _TRAVERSER
                and not t.g.multi_parent and not excl and meta.alloc_type == _AT_ALLOC
                and meta.at == meta.now and "node" in t.excl_types)

    # -- selection --------------------------------------------------------------------------
    def select(self, resources: list[Resource], meta: Meta, excl: bool) -> bool | None:
        """True / False as :meth:`Traverser.select` would answer, or None: not express."""
        self._pending = None
        if not self.usable(meta, excl):
            return None
        plan = self._plan(resources)
        if plan is None:
            return None
        t = self.t
        g = t.g
        root = g.roots[t.sub]
        if (g.type[root] == "node" or t.sched.get(root) is not None
                or t._test(root, resources, True)[2] != _PRISTINE_NONE
                or t._prune(meta, False, root, resources)):
            return None
        k = plan[2] if plan[0] == "A" else 1
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
        if plan[0] == "A":
            # the root ranks candidates by score (a stable sort, as in fast mode)
            best = sorted(gathered, key=_second, reverse=t.policy.high)[:k]
        else:
            best = gathered[:1]
        t.marks = marks = {}
        t.visited = None
        t._ml = 0
        t.chosen_slots = chosen_slots
        parent = g.parent[t.sub]
        x = bool(plan[1].exclusive) if plan[0] == "A" else False
        size = g.size
        for node, _ in best:
            p = parent[node]
            marks[node] = (size[node], x, p)
            while p != -1 and parent[p] != -1 and p not in marks:
                marks[p] = (size[p], False, parent[p])
                p = parent[p]
        t.root_mark = (1, False)
        t.preorder = t.postorder = 0
        return True

    def _gather(self, u: int, resources: list[Resource], plan: tuple, meta: Meta,
                out: list[tuple[int, int]], slots: list, k: int) -> None:
        """Visit the children of pass-through vertex ``u`` as ``_explore_dynamic`` does."""
        t = self.t
        g = t.g
        kids = g.children[t.sub]
        gtype = g.type
        sched = t.sched
        at, duration = meta.at, meta.duration
        held = t._held_kids.get(u)
        if held is not None and not held.covers(at):
            held = None
        start = len(out)
        for c in t._ordered_children(u):
            if held is not None and c in held.kids:
                continue
            if not kids[c]:
                if gtype[c] == "node":
                    raise _Abort  # a node without children: leave it to the general walk
                continue  # a leaf of another type gathers nothing the request counts
            p = sched.get(c)
            if p is not None and p.avail_during(at, duration) == 0:
                continue
            if t._cannot_supply(meta, c, resources):
                continue
            if gtype[c] == "node":
                self._node(c, resources, plan, meta, out, slots)
            else:
                if t._test(c, resources, True)[2] != _PRISTINE_NONE:
                    raise _Abort
                if t._prune(meta, False, c, resources):
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
            if plan[0] == "A":
                x_in = bool(plan[1].exclusive)
                key = t._template_key(c, plan[1].with_, x_in, False, meta)
                if key is not None and key in t._templates:
                    tpl = t._templates[key]
                    if tpl is None:
                        return
                    if tpl[0]:
                        slots.append(_REPLAYED((t._post_below, c, tpl[0])))
                    out.append((c, _MATCH_MET + g.id[c] + 1))
                    return
            else:
                key = t._template_key(c, resources, False, True, meta)
                chosen = self._slot_tpl.get(key) if key is not None else None
                if chosen is not None:
                    slots.append(_REPLAYED((t._post_below, c, (chosen,))))
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
        """Drop recorded slot placements (shapes changed)."""
        self._slot_tpl.clear()


def _second(item: tuple[int, int]) -> int:
    return item[1]


def _types_below(r: Resource):
    for c in r.with_:
        yield c
        yield from _types_below(c)
