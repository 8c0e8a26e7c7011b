"""The runnable examples in the matcher's docstrings (the package docstring is the API guide)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["fluxinfra.matcher", "fluxinfra.matcher.planner", "fluxinfra.matcher.jobspec",
           "fluxinfra.matcher.policies", "fluxinfra.matcher.graph", "fluxinfra.matcher.matcher",
           "fluxinfra.matcher.result", "fluxinfra.matcher.register", "fluxinfra.matcher.elastic",
           "fluxinfra.matcher.stdsort", "fluxinfra.matcher.prefixsort", "fluxinfra.matcher.rv1exec",
           "fluxinfra.matcher.gcpolicy"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0, f"{result.failed} example(s) of {name} failed"
