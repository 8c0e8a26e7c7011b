"""The same content onto every lab host: the broker tree against one HTTP server, side by side.

    sudo .venv/bin/python benchmarks/distribute.py [--hosts 8] [--size 1G] [--fanouts 2 8]
        [--rounds 1] [--modes mmap copy] [--link MBIT] [--kill RANK]
    .venv/bin/python benchmarks/run.py distribute --quick      # 3 hosts, 100 MiB, fanout 2

For each fanout F a fresh lab (scripts/lab, its own bridge and /24) gets a Flux instance from
playbooks/site.yml with ``flux_broker_tbon_fanout: F`` and the real Flux build. Then, alternating
within each round:

- **tree**: ``fluxinfra distribute FILE`` run on lab1 (rank 0) as root, flux as the instance owner,
  once per ``--modes`` (``mmap``: the file is mapped into rank 0's content cache; ``copy``:
  ``--no-mmap``, copied into the content store);
- **http**: a sendfile HTTP server on lab1 (the registry stand-in) and every host, lab1 included,
  ``curl``-ing the file at once, checking its sha256 and renaming it into place; the lead hashes
  the source first, as ``fluxinfra distribute`` does.

Reported per row: wall seconds (median over rounds), MB leaving lab1 (the host side of its veth),
the copies of the content that is, and whether every host's sha256 equals the source's (checked
on every host after each run, outside the timing). "one copy" is one host pulling alone over HTTP.
``--link MBIT`` shapes every host's veth both ways (tc tbf) like a NIC of that speed; without it
the lab's links are memory copies and both methods are bound by the two shared CPUs. ``--kill R``
adds a proof run: R's broker is killed mid-distribution and ``--resume`` finishes.

Needs root and a real Flux (/opt/flux or $FLUXINFRA_FLUX_PREFIX). The lab's network and names are
this run's own (``claim_lab``); figures are only as quiet as the machine: wrap the run in ``flock
/tmp/fluxinfra-lab.lock`` to keep other lab runs off it meanwhile.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "ansible"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared benchmarks/_table.py
from _table import format_table  # noqa: E402
from lab_harness import (  # noqa: E402
    Lab,
    claim_lab,
    real_flux_prefix,
    run_playbook,
    write_inventory,
)

LAB_ENV = claim_lab("fxdb")  # a lab network and name of this run's own
WORK = Path(f"/tmp/{LAB_ENV['FLUXINFRA_LAB_NAME']}-payload")  # shared with the lab hosts
LEGEND = {
    "seconds": "wall time until every host has the content, verified (median of the rounds)",
    "lead MB out": "MB that left the lead host (lab1) during the run, from its veth",
    "copies": "lead MB out divided by the content's size",
    "sha256 equal": "every host's sha256, read back afterwards, equals the source's",
    "create s": "tree only: flux archive create (hashing, and copying for copy)",
    "fan-out s": "tree only: flux exec of every agent: extract, verify, rename",
}
FLUXINFRA = str(REPO / ".venv" / "bin" / "fluxinfra")
PORT = 8089
URI = "FLUX_URI=local:///run/flux/local"

_SERVER = r"""
import http.server, os, sys
class H(http.server.SimpleHTTPRequestHandler):
    def copyfile(self, source, outputfile):
        outputfile.flush()
        self.connection.sendfile(source)   # the kernel copies, as nginx or a registry would
    def log_message(self, *args):
        pass
