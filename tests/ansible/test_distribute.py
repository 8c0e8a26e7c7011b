"""``fluxinfra distribute`` and playbooks/distribute.yml on real brokers over real ssh hosts.

A private lab of three hosts (a bridge and /24 of this run's own, from ``claim_lab``, so the
session lab of the other tests is untouched) gets a Flux instance from playbooks/site.yml
(fanout 2) with the real Flux build; then 100 MB goes to every host through the tree with every
host's sha256 checked independently, a broker is killed in the middle of a run and ``--resume``
finishes the job, and the playbook distributes (and imports a podman image) twice, the second
time changing nothing. Needs root, the lab and a real Flux (``/opt/flux`` or
``FLUXINFRA_FLUX_PREFIX``); skipped with the reason otherwise (CI has no Flux:
tests/unit/distribute covers the logic against the flux double).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from lab_harness import (
    REPO,
    Lab,
    claim_lab,
    lab_unavailable,
    real_flux_prefix,
    run_playbook,
    write_inventory,
)

pytestmark = [pytest.mark.lab, pytest.mark.slow, pytest.mark.needs_flux]

LAB_ENV = claim_lab("fxd")
HOSTS = ["lab1", "lab2", "lab3"]
WORK = Path(f"/tmp/{LAB_ENV['FLUXINFRA_LAB_NAME']}-payload")  # shared by the lab hosts
FLUXINFRA = str(REPO / ".venv" / "bin" / "fluxinfra")


def lab(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "scripts" / "lab"), *args], env={**os.environ, **LAB_ENV},
                          text=True, capture_output=True, timeout=timeout)


def on(host: str, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return lab("exec", host, "--", "/bin/sh", "-c", command, timeout=timeout)


@pytest.fixture(scope="module")
def instance(tmp_path_factory):
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    prefix = real_flux_prefix()
    if prefix is None:
        pytest.skip("no real Flux build (/opt/flux or FLUXINFRA_FLUX_PREFIX): brokers cannot "
                    "start, so nothing can be distributed; tests/unit/distribute covers the logic")
    lab("down")
    up = lab("up", str(len(HOSTS)))
    assert up.returncode == 0, up.stderr
    state = json.loads(Path(LAB_ENV["FLUXINFRA_LAB_DIR"], "lab.json").read_text())
    hosts = Lab(hosts=state["hosts"], known_hosts=state["known_hosts"])
    version = subprocess.run([f"{prefix}/bin/flux", "version"], capture_output=True,
                             text=True).stdout.split()[1]
    inventory = write_inventory(
        tmp_path_factory.mktemp("distribute") / "inventory.yml", hosts, HOSTS,
        {"flux_install_method": "prefix", "flux_install_prefix": prefix,
         "flux_install_core_version": version, "flux_broker_start": True,
         "flux_broker_tbon_fanout": 2, "flux_broker_quorum_timeout": 120})
    site = run_playbook(inventory, timeout=1200)
    if site.rc != 0:
        lab("down")
        pytest.fail(f"site.yml failed:\n{site.output[-4000:]}")
    WORK.mkdir(mode=0o755, exist_ok=True)
    WORK.chmod(0o755)
    yield {"inventory": inventory, "prefix": prefix}
    shutil.rmtree(WORK, ignore_errors=True)
    down = lab("down")
    assert down.returncode == 0, down.stderr


def payload(name: str, size: int) -> tuple[Path, str]:
    path = WORK / name
    if not path.exists():
        with open(path, "wb") as out:
            for _ in range(size >> 20):
                out.write(os.urandom(1 << 20))
        path.chmod(0o644)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def distribute_argv(instance, source: Path, *args: str) -> list[str]:
    flux = f"runuser -u flux -- {instance['prefix']}/bin/flux"
    return ["exec", "lab1", "--", "env", "FLUX_URI=local:///run/flux/local", FLUXINFRA,
            "distribute", str(source), "--flux-command", flux, "--json", *args]


def distribute(instance, source: Path, *args: str) -> tuple[int, dict, str]:
    proc = lab(*distribute_argv(instance, source, *args), timeout=900)
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, report, proc.stderr


def checksums(path: str) -> dict[str, str]:
    return {h: on(h, f"sha256sum {path} | cut -d' ' -f1").stdout.strip() for h in HOSTS}


def wait_all_online(instance, timeout: float = 120) -> str:
    status = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = on("lab1", f"runuser -u flux -- env FLUX_URI=local:///run/flux/local "
                            f"{instance['prefix']}/bin/flux overlay status --no-pretty").stdout
        if status and all(": full" in line for line in status.strip().splitlines()):
            return status
        time.sleep(1)
    raise AssertionError(f"brokers not all back within {timeout} s:\n{status}")


def test_100_mb_reaches_every_host_with_equal_checksums(instance):
    source, digest = payload("p100m", 100 << 20)
    rc, report, stderr = distribute(instance, source, "--dest", "/var/tmp/fxd-a")
    assert rc == 0, stderr
    assert report["ok"] and sorted(report["results"]) == ["0", "1", "2"]
    assert {r["host"] for r in report["results"].values()} == set(HOSTS)
    assert report["topo"] == "kary:2" and report["lead_copies"] == 2
    assert checksums("/var/tmp/fxd-a/p100m") == {h: digest for h in HOSTS}
    archives = on("lab1", f"runuser -u flux -- env FLUX_URI=local:///run/flux/local "
                          f"{instance['prefix']}/bin/flux kvs ls archive 2>&1")
    assert report["name"] not in archives.stdout, "the archive was removed"


def test_a_broker_killed_mid_run_is_named_and_resume_finishes(instance):
    source, digest = payload("p100m", 100 << 20)
    wait_all_online(instance)
    flux = f"runuser -u flux -- env FLUX_URI=local:///run/flux/local {instance['prefix']}/bin/flux"
    pid = on("lab1", f"{flux} exec -r 1 {instance['prefix']}/bin/flux getattr broker.pid")
    broker = int(pid.stdout.strip())
    run = subprocess.Popen(
        [str(REPO / "scripts" / "lab"), *distribute_argv(instance, source, "--dest",
                                                          "/var/tmp/fxd-b", "--no-mmap")],
        env={**os.environ, **LAB_ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and run.poll() is None:
        staged = on("lab2", "du -sk /var/tmp/fxd-b/.fluxinfra-*.partial 2>/dev/null | cut -f1")
        if staged.stdout.strip() and int(staged.stdout.split()[0]) > 1024:
            break
        time.sleep(0.2)
    assert run.poll() is None, "the run ended before rank 1 started extracting"
    os.kill(broker, 9)  # lab hosts share this machine's PID namespace
    out, err = run.communicate(timeout=600)
    assert run.returncode == 1, err
    report = json.loads(out)
    assert report["results"]["1"]["status"] == "lost", report["results"]
    assert report["results"]["0"]["status"] == "ok" and report["results"]["2"]["status"] == "ok"
    assert "lab2" in err and "--resume" in err.splitlines()[-1]
    assert on("lab2", "test -e /var/tmp/fxd-b/p100m").returncode != 0, "nothing half-written"
    wait_all_online(instance)  # the supervisor restarts the killed broker
    rc, resumed, stderr = distribute(instance, source, "--dest", "/var/tmp/fxd-b", "--resume")
    assert rc == 0, stderr
    assert resumed["targets"] == [1]
    assert {r: v["status"] for r, v in resumed["results"].items()} == {
        "0": "earlier", "1": "ok", "2": "earlier"}
    assert checksums("/var/tmp/fxd-b/p100m") == {h: digest for h in HOSTS}
    assert on("lab2", "ls -a /var/tmp/fxd-b").stdout.split() == [".", "..", "p100m"]


def test_the_playbook_distributes_and_then_changes_nothing(instance):
    source, digest = payload("p10m", 10 << 20)
    extra = ["-e", f"distribute_source={source}", "-e", "distribute_dest=/var/lib/fxd-play",
             "-e", f"distribute_fluxinfra={FLUXINFRA}"]
    first = run_playbook(instance["inventory"], "distribute.yml", *extra)
    assert first.rc == 0, first.output[-4000:]
    assert first.recap["lab1"]["changed"] > 0
    assert checksums("/var/lib/fxd-play/p10m") == {h: digest for h in HOSTS}
    assert on("lab3", "stat -c %U /var/lib/fxd-play").stdout.strip() == "flux"
    second = run_playbook(instance["inventory"], "distribute.yml", *extra)
    assert second.rc == 0, second.output[-4000:]
    assert second.changed_hosts() == {}, second.output[-4000:]


def image_archive(path: Path, tag: str) -> Path:
    """A real docker-archive (what `podman save` writes) of a one-file image, made in Python."""
    def tar_bytes(members: dict[str, bytes]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    layer = tar_bytes({"hello.txt": b"hello from fluxinfra distribute\n"})
    diff = hashlib.sha256(layer).hexdigest()
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff}"]}}).encode()
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [tag],
                            "Layers": [f"{diff}/layer.tar"]}]).encode()
    path.write_bytes(tar_bytes({config_name: config, f"{diff}/layer.tar": layer,
                                "manifest.json": manifest}))
    path.chmod(0o644)
    return path


def test_the_playbook_imports_an_image_on_every_host_once(instance):
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/apt-packages.txt installs it)")
    tag = "localhost/fluxinfra-distribute-test:1"
    source = image_archive(WORK / "image.tar", tag)
    extra = ["-e", f"distribute_source={source}", "-e", "distribute_dest=/var/lib/fxd-image",
             "-e", "distribute_import=podman", "-e", f"distribute_fluxinfra={FLUXINFRA}"]
    first = run_playbook(instance["inventory"], "distribute.yml", *extra)
    assert first.rc == 0, first.output[-4000:]
    assert "Import the image archive as root" in first.output
    for host in HOSTS:
        assert on(host, f"podman image exists {tag}").returncode == 0, host
    second = run_playbook(instance["inventory"], "distribute.yml", *extra)
    assert second.rc == 0, second.output[-4000:]
    assert second.changed_hosts() == {}, second.output[-4000:]


def test_the_cli_s_own_import_names_the_root_problem(instance):
    """The agents run as the broker's user: without sudo rights the import fails, saying how."""
    source = image_archive(WORK / "image2.tar", "localhost/fluxinfra-distribute-test:2")
    rc, report, stderr = distribute(instance, source, "--dest", "/var/tmp/fxd-c",
                                    "--import", "podman")
    assert rc == 1
    for result in report["results"].values():
        assert result["stage"] == "import"
        assert "the broker runs as flux, not root" in result["reason"]
        assert "playbooks/distribute.yml" in result["reason"]
    assert checksums("/var/tmp/fxd-c/image2.tar") == {
        h: hashlib.sha256(source.read_bytes()).hexdigest() for h in HOSTS}


def test_the_playbook_refuses_a_relative_destination(instance):
    run = run_playbook(instance["inventory"], "distribute.yml", "-e", "distribute_source=/x",
                       "-e", "distribute_dest=relative")
    assert run.rc != 0
    assert "distribute_dest is 'relative': use an absolute directory." in run.output
