"""``QueueClient`` (the real ``kubernetes`` client) against a small fake API server on loopback:
the URLs, verbs, content types and bodies of what the queue writes; errors as ApiError."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from fluxinfra.kube.fluxjob import fluxjob_object
from fluxinfra.queue.kube import QueueClient
from fluxinfra.scheduler.client import ClientKubeApi
from fluxinfra.scheduler.kube import ApiError

from .http_double import JsonHandler


class Fake(JsonHandler):
    calls: list[tuple[str, str, str, Any]] = []

    def _record(self, verb: str) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.calls.append((verb, self.path, self.headers.get("Content-Type", ""), body))
        return body

    def do_GET(self) -> None:  # noqa: N802
        self._record("GET")
        self._reply(200, {"kind": "JobList", "apiVersion": "batch/v1",
                          "metadata": {"resourceVersion": "5"}, "items": [{"metadata": {
                              "name": "j", "namespace": "ns", "uid": "u1"}}]})

    def do_POST(self) -> None:  # noqa: N802
        body = self._record("POST")
        if body["metadata"]["name"] == "exists":
            self._reply(409, {"kind": "Status", "code": 409, "reason": "AlreadyExists",
                              "message": "exists"})
        else:
            self._reply(201, {**body, "metadata": {**body["metadata"], "uid": "new"}})

    def do_PATCH(self) -> None:  # noqa: N802
        body = self._record("PATCH")
        self._reply(200, body if isinstance(body, dict) else {})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def client():
    from kubernetes import client as k8s

    server = ThreadingHTTPServer(("127.0.0.1", 0), Fake)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = k8s.Configuration()
    config.host = f"http://127.0.0.1:{server.server_address[1]}"
    Fake.calls = []
    yield QueueClient.on_settings_of(ClientKubeApi(k8s.ApiClient(config)), connections=4)
    server.shutdown()


def test_queue_writes_go_where_the_api_server_expects_them(client):
    body = fluxjob_object("ns", "job-j", owners=[], queue="default",
                          pod_sets=[{"name": "main", "count": 1}], priority=0, duration=60,
                          jobspec="", queued_at="2026-01-01T00:00:00.000001Z")
    assert client.create_fluxjob("ns", body)["metadata"]["uid"] == "new"
    client.patch_fluxjob_status("ns", "job-j", {"state": "Queued", "estimatedStart": None})
    client.patch_job("ns", "j", {"spec": {"suspend": False}})
    client.patch_pod("ns", "p", [{"op": "remove", "path": "/spec/schedulingGates/0"}])
    calls = [(verb, path.split("?")[0], ctype) for verb, path, ctype, _ in Fake.calls]
    # a POST without a Content-Type is read as JSON, the API server's first media type
    assert calls[0][2] in ("", "application/json")
    calls[0] = calls[0][:2] + ("application/json",)
    assert calls == [
        ("POST", "/apis/queue.fluxinfra.io/v1alpha1/namespaces/ns/fluxjobs", "application/json"),
        ("PATCH", "/apis/queue.fluxinfra.io/v1alpha1/namespaces/ns/fluxjobs/job-j/status",
         "application/merge-patch+json"),
        ("PATCH", "/apis/batch/v1/namespaces/ns/jobs/j", "application/merge-patch+json"),
        ("PATCH", "/api/v1/namespaces/ns/pods/p", "application/json-patch+json"),
    ]
    assert Fake.calls[1][3] == {"status": {"state": "Queued", "estimatedStart": None}}
    assert Fake.calls[3][3] == [{"op": "remove", "path": "/spec/schedulingGates/0"}]


def test_lists_jobs_and_maps_conflicts(client):
    items, rv = client.list_objects("jobs")
    assert rv == "5" and items[0]["metadata"]["uid"] == "u1"
    assert Fake.calls[0][1].startswith("/apis/batch/v1/jobs")
    body = fluxjob_object("ns", "exists", owners=[], queue="default",
                          pod_sets=[{"name": "main", "count": 1}], priority=0, duration=60,
                          jobspec="", queued_at="2026-01-01T00:00:00Z")
    with pytest.raises(ApiError) as err:
        client.create_fluxjob("ns", body)
    assert err.value.conflict


def test_the_queue_has_a_connection_pool_of_its_own():
    """Its watches hold pooled connections while they stream; its writes need more than the
    client's default (5 x cores) beside them, and the scheduler's binds keep their own."""
    from kubernetes import client as k8s

    config = k8s.Configuration()
    config.host = "http://127.0.0.1:1"
    base = ClientKubeApi(k8s.ApiClient(config))
    queue = QueueClient.on_settings_of(base, connections=40)
    pool = queue.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"]
    assert pool == 40
    assert queue._batch.api_client is queue.api_client is queue._custom.api_client
    assert queue._core.api_client is queue.api_client is not base.api_client
    assert base.api_client.configuration.connection_pool_maxsize == config.\
        connection_pool_maxsize != 40
    assert queue.api_client.configuration.host == "http://127.0.0.1:1"


def test_the_queue_client_keeps_the_schedulers_timeouts_and_page_size():
    """``--api-timeout`` and ``--page-size`` hold for the queue's calls too."""
    from kubernetes import client as k8s

    from fluxinfra.scheduler.client import Timeouts

    config = k8s.Configuration()
    config.host = "http://127.0.0.1:1"
    base = ClientKubeApi(k8s.ApiClient(config), timeouts=Timeouts(read=7.5), page_size=42)
    queue = QueueClient.on_settings_of(base, connections=8)
    assert queue.timeouts.call() == (5.0, 7.5)
    assert queue.page_size == 42
    with pytest.raises(ValueError, match="connections 0"):
        QueueClient.on_settings_of(base, connections=0)
