"""The installer ledger's two delays, on a bed of four real nodes with the real Flux build.

    .venv/bin/python benchmarks/run.py flux_ledger [--quick] [--rounds N]

The dev stack's installer (``source: prefix`` on $FLUXINFRA_FLUX_PREFIX, the ledger on) over a
bed's four real nodes (tests/e2e/ledger_env.py), then ``--rounds`` (default 20; 5 with
--quick) of each, one after the other:

* **Flux -> Kubernetes**: a 1-core job submitted on the lead; from its ``alloc`` event (the
  job-manager's timestamp) to its placeholder pod being in the API server (polled every 20 ms
  from this machine: what any scheduler's watch would see).
* **Kubernetes -> Flux**: a 1-core pod created bound to a node (``spec.nodeName``); from the
  create request to every core of that node's rank down in Fluxion (polled every 20 ms in
  Fluxion itself on the lead node by ``sched-fluxion-resource.find status=down``).

Prints p50 and p99 (the largest, below 100 rounds) of each. Needs root, the Kubernetes binaries
($FLUXINFRA_KUBE_BIN), podman (the project image) and a Flux build; skips (exit 0) otherwise.
As the e2e suite: FLUXINFRA_E2E_BED=NAME uses a bed one keeps, FLUXINFRA_E2E_IMAGE_TAR=FILE a
saved fluxinfra image instead of building one.
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

ROOT = Path(__file__).resolve().parents[1]

#: Run with Flux's Python on the lead node: prints the time once every core of rank argv[1]
#: is down (argv[2] "down") or up again ("up").
WATCH = """
import flux, sys, time
h = flux.Flux()
rank, want = sys.argv[1], sys.argv[2]
print("ready", flush=True)
while True:
    R = h.rpc("sched-fluxion-resource.find", {"criteria": "status=down"}).get().get("R") or {}
    down = False
    for e in (R.get("execution") or {}).get("R_lite", []):
        for part in e["rank"].split(","):
            lo, _, hi = part.partition("-")
            down = down or int(lo) <= int(rank) <= int(hi or lo)
    if down == (want == "down"):
        print(time.time(), flush=True)
        break
    time.sleep(0.02)
"""


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _hold_round(books, core_api) -> float:
    job = books.flux.flux("submit", "-n1", "sleep", "300").strip()
    dec = books.flux.flux("job", "id", "--to=dec", job).strip()
    seen = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = core_api.list_namespaced_pod(books.ns, label_selector=f"fluxinfra.io/flux-job={dec}")
        if pods.items:
            seen = time.time()
            break
        time.sleep(0.02)
    events = books.flux.flux("job", "eventlog", "--format=json", job).splitlines()
    alloc = next(json.loads(e)["timestamp"] for e in events if '"alloc"' in e)
    books.flux.flux("cancel", job)
    books.flux.flux("job", "wait-event", "-t", "60", job, "clean")
    if seen is None:
        raise RuntimeError(f"no placeholder for job {job} within 60 s")
    return seen - alloc


def _withhold_round(books, core_api, node: str, rank: int, image: str, n: int) -> float:
    from kubernetes import client

    lead = books.cluster.bed.node(books.flux.lead)
    settings = books.flux.settings
    owner = books.flux.on(books.flux.lead, "stat", "-c", "%U", settings["runDir"]).strip()
    argv = lead.enter(["runuser", "-u", owner, "--", "env",
                       f"FLUX_URI=local://{settings['runDir']}/local",
                       f"{settings['prefix']}/bin/flux", "python", "-c", WATCH, str(rank),
                       "down"])
    watcher = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert watcher.stdout is not None
    if watcher.stdout.readline().strip() != "ready":
        raise RuntimeError("the Fluxion watcher did not start")
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name=f"bench-{n}", namespace="default"),
        spec=client.V1PodSpec(node_name=node, termination_grace_period_seconds=0,
                              containers=[client.V1Container(
                                  name="c", image=image, image_pull_policy="Never",
                                  command=["sleep", "300"],
                                  resources=client.V1ResourceRequirements(
                                      requests={"cpu": "1"}))]))
    created = time.time()
    core_api.create_namespaced_pod("default", body)
    out, _ = watcher.communicate(timeout=60)
    core_api.delete_namespaced_pod(f"bench-{n}", "default", grace_period_seconds=0)
    # back up before the next round
    deadline = time.monotonic() + 60
    while books.find("status=down").get(rank) and time.monotonic() < deadline:
        time.sleep(0.2)
    return float(out.strip()) - created


def run_rounds(rounds: int) -> dict[str, list[float]]:
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    os.environ.setdefault("FLUXINFRA_E2E_NODES", "4")
    from e2e_cluster import STACK_IMAGE, build_project_image, open_cluster, take_down
    from kubebed import BUSYBOX_IMAGE, busybox_image
    from kubernetes import client
    from ledger_env import import_saved_image, installer_with_ledger

    work = Path(tempfile.mkdtemp(prefix="ledger-bench-"))
    cluster = open_cluster(work / "kubectl-cache")
    try:
        saved = os.environ.get("FLUXINFRA_E2E_IMAGE_TAR")
        if saved:
            import_saved_image(cluster, Path(saved))
        else:
            tar = work / "fluxinfra.tar"
            cluster.bed.import_image(tar, tags={build_project_image(tar): STACK_IMAGE})
        cluster.bed.import_image(busybox_image(work))
        with installer_with_ledger(cluster, work / "ledger", log=lambda msg: None) as books:
            core_api = client.CoreV1Api(cluster.client())
            ranks = books.ranks()
            out: dict[str, list[float]] = {"hold": [], "withhold": []}
            for i in range(rounds):
                out["hold"].append(_hold_round(books, core_api))
                others = sorted(r for r in ranks if r != 0)
                rank = others[i % len(others)]
                out["withhold"].append(_withhold_round(books, core_api, ranks[rank], rank,
                                                       BUSYBOX_IMAGE, i))
            return out
    finally:
        if cluster.owned:
            take_down(cluster)
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flux_ledger", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds")
    parser.add_argument("--rounds", type=int, default=0, help="rounds of each (default 20)")
    args, _ = parser.parse_known_args(argv)
    flux = Path(os.environ.get("FLUXINFRA_FLUX_PREFIX", "/opt/flux")) / "bin" / "flux"
    if os.geteuid() != 0 or not flux.exists() or not shutil.which("podman"):
        print(f"flux_ledger: skipped: needs root, podman and a Flux build ({flux})")
        return 0
    rounds = args.rounds or (5 if args.quick else 20)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _table import format_table

    found = run_rounds(rounds)
    rows = [[what, len(values), statistics.median(values) * 1000, pct(values, 0.99) * 1000]
            for what, values in (("Flux job alloc -> placeholder pod in the API", found["hold"]),
                                 ("pod created bound -> its node's cores down in Fluxion",
                                  found["withhold"]))]
    print(format_table(["delay", "rounds", "p50 ms", "p99 ms"], rows, legend={
        "p99 ms": "the 99th percentile (with fewer than 100 rounds: near the largest)"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
