# cython: boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""libstdc++'s quicksort partition of byte keys, written to compile to C.

``stdsort`` replays ``std::sort`` to break ties as Fluxion does. Under ``low`` and ``high`` at
the top of a large machine the keys are a byte per core (a million at 16,384 nodes) and one
ranking partitions a few million of them: in Python or numpy that is most of a match. This
module is the partition and the trace back of positions, typed in Cython's pure Python mode:
``fluxinfra compile`` makes it C (the ``# cython:`` line above turns off index checks: every
index here stays inside the array it reads, by libstdc++'s own guards). Uncompiled it is the
same algorithm in plain Python, right but slow; ``prefixsort`` uses it only compiled
(:data:`COMPILED`), and the tests run it both ways against ``stdsort.introsort``.

One partition is ``std::__unguarded_partition_pivot``: the median of three moved to ``first``,
then the scan from the left stops at each key >= the pivot, the scan from the right at each
key <= it, and the two stops swap while the left one is left of the right one. Which keys
stop either scan does not depend on the swaps (a scan reads each position once, before any
swap reaches it), so the stops are found a block at a time without a branch per key and
paired afterwards (BlockQuicksort, Edelkamp and Weiss 2016): the same swaps, in the same
order, as the branching loop, which finishes the last two blocks. Every swap is recorded:
``left`` (ascending) and ``right`` (descending) positions, pair by pair, which :func:`trace`
walks back to find where a position's key came from.

>>> from array import array
>>> keys = bytearray([3, 1, 3, 2, 0, 5, 4, 3] * 3)
>>> left, right = array("i", bytes(4 * 24)), array("i", bytes(4 * 24))
>>> cut, pick, swaps = partition(keys, 0, 24, left, right, 0, bytearray(BLOCK),
...                              bytearray(BLOCK))
>>> all(k <= keys[0] for k in keys[:cut]) and all(k >= keys[0] for k in keys[cut:])
True
"""

from __future__ import annotations

try:
    import cython
except ImportError:  # no Cython here: the module runs as the plain Python it is
    from fluxinfra.matcher import _cython_shadow as cython

__all__ = ["COMPILED", "SIMD", "BLOCK", "partition", "trace"]

#: whether this module is running compiled (C) rather than as Python
COMPILED: bool = cython.compiled

#: whether :func:`partition` finds its stops with AVX2 (bytepart.pxd): compiled, on a processor
#: that has it. Tests turn it off to run the typed loop below on the same processor.
SIMD: bool = COMPILED and bool(fluxinfra_bp_simd())  # noqa: F821 (bytepart.pxd, compiled only)

#: keys scanned per block (the block buffers ``offl``/``offr`` are this long; offsets fit
#: in a byte)
BLOCK = 128

@cython.locals(v=cython.uchar[::1], left=cython.int[::1], right=cython.int[::1],
               offl=cython.uchar[::1], offr=cython.uchar[::1],
               first=cython.Py_ssize_t, last=cython.Py_ssize_t, off=cython.Py_ssize_t,
               lo=cython.Py_ssize_t, hi=cython.Py_ssize_t, mid=cython.Py_ssize_t,
               pick=cython.Py_ssize_t, m=cython.Py_ssize_t, j=cython.Py_ssize_t,
               k=cython.Py_ssize_t, nl=cython.Py_ssize_t, nr=cython.Py_ssize_t,
               sl=cython.Py_ssize_t, sr=cython.Py_ssize_t, num=cython.Py_ssize_t,
               a=cython.Py_ssize_t, b=cython.Py_ssize_t, block=cython.Py_ssize_t,
               p=cython.uchar, t=cython.uchar, vx=cython.uchar, vy=cython.uchar,
               vz=cython.uchar)
def partition(v, first, last, left, right, off, offl, offr):
    """Partition ``v[first:last]`` (more than 16 keys) as libstdc++ does, in place; record
    its swaps in ``left[off:]`` and ``right[off:]`` (room for ``(last - first) // 2`` each).
    Returns (cut, the position the pivot was taken from, swaps)."""
    block = len(offl)
    # std::__move_median_to_first(first, first + 1, mid, last - 1)
    mid = first + (last - first) // 2
    vx = v[first + 1]
    vy = v[mid]
    vz = v[last - 1]
    if vx < vy:
        if vy < vz:
            pick = mid
        elif vx < vz:
            pick = last - 1
        else:
            pick = first + 1
    elif vx < vz:
        pick = first + 1
    elif vy < vz:
        pick = last - 1
    else:
        pick = mid
    t = v[first]
    v[first] = v[pick]
    v[pick] = t
    p = v[first]
    m = off
    # blocks: [lo, lo + block) from the left, (hi - block, hi] from the right, never
    # overlapping; a block's stops are listed (offsets) and used up pair by pair before the
    # next block on that side is scanned
    lo = first + 1
    hi = last - 1
    nl = nr = sl = sr = 0
    if cython.compiled and SIMD:  # the same blocks, their stops found 32 keys at a time
        m = fluxinfra_bp_blocks_avx2(  # noqa: F821 (declared in bytepart.pxd)
            cython.address(v[0]), p, cython.address(lo), cython.address(hi),
            cython.address(left[0]), cython.address(right[0]), m)
    while hi - lo + 1 > 2 * block:
        if nl == 0:
            sl = 0
            for j in range(block):
                offl[nl] = j
                nl += v[lo + j] >= p
        if nr == 0:
            sr = 0
            for j in range(block):
                offr[nr] = j
                nr += v[hi - j] <= p
        num = nl if nl < nr else nr
        for k in range(num):
            a = lo + offl[sl + k]
            b = hi - offr[sr + k]
            t = v[a]
            v[a] = v[b]
            v[b] = t
            left[m] = a
            right[m] = b
            m += 1
        nl -= num
        nr -= num
        sl += num
        sr += num
        if nl == 0:
            lo += block
        if nr == 0:
            hi -= block
    # the branching loop from where the scans stand (a listed stop not yet used is where
    # that scan stopped)
    if nl:
        lo += offl[sl]
    if nr:
        hi -= offr[sr]
    hi += 1
    while True:
        while v[lo] < p:
            lo += 1
        hi -= 1
        while p < v[hi]:
            hi -= 1
        if not lo < hi:
            break
        t = v[lo]
        v[lo] = v[hi]
        v[hi] = t
        left[m] = lo
        right[m] = hi
        m += 1
        lo += 1
    return lo, pick, m - off


@cython.locals(left=cython.int[::1], right=cython.int[::1], ops=cython.longlong[::1],
               nops=cython.Py_ssize_t, p=cython.Py_ssize_t, k=cython.Py_ssize_t,
               first=cython.Py_ssize_t, pick=cython.Py_ssize_t, off=cython.Py_ssize_t,
               m=cython.Py_ssize_t, lo=cython.Py_ssize_t, hi=cython.Py_ssize_t,
               md=cython.Py_ssize_t)
def trace(left, right, ops, nops, p):
    """Where the key now at position ``p`` stood before the partitions ``ops[:4 * nops]``
    (each ``first, pick, off, swaps``, in the order they ran) moved it."""
    k = nops
    while k > 0:
        k -= 1
        first = ops[4 * k]
        pick = ops[4 * k + 1]
        off = ops[4 * k + 2]
        m = ops[4 * k + 3]
        if m and left[off] <= p <= right[off]:
            lo = off
            hi = off + m
            while lo < hi:  # left[off:off + m] ascends
                md = (lo + hi) // 2
                if left[md] < p:
                    lo = md + 1
                else:
                    hi = md
            if lo < off + m and left[lo] == p:
                p = right[lo]
            else:
                lo = off
                hi = off + m
                while lo < hi:  # right[off:off + m] descends
                    md = (lo + hi) // 2
                    if right[md] > p:
                        lo = md + 1
                    else:
                        hi = md
                if lo < off + m and right[lo] == p:
                    p = left[lo]
        if p == first:
            p = pick
        elif p == pick:
            p = first
    return p
