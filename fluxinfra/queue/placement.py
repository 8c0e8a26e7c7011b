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

from fluxinfra.scheduler.pods import pod_request
from fluxinfra.service.jobspecs import slots_jobspec

__all__ = ["jobspec", "jobspec_text"]


def jobspec(pod: dict[str, Any], count: int, duration: int) -> dict[str, Any]:
    """The jobspec the scheduler matches for ``count`` pods like ``pod`` (as one group)."""
    shape = pod_request(pod).shape()
    return slots_jobspec(max(1, count), cores=shape.cores, memory_mib=shape.memory_mib,
                         gpus=shape.gpus, duration=duration)


def jobspec_text(pod: dict[str, Any], count: int, duration: int) -> str:
    shape = pod_request(pod).shape()
    return _text(shape.cores, shape.memory_mib, shape.gpus, max(1, count), duration)


@functools.lru_cache(maxsize=1024)
def _text(cores: int, memory_mib: int, gpus: int, count: int, duration: int) -> str:
    """Jobs come in a few shapes: their text is made once per shape."""
    return yaml.safe_dump(slots_jobspec(count, cores=cores, memory_mib=memory_mib, gpus=gpus,
                                        duration=duration), sort_keys=False)
