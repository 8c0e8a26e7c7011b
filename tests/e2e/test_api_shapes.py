"""The API double the unit tests use answers like a real API server on every call the
scheduler makes (see tests/unit/scheduler/api_shapes.py).

The real answers come from this cluster through the production client
(``fluxinfra.scheduler.client``); they must equal ``recorded_api_shapes.json``, which the unit
tests hold the double to where no server runs. Rerun with ``FLUXINFRA_RECORD_SHAPES=1`` to
re-record after a deliberate change (a new scenario, another Kubernetes version).
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

import pytest
from e2e_cluster import REPO, Cluster, wait_for

sys.path.insert(0, str(REPO / "tests" / "unit"))
from scheduler.api_shapes import (  # noqa: E402
    RECORDING,
    DoubleWorld,
    differences,
    observe,
)
from scheduler.kube_double import KubeApiDouble  # noqa: E402

from fluxinfra.k8s.scheduler import podgroup_crd  # noqa: E402
from fluxinfra.scheduler.client import connect  # noqa: E402
from fluxinfra.scheduler.kube import PODGROUP_GROUP, PODGROUP_PLURAL, PODGROUP_VERSION  # noqa: E402


class RealWorld:
    """The scene of ``observe`` in a real cluster, made with the official client."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        from kubernetes import client

        self.cluster = cluster
        self.namespace = namespace
        self.api_client = cluster.client()
        self.core = client.CoreV1Api(self.api_client)
        self.custom = client.CustomObjectsApi(self.api_client)
        self.ext = client.ApiextensionsV1Api(self.api_client)
        self.crd_created = False
        self.nodes: list[str] = []

    @staticmethod
    def _json(resp: Any) -> dict[str, Any]:
        return json.loads(resp.data)

    def add_node(self, name: str) -> None:
        self.nodes += self.cluster.add_hollow_nodes([name])

    def add_pod(self, name: str) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"schedulerName": "shapes-nobody",
                         "containers": [{"name": "main", "image": "busybox"}]}}
        return self._json(self.core.create_namespaced_pod(self.namespace, body,
                                                          _preload_content=False))

    def label_pod(self, name: str, labels: dict[str, str]) -> None:
        self.core.patch_namespaced_pod(name, self.namespace, {"metadata": {"labels": labels}},
                                       _preload_content=False)

    def delete_pod(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, self.namespace, _preload_content=False)

    def read_pod(self, name: str) -> dict[str, Any]:
        return self._json(self.core.read_namespaced_pod(name, self.namespace,
                                                        _preload_content=False))

    def install_podgroups(self) -> None:
        crd = podgroup_crd()
        self.ext.create_custom_resource_definition(crd, _preload_content=False)
        self.crd_created = True
        name = crd["metadata"]["name"]
        wait_for(lambda: any(c["type"] == "Established" and c["status"] == "True"
                             for c in self.cluster.get("crd", name)["status"].get(
                                 "conditions", [])), 60, f"CRD {name} established")
        # The CRD's API is served a moment after Established; wait until a list works.
        wait_for(lambda: self.cluster.kubectl("get", PODGROUP_PLURAL, "-A",
                                              check=False).returncode == 0, 60,
                 "podgroups to be served")

    def add_podgroup(self, name: str) -> None:
        body = {"apiVersion": f"{PODGROUP_GROUP}/{PODGROUP_VERSION}", "kind": "PodGroup",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"minMember": 2}}
        self.custom.create_namespaced_custom_object(PODGROUP_GROUP, PODGROUP_VERSION,
                                                    self.namespace, PODGROUP_PLURAL, body)

    def read_podgroup(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(PODGROUP_GROUP, PODGROUP_VERSION,
                                                        self.namespace, PODGROUP_PLURAL, name)

    def expired_version(self) -> str:
        # The CRD's watch cache starts at the CRD's creation: version 1 is long gone.
        return "1"

    def close(self) -> None:
        if self.nodes and self.cluster.bed is not None:
            self.cluster.bed.remove_hollow_nodes(self.nodes)
        if self.crd_created:
            self.cluster.kubectl("delete", "crd", podgroup_crd()["metadata"]["name"],
                                 "--wait=false", check=False)
        self.api_client.close()


@pytest.fixture
def real_shapes(cluster: Cluster) -> dict[str, Any]:
    if cluster.bed is None:
        pytest.skip("the recording makes Nodes and a CRD: only on a bed this session started")
    if cluster.kubectl("get", "crd", podgroup_crd()["metadata"]["name"],
                       check=False).returncode == 0:
        pytest.skip("the PodGroup CRD is installed already; the recording needs it absent")
    namespace = f"e2e-shapes-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", namespace)
    world = RealWorld(cluster, namespace)
    try:
        return observe(connect(str(cluster.kubeconfig)), world)
    finally:
        world.close()
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def test_the_recording_is_what_this_api_server_answers(real_shapes: dict[str, Any]) -> None:
    if os.environ.get("FLUXINFRA_RECORD_SHAPES"):
        RECORDING.write_text(json.dumps(real_shapes, indent=1, sort_keys=True) + "\n")
    recorded = json.loads(RECORDING.read_text())
    drift = differences(recorded, real_shapes)
    assert not drift, ("the real API server no longer answers as recorded (rerun with "
                       "FLUXINFRA_RECORD_SHAPES=1 if that is expected):\n" + "\n".join(drift))


def test_the_double_answers_like_this_api_server(real_shapes: dict[str, Any]) -> None:
    api = KubeApiDouble()
    double = observe(api, DoubleWorld(api))
    drift = differences(double, real_shapes)
    assert not drift, "the API double differs from the real server:\n" + "\n".join(drift)
