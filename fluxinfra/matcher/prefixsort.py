"""The first elements of ``std::sort``'s order over typed keys, sorted only as far as needed.

A ranking policy scores every candidate and takes the best few in the order libstdc++'s
``std::sort`` leaves them (:mod:`fluxinfra.matcher.stdsort`). The candidates' keys are small
integers (a byte under ``low``/``high``/``locality``, two bytes past 256 runs), and a top-level
ranking may hold every core of the machine (a million at 16,384 nodes), of which a match
takes one. The functions here replay introsort's partitions (the same pivots, the same swaps)
segment by segment from the front and stop once ``enough`` of the order is fixed, leaving the
rest unsorted:

* :func:`sorted_prefix`: any integer keys (a list), in plain Python;
* :func:`sorted_prefix_bytes`, :func:`sorted_prefix_words`: byte and two-byte keys, each
  partition's stops found with ``bytes.translate`` and ``itertools.compress`` at C speed, the
  positions traced back through the partitions at the end;
* where ``fluxinfra compile`` made :mod:`fluxinfra.matcher.bytepart` C (:data:`TYPED`), byte
  keys partitioned by its kernel; where numpy is installed (:func:`vectorized`), long lists
  partitioned with whole-array operations.

Every way gives the positions :func:`~fluxinfra.matcher.stdsort.introsort` of the whole list
gives (``tests/unit/matcher/test_ranking.py`` runs each prefix test every way).

Three of the 40 keys wanted: one run of 16 is settled (the positions of ten 1s and six 2s,
in std::sort's order), the other 24 keys are never sorted:

>>> keys = bytes([3, 1, 3, 2] * 10)
>>> order = sorted_prefix_bytes(keys, lambda got: len(got) >= 3)
>>> order[:3], len(order)
([1, 37, 33], 16)
"""

from __future__ import annotations

import threading
from array import array
from bisect import bisect_left
from collections.abc import Callable
from itertools import compress, islice
from operator import itemgetter
from typing import Any

from fluxinfra.matcher import bytepart
from fluxinfra.matcher.stdsort import _THRESHOLD, _heapsort, _median_of_three

__all__ = ["sorted_prefix", "sorted_prefix_bytes", "sorted_prefix_words", "vectorized"]


def sorted_prefix(keys: list, enough: Callable[[list[int]], bool]) -> list[int]:
    """The positions of ``keys`` in the order ``std::sort(keys, less)`` puts them, from the
    front, segment by segment until ``enough(order so far)``; only what decides those first
    elements is sorted (the right parts of partitions are left alone until needed).

    libstdc++ partitions down to runs of at most 16 (each left part before its right part),
    heap-sorts a run past the depth limit, then insertion-sorts the whole array once; an
    element never crosses a partition boundary in that last pass, so insertion-sorting each
    run on its own gives the same order.

    >>> from fluxinfra.matcher.stdsort import introsort
    >>> keys = [3, 1, 3, 2] * 10
    >>> order = sorted_prefix(keys, lambda got: len(got) >= 3)
    >>> full = list(range(40))
    >>> introsort(full, lambda a, b: keys[a] < keys[b])
    >>> order == full[:len(order)]
    True
    """
    n = len(keys)
    out: list[int] = []
    if n == 0:
        return out
    if n >= VECTOR_FROM and (np := _numpy()) is not None and _fits_int64(keys):
        return _sorted_prefix_np(_NumpyKeys(np, np.array(keys, dtype=np.int64)), enough)
    vals = list(keys)
    idx = list(range(n))
    pending = [(0, n, 2 * (n.bit_length() - 1))]
    while pending:
        first, last, depth = pending.pop()
        while last - first > _THRESHOLD and depth > 0:
            depth -= 1
            cut = _partition_pair(vals, idx, first, last)
            pending.append((cut, last, depth))
            last = cut
        if last - first > _THRESHOLD:  # depth limit: libstdc++ heap-sorts this run
            pairs = [(vals[i], idx[i]) for i in range(first, last)]
            _heapsort(pairs, 0, len(pairs), _less_first)
            out += [i for _, i in pairs]
        else:
            run = sorted(range(first, last), key=vals.__getitem__)  # stable, as insertion
            out += [idx[i] for i in run]
        if enough(out):
            break
    return out


