"""What the walk remembers between matches: memo entries, templates, request facts.

No Fluxion counterpart: Fluxion walks every subtree afresh. The full walk
(``Traverser._visit``) remembers what each untouched subtree found, keyed by its shape and
the request; :class:`Rebound` reads a subtree's remembered candidates back as another
subtree's of the same layout, :class:`ReplayedSlots` keeps a replayed subtree's slots by position
until they are asked for, :func:`per_request` keeps facts derived from a request list, and the
post-order helpers list the vertices below a subtree the commit holds whole.
"""

from __future__ import annotations

from itertools import repeat

from fluxinfra.matcher.evaluators import _RUNS, Candidate, _key_bytes, _runs_of
from fluxinfra.matcher.jobspec import Resource

__all__ = ["Rebound", "ChosenSlot", "ReplayedSlots", "expand_slots", "per_request", "request_key",
           "walk_below", "inner_below", "inner_plan"]

#: request lists whose derived facts are kept between matches
_MAX_REQUESTS = 512


def walk_below(kids: list, v: int, d: int, depths: list[int], out: list[int]) -> None:
    """The vertices below ``v`` in post-order into ``out``, their depths into ``depths`` (a
    module function, not a recursive closure: a closure that calls itself is a reference
    cycle, garbage only the cyclic collector frees, one per subtree walked)."""
    ch = kids[v]
    if any(map(kids.__getitem__, ch)):
        for c in ch:
            if kids[c]:
                walk_below(kids, c, d + 1, depths, out)
            depths.append(d)
            out.append(c)
    else:  # leaves only
        depths.extend(repeat(d, len(ch)))
        out.extend(ch)


def inner_below(kids: list, v: int, out: list[int]) -> None:
    """The vertices below ``v`` that have children, in post-order, into ``out`` (what
    walk_below lists, leaves left out: a run of leaves is passed over at C speed)."""
    ch = kids[v]
    if any(map(kids.__getitem__, ch)):
        for c in ch:
            if kids[c]:
                inner_below(kids, c, out)
                out.append(c)


def inner_plan(kids: list, u: int, edges: list[tuple[int, int]]) -> tuple:
    """``edges`` (below ``u``) by place: per edge (v, c), the child indices leading from u
    to v and c's index among v's children (one walk below u)."""
    path = {u: ()}
    place: dict[tuple[int, int], tuple] = {}
    stack = [u]
    while stack:
        v = stack.pop()
        for i, c in enumerate(kids[v]):
            if kids[c]:
                place[(v, c)] = (path[v], i)
                path[c] = path[v] + (i,)
                stack.append(c)
    return tuple(map(place.__getitem__, edges))


class Rebound:
    """The candidates a subtree of one layout found, for another subtree of that layout:
    groups kept by position below the subtree's root, read back as this subtree's vertices
    (only the ones asked for). Reads like a remembered Evals."""

    __slots__ = ("kind", "post_below", "root", "n", "qual", "total", "parts")

    def __init__(self, kind: tuple, post_below, root: int) -> None:
        self.kind = kind
        self.post_below = post_below
        self.root = root
        groups, self.qual, self.total = kind[:3]
        self.n = len(groups)
        self.parts = ()  # never flat: merged by reference

    def scores(self) -> list[int]:
        return self.kind[3]

    def key_bytes(self, base: int, high: bool) -> bytes:
        cache = self.kind[6]  # shared by every subtree of the layout
        got = cache.get((base, high))
        if got is None:
            got = cache[(base, high)] = _key_bytes(self.kind[3], base, high)
        return got

    def bounds(self) -> tuple[int, int]:
        return self.kind[4]

    def distinct(self) -> frozenset[int]:
        return self.kind[5]

    def runs(self) -> tuple | None:
        cache = self.kind[6]  # (the same scores in every subtree of the layout)
        got = cache.get(_RUNS, False)
        if got is False:
            got = cache[_RUNS] = _runs_of(self.kind[3])
        return got

    def group(self, i: int) -> Candidate:
        post = self.post_below(self.root)[1]
        root = self.root
        score, count, x, is_root, edges = self.kind[0][i]
        return Candidate(score, count, 0, x, is_root, tuple([
            (e0, e1, e2, post[v] if v >= 0 else root, post[p] if p >= 0 else root)
            for e0, e1, e2, v, p in edges]))

    def groups(self) -> list[Candidate]:
        return [self.group(i) for i in range(self.n)]


class ChosenSlot(list):
    """A slot instance ranked at vertex ``top`` (-1: the root's ranking): its (member,
    amount) pairs."""

    __slots__ = ("top",)

    def __init__(self, top: int, members: list) -> None:
        super().__init__(members)
        self.top = top


class ReplayedSlots(tuple):
    """Slot instances of a replayed subtree: (the traverser's ``_post_below``, the subtree
    root, slots by position in its post-order)."""

    __slots__ = ()

    def expand(self) -> list[list[tuple[int, int]]]:
        post_below, u, slots = self
        seq = post_below(u)[1]
        return [[(seq[i], amount) for i, amount in edges] for edges in slots]


def expand_slots(items: list) -> list[list[tuple[int, int]]]:
    """``chosen_slots`` with replayed subtrees expanded: one (vertex, amount) list per slot."""
    out: list[list[tuple[int, int]]] = []
    for item in items:
        if isinstance(item, ReplayedSlots):
            out += item.expand()
        else:
            out.append(item)
    return out


def per_request(cache: dict[int, tuple], resources: list[Resource], make):
    """``make(resources)``, kept in ``cache`` by the request list's identity. The list is kept
    with its value, so its id cannot be reused while cached (the matcher hands the same
    parsed jobspec back for a repeated request); the cache starts over past a bound."""
    hit = cache.get(id(resources))
    if hit is None:
        if len(cache) >= _MAX_REQUESTS:
            cache.clear()
        hit = cache[id(resources)] = (resources, make(resources))
    return hit[1]


def request_key(resources: list[Resource]) -> tuple:
    """What the traversal reads of a request list, as a hashable value."""
    return tuple((r.type, r.count_min, r.count_max, r.oper, r.operand, r.exclusive,
                  tuple(sorted(r.user_data.items())), request_key(r.with_))
                 for r in resources)
