"""The whole suite: refuse to test old code.

Python's import loads a compiled module built in place beside its ``.py`` whatever the ``.py``
says now; a build older than an edit (or a partial one) would have the tests pass or fail on
code that is not the code in the checkout. So a run stops at once, naming the fix, unless
every compiled module matches its source (or none is compiled, or FLUXINFRA_PURE_PYTHON asks
for plain Python).
"""

from __future__ import annotations

import pytest

from fluxinfra import compiled


def pytest_configure(config):
    states = compiled.status()
    stale = [name for name, state in states.items() if state == "stale"]
    values = set(states.values())
    if stale:
        raise pytest.UsageError(
            f"the compiled forms of {', '.join(stale)} were built from older sources (an import "
            "would run that old code): run `make setup` (or .venv/bin/fluxinfra compile) to "
            "rebuild them in place, or set FLUXINFRA_PURE_PYTHON=1 to test plain Python")
    if {"compiled", "missing"} <= values:
        missing = [name for name, state in states.items() if state == "missing"]
        raise pytest.UsageError(
            f"only part of the matcher is compiled in place ({', '.join(missing)} missing): "
            "run `make setup` (or .venv/bin/fluxinfra compile) to build them all, or set "
            "FLUXINFRA_PURE_PYTHON=1 to test plain Python")