def _less_first(a: tuple, b: tuple) -> bool:
    return a[0] < b[0]


def _partition_pair(vals: list, idx: list, first: int, last: int) -> int:
    """``__unguarded_partition_pivot`` on ``vals`` (ints, less), moving ``idx`` alongside."""
    pick = _median_of_three(vals, first, last)
    vals[first], vals[pick] = vals[pick], vals[first]
    idx[first], idx[pick] = idx[pick], idx[first]
    pivot = vals[first]
    lo, hi = first + 1, last
    while True:
        while vals[lo] < pivot:
            lo += 1
        hi -= 1
        while pivot < vals[hi]:
            hi -= 1
        if not lo < hi:
            return lo
        vals[lo], vals[hi] = vals[hi], vals[lo]
        idx[lo], idx[hi] = idx[hi], idx[lo]
        lo += 1


def sorted_prefix_bytes(keys: bytes | bytearray, enough: Callable[[list[int]], bool], *,
                        owned: bool = False) -> list[int]:
    """:func:`sorted_prefix` for keys that fit in a byte, at C speed where it counts: each
    partition finds its stops with ``bytes.translate`` and ``itertools.compress`` and swaps
    only the pairs it swaps; positions are traced back through the partitions at the end,
    so no list of a million positions is ever made. The partitions run on a copy of
    ``keys``, or on ``keys`` itself (left partitioned) when it is a bytearray the caller
    gives away (``owned``): a million keys are then not copied again.

    >>> keys = bytes([3, 1, 3, 2] * 10)
    >>> order = sorted_prefix_bytes(keys, lambda got: len(got) >= 3)
    >>> order == sorted_prefix(list(keys), lambda got: len(got) >= 3)
    True
    """
    vals = keys if owned and type(keys) is bytearray else bytearray(keys)
    if TYPED and _THRESHOLD < len(vals) <= _TYPED_MOST:
        return _sorted_prefix_masked(_TypedBytes(vals), len(vals), enough)
    if len(vals) >= BYTES_FROM and (np := _numpy()) is not None:
        return _sorted_prefix_np(_MixedBytes(np, vals), enough)
    return _sorted_prefix_masked(_ByteKeys(vals), len(vals), enough)


def sorted_prefix_words(keys, enough: Callable[[list[int]], bool]) -> list[int]:
    """:func:`sorted_prefix_bytes` for keys below 65,536 (each kept as two bytes: the
    partitions compare the high bytes, then the low ones where the high ones tie).

    >>> keys = [300, 1, 300, 2, 70_000 % 65_536] * 10
    >>> order = sorted_prefix_words(keys, lambda got: len(got) >= 3)
    >>> order == sorted_prefix(list(keys), lambda got: len(got) >= 3)
    True
    """
    keys = list(keys)
    if len(keys) >= VECTOR_FROM and (np := _numpy()) is not None:
        return _sorted_prefix_np(_NumpyKeys(np, np.array(keys, dtype=np.uint16)), enough)
    return _sorted_prefix_masked(_WordKeys(keys), len(keys), enough)


def _sorted_prefix_masked(store, n: int, enough: Callable[[list[int]], bool]) -> list[int]:
    """sorted_prefix over keys kept in ``store`` (_ByteKeys, _WordKeys or _NumpyKeys: each
    partitions, restores a partition's right side and traces positions back its own way)."""
    out: list[int] = []
    if n == 0:
        return out
    key = store.getter()
    # partitions in order: (first, pick, swapped-left positions, swapped-right positions,
    # what the left positions held before)
    ops: list[tuple[int, int, Any, Any, object]] = []
    pending = [(0, n, 2 * (n.bit_length() - 1), -1)]
    while pending:
        first, last, depth, made_by = pending.pop()
        if made_by >= 0:  # the right side of the partition that made this part
            store.restore(*ops[made_by])
        while last - first > _THRESHOLD and depth > 0:
            depth -= 1
            cut = store.partition(key, first, last, ops)
            pending.append((cut, last, depth, len(ops) - 1))
            last = cut
        if last - first > _THRESHOLD:  # depth limit: heap-sort this run
            pairs = [(key(i), i) for i in range(first, last)]
            _heapsort(pairs, 0, len(pairs), _less_first)
            run = [i for _, i in pairs]
        else:
            run = sorted(range(first, last), key=key)
        out += store.trace(ops, run)
        if enough(out):
            break
    return out


