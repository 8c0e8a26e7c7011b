"""The runnable examples in the scheduler's and service's docstrings stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [f"fluxinfra.scheduler.{m}" for m in (
    "allocator", "events", "fluxion", "informer", "kube", "leader", "metrics", "pods",
    "simulator")] + ["fluxinfra.service.jobspecs"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0, f"{name} has no runnable example"
    assert result.failed == 0
