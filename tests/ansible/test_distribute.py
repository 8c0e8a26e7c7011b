"""``fluxinfra distribute`` and playbooks/distribute.yml on real brokers over real ssh hosts.

Private labs (a bridge and /24 of this run's own, from ``claim_lab``, so the session lab of the
other tests is untouched) of three and then eight hosts get a Flux instance from playbooks/site.yml
(fanout 2) with the real Flux build. On each, 100 MB and 1 GB go to every host through the tree with
every host's sha256 checked independently, and an interior broker is killed in the middle of a run:
the report names it and the ranks below it, nothing is left under the final name, and ``--resume``
finishes only those; SIGINT to the CLI mid-run (through ``runuser -u flux``, as the playbook runs
it) stops every rank, leaves no staging directory and no archive, and ``--resume`` finishes the
ranks it stopped. On three hosts the playbook also distributes (and imports a podman image) twice,
the second time changing nothing. Needs root, the lab and a real Flux (``/opt/flux`` or
``FLUXINFRA_FLUX_PREFIX``); skipped with the reason otherwise (CI has no Flux: tests/unit/distribute
covers the logic against the flux double).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import signal
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
FANOUT = 2
#: the lab sizes the proof runs on (each a fresh lab and instance)
SIZES = [3, 8]
WORK = Path(f"/tmp/{LAB_ENV['FLUXINFRA_LAB_NAME']}-payload")  # shared by the lab hosts
FLUXINFRA = str(REPO / ".venv" / "bin" / "fluxinfra")


def lab(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "scripts" / "lab"), *args], env={**os.environ, **LAB_ENV},
                          text=True, capture_output=True, timeout=timeout)


def on(host: str, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return lab("exec", host, "--", "/bin/sh", "-c", command, timeout=timeout)


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"{n}hosts")
def instance(request, tmp_path_factory):
    count = request.param
    reason = lab_unavailable()
    if reason:
        pytest.skip(reason)
    prefix = real_flux_prefix()
    if prefix is None:
        pytest.skip("no real Flux build (/opt/flux or FLUXINFRA_FLUX_PREFIX): brokers cannot "
                    "start, so nothing can be distributed; tests/unit/distribute covers the logic")
    lab("down")
    up = lab("up", str(count), f"--share={prefix}")  # the lab hides /opt/flux otherwise
    assert up.returncode == 0, up.stderr
    state = json.loads(Path(LAB_ENV["FLUXINFRA_LAB_DIR"], "lab.json").read_text())
    hosts = Lab(hosts=state["hosts"], known_hosts=state["known_hosts"], env=LAB_ENV)
    names = [h["name"] for h in state["hosts"]]
    version = subprocess.run([f"{prefix}/bin/flux", "version"], capture_output=True,
                             text=True).stdout.split()[1]
    inventory = write_inventory(
        tmp_path_factory.mktemp("distribute") / "inventory.yml", hosts, names,
        {"flux_install_method": "prefix", "flux_install_prefix": prefix,
         "flux_install_core_version": version, "flux_broker_start": True,
         "flux_broker_tbon_fanout": FANOUT, "flux_broker_quorum_timeout": 300})
    site = run_playbook(inventory, timeout=2400)
    if site.rc != 0:
        lab("down")
        pytest.fail(f"site.yml failed:\n{site.output[-4000:]}")
    WORK.mkdir(mode=0o755, exist_ok=True)
    WORK.chmod(0o755)
    yield {"inventory": inventory, "prefix": prefix, "hosts": names}
    shutil.rmtree(WORK, ignore_errors=True)
    down = lab("down")
    assert down.returncode == 0, down.stderr


def payload(name: str, size: int) -> tuple[Path, str]:
    path = WORK / name
    digest = hashlib.sha256()
    if not path.exists():
        with open(path, "wb") as out:
            for _ in range(size >> 20):
                block = os.urandom(1 << 20)
                digest.update(block)
                out.write(block)
        path.chmod(0o644)
        return path, digest.hexdigest()
    with open(path, "rb") as source:
        while block := source.read(1 << 20):
            digest.update(block)
    return path, digest.hexdigest()


def subtree(rank: int, size: int, fanout: int = FANOUT) -> set[int]:
    """``rank`` and every rank below it in a ``kary:fanout`` tree of ``size`` brokers."""
    below, level = {rank}, [rank]
    while level:
        level = [c for r in level for c in range(fanout * r + 1, fanout * r + fanout + 1)
                 if c < size]
        below.update(level)
    return below


def distribute_argv(instance, source: Path, *args: str) -> list[str]:
    flux = f"runuser -u flux -- {instance['prefix']}/bin/flux"
    return ["exec", "lab1", "--", "env", "FLUX_URI=local:///run/flux/local", FLUXINFRA,
            "distribute", str(source), "--flux-command", flux, "--json", *args]


def distribute(instance, source: Path, *args: str) -> tuple[int, dict, str]:
    proc = lab(*distribute_argv(instance, source, *args), timeout=900)
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, report, proc.stderr


def checksums(hosts: list[str], path: str) -> dict[str, str]:
    procs = {h: subprocess.Popen(
        [str(REPO / "scripts" / "lab"), "exec", h, "--", "/bin/sh", "-c",
         f"sha256sum {path} | cut -d' ' -f1"], env={**os.environ, **LAB_ENV}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for h in hosts}
    return {h: p.communicate(timeout=600)[0].strip() for h, p in procs.items()}


def archives(instance) -> str:
    """The instance's archive names (``flux archive`` keeps each under the KVS ``archive.``)."""
    listing = on("lab1", f"runuser -u flux -- env FLUX_URI=local:///run/flux/local "
                         f"{instance['prefix']}/bin/flux kvs ls archive 2>&1")
    return listing.stdout


