""":class:`KubeApi` over the official ``kubernetes`` Python client.

Objects travel as raw API JSON (``_preload_content=False``), never as the client's generated
model classes: the scheduler core works on the same dicts the API server sends, and we skip the
client's slow deserialisation (and its known failure on the Binding response). Watches are read
line by line here rather than through ``kubernetes.watch.Watch``, whose raw mode cannot report
an ``ERROR`` event; our informer needs to see those to relist on 410 Gone.

No side effects at import: build a client with :func:`connect` from ``main()``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fluxinfra.scheduler.kube import (
    PODGROUP_GROUP,
    PODGROUP_PLURAL,
    PODGROUP_VERSION,
    ApiError,
    Kind,
    WatchEvent,
    binding,
)

__all__ = ["ClientKubeApi", "connect"]


def connect(kubeconfig: str | None = None, context: str | None = None) -> ClientKubeApi:
    """In-cluster config when running in a pod, else ``kubeconfig`` (or ``$KUBECONFIG``)."""
    from kubernetes import client, config

    from fluxinfra.errors import ConfigError

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config(config_file=kubeconfig, context=context)
        except (config.ConfigException, OSError, TypeError) as exc:
            raise ConfigError(
                f"--kubeconfig {kubeconfig or '$KUBECONFIG/~/.kube/config'}: no usable "
                f"Kubernetes configuration ({exc}); run in a pod or pass --kubeconfig") from None
    return ClientKubeApi(client.ApiClient())


def _translate(exc: Exception) -> ApiError:
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        message = ""
        if exc.body:
            try:
                message = json.loads(exc.body).get("message", "")
            except (ValueError, AttributeError):
                message = str(exc.body)[:500]
        return ApiError(int(exc.status or 0), str(exc.reason or ""), message)
    # urllib3 / socket failures: no response at all, which is transient.
    return ApiError(0, type(exc).__name__, str(exc))


class ClientKubeApi:
    """The production :class:`~fluxinfra.scheduler.kube.KubeApi`."""

    def __init__(self, api_client: Any) -> None:
        from kubernetes import client

        self._core = client.CoreV1Api(api_client)
        self._events = client.EventsV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._coordination = client.CoordinationV1Api(api_client)
        self._policy = client.PolicyV1Api(api_client)

    def _lister(self, kind: Kind) -> tuple[Any, tuple[Any, ...]]:
        if kind == "nodes":
            return self._core.list_node, ()
        if kind == "pods":
            return self._core.list_pod_for_all_namespaces, ()
        if kind == "namespaces":
            return self._core.list_namespace, ()
        if kind == "poddisruptionbudgets":
            return self._policy.list_pod_disruption_budget_for_all_namespaces, ()
        return (self._custom.list_cluster_custom_object,
                (PODGROUP_GROUP, PODGROUP_VERSION, PODGROUP_PLURAL))

    def list_objects(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        func, args = self._lister(kind)
        try:
            resp = func(*args, _preload_content=False)
            body = json.loads(resp.data)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - every client failure becomes an ApiError
            raise _translate(exc) from exc
        return body.get("items") or [], body.get("metadata", {}).get("resourceVersion", "")

    def watch_objects(self, kind: Kind, resource_version: str,
                      timeout_seconds: int) -> Iterator[WatchEvent]:
        func, args = self._lister(kind)
        try:
            resp = func(*args, watch=True, resource_version=resource_version,
                        allow_watch_bookmarks=True, timeout_seconds=timeout_seconds,
                        _preload_content=False)
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc) from exc
        try:
            buffer = b""
            for chunk in resp.stream(amt=None, decode_content=False):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
            if buffer.strip():
                yield json.loads(buffer)
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc) from exc
        finally:
            resp.close()
            resp.release_conn()

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        body = binding(namespace, pod, uid, node)
        self._call(self._core.create_namespaced_pod_binding, pod, namespace, body)

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        self._call(self._events.create_namespaced_event, namespace, event)

    def patch_pod_status(self, namespace: str, pod: str, patch: dict[str, Any]) -> None:
        self._call(self._core.patch_namespaced_pod_status, pod, namespace, patch)

    def delete_pod(self, namespace: str, pod: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": uid} if uid else None}
        try:  # body by keyword: the third positional parameter is ``pretty``
            self._core.delete_namespaced_pod(pod, namespace, body=body, _preload_content=False)
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc) from exc

    def patch_podgroup_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        # a custom resource takes no strategic merge patch (415): a JSON merge patch
        try:
            self._custom.patch_namespaced_custom_object_status(
                PODGROUP_GROUP, PODGROUP_VERSION, namespace, PODGROUP_PLURAL, name, patch,
                _content_type="application/merge-patch+json", _preload_content=False)
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc) from exc

    @staticmethod
    def _call(func: Any, *args: Any) -> None:
        try:
            func(*args, _preload_content=False)
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc) from exc

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            resp = self._coordination.read_namespaced_lease(name, namespace,
                                                            _preload_content=False)
            return json.loads(resp.data)
        except Exception as exc:  # noqa: BLE001
            err = _translate(exc)
            if err.not_found:
                return None
            raise err from exc

    def create_lease(self, namespace: str, lease: dict[str, Any]) -> None:
        self._call(self._coordination.create_namespaced_lease, namespace, lease)

    def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> None:
        self._call(self._coordination.replace_namespaced_lease, name, namespace, lease)
