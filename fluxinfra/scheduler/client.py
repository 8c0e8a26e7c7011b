""":class:`KubeApi` over the official ``kubernetes`` Python client.

Objects travel as raw API JSON (``_preload_content=False``), never as the client's generated
model classes: the scheduler core works on the same dicts the API server sends, and we skip the
client's slow deserialisation (and its known failure on the Binding response). Watches are read
line by line here rather than through ``kubernetes.watch.Watch``, whose raw mode cannot report
an ``ERROR`` event; our informer needs to see those to relist on 410 Gone.

**Every call has a client timeout**: a connect timeout and a read timeout (``timeout``; the
Lease calls ``lease_timeout``, shorter than the renew deadline). A watch asks the server to end
it after ``timeoutSeconds`` and reads with a timeout a little longer than that, so a half-open
connection (a peer that vanished without a FIN) raises instead of freezing its reader; TCP
keepalive is on as well. urllib3 retries only failed connects; every other failure surfaces as
an :class:`~fluxinfra.scheduler.kube.ApiError` (status 0 when no response arrived) for the
caller's own backoff.

**Lists are paginated** (``limit`` + ``continue``, ``page_size`` objects a page), so a large
cluster is never one huge response, and each page's objects lose their bulk
(:func:`~fluxinfra.scheduler.informer.strip_bulk`) before the next page is read. The pages form
one consistent snapshot (the server guarantees it); if the continue token expires between pages
(410 Gone, after etcd compaction) the list starts over once, and then falls back to one
unpaginated list, as client-go's pager does.

No side effects at import: build a client with :func:`connect` from ``main()``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Self

from fluxinfra.scheduler.informer import strip_bulk
from fluxinfra.scheduler.kube import (
    PODGROUP_GROUP,
    PODGROUP_PLURAL,
    PODGROUP_VERSION,
    ApiError,
    Kind,
    WatchEvent,
    binding,
)

__all__ = ["ClientKubeApi", "ThrottledRefresh", "Timeouts", "api_error", "connect",
           "watch_lines"]

log = logging.getLogger(__name__)


class Timeouts:
    """Client timeouts in seconds (see the module docstring)."""

    def __init__(self, connect: float = 5.0, read: float = 30.0, lease: float = 5.0,
                 watch_slack: float = 30.0) -> None:
        if min(connect, read, lease) <= 0 or watch_slack < 0:
            raise ValueError(f"timeouts must be > 0: connect={connect} read={read} "
                             f"lease={lease} watch_slack={watch_slack}")
        self.connect, self.read, self.lease, self.watch_slack = connect, read, lease, watch_slack

    def call(self) -> tuple[float, float]:
        return (self.connect, self.read)

    def lease_call(self) -> tuple[float, float]:
        return (min(self.connect, self.lease), self.lease)

    def watch(self, timeout_seconds: int) -> tuple[float, float]:
        """The read timeout outlasts the server's own end of the watch."""
        return (self.connect, timeout_seconds + self.watch_slack)


def connect(kubeconfig: str | None = None, context: str | None = None, *,
            timeouts: Timeouts | None = None, page_size: int = 500,
            connections: int | None = None) -> ClientKubeApi:
    """In-cluster config when running in a pod, else ``kubeconfig`` (or ``$KUBECONFIG``).

    ``connections``: how many connections the pool keeps (the client's default is 5 per
    core). Give at least as many as run at once (each watch holds one, each bind worker and
    event sender one more): a pool smaller than that opens a connection for every request
    past it and drops it again ("Connection pool is full, discarding connection")."""
    from kubernetes import client, config
    from urllib3.util.retry import Retry

    from fluxinfra.errors import ConfigError

    cfg = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        try:
            config.load_kube_config(config_file=kubeconfig, context=context,
                                    client_configuration=cfg)
        except (config.ConfigException, OSError, TypeError) as exc:
            raise ConfigError(
                f"--kubeconfig {kubeconfig or '$KUBECONFIG/~/.kube/config'}: no usable "
                f"Kubernetes configuration ({exc}); run in a pod or pass --kubeconfig") from None
    # Retry a failed connect (a pooled connection the server closed), nothing else: a read
    # timeout retried silently would multiply every timeout below.
    cfg.retries = Retry(total=2, connect=2, read=0, redirect=0, status=0, other=0)
    cfg.keep_alive = True
    if cfg.refresh_api_key_hook is not None:
        cfg.refresh_api_key_hook = ThrottledRefresh(cfg.refresh_api_key_hook)
    if connections is not None:
        cfg.connection_pool_maxsize = connections
    return ClientKubeApi(client.ApiClient(cfg), timeouts=timeouts, page_size=page_size)


