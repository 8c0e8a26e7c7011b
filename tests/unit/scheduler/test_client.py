"""``ClientKubeApi`` (the real ``kubernetes`` client) against a tiny fake API server on loopback:
the URLs it calls, the JSON it sends, watch streaming, and HTTP errors turned into ApiError."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from fluxinfra.scheduler.client import ClientKubeApi, Timeouts
from fluxinfra.scheduler.kube import ApiError

from .kube_double import make_node, make_pod, validate


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}


class FakeApi(BaseHTTPRequestHandler):
    calls: list[tuple[str, str, str, Any]] = []
    #: continue tokens to refuse with 410 Expired before honouring them
    expire_tokens = 0
    #: set to let requests to the "hang" paths finish (they stall like a stopped server)
    release = threading.Event()

    def _send(self, code: int, body: Any, lines: list[Any] | None = None) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        if lines is None:
            data = json.dumps(body).encode()
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for line in lines:
            chunk = (json.dumps(line) + "\n").encode()
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _pods_page(self) -> None:
        """Seven pods, served ``limit`` at a time with the real server's continue/410 shapes."""
        query = parse_qs(urlsplit(self.path).query)
        limit = int(query.get("limit", ["0"])[0]) or 7
        token = query.get("continue", [""])[0]
        if token and FakeApi.expire_tokens:
            FakeApi.expire_tokens -= 1
            self._send(410, {**status(410, "Expired", "The provided continue parameter is too "
                                                      "old to display a consistent list result."),
                             "metadata": {"continue": "inconsistent"}})
            return
        start = int(token[1:]) if token else 0
        items = [make_pod(f"p{i}") for i in range(start, min(7, start + limit))]
        meta: dict[str, Any] = {"resourceVersion": "41"}
        if start + limit < 7:
            meta["continue"] = f"c{start + limit}"
            meta["remainingItemCount"] = 7 - start - limit
        self._send(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                         "items": items})

    def _hang(self, body: bool) -> None:
        """A stopped API server: the connection is accepted, the answer never comes (or a
        watch's headers and first event come, then nothing)."""
        if body:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = (json.dumps({"type": "ADDED", "object": make_node("n1")}) + "\n").encode()
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        FakeApi.release.wait(30)

    def do_GET(self) -> None:  # noqa: N802
        self.calls.append(("GET", self.path, "", None))
        if "/namespaces/hang/" in self.path or self.path.startswith("/api/v1/nodes?hang"):
            self._hang(body=False)
        elif self.path.startswith("/api/v1/pods"):
            self._pods_page()
        elif self.path.startswith("/api/v1/nodes") and "watch=true" in self.path:
            if "resourceVersion=stall" in self.path:
                self._hang(body=True)
                return
            node = make_node("n1")
            node["metadata"]["resourceVersion"] = "8"
            self._send(200, None, [{"type": "ADDED", "object": node},
                                   {"type": "ERROR", "object": status(410, "Expired", "old")}])
        elif self.path.startswith("/api/v1/nodes"):
            self._send(200, {"kind": "NodeList", "apiVersion": "v1",
                             "metadata": {"resourceVersion": "7"}, "items": [make_node("n0")]})
        elif self.path.startswith("/apis/scheduling.x-k8s.io/"):
            self._send(404, status(404, "NotFound", "the server could not find the resource"))
        elif self.path.startswith("/apis/coordination.k8s.io/"):
            self._send(404, status(404, "NotFound", 'leases "l" not found'))
        else:
            self._send(500, status(500, "InternalError", "unexpected"))

    def do_POST(self) -> None:  # noqa: N802
        body = self._body()
        self.calls.append(("POST", self.path, self.headers.get("Content-Type", ""), body))
        if "/namespaces/hang/" in self.path:
            self._hang(body=False)
        elif self.path.endswith("/pods/taken/binding"):
            self._send(409, status(409, "Conflict", 'pod taken is already assigned to node "x"'))
        elif self.path.endswith("/binding"):
            self._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        else:
            self._send(201, body)

    def do_PATCH(self) -> None:  # noqa: N802
        body = self._body()
        self.calls.append(("PATCH", self.path, self.headers.get("Content-Type", ""), body))
        if "/namespaces/hang/" in self.path:
            self._hang(body=False)
            return
        self._send(503, status(503, "ServiceUnavailable", "etcd is sad")) \
            if "podgroups" in self.path else self._send(200, body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture()
def api() -> Iterator[ClientKubeApi]:
    from kubernetes import client

    FakeApi.calls = []
    FakeApi.expire_tokens = 0
    FakeApi.release = threading.Event()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    yield ClientKubeApi(client.ApiClient(config), page_size=3)
    FakeApi.release.set()
    server.shutdown()


@pytest.fixture()
def impatient(api: ClientKubeApi) -> ClientKubeApi:
    """The same server through a client with sub-second timeouts."""
    return ClientKubeApi(api._core.api_client, page_size=3,
                         timeouts=Timeouts(connect=2, read=0.5, lease=0.3, watch_slack=0.5))


def test_list_and_watch_return_api_json(api: ClientKubeApi) -> None:
    items, rv = api.list_objects("nodes")
    assert rv == "7" and items[0]["metadata"]["name"] == "n0"
    events = list(api.watch_objects("nodes", "7", 30))
    assert [e["type"] for e in events] == ["ADDED", "ERROR"]
    assert events[1]["object"]["code"] == 410
    watch_call = FakeApi.calls[-1][1]
    assert "watch=true" in watch_call and "resourceVersion=7" in watch_call
    assert "allowWatchBookmarks=true" in watch_call


def test_bind_posts_a_valid_binding_and_maps_409(api: ClientKubeApi) -> None:
    api.bind("default", "p", "uid-1", "n0")
    method, path, _, body = FakeApi.calls[-1]
    assert (method, path) == ("POST", "/api/v1/namespaces/default/pods/p/binding")
    validate(body)
    assert body["target"]["name"] == "n0" and body["metadata"]["uid"] == "uid-1"
    with pytest.raises(ApiError) as info:
        api.bind("default", "taken", "uid-2", "n0")
    assert info.value.conflict and "already assigned" in info.value.message


def test_events_and_status_patches(api: ClientKubeApi) -> None:
    from fluxinfra.scheduler.events import pod_event, scheduled_condition_patch

    api.create_event("default", pod_event("default", "p", "u", "Scheduled", "ok", "fluxion", "i"))
    assert FakeApi.calls[-1][1] == "/apis/events.k8s.io/v1/namespaces/default/events"
    api.patch_pod_status("default", "p", scheduled_condition_patch("Unschedulable", "never"))
    method, path, ctype, body = FakeApi.calls[-1]
    assert (method, path) == ("PATCH", "/api/v1/namespaces/default/pods/p/status")
    assert ctype == "application/strategic-merge-patch+json"
    assert body["status"]["conditions"][0]["reason"] == "Unschedulable"
    with pytest.raises(ApiError) as info:
        api.patch_podgroup_status("default", "g", {"status": {"phase": "Scheduled"}})
    assert info.value.status == 503 and info.value.transient


def test_missing_crd_and_lease_are_404s(api: ClientKubeApi) -> None:
    with pytest.raises(ApiError) as info:
        api.list_objects("podgroups")
    assert info.value.not_found
    assert api.get_lease("ns", "l") is None


def test_connection_refused_is_transient() -> None:
    from kubernetes import client

    config = client.Configuration()
    config.host = "http://127.0.0.1:1"
    config.retries = 0
    with pytest.raises(ApiError) as info:
        ClientKubeApi(client.ApiClient(config)).list_objects("pods")
    assert info.value.status == 0 and info.value.transient


def _list_calls() -> list[dict[str, list[str]]]:
    return [parse_qs(urlsplit(path).query) for method, path, _, _ in FakeApi.calls
            if method == "GET" and path.startswith("/api/v1/pods")]


def test_lists_are_paginated_with_limit_and_continue(api: ClientKubeApi) -> None:
    items, rv = api.list_objects("pods")
    assert [p["metadata"]["name"] for p in items] == [f"p{i}" for i in range(7)]
    assert rv == "41"
    calls = _list_calls()
    assert [c.get("limit") for c in calls] == [["3"]] * 3
    assert [c.get("continue") for c in calls] == [None, ["c3"], ["c6"]]


def test_an_expired_continue_token_restarts_the_list_then_lists_without_pages(
        api: ClientKubeApi) -> None:
    FakeApi.expire_tokens = 1
    items, _ = api.list_objects("pods")
    assert len(items) == 7 and api.restarts == 1, "restarted once, from the first page"
    assert [c.get("continue") for c in _list_calls()] == [None, ["c3"], None, ["c3"], ["c6"]]
    FakeApi.calls = []
    FakeApi.expire_tokens = 2
    items, _ = api.list_objects("pods")
    assert len(items) == 7 and api.restarts == 3
    assert _list_calls()[-1].get("limit") is None, "the last resort is one unpaginated list"
    assert [p["metadata"]["name"] for p in items] == [f"p{i}" for i in range(7)]


@pytest.mark.parametrize("call", [
    lambda api: api.bind("hang", "p", "u", "n0"),
    lambda api: api.patch_pod_status("hang", "p", {"status": {}}),
    lambda api: api.get_lease("hang", "l"),
], ids=["bind", "status-patch", "lease"])
def test_a_server_that_never_answers_times_out(impatient: ClientKubeApi, call) -> None:
    started = time.monotonic()
    with pytest.raises(ApiError) as info:
        call(impatient)
    elapsed = time.monotonic() - started
    assert info.value.status == 0 and info.value.transient
    assert "timed out" in str(info.value).lower()
    assert elapsed < 5, f"took {elapsed:.1f}s"


def test_a_half_open_watch_raises_after_its_timeout_instead_of_freezing(
        impatient: ClientKubeApi) -> None:
    started = time.monotonic()
    seen = []
    with pytest.raises(ApiError) as info:
        for event in impatient.watch_objects("nodes", "stall", 1):
            seen.append(event["type"])
    elapsed = time.monotonic() - started
    assert seen == ["ADDED"], "the events before the stall arrive"
    assert info.value.status == 0 and info.value.transient
    assert 1.0 <= elapsed < 6, f"read timeout = timeoutSeconds + slack, took {elapsed:.1f}s"
    watch = next(path for _, path, _, _ in FakeApi.calls if "watch=true" in path)
    assert "timeoutSeconds=1" in watch


class KeepAliveApi(FakeApi):
    """The fake API server keeping its connections open between requests (HTTP/1.1), as the
    real one does; it notes the client's port of every request."""

    protocol_version = "HTTP/1.1"
    ports: list[int] = []

    def handle_one_request(self) -> None:
        KeepAliveApi.ports.append(self.client_address[1])
        super().handle_one_request()


def test_writes_reuse_one_pooled_connection() -> None:
    """A bind, an Event, a status patch answered and read: each gives its connection back to
    the pool, so a run of writes from one thread goes over one connection (a response left
    unread closed its connection: a new TLS handshake per write against the real server)."""
    from kubernetes import client

    from fluxinfra.scheduler.events import pod_event, scheduled_condition_patch

    KeepAliveApi.calls, KeepAliveApi.ports = [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), KeepAliveApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        config = client.Configuration()
        config.host = f"http://127.0.0.1:{server.server_address[1]}"
        api = ClientKubeApi(client.ApiClient(config))
        for i in range(3):
            api.bind("default", f"p{i}", f"uid-{i}", "n0")
            api.create_event("default", pod_event("default", f"p{i}", f"uid-{i}", "Scheduled",
                                                  "ok", "fluxion", "i"))
            api.patch_pod_status("default", f"p{i}", scheduled_condition_patch("Bound", "ok"))
        assert api.get_lease("ns", "l") is None  # a 404 read to its end as well
        api.bind("default", "p9", "uid-9", "n0")
    finally:
        server.shutdown()
        server.server_close()
    assert len(KeepAliveApi.ports) >= 11 and len(set(KeepAliveApi.ports)) == 1, \
        KeepAliveApi.ports


class _TokenApi(BaseHTTPRequestHandler):
    """Answers every POST 201 and remembers each request's Authorization header."""

    protocol_version = "HTTP/1.1"
    seen: list[str] = []

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.seen.append(self.headers.get("Authorization", ""))
        body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Success"}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def test_a_bearer_token_is_refreshed_at_most_every_period(tmp_path, monkeypatch) -> None:
    """With a token kubeconfig the client's refresh hook would set the whole configuration
    again (every environment variable read) before each request; connect() throttles it:
    every request still carries the token, the configuration is set again once for 20
    writes (the loader's hook reinstalls itself when it runs: the throttle stays in front)."""
    from kubernetes.config.kube_config import KubeConfigLoader

    from fluxinfra.scheduler.client import ThrottledRefresh, connect

    set_again = []
    real_set_config = KubeConfigLoader._set_config

    def counting_set_config(loader, configuration):
        set_again.append(1)
        return real_set_config(loader, configuration)
    monkeypatch.setattr(KubeConfigLoader, "_set_config", counting_set_config)

    _TokenApi.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _TokenApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {
            "server": f"http://127.0.0.1:{server.server_address[1]}"}}],
        "users": [{"name": "u", "user": {"token": "sa-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    try:
        api = connect(str(kubeconfig))
        configuration = api._core.api_client.configuration
        loaded = len(set_again)  # the load itself
        for i in range(20):
            api.bind("default", f"p{i}", f"uid-{i}", "n0")
        assert isinstance(configuration.refresh_api_key_hook, ThrottledRefresh)
        beside = ClientKubeApi.on_settings_of(api, connections=2)  # a pool of its own
        beside.bind("default", "q0", "uid-q0", "n0")
        hook = beside.api_client.configuration.refresh_api_key_hook
        assert isinstance(hook, ThrottledRefresh) and \
            hook is not configuration.refresh_api_key_hook, "a throttle of its own"
    finally:
        server.shutdown()
        server.server_close()
    assert _TokenApi.seen == ["Bearer sa-token"] * 21
    assert len(set_again) - loaded == 2, "once per configuration"


def test_throttled_refresh_runs_the_hook_once_per_period_across_threads() -> None:
    from fluxinfra.scheduler.client import ThrottledRefresh

    now = [100.0]
    calls: list[object] = []
    refresh = ThrottledRefresh(calls.append, period=10.0, clock=lambda: now[0])
    threads = [threading.Thread(target=refresh, args=("cfg",)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["cfg"]
    now[0] = 109.9
    refresh("cfg")
    assert len(calls) == 1
    now[0] = 110.0
    refresh("cfg")
    assert len(calls) == 2
