"""The admission webhook: broken AdmissionReviews through ``review()`` and through the real
HTTPS handler on 127.0.0.1.

The contract: ``review()`` never raises and always returns a well-formed AdmissionReview
(``response.uid`` the request's, ``allowed`` a boolean; a refusal has code 400, 403 or 422 and
a message; a patch is base64 JSON Patch); never the 500 of a failure inside. Over HTTPS every
request is answered (200 with such a review, or 400 for a body that is not one), within the
client's timeout, and the server keeps answering.
"""

from __future__ import annotations

import base64
import copy
import http.client
import json
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from services_fuzz import broken, fuzz, json_values

from fluxinfra.pki import make_service_tls
from fluxinfra.queue.webhook import WebhookConfig, review, serve

CONFIG = WebhookConfig(scheduler_name="fluxion", admitters=frozenset({"system:sa:queue"}))
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "p", "namespace": "team-a", "labels": {"app": "x"},
                    "annotations": {"fluxinfra.io/duration": "1h"},
                    "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u",
                                         "apiVersion": "apps/v1", "controller": True}]},
       "spec": {"schedulerName": "fluxion", "priority": 5,
                "schedulingGates": [{"name": "other"}],
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "x"}},
                     "topologyKey": "kubernetes.io/hostname"}]}},
                "containers": [{"name": "c", "image": "busybox",
                                "ports": [{"containerPort": 80, "hostPort": 8080}],
                                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                                              "limits": {"nvidia.com/gpu": "1"}}}]},
       "status": {"phase": "Pending"}}
JOB = {"apiVersion": "batch/v1", "kind": "Job",
       "metadata": {"name": "j", "namespace": "team-a", "labels": {"team": "a"}},
       "spec": {"parallelism": 2, "suspend": True, "template": {
           "metadata": {"labels": {"fluxinfra.io/group": "g", "fluxinfra.io/group-size": "2"}},
           "spec": copy.deepcopy(POD["spec"])}}}


def admission(obj: Any, kind: str, operation: str, old: Any, user: str) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0f1e", "kind": {"group": "", "version": "v1", "kind": kind},
        "namespace": "team-a", "operation": operation, "userInfo": {"username": user},
        "object": obj, "oldObject": old}}


@st.composite
def reviews(draw) -> Any:
    """Mostly AdmissionReviews of broken Pods and Jobs; sometimes a broken envelope or any
    JSON at all."""
    kind = draw(st.sampled_from(["Pod", "Job"]))
    seed = POD if kind == "Pod" else JOB
    operation = draw(st.sampled_from(["CREATE", "UPDATE", "DELETE"]))
    obj = draw(broken([seed]))
    old = draw(broken([seed])) if operation == "UPDATE" else None
    user = draw(st.sampled_from(["alice", "system:sa:queue"]))
    body = admission(obj, kind, operation, old, user)
    shape = draw(st.sampled_from(["object", "object", "object", "envelope", "any"]))
    if shape == "envelope":
        return draw(broken([body], edits=2))
    if shape == "any":
        return draw(json_values())
    return body


def well_formed(body: Any, answer: dict[str, Any]) -> dict[str, Any]:
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert isinstance(response["allowed"], bool) and isinstance(response["uid"], str)
    request = body.get("request") if isinstance(body, dict) else None
    if isinstance(request, dict) and isinstance(request.get("uid"), str) and request["uid"]:
        assert response["uid"] == request["uid"]
    if response["allowed"]:
        if "patch" in response:
            assert response["patchType"] == "JSONPatch"
            ops = json.loads(base64.b64decode(response["patch"]))
            assert isinstance(ops, list) and all(op["op"] in ("add", "replace") for op in ops)
    else:
        status = response["status"]
        assert status["code"] in (400, 403, 422), status  # 500: the webhook failed inside
        assert isinstance(status["message"], str) and status["message"].strip()
    json.dumps(answer)  # the answer can be sent
    return response


@fuzz
@given(reviews())
@example(admission({"metadata": {"labels": [1]}}, "Pod", "CREATE", None, "alice"))
@example(admission({"metadata": {}, "spec": {"containers": [
    {"resources": {"requests": {"cpu": "9" * 5000}}}]}}, "Pod", "CREATE", None, "alice"))
@example(admission({"metadata": {}, "spec": {"containers": [
    {"resources": {"requests": {"cpu": "1e5000"}}}]}}, "Pod", "CREATE", None, "alice"))
@example(admission({"metadata": {"ownerReferences": "x"}}, "Job", "CREATE", None, "alice"))
@example(admission({"spec": {"suspend": "no"}}, "Job", "UPDATE", JOB, "alice"))
@example(admission(None, "Pod", "UPDATE", {"spec": {"schedulingGates": [
    {"name": "fluxinfra.io/queue"}]}}, "alice"))  # found: an update with no object
@example({"request": {"uid": 5}})
@example([1])
def test_review(body: Any) -> None:
    well_formed(body, review(body, CONFIG))


@pytest.fixture(scope="module")
def https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, ssl.SSLContext]]:
    directory = tmp_path_factory.mktemp("tls")
    tls = make_service_tls(["127.0.0.1"], "unused-client")  # the project's own pki
    ca, cert, key = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    for path, text in ((ca, tls.ca_cert), (cert, tls.server_cert), (key, tls.server_key)):
        path.write_text(text)
    server = serve(CONFIG, str(cert), str(key), host="127.0.0.1", port=0)
    yield server.server_address[1], ssl.create_default_context(cafile=str(ca))
    server.shutdown()
    server.server_close()


class Client:
    """One kept-alive HTTPS connection, opened again when the server closed it."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port, self.context = port, context
        self.conn: http.client.HTTPSConnection | None = None

    def post(self, data: bytes) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPSConnection("127.0.0.1", self.port,
                                                    context=self.context, timeout=10)
        try:
            self.conn.request("POST", "/mutate?timeout=3s", body=data,
                              headers={"Content-Type": "application/json"})
            resp = self.conn.getresponse()
            answer = resp.read()
        except BaseException:
            self.conn.close()  # a reset or a timeout fails the input, not the ones after it
            self.conn = None
            raise
        if resp.will_close:  # the server said "Connection: close"
            self.conn.close()
            self.conn = None
        return resp.status, answer


@pytest.fixture(scope="module")
def client(https: tuple[int, ssl.SSLContext]) -> Iterator[Client]:
    c = Client(*https)
    yield c
    if c.conn is not None:
        c.conn.close()


@fuzz
@given(st.one_of(reviews().map(lambda b: json.dumps(b).encode()), st.binary(max_size=300),
                 st.sampled_from([b"", b"null", b"[]", b"{", b"[" * 5000 + b"]" * 5000,
                                  "\u2028".encode(), b"\xff\xfe"])))
@example(b"[" * 100_001 + b"]" * 100_001)
def test_handler(client: Client, data: bytes) -> None:
    status, answer = client.post(data)
    assert status in (200, 400), (status, answer[:200])
    if status == 400:
        assert answer.startswith(b"not an AdmissionReview: ")
        return
    well_formed(json.loads(data), json.loads(answer))


def test_the_handler_answers_after_the_fuzzing(client: Client) -> None:
    status, answer = client.post(json.dumps(admission(POD, "Pod", "CREATE", None,
                                                       "alice")).encode())
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True
