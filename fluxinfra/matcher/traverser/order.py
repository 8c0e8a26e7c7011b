"""The order in which ``first``-fit policies visit a vertex's children.

Fluxion's ``first`` policy ranks the out-edges of a vertex by the free amount of the last
pruning type below each child, most free first, children no job touched yet before all the
others (the edge weights its ``dfu_impl_update.cpp`` sets after a commit; the walk in
``dfu_impl.cpp`` iterates the edges in that order). :class:`ChildOrder` keeps such an order for a
vertex with thousands of children in sorted chunks, so a re-ranked child moves by bisection;
:class:`HeldKids` lists the children held whole, so a busy vertex's walk skips them.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from itertools import chain

__all__ = ["ChildOrder", "HeldKids", "order_key", "untouched_keys", "by_place", "UNTOUCHED"]

UNTOUCHED = 1 << 64  # Fluxion's initial edge weight (UINT64_MAX): never-used children first


def by_place(kids: list[int], weights: dict[int, int]) -> tuple[tuple[int, int], ...]:
    """``weights`` (child -> weight) as (the child's index among ``kids``, weight), in
    index order: one pass over the children (2 below a node, 38 below a socket)."""
    return tuple([(i, w) for i, w in enumerate(map(weights.get, kids)) if w is not None])


class ChildOrder:
    """Children in an order, with their sort keys (ascending) beside them, kept in chunks: a
    child is found, moved or placed by bisection, and a move shifts one chunk, not the whole
    list of a vertex with thousands of children. Iterates like the flat list; every operation
    gives what the same operation on the flat lists would (ties included)."""

    __slots__ = ("chunks", "_kchunks", "_maxes", "_make", "ver")

    SIZE = 256  # entries per chunk (a chunk splits in two past twice this)

    def __init__(self, kids: list[int], keys: list[int] | None = None, make=None) -> None:
        """``keys``, or ``make``: what makes them from the children when first needed (a
        vertex whose order is only walked never pays for its keys)."""
        size = self.SIZE
        self.chunks = [kids[i:i + size] for i in range(0, len(kids), size)]
        self._kchunks = self._maxes = None
        self._make = make
        self.ver = 0  # moves made (what was read of the order stays true while it holds)
        if keys is not None:
            self._keys(keys)

    def _keys(self, keys: list[int]) -> None:
        size = self.SIZE
        self._kchunks = kchunks = [keys[i:i + size] for i in range(0, len(keys), size)]
        self._maxes = [kc[-1] for kc in kchunks]
        self._make = None

    @property
    def kchunks(self) -> list[list[int]]:
        if self._kchunks is None:
            self._keys(self._make(list(self)))
        return self._kchunks

    @property
    def maxes(self) -> list[int]:
        if self._maxes is None:
            self._keys(self._make(list(self)))
        return self._maxes

    def __iter__(self):
        chunks = self.chunks
        return iter(chunks[0]) if len(chunks) == 1 else chain.from_iterable(chunks)

    def __len__(self) -> int:
        return sum(map(len, self.chunks))

    def lists(self) -> tuple[list[int], list[int]]:
        """The flat children and keys (copies)."""
        return list(self), list(chain.from_iterable(self.kchunks))

    def remove(self, c: int, key: int) -> bool:
        """Take ``c`` out (sorted under ``key``: found where the flat list's bisect_left would
        look); False if it is not there."""
        maxes = self.maxes
        b = bisect_left(maxes, key)
        if b == len(maxes):
            return False
        kc, ch = self.kchunks[b], self.chunks[b]
        i = bisect_left(kc, key)
        if i == len(ch) or ch[i] != c:
            return False
        self.ver += 1
        del ch[i]
        del kc[i]
        if not kc:
            del self.chunks[b]
            del self.kchunks[b]
            del maxes[b]
        elif i == len(kc):
            maxes[b] = kc[-1]
        return True

    def insert(self, c: int, key: int) -> None:
        """Place ``c`` under ``key`` after every entry whose key is <= it (bisect_right)."""
        self.ver += 1
        maxes = self.maxes
        if not maxes:
            self.chunks.append([c])
            self.kchunks.append([key])
            maxes.append(key)
            return
        b = bisect_right(maxes, key)
        if b == len(maxes):
            b -= 1
            maxes[b] = key
        kc, ch = self.kchunks[b], self.chunks[b]
        j = bisect_right(kc, key)
        kc.insert(j, key)
        ch.insert(j, c)
        if len(kc) > 2 * self.SIZE:
            half = len(kc) // 2
            self.kchunks.insert(b + 1, kc[half:])
            self.chunks.insert(b + 1, ch[half:])
            del kc[half:]
            del ch[half:]
            maxes[b] = kc[-1]
            maxes.insert(b + 1, self.kchunks[b + 1][-1])


class HeldKids:
    """Children of one vertex held whole by allocations: child -> (start, end, jobid).
    Valid for a match at ``at`` only when every hold covers ``at`` (starts and ends are
    counted by value, so the bounds stay O(distinct values) to maintain)."""

    __slots__ = ("kids", "starts", "ends", "max_start", "min_end")

    def __init__(self) -> None:
        self.kids: dict[int, tuple[int, int, int]] = {}
        self.starts: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self.max_start = -1
        self.min_end = 1 << 63

    def add(self, c: int, start: int, end: int, jobid: int) -> None:
        if c in self.kids:
            self.discard(c, self.kids[c][2])
        self.kids[c] = (start, end, jobid)
        self.starts[start] = self.starts.get(start, 0) + 1
        self.ends[end] = self.ends.get(end, 0) + 1
        if start > self.max_start:
            self.max_start = start
        if end < self.min_end:
            self.min_end = end

    def discard(self, c: int, jobid: int) -> bool:
        """Drop ``jobid``'s hold on ``c``; whether there was one."""
        entry = self.kids.get(c)
        if entry is None or entry[2] != jobid:
            return False
        del self.kids[c]
        start, end, _ = entry
        self.starts[start] -= 1
        if not self.starts[start]:
            del self.starts[start]
            self.max_start = max(self.starts, default=-1)
        self.ends[end] -= 1
        if not self.ends[end]:
            del self.ends[end]
            self.min_end = min(self.ends, default=1 << 63)
        return True

    def covers(self, at: int) -> bool:
        return self.max_start <= at < self.min_end


def untouched_keys(uid: list[int], kids: list[int]) -> list[int]:
    """``first``'s sort keys of children no job touched yet (by uniq_id alone)."""
    return list(map(order_key(UNTOUCHED, 0).__sub__, map(uid.__getitem__, kids)))


def order_key(weight: int, uniq_id: int) -> int:
    """``first``'s sort key as one int, ascending = most free first, then higher uniq_id
    (uniq_id is an int64, so the weight's bits sit above it; ints compare faster than tuples
    in the bisections of a wide vertex's order)."""
    return -(weight << 65) - (uniq_id + (1 << 64))
