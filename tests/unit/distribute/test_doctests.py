"""The runnable examples in the distribute modules' docstrings run."""

import doctest

import pytest

from fluxinfra.distribute import agent, topology


@pytest.mark.parametrize("module", [agent, topology])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
