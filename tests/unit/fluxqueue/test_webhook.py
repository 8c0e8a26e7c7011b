"""The admission webhook: AdmissionReview in, JSONPatch out; over real HTTPS on loopback.

Every patched object is checked against the Kubernetes schemas (kubernetes-validate, strict), the
way the API server would check what our patch made of the object.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
from typing import Any

import pytest
from scheduler.kube_double import make_pod, validate

from fluxinfra.queue.api import GATE, LABEL_FLUXJOB, LABEL_QUEUE_NAME
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
