"""The API double answers like a real API server: its shapes equal those recorded from a real
v1.28 server (``recorded_api_shapes.json``, recorded by ``tests/e2e/test_api_shapes.py``),
except the differences listed, with their reasons, in ``api_shapes.KNOWN_DIFFERENCES``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .api_shapes import KNOWN_DIFFERENCES, RECORDING, DoubleWorld, differences, observe
from .kube_double import KubeApiDouble


@pytest.fixture(scope="module")
def double() -> dict[str, Any]:
    api = KubeApiDouble()
    return observe(api, DoubleWorld(api))


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(RECORDING.read_text())


def test_the_double_answers_like_the_recorded_api_server(double, recorded) -> None:
    drift = differences(double, recorded)
    assert not drift, "the API double differs from the real server:\n" + "\n".join(drift)


def test_every_known_difference_is_still_a_difference(double, recorded) -> None:
    """A listed difference the double no longer has is removed from the list."""
    stale = [k for k in KNOWN_DIFFERENCES if double.get(k) == recorded.get(k)]
    assert not stale, f"no longer different, drop from KNOWN_DIFFERENCES: {stale}"
