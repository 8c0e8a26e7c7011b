"""The rendered Deployments and the programs they start agree.

Each Deployment's container ``args`` are appended to the image's ENTRYPOINT (``tini -- fluxinfra``,
from the Containerfile), so they must start with a ``fluxinfra`` subcommand and the rest must parse
with that subcommand's real argparse parser (the one its ``main`` uses). The parsed values are then
held against the manifests: probes and ports hit the port the process listens on, the scheduler
elects on the Lease its Role grants, and ``--fluxion-service`` names the stack's Service and port.
A flag renamed in ``fluxinfra/cli`` or a port changed on one side fails here, not in a cluster.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import inspect
import io
import json
import tomllib
from contextlib import redirect_stderr
from pathlib import Path

import pytest

from fluxinfra.cli import COMMANDS
from fluxinfra.k8s import fluxion_service, scheduler
from fluxinfra.k8s.config import match_policy
from fluxinfra.pki import certificate_names

ROOT = Path(__file__).resolve().parents[2]
ALL_INTERFACES = {"0.0.0.0", "::", "[::]", ""}


def image_entrypoint() -> list[str]:
    lines = (ROOT / "Containerfile").read_text().splitlines()
    return json.loads([ln for ln in lines if ln.startswith("ENTRYPOINT ")][-1][len("ENTRYPOINT "):])


def parse_args(container: dict) -> tuple[str, argparse.Namespace]:
    """(subcommand, parsed options) for what the container runs: ENTRYPOINT + args."""
    assert "command" not in container, (
        f"container {container['name']}: 'command' would replace the image's ENTRYPOINT (tini)")
    args = container["args"]
    assert args and args[0] in COMMANDS, (
        f"container {container['name']}: args {args} must start with a fluxinfra subcommand "
        f"({', '.join(COMMANDS)}), since the image runs `fluxinfra <args>`")
    module = importlib.import_module(COMMANDS[args[0]][0])
    assert "parser().parse_args(argv)" in inspect.getsource(module.main), (
        f"{module.__name__}.main no longer parses with parser(); this test would check the "
        "wrong parser")
    err = io.StringIO()
    try:
        with redirect_stderr(err):
            return args[0], module.parser().parse_args(args[1:])
    except SystemExit:
        raise AssertionError(f"container {container['name']}: `fluxinfra {' '.join(args)}` "
                             f"does not parse: {err.getvalue().strip()}") from None


def deployment(manifests: list[dict], component: str) -> dict:
    found = [mf for mf in manifests if mf["kind"] == "Deployment"
             and mf["metadata"]["labels"]["app.kubernetes.io/name"] == component]
    assert len(found) == 1, f"{len(found)} {component} Deployments"
    return found[0]


def only_container(dep: dict) -> dict:
    containers = dep["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1, dep["metadata"]["name"]
    return containers[0]


def container_port(container: dict, port: int | str) -> int:
    """A probe's or Service's port (a number or a container port's name) as a number."""
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    assert port in named, f"container {container['name']}: no port named {port!r} ({named})"
    return named[port]


def probe_ports(container: dict) -> dict[str, int]:
    out = {}
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = container.get(kind)
        assert probe, f"container {container['name']}: no {kind}"
        action = probe.get("httpGet") or probe.get("grpc") or probe.get("tcpSocket")
        assert action, f"container {container['name']}: {kind} has no network action"
        out[kind] = container_port(container, action["port"])
    return out


def started(stack: str, manifests: list[dict], component: str, subcommand: str, port_name: str,
            probe_flag: str = "port") -> tuple[dict, dict, argparse.Namespace, str]:
    """The component's Deployment, its container and parsed args, after the checks every
    long-running fluxinfra process shares: the right subcommand, a policy the matcher reads, the
    named container port on the port it listens on and the probes on ``probe_flag``'s port
    (the service's plain health port), on all interfaces."""
    dep = deployment(manifests, component)
    container = only_container(dep)
    sub, ns = parse_args(container)
    where = f"{stack}: Deployment {dep['metadata']['name']}"
    assert sub == subcommand, where
    assert match_policy(ns.policy) is None, where
    assert ns.host in ALL_INTERFACES, f"{where}: --host {ns.host} is not reachable by the kubelet"
    assert set(probe_ports(container).values()) == {getattr(ns, probe_flag)}, where
    assert container_port(container, port_name) == ns.port, where
    return dep, container, ns, where


def mounted_secret(manifests: list[dict], dep: dict, container: dict, path: str) -> dict:
    """The Secret the container reads at ``path`` (a rendered Secret, mounted there)."""
    pod = dep["spec"]["template"]["spec"]
    mount = next((m for m in container.get("volumeMounts", []) if m["mountPath"] == path), None)
    assert mount, f"{dep['metadata']['name']}: nothing mounted at {path}"
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    name = volume["secret"]["secretName"]
    found = [s for s in manifests if s["kind"] == "Secret" and s["metadata"]["name"] == name
             and s["metadata"]["namespace"] == dep["metadata"]["namespace"]]
    assert len(found) == 1, f"{dep['metadata']['name']}: Secret {name} is not rendered"
    return found[0]


def test_the_image_entrypoint_is_the_fluxinfra_command():
    entry = image_entrypoint()
    assert entry[:2] == ["/usr/bin/tini", "--"], entry
    assert entry[-1] == "fluxinfra", entry
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["fluxinfra"] == "fluxinfra.cli:script"


def test_scheduler_args_parse_and_match_its_manifests(stack_manifests):
    dep, container, ns, where = started(*stack_manifests, scheduler.COMPONENT, "scheduler",
                                        "http")
    manifests = stack_manifests[1]
    assert ns.allocator == "fluxion", where
    # The scrape annotation reaches the HTTP server the process opens, as the probes do.
    notes = dep["spec"]["template"]["metadata"]["annotations"]
    assert int(notes["prometheus.io/port"]) == ns.port, where
    # Leader election: on, on the Lease the Role names, identity from the downward API.
    assert ns.leader_elect is True, where
    namespace = dep["metadata"]["namespace"]
    assert ns.lease_namespace == namespace, where
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
           for e in container.get("env", [])}
    assert env.get("POD_NAME") == "metadata.name", f"{where}: the Lease identity"
    assert env.get("POD_NAMESPACE") == "metadata.namespace", where
    account = dep["spec"]["template"]["spec"]["serviceAccountName"]
    bound = {b["roleRef"]["name"] for b in manifests if b["kind"] == "RoleBinding"
             and b["metadata"]["namespace"] == namespace
             and {"kind": "ServiceAccount", "name": account, "namespace": namespace}
             in b["subjects"]}
    roles = [r for r in manifests if r["kind"] == "Role" and r["metadata"]["name"] in bound
             and r["metadata"]["namespace"] == namespace]
    verbs = {(verb, name) for r in roles for rule in r["rules"]
             if "leases" in rule["resources"] for verb in rule["verbs"]
             for name in rule.get("resourceNames", [None])}
    assert {("get", ns.lease_name), ("update", ns.lease_name), ("create", None)} <= verbs, (
        f"{where}: the Role bound to {account} does not cover Lease {ns.lease_name}: {verbs}")
    if dep["spec"]["replicas"] > 1:
        assert dep["spec"]["strategy"]["type"] == "RollingUpdate", where


