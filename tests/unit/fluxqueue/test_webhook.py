"""The admission webhook: AdmissionReview in, JSONPatch out; over real HTTPS on loopback.

Every patched object is checked against the Kubernetes schemas (kubernetes-validate, strict), the
way the API server would check what our patch made of the object.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import time
from typing import Any

import pytest
from scheduler.kube_double import make_pod, validate

from fluxinfra.kube.fluxjob import GATE, LABEL_FLUXJOB, LABEL_QUEUE_NAME
from fluxinfra.queue.webhook import WebhookConfig, review, serve

from .jsonpatch import apply_patch
from .tlsutil import make_certs

CONFIG = WebhookConfig(scheduler_name="fluxion",
                       admitters=frozenset({"system:serviceaccount:fluxinfra-system:fluxion"}))


def make_job(name: str = "train", *, parallelism: int = 2, cpu: str = "1",
             scheduler: str | None = None, labels: dict[str, str] | None = None,
             owner: dict[str, Any] | None = None, suspend: bool | None = None,
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox", "resources": {
        "requests": {"cpu": cpu, "memory": "1Gi"}}}], "restartPolicy": "Never"}
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    job: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "template": {"metadata": {"annotations": annotations or {}}, "spec": spec}},
    }
    if labels is not None:
        job["metadata"]["labels"] = labels
    if owner is not None:
        job["metadata"]["ownerReferences"] = [owner]
    if suspend is not None:
        job["spec"]["suspend"] = suspend
    validate(job)
    return job


def admission(obj: dict[str, Any], operation: str = "CREATE", old: dict[str, Any] | None = None,
              user: str = "alice") -> dict[str, Any]:
    kind = obj["kind"]
    group = "batch" if kind == "Job" else ""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0f1e2d3c", "kind": {"group": group, "version": "v1", "kind": kind},
        "resource": {"group": group, "version": "v1", "resource": kind.lower() + "s"},
        "namespace": obj["metadata"].get("namespace", "default"), "operation": operation,
        "userInfo": {"username": user}, "object": obj, "oldObject": old, "dryRun": False}}


def patched(obj: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["uid"] == "0f1e2d3c" and response["allowed"], response
    if "patch" not in response:
        return obj
    assert response["patchType"] == "JSONPatch"
    result = apply_patch(obj, json.loads(base64.b64decode(response["patch"])))
    validate(result)
    return result


def test_job_is_created_suspended_for_our_scheduler_with_its_queue():
    job = patched(make_job(), review(admission(make_job()), CONFIG))
    assert job["spec"]["suspend"] is True
    assert job["spec"]["template"]["spec"]["schedulerName"] == "fluxion"
    assert job["metadata"]["labels"] == {LABEL_QUEUE_NAME: "default"}


def test_job_keeps_its_queue_name_and_labels():
    original = make_job(labels={"app": "x", LABEL_QUEUE_NAME: "gpu"}, scheduler="fluxion",
                        suspend=True)
    job = patched(original, review(admission(original), CONFIG))
    assert job["metadata"]["labels"] == {"app": "x", LABEL_QUEUE_NAME: "gpu"}
    assert job["spec"]["suspend"] is True


def test_job_of_another_controller_is_left_alone_its_pods_are_gated():
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js",
             "uid": "u-js", "controller": True}
    original = make_job(owner=owner)
    assert "patch" not in review(admission(original), CONFIG)["response"]
    cron = dict(owner, apiVersion="batch/v1", kind="CronJob")
    assert patched(make_job(owner=cron), review(admission(make_job(owner=cron)), CONFIG))[
        "spec"]["suspend"] is True


def test_opted_out_objects_pass_untouched():
    job = make_job(labels={LABEL_QUEUE_NAME: "none"})
    assert "patch" not in review(admission(job), CONFIG)["response"]
    pod = make_pod("p", "team-a", labels={LABEL_QUEUE_NAME: "none"})
    assert "patch" not in review(admission(pod), CONFIG)["response"]


def test_pod_gets_the_gate_appended_and_our_scheduler():
    pod = make_pod("p", "team-a", scheduler="default-scheduler")
    pod["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    out = patched(pod, review(admission(pod), CONFIG))
    assert out["spec"]["schedulingGates"] == [{"name": "example.com/other"}, {"name": GATE}]
    assert out["spec"]["schedulerName"] == "fluxion"
    bare = make_pod("q", "team-a")
    del bare["spec"]["schedulerName"]
    out = patched(bare, review(admission(bare), CONFIG))
    assert out["spec"]["schedulingGates"] == [{"name": GATE}]
    assert out["spec"]["schedulerName"] == "fluxion"


@pytest.mark.parametrize("why", ["admitted-job-pod", "daemonset", "mirror", "nodename"])
def test_pods_that_are_not_gated(why):
    pod = make_pod("p", "team-a")
    meta = pod["metadata"]
    if why == "admitted-job-pod":
        meta["labels"][LABEL_FLUXJOB] = "job-train"
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                    "uid": "u1", "controller": True}]
    elif why == "daemonset":
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d",
                                    "uid": "u2", "controller": True}]
    elif why == "mirror":
        meta["annotations"]["kubernetes.io/config.mirror"] = "abc"
    else:
        pod["spec"]["nodeName"] = "n1"
    assert "patch" not in review(admission(pod), CONFIG)["response"]


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda o: o["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"),
     "spec.containers[0].resources.requests.cpu"),
    (lambda o: o["metadata"]["annotations"].update({"fluxinfra.io/duration": "soon"}),
     "fluxinfra.io/duration"),
    (lambda o: o["metadata"]["labels"].update({"fluxinfra.io/group": "g",
                                               "fluxinfra.io/group-size": "0"}),
     "fluxinfra.io/group-size"),
    (lambda o: o["spec"].update(schedulerName="volcano"), "schedulerName: 'volcano'"),
    (lambda o: o["metadata"]["labels"].update({LABEL_QUEUE_NAME: "Not_A_Name"}),
     "queue-name]: 'Not_A_Name'"),
])
def test_malformed_pods_are_refused_naming_the_field(mutate, field):
    pod = make_pod("p", "team-a")
    mutate(pod)
    response = review(admission(pod), CONFIG)["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert field in response["status"]["message"], response["status"]["message"]


def test_malformed_job_template_is_refused():
    job = make_job(annotations={"fluxinfra.io/duration": "-5"})
    response = review(admission(job), CONFIG)["response"]
    assert not response["allowed"]
    assert response["status"]["message"].startswith("spec.template: ")
    assert "fluxinfra.io/duration" in response["status"]["message"]


def test_only_the_queue_starts_queued_work():
    old = make_job(suspend=True, labels={LABEL_QUEUE_NAME: "default"})
    new = json.loads(json.dumps(old))
    new["spec"]["suspend"] = False
    refused = review(admission(new, "UPDATE", old, user="alice"), CONFIG)["response"]
    assert not refused["allowed"] and refused["status"]["code"] == 403
    assert "spec.suspend: true -> false" in refused["status"]["message"]
    ok = review(admission(new, "UPDATE", old, user=next(iter(CONFIG.admitters))), CONFIG)
    assert ok["response"]["allowed"]
    gated = make_pod("p", "team-a")
    gated["spec"]["schedulingGates"] = [{"name": GATE}]
    ungated = json.loads(json.dumps(gated))
    ungated["spec"]["schedulingGates"] = []
    assert not review(admission(ungated, "UPDATE", gated), CONFIG)["response"]["allowed"]
    # other updates (labels, another gate) are fine
    relabelled = json.loads(json.dumps(gated))
    relabelled["metadata"]["labels"]["x"] = "y"
    assert review(admission(relabelled, "UPDATE", gated), CONFIG)["response"]["allowed"]


def test_unrelated_requests_are_allowed_unchanged():
    answer = review({"request": {"uid": "u", "kind": {"kind": "Deployment"},
                                 "operation": "CREATE", "object": {}}}, CONFIG)
    assert answer["response"] == {"uid": "u", "allowed": True}


# -- over real HTTPS on loopback -----------------------------------------------------------------

@pytest.fixture(scope="module")
def https(tmp_path_factory):
    directory = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_certs(directory, ["127.0.0.1", "localhost"])
    server = serve(CONFIG, str(cert), str(key), host="127.0.0.1", port=0)
    context = ssl.create_default_context(cafile=str(ca))
    yield server.server_address[1], context, server
    server.shutdown()
    server.server_close()


def test_https_roundtrip_on_one_kept_alive_connection(https):
    port, context, server = https
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    for i in range(3):  # the API server reuses its connection; so do we
        body = json.dumps(admission(make_job(f"j{i}"))).encode()
        conn.request("POST", "/mutate?timeout=3s", body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Content-Type") == "application/json"
        job = patched(make_job(f"j{i}"), json.loads(resp.read()))
        assert job["spec"]["suspend"] is True
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    assert 'fluxinfra_queue_webhook_requests_total{allowed="true",kind="Job",' \
           'operation="CREATE"} 3' in text
    conn.close()


def test_a_connection_stuck_before_its_handshake_does_not_hold_up_the_next(https):
    """Each connection makes its TLS handshake in its own thread: one that never starts it
    (or a slow one, among the several the API server opens in a burst) delays no other."""
    port, context, _ = https
    with socket.create_connection(("127.0.0.1", port), timeout=5):  # plain TCP, no hello
        time.sleep(0.2)  # accepted by now
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=2)
        body = json.dumps(admission(make_job("after-stuck"))).encode()
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 200
        conn.close()


def test_https_refuses_clients_that_do_not_trust_it_and_answers_garbage_with_400(https):
    port, context, _ = https
    untrusting = ssl.create_default_context()
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=untrusting, timeout=5)
    with pytest.raises(ssl.SSLCertVerificationError):
        conn.request("GET", "/healthz")
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    conn.request("POST", "/mutate", body=b"{not json", headers={"Content-Length": "9"})
    assert conn.getresponse().status == 400
    conn.close()


# -- bad input: a well-formed answer, never an exception ------------------------------------------

def well_formed(answer: dict[str, Any]) -> dict[str, Any]:
    """The AdmissionReview response the API server needs, whatever came in."""
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert isinstance(response["uid"], str) and isinstance(response["allowed"], bool)
    if not response["allowed"]:
        status = response["status"]
        assert status["code"] in (400, 403, 422) and status["message"], status
    return response


@pytest.mark.parametrize(("body", "message"), [
    ([1], "not an AdmissionReview: the body is [1]"),
    (None, "not an AdmissionReview: the body is None"),
    ({"request": 5}, "not an AdmissionReview: request: 5"),
    ({"request": {"uid": 5}}, "not an AdmissionReview: request.uid: 5"),
    ({"request": {"uid": "u", "kind": "Pod"}}, "not an AdmissionReview: request.kind: 'Pod'"),
])
def test_a_body_that_is_not_an_admission_review_is_refused_with_400(body, message):
    response = well_formed(review(body, CONFIG))
    assert not response["allowed"] and response["status"]["code"] == 400
    assert response["status"]["message"].startswith(message)


def pod_review(change: dict[str, Any], kind: str = "Pod", operation: str = "CREATE",
               old: Any = None, user: str = "alice") -> dict[str, Any]:
    obj = make_pod("p", "team-a") if kind == "Pod" else make_job()
    for part, value in change.items():
        obj[part] = value
    return {"request": {"uid": "u", "kind": {"kind": kind}, "operation": operation,
                        "namespace": "team-a", "userInfo": {"username": user},
                        "object": obj, "oldObject": old}}


@pytest.mark.parametrize(("change", "kind", "message"), [
    ({"metadata": 5}, "Pod", "pod: metadata: 5 is a number"),
    ({"metadata": {"labels": {LABEL_QUEUE_NAME: 5}}}, "Pod",
     f"pod: metadata.labels[{LABEL_QUEUE_NAME}]: 5 is a number"),
    ({"metadata": {"ownerReferences": [5]}}, "Pod", "pod: metadata.ownerReferences[0]: 5"),
    ({"spec": {"schedulingGates": "x", "containers": []}}, "Pod", "pod: spec.schedulingGates:"),
    ({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1e5000"}}}]}},
     "Pod", "pod: spec.containers[0].resources.requests.cpu: '1e5000'"),
    ({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "9" * 5000}}}]}},
     "Pod", "pod: spec.containers[0].resources.requests.cpu: '9999"),
    ({"spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": 1e309}}}]}},
     "Pod", "pod: spec.containers[0].resources.limits.memory: inf is not finite"),
    ({"spec": 5}, "Job", "spec: 5 is a number"),
    ({"spec": {"template": {"metadata": 5, "spec": {}}}}, "Job", "spec.template.metadata: 5"),
    ({"metadata": {"name": "j", "ownerReferences": [{"kind": 5, "controller": True}]}}, "Job",
     "metadata.ownerReferences[0].kind: 5"),
    ({"object": 5}, "Job", "object: 5 is a number"),
])
def test_an_object_of_the_wrong_shape_is_refused_naming_the_field(change, kind, message):
    body = pod_review({k: v for k, v in change.items() if k != "object"}, kind)
    if "object" in change:
        body["request"]["object"] = change["object"]
    response = well_formed(review(body, CONFIG))
    assert not response["allowed"] and response["status"]["code"] == 422
    assert response["status"]["message"].startswith(message), response["status"]["message"]


def test_an_update_without_an_object_is_read_as_an_empty_one():
    old = make_pod("p", "team-a")
    old["spec"]["schedulingGates"] = [{"name": GATE}]
    body = pod_review({}, "Pod", "UPDATE", old)
    body["request"]["object"] = None  # found by tests/fuzz/test_fuzz_webhook.py: was a 500
    response = well_formed(review(body, CONFIG))
    assert response["status"]["code"] == 403  # no object: the gate is gone


def test_an_update_of_the_wrong_shape_is_refused_unless_the_queue_makes_it():
    old = make_job(suspend=True)
    body = pod_review({"spec": {"suspend": "no"}}, "Job", "UPDATE", old)
    response = well_formed(review(body, CONFIG))
    assert response["status"]["message"].startswith("object.spec.suspend: 'no' is a string")
    admitter = next(iter(CONFIG.admitters))
    body = pod_review({"spec": 5}, "Job", "UPDATE", 5, user=admitter)
    assert well_formed(review(body, CONFIG))["allowed"]  # the queue's own: never read


def test_a_review_that_fails_inside_is_a_500_answer_not_a_reset(monkeypatch):
    import fluxinfra.queue.webhook as webhook

    def broken(*_: Any) -> list:
        raise KeyError("a bug")

    monkeypatch.setattr(webhook, "_pod_create", broken)
    response = review(admission(make_pod("p", "team-a")), CONFIG)["response"]
    assert response == {"uid": "0f1e2d3c", "allowed": False, "status": {
        "code": 500, "reason": "InternalError",
        "message": "the webhook failed reading this request (KeyError: 'a bug'); report it as "
                   "a bug"}}


def post_raw(port: int, context: ssl.SSLContext, head: bytes, body: bytes = b"") -> bytes:
    """One request written by hand (headers a library would not send), the raw answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        tls.sendall(head + b"\r\n" + body)
        answer = b""
        while chunk := tls.recv(65536):
            answer += chunk
        return answer


@pytest.mark.parametrize(("head", "body", "says"), [
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n", b"[1]",
     b"not an AdmissionReview: the body is [1]"),
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n", b"",
     b"Content-Length '-5'"),
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n", b"",
     b"Content-Length '99999999999'"),
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n",
     b"not chunked"),
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 200002\r\n",
     b"[" * 100_001 + b"]" * 100_001, b"not an AdmissionReview"),
    (b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n", b'{"request"',
     b"not an AdmissionReview"),
])
def test_the_handler_answers_a_body_that_is_not_an_admission_review_with_400(
        https, head, body, says):
    port, context, _ = https
    answer = post_raw(port, context, head, body)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert says in answer
    assert b"\r\nConnection: close\r\n" in answer  # the body may be unread: it says it closes


def test_the_handler_answers_a_malformed_review_with_a_refusal(https):
    port, context, _ = https
    body = json.dumps(pod_review({"metadata": {"labels": [1]}})).encode()
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    response = well_formed(json.loads(resp.read()))
    assert response["status"]["message"] == "pod: metadata.labels: [1] is a list, not an object"
    conn.close()
