"""Stack config: every mistake stops the program with one ConfigError naming file, key, value and
what is accepted; good configs become typed Args."""

import json
from pathlib import Path

import pytest

from fluxinfra.errors import ConfigError
from fluxinfra.k8s.config import KNOWN_POLICIES, match_policy, pinned_image
from fluxinfra.k8s.stack import TOP_LEVEL, config_reference, load_stack_settings

FILE = "stacks/Pulumi.t.yaml"


def settings(**config):
    """Config as the Pulumi runtime hands it over: JSON text for objects, strings for scalars."""
    wire = {f"fluxinfra:{k}": v if isinstance(v, str) else json.dumps(v)
            for k, v in config.items()}
    return load_stack_settings("t", wire)


def test_empty_stack_gets_every_default():
    s = settings()
    assert s.cluster.mode == "existing"
    assert s.namespace == "fluxinfra-system"
    assert s.image.ref == "localhost/fluxinfra:0.1.0", "make image (podman) names it so"
    assert s.scheduler.scheduler_name == "fluxion"
    assert s.installer.flux_core_version and s.miniclusters == []


def test_scalars_arrive_as_strings_and_are_typed():
    s = settings(scheduler={"port": "10300", "installPodGroupCrd": "false"},
                 miniclusters=[{"name": "a", "size": "3", "maxSize": 8, "command": "hostname"}])
    assert s.scheduler.port == 10300 and s.scheduler.install_pod_group_crd is False
    assert s.miniclusters[0].size == 3 and s.miniclusters[0].hosts == 8


def test_scheduler_can_match_through_the_stacks_service():
    s = settings(namespace="hpc", scheduler={"fluxionService": "stack"},
                 fluxionService={"port": 5000})
    assert s.scheduler.fluxion_service == "fluxion-service.hpc.svc.cluster.local:5000"
    assert settings(scheduler={"fluxionService": "svc.other:4242"}).scheduler.fluxion_service \
        == "svc.other:4242"


def test_scheduler_replicas_elect_a_leader_while_the_service_stays_single():
    # Scheduler replicas share one Lease (only the holder schedules), so several are fine even
    # through the stack's service; service replicas each hold their own graph (see the errors).
    s = settings(scheduler={"replicas": "2", "fluxionService": "stack"})
    assert s.scheduler.replicas == 2 and s.fluxion_service.replicas == 1


def test_enabled_false_leaves_a_component_out():
    s = settings(installer={"enabled": False}, fluxionService={"enabled": "false"})
    assert s.installer is None and s.fluxion_service is None and s.scheduler is not None


def test_known_policies_are_the_matchers():
    from fluxinfra.matcher.policies import NAMED_POLICIES

    assert set(KNOWN_POLICIES) == set(NAMED_POLICIES)


def test_custom_policy_and_known_policies_are_accepted():
    for name in KNOWN_POLICIES:
        assert match_policy(name) is None
    assert match_policy("policy=high node_exclusive=true stop_on_1_matches=false") is None
    assert settings(fluxionService={"policy": "policy=low node_centric=true"})


