"""The stack's configured FluxJobQueues, made by the controller: the real ``kubernetes`` client's
``CustomObjectsApi`` against a small fake API server on loopback (a double of the API server's
custom-object endpoints: 404 when absent, 201 on create, 409 when it exists, merge patch).
tests/e2e/test_stacks.py checks the same against the real API server."""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from fluxinfra.errors import ConfigError
from fluxinfra.queue.configured import (
    MANAGED_LABEL,
    ensure_queues,
    parse_queue_config,
    start_keeping,
)

from .http_double import JsonHandler

PREFIX = "/apis/queue.fluxinfra.io/v1alpha1/namespaces/"


class CustomObjectsServerDouble(JsonHandler):
    """FluxJobQueues by (namespace, name); ``fail`` answers the next N requests with 500."""

    objects: dict[tuple[str, str], dict[str, Any]] = {}
    calls: list[tuple[str, str, str]] = []
    fail = 0
    conflict_on_create = False

    def log_message(self, *args: Any) -> None:
        pass

    def _status(self, code: int, reason: str) -> None:
        self._reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                           "reason": reason, "code": code})

    def _key(self) -> tuple[str, ...]:
        parts = self.path[len(PREFIX):].split("?")[0].split("/")
        return (parts[0], parts[2]) if len(parts) > 2 else (parts[0],)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def _handle(self, verb: str) -> None:
        body = self._body()
        type(self).calls.append((verb, self.path, self.headers.get("Content-Type", "")))
        if type(self).fail:
            type(self).fail -= 1
            return self._status(500, "InternalError")
        key = self._key()
        store = type(self).objects
        if verb == "GET":
            return self._reply(200, store[key]) if key in store else \
                self._status(404, "NotFound")
        if verb == "POST":
            key = (key[0], body["metadata"]["name"])
            if key in store or type(self).conflict_on_create:
                return self._status(409, "AlreadyExists")
            store[key] = body
            return self._reply(201, body)
        if verb == "PATCH":
            store[key]["spec"].update(body["spec"])
            return self._reply(200, store[key])
        return self._status(405, "MethodNotAllowed")

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._handle("PATCH")


@pytest.fixture
def custom():
    from kubernetes import client

    double = CustomObjectsServerDouble
    double.objects, double.calls, double.fail, double.conflict_on_create = {}, [], 0, False
    server = ThreadingHTTPServer(("127.0.0.1", 0), double)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = client.Configuration()
    settings.host = f"http://127.0.0.1:{server.server_address[1]}"
    api_client = client.ApiClient(settings)
    yield client.CustomObjectsApi(api_client)
    api_client.close()
    server.shutdown()


QUEUES = [{"namespace": "team-a", "name": "default", "maxRunning": 4, "maxCores": "8"},
          {"namespace": "team-b", "name": "gpu", "maxGPUs": 2}]


def test_absent_queues_are_created_with_the_stack_limits_and_marked(custom) -> None:
    done = ensure_queues(custom, QUEUES, "fluxion")
    assert done == ["team-a/default: created", "team-b/gpu: created"]
    made = CustomObjectsServerDouble.objects[("team-a", "default")]
    assert made["kind"] == "FluxJobQueue" and made["apiVersion"] == "queue.fluxinfra.io/v1alpha1"
    assert made["spec"] == {"maxRunning": 4, "maxCores": "8"}
    assert made["metadata"]["labels"] == {MANAGED_LABEL: "fluxion"}
    assert [c[0] for c in CustomObjectsServerDouble.calls] == ["GET", "POST", "GET", "POST"]


def test_a_queue_as_configured_is_left_alone_and_other_limits_are_patched_back(custom) -> None:
    ensure_queues(custom, QUEUES, "fluxion")
    CustomObjectsServerDouble.calls.clear()
    assert ensure_queues(custom, QUEUES, "fluxion") == ["team-a/default: as configured",
                                                        "team-b/gpu: as configured"]
    assert [c[0] for c in CustomObjectsServerDouble.calls] == ["GET", "GET"]
    # a namespace admin raised the limit; the stack owns it and sets it back (only that field)
    CustomObjectsServerDouble.objects[("team-a", "default")]["spec"]["maxRunning"] = 99
    CustomObjectsServerDouble.objects[("team-a", "default")]["spec"]["note"] = "kept"
    CustomObjectsServerDouble.calls.clear()
    done = ensure_queues(custom, QUEUES[:1], "fluxion")
    assert done == ["team-a/default: limits set to the stack's {'maxRunning': 4}"]
    verb, path, content_type = CustomObjectsServerDouble.calls[-1]
    assert verb == "PATCH" and path.endswith("/team-a/fluxjobqueues/default")
    assert content_type == "application/merge-patch+json"
    assert CustomObjectsServerDouble.objects[("team-a", "default")]["spec"] == {
        "maxRunning": 4, "maxCores": "8", "note": "kept"}


def test_another_replica_creating_it_first_is_fine_and_server_errors_are_raised(custom) -> None:
    from kubernetes.client.exceptions import ApiException

    CustomObjectsServerDouble.conflict_on_create = True
    assert ensure_queues(custom, QUEUES[:1], "fluxion") == [
        "team-a/default: made by another replica"]
    CustomObjectsServerDouble.conflict_on_create = False
    CustomObjectsServerDouble.fail = 1
    with pytest.raises(ApiException) as err:
        ensure_queues(custom, QUEUES[:1], "fluxion")
    assert err.value.status == 500


def test_the_keeper_retries_until_the_api_server_answers(custom) -> None:
    CustomObjectsServerDouble.fail = 3
    thread = start_keeping(custom, QUEUES, "fluxion", first_wait=0.01)
    thread.join(10)
    assert not thread.is_alive()
    assert set(CustomObjectsServerDouble.objects) == {("team-a", "default"), ("team-b", "gpu")}


@pytest.mark.parametrize(("text", "words"), [
    ("{not json", "not JSON"),
    ('{"namespace": "a"}', "not a list"),
    ('[{"name": "q"}]', "lacks namespace and name"),
    ('[{"namespace": "a", "name": "q", "maxPods": 3}]', "unknown keys ['maxPods']"),
])
def test_a_bad_queue_config_is_refused_naming_the_flag(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_queue_config(text)
    assert "--queue-config" in str(err.value) and words in str(err.value)