os.chdir(sys.argv[1])
http.server.ThreadingHTTPServer((sys.argv[2], int(sys.argv[3])), H).serve_forever()
"""


def lab(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(REPO / "scripts" / "lab"), *args], text=True, capture_output=True,
                          env={**os.environ, **LAB_ENV}, timeout=timeout)
    if proc.returncode != 0 and args[0] != "exec":
        raise SystemExit(f"scripts/lab {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def on(host: str, command: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    return lab("exec", host, "--", "/bin/sh", "-c", command, timeout=timeout)


def on_popen(host: str, command: str) -> subprocess.Popen:
    return subprocess.Popen([str(REPO / "scripts" / "lab"), "exec", host, "--", "/bin/sh", "-c",
                             command], env={**os.environ, **LAB_ENV}, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def lead_tx_bytes() -> int:
    """Bytes lab1 has sent: what the host side of its veth has received."""
    veth = f"{LAB_ENV['FLUXINFRA_LAB_NAME'][:8]}v1"
    return int(Path(f"/sys/class/net/{veth}/statistics/rx_bytes").read_text())


def make_payload(size: int) -> tuple[Path, str]:
    WORK.mkdir(mode=0o755, exist_ok=True)
    path = WORK / f"payload-{size >> 20}m"
    digest = hashlib.sha256()
    if not path.exists() or path.stat().st_size != size:
        with open(path, "wb") as out:
            for _ in range(size >> 20):
                block = os.urandom(1 << 20)
                digest.update(block)
                out.write(block)
    else:
        with open(path, "rb") as source:
            while block := source.read(1 << 20):
                digest.update(block)
    path.chmod(0o644)
    return path, digest.hexdigest()


def shape_links(hosts: list[str], mbit: int) -> None:
    """Every host's link at ``mbit`` both ways: tbf on its eth0 and on the bridge side."""
    tbf = f"tbf rate {mbit}mbit burst {max(mbit * 1000 // 8, 32000)} latency 50ms"
    for index, host in enumerate(hosts, start=1):
        on(host, f"tc qdisc replace dev eth0 root {tbf}")
        veth = f"{LAB_ENV['FLUXINFRA_LAB_NAME'][:8]}v{index}"
        subprocess.run(["tc", "qdisc", "replace", "dev", veth, "root", *tbf.split()], check=True)


def provision(count: int, fanout: int, prefix: str, version: str, workdir: Path) -> Path:
    lab("down")
    lab("up", str(count), f"--share={prefix}")  # the lab hides /opt/flux otherwise
    state = json.loads(Path(LAB_ENV["FLUXINFRA_LAB_DIR"], "lab.json").read_text())
    hosts = Lab(hosts=state["hosts"], known_hosts=state["known_hosts"], env=LAB_ENV)
    inventory = write_inventory(
        workdir / f"inventory-{count}-{fanout}.yml", hosts, [h["name"] for h in state["hosts"]],
        {"flux_install_method": "prefix", "flux_install_prefix": prefix,
         "flux_install_core_version": version, "flux_broker_start": True,
         "flux_broker_tbon_fanout": fanout, "flux_broker_quorum_timeout": 300})
    run = run_playbook(inventory, timeout=3600)
    if run.rc != 0:
        raise SystemExit(f"site.yml failed:\n{run.output[-4000:]}")
    return inventory


def clear(hosts: list[str], dest: str) -> None:
    for host in hosts:
        on(host, f"rm -rf {dest}")


def verify(hosts: list[str], path: str, digest: str) -> bool:
    procs = {h: on_popen(h, f"sha256sum {path} | cut -d' ' -f1") for h in hosts}
    return all(p.communicate()[0].strip() == digest for p in procs.values())


def tree_run(prefix: str, source: Path, dest: str, mode: str, *extra: str) -> dict:
    flux = f"runuser -u flux -- {prefix}/bin/flux"
    args = ["--no-mmap"] if mode == "copy" else ["--mmap"]
    started = time.perf_counter()
    proc = lab("exec", "lab1", "--", "env", URI, FLUXINFRA, "distribute", str(source), "--dest",
               dest, "--flux-command", flux, "--json", *args, *extra, timeout=3600)
    seconds = time.perf_counter() - started
    report = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return {"seconds": seconds, "rc": proc.returncode, "report": report, "stderr": proc.stderr}


def http_run(hosts: list[str], source: Path, digest: str, dest: str) -> dict:
    address = json.loads(Path(LAB_ENV["FLUXINFRA_LAB_DIR"], "lab.json").read_text())["hosts"][0][
        "address"]
    url = f"http://{address}:{PORT}/{source.name}"
    target = f"{dest}/{source.name}"
    fetch = (f"mkdir -p {dest} && curl -sf -o {target}.part {url} && "
             f"[ \"$(sha256sum {target}.part | cut -d' ' -f1)\" = {digest} ] && "
             f"mv {target}.part {target}")
    started = time.perf_counter()
    lead_digest = on("lab1", f"sha256sum {source} | cut -d' ' -f1").stdout.strip()
    procs = [on_popen(h, fetch) for h in hosts]
    rcs = [p.wait() for p in procs]
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "rc": max(rcs), "lead_digest_ok": lead_digest == digest}


