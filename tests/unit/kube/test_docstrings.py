"""The runnable examples in the kube package's docstrings stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [f"fluxinfra.kube.{m}" for m in (
    "fluxjob", "graph", "names", "pools", "quantity", "resources", "selectors", "shapes")]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no runnable example"
    assert result.failed == 0, f"{result.failed} example(s) of {name} failed"
