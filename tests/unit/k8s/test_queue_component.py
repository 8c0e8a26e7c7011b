"""``FluxQueue``: its manifests (schema-valid, selectors, failure policy, TLS), the component
under Pulumi mocks, and its stack keys."""

from __future__ import annotations

import base64
import json

import kubernetes_validate
import pulumi
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from fluxinfra.errors import ConfigError
from fluxinfra.k8s.queue import (
    FluxQueue,
    FluxQueueArgs,
    cert_outputs,
    controller_rules,
    queue_manifests,
    webhook_names,
)
from fluxinfra.k8s.scheduler import scheduler_manifests
from fluxinfra.k8s.stack import load_stack_settings

FILE = "stacks/Pulumi.test.yaml"


def by_kind(manifests):
    out = {}
    for mf in manifests:
        out.setdefault(mf["kind"], []).append(mf)
    return out


def test_manifests_are_schema_valid_and_the_webhooks_opt_in_by_namespace_or_label():
    args = FluxQueueArgs(queues=[{"namespace": "team-a", "name": "default", "maxRunning": 2,
                                  "maxCores": "64"}])
    manifests = queue_manifests("fq", args, ca_bundle="Q0E=", tls_secret=None)
    for mf in manifests:
        if mf["apiVersion"].split("/")[0] in ("queue.fluxinfra.io",):
            continue
        kubernetes_validate.validate(mf, "1.29", strict=True)
    kinds = by_kind(manifests)
    assert [c["spec"]["names"]["kind"] for c in kinds["CustomResourceDefinition"]] == [
        "FluxJob", "FluxJobQueue"]
    hook = kinds["MutatingWebhookConfiguration"][0]
    first, second = hook["webhooks"]
    for wh in (first, second):
        assert wh["sideEffects"] == "None" and wh["failurePolicy"] == "Fail"
        assert wh["timeoutSeconds"] == 3 and wh["admissionReviewVersions"] == ["v1"]
        assert wh["clientConfig"]["caBundle"] == "Q0E="
        assert {r["resources"][0] for r in wh["rules"]} == {"jobs", "pods"}
        # pods of a Job the queue admitted never reach the webhook
        assert {"key": "fluxinfra.io/fluxjob", "operator": "DoesNotExist"} in \
            wh["objectSelector"]["matchExpressions"]
        system = next(e for e in wh["namespaceSelector"]["matchExpressions"]
                      if e["key"] == "kubernetes.io/metadata.name")
        assert {"kube-system", "fluxinfra-system"} <= set(system["values"])
    assert first["namespaceSelector"]["matchExpressions"][0] == {
        "key": "fluxinfra.io/queue", "operator": "In", "values": ["enabled"]}
    assert second["namespaceSelector"]["matchExpressions"][0]["operator"] == "NotIn"
    assert {"key": "fluxinfra.io/queue-name", "operator": "Exists"} in \
        second["objectSelector"]["matchExpressions"]
    deployment = kinds["Deployment"][0]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["args"][:2] == ["queue", "webhook"]
    assert "system:serviceaccount:fluxinfra-system:fluxion-scheduler" in \
        pod["containers"][0]["args"]
    # the API server calls the webhook for creates and for updates that start queued work
    # by anyone but the admitter (CEL; the real API server evaluates it in the e2e suite)
    for wh in (first, second):
        (condition,) = wh["matchConditions"]
        expression = condition["expression"]
        assert expression.startswith("request.operation == 'CREATE' || ")
        assert "request.userInfo.username != " \
            "'system:serviceaccount:fluxinfra-system:fluxion-scheduler'" in expression
        assert "oldObject.spec.suspend" in expression and "'fluxinfra.io/queue'" in expression
    assert kinds["PodDisruptionBudget"] and kinds["Service"][0]["spec"]["ports"][0]["port"] == 443
    # the configured queues are the controller's to make (one apply works on an empty cluster)
    assert "FluxJobQueue" not in kinds
    binding = next(b for b in kinds["ClusterRoleBinding"] if b["metadata"]["name"] ==
                   "fq-controller")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "fluxion-scheduler",
                                    "namespace": "fluxinfra-system"}]


def test_controller_rules_are_what_the_queue_does_and_no_more():
    verbs = {(r["apiGroups"][0], res): set(r["verbs"]) for r in controller_rules()
             for res in r["resources"]}
    assert verbs[("batch", "jobs")] == {"get", "list", "watch", "patch"}
    assert verbs[("queue.fluxinfra.io", "fluxjobs")] == {"get", "list", "watch", "create"}
    assert verbs[("queue.fluxinfra.io", "fluxjobs/status")] == {"patch"}
    # the configured queues: read, made when absent, their limits patched
    assert verbs[("queue.fluxinfra.io", "fluxjobqueues")] == {"get", "list", "watch", "create",
                                                              "patch"}
    assert all("delete" not in v and "*" not in v for v in verbs.values())


