"""bytepart: libstdc++'s partition of byte keys, found a block at a time, and the trace back.

Each partition must be the branching loop's (``std::__unguarded_partition_pivot``, written
out plainly here): the same cut, the same pivot, the same keys where they end up and the same
swaps in the same order; a trace through a chain of partitions must give every position's
original index. These run on whatever form of the module this process loaded: compiled when
``fluxinfra compile`` made it (the full suite), Python otherwise (``make test``'s plain pass);
the ranking tests (test_ranking.py) check whole prefixes against ``introsort``.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

from fluxinfra import compiled
from fluxinfra.matcher import bytepart, stdsort


def branching_partition(v: bytearray, first: int, last: int) -> tuple[int, int, list]:
    """The partition as libstdc++ writes it: (cut, pick, [(left, right) of each swap]); the
    pivot by stdsort's median of three (the one the other rankings use)."""
    pick = stdsort._median_of_three(v, first, last)
    v[first], v[pick] = v[pick], v[first]
    p = v[first]
    lo, hi, swaps = first + 1, last, []
    while True:
        while v[lo] < p:
            lo += 1
        hi -= 1
        while p < v[hi]:
            hi -= 1
        if not lo < hi:
            return lo, pick, swaps
        v[lo], v[hi] = v[hi], v[lo]
        swaps.append((lo, hi))
        lo += 1


def keys_of(shape: str, n: int, rng: random.Random) -> bytearray:
    if shape == "equal":
        return bytearray([7] * n)
    if shape == "two":
        return bytearray(rng.choice([3, 4]) for _ in range(n))
    if shape == "cores":  # a node's core ids in order, some taken (low's and high's keys)
        row = [c for c in range(64) if rng.random() > 0.2]
        return bytearray((row * (n // len(row) + 1))[:n])
    if shape == "ascending":
        return bytearray(sorted(rng.randrange(256) for _ in range(n)))
    if shape == "descending":
        return bytearray(sorted((rng.randrange(256) for _ in range(n)), reverse=True))
    return bytearray(rng.randrange(256) for _ in range(n))


def buffers(n: int):
    return (array("i", bytes(4 * n)), array("i", bytes(4 * n)),
            bytearray(bytepart.BLOCK), bytearray(bytepart.BLOCK))


#: around both kernels' block boundaries (bytepart.py's typed loop scans BLOCK keys a side,
#: bytepart.pxd's AVX2 kernel 64)
SIZES = [17, 18, 100, 129, 130, 131, 2 * bytepart.BLOCK, 2 * bytepart.BLOCK + 1,
         2 * bytepart.BLOCK + 2, 1000, 5000]
SHAPES = ["equal", "two", "cores", "ascending", "descending", "random"]
#: the AVX2 kernel exists only compiled, on a processor that has AVX2
SIMD_HERE = bytepart.SIMD


@pytest.fixture(params=["simd", "typed"], autouse=True)
def kernel(request, monkeypatch) -> str:
    """Every test here runs with the AVX2 kernel (where this process has it) and with the
    typed loop (compiled or as Python)."""
    if request.param == "simd" and not SIMD_HERE:
        pytest.skip("no AVX2 kernel in this process (not compiled, or no AVX2): the typed "
                    "loop's runs cover bytepart.partition")
    monkeypatch.setattr(bytepart, "SIMD", request.param == "simd")
    return request.param


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("n", SIZES)
def test_a_partition_is_the_branching_loops(shape: str, n: int) -> None:
    rng = random.Random(f"{shape}/{n}")
    keys = keys_of(shape, n, rng)[:n]
    for first, last in ((0, n), (3, n - 1) if n > 21 else (0, n)):
        v, want = bytearray(keys), bytearray(keys)
        left, right, offl, offr = buffers(n)
        cut, pick, m = bytepart.partition(v, first, last, left, right, 5, offl, offr)
        want_cut, want_pick, want_swaps = branching_partition(want, first, last)
        assert (cut, pick) == (want_cut, want_pick)
        assert v == want
        assert list(zip(left[5:5 + m], right[5:5 + m], strict=True)) == want_swaps
        assert m <= (last - first) // 2


@pytest.mark.parametrize("shape", SHAPES)
def test_trace_gives_each_positions_original_index_after_a_chain(shape: str) -> None:
    """Partitions of the left part after the left part, as a ranking's first run is made,
    then every position of the whole array traced back: a permutation that reads the
    original keys where they are now."""
    n = 3000
    keys = keys_of(shape, n, random.Random(shape))[:n]
    v = bytearray(keys)
    left, right, offl, offr = buffers(n)
    ops, used, last = array("q"), 0, n
    while last > 16:
        cut, pick, m = bytepart.partition(v, 0, last, left, right, used, offl, offr)
        ops.extend((0, pick, used, m))
        used += m
        last = cut
    back = [bytepart.trace(left, right, ops, len(ops) // 4, p) for p in range(n)]
    assert sorted(back) == list(range(n))
    assert [keys[i] for i in back] == list(v)


def test_it_is_compiled_where_fluxinfra_compile_made_it() -> None:
    """COMPILED says what this process loaded (so prefixsort uses the kernel only as C)."""
    assert compiled.loaded()["fluxinfra.matcher.bytepart"] is bytepart.COMPILED


def test_the_avx2_kernel_is_on_wherever_it_can_be() -> None:
    """Compiled on a processor with AVX2 and BMI1 (as /proc/cpuinfo lists them), partitions
    go through bytepart.pxd's kernel; elsewhere the typed loop runs and SIMD says so."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace")
        flags = next((line.split(":", 1)[1].split() for line in info.splitlines()
                      if line.startswith("flags")), [])
    except OSError:
        pytest.skip("no /proc/cpuinfo to read this processor's flags from")
    can = "avx2" in flags and "bmi1" in flags and os.uname().machine == "x86_64"
    assert SIMD_HERE is (bytepart.COMPILED and can)


def test_without_cython_installed_it_runs_as_python() -> None:
    """The scheduler image has no Cython: the module imports its stand-in for Cython's
    names, runs as Python, and prefixsort leaves it alone."""
    code = ("import sys; sys.modules['cython'] = None\n"
            "from fluxinfra.matcher import bytepart, prefixsort\n"
            "from array import array\n"
            "v = bytearray(b'\\x05\\x01' * 20)\n"
            "cut = bytepart.partition(v, 0, 40, array('i', bytes(80)), array('i', bytes(80)),"
            " 0, bytearray(8), bytearray(8))[0]\n"
            "print(bytepart.COMPILED, prefixsort.TYPED, bytepart.cython.__name__, cut)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "FLUXINFRA_PURE_PYTHON": "1"})
    cut = branching_partition(bytearray(b"\x05\x01" * 20), 0, 40)[0]
    assert out.stdout.split() == ["False", "False", "fluxinfra.matcher._cython_shadow",
                                  str(cut)]