def staged_kib(host: str, dest: str) -> int:
    staged = on(host, f"du -sk {dest}/.fluxinfra-*.partial 2>/dev/null | cut -f1").stdout
    return int(staged.split()[0]) if staged.strip() else 0


def wait_all_online(instance, timeout: float = 300) -> str:
    status = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = on("lab1", f"runuser -u flux -- env FLUX_URI=local:///run/flux/local "
                            f"{instance['prefix']}/bin/flux overlay status --no-pretty").stdout
        if status and all(": full" in line for line in status.strip().splitlines()):
            return status
        time.sleep(1)
    raise AssertionError(f"brokers not all back within {timeout} s:\n{status}")


def test_ctrl_c_mid_run_stops_every_rank_and_resume_finishes(instance):
    """SIGINT to the CLI (what Ctrl-C sends it) while every rank extracts, the CLI reaching the
    instance through ``runuser -u flux`` (which blocks SIGINT: flux exec's process group is
    signalled): every rank stops, the archive is removed from the instance, no host keeps a
    staging directory, a rank has the whole content (its sha256 equal to the source's) only if
    the report says it finished before the signal, the run exits 130 naming --resume, and
    ``--resume`` then finishes the others."""
    hosts = instance["hosts"]
    # 1 GiB (the payload of the 1GB case): 100 MB is extracted everywhere in ~5 s, so the
    # signal could land after the last rank had finished
    source, digest = payload("p1024m", 1024 << 20)
    dest = "/var/tmp/fxd-i"
    wait_all_online(instance)
    run = subprocess.Popen(
        [str(REPO / "scripts" / "lab"), *distribute_argv(instance, source, "--dest", dest,
                                                          "--no-mmap")],
        env={**os.environ, **LAB_ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while (time.monotonic() < deadline and run.poll() is None
           and staged_kib(hosts[-1], dest) < 1024):
        time.sleep(0.2)
    assert run.poll() is None, "the run ended before the last rank started extracting"
    # scripts/lab exec -> nsenter -> env -> the CLI, each exec'd: the CLI is scripts/lab's child
    # (scripts/lab itself would SIGKILL it on an interrupt of its own, so it is not signalled)
    cli_pid = int(Path(f"/proc/{run.pid}/task/{run.pid}/children").read_text().split()[0])
    assert "distribute" in Path(f"/proc/{cli_pid}/cmdline").read_text()
    signalled = time.monotonic()
    os.kill(cli_pid, signal.SIGINT)
    out, err = run.communicate(timeout=600)
    stopped = time.monotonic() - signalled
    assert run.returncode == 130, err
    assert "Interrupted." in err and "--resume" in err
    # a 1 GiB extract left to run takes minutes here; stopped, the run ends in seconds
    assert stopped < 60, f"the run took {stopped:.0f} s to end after SIGINT"
    report = json.loads(out)
    assert report["name"] not in archives(instance), "the archive was removed"
    statuses = {int(r): (v["status"], v["stage"]) for r, v in report["results"].items()}
    finished = {r for r, s in statuses.items() if s[0] == "ok"}
    # the lead (rank 0) copies SOURCE rather than extracting it, and may be done before the signal
    assert {r: s for r, s in statuses.items() if r not in finished} == {
        r: ("failed", "interrupted") for r in range(len(hosts)) if r not in finished}
    assert len(hosts) - 1 not in finished, statuses
    for rank, host in enumerate(hosts):
        listing = on(host, f"ls -a {dest} 2>/dev/null").stdout.split()
        if rank in finished:
            assert listing == [".", "..", source.name], host
        else:
            assert listing in ([], [".", ".."]), host
    if finished:
        assert checksums([hosts[r] for r in finished], f"{dest}/{source.name}") == {
            hosts[r]: digest for r in finished}
    rc, resumed, stderr = distribute(instance, source, "--dest", dest, "--resume")
    assert rc == 0, stderr
    assert sorted(resumed["targets"]) == sorted(set(range(len(hosts))) - finished)
    assert checksums(hosts, f"{dest}/{source.name}") == {h: digest for h in hosts}
    for host in hosts:
        assert on(host, f"ls -a {dest}").stdout.split() == [".", "..", source.name], host
        on(host, f"rm -rf {dest}")
    print(f"{len(hosts)} hosts: the run ended {stopped:.1f} s after SIGINT; finished before it: "
          f"{sorted(finished)}")


#: the playbook tests run on the three-host lab only: the eight-host lab proves the CLI, and the
#: playbook is the same CLI started once
ON_THREE = pytest.mark.parametrize("instance", [3], indirect=True, ids=["3hosts"])


@pytest.mark.parametrize("size_mb", [100, 1024], ids=["100MB", "1GB"])
def test_content_reaches_every_host_with_equal_checksums(instance, size_mb):
    hosts = instance["hosts"]
    source, digest = payload(f"p{size_mb}m", size_mb << 20)
    dest = f"/var/tmp/fxd-a{size_mb}"
    rc, report, stderr = distribute(instance, source, "--dest", dest)
    assert rc == 0, stderr
    assert report["ok"] and sorted(report["results"], key=int) == [
        str(r) for r in range(len(hosts))]
    assert {r["host"] for r in report["results"].values()} == set(hosts)
    assert {r["status"] for r in report["results"].values()} == {"ok"}
    assert report["topo"] == f"kary:{FANOUT}" and report["lead_copies"] == FANOUT
    assert checksums(hosts, f"{dest}/{source.name}") == {h: digest for h in hosts}
    assert report["name"] not in archives(instance), "the archive was removed"
    for host in hosts:  # nothing staged is left beside the content
        assert on(host, f"ls -a {dest}").stdout.split() == [".", "..", source.name], host
        on(host, f"rm -rf {dest}")


def test_a_broker_killed_mid_run_is_named_and_resume_finishes(instance):
    """Rank 1, an interior broker: it and the ranks below it are reported by name, the others
    finish; ``--resume`` asks only those once the supervisor has restarted the brokers."""
    hosts = instance["hosts"]
    # 1 GiB on 3 hosts too: 100 MB was once extracted everywhere (2026-11-24, load 19) before
    # the poll below, a `scripts/lab exec` per look, saw rank 1 start
    size_mb = 1024
    source, digest = payload(f"p{size_mb}m", size_mb << 20)
    dest = "/var/tmp/fxd-b"
    cut = subtree(1, len(hosts))
    wait_all_online(instance)
    flux = f"runuser -u flux -- env FLUX_URI=local:///run/flux/local {instance['prefix']}/bin/flux"
    pid = on("lab1", f"{flux} exec -r 1 {instance['prefix']}/bin/flux getattr broker.pid")
    broker = int(pid.stdout.strip())
    run = subprocess.Popen(
        [str(REPO / "scripts" / "lab"), *distribute_argv(instance, source, "--dest", dest,
                                                          "--no-mmap")],
        env={**os.environ, **LAB_ENV}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.poll() is None and staged_kib("lab2", dest) < 1024:
        time.sleep(0.2)
    assert run.poll() is None, "the run ended before rank 1 started extracting"
    os.kill(broker, 9)  # lab hosts share this machine's PID namespace
    out, err = run.communicate(timeout=1200)
    assert run.returncode == 1, err
    report = json.loads(out)
    assert report["name"] not in archives(instance), "the archive was removed"
    statuses = {int(r): v["status"] for r, v in report["results"].items()}
    assert statuses[1] == "lost", report["results"]
    assert {r for r, s in statuses.items() if s != "ok"} == cut, report["results"]
    assert "lab2" in err and "--resume" in err.splitlines()[-1]
    for rank in cut:  # nothing half-written under the final name
        assert on(hosts[rank], f"test -e {dest}/{source.name}").returncode != 0, hosts[rank]
    wait_all_online(instance)  # the supervisor restarts the killed broker (and those below)
    rc, resumed, stderr = distribute(instance, source, "--dest", dest, "--resume")
    assert rc == 0, stderr
    assert sorted(resumed["targets"]) == sorted(cut)
    assert {int(r): v["status"] for r, v in resumed["results"].items()} == {
        r: "ok" if r in cut else "earlier" for r in range(len(hosts))}
    assert checksums(hosts, f"{dest}/{source.name}") == {h: digest for h in hosts}
    for host in hosts:
        assert on(host, f"ls -a {dest}").stdout.split() == [".", "..", source.name], host
        on(host, f"rm -rf {dest}")


@ON_THREE
def test_the_playbook_distributes_and_then_changes_nothing(instance):
    hosts = instance["hosts"]
    source, digest = payload("p10m", 10 << 20)
    extra = ["-e", f"distribute_source={source}", "-e", "distribute_dest=/var/lib/fxd-play",
             "-e", f"distribute_fluxinfra={FLUXINFRA}"]
    first = run_playbook(instance["inventory"], "distribute.yml", *extra)
    assert first.rc == 0, first.output[-4000:]
    assert first.recap["lab1"]["changed"] > 0
    assert checksums(hosts, "/var/lib/fxd-play/p10m") == {h: digest for h in hosts}
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


@ON_THREE
def test_the_playbook_imports_an_image_on_every_host_once(instance):
    hosts = instance["hosts"]
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (scripts/apt-packages.txt installs it)")
    tag = "localhost/fluxinfra-distribute-test:1"
    source = image_archive(WORK / "image.tar", tag)
    extra = ["-e", f"distribute_source={source}", "-e", "distribute_dest=/var/lib/fxd-image",
             "-e", "distribute_import=podman", "-e", f"distribute_fluxinfra={FLUXINFRA}"]
    first = run_playbook(instance["inventory"], "distribute.yml", *extra)
    assert first.rc == 0, first.output[-4000:]
    assert "Import the image archive as root" in first.output
    for host in hosts:
        assert on(host, f"podman image exists {tag}").returncode == 0, host
    second = run_playbook(instance["inventory"], "distribute.yml", *extra)
    assert second.rc == 0, second.output[-4000:]
    assert second.changed_hosts() == {}, second.output[-4000:]


@ON_THREE
def test_the_cli_s_own_import_names_the_root_problem(instance):
    """The agents run as the broker's user: without sudo rights the import fails, saying how."""
    hosts = instance["hosts"]
    source = image_archive(WORK / "image2.tar", "localhost/fluxinfra-distribute-test:2")
    rc, report, stderr = distribute(instance, source, "--dest", "/var/tmp/fxd-c",
                                    "--import", "podman")
    assert rc == 1
    for result in report["results"].values():
        assert result["stage"] == "import"
        assert "the broker runs as flux, not root" in result["reason"]
        assert "playbooks/distribute.yml" in result["reason"]
    assert checksums(hosts, "/var/tmp/fxd-c/image2.tar") == {
        h: hashlib.sha256(source.read_bytes()).hexdigest() for h in hosts}


@ON_THREE
def test_the_playbook_refuses_a_relative_destination(instance):
    run = run_playbook(instance["inventory"], "distribute.yml", "-e", "distribute_source=/x",
                       "-e", "distribute_dest=relative")
    assert run.rc != 0
    assert "distribute_dest is 'relative': use an absolute directory." in run.output
