"""The element order GNU libstdc++'s ``std::sort`` leaves, for byte-identical tie-breaking.

Fluxion ranks candidates with ``std::sort``, which is not stable: candidates with equal scores
(``core35`` of every node) end up in an order fixed by libstdc++'s introsort (median-of-three
quicksort down to 16-element runs, heapsort past the depth limit, then insertion sort). Exact
matching uses this to pick the same one of equal candidates as Fluxion; fast matching does not
need it.

>>> xs = [(3, "a"), (1, "b"), (3, "c"), (2, "d")]
>>> introsort(xs, lambda x, y: x[0] > y[0])
>>> [x[1] for x in xs]
['a', 'c', 'd', 'b']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["introsort"]

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