# bytes.translate tables, one per pivot p: byte v -> 1 where v >= p (``_GE``), v <= p, v > p,
# v < p, v == p, else 0 (made by slicing: every process that imports the matcher makes them)
_GE = [bytes(p) + b"\1" * (256 - p) for p in range(256)]
_LE = [b"\1" * (p + 1) + bytes(255 - p) for p in range(256)]
_GT = [*_GE[1:], bytes(256)]
_LT = [bytes(256), *_LE[:-1]]
_EQ = [bytes(p) + b"\1" + bytes(255 - p) for p in range(256)]


class _ByteKeys:
    """Keys of one byte each, for _sorted_prefix_masked (partitioned in ``vals``, the
    bytearray given)."""

    __slots__ = ("vals",)

    def __init__(self, vals: bytearray) -> None:
        self.vals = vals

    def getter(self):
        return self.vals.__getitem__

    def swap(self, i: int, j: int) -> None:
        vals = self.vals
        vals[i], vals[j] = vals[j], vals[i]

    def masks(self, first: int, last: int, p: int) -> tuple[bytes, bytes]:
        """Over positions first+1 .. last-1: 1 where the key is >= p, and where it is <= p."""
        seg = self.vals[first + 1:last]
        return seg.translate(_GE[p]), seg.translate(_LE[p])

    def move(self, left: list[int], right: list[int]) -> bytes:
        """Each left position takes the key of its right position; returns what the left
        positions held."""
        vals = self.vals
        outgoing = _pick(vals, left)
        for a, b in zip(left, right, strict=True):
            vals[a] = vals[b]
        return outgoing

    def partition(self, key, first: int, last: int, ops: list) -> int:
        return _partition_masked(self, key, first, last, ops)

    def restore(self, first: int, pick: int, left: list[int], right: list[int],
                outgoing: bytes) -> None:
        """Put back the keys partition ``(first, pick, left, right, outgoing)`` moved out of
        its right side."""
        vals = self.vals
        for b, v in zip(right, outgoing, strict=True):
            vals[b] = v

    @staticmethod
    def trace(ops: list, run: list[int]) -> list[int]:
        return [_trace(ops, p) for p in run]


class _WordKeys(_ByteKeys):
    """Keys below 65,536 as a byte of their high half (``vals``) and one of their low half
    (``low``), for _sorted_prefix_masked."""

    __slots__ = ("low",)

    def __init__(self, keys: list[int]) -> None:
        super().__init__(bytearray(map((8).__rrshift__, keys)))
        self.low = bytearray(map((255).__and__, keys))

    def getter(self):
        high, low = self.vals, self.low
        return lambda i: high[i] << 8 | low[i]

    def swap(self, i: int, j: int) -> None:
        super().swap(i, j)
        low = self.low
        low[i], low[j] = low[j], low[i]

    def masks(self, first: int, last: int, p: int) -> tuple[bytes, bytes]:
        ph, pl = p >> 8, p & 255
        high, low = self.vals[first + 1:last], self.low[first + 1:last]
        tie = high.translate(_EQ[ph])
        return (_or(high.translate(_GT[ph]), _and(tie, low.translate(_GE[pl]))),
                _or(high.translate(_LT[ph]), _and(tie, low.translate(_LE[pl]))))

    def move(self, left: list[int], right: list[int]) -> tuple[bytes, bytes]:
        low = self.low
        outgoing = _pick(low, left)
        for a, b in zip(left, right, strict=True):
            low[a] = low[b]
        return super().move(left, right), outgoing

    def restore(self, first: int, pick: int, left: list[int], right: list[int],
                outgoing: tuple[bytes, bytes]) -> None:
        super().restore(first, pick, left, right, outgoing[0])
        low = self.low
        for b, v in zip(right, outgoing[1], strict=True):
            low[b] = v


