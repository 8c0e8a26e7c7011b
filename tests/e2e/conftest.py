"""Session fixtures of the e2e suite: one cluster (a bed, or the one in
``$FLUXINFRA_E2E_KUBECONFIG``), a ``kubectl``, the official client, namespaces and hollow nodes
per test.

Every test here carries the ``e2e`` marker. Without a cluster they are skipped with the reason;
under ``make e2e`` (``FLUXINFRA_E2E_REQUIRED=1``) a missing cluster is an error instead, so the
e2e target never passes by skipping everything.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e_cluster import (
    STACK_IMAGE,
    Cluster,
    E2EUnavailable,
    build_project_image,
    open_cluster,
    take_down,
    wait_for,
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    try:
        found = open_cluster(tmp_path_factory.mktemp("kubectl-cache"))
    except E2EUnavailable as why:
        if os.environ.get("FLUXINFRA_E2E_REQUIRED"):
            pytest.fail(f"e2e required but unavailable: {why}", pytrace=False)
        pytest.skip(str(why))
    yield found
    if found.owned:
        left = take_down(found)
        assert not left, "the bed left this on the machine:\n" + "\n".join(left)


@pytest.fixture(scope="session")
def kubeconfig(cluster: Cluster) -> Path:
    return cluster.kubeconfig


@pytest.fixture(scope="session")
def api_client(cluster: Cluster):
    """The official ``kubernetes`` ApiClient."""
    client = cluster.client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> str:
    if cluster.real_node is None:
        pytest.skip("needs the bed's real node (an existing cluster's nodes are not used)")
    return cluster.real_node


@pytest.fixture(scope="session")
def busybox(cluster: Cluster, real_node: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The busybox image, imported into the real node's containerd."""
    from kubebed import BUSYBOX_IMAGE, busybox_image

    tar = busybox_image(tmp_path_factory.mktemp("images"))
    cluster.bed.import_image(tar)
    return BUSYBOX_IMAGE


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    """A fresh namespace, deleted (without waiting) after the test."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    wait_for(lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", name,
                                     check=False).returncode == 0, 30,
             f"the default ServiceAccount in {name}")
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def processes() -> Iterator[list]:
    """``scheduler_run.Process``-es a test starts: stopped after it, their logs' tails printed
    (pytest shows them when the test fails)."""
    started: list = []
    yield started
    for proc in started:
        code = proc.stop()
        print(f"--- {proc.log.name} (exit {code}) ---\n{proc.tail(60)}")


@pytest.fixture
def hollow_nodes(cluster: Cluster) -> Iterator[Callable[..., list[str]]]:
    """``hollow_nodes(n, **shape)`` makes n hollow nodes (``kubebed.node_object`` keywords:
    cpu, memory, labels, taints, ...); they are deleted after the test."""
    made: list[str] = []

    def make(count: int, prefix: str = "hollow", **shape) -> list[str]:
        names = [f"{prefix}-{uuid.uuid4().hex[:6]}" for _ in range(count)]
        made.extend(cluster.add_hollow_nodes(names, **shape))
        return names
    yield make
    if made and cluster.bed is not None:
        cluster.bed.remove_hollow_nodes(made)


@pytest.fixture(scope="session")
def fluxinfra_image(cluster: Cluster, real_node: str,
                    tmp_path_factory: pytest.TempPathFactory) -> str:
    """The project's image, built by ``make image`` (podman) and imported into the real node's
    containerd under the name the stacks use (``fluxinfra:<version>``, i.e.
    ``docker.io/library/fluxinfra:<version>``); returns that name."""
    tar = tmp_path_factory.mktemp("fluxinfra-image") / "fluxinfra.tar"
    built = build_project_image(tar)
    cluster.bed.import_image(tar, tags={built: STACK_IMAGE})
    return STACK_IMAGE
