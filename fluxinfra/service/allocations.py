"""Registering amounts already in use on a node with a matcher (no gRPC here).

Shared by the service's ``Register`` RPC and anything else holding a matcher: the matcher's
public :meth:`~fluxinfra.matcher.Matcher.register_amounts` takes the node's lowest free vertices
(looked up through the graph's indexes, never by scanning paths) under a job id.
"""

from __future__ import annotations

from typing import Any

__all__ = ["register_amounts"]


def register_amounts(matcher: Any, jobid: int, node: str, *, cores: int, memory_mib: int = 0,
                     gpus: int = 0, at: int = 0, duration: int | None = None) -> Any:
    """Hold ``cores``, ``memory_mib`` (the graph's memory unit) and ``gpus`` on ``node`` for
    ``jobid`` from ``at``. Raises ``Busy`` when the node lacks them, ``GraphError`` when the
    node is not in the graph."""
    return matcher.register_amounts(jobid, node, {"core": cores, "memory": memory_mib,
                                                  "gpu": gpus}, at=at, duration=duration)
