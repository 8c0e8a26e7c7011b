"""The queue's narrow interface to the Kubernetes API (a Protocol), and its client.

The queue runs inside the scheduler, so its API object is the scheduler's
(:class:`fluxinfra.scheduler.kube.KubeApi`: nodes, pods, PodGroups, binds, Events, Leases) plus
what the queue alone reads and writes:

- list and watch ``jobs`` (batch/v1), ``fluxjobs`` and ``fluxjobqueues``
  (:mod:`fluxinfra.kube.fluxjob`) and ``priorityclasses`` (a Job's pods get their priority from
  one; the pods do not exist yet when the queue orders the Job);
- create a FluxJob, merge-patch a FluxJob's or FluxJobQueue's status;
- merge-patch a Job (un-suspend with the chosen nodes pinned), JSON-patch a pod (remove the gate).

Objects are plain API JSON, as in the scheduler. :class:`QueueClient` implements it over the
official client; the tests' double implements the same methods.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from fluxinfra.kube.fluxjob import GROUP, PLURAL, QUEUE_PLURAL, VERSION
from fluxinfra.scheduler.client import ClientKubeApi, api_error
from fluxinfra.scheduler.kube import KubeApi

__all__ = ["QUEUE_CONNECTIONS", "QUEUE_KINDS", "QueueApi", "QueueClient"]

#: What the queue watches besides the scheduler's kinds.
QUEUE_KINDS = ("priorityclasses", "fluxjobqueues", "jobs", "fluxjobs")


class QueueApi(KubeApi, Protocol):
    def create_fluxjob(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a FluxJob; returns it as stored (uid, creationTimestamp); 409 if it exists."""
        ...

    def patch_fluxjob_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Merge-patch ``fluxjobs/<name>/status`` with ``{"status": status}``."""
        ...

    def patch_fluxjobqueue_status(self, namespace: str, name: str,
                                  status: dict[str, Any]) -> None: ...

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        """Merge-patch a batch/v1 Job (404 when it is gone)."""
        ...

    def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        """JSON-patch a pod (RFC 6902; a failing ``test`` op is 422)."""
        ...


#: The queue client's connection pool: ``QueueClient.on_settings_of(scheduler_api,
#: connections=QUEUE_CONNECTIONS)``. The runner's watches each hold a pooled connection for as
#: long as they stream (seven kinds with the queue's), and the client's default pool is ``5 x
#: cores`` deep: on a small machine the queue's parallel writes found it empty, opened a new
#: TLS connection per request and dropped it again afterwards (urllib3 keeps at most
#: ``maxsize``).
QUEUE_CONNECTIONS = 32


class QueueClient(ClientKubeApi):
    """:class:`QueueApi` over the official ``kubernetes`` client (raw JSON, no models).

    The process that hosts the queue makes it on the scheduler's client's settings with a pool
    of its own: ``QueueClient.on_settings_of(api, connections=QUEUE_CONNECTIONS)``."""

    def __init__(self, api_client: Any, **kwargs: Any) -> None:
        from kubernetes import client

        super().__init__(api_client, **kwargs)
        self._batch = client.BatchV1Api(api_client)
        self._scheduling = client.SchedulingV1Api(api_client)

    def custom_objects(self) -> Any:
        """The ``CustomObjectsApi`` on this client's connections (the configured queues)."""
        return self._custom

    def _lister(self, kind: Any) -> tuple[Any, tuple[Any, ...]]:
        if kind == "jobs":
            return self._batch.list_job_for_all_namespaces, ()
        if kind == "priorityclasses":
            return self._scheduling.list_priority_class, ()
        if kind in ("fluxjobs", "fluxjobqueues"):
            plural = PLURAL if kind == "fluxjobs" else QUEUE_PLURAL
            return self._custom.list_cluster_custom_object, (GROUP, VERSION, plural)
        return super()._lister(kind)

    def _send(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        try:  # with the scheduler's client timeouts, as every call it makes
            resp = func(*args, _preload_content=False, _request_timeout=self.timeouts.call(),
                        **kwargs)
        except Exception as exc:  # noqa: BLE001 - every client failure becomes an ApiError
            raise api_error(exc) from exc
        return json.loads(resp.data) if resp.data else None

    def create_fluxjob(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._send(self._custom.create_namespaced_custom_object, GROUP, VERSION,
                          namespace, PLURAL, body, _content_type="application/json")

    def patch_fluxjob_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._send(self._custom.patch_namespaced_custom_object_status, GROUP, VERSION,
                   namespace, PLURAL, name, {"status": status},
                   _content_type="application/merge-patch+json")

    def patch_fluxjobqueue_status(self, namespace: str, name: str,
                                  status: dict[str, Any]) -> None:
        self._send(self._custom.patch_namespaced_custom_object_status, GROUP, VERSION,
                   namespace, QUEUE_PLURAL, name, {"status": status},
                   _content_type="application/merge-patch+json")

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._send(self._batch.patch_namespaced_job, name, namespace, patch,
                   _content_type="application/merge-patch+json")

    def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self._send(self._core.patch_namespaced_pod, name, namespace, ops,
                   _content_type="application/json-patch+json")
