"""``fluxinfra query``'s exit status before its session starts, kind by kind of bad input.

The table (``live.STARTS``) holds resource-query v0.54.0's status for each; ``test_live.py``
checks it against the real binary where one is at hand. Here, with or without one: fluxinfra
gives the same status, except where resource-query aborts or crashes (there: one line, 1), and
never a traceback.
"""

from __future__ import annotations

import pytest
from live import STARTS, our_start_status
from replay import TESTDATA

if not (TESTDATA / "data" / "resource").exists():
    pytest.skip(f"Fluxion test data not found at {TESTDATA}", allow_module_level=True)


@pytest.mark.parametrize("start", STARTS, ids=[s.name for s in STARTS])
def test_exit_status_before_the_session(start):
    status, err = our_start_status(start)
    want = start.real if start.ours is None else start.ours
    assert status == want, err
    assert "Traceback" not in err
    if status == 1 and start.argv[-2:] != ("-h",):
        assert err.strip(), "a refusal says why"
    if start.argv[-2:] == ("-r", "3000000"):
        assert err == "WARN: out of range specified for --reserve-vtx-vec: 3000000\n"