def test_scheduler_reaches_the_stacks_fluxion_service(stack_manifests):
    stack, manifests = stack_manifests
    _, sched = parse_args(only_container(deployment(manifests, scheduler.COMPONENT)))
    if not sched.fluxion_service:
        pytest.skip(f"stack {stack}: the scheduler matches in process (no --fluxion-service)")
    host, _, port = sched.fluxion_service.rpartition(":")
    services = {f"{s['metadata']['name']}.{s['metadata']['namespace']}.svc.cluster.local": s
                for s in manifests if s["kind"] == "Service"}
    assert host in services, f"{stack}: --fluxion-service {host} is not a rendered Service"
    svc_port = next((p for p in services[host]["spec"]["ports"] if p["port"] == int(port)), None)
    assert svc_port, f"{stack}: Service {host} has no port {port}"
    dep = deployment(manifests, fluxion_service.COMPONENT)
    container = only_container(dep)
    _, service = parse_args(container)
    assert container_port(container, svc_port["targetPort"]) == service.port, stack
    assert services[host]["spec"]["selector"].items() <= \
        dep["spec"]["template"]["metadata"]["labels"].items(), stack
    # Both ends of the mutual TLS: one CA; the server certificate names the host dialled.
    sched_dep = deployment(manifests, scheduler.COMPONENT)
    sched_container = only_container(sched_dep)
    assert sched.fluxion_tls_dir, f"{stack}: the scheduler talks to the service in plain text"
    client = mounted_secret(manifests, sched_dep, sched_container, sched.fluxion_tls_dir)
    server = mounted_secret(manifests, dep, container, service.tls_dir)
    assert client["data"]["ca.crt"] == server["data"]["ca.crt"], stack
    assert host in certificate_names(base64.b64decode(server["data"]["tls.crt"]).decode()), stack
    # The service's NetworkPolicy admits the scheduler's pods on the gRPC port.
    policies = [p for p in manifests if p["kind"] == "NetworkPolicy" and
                p["spec"]["podSelector"]["matchLabels"].items()
                <= dep["spec"]["template"]["metadata"]["labels"].items()]
    assert len(policies) == 1, stack
    sched_labels = sched_dep["spec"]["template"]["metadata"]["labels"].items()
    assert any(rule["from"][0]["podSelector"]["matchLabels"].items() <= sched_labels
               and rule["ports"] == [{"protocol": "TCP", "port": service.port}]
               for rule in policies[0]["spec"]["ingress"] if "from" in rule), stack