@pytest.mark.parametrize("config, key, value, accepted", [
    ({"clusterr": {}}, "fluxinfra:clusterr", "{}", "accepted keys: fluxinfra:cluster"),
    ({"cluster": {"workerz": 3}}, "fluxinfra:cluster.workerz", "3", "accepted keys: mode"),
    ({"cluster": {"mode": "minikube"}}, "fluxinfra:cluster.mode", "'minikube'",
     "one of kind, existing"),
    ({"cluster": {"workers": "three"}}, "fluxinfra:cluster.workers", "'three'", "an integer"),
    ({"miniclusters": [{"name": "a", "size": 0, "command": "x"}]},
     "fluxinfra:miniclusters[0].size", "0", "an integer >= 1"),
    ({"miniclusters": [{"name": "a", "size": 5, "maxSize": 4, "command": "x"}]},
     "fluxinfra:miniclusters[0].size", "5", "from 1 to maxSize (4)"),
    ({"miniclusters": [{"name": "a", "mode": "ephemeral"}]},
     "fluxinfra:miniclusters[0].command", "''", "mode: persistent"),
    ({"miniclusters": [{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]},
     "fluxinfra:miniclusters[1].name", "'a'", "not already used"),
    ({"miniclusters": [{"name": "a", "mode": "persistent", "command": "x"}]},
     "fluxinfra:miniclusters[0].command", "'x'", "'' in persistent mode"),
    ({"miniclusters": [{"name": "a", "command": "flux run -N2 hostname"}]},
     "fluxinfra:miniclusters[0].command", "'flux run -N2 hostname'", "launcher: true"),
    ({"miniclusters": [{"name": "a", "command": "x", "minSize": 1}]},
     "fluxinfra:miniclusters[0].minSize", "1", "0 in ephemeral mode"),
    ({"miniclusters": [{"name": "a", "mode": "persistent", "size": 2, "minSize": 3}]},
     "fluxinfra:miniclusters[0].minSize", "3", "from 0 to size (2)"),
    ({"miniclusters": [{"name": "a", "command": "x", "size": 2, "nodes": 3}]},
     "fluxinfra:miniclusters[0].nodes", "3", "from 0 to size (2)"),
    ({"miniclusters": [{"name": "a", "command": "x", "gpusPerBroker": 2}]},
     "fluxinfra:miniclusters[0].gpusPerBroker", "2", "unless coresPerBroker"),
    ({"miniclusters": [{"name": "a", "command": "x", "podGroup": True}]},
     "fluxinfra:miniclusters[0].podGroup", "True", "set schedulerName"),
    ({"miniclusters": [{"name": "a", "command": "x", "fluxFlags": ["exclusive"]}]},
     "fluxinfra:miniclusters[0].fluxFlags", '["exclusive"]', "starting with '-'"),
    ({"miniclusters": [{"name": "a", "command": "x", "shmSize": "lots"}]},
     "fluxinfra:miniclusters[0].shmSize", "'lots'", "Kubernetes quantity"),
    ({"miniclusters": [{"name": "a", "command": "x", "imagePullSecrets": ["Reg_Cred"]}]},
     "fluxinfra:miniclusters[0].imagePullSecrets", '["Reg_Cred"]', "DNS-1123 subdomains"),
    ({"miniclusters": [{"name": "a", "command": "x",
                        "volumes": [{"name": "work", "mountPath": "/w", "emptyDir": {}}]}]},
     "fluxinfra:miniclusters[0].volumes", '"name": "work"', "not one of config, curve, work"),
    ({"miniclusters": [{"name": "a", "command": "x",
                        "volumes": [{"name": "d", "mountPath": "/d", "emptyDir": {},
                                     "hostPath": {"path": "/x"}}]}]},
     "fluxinfra:miniclusters[0].volumes", '"name": "d"', "exactly one of"),
    ({"miniclusters": [{"name": "a", "command": "x", "fluxViewPath": "opt/flux"}]},
     "fluxinfra:miniclusters[0].fluxViewPath", "'opt/flux'", "absolute path"),
    ({"kubernetesVersions": {"min": "1.28"}, "miniclusters": [
        {"name": "a", "command": "x", "services": [{"name": "db", "image": "redis:7"}]}]},
     "fluxinfra:kubernetesVersions.min", "'1.28'", "native sidecars"),
    ({"miniclusters": [{"name": "a", "command": "x", "dnsPolicy": "None"}]},
     "fluxinfra:miniclusters[0].dnsConfig", "{}", "nameservers when dnsPolicy is None"),
    ({"installer": {"hostTarget": "/sbin/init"}}, "fluxinfra:installer.hostTarget",
     "'/sbin/init'", "command name of a host process"),
    ({"installer": {"hostPrefix": "node1"}}, "fluxinfra:installer.hostPrefix", "'node1'",
     "not ending in a digit"),
    ({"installer": {"installMemory": "4 GB"}}, "fluxinfra:installer.installMemory", "'4 GB'",
     "Kubernetes quantity"),
    ({"installer": {"maxNodes": 0}}, "fluxinfra:installer.maxNodes", "0",
     "an integer from 1 to 16384"),
    ({"miniclusters": {"name": "a"}}, "fluxinfra:miniclusters", "{'name': 'a'}", "a list"),
    ({"scheduler": {"schedulerName": "Fluxion_Sched"}}, "fluxinfra:scheduler.schedulerName",
     "'Fluxion_Sched'", "DNS-1123 label"),
    ({"scheduler": {"policy": "fastest"}}, "fluxinfra:scheduler.policy", "'fastest'",
     "one of first, low, high"),
    ({"fluxionService": {"policy": "policy=fastest"}}, "fluxinfra:fluxionService.policy",
     "'policy=fastest'", "custom string"),
    ({"scheduler": {"policy": "policy=first"}}, "fluxinfra:scheduler.policy",
     "'policy=first'", "policy=high|low"),
    ({"fluxionService": {"policy": "policy=high node_exclusive=maybe"}},
     "fluxinfra:fluxionService.policy", "'policy=high node_exclusive=maybe'", "true|false"),
    ({"fluxionService": {"port": 80}}, "fluxinfra:fluxionService.port", "80",
     "from 1024 to 65535"),
    ({"image": {"tag": "latest"}}, "fluxinfra:image.tag", "'latest'", "other than"),
    ({"image": {"digest": "sha256:abc"}}, "fluxinfra:image.digest", "'sha256:abc'",
     "64 lower-case hex"),
    ({"installer": {"source": "apt"}}, "fluxinfra:installer.source", "'apt'",
     "conda-forge, prefix"),
    ({"installer": {"topology": "ring"}}, "fluxinfra:installer.topology", "'ring'", "binomial"),
    ({"installer": {"enabled": "maybe"}}, "fluxinfra:installer.enabled", "'maybe'",
     "true or false"),
    ({"namespace": "Flux_System"}, "fluxinfra:namespace", "'Flux_System'", "DNS-1123"),
    ({"kubernetesVersions": {"min": "v1.29"}}, "fluxinfra:kubernetesVersions.min", "'v1.29'",
     "like '1.29'"),
    ({"cluster": {"nodeImage": "kindest/node:latest"}}, "fluxinfra:cluster.nodeImage",
     "'kindest/node:latest'", "pinned image"),
    ({"scheduler": {"replicas": 6}}, "fluxinfra:scheduler.replicas", "6",
     "an integer from 1 to 5"),
    ({"scheduler": {"replicas": 0}}, "fluxinfra:scheduler.replicas", "0",
     "an integer from 1 to 5"),
    ({"scheduler": {"fluxionService": "nowhere"}}, "fluxinfra:scheduler.fluxionService",
     "'nowhere'", "HOST:PORT"),
    ({"scheduler": {"fluxionService": "stack"}, "fluxionService": {"enabled": False}},
     "fluxinfra:scheduler.fluxionService", "'stack'", "enable the service"),
    ({"scheduler": {"fluxionService": "stack"}, "fluxionService": {"replicas": 2}},
     "fluxinfra:fluxionService.replicas", "2", "accepted: 1"),
    ({"installer": {"tolerations": [{"key": "a", "operator": "Maybe"}]}},
     "fluxinfra:installer.tolerations", '"operator": "Maybe"', "operator Exists or Equal"),
    ({"installer": {"nodeSelector": {"a": 1}}}, "fluxinfra:installer.nodeSelector", '{"a": 1}',
     "strings to strings"),
    ({"scheduler": {"resources": {"request": {"cpu": "1"}}}}, "fluxinfra:scheduler.resources",
     '"request"', "'requests' and/or 'limits'"),
    ({"miniclusters": [{"name": "a", "command": "x", "services": [{"name": "db"}]}]},
     "fluxinfra:miniclusters[0].services", '"name": "db"', "pinned 'image'"),
    ({"miniclusters": [{"name": "a", "command": "x",
                        "services": [{"name": "flux", "image": "redis:7"}]}]},
     "fluxinfra:miniclusters[0].services", '"name": "flux"', "other than 'flux'"),
])
def test_bad_config_names_file_key_value_and_accepted(config, key, value, accepted):
    with pytest.raises(ConfigError) as info:
        settings(**config)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{FILE}: {key}"), message
    assert value in message, message
    assert accepted in message, message


def test_docs_carry_the_current_config_reference():
    doc = (Path(__file__).parents[3] / "docs" / "kubernetes.md").read_text()
    missing = [k for k in TOP_LEVEL if f"`fluxinfra:{k}`" not in doc and f"`{k}`" not in doc]
    assert not missing, f"docs/kubernetes.md lacks {missing}"
    assert config_reference() in doc, (
        "docs/kubernetes.md's config reference is stale: paste the output of "
        "python -c 'from fluxinfra.k8s.stack import config_reference; print(config_reference())'")


@pytest.mark.parametrize("ref, ok", [
    ("fluxinfra:0.1.0", True),
    ("ghcr.io/x/y:1.2@sha256:" + "a" * 64, True),
    ("ghcr.io/x/y@sha256:" + "a" * 64, True),
    ("ghcr.io/x/y", False),
    ("ghcr.io/x/y:latest", False),
    ("localhost:5000/y", False),
])
def test_pinned_image(ref, ok):
    assert (pinned_image(ref) is None) is ok, ref
