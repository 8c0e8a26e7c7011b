"""Fluxion's own test cases with every long ranking done by numpy, and every byte ranking by
bytepart's kernel: the same bytes out.

The matcher ranks candidate lists of ``prefixsort.VECTOR_FROM`` keys or more with numpy (a
16,384-node machine's million cores under ``low``/``high``; byte keys from ``BYTES_FROM``,
their parts of ``PART_FROM`` keys or more); Fluxion's test graphs are far smaller, so here
every list past std::sort's insertion-sort size goes that way, with every part partitioned by
numpy and again with parts under 24 keys partitioned in plain Python. Each case runs
under its own policy and the three ``test_full_walk`` rotates to it; where the vectorized
ranking was reached, the ``-t`` output must be byte-identical to the plain Python ranking's
(which ``test_conformance`` and ``test_full_walk`` hold to Fluxion's). Then again with byte
keys partitioned by ``bytepart`` (``prefixsort.TYPED``: compiled where ``fluxinfra compile`` made
it, as Python in ``make test``'s plain pass), every length past std::sort's insertion-sort
size.
"""

from __future__ import annotations

import dataclasses

import pytest
from replay import TESTDATA, load_cases, run_case
from test_full_walk import policies_for

from fluxinfra.matcher import bytepart, prefixsort, stdsort

if not (TESTDATA / "manifest.tsv").exists():
    pytest.skip(f"Fluxion test data not found at {TESTDATA}", allow_module_level=True)
if not prefixsort.vectorized():
    pytest.skip("numpy is not installed: the vectorized ranking is not available "
                "(pip install 'fluxinfra[fast]')", allow_module_level=True)

CASES = load_cases()
REACHED: list[str] = []
MIXED: list[str] = []
TYPED: list[str] = []


@pytest.mark.parametrize("case", CASES, ids=[f"{c.index:03d}-{c.name}" for c in CASES])
def test_vectorized_ranking_writes_what_the_python_ranking_writes(case, monkeypatch):
    used = []
    real = prefixsort._sorted_prefix_np
    monkeypatch.setattr(prefixsort, "_sorted_prefix_np", lambda *a: used.append(1) or real(*a))
    plain = []
    real_masked = prefixsort._partition_masked
    monkeypatch.setattr(prefixsort, "_partition_masked",
                        lambda *a: plain.append(1) or real_masked(*a))
    typed = []
    monkeypatch.setattr(bytepart, "partition",
                        lambda *a, real=bytepart.partition: typed.append(1) or real(*a))
    for policy in [case.policy, *policies_for(case.index)]:
        other = dataclasses.replace(case, policy=policy)

        def ranked(typed: bool, long_from: int, other=other) -> str:
            """The case's output with bytepart's kernel on or off, and numpy ranking lists
            from ``long_from`` keys on (1 << 62: never)."""
            monkeypatch.setattr(prefixsort, "TYPED", typed)
            monkeypatch.setattr(prefixsort, "VECTOR_FROM", long_from)
            monkeypatch.setattr(prefixsort, "BYTES_FROM", long_from)
            return run_case(other)

        want = None
        # byte keys: every part partitioned with numpy, then parts under 24 keys in Python
        for part_from in (0, 24):
            monkeypatch.setattr(prefixsort, "PART_FROM", part_from)
            before, plain_before = len(used), len(plain)
            vectorized = ranked(False, stdsort._THRESHOLD + 1)
            if len(used) == before:
                break  # no list that long: the plain Python ranking ran, nothing to compare
            if part_from == 0:
                REACHED.append(f"{case.name}/{policy}")
            elif len(plain) > plain_before:
                MIXED.append(f"{case.name}/{policy}")
            if want is None:
                want = ranked(False, 1 << 62)
            assert vectorized == want, f"{case.name} under {policy}, PART_FROM {part_from}"
        # byte keys of every length partitioned by bytepart (numpy not used)
        before = len(typed)
        by_kernel = ranked(True, 1 << 62)
        if len(typed) > before:
            TYPED.append(f"{case.name}/{policy}")
            if want is None:
                want = ranked(False, 1 << 62)
            assert by_kernel == want, f"{case.name} under {policy}, bytepart's kernel"


def test_the_vectorized_ranking_was_reached() -> None:
    """(Runs after the cases.) Enough cases rank long lists for the comparison to mean
    something."""
    assert len(REACHED) >= 50, REACHED
    assert len(MIXED) >= 20, MIXED
    assert len(TYPED) >= 50, TYPED
