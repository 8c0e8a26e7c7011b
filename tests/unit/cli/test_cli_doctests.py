"""The runnable examples in the CLI's helper modules (and the graph-output writer)."""

from __future__ import annotations

import doctest
import importlib

import pytest


@pytest.mark.parametrize("name", ["fluxinfra.console", "fluxinfra.cli.graphs", "fluxinfra.errors",
                                  "fluxinfra.matcher.graphout"])
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0, result