class ThrottledRefresh:
    """The client's token refresh hook, run at most once every ``period`` seconds.

    With a bearer token (a ServiceAccount's, in a pod or from a kubeconfig) the ``kubernetes``
    client calls its refresh hook before *every* request, and the hook sets the whole
    configuration again, re-reading the proxy settings from every environment variable: about
    60 us a request with 35 variables, about 0.5 ms with 380 (a pod's service links), on
    each bind and Event. The loaders themselves refresh a token only when it is due (in a
    pod: the token file re-read each minute; a kubeconfig's exec or OIDC token 5 minutes before
    it expires), so a refresh every ``period`` seconds misses no rotation. The kubeconfig
    loader's hook installs itself again each time it runs; the throttle puts itself back in
    front of it."""

    def __init__(self, hook: Callable[[Any], None], period: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.hook, self.period, self.clock = hook, period, clock
        self._next = float("-inf")
        self._lock = threading.Lock()

    def __call__(self, configuration: Any) -> None:
        if self.clock() < self._next:
            return
        with self._lock:
            now = self.clock()
            if now < self._next:
                return  # another thread refreshed meanwhile
            self._next = now + self.period
            self.hook(configuration)
            # the kubeconfig loader's hook sets the whole configuration again, its own hook
            # included: keep the hook it installs, and this throttle in front of it
            installed = getattr(configuration, "refresh_api_key_hook", self)
            if installed is not self:
                if installed is not None:
                    self.hook = installed
                configuration.refresh_api_key_hook = self


def watch_lines(resp: Any) -> Iterator[dict[str, Any]]:
    """The watch events of a streamed answer (``_preload_content=False``), one JSON object a
    line, each yielded as soon as its line is complete."""
    buffer = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            if line.strip():
                yield json.loads(line)
    if buffer.strip():
        yield json.loads(buffer)


def api_error(exc: Exception) -> ApiError:
    """What the ``kubernetes`` client raised, as an :class:`ApiError` (status, reason and the
    server's message; a failure with no response is status 0, transient)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(exc, ApiException):
        message = ""
        if exc.body:
            try:
                message = json.loads(exc.body).get("message", "")
            except (ValueError, AttributeError):
                message = str(exc.body)[:500]
        return ApiError(int(exc.status or 0), str(exc.reason or ""), message)
    # urllib3 / socket failures (refused, reset, timed out): no response, which is transient.
    return ApiError(0, type(exc).__name__, str(exc))


class ClientKubeApi:
    """The production :class:`~fluxinfra.scheduler.kube.KubeApi`.

    ``api_client`` (the ``kubernetes`` client's ``ApiClient``: server, credentials, retries,
    keep-alive and its connection pool), ``timeouts`` and ``page_size`` are its settings;
    :meth:`on_settings_of` makes another client on the same settings with a pool of its own.
    """

    def __init__(self, api_client: Any, *, timeouts: Timeouts | None = None,
                 page_size: int = 500) -> None:
        from kubernetes import client

        if page_size < 1:
            raise ValueError(f"page_size {page_size}: use >= 1")
        self.api_client = api_client
        self._core = client.CoreV1Api(api_client)
        self._events = client.EventsV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._coordination = client.CoordinationV1Api(api_client)
        self.timeouts = timeouts or Timeouts()
        self.page_size = page_size
        #: pages fetched and lists restarted after an expired continue token (observability)
        self.pages = 0
        self.restarts = 0
        self._policy = client.PolicyV1Api(api_client)

    @classmethod
    def on_settings_of(cls, other: ClientKubeApi, *, connections: int) -> Self:
        """A client of this class with ``other``'s settings (server, credentials, retries,
        keep-alive, timeouts, page size) on a connection pool of its own, ``connections`` deep.

        For work a process runs beside the scheduler on the same server (the queue's
        controller): its requests then neither wait for nor crowd out the connections the
        scheduler's watches, binds and Events hold. ``other`` is left as it is."""
        import copy

        from kubernetes import client

        if connections < 1:
            raise ValueError(f"connections {connections}: use >= 1")
        settings = copy.copy(other.api_client.configuration)
        settings.connection_pool_maxsize = connections
        hook = settings.refresh_api_key_hook
        if isinstance(hook, ThrottledRefresh):  # a throttle of its own: both get refreshed
            settings.refresh_api_key_hook = ThrottledRefresh(hook.hook, hook.period, hook.clock)
        return cls(client.ApiClient(settings), timeouts=other.timeouts,
                   page_size=other.page_size)

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

    def _page(self, kind: Kind, limit: int | None, token: str) -> dict[str, Any]:
        func, args = self._lister(kind)
        kwargs: dict[str, Any] = {"_preload_content": False,
                                  "_request_timeout": self.timeouts.call()}
        if limit:
            kwargs["limit"] = limit
        if token:
            kwargs["_continue"] = token
        try:
            resp = func(*args, **kwargs)
            body = json.loads(resp.data)
        except Exception as exc:  # noqa: BLE001 - every client failure becomes an ApiError
            raise api_error(exc) from exc
        self.pages += 1
        return body

    def list_objects(self, kind: Kind) -> tuple[list[dict[str, Any]], str]:
        """Every object of ``kind``, ``page_size`` a request, as one consistent snapshot."""
        for attempt in range(3):
            limit = self.page_size if attempt < 2 else None  # last resort: one full list
            items: list[dict[str, Any]] = []
            token = ""
            try:
                while True:
                    body = self._page(kind, limit, token)
                    # strip page by page: the bulk of page 1 is gone before page 2 is parsed
                    items += [strip_bulk(kind, obj) for obj in body.get("items") or []]
                    del body["items"]
                    meta = body.get("metadata") or {}
                    token = meta.get("continue") or ""
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except ApiError as exc:
                if not (exc.expired and token):
                    raise
                self.restarts += 1
                log.warning("listing %s: the continue token expired after %d objects (%s); "
                            "%s", kind, len(items), exc.message or exc.reason,
                            "starting over" if attempt == 0 else "listing without pages")
        raise AssertionError("unreachable")  # pragma: no cover

    def watch_objects(self, kind: Kind, resource_version: str,
                      timeout_seconds: int) -> Iterator[WatchEvent]:
        func, args = self._lister(kind)
        try:
            resp = func(*args, watch=True, resource_version=resource_version,
                        allow_watch_bookmarks=True, timeout_seconds=timeout_seconds,
                        _preload_content=False,
                        _request_timeout=self.timeouts.watch(timeout_seconds))
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc) from exc
        try:
            yield from watch_lines(resp)
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc) from exc
        finally:
            resp.close()
            resp.release_conn()

    def bind(self, namespace: str, pod: str, uid: str, node: str) -> None:
        body = binding(namespace, pod, uid, node)
        self._call(self._core.create_namespaced_pod_binding, pod, namespace, body)

    def create_event(self, namespace: str, event: dict[str, Any]) -> None:
        self._call(self._events.create_namespaced_event, namespace, event)

    def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._call(self._events.patch_namespaced_event, name, namespace, patch,
                   _content_type="application/merge-patch+json")

    def patch_pod_status(self, namespace: str, pod: str, patch: dict[str, Any]) -> None:
        self._call(self._core.patch_namespaced_pod_status, pod, namespace, patch)

    def delete_pod(self, namespace: str, pod: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": uid} if uid else None}
        # body by keyword: the third positional parameter is ``pretty``
        self._call(self._core.delete_namespaced_pod, pod, namespace, body=body)

    def patch_podgroup_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        # a custom resource takes no strategic merge patch (415): a JSON merge patch
        self._call(self._custom.patch_namespaced_custom_object_status, PODGROUP_GROUP,
                   PODGROUP_VERSION, namespace, PODGROUP_PLURAL, name, patch,
                   _content_type="application/merge-patch+json")

    def _call(self, func: Any, *args: Any, lease: bool = False, **kwargs: Any) -> Any:
        timeout = self.timeouts.lease_call() if lease else self.timeouts.call()
        try:
            resp = func(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
            # Read the answer now (kept as resp.data): only a response read to its end gives
            # its connection back to the pool; one left unread is closed with the response,
            # so every bind, Event and status patch made a new TLS connection.
            resp.data  # noqa: B018
        except Exception as exc:  # noqa: BLE001
            raise api_error(exc) from exc
        return resp

    def get_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            resp = self._call(self._coordination.read_namespaced_lease, name, namespace,
                              lease=True)
        except ApiError as err:
            if err.not_found:
                return None
            raise
        return json.loads(resp.data)

    def create_lease(self, namespace: str, lease: dict[str, Any]) -> None:
        self._call(self._coordination.create_namespaced_lease, namespace, lease, lease=True)

    def replace_lease(self, namespace: str, name: str, lease: dict[str, Any]) -> None:
        self._call(self._coordination.replace_namespaced_lease, name, namespace, lease,
                   lease=True)
