"""Unit tests of scripts/kubebed: what a bed is made of, checked without starting one."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubebed import hollow, hoststate
from kubebed.__main__ import main as kube_main
from kubebed.deps import wanted_packages
from kubebed.images import docker_archive, normalize_ref
from kubebed.layout import Layout
from kubebed.pki import CertificateAuthority, kubeconfig, service_account_keys

K8S = "1.28"


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority.create("test-ca")


def test_a_serving_certificate_names_every_address_and_is_signed_by_the_ca(ca) -> None:
    leaf = ca.issue("kube-apiserver", server=True, dns=("kubernetes",),
                    ips=("192.0.2.101", "10.96.0.1"))
    san = leaf.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["kubernetes"]
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["192.0.2.101",
                                                                          "10.96.0.1"]
    usage = leaf.cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.SERVER_AUTH]
    leaf.cert.verify_directly_issued_by(ca.cert)


def test_a_client_certificate_carries_user_and_groups(ca) -> None:
    leaf = ca.issue("system:node:n1", organizations=("system:nodes",), client=True)
    subject = leaf.cert.subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:n1"
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    with pytest.raises(ValueError, match="client, a server or both"):
        ca.issue("nobody")


def test_keys_are_private_files_and_the_kubeconfig_embeds_everything(ca, tmp_path) -> None:
    leaf = ca.issue("admin", client=True)
    leaf.write(tmp_path, "admin")
    assert (tmp_path / "admin.key").stat().st_mode & 0o777 == 0o600
    private, _ = service_account_keys(tmp_path)
    assert private.stat().st_mode & 0o777 == 0o600
    conf = yaml.safe_load(kubeconfig(tmp_path / "k", server="https://192.0.2.101:1", ca=ca,
                                     user="admin", client=leaf).read_text())
    assert conf["clusters"][0]["cluster"]["server"] == "https://192.0.2.101:1"
    assert conf["users"][0]["user"]["client-key-data"]
    assert isinstance(leaf.key, ec.EllipticCurvePrivateKey)


def test_slots_name_everything_apart() -> None:
    one = Layout.for_slot("a", 1, Path("/tmp/x/a"))
    two = Layout.for_slot("b", 2, Path("/tmp/x/b"))
    for field in ("node_ip", "pod_cidr", "bridge", "nft_table", "cgroup_root", "etcd_dir"):
        assert getattr(one, field) != getattr(two, field), field
    assert not set(one.ports.values()) & set(two.ports.values())
    assert max(Layout.for_slot("z", 99, Path("/tmp/z")).ports.values()) < 32768, \
        "ports must stay below the ephemeral range"
    assert len(Layout.for_slot("z", 99, Path("/tmp/z")).bridge) <= 15  # IFNAMSIZ


def test_the_docker_archive_is_what_ctr_import_reads(tmp_path) -> None:
    payload = tmp_path / "hello"
    payload.write_text("#!/bin/sh\necho hi\n")
    payload.chmod(0o755)
    out = tmp_path / "img.tar"
    docker_archive(out, "localhost/x:1", {str(payload): "bin/hello"},
                   links={"bin/hi": "hello"}, entrypoint=["/bin/hello"])
    with tarfile.open(out) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))[0]
        config = json.load(tar.extractfile(manifest["Config"]))
        with tarfile.open(fileobj=tar.extractfile(manifest["Layers"][0])) as layer:
            members = {m.name: m for m in layer.getmembers()}
    assert manifest["RepoTags"] == ["localhost/x:1"]
    assert config["config"]["Entrypoint"] == ["/bin/hello"]
    assert members["bin/hello"].mode == 0o755 and members["bin/hi"].issym()
    again = tmp_path / "again.tar"
    docker_archive(again, "localhost/x:1", {str(payload): "bin/hello"},
                   links={"bin/hi": "hello"}, entrypoint=["/bin/hello"])
    assert again.read_bytes() == out.read_bytes(), "the same inputs make the same bytes"


def test_short_image_names_complete_as_the_kubelet_completes_them() -> None:
    assert normalize_ref("fluxinfra:0.1.0") == "docker.io/library/fluxinfra:0.1.0"
    assert normalize_ref("registry.example.org/hpc/fluxinfra:0.1.0") == \
        "registry.example.org/hpc/fluxinfra:0.1.0"
    assert normalize_ref("localhost/x:1") == "localhost/x:1"


def test_hollow_nodes_and_their_leases_are_valid_objects() -> None:
    node = hollow.node_object("h1", cpu="8", memory="16Gi", extended={"nvidia.com/gpu": "2"},
                              labels={"zone": "a"},
                              taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])
    kubernetes_validate.validate(node, K8S, strict=True)
    assert node["metadata"]["labels"][hollow.HOLLOW_LABEL] == "hollow"
    node["metadata"]["uid"] = "u1"
    lease = hollow.lease_object(node, 40)
    kubernetes_validate.validate(lease, K8S, strict=True)
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "u1"


def test_the_hollow_kubelet_writes_statuses_a_pod_can_hold() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "d", "uid": "u"},
           "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
           "status": {"phase": "Pending"}}
    running = {**pod, **hollow.running_status(pod, "2026-01-01T00:00:00Z")}
    kubernetes_validate.validate(running, K8S, strict=True)
    assert [c["state"]["running"] for c in running["status"]["containerStatuses"]]
    done = hollow.succeeded_status(running, "2026-01-01T00:00:05Z")["status"]
    assert done["phase"] == "Succeeded"
    assert all(c["state"]["running"] is None and c["state"]["terminated"]["exitCode"] == 0
               for c in done["containerStatuses"]), "running must be cleared by the merge"


def test_the_keeper_sees_every_roster_written_back_to_back(tmp_path) -> None:
    names = hollow._RosterNames(tmp_path)
    assert names() == set(), "no roster yet: no hollow nodes"
    roster = {"nodes": ["h1"], "interval": 10, "lease_seconds": 40}
    hollow._write_roster(tmp_path, roster)
    assert names() == {"h1"}
    for n in range(2, 30):  # back to back, as add() and remove() can write
        roster["nodes"] = [f"h{i}" for i in range(1, n + 1)]
        hollow._write_roster(tmp_path, roster)
        assert names() == set(roster["nodes"])
    roster["nodes"] = ["h1"]
    hollow._write_roster(tmp_path, roster)
    assert names() == {"h1"}


def test_machine_changes_are_told_apart_by_whose_they_are() -> None:
    mine = Layout.for_slot("a", 3, Path("/tmp/fluxinfra-kube/beds/a"))
    before = {"links": {"lo master=-"}, "nftables": set(), "kernel settings": {"vm.x=0"},
              "files": set()}
    after = {"links": {"lo master=-", "fxkb3 master=-", "fxkb4 master=-", "fxdist0 master=-"},
             "nftables": {"table ip filter: chain KUBE-FIREWALL {"},
             "kernel settings": {"vm.x=1"}, "files": {"/var/lib/kubelet"}}
    ours, theirs = hoststate.attribute(hoststate.changes(before, after), [mine])
    assert any("fxkb3" in line for line in ours)
    assert any("KUBE-FIREWALL" in line for line in ours)
    assert any("/var/lib/kubelet" in line for line in ours)
    assert any("vm.x=1" in line for line in ours)
    assert any("fxkb4" in line for line in theirs), "another bed's bridge is not ours"
    assert any("fxdist0" in line for line in theirs)


def test_the_package_list_names_what_the_node_runs() -> None:
    wanted = wanted_packages()
    for needed in ("containerd", "runc", "containernetworking-plugins", "etcd-server", "gcc"):
        assert needed in wanted


@pytest.mark.parametrize("argv, message", [
    (["up", "--hollow", "-1"], "--hollow -1"),
    (["up", "--name", "Bad_Name", "--no-node"], "bed name"),
    (["load-image", "localhost/x:1", "--name", "absent"], "absent"),
    (["flux-image", "--prefix", "/nonexistent", "--name", "absent"], "absent"),
])
def test_bad_command_lines_get_one_line_errors(argv, message, capsys, monkeypatch,
                                               tmp_path) -> None:
    monkeypatch.setenv("FLUXINFRA_KUBE_ROOT", str(tmp_path))
    monkeypatch.setattr("kubebed.bed.preflight", lambda **_: None)
    monkeypatch.setattr("kubebed.__main__.ensure_packages", lambda **_: [])
    try:
        code = kube_main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    assert code in (1, 2)
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 2


def test_a_flux_image_needs_a_flux_build_at_the_prefix(tmp_path) -> None:
    from kubebed.bed import BedError
    from kubebed.loadimages import build_flux_image, flux_env

    with pytest.raises(BedError, match=r"no bin/flux there; name the prefix of a Flux build"):
        build_flux_image(tmp_path, "localhost/flux:x")
    env = dict(flux_env(Path("/opt/flux")))
    assert env["PATH"].startswith("/opt/flux/bin:")
    assert env["LD_LIBRARY_PATH"] == "/opt/flux/lib/fluxinfra-deps"


@pytest.mark.parametrize("cut", ["timeout", "signal"])
def test_a_control_plane_process_that_is_not_waited_out_is_stopped(tmp_path, cut) -> None:
    """A process is recorded in the bed only once it is ready: one whose wait fails (not
    ready in time) or is cut short (SystemExit, as the benchmarks' SIGTERM handler raises) is
    stopped, or the bed's teardown would leave it running."""
    from kubebed.control_plane import ControlPlane
    from kubebed.procs import CommandError, launch

    proc = launch("sleeper", ["sleep", "60"], tmp_path)
    assert proc.alive()

    def never() -> bool:
        if cut == "signal":
            raise SystemExit(143)
        return False

    with pytest.raises(CommandError if cut == "timeout" else SystemExit):
        ControlPlane._wait(proc, never, 0.3)
    assert not proc.alive()
