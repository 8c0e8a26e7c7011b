"""Fluxion's own test cases under other policies: the default walk writes what the full walk
writes.

``fluxinfra query`` matches with the default walk (policy-ordered, guarded, with the commit's
shortcuts); ``Matcher(..., exact=True)`` is Fluxion's full walk, step by step. Conformance
replays each case under the one policy its test script uses; here every case also runs under
three more named policies (rotating with the case, so each policy meets about a third of the
cases: power, multi-tier storage and flexible graphs included) through both walks, and their
``-t`` outputs must be byte-identical. Where a real resource-query is at hand, ``test_live.py``
compares every case under every policy with Fluxion itself.
"""

from __future__ import annotations

import dataclasses

import pytest
from live import POLICIES
from replay import TESTDATA, load_cases, run_case

if not (TESTDATA / "manifest.tsv").exists():
    pytest.skip(f"Fluxion test data not found at {TESTDATA}", allow_module_level=True)

CASES = load_cases()
PER_CASE = 3


def policies_for(index: int) -> list[str]:
    return [POLICIES[(index * PER_CASE + i) % len(POLICIES)] for i in range(PER_CASE)]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.index:03d}-{c.name}" for c in CASES])
def test_default_walk_writes_what_the_full_walk_writes(case, monkeypatch):
    for policy in policies_for(case.index):
        other = dataclasses.replace(case, policy=policy)
        ours = run_case(other)
        monkeypatch.setattr("replay.FULL_WALK", True)
        full = run_case(other)
        monkeypatch.setattr("replay.FULL_WALK", False)
        assert ours == full, f"{case.name} under {policy}"