def test_cert_manager_mode_injects_the_ca_instead_of_a_bundle():
    args = FluxQueueArgs(tls="cert-manager", webhook_replicas=1)
    kinds = by_kind(queue_manifests("fq", args, ca_bundle="ignored"))
    hook = kinds["MutatingWebhookConfiguration"][0]
    assert hook["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "fluxinfra-system/fq"}
    assert all("caBundle" not in w["clientConfig"] for w in hook["webhooks"])
    cert = kinds["Certificate"][0]["spec"]
    assert cert["secretName"] == "fq-tls" and "fq.fluxinfra-system.svc" in cert["dnsNames"]
    assert "PodDisruptionBudget" not in kinds and "Secret" not in kinds


def test_generated_certificate_is_signed_by_the_bundle_for_the_service_names():
    names = webhook_names("fq", FluxQueueArgs())
    out = cert_outputs(names)
    ca = x509.load_pem_x509_certificate(out["ca_cert"].encode())
    leaf = x509.load_pem_x509_certificate(out["server_cert"].encode())
    ca.public_key().verify(leaf.signature, leaf.tbs_certificate_bytes,
                           ec.ECDSA(leaf.signature_hash_algorithm))
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == set(names)
    assert cert_outputs(names) != out  # fresh keys at every deploy-time creation


@pulumi.runtime.test
def test_component_declares_the_webhook_config_after_its_deployment(recorded):
    queue = FluxQueue("fqc", FluxQueueArgs(webhook_replicas=1))

    def check(_):
        secret = recorded["fqc-secret"][1]
        assert secret["type"] == "kubernetes.io/tls", "fqc-secret"
        hook = recorded["fqc-mutatingwebhookconfiguration"][1]
        bundle = base64.b64decode(hook["webhooks"][0]["clientConfig"]["caBundle"]).decode()
        leaf = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        ca = x509.load_pem_x509_certificate(bundle.encode())
        assert leaf.issuer == ca.subject, "fqc: the bundle's CA issued the serving certificate"

    names = list(queue.resources)
    return pulumi.Output.all(*[queue.resources[n].urn for n in names]).apply(check)


def settings(**config):
    raw = {f"fluxinfra:{k}": v for k, v in config.items()}
    return load_stack_settings("test", raw)


def test_stack_turns_the_scheduler_queue_on_and_names_its_account():
    s = settings(queue={"queues": [{"namespace": "a", "name": "default", "maxGPUs": 4}]})
    assert s.queue is not None and s.scheduler.queue is True
    # the configured queues go to the controller, as --queue-config JSON
    assert s.scheduler.queues == [{"namespace": "a", "name": "default", "maxGPUs": 4}]
    deployment = next(m for m in scheduler_manifests("sc", s.scheduler)
                      if m["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    config = args[args.index("--queue-config") + 1]
    assert json.loads(config) == s.scheduler.queues
    assert s.queue.scheduler_account == "fluxion-scheduler"
    assert settings(queue={"enabled": False}).scheduler.queue is False
    assert settings(scheduler={"enabled": False}).queue is None


@pytest.mark.parametrize(("config", "key", "accepted"), [
    ({"queue": {"failurePolicy": "Sometimes"}}, "fluxinfra:queue.failurePolicy", "one of Fail"),
    ({"queue": {"timeoutSeconds": 60}}, "fluxinfra:queue.timeoutSeconds", "from 1 to 30"),
    ({"queue": {"tls": "self"}}, "fluxinfra:queue.tls", "generate, cert-manager"),
    ({"queue": {"queues": [{"namespace": "a", "name": "q", "maxCores": "lots"}]}},
     "fluxinfra:queue.queues", "quantities"),
    ({"queue": {"queues": [{"namespace": "a", "name": "q", "maxRunning": -1}]}},
     "fluxinfra:queue.queues", "integers >= 0"),
    ({"queue": {"enabled": True}, "scheduler": {"enabled": False}},
     "fluxinfra:queue.enabled", "enable the scheduler"),
])
def test_bad_queue_config_names_the_key_and_what_is_accepted(config, key, accepted):
    with pytest.raises(ConfigError) as info:
        settings(**config)
    message = str(info.value)
    assert message.startswith(f"{FILE}: {key}") and accepted in message, message
