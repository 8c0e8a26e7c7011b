"""An interrupt stops every rank's extraction: on the flux double and on a real Flux instance.

``fluxinfra distribute`` is interrupted (SIGINT to its process, as Ctrl-C sends it) while every
target rank extracts. Whatever way the ranks are reached, the run exits 130, no rank keeps a
staging directory, nothing half-written is under the final name (a rank either finished and
verified the content before the signal, or has nothing), and the archive is gone from the KVS:

- ``plain``: flux run directly; ``flux exec`` forwards the SIGINT to every rank;
- ``runuser``: through ``runuser -u root --`` (how an instance owned by ``flux`` is reached as
  root), which blocks SIGINT itself: the CLI signals flux's process group, not runuser
  (found on real flux-core 0.88, where the signal was swallowed and the run went on);
- ``rexec``: a client whose prefix carries no signals (as ``kubectl exec``): the ranks are
  stopped through their brokers' ``rexec.kill`` by the pid each agent reported.

Each runs against the flux double (everywhere) and a real ``flux start --test-size=3`` instance
(where a Flux build exists; skipped with the reason otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fluxinfra.distribute.run import parse_size

from .conftest import real_flux_path

pytestmark = pytest.mark.slow

#: runs one distribution with a FluxClient that carries no signals (what --kubernetes builds)
DRIVER = """
import json, sys
from fluxinfra.distribute import Distribution, FluxClient, Options
opts = Options(**json.loads(sys.argv[1]))
report = Distribution(opts, FluxClient(json.loads(sys.argv[2]), signals_pass=False)).run()
print(json.dumps(report.to_json()))
sys.exit(0 if report.ok else 130 if report.interrupted else 1)
"""


class RealInstance:
    """``flux start --test-size=N``: N real brokers on this machine, until :meth:`stop`."""

    def __init__(self, flux: str, size: int, work: Path):
        uri_file = work / "uri"
        env = {**os.environ, "PATH": f"{os.path.dirname(flux)}{os.pathsep}{os.environ['PATH']}"}
        env.pop("FLUX_URI", None)
        self.proc = subprocess.Popen(
            [flux, "start", "-Stbon.topo=kary:2", f"--test-size={size}", "sh", "-c",
             f'echo "$FLUX_URI" > {uri_file}; read _'], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        deadline = time.monotonic() + 120
        while not (uri_file.exists() and uri_file.read_text().strip()):
            assert self.proc.poll() is None and time.monotonic() < deadline, "flux start failed"
            time.sleep(0.1)
        self.flux = flux
        self.env = {**env, "FLUX_URI": uri_file.read_text().strip()}

    def archives(self) -> list[str]:
        out = subprocess.run([self.flux, "kvs", "ls", "archive"], env=self.env,
                             capture_output=True, text=True)
        return out.stdout.split()

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(params=["double", "real"])
def instance(request, double_instance, tmp_path):
    """(flux command, environment, archive names now, payload size, extra CLI options)."""
    if request.param == "double":
        inst = double_instance(3, "kary:2")
        env = {**inst.env, "FLUX_DOUBLE_EXTRACT_DELAY": "0.5"}
        yield inst.flux, env, lambda: sorted(inst.kvs()), 2 << 20, ["--chunk-size", "256K"]
        return
    flux = real_flux_path()
    if flux is None:
        pytest.skip("no real Flux build (set FLUXINFRA_FLUX_PREFIX or install to /opt/flux; CI "
                    "has none): the flux double case covers the logic")
    real = RealInstance(flux, 3, tmp_path)
    try:
        # big and finely chunked enough that the ranks are still extracting when signalled
        yield flux, real.env, real.archives, 256 << 20, ["--chunk-size", "64K", "--no-mmap"]
    finally:
        real.stop()


def staging(out: Path) -> list[Path]:
    return list(out.glob("*/.fluxinfra-*.partial"))


@pytest.mark.parametrize("way", ["plain", "runuser", "rexec"])
def test_an_interrupt_stops_every_rank_and_leaves_nothing_behind(instance, way, tmp_path):
    flux, env, archives, size, extra = instance
    if way == "runuser" and (os.geteuid() != 0 or shutil.which("runuser") is None):
        pytest.skip("runuser needs root (and util-linux): the prefix that swallows SIGINT")
    src = tmp_path / "payload.bin"
    with open(src, "wb") as handle:
        for _ in range(size >> 20):
            handle.write(os.urandom(1 << 20))
    out = tmp_path / "out"
    ranks = [0, 1, 2]
    opts = {"source": str(src), "dest": str(out / "{rank}"), "state_dir": str(tmp_path / "state"),
            "staging_dir": str(tmp_path / "staging")}
    if way == "rexec":
        opts.update(chunksize=parse_size(extra[extra.index("--chunk-size") + 1]),
                    mmap=False if "--no-mmap" in extra else None)
        argv = [sys.executable, "-c", DRIVER, json.dumps(opts), json.dumps([flux])]
    else:
        prefix = ["runuser", "-u", "root", "--", flux] if way == "runuser" else [flux]
        argv = [sys.executable, "-m", "fluxinfra", "distribute", str(src), "--json",
                "--dest", opts["dest"], "--state-dir", opts["state_dir"],
                "--staging-dir", opts["staging_dir"], "--flux-command", " ".join(prefix),
                *extra]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 120
    while len(staging(out)) < len(ranks) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, f"the run ended before every rank was extracting: {proc.stderr}"
    assert len(staging(out)) == len(ranks), "the ranks never all started extracting"
    signalled = time.monotonic()
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    stopped = time.monotonic() - signalled
    assert proc.returncode == 130, stderr
    report = json.loads(stdout)
    statuses = {int(r): (v["status"], v["stage"]) for r, v in report["results"].items()}
    assert sorted(statuses) == ranks
    interrupted = {r for r, s in statuses.items() if s == ("failed", "interrupted")}
    # the lead's rank copies SOURCE instead of extracting it and may be done before the signal
    assert interrupted and set(ranks) - interrupted <= {
        r for r, s in statuses.items() if s[0] == "ok"}, statuses
    assert stopped < 30, f"the ranks took {stopped:.0f} s to stop"
    assert staging(out) == [], "every agent removed its staging directory"
    for rank in ranks:
        final = out / str(rank) / src.name
        if rank in interrupted:
            assert not final.exists(), f"rank {rank}: something under the final name"
        else:
            assert final.stat().st_size == size
    assert report["name"] not in archives(), "the archive was removed"


def run_cli(argv: list[str], env: dict, ready, signum: int) -> tuple[int, dict, str]:
    """The CLI until ``ready()``, then ``signum`` to it; (exit status, --json report, stderr)."""
    proc = subprocess.Popen([sys.executable, "-m", "fluxinfra", "distribute", *argv, "--json"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ready() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None and ready(), f"the run ended too early: {proc.stderr}"
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=60)
    return proc.returncode, json.loads(stdout), stderr


@pytest.mark.parametrize("way", ["plain", "runuser"])
def test_an_interrupt_while_the_archive_is_created_stops_it_and_sends_nothing(
        double_instance, tmp_path, way):
    if way == "runuser" and (os.geteuid() != 0 or shutil.which("runuser") is None):
        pytest.skip("runuser needs root (and util-linux): the prefix that swallows SIGINT")
    inst = double_instance(3, "kary:2")
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(2 << 20))
    out = tmp_path / "out"
    prefix = ["runuser", "-u", "root", "--", inst.flux] if way == "runuser" else [inst.flux]
    blobs = inst.dir / "blobs"
    rc, report, stderr = run_cli(
        [str(src), "--dest", str(out / "{rank}"), "--state-dir", str(tmp_path / "state"),
         "--chunk-size", "128K", "--flux-command", " ".join(prefix)],
        {**inst.env, "FLUX_DOUBLE_CREATE_DELAY": "0.5"},
        lambda: blobs.exists() and any(blobs.iterdir()), signal.SIGINT)
    assert rc == 130, stderr
    assert {r["stage"] for r in report["results"].values()} == {"interrupted"}
    assert "before the fan-out" in report["results"]["1"]["reason"]
    assert len(list(blobs.iterdir())) < 16, "flux archive create was stopped, not waited for"
    assert inst.kvs() == {}, "no archive is left"
    assert not out.exists(), "nothing was sent to the ranks"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_the_ranks_as_ctrl_c_does(double_instance, tmp_path, signum):
    inst = double_instance(3, "kary:2")
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(2 << 20))
    out = tmp_path / "out"
    rc, report, stderr = run_cli(
        [str(src), "--dest", str(out / "{rank}"), "--state-dir", str(tmp_path / "state"),
         "--chunk-size", "256K", "--flux-command", inst.flux],
        {**inst.env, "FLUX_DOUBLE_EXTRACT_DELAY": "0.5"},
        lambda: len(staging(out)) == 3, signum)
    assert rc == 130, stderr
    assert {(r["status"], r["stage"]) for r in report["results"].values()} == {
        ("failed", "interrupted")}
    assert staging(out) == [] and not list(out.glob("*/payload.bin"))
    assert inst.kvs() == {}
