"""``ClientKubeApi`` (the real ``kubernetes`` client) against a tiny fake API server on loopback:
the URLs it calls, the JSON it sends, watch streaming, and HTTP errors turned into ApiError."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fluxinfra.scheduler.client import ClientKubeApi
from fluxinfra.scheduler.kube import ApiError

from .kube_double import make_node, validate


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "reason": reason, "code": code}


class FakeApi(BaseHTTPRequestHandler):
    calls: list[tuple[str, str, str, Any]] = []

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

    def do_GET(self) -> None:  # noqa: N802
        self.calls.append(("GET", self.path, "", None))
        if self.path.startswith("/api/v1/nodes") and "watch=true" in self.path:
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
        if self.path.endswith("/pods/taken/binding"):
            self._send(409, status(409, "Conflict", 'pod taken is already assigned to node "x"'))
        elif self.path.endswith("/binding"):
            self._send(201, {"kind": "Status", "apiVersion": "v1", "status": "Success"})
        else:
            self._send(201, body)

    def do_PATCH(self) -> None:  # noqa: N802
        body = self._body()
        self.calls.append(("PATCH", self.path, self.headers.get("Content-Type", ""), body))
        self._send(503, status(503, "ServiceUnavailable", "etcd is sad")) \
            if "podgroups" in self.path else self._send(200, body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture()
def api() -> Iterator[ClientKubeApi]:
    from kubernetes import client

    FakeApi.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = client.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    yield ClientKubeApi(client.ApiClient(config))
    server.shutdown()


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
