"""``fluxinfra ledger``: per node, what Flux jobs hold, what pods hold, and what is free.

Read from the cluster as every scheduler reads it: Flux's share is the installer ledger's
placeholder pods (one per running job and node, ``fluxinfra/templates/flux_ledger.py``), the
pods' share is every other bound, unfinished pod's requests (the installer's own pods aside),
and a node where pods request CPU is withheld from Flux (every core of its rank down).

>>> node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4"}}}
>>> hold = {"metadata": {"name": "flux-job-7-0", "namespace": "flux-installer",
...                      "labels": {"fluxinfra.io/role": "flux-job-hold",
...                                 "fluxinfra.io/flux-job": "7"}},
...         "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "2"}}}]},
...         "status": {"phase": "Running"}}
>>> web = {"metadata": {"name": "web", "namespace": "default"},
...        "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "500m"}}}]},
...        "status": {"phase": "Running"}}
>>> print(render(ledger_rows([node], [hold, web], {0: "n1"})))
NODE  RANK  CORES  FLUX  PODS  FREE  FLUX JOBS  WITHHELD
n1    0     4      2     0.5   1.5   7          yes
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any

from fluxinfra.errors import ConfigError
from fluxinfra.templates.flux_ledger import (
    JOB_LABEL,
    counts_against_flux,
    holds_node,
    is_placeholder,
    pod_demand,
    quantity,
)

__all__ = ["LedgerRow", "ledger_rows", "render", "main"]


@dataclass(frozen=True)
class LedgerRow:
    node: str
    rank: int | None
    cores_m: int        # allocatable millicores
    flux_m: int         # placeholder pods' requests
    pods_m: int         # every other counted pod's requests
    jobs: tuple[str, ...]

    @property
    def free_m(self) -> int:
        return self.cores_m - self.flux_m - self.pods_m

    @property
    def withheld(self) -> bool:
        return self.pods_m > 0


def ledger_rows(nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
                ranks: dict[int, str], own_labels: dict[str, str] | None = None
                ) -> list[LedgerRow]:
    own = own_labels or {"app.kubernetes.io/name": "flux-installer"}
    rank_of = {node: rank for rank, node in ranks.items()}
    rows = []
    for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
        name = node["metadata"]["name"]
        here = [p for p in pods if (p.get("spec") or {}).get("nodeName") == name]
        holds = [p for p in here if is_placeholder(p) and holds_node(p)]
        cpu = (node.get("status") or {}).get("allocatable", {}).get("cpu", 0)
        rows.append(LedgerRow(
            node=name, rank=rank_of.get(name), cores_m=int(quantity(cpu) * 1000),
            flux_m=sum(pod_demand(p)[0] for p in holds),
            pods_m=sum(pod_demand(p)[0] for p in here if counts_against_flux(p, own)),
            jobs=tuple(sorted({p["metadata"]["labels"][JOB_LABEL] for p in holds}))))
    return rows


def _cores(millis: int) -> str:
    return f"{millis / 1000:g}"


def render(rows: list[LedgerRow]) -> str:
    table = [("NODE", "RANK", "CORES", "FLUX", "PODS", "FREE", "FLUX JOBS", "WITHHELD")]
    for r in rows:
        table.append((r.node, "-" if r.rank is None else str(r.rank), _cores(r.cores_m),
                      _cores(r.flux_m), _cores(r.pods_m), _cores(r.free_m),
                      ",".join(r.jobs) or "-", "yes" if r.withheld else "no"))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                     for row in table)


def _read(api: Any, path: str) -> Any:
    resp = api.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False,
                        response_type=None)
    return json.loads(resp[0].data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fluxinfra ledger", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, in-cluster)")
    parser.add_argument("--context", help="kubeconfig context")
    parser.add_argument("--namespace", default="flux-installer",
                        help="the installer's namespace (default: flux-installer)")
    parser.add_argument("--installer", default="flux-installer",
                        help="the installer's name (default: flux-installer)")
    parser.add_argument("--json", action="store_true", help="one JSON object per node")
    args = parser.parse_args(argv)
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        config.load_kube_config(config_file=args.kubeconfig, context=args.context,
                                client_configuration=cfg)
    except (config.ConfigException, OSError, TypeError) as exc:
        raise ConfigError(f"--kubeconfig {args.kubeconfig or '$KUBECONFIG/~/.kube/config'}: no "
                          f"usable Kubernetes configuration ({exc})") from None
    api = client.ApiClient(cfg)
    try:
        nodes = _read(api, "/api/v1/nodes")["items"]
        pods = _read(api, "/api/v1/pods")["items"]
        ranks: dict[int, str] = {}
        try:
            cm = _read(api, f"/api/v1/namespaces/{args.namespace}/configmaps/"
                            f"{args.installer}-ranks")
            slots = json.loads(cm.get("data", {}).get("ranks.json", "null") or "null") or {}
            ranks = {int(r): s["node"] for r, s in slots.get("slots", {}).items()}
        except client.exceptions.ApiException as exc:
            if exc.status != 404:
                raise
    except client.exceptions.ApiException as exc:
        print(f"fluxinfra ledger: error: the API server answered {exc.status} {exc.reason}",
              file=sys.stderr)
        return 1
    finally:
        api.close()
    rows = ledger_rows(nodes, pods, ranks,
                       {"app.kubernetes.io/name": "flux-installer",
                        "app.kubernetes.io/instance": args.installer})
    if args.json:
        for r in rows:
            print(json.dumps({"node": r.node, "rank": r.rank, "cores": r.cores_m / 1000,
                              "flux": r.flux_m / 1000, "pods": r.pods_m / 1000,
                              "free": r.free_m / 1000, "fluxJobs": list(r.jobs),
                              "withheld": r.withheld}))
    else:
        print(render(rows))
    return 0
