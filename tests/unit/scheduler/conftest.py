"""Fixtures shared by the scheduler's scenario suites."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .kube_double import make_node


@pytest.fixture(scope="module")
def fluxion_service() -> Iterator[str]:
    """One real gRPC Fluxion service on loopback; each scheduler reloads its graph."""
    from fluxinfra.kube.graph import graph_from_k8s
    from fluxinfra.matcher import Matcher
    from fluxinfra.service.server import serve

    nodes = [make_node("bootstrap")]
    server, port = serve(Matcher(graph_from_k8s(nodes, [], subtract_pods=False)),
                         host="127.0.0.1", port=0, workers=2)
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)
