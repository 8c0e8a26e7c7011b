"""Mutual TLS on the service's gRPC port, with real gRPC on loopback: the right client
certificate is served; no certificate, a certificate from another CA, or a client that does
not trust the service's CA are refused in the handshake, before any RPC (so ``LoadNodes`` from
an unauthenticated pod cannot happen)."""

from __future__ import annotations

import datetime
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fluxinfra.errors import ConfigError
from fluxinfra.kube.graph import graph_from_k8s
from fluxinfra.matcher import Matcher
from fluxinfra.pki import ServiceTls, certificate_names, make_service_tls
from fluxinfra.service._generated import fluxcli_pb2 as pb
from fluxinfra.service._generated import fluxcli_pb2_grpc as pb_grpc
from fluxinfra.service.client import CHANNEL_OPTIONS, FluxionClient, ServiceError, main
from fluxinfra.service.jobspecs import slots_jobspec
from fluxinfra.service.server import serve, serve_health
from fluxinfra.service.tls import TlsFiles, read_tls_dir

NAMES = ["localhost", "127.0.0.1"]


def write_side(root: Path, name: str, ca: str, cert: str, key: str) -> Path:
    side = root / name
    side.mkdir()
    (side / "ca.crt").write_text(ca)
    (side / "tls.crt").write_text(cert)
    (side / "tls.key").write_text(key)
    return side


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pki")
    ours = make_service_tls(NAMES, "fluxion-scheduler")
    theirs = make_service_tls(NAMES, "intruder")
    return {
        "server": write_side(root, "server", ours.ca_cert, ours.server_cert, ours.server_key),
        "client": write_side(root, "client", ours.ca_cert, ours.client_cert, ours.client_key),
        # a client certificate from another CA (it trusts our CA, so only its cert is wrong)
        "foreign": write_side(root, "foreign", ours.ca_cert, theirs.client_cert,
                              theirs.client_key),
        # our client certificate, but the client trusts another CA (a fake service's)
        "distrust": write_side(root, "distrust", theirs.ca_cert, ours.client_cert,
                               ours.client_key),
    }


def k8s_nodes(n: int) -> list[dict]:
    return [{"metadata": {"name": f"node{i}"},
             "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}} for i in range(n)]


@pytest.fixture()
def target(pki: dict[str, Path]) -> Iterator[str]:
    matcher = Matcher(graph_from_k8s(k8s_nodes(2), [], subtract_pods=False))
    server, port = serve(matcher, host="127.0.0.1", port=0, workers=2,
                         tls=read_tls_dir(str(pki["server"]), "--tls-dir"))
    yield f"127.0.0.1:{port}"
    server.stop(grace=None)


def client(target: str, side: Path | None) -> FluxionClient:
    tls = read_tls_dir(str(side), "--tls-dir") if side else None
    return FluxionClient(target, timeout=3, tls=tls)


def test_the_right_client_certificate_is_served(target: str, pki: dict[str, Path]) -> None:
    with client(target, pki["client"]) as c:
        placed = c.match(slots_jobspec(2, cores=1, duration=60))
        assert placed.status == "ALLOCATED"
        assert c.health() == "SERVING"
        assert [j["jobid"] for j in c.dump()["jobs"]] == [placed.jobid]
    with client(f"localhost:{target.rsplit(':', 1)[1]}", pki["client"]) as c:
        assert c.service_epoch()["jobs"] == 1, "the DNS name in the SANs works too"


@pytest.mark.parametrize("who", ["plaintext", "tls-without-cert", "foreign", "distrust"])
def test_unauthenticated_clients_are_refused_and_cannot_load_nodes(
        target: str, pki: dict[str, Path], who: str) -> None:
    with client(target, pki["client"]) as good:
        held = good.match(slots_jobspec(1, cores=1, duration=60)).jobid
    if who == "tls-without-cert":
        ca = (pki["client"] / "ca.crt").read_bytes()
        channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=ca),
                                      options=CHANNEL_OPTIONS)
        bad = FluxionClient(target, timeout=3, channel=channel)
    else:
        bad = client(target, None if who == "plaintext" else pki[who])
    with bad, pytest.raises(ServiceError, match="UNAVAILABLE"):
        bad.load_nodes(k8s_nodes(1))  # would forget every job
    with client(target, pki["client"]) as good:
        assert [j["jobid"] for j in good.dump()["jobs"]] == [held], "the graph is untouched"
        assert good.service_epoch()["jobs"] == 1


