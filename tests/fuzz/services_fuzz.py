"""What the service, webhook and scheduler fuzz tests share: the budget and the inputs.

The budget reads the same knobs as the rest of the fuzz suite (``tests/fuzz/fuzzlib.py``):

``FLUXINFRA_FUZZ_SECONDS``   seconds per test (default 4)
``FLUXINFRA_FUZZ_EXAMPLES``  instead, exactly this many inputs per test
``FLUXINFRA_FUZZ_DEADLINE``  seconds one input may take before it fails as a hang (default 10)

Inputs are broken Kubernetes objects and documents: a valid object with a few of its fields
(at any depth) replaced by values of another type, edge numbers, quantities no server could
hold, or deleted; or any JSON at all.
"""

from __future__ import annotations

import functools
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["EDGE_INTS", "QUANTITIES", "STATS", "broken", "fuzz", "json_values", "scalars"]

SECONDS = float(os.environ.get("FLUXINFRA_FUZZ_SECONDS") or 4)
EXAMPLES = int(os.environ.get("FLUXINFRA_FUZZ_EXAMPLES") or 0)
DEADLINE = float(os.environ.get("FLUXINFRA_FUZZ_DEADLINE") or 10)
ROUND = 25
#: test name -> inputs tried (the minimal budget's count; the suite's own is fuzzlib.STATS)
STATS: dict[str, int] = {}


class Hang(BaseException):
    """An input ran past the deadline (a BaseException: hypothesis passes it on unshrunk)."""


def _minimal_fuzz(test: Callable[..., Any]) -> Callable[..., Any]:
    """Rounds of the hypothesis test ``test`` until its budget is spent, each input under a
    hard deadline (SIGALRM)."""
    inner = test.hypothesis.inner_test

    def bounded_input(*args: Any, **kwargs: Any) -> Any:
        STATS[test.__name__] = STATS.get(test.__name__, 0) + 1

        def alarm(signum: int, frame: Any) -> None:
            raise Hang(f"{test.__name__}: an input took more than {DEADLINE:g} s")

        previous = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, DEADLINE)
        try:
            return inner(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    test.hypothesis.inner_test = bounded_input
    bounded = settings(deadline=None, max_examples=EXAMPLES or ROUND, print_blob=True,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                              HealthCheck.filter_too_much,
                                              HealthCheck.large_base_example])(test)

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        start = time.monotonic()
        while True:
            bounded(*args, **kwargs)
            if EXAMPLES or time.monotonic() - start >= SECONDS:
                break

    return run


#: ``@fuzz`` above hypothesis' ``@given``: these tests keep their ``@given``/``@example`` stacks,
#: so they take this budget rather than ``fuzzlib.fuzz`` (which replaces ``@given``); both read
#: the same environment variables.
fuzz = _minimal_fuzz


#: integers where readers break: around 0, int32, uint32, int64, uint64 and past them
EDGE_INTS = [0, 1, -1, 2, 2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**62 - 1, 2**62, 2**63 - 1,
             2**63, 2**64, -(2**63), 10**20, 10**100]
#: quantities a reader must refuse or hold: suffixes, exponents, huge, negative, not numbers
QUANTITIES = ["1", "0", "500m", "16Gi", "1e3", "1e64", "1e65", "1e5000", "9" * 5000,
              "9" * 101, "-1", "1Ei", "16Ei", "0.000000001", "1.5.5", "", " 4 ", "4 cores",
              "NaN", "Infinity", 4, 0, -4, 2**63, 10**30, 1.5, 1e308, float("inf"),
              float("nan"), True, None, [], {}]


def scalars() -> st.SearchStrategy:
    """Any JSON scalar, edge values often."""
    return st.one_of(st.none(), st.booleans(), st.sampled_from(EDGE_INTS),
                     st.integers(-3, 70), st.floats(), st.text(max_size=12),
                     st.sampled_from(QUANTITIES),
                     st.sampled_from(["node[0-99999999]", "0-99999999999", "up", "Pod", "Job",
                                      "CREATE", "fluxion", "a\x00b", "é", "/cluster0"]))


def json_values(max_leaves: int = 8) -> st.SearchStrategy:
    """Any JSON-like value: scalars, lists and string-keyed objects of them."""
    return st.recursive(scalars(), lambda kids: st.lists(kids, max_size=3)
                        | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                        max_leaves=max_leaves)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for key, value in obj.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _paths(value, (*prefix, i))
    return out


def _replace(obj: Any, path: tuple, value: Any, delete: bool) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        out = dict(obj)
        if delete and not rest:
            out.pop(head, None)
        else:
            out[head] = _replace(obj[head], rest, value, delete)
        return out
    out = list(obj)
    if delete and not rest:
        del out[head]
    else:
        out[head] = _replace(obj[head], rest, value, delete)
    return out


def broken(seeds: list[Any], edits: int = 3) -> st.SearchStrategy:
    """One of ``seeds`` (valid objects) with up to ``edits`` fields, at any depth, replaced
    by any JSON value or deleted; the seeds themselves come up too."""
    @st.composite
    def build(draw: Callable[..., Any]) -> Any:
        obj = draw(st.sampled_from(seeds))
        for _ in range(draw(st.integers(0, edits))):
            path = draw(st.sampled_from(_paths(obj)))
            delete = bool(path) and draw(st.booleans()) and draw(st.booleans())
            value = None if delete else draw(json_values())
            obj = _replace(obj, path, value, delete)
        return obj
    return build()