def _pick(vals: bytearray, at: list[int]) -> bytes:
    return bytes(itemgetter(*at)(vals)) if len(at) > 1 else bytes(vals[a] for a in at)


def _or(a: bytes, b: bytes) -> bytes:
    """Byte-wise OR of two 0/1 masks of one length (as one big integer: C speed)."""
    return (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")


def _and(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") & int.from_bytes(b, "little")).to_bytes(len(a), "little")


def _partition_masked(store, key, first: int, last: int, ops: list) -> int:
    """libstdc++'s __unguarded_partition_pivot on the keys in ``store`` (``key(i)`` reads
    one), recording the swaps in ``ops``; returns the cut."""
    pick = _median_of_three(_Indexed(key), first, last)
    store.swap(first, pick)
    ge_mask, le_mask = store.masks(first, last, key(first))
    # lo stops at each key >= p from the left, hi at each key <= p from the right; at most
    # as many swaps as the rarer kind has, so only that many of the other are listed
    most = min(ge_mask.count(1), le_mask.count(1)) + 1
    ge = list(islice(compress(range(first + 1, last), ge_mask), most))
    le = list(islice(compress(range(last - 1, first, -1), le_mask[::-1]), most))
    lo, hi = 0, min(len(ge), len(le))
    while lo < hi:  # swaps: the pairs (ge[i], le[i]) with ge[i] < le[i]
        m = (lo + hi) // 2
        if ge[m] < le[m]:
            lo = m + 1
        else:
            hi = m
    m = lo
    if m == 0:
        cut = ge[0]
    else:
        cut = le[m - 1]
        if m < len(ge) and ge[m] < cut:
            cut = ge[m]
    left = ge[:m]
    right = le[:m]
    # the left part is walked next: its side of each swap now; the right part's side only if
    # the walk ever gets there (_sorted_prefix_masked restores it then)
    ops.append((first, pick, left, right, store.move(left, right)))
    return cut


class _Indexed:
    """``key`` read as ``obj[i]`` (what _median_of_three reads)."""

    __slots__ = ("key",)

    def __init__(self, key) -> None:
        self.key = key

    def __getitem__(self, i: int) -> int:
        return self.key(i)


def _trace(ops: list, p: int) -> int:
    """Where the element now at position ``p`` stood before the partitions ``ops``."""
    for first, pick, left, right, _ in reversed(ops):
        if left and left[0] <= p <= right[0]:
            i = bisect_left(left, p)
            if i < len(left) and left[i] == p:
                p = right[i]
            else:  # right is descending
                j = _index_desc(right, p)
                if j >= 0:
                    p = left[j]
        if p == first:
            p = pick
        elif p == pick:
            p = first
    return p


def _index_desc(desc: list[int], p: int) -> int:
    lo, hi = 0, len(desc)
    while lo < hi:
        m = (lo + hi) // 2
        if desc[m] > p:
            lo = m + 1
        else:
            hi = m
    return lo if lo < len(desc) and desc[lo] == p else -1


# -- typed: byte keys partitioned in C ----------------------------------------------------------
#
# Where ``fluxinfra compile`` has made bytepart C, byte keys of any length are partitioned
# there: both sides of each swap written at once (nothing to restore), the swaps recorded in
# buffers kept per thread and traced back in C. A million keys partition about three times
# faster than with numpy (docs/matcher.md).

#: byte keys are partitioned by bytepart's kernel (on where it is compiled; tests turn it on
#: to run the kernel as Python)
TYPED: bool = bytepart.COMPILED
_TYPED_MOST = (1 << 31) - 1  # positions are recorded as 4-byte integers


class _TypedBytes:
    """Byte keys partitioned by :func:`bytepart.partition` in ``vals`` (the bytearray given),
    for _sorted_prefix_masked."""

    __slots__ = ("vals", "bufs", "used", "ops")
    _local = threading.local()

    def __init__(self, vals: bytearray) -> None:
        self.vals = vals
        local = self._local
        if getattr(local, "left", None) is None:
            local.left, local.right = array("i"), array("i")
            local.offl, local.offr = bytearray(bytepart.BLOCK), bytearray(bytepart.BLOCK)
        self.bufs = local
        self.used = 0  # swaps recorded so far in bufs.left / bufs.right
        self.ops = array("q")  # first, pick, offset, swaps of each partition, in order

    def getter(self):
        return self.vals.__getitem__

    def partition(self, key, first: int, last: int, ops: list) -> int:
        bufs, off = self.bufs, self.used
        room = off + (last - first) // 2 - len(bufs.left)
        if room > 0:  # (grown once per thread to what its rankings need, then reused)
            grow = bytes(4 * max(room, len(bufs.left)))
            bufs.left.frombytes(grow)
            bufs.right.frombytes(grow)
        cut, pick, m = bytepart.partition(self.vals, first, last, bufs.left, bufs.right, off,
                                          bufs.offl, bufs.offr)
        self.used = off + m
        self.ops.extend((first, pick, off, m))
        ops.append(())
        return cut

    def restore(self) -> None:
        """(Nothing to restore: the kernel wrote both sides of every swap.)"""

    def trace(self, ops: list, run: list[int]) -> list[int]:
        bufs, done = self.bufs, len(self.ops) // 4
        return [bytepart.trace(bufs.left, bufs.right, self.ops, done, p) for p in run]


# -- vectorized: the same partitions with numpy, when it is installed ---------------------------
#
# A top-level ranking under ``low``/``high`` holds every core of the machine (a million at
# 16,384 nodes); the partitions above, though their scans run at C speed, still list and swap
# the positions one Python object at a time. With numpy each partition is a few whole-array
# operations. The partitions, the order they run in and the positions traced back are the same
# as _sorted_prefix_masked's, so the answers are too (tests/unit/matcher/test_ranking.py runs
# every prefix both ways). numpy is optional (``pip install 'fluxinfra[fast]'``; the scheduler
# image and the dev install have it); it is imported when a list this long is first ranked, or
# when a Matcher that will rank one is made (Matcher.__init__).
# Byte keys go this way from far shorter lists (a 16,384-node machine's nodes under locality),
# numpy partitioning only their long parts: one partition of a few hundred keys costs numpy
# more in fixed overhead than the plain scans cost in all.

#: lists from this many keys on are ranked with numpy when it is importable
VECTOR_FROM = 32_768
#: byte keys (what low, high and locality rank by) from this many on: their parts of
#: PART_FROM keys or more are partitioned with numpy, shorter ones in plain Python (numpy's
#: fixed cost per call outweighs its speed there); measured crossovers:
#: docs/design/matcher-performance.md
BYTES_FROM = 2048
PART_FROM = 1024

_np_module: Any = None  # numpy once looked for; False: not installed (or turned off)


def _numpy():
    global _np_module
    if _np_module is None:
        try:
            import numpy
        except ImportError:
            numpy = False
        _np_module = numpy
    return _np_module or None


def vectorized(on: bool | None = None) -> bool:
    """Whether long rankings use numpy (``on``: turn it on or off, for comparisons and
    tests; on only if numpy imports). Returns the setting now."""
    global _np_module
    if on is not None:
        _np_module = None if on else False
    return _numpy() is not None


_INT64 = (-(1 << 63), (1 << 63) - 1)


def _fits_int64(keys) -> bool:
    return _INT64[0] <= min(keys) and max(keys) <= _INT64[1]


def _sorted_prefix_np(store, enough: Callable[[list[int]], bool]) -> list[int]:
    """_sorted_prefix_masked over a store that partitions with numpy (_NumpyKeys, or
    _MixedBytes for its long parts)."""
    return _sorted_prefix_masked(store, len(store.vals), enough)


class _NumpyKeys:
    """Keys in a numpy array, for _sorted_prefix_masked. Its partitions record positions
    relative to first + 1, the right ones ascending (numpy arrays)."""

    __slots__ = ("np", "vals", "kept")

    def __init__(self, np, vals) -> None:
        self.np, self.vals, self.kept = np, vals, _Kept(np, len(vals))

    def getter(self):
        return self.vals.item

    def partition(self, key, first: int, last: int, ops: list) -> int:
        return _partition_np(self.np, self.vals, first, last, ops, self.kept)

    def restore(self, first: int, pick: int, left, right, outgoing) -> None:
        self.vals[first + 1:][right[::-1]] = outgoing

    def trace(self, ops: list, run: list[int]) -> list[int]:
        return _trace_np(self.np, ops, run)


class _MixedBytes(_ByteKeys):
    """Byte keys partitioned with numpy while a part is long (``PART_FROM`` keys or more) and
    as _ByteKeys does once it is short, where numpy's fixed cost per call outweighs its speed.
    Both ways read and write one buffer (``wide``: _NumpyKeys over a view of the bytearray); a
    partition's record says which way made it (numpy arrays or lists of positions)."""

    __slots__ = ("wide",)

    def __init__(self, np, vals: bytearray) -> None:
        super().__init__(vals)
        self.wide = _NumpyKeys(np, np.frombuffer(self.vals, dtype=np.uint8))

    def partition(self, key, first: int, last: int, ops: list) -> int:
        if last - first >= PART_FROM:
            return self.wide.partition(key, first, last, ops)
        return _partition_masked(self, key, first, last, ops)

    def restore(self, first: int, pick: int, left, right, outgoing) -> None:
        way = super() if type(left) is list else self.wide
        way.restore(first, pick, left, right, outgoing)

    def trace(self, ops: list, run: list[int]) -> list[int]:
        """The numpy partitions traced as _NumpyKeys does, the others as _ByteKeys does,
        latest first."""
        end = len(ops)
        while end:
            numpy = type(ops[end - 1][2]) is not list
            start = end - 1
            while start and (type(ops[start - 1][2]) is not list) == numpy:
                start -= 1
            way = self.wide if numpy else _ByteKeys
            run = way.trace(ops[start:end], run)
            end = start
        return run


def _partition_np(np, vals, first: int, last: int, ops: list, kept: _Kept) -> int:
    """_partition_masked on a numpy array."""
    item = vals.item
    mid = first + (last - first) // 2
    three = {first + 1: item(first + 1), mid: item(mid), last - 1: item(last - 1)}
    pick = _median_of_three(three, first, last)
    p = three[pick]
    vals[pick] = item(first)
    vals[first] = p
    seg = vals[first + 1:last]
    # lo stops at each key >= p from the left, hi at each key <= p from the right: the
    # pairs (i-th such stop from the left, i-th from the right) swap while the first is
    # left of the second. Only the stops near where they meet are listed (see _near_cut);
    # positions are picked from a kept 0, 1, 2 ... by mask (a third of np.flatnonzero's
    # time)
    at = _positions(np, len(seg))
    ge_mask, le_mask = kept.masks(len(seg))
    np.greater_equal(seg, p, out=ge_mask)
    np.less_equal(seg, p, out=le_mask)
    count = np.count_nonzero
    ng_all, nl_all = count(ge_mask), count(le_mask)
    a, b = _near_cut(count, ge_mask, le_mask, nl_all) if len(seg) > _NEAR_FROM else (0, len(seg))
    ge = at[:b][ge_mask[:b]]  # the first stops from the left
    le = at[a:][le_mask[a:]]  # the first from the right (ascending: the i-th is le[-1 - i])
    m = _swaps(ge, le)
    ng, nl = len(ge), len(le)
    k = min(ng, nl)
    if (m == k and not (k == ng == ng_all or k == nl == nl_all)) or m == ng < ng_all:
        # (never seen: _near_cut's window holds the meeting point) every stop, as is
        ge, le = at[ge_mask], at[le_mask]
        m = _swaps(ge, le)
        ng, nl = len(ge), len(le)
    ge_at, le_at = ge.item, le.item
    if m == 0:
        cut = ge_at(0)
    else:
        cut = le_at(nl - m)
        if m < ng and ge_at(m) < cut:
            cut = ge_at(m)
    left, right = kept.keep(ge[:m]), kept.keep(le[nl - m:])
    outgoing = seg[left]
    seg[left] = seg[right[::-1]]
    ops.append((first, pick, left, right, outgoing))
    return first + 1 + cut


def _swaps(ge, le) -> int:
    """How many pairs (ge[i], le[-1 - i]) have ge[i] < le[-1 - i] (true up to some i, then
    false), over the pairs both lists hold."""
    ge_at, le_at = ge.item, le.item
    nl = len(le)
    lo, hi = 0, min(len(ge), nl)
    while lo < hi:
        m = (lo + hi) // 2
        if ge_at(m) < le_at(nl - 1 - m):
            lo = m + 1
        else:
            hi = m
    return lo


#: _near_cut narrows to this many positions, and lists this many more either side; it is
#: asked only for longer ranges (on shorter ones the halving costs more than it saves)
_NEAR = 64
_NEAR_FROM = 1 << 16


def _near_cut(count, ge_mask, le_mask, nl_all: int) -> tuple[int, int]:
    """Positions [a, b) around where the partition's two scans meet: (stops >= p left of
    x) - (stops <= p from x on) rises by one or two at every x (every key is >= p or <= p)
    and is 0 or -1 at the cut, so halving the range on its sign finds the cut. Counts are
    taken over the new half only: the whole costs two passes over the masks, at C speed."""
    lo, hi = 0, len(ge_mask)
    g_lo = l_lo = 0  # stops of each kind left of lo
    while hi - lo > _NEAR:
        mid = (lo + hi) // 2
        g = g_lo + count(ge_mask[lo:mid])
        l_ = l_lo + count(le_mask[lo:mid])
        if g - (nl_all - l_) >= 0:
            hi = mid
        else:
            lo, g_lo, l_lo = mid, g, l_
    return max(lo - _NEAR, 0), min(hi + _NEAR, len(ge_mask))


class _Kept:
    """Where one ranking keeps its partitions' swap positions and computes its masks: buffers
    per thread, reused by the next ranking, so they are not new memory each time (the
    kernel's first touch of new pages was half the time of a million-key ranking)."""

    __slots__ = ("buf", "off", "ge", "le")
    _local = threading.local()

    def __init__(self, np, n: int) -> None:
        local = self._local
        if getattr(local, "ge", None) is None or len(local.ge) < n:
            local.buf = np.empty(2 * n + 64, dtype=np.intp)
            local.ge, local.le = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
        self.buf, self.off, self.ge, self.le = local.buf, 0, local.ge, local.le

    def masks(self, n: int):
        """Two boolean arrays of ``n`` to compute into (the same for every partition)."""
        return self.ge[:n], self.le[:n]

    def keep(self, positions):
        """``positions`` as numpy's index type (a narrower one is converted on every
        fancy-indexed read and write: 4x their time), in the buffer while there is room."""
        off, m = self.off, len(positions)
        if off + m > len(self.buf):
            return positions.astype(self.buf.dtype)
        into = self.buf[off:off + m]
        into[:] = positions
        self.off = off + m
        return into


_POSITIONS: list = [None]


def _positions(np, n: int):
    """0, 1, ... n - 1 as 4-byte integers (one array kept, grown as needed; only read)."""
    at = _POSITIONS[0]
    if at is None or len(at) < n:
        at = _POSITIONS[0] = np.arange(max(n, 1 << 16), dtype=np.int32)
    return at[:n]


def _trace_np(np, ops: list, positions: list[int]) -> list[int]:
    """_trace for several positions at once."""
    ps = np.array(positions, dtype=np.intp)  # (as the positions kept: no conversions)
    for first, pick, left, right, _ in reversed(ops):
        m = len(left)
        if m:
            rel = ps - (first + 1)
            i = np.minimum(np.searchsorted(left, rel), m - 1)
            in_left = left[i] == rel
            j = np.minimum(np.searchsorted(right, rel), m - 1)
            in_right = right[j] == rel
            # left[i] took the key of right[m - 1 - i], and the other way round
            ps = np.where(in_left, right[m - 1 - i] + (first + 1),
                          np.where(in_right, left[m - 1 - j] + (first + 1), ps))
        is_first, is_pick = ps == first, ps == pick
        ps[is_first] = pick
        ps[is_pick] = first
    return ps.tolist()