def test_the_plain_health_port_answers_health_and_nothing_else() -> None:
    server, port = serve_health("127.0.0.1", 0)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            resp = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=5)
            assert resp.status == health_pb2.HealthCheckResponse.SERVING
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.FluxcliServiceStub(channel).UpdateGraph(
                    pb.GraphUpdateRequest(load_nodes=pb.GraphUpdateRequest.LoadNodes(
                        nodes_json="[]")), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop(grace=None)


def test_the_client_cli_speaks_mutual_tls(target: str, pki: dict[str, Path], capsys) -> None:
    assert main(["--target", target, "--tls-dir", str(pki["client"]), "epoch"]) == 0
    assert '"epoch"' in capsys.readouterr().out
    assert main(["--target", target, "--timeout", "2", "epoch"]) == 2
    assert "UNAVAILABLE" in capsys.readouterr().err


def test_certificates_have_the_profiles_mtls_needs() -> None:
    tls = make_service_tls(["svc.ns.svc", "10.0.0.7"], "fluxion-scheduler")
    ca = x509.load_pem_x509_certificate(tls.ca_cert.encode())
    server = x509.load_pem_x509_certificate(tls.server_cert.encode())
    client_cert = x509.load_pem_x509_certificate(tls.client_cert.encode())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    for cert, usage in ((server, ExtendedKeyUsageOID.SERVER_AUTH),
                        (client_cert, ExtendedKeyUsageOID.CLIENT_AUTH)):
        cert.verify_directly_issued_by(ca)
        assert cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value == \
            x509.ExtendedKeyUsage([usage])
        assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert certificate_names(tls.server_cert) == ["svc.ns.svc", "10.0.0.7"]
    assert client_cert.subject.rfc4514_string() == "CN=fluxion-scheduler,O=fluxinfra"
    days = (server.not_valid_after_utc - server.not_valid_before_utc).days
    assert days == 3650
    assert server.not_valid_before_utc <= datetime.datetime.now(datetime.UTC)


def test_seeded_certificates_are_reproducible_and_labels_independent() -> None:
    one = make_service_tls(["a"], "c", seed=b"s" * 32, label="dev/x")
    assert one == make_service_tls(["a"], "c", seed=b"s" * 32, label="dev/x")
    other = make_service_tls(["a"], "c", seed=b"s" * 32, label="dev/y")
    assert isinstance(one, ServiceTls)
    assert len({one.ca_cert, other.ca_cert, one.server_key, other.server_key}) == 4
    fresh = make_service_tls(["a"], "c")
    assert fresh.server_key != make_service_tls(["a"], "c").server_key


@pytest.mark.parametrize(("broken", "needle"), [
    ("tls.key", "cannot read tls.key"),
    ("ca.crt", "ca.crt is not PEM"),
])
def test_a_bad_tls_dir_is_one_clear_error(tmp_path: Path, broken: str, needle: str) -> None:
    tls = make_service_tls(NAMES, "c")
    side = write_side(tmp_path, "d", tls.ca_cert, tls.server_cert, tls.server_key)
    if broken == "tls.key":
        (side / "tls.key").unlink()
    else:
        (side / "ca.crt").write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=f"--tls-dir {side}: {needle}"):
        read_tls_dir(str(side), "--tls-dir")
    assert isinstance(TlsFiles(b"", b"", b""), TlsFiles)


def test_service_process_with_tls_serves_only_certified_clients(pki: dict[str, Path]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "fluxinfra", "service", "--host", "127.0.0.1", "--port", "0",
         "--health-port", "0", "--tls-dir", str(pki["server"]), "--recipe",
         '{"cluster": "t", "racks": 1, "nodes_per_rack": 2, "sockets": 1, '
         '"cores_per_socket": 4, "memory_per_socket": [1, 4]}'],
        stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        found = re.search(r"listening on 127\.0\.0\.1:(\d+) \(mutual TLS.*plain-text health "
                          r"on port (\d+)\)", line)
        assert found, line
        target = f"127.0.0.1:{found.group(1)}"
        with grpc.insecure_channel(f"127.0.0.1:{found.group(2)}") as channel:
            assert health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10,
                wait_for_ready=True).status == health_pb2.HealthCheckResponse.SERVING
        deadline = time.monotonic() + 30
        while True:
            try:
                with client(target, pki["client"]) as c:
                    assert c.health() == "SERVING"
                break
            except ServiceError:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        with client(target, None) as plain, pytest.raises(ServiceError, match="UNAVAILABLE"):
            plain.dump()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
