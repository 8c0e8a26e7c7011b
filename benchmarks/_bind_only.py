"""The write ceiling of ``benchmarks/kube_scheduler.py``: a scheduler's writes with no scheduling.

    python benchmarks/_bind_only.py KUBECONFIG NAMESPACE NODES THREADS

Run as its own process (like a scheduler, it has its own connections, GIL and CPU time, which
its parent reads). It lists the namespace's unbound pods once, then from THREADS threads, as
fast as the API server takes them, makes every write a scheduler owes, through the scheduler's
own client (:mod:`fluxinfra.scheduler.client`) and Event builder: pod *i* is bound to hollow
node ``hn<i mod NODES>``, its ``Scheduled`` Event (``events.k8s.io/v1``) is created, and when
the last pod of a PodGroup (label ``scheduling.x-k8s.io/pod-group``) is bound, the PodGroup's
status is patched (``phase: Scheduled``, ``scheduled``). No placement is computed: whatever
binds through this API server on this machine is held against this figure.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fluxinfra.scheduler.client import connect  # noqa: E402
from fluxinfra.scheduler.events import pod_event, scheduled_note  # noqa: E402
from fluxinfra.scheduler.pods import LABEL_PODGROUP  # noqa: E402

#: the Events' reportingController
CONTROLLER = "bind-only"


def write_all(kubeconfig: str, namespace: str, nodes: int, threads: int) -> int:
    """Make every write; returns how many failed (each is printed)."""
    api = connect(kubeconfig, connections=threads + 2)
    pods, _ = api.list_objects("pods")
    pods = [p for p in pods if p["metadata"].get("namespace") == namespace
            and not p["spec"].get("nodeName")]
    pods.sort(key=lambda p: p["metadata"]["name"])
    left: dict[str, int] = {}
    for pod in pods:
        group = (pod["metadata"].get("labels") or {}).get(LABEL_PODGROUP)
        if group:
            left[group] = left.get(group, 0) + 1
    sizes = dict(left)
    lock = threading.Lock()
    failed: list[str] = []

    def write(index: int) -> None:
        meta = pods[index]["metadata"]
        name, uid = meta["name"], meta["uid"]
        node = f"hn{index % nodes:05d}"
        try:
            api.bind(namespace, name, uid, node)
            api.create_event(namespace, pod_event(
                namespace, name, uid, "Scheduled", scheduled_note(f"{namespace}/{name}", node),
                CONTROLLER, f"{CONTROLLER}-0", action="Binding"))
            group = (meta.get("labels") or {}).get(LABEL_PODGROUP)
            if group:
                with lock:
                    left[group] -= 1
                    last = left[group] == 0
                if last:
                    api.patch_podgroup_status(namespace, group, {"status": {
                        "phase": "Scheduled", "scheduled": sizes[group]}})
        except Exception as exc:  # noqa: BLE001 - every failure is counted and printed
            failed.append(f"{name}: {exc}")

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(len(pods))))
    for line in failed[:20]:
        print(f"bind-only: {line}", file=sys.stderr)
    return len(failed)


if __name__ == "__main__":
    kubeconfig, namespace, nodes, threads = sys.argv[1:5]
    sys.exit(1 if write_all(kubeconfig, namespace, int(nodes), int(threads)) else 0)
