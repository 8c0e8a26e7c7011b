"""The examples in the bed's docstrings run."""

import doctest

import kubebed.hollow
import kubebed.hoststate
import kubebed.images
import kubebed.pki
import kubebed.services
import pytest


@pytest.mark.parametrize("module", [kubebed.hollow, kubebed.hoststate, kubebed.images,
                                    kubebed.pki, kubebed.services], ids=lambda m: m.__name__)
def test_docstring_examples_run(module) -> None:
    result = doctest.testmod(module)
    assert result.attempted and not result.failed