@contextlib.contextmanager
def http_server(source: Path):
    script = WORK / "server.py"
    script.write_text(_SERVER)
    address = json.loads(Path(LAB_ENV["FLUXINFRA_LAB_DIR"], "lab.json").read_text())["hosts"][0][
        "address"]
    server = on_popen("lab1", f"exec python3 {script} {source.parent} {address} {PORT}")
    for _ in range(100):
        probe = on("lab1", f"curl -sfI http://{address}:{PORT}/{source.name} >/dev/null")
        if probe.returncode == 0:
            break
        time.sleep(0.1)
    try:
        yield
    finally:
        server.terminate()
        server.wait()


def measured(kind: str, hosts: list[str], source: Path, digest: str, run) -> dict:
    dest = f"/var/tmp/fxdbench-{kind}"
    clear(hosts, dest)
    before = lead_tx_bytes()
    result = run(dest)
    result["lead_bytes"] = lead_tx_bytes() - before
    result["verified"] = verify(hosts, f"{dest}/{source.name}", digest)
    clear(hosts, dest)
    return result


def kill_and_resume(hosts: list[str], prefix: str, source: Path, digest: str, rank: int) -> None:
    dest = "/var/tmp/fxdbench-kill"
    clear(hosts, dest)
    flux = f"runuser -u flux -- env {URI} {prefix}/bin/flux"
    broker = int(on("lab1", f"{flux} exec -r {rank} {prefix}/bin/flux getattr broker.pid").stdout)
    cli = on_popen("lab1", f"env {URI} {FLUXINFRA} distribute {source} --dest {dest} --json "
                           f"--flux-command 'runuser -u flux -- {prefix}/bin/flux'")
    host = hosts[rank]
    while cli.poll() is None:
        staged = on(host, f"du -sk {dest}/.fluxinfra-*.partial 2>/dev/null | cut -f1").stdout
        if staged.strip() and int(staged.split()[0]) > (16 << 10):
            break
        time.sleep(0.2)
    os.kill(broker, 9)
    killed_at = time.strftime("%H:%M:%S")
    out, err = cli.communicate()
    report = json.loads(out)
    lost = {r: v["status"] for r, v in report["results"].items() if v["status"] != "ok"}
    print(f"kill: rank {rank} ({host}) broker {broker} killed at {killed_at} mid-extract; run "
          f"exit {cli.returncode}; not ok: {lost}")
    print(f"      {err.strip().splitlines()[-1]}")
    for _ in range(120):
        status = on("lab1", f"{flux} overlay status --no-pretty").stdout
        if status and all(": full" in line for line in status.strip().splitlines()):
            break
        time.sleep(1)
    started = time.perf_counter()
    resumed = on("lab1", f"env {URI} {FLUXINFRA} distribute {source} --dest {dest} --json "
                         f"--resume --flux-command 'runuser -u flux -- {prefix}/bin/flux'")
    report = json.loads(resumed.stdout)
    print(f"resume: exit {resumed.returncode} in {time.perf_counter() - started:.1f} s, targets "
          f"{report['targets']}; every host's sha256 equal to the source: "
          f"{verify(hosts, f'{dest}/{source.name}', digest)}")
    clear(hosts, dest)


def parse_size(text: str) -> int:
    units = {"M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else \
        int(text)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/run.py distribute",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=8, help="lab hosts (default 8)")
    p.add_argument("--size", default="1G", help="content size, e.g. 100M or 1G (default 1G)")
    p.add_argument("--fanouts", type=int, nargs="+", default=[2, 8],
                   help="tbon fanouts, one fresh instance each (default 2 8)")
    p.add_argument("--rounds", type=int, default=1, help="alternating rounds (default 1)")
    p.add_argument("--modes", nargs="+", default=["mmap", "copy"], choices=["mmap", "copy"],
                   help="how rank 0 holds the content (default mmap copy)")
    p.add_argument("--link", type=int, default=0, metavar="MBIT",
                   help="shape every host's link to MBIT each way (default: unshaped)")
    p.add_argument("--kill", type=int, default=None, metavar="RANK",
                   help="then kill RANK's broker mid-run and --resume (proof, not timed)")
    p.add_argument("--quick", action="store_true", help="3 hosts, 100 MiB, fanout 2, mmap")
    return p


