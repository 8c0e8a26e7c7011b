"""The fluxinfra container image: built offline from the local Debian base, non-root, labelled,
and serving real gRPC Match calls to a client outside the container."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
from image_podman import REPO, ULIMITS, podman, why_not_runnable

from fluxinfra import __version__

_SKIP_REASON = why_not_runnable()
pytestmark = [pytest.mark.image,
              pytest.mark.skipif(_SKIP_REASON is not None, reason=_SKIP_REASON or "")]

#: Image size regression guard (measured 252 MB: Debian minbase + python3 134 MB, the rest mostly
#: the kubernetes client and grpcio).
MAX_IMAGE_BYTES = 350e6


@pytest.fixture(scope="module")
def config(image: str) -> dict[str, Any]:
    return json.loads(podman("image", "inspect", image).stdout)[0]["Config"]


def in_image(image: str, *argv: str, entrypoint: str | None = None) -> str:
    flags = ["--entrypoint", entrypoint] if entrypoint else []
    return podman("run", "--rm", "--network=none", *ULIMITS, *flags, image, *argv).stdout


def test_runs_as_a_fixed_non_root_user(image: str, config: dict[str, Any]) -> None:
    assert config["User"] == "10001:10001", f"{image}: User is {config['User']!r}"
    assert in_image(image, "-c", "import os; print(os.getuid(), os.getgid())",
                    entrypoint="python3").split() == ["10001", "10001"]


def test_has_oci_labels_for_this_build(config: dict[str, Any], revision: str,
                                       base_image: str) -> None:
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "fluxinfra"
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.revision"] == revision
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.base.name"] == base_image
    assert labels["org.opencontainers.image.created"].endswith("Z"), labels
    assert "io.fluxinfra.stage" not in labels, "install-stage label leaked into the final image"


def test_exposes_grpc_and_metrics_ports(config: dict[str, Any]) -> None:
    assert {"4242/tcp", "10259/tcp"} <= set(config["ExposedPorts"]), config["ExposedPorts"]


def test_entrypoint_is_the_fluxinfra_cli(image: str, config: dict[str, Any]) -> None:
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "fluxinfra"]
    out = in_image(image, "--help")
    assert out.startswith("usage: fluxinfra"), out
    assert "service" in out and "scheduler" in out, out


@pytest.mark.parametrize("command", ["scheduler", "service", "query"])
def test_command_starts_in_the_image(image: str, command: str) -> None:
    out = in_image(image, command, "--help")
    assert out.startswith(f"usage: fluxinfra {command}"), out


def test_matcher_and_service_dependencies_import(image: str) -> None:
    out = in_image(image, "-c",
                   "import fluxinfra.matcher as m, grpc, kubernetes;"
                   "print(m.ResourceGraph.__name__, m.Matcher.__name__)",
                   entrypoint="python3")
    assert out.split() == ["ResourceGraph", "Matcher"], out


def test_image_size_stays_bounded(image: str) -> None:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout)
    assert size < MAX_IMAGE_BYTES, f"{image}: {size / 1e6:.0f} MB > {MAX_IMAGE_BYTES / 1e6:.0f} MB"


# -- the real service, called from outside the container ------------------------------------------

RECIPE = {"cluster": "image-test", "racks": 1, "nodes_per_rack": 2, "sockets": 1,
          "cores_per_socket": 4, "gpus_per_socket": 0, "memory_per_socket": [1, 4]}


#: podman's spelling of the restricted Pod Security level plus readOnlyRootFilesystem.
RESTRICTED = ("--read-only", "--tmpfs", "/tmp:rw,size=64m,mode=1777", "--cap-drop", "ALL",
              "--security-opt", "no-new-privileges")


def cores_jobspec(cores: int) -> dict[str, Any]:
    return {"version": 9999,
            "resources": [{"type": "slot", "count": 1, "label": "default",
                           "with": [{"type": "core", "count": cores}]}],
            "tasks": [{"command": ["true"], "slot": "default", "count": {"per_slot": 1}}],
            "attributes": {"system": {"duration": 60}}}


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service(NamedTuple):
    name: str
    port: int


def start_service(image: str, *extra: str, graph: tuple[str, ...] | None = None) -> Service:
    """`fluxinfra service` in the image, its gRPC port published on 127.0.0.1 only, confined the
    way the Kubernetes manifests confine it (fluxinfra/k8s/manifests.py): read-only root with a
    small /tmp, every capability dropped, no privilege escalation."""
    port = free_loopback_port()
    name = f"fluxinfra-image-test-{port}"
    try:
        podman("run", "--detach", "--name", name, *ULIMITS, *RESTRICTED, *extra,
               "--publish", f"127.0.0.1:{port}:4242", image,
               "service", "--port", "4242", *(graph or ("--recipe", json.dumps(RECIPE))))
        wait_serving(name, port)
    except BaseException:
        remove(name)
        raise
    return Service(name, port)


def remove(name: str) -> None:
    podman("rm", "--force", "--ignore", "--time", "2", name, check=False, timeout=60)


@pytest.fixture(scope="module")
def service(image: str) -> Iterator[Service]:
    svc = start_service(image)
    try:
        yield svc
    finally:
        remove(svc.name)


def wait_serving(name: str, port: int, timeout: float = 60) -> None:
    from fluxinfra.service.client import FluxionClient, ServiceError

    deadline = time.monotonic() + timeout
    while True:
        try:
            with FluxionClient(f"127.0.0.1:{port}", timeout=2) as client:
                if client.health() == "SERVING":
                    return
        except ServiceError:
            pass
        if time.monotonic() > deadline:
            logs = podman("logs", name, check=False)
            raise AssertionError(f"{name} not serving on 127.0.0.1:{port} after {timeout}s\n"
                                 f"{logs.stdout}{logs.stderr}")
        time.sleep(0.5)


def test_service_in_the_container_allocates_like_the_in_process_matcher(service: Service) -> None:
    from fluxinfra.matcher import Jobspec, Matcher
    from fluxinfra.matcher.recipe import graph_from_recipe
    from fluxinfra.service.client import FluxionClient

    with FluxionClient(f"127.0.0.1:{service.port}") as client:
        remote = client.match(cores_jobspec(2))
    local = Matcher(graph_from_recipe(RECIPE)).match(Jobspec.parse(cores_jobspec(2)))
    assert remote.status == local.status == "ALLOCATED", remote
    assert remote.nodes == local.nodes, (remote.nodes, local.nodes)
    assert remote.R["execution"]["R_lite"] == local.R["execution"]["R_lite"], remote.R


def test_service_in_the_container_reports_unsatisfiable_as_the_typed_error(
        service: Service) -> None:
    from fluxinfra.matcher import Unsatisfiable
    from fluxinfra.service.client import FluxionClient

    with FluxionClient(f"127.0.0.1:{service.port}") as client, pytest.raises(Unsatisfiable):
        # 4 cores per node; plain allocate would say Busy, as Fluxion does
        client.match(cores_jobspec(5), op="allocate_with_satisfiability")


def test_service_loads_a_mounted_jgf_like_the_in_process_matcher(image: str) -> None:
    from fluxinfra.matcher import Jobspec, Matcher, load_graph
    from fluxinfra.service.client import FluxionClient

    data = REPO.parent / "shared" / "fluxion-testdata" / "data" / "resource"
    if not data.is_dir():
        pytest.skip(f"{data} is absent: Fluxion's test data sits beside the repository in CI")
    graph, jobspec = data / "jgfs" / "tiny.json", data / "jobspecs" / "basics" / "test001.yaml"
    svc = start_service(image, "--volume", f"{graph}:/srv/graph.json:ro",
                        graph=("--graph", "/srv/graph.json", "--format", "jgf"))
    try:
        with FluxionClient(f"127.0.0.1:{svc.port}") as client:
            remote = client.match(jobspec.read_text())
    finally:
        remove(svc.name)
    local = Matcher(load_graph(graph.read_text(), fmt="jgf")).match(
        Jobspec.parse(jobspec.read_text()))
    assert remote.status == local.status == "ALLOCATED", remote
    assert remote.R["execution"]["R_lite"] == local.R["execution"]["R_lite"], remote.R


def test_pid_1_is_tini_so_every_command_gets_sigterm(service: Service) -> None:
    # A bare Python PID 1 ignores SIGTERM unless it installs a handler (the kernel drops
    # default-action signals to a namespace's init); tini forwards it to the command.
    comm = podman("exec", service.name, "cat", "/proc/1/comm").stdout.strip()
    assert comm == "tini", f"{service.name}: PID 1 is {comm!r}"


def test_service_stops_promptly_and_cleanly_on_sigterm(image: str) -> None:
    svc = start_service(image)
    try:
        start = time.monotonic()
        podman("stop", "--time", "10", svc.name, timeout=60)
        elapsed = time.monotonic() - start
        code = podman("inspect", "--format", "{{.State.ExitCode}}", svc.name).stdout.strip()
    finally:
        remove(svc.name)
    assert code == "0", f"{svc.name} exited {code} on SIGTERM"
    assert elapsed < 5, f"{svc.name} took {elapsed:.1f}s to stop (SIGKILL after 10 s)"