def test_fluxion_service_args_parse_and_match_its_manifests(stack_manifests):
    dep, container, ns, where = started(*stack_manifests, fluxion_service.COMPONENT, "service",
                                        "grpc", probe_flag="health_port")
    stack, manifests = stack_manifests
    # No file or recipe: in a pod the service builds its graph from the cluster.
    assert ns.graph is None and ns.recipe is None, where
    # Mutual TLS from the rendered server Secret; the plain port is health only, not exposed.
    secret = mounted_secret(manifests, dep, container, ns.tls_dir)
    assert set(secret["data"]) == {"ca.crt", "tls.crt", "tls.key"}, where
    assert container_port(container, "health") == ns.health_port != ns.port, where
    labels = dep["spec"]["template"]["metadata"]["labels"].items()
    for svc in (mf for mf in manifests if mf["kind"] == "Service"):
        selector = svc["spec"].get("selector")
        if selector and selector.items() <= labels:
            for port in svc["spec"]["ports"]:
                assert container_port(container, port["targetPort"]) == ns.port, (
                    f"{stack}: Service {svc['metadata']['name']} port {port['port']}")


def test_a_drifted_flag_or_a_replaced_entrypoint_is_caught():
    good = {"name": "scheduler", "args": ["scheduler", "--port", "10259"]}
    assert parse_args(good)[1].port == 10259
    with pytest.raises(AssertionError, match="--leader-election"):
        parse_args({**good, "args": ["scheduler", "--leader-election"]})
    with pytest.raises(AssertionError, match="must start with a fluxinfra subcommand"):
        parse_args({**good, "args": ["--port", "10259"]})
    with pytest.raises(AssertionError, match="ENTRYPOINT"):
        parse_args({**good, "command": ["fluxinfra"]})
