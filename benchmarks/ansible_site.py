"""Wall time of playbooks/site.yml on 3 and 8 lab hosts (prefix method), cold and converged.

    sudo .venv/bin/python benchmarks/ansible_site.py [--sizes 3 8] [--warm-runs 2] [--quick]
    .venv/bin/python benchmarks/run.py ansible_site

Each size gets a fresh lab (scripts/lab, a bridge and /24 of this run's own): one cold run on new
hosts, then converged re-runs (which must report changed=0); the table shows the cold time, the
median converged time and seconds per host. With a real Flux at /opt/flux (or
$FLUXINFRA_FLUX_PREFIX) the brokers start and quorum is awaited; otherwise the CI test double is
used and the broker start is skipped (the table says which).
"""

from __future__ import annotations

import argparse
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
    DOUBLE,
    Lab,
    claim_lab,
    real_flux_prefix,
    run_playbook,
    write_inventory,
)

LEGEND = {
    "cold s": "first site.yml run on fresh hosts",
    "converged s": "median of the re-runs that follow (each must report changed=0)",
    "cold s/host": "cold s divided by the hosts",
    "vs first": "cold s against the first size's",
}

LAB_ENV = claim_lab("fxb")  # a lab network and name of this run's own


def lab(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(REPO / "scripts" / "lab"), *args],
        text=True,
        capture_output=True,
        env={**os.environ, **LAB_ENV},
    )
    if proc.returncode != 0:
        raise SystemExit(f"scripts/lab {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def flux_prefix(workdir: Path) -> tuple[str, str, bool]:
    real = real_flux_prefix()
    if real:
        out = subprocess.run([f"{real}/bin/flux", "version"], text=True, capture_output=True)
        version = next(x.split()[-1] for x in out.stdout.splitlines() if x.startswith("commands:"))
        return real, version, True
    prefix = workdir / "flux-double"
    (prefix / "bin").mkdir(parents=True)
    shutil.copy(DOUBLE, prefix / "bin" / "flux")
    for path in (workdir, prefix, prefix / "bin"):
        path.chmod(0o755)
    return str(prefix), "0.76.0", False


def timed_run(inventory: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    run = run_playbook(inventory, timeout=1800)
    elapsed = time.perf_counter() - start
    if run.rc != 0:
        raise SystemExit(f"site.yml failed (rc={run.rc}):\n{run.output[-4000:]}")
    return elapsed, run.changed_hosts()


def measure(
    size: int, warm_runs: int, workdir: Path, prefix: str, version: str, real: bool
) -> dict:
    lab("down")
    lab("up", str(size), f"--share={prefix}")  # the lab hides /opt/flux otherwise
    state = json.loads(Path(LAB_ENV["FLUXINFRA_LAB_DIR"], "lab.json").read_text())
    hosts = Lab(hosts=state["hosts"], known_hosts=state["known_hosts"], env=LAB_ENV)
    inventory = write_inventory(
        workdir / f"inventory-{size}.yml",
        hosts,
        [h["name"] for h in state["hosts"]],
        {
            "flux_install_method": "prefix",
            "flux_install_prefix": prefix,
            "flux_install_core_version": version,
            "flux_broker_start": real,
        },
    )
    try:
        cold, _ = timed_run(inventory)
        warm = []
        for _ in range(warm_runs):
            elapsed, changed = timed_run(inventory)
            if changed:
                raise SystemExit(f"converged run changed hosts: {changed}")
            warm.append(elapsed)
    finally:
        lab("down")
    return {"hosts": size, "cold": cold, "warm": statistics.median(warm)}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/run.py ansible_site",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[3, 8],
                   help="lab sizes to time, one fresh lab each (default 3 8)")
    p.add_argument("--warm-runs", type=int, default=2,
                   help="converged re-runs per size (default 2)")
    p.add_argument("--quick", action="store_true", help="3 hosts, one converged run")
    return p


def main(argv: list[str] | None = None) -> int:
    args, _ = parser().parse_known_args(argv)
    if args.quick:
        args.sizes, args.warm_runs = [3], 1
    if os.geteuid() != 0:
        print("ansible_site: skipped, it needs root to start the ssh lab")
        return 0
    with tempfile.TemporaryDirectory(prefix="fluxinfra-bench-") as tmp:
        workdir = Path(tmp)
        prefix, version, real = flux_prefix(workdir)
        rows = [measure(n, args.warm_runs, workdir, prefix, version, real) for n in args.sizes]
    flux = f"real flux {version} ({prefix})" if real else "test double (broker start skipped)"
    load = os.getloadavg()[0]
    print(
        f"playbooks/site.yml, prefix method, {flux}; load average {load:.1f} on "
        f"{os.cpu_count()} CPUs"
    )
    base = rows[0]["cold"]
    table = [[row["hosts"], row["cold"], row["warm"], row["cold"] / row["hosts"],
              f"{row['cold'] / base:.2f}x"] for row in rows]
    print(format_table(["hosts", "cold s", "converged s", "cold s/host", "vs first"], table,
                       legend=LEGEND))
    return 0


def tools(argv: list[str]) -> list[str]:
    """The outside programs a run uses (benchmarks/run.py records their versions)."""
    return ["flux"]


if __name__ == "__main__":
    sys.exit(main())
