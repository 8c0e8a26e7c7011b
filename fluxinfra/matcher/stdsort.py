"""The element order GNU libstdc++'s ``std::sort`` leaves, for byte-identical tie-breaking.

Fluxion ranks candidates with ``std::sort``, which is not stable: candidates with equal scores
(``core35`` of every node) end up in an order fixed by libstdc++'s introsort (median-of-three
quicksort down to 16-element runs, heapsort past the depth limit, then insertion sort). Exact
matching uses this to pick the same one of equal candidates as Fluxion; fast matching does not
need it.

This module is the sort itself, step for step as libstdc++'s ``bits/stl_algo.h`` and
``bits/stl_heap.h`` take it (:func:`introsort`, its median of three, its heap sort), and the
order it leaves ``n`` equal keys in, worked out without sorting (:func:`equal_prefix`). The
first elements of its order over typed keys, partitioned only as far as they need, are
:mod:`fluxinfra.matcher.prefixsort`'s, built from the pieces here.

>>> xs = [(3, "a"), (1, "b"), (3, "c"), (2, "d")]
>>> introsort(xs, lambda x, y: x[0] > y[0])
>>> [x[1] for x in xs]
['a', 'c', 'd', 'b']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["introsort", "equal_prefix"]

_THRESHOLD = 16


def introsort(a: list[Any], comp: Callable[[Any, Any], bool]) -> None:
    """Sort ``a`` in place exactly as ``std::sort(a.begin(), a.end(), comp)`` would."""
    n = len(a)
    if n < 2:
        return
    _loop(a, 0, n, 2 * (n.bit_length() - 1), comp)
    if n > _THRESHOLD:
        _insertion(a, 0, _THRESHOLD, comp)
        for i in range(_THRESHOLD, n):
            _linear_insert(a, i, comp)
    else:
        _insertion(a, 0, n, comp)


def _loop(a, first, last, depth, comp) -> None:
    while last - first > _THRESHOLD:
        if depth == 0:
            _heapsort(a, first, last, comp)
            return
        depth -= 1
        cut = _partition_pivot(a, first, last, comp)
        _loop(a, cut, last, depth, comp)
        last = cut


def _partition_pivot(a, first, last, comp) -> int:
    mid = first + (last - first) // 2
    _median_to_first(a, first, first + 1, mid, last - 1, comp)
    lo, hi = first + 1, last
    pivot = a[first]
    while True:
        while comp(a[lo], pivot):
            lo += 1
        hi -= 1
        while comp(pivot, a[hi]):
            hi -= 1
        if not lo < hi:
            return lo
        a[lo], a[hi] = a[hi], a[lo]
        lo += 1


def _median_to_first(a, result, x, y, z, comp) -> None:
    if comp(a[x], a[y]):
        if comp(a[y], a[z]):
            pick = y
        elif comp(a[x], a[z]):
            pick = z
        else:
            pick = x
    elif comp(a[x], a[z]):
        pick = x
    elif comp(a[y], a[z]):
        pick = z
    else:
        pick = y
    a[result], a[pick] = a[pick], a[result]


def _insertion(a, first, last, comp) -> None:
    for i in range(first + 1, last):
        if comp(a[i], a[first]):
            val = a[i]
            a[first + 1:i + 1] = a[first:i]
            a[first] = val
        else:
            _linear_insert(a, i, comp)


def _linear_insert(a, last, comp) -> None:
    val = a[last]
    nxt = last - 1
    while comp(val, a[nxt]):
        a[last] = a[nxt]
        last = nxt
        nxt -= 1
    a[last] = val


def _heapsort(a, first, last, comp) -> None:
    n = last - first
    if n < 2:
        return
    parent = (n - 2) // 2
    while True:
        _adjust_heap(a, first, parent, n, a[first + parent], comp)
        if parent == 0:
            break
        parent -= 1
    while last - first > 1:
        last -= 1
        val = a[last]
        a[last] = a[first]
        _adjust_heap(a, first, 0, last - first, val, comp)


def _adjust_heap(a, first, hole, length, value, comp) -> None:
    top = hole
    child = hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if comp(a[first + child], a[first + child - 1]):
            child -= 1
        a[first + hole] = a[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[first + hole] = a[first + child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and comp(a[first + parent], value):
        a[first + hole] = a[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    a[first + hole] = value


def _median_of_three(vals, first: int, last: int) -> int:
    """The position std::__move_median_to_first picks among first+1, the middle, last-1."""
    mid = first + (last - first) // 2
    x, y, z = first + 1, mid, last - 1
    vx, vy, vz = vals[x], vals[y], vals[z]
    if vx < vy:
        return y if vy < vz else (z if vx < vz else x)
    if vx < vz:
        return x
    return z if vy < vz else y


def equal_prefix(n: int, count: int) -> list[int]:
    """The positions of ``n`` equal keys in the order ``std::sort`` leaves its first
    ``count``: the same permutation whatever the keys, worked out without a list of ``n``.

    Equal keys make every median of three the middle element and every partition swap the
    i-th element after the pivot with the i-th from the end until they meet.

    >>> xs = list(range(100))
    >>> introsort(xs, lambda a, b: False)
    >>> equal_prefix(100, 5) == xs[:5]
    True
    """
    ops: list[tuple[int, int, int, int]] = []  # (first, last, mid, swaps), in order
    runs: list[tuple[int, int]] = []  # the runs covering positions 0.., left to right
    pending = [(0, n, 2 * (n.bit_length() - 1) if n else 0)]
    covered = 0
    while pending and covered < count:
        first, last, depth = pending.pop()
        while last - first > _THRESHOLD and depth > 0:
            depth -= 1
            size = last - first
            swaps = (size - 1) // 2  # ceil((size - 2) / 2)
            ops.append((first, last, first + size // 2, swaps))
            cut = first + 1 + swaps
            pending.append((cut, last, depth))
            last = cut
        if last - first > _THRESHOLD:
            raise ValueError("equal keys never reach the depth limit")  # pragma: no cover
        runs.append((first, last))
        covered = last
    out = []
    for first, last in runs:
        for p in range(first, min(last, count)):
            out.append(_trace_equal(ops, p))
    return out[:count]


def _trace_equal(ops: list[tuple[int, int, int, int]], p: int) -> int:
    """Where the element now at position ``p`` stood before the partitions ``ops``."""
    for first, last, mid, swaps in reversed(ops):
        if not first <= p < last:
            continue
        if first + 1 <= p < first + 1 + swaps:
            p = last - 1 - (p - first - 1)
        elif last - swaps <= p <= last - 1:
            p = first + 1 + (last - 1 - p)
        if p == first:
            p = mid
        elif p == mid:
            p = first
    return p