def main(argv: list[str] | None = None) -> int:
    args, _ = parser().parse_known_args(argv)
    if args.quick:
        args.hosts, args.size, args.fanouts, args.modes = 3, "100M", [2], ["mmap"]
    if os.geteuid() != 0:
        print("distribute: skipped, it needs root to start the ssh lab")
        return 0
    prefix = real_flux_prefix()
    if prefix is None:
        print("distribute: skipped, no real Flux build (/opt/flux or FLUXINFRA_FLUX_PREFIX)")
        return 0
    version = subprocess.run([f"{prefix}/bin/flux", "version"], capture_output=True,
                             text=True).stdout.split()[1]
    with tempfile.TemporaryDirectory(prefix="fxdbench-") as tmp:
        try:
            return run_all(args, prefix, version, parse_size(args.size), Path(tmp))
        finally:
            lab("down")
            shutil.rmtree(WORK, ignore_errors=True)


def run_all(args, prefix: str, version: str, size: int, workdir: Path) -> int:
    source, digest = make_payload(size)
    hosts = [f"lab{i}" for i in range(1, args.hosts + 1)]
    started = datetime.datetime.now(datetime.UTC)
    load_before = os.getloadavg()[0]
    rows, one_copy = [], []
    for fanout in args.fanouts:
        provision(args.hosts, fanout, prefix, version, workdir)
        if args.link:
            shape_links(hosts, args.link)
        samples: dict[str, list[dict]] = {}
        with http_server(source):
            for _ in range(args.rounds):
                for mode in args.modes:
                    samples.setdefault(f"tree ({mode})", []).append(measured(
                        "tree", hosts, source, digest,
                        lambda dest, mode=mode: tree_run(prefix, source, dest, mode)))
                samples.setdefault("http", []).append(measured(
                    "http", hosts, source, digest,
                    lambda dest: http_run(hosts, source, digest, dest)))
                if fanout == args.fanouts[0]:
                    one_copy.append(measured("one", hosts[1:2], source, digest,
                                             lambda dest: http_run(hosts[1:2], source, digest,
                                                                   dest))["seconds"])
        for method, runs in samples.items():
            rows.append({"fanout": fanout, "method": method,
                         "seconds": statistics.median(r["seconds"] for r in runs),
                         "lead_bytes": statistics.median(r["lead_bytes"] for r in runs),
                         "verified": all(r["verified"] and r["rc"] == 0 for r in runs),
                         "breakdown": runs[-1].get("report", {}).get("seconds", {})})
        if args.kill is not None and fanout == args.fanouts[-1]:
            kill_and_resume(hosts, prefix, source, digest, args.kill)
    load_after = os.getloadavg()[0]
    link = f"links shaped to {args.link} Mbit/s each way" if args.link else \
        "unshaped veth links (memory copies: both methods CPU-bound)"
    print(f"\nfluxinfra distribute vs HTTP pull: {args.hosts} lab hosts, "
          f"{size / (1 << 30):.2f} GiB, real flux {version} ({prefix}); {link}")
    print(f"{started:%Y-%m-%d %H:%M} UTC; load average {load_before:.1f} before, "
          f"{load_after:.1f} after, on {os.cpu_count()} CPUs shared with other jobs; "
          f"{args.rounds} round(s), medians")
    table = [[row["fanout"], row["method"], row["seconds"], row["lead_bytes"] / 1e6,
              row["lead_bytes"] / size, row["verified"], row["breakdown"].get("create"),
              row["breakdown"].get("fan_out")] for row in rows]
    print(format_table(["fanout", "method", "seconds", "lead MB out", "copies", "sha256 equal",
                        "create s", "fan-out s"], table, legend=LEGEND, keys=2))
    if one_copy:
        print(f"one copy (one host pulling alone over HTTP): {statistics.median(one_copy):.1f} s")
    return 0 if all(r["verified"] for r in rows) else 1


def tools(argv: list[str]) -> list[str]:
    """The outside programs a run uses (benchmarks/run.py records their versions)."""
    return ["flux"]


if __name__ == "__main__":
    sys.exit(main())
