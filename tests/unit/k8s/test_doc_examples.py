"""The runnable examples in the pure modules' docstrings stay true."""

import doctest

import pytest

import fluxinfra.k8s.config
import fluxinfra.secrets


@pytest.mark.parametrize("module", [fluxinfra.secrets, fluxinfra.k8s.config],
                         ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0, result
