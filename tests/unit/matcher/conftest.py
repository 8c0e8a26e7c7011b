"""Fixtures of the matcher tests; helpers live in ``matcher_testlib`` (re-exported here)."""

from __future__ import annotations

import pytest
from matcher_testlib import TESTDATA, build_cluster, check_invariants, counts_met

from fluxinfra.matcher import ResourceGraph

__all__ = ["TESTDATA", "build_cluster", "check_invariants", "counts_met"]


@pytest.fixture(scope="module")
def cluster() -> ResourceGraph:
    return build_cluster()
