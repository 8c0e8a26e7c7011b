"""Join and leave times of real Flux instances built from fluxinfra's configs.

    .venv/bin/python benchmarks/run.py flux_membership [--quick]

Brokers are flux-core 0.88.0 / flux-sched 0.54.0 (a build outside the repository; $FLUXINFRA_FLUX
or /opt/flux), each on its own network host of this machine (tests/unit/k8s/netns_hosts.py:
network namespace, address, hostname), started by the very scripts the components ship. Prints,
per case, the median and the spread of ``--rounds`` (default 3; 1 with --quick) measurements:

* MiniCluster, ephemeral: its pods' start scripts launched -> the command (``flux run -N 3
  hostname``) done and rank 0 exited 0.
* MiniCluster, persistent: a resize's new pod started -> its rank up (the running brokers stay);
  a pod terminated (SIGTERM, as a smaller size does) -> its rank down.
* Installer: a node's broker started (``flux-start.sh start`` after node-watch's pass) -> its rank
  up, nothing else restarted; a node leaving (preStop ``flux-start.sh stop``) -> its rank down, a
  job on the lead running on; the lead's node gone -> every remaining rank up in the new epoch.

Skips (exit 0, with the reason) without root or a Flux build.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit" / "k8s"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared benchmarks/_table.py
from _table import format_table  # noqa: E402


def _node_watch():
    path = ROOT / "fluxinfra" / "templates" / "node-watch.py"
    spec = importlib.util.spec_from_file_location("node_watch_bench", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def minicluster_rounds(tmp: Path) -> dict[str, float]:
    from flux_live import LiveMiniCluster, wait_for

    from fluxinfra.k8s.minicluster import MiniClusterArgs

    out = {}
    args = MiniClusterArgs(name="mc", namespace="ns", size=3, max_size=4, command="hostname")
    with LiveMiniCluster(args, tmp / "eph") as mc:
        t0 = time.monotonic()
        procs = [mc.start(rank) for rank in range(3)]
        if procs[0].wait(120) != 0:
            raise RuntimeError(mc.log(0)[-2000:])
        out["MiniCluster ephemeral: 3 pods started -> command done"] = time.monotonic() - t0
        for p in procs[1:]:
            p.wait(60)
    pers = MiniClusterArgs(name="pc", namespace="ns", mode="persistent", size=2, max_size=4)
    with LiveMiniCluster(pers, tmp / "pers") as mc:
        for rank in range(2):
            mc.start(rank)
        inst = mc.instance()
        wait_for(lambda: inst.up() == "pc-[0-1]", 60)
        t0 = time.monotonic()
        mc.start(2, MiniClusterArgs(**{**pers.__dict__, "size": 3}))
        wait_for(lambda: inst.up() == "pc-[0-2]", 60, every=0.02)
        out["MiniCluster persistent: resize, new pod started -> rank up"] = time.monotonic() - t0
        t0 = time.monotonic()
        mc.procs[2].terminate()
        wait_for(lambda: inst.up() == "pc-[0-1]", 60, every=0.02)
        out["MiniCluster persistent: pod terminated -> rank down"] = time.monotonic() - t0
    return out


def installer_rounds(tmp: Path) -> dict[str, float]:
    from flux_live import LiveNodes, wait_for

    nw = _node_watch()
    out = {}
    with LiveNodes(nw, ["w1", "w2", "w3", "w4"], tmp / "nodes") as live:
        for name in ("w1", "w2", "w3"):
            live.join(name)
        inst = live.instance()
        wait_for(lambda: inst.up() == "fluxnode[0-2]", 60)
        job = inst.flux("submit", "--requires=host:fluxnode0", "sleep", "300").strip()
        t0 = time.monotonic()
        live.join("w4")
        wait_for(lambda: inst.up() == "fluxnode[0-3]", 60, every=0.02)
        out["installer: node joins -> its rank up"] = time.monotonic() - t0
        t0 = time.monotonic()
        live.leave("w3")
        wait_for(lambda: inst.up() == "fluxnode[0-1,3]", 60, every=0.02)
        out["installer: node leaves -> its rank down"] = time.monotonic() - t0
        if inst.flux("jobs", "-no", "{state_single}", job).strip() != "R":
            raise RuntimeError("the job on the lead did not survive a leave")
        inst.flux("cancel", job)
        t0 = time.monotonic()
        live.leave("w1")
        for name in ("w2", "w4"):
            live.node_pass(name)
        new = live.instance()
        wait_for(lambda: new.up() == "fluxnode[0-1]", 120, every=0.02)
        out["installer: lead gone -> new epoch, every rank up"] = time.monotonic() - t0
    return out


def main(argv: list[str]) -> int:
    from netns_hosts import why_not

    reason = why_not()
    if reason:
        print(f"skipped: {reason}")
        return 0
    rounds = 1 if "--quick" in argv else 3
    for arg in argv:
        if arg.startswith("--rounds="):
            rounds = int(arg.split("=", 1)[1])
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        with tempfile.TemporaryDirectory(prefix="fluxinfra-bench-") as tmp:
            for case, seconds in {**minicluster_rounds(Path(tmp)),
                                  **installer_rounds(Path(tmp))}.items():
                samples.setdefault(case, []).append(seconds)
    print(format_table(["case", "median s", "min s", "max s", "rounds"],
                       [[case, statistics.median(values), min(values), max(values), len(values)]
                        for case, values in samples.items()], keys=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
