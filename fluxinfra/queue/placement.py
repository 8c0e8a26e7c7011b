"""The queue's one adapter to the scheduler's request conversion.

The FluxJob shows people the jobspec Fluxion matches for it. That jobspec is the scheduler's:
its core converts the queue's pods exactly as it converts any pod. This module asks the
scheduler for the same conversion, so the text in the FluxJob and what the matcher receives
cannot drift apart; it is the only place in the queue that knows how the scheduler turns a pod
into a jobspec.

>>> pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "resources": {
...     "requests": {"cpu": "2", "memory": "1Gi"}}}]}}
>>> print(jobspec_text(pod, 4, 60).splitlines()[3])
  count: 4
"""

from __future__ import annotations

import functools
from typing import Any

import yaml

from fluxinfra.kube.pools import pool_jobspec
from fluxinfra.scheduler.pods import Request, pod_request

__all__ = ["jobspec", "jobspec_text"]


def jobspec(pod: dict[str, Any], count: int, duration: int) -> dict[str, Any]:
    """The jobspec the scheduler matches for ``count`` pods like ``pod`` (as one group; the
    candidate nodes its filters find travel as a constraint, not shown here)."""
    return pool_jobspec(max(1, count), pod_request(pod).slot(), duration=duration)


def jobspec_text(pod: dict[str, Any], count: int, duration: int) -> str:
    return _text(pod_request(pod), max(1, count), duration)


@functools.lru_cache(maxsize=1024)
def _text(request: Request, count: int, duration: int) -> str:
    """Jobs come in a few shapes: their text is made once per shape."""
    return yaml.safe_dump(pool_jobspec(count, request.slot(), duration=duration),
                          sort_keys=False)
