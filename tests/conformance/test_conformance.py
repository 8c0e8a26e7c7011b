"""Replay every Fluxion resource-query case through ``fluxinfra query``.

A case must be byte-identical to Fluxion's expected output unless it is listed in
``known_differences.tsv`` (case, the level it reaches — ``normalised`` or ``differs`` — and why).
A case doing worse than listed fails (regression); one doing better fails too, asking for the
list to be updated, so the list always tells the truth.
"""

from __future__ import annotations

import pytest
from replay import RESULTS, TESTDATA, compare, load_cases, load_known

if not (TESTDATA / "manifest.tsv").exists():
    pytest.skip(f"Fluxion test data not found at {TESTDATA}", allow_module_level=True)

CASES = load_cases()
KNOWN = load_known()
_RANK = {"identical": 2, "normalised": 1, "differs": 0}


@pytest.mark.parametrize("case", CASES, ids=[f"{c.index:03d}-{c.name}" for c in CASES])
def test_replay(case):
    identical, normalised, why = compare(case)
    status = "identical" if identical else ("normalised" if normalised else "differs")
    RESULTS[case.name + f"#{case.index}"] = status
    listed = KNOWN.get(case.name)
    want, reason = ("identical", "") if listed is None else listed
    if _RANK[status] < _RANK[want]:
        pytest.fail(f"regression: {case.name} is {status}, expected {want}: {why}")
    if _RANK[status] > _RANK[want]:
        pytest.fail(f"{case.name} is now {status} (listed as {want}: {reason}); "
                    "update tests/conformance/known_differences.tsv")
    if status != "identical":
        pytest.xfail(f"known difference ({status}): {reason}")
