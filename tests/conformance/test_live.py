"""Every Fluxion test case under every named policy, against a real resource-query.

Runs only where a real Fluxion ``resource-query`` exists (``$FLUXINFRA_RESOURCE_QUERY`` or on
``PATH``; CI has none). Each (policy, case) must be byte-identical, with the same exit status,
unless it is listed in ``known_live_differences.tsv``; doing better than listed fails too, so
the list stays true. Each kind of bad command line (``live.STARTS``) must give the exit status
the table says resource-query gives, and fluxinfra the same (or, where resource-query aborts,
the 1 the table lists).
"""

from __future__ import annotations

import pytest
from live import (
    POLICIES,
    STARTS,
    compare_live,
    find_resource_query,
    load_known_live,
    our_start_status,
    real_start_status,
)
from replay import TESTDATA, load_cases, load_extra_cases

BINARY = find_resource_query()
if BINARY is None:
    pytest.skip("no real resource-query (set FLUXINFRA_RESOURCE_QUERY=/path/to/resource-query "
                "to replay every case under every policy against Fluxion)",
                allow_module_level=True)
if not (TESTDATA / "manifest.tsv").exists():
    pytest.skip(f"Fluxion test data not found at {TESTDATA}", allow_module_level=True)

CASES = load_cases() + load_extra_cases()
KNOWN = load_known_live()
_RANK = {"identical": 2, "normalised": 1, "differs": 0}


@pytest.mark.slow  # 387 cases through both programs: minutes per policy
@pytest.mark.parametrize("policy", POLICIES)
def test_live_policy(policy):
    problems = []
    for case in CASES:
        status, why = compare_live(BINARY, case, policy)
        want, reason = KNOWN.get((policy, case.name), ("identical", ""))
        if _RANK[status] < _RANK[want]:
            problems.append(f"regression: {case.name} is {status}, expected {want}: {why}")
        elif _RANK[status] > _RANK[want]:
            problems.append(f"{case.name} is now {status} (listed as {want}); update "
                            "tests/conformance/known_live_differences.tsv")
    assert not problems, f"{policy}: " + "\n".join(problems)


@pytest.mark.parametrize("start", STARTS, ids=[s.name for s in STARTS])
def test_live_exit_status_before_the_session(start):
    real = real_start_status(BINARY, start)
    assert real == start.real, f"resource-query now exits {real}: update live.STARTS"
    ours, err = our_start_status(start)
    assert ours == (real if start.ours is None else start.ours), err
