"""``fluxinfra queue`` and the ``kubectl flux-queue`` plugin: the queue as people read it.

::

    fluxinfra queue                 # this namespace's FluxJobs, in the order they are served
    fluxinfra queue -A              # every namespace
    fluxinfra queue -o wide         # with nodes and the jobspec's shape
    fluxinfra queue -o json         # what the table shows, as JSON
    fluxinfra queue webhook --tls-dir /tls --port 9443   # serve the admission webhook
    kubectl flux-queue -A           # the same, as a kubectl plugin (kubectl-flux_queue on PATH)

The table is what ``squeue`` / ``flux jobs`` show: waiting work first, in serve order (priority,
then queue time), with its position, state, reason and estimated start; then admitted and
running work with its nodes; finished and failed last.

>>> rows = table([{"metadata": {"name": "job-a", "namespace": "ns"}, "spec": {
...     "queueName": "default", "podSets": [{"name": "main", "count": 2}], "priority": 0,
...     "queuedAt": "2026-01-01T00:00:00Z"}, "status": {"state": "Admitted", "reason":
...     "Admitted", "nodes": ["n1", "n1"]}}], now=1767225660.0)
>>> print(rows)
POS  NAMESPACE  NAME   QUEUE    STATE     PODS  PRIO  WAITED  START  NODES  REASON
-    ns         job-a  default  Admitted  2     0     1m0s    -      n1     Admitted
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from fluxinfra.console import format_table
from fluxinfra.errors import ConfigError, FluxinfraError
from fluxinfra.kube.fluxjob import GROUP, PLURAL, STATES, VERSION
from fluxinfra.scheduler.events import parse_time

__all__ = ["main", "plugin_main", "table"]

_STATE_ORDER = {"Reserved": 0, "Queued": 0, "Admitted": 1, "Running": 2, "Finished": 3,
                "Failed": 4}


def _ago(seconds: float) -> str:
    seconds = int(max(0, seconds))
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60}s"
    if seconds < 86400:
        return f"{seconds // 3600}h{seconds % 3600 // 60}m"
    return f"{seconds // 86400}d{seconds % 86400 // 3600}h"


def _nodes(nodes: list[str], wide: bool) -> str:
    names = sorted(set(nodes))
    if not names:
        return "-"
    if wide or len(names) <= 3:
        return ",".join(names)
    return f"{','.join(names[:3])}+{len(names) - 3}"


def rows_of(fluxjobs: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """One row per FluxJob, in the order the table prints them."""
    rows = []
    for fj in fluxjobs:
        meta, spec, status = (fj.get(k) or {} for k in ("metadata", "spec", "status"))
        state = status.get("state") or "Queued"
        queued = parse_time(spec.get("queuedAt") or meta.get("creationTimestamp"))
        end = parse_time(status.get("admittedAt")) if state not in ("Queued", "Reserved") \
            else 0.0
        rows.append({
            "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
            "queue": spec.get("queueName", ""), "state": state,
            "pods": sum(int(p.get("count") or 0) for p in spec.get("podSets") or []),
            "priority": int(spec.get("priority") or 0),
            "waited": (end or now) - queued if queued else 0.0,
            "estimatedStart": status.get("estimatedStart", ""),
            "nodes": list(status.get("nodes") or []),
            "reason": status.get("reason", ""), "message": status.get("message", ""),
            "_order": (_STATE_ORDER.get(state, 5), -int(spec.get("priority") or 0), queued,
                       meta.get("namespace", ""), meta.get("name", "")),
        })
    rows.sort(key=lambda r: r["_order"])
    position = 0
    for row in rows:
        if row["state"] in ("Queued", "Reserved"):
            position += 1
            row["position"] = position
        else:
            row["position"] = None
    return rows


def table(fluxjobs: list[dict[str, Any]], now: float | None = None, wide: bool = False) -> str:
    now = time.time() if now is None else now
    header = ["POS", "NAMESPACE", "NAME", "QUEUE", "STATE", "PODS", "PRIO", "WAITED", "START",
              "NODES", "REASON"]
    lines = [header]
    for row in rows_of(fluxjobs, now):
        start = row["estimatedStart"] or "-"
        if start != "-" and not wide:
            start = "in " + _ago(parse_time(start) - now)
        lines.append([str(row["position"] or "-"), row["namespace"], row["name"], row["queue"],
                      row["state"], str(row["pods"]), str(row["priority"]),
                      _ago(row["waited"]), start, _nodes(row["nodes"], wide),
                      row["reason"] + (f": {row['message']}" if wide and row["message"]
                                       else "")])
    return format_table(header, lines[1:])


def _list(args: argparse.Namespace) -> int:
    from kubernetes import client, config

    try:
        config.load_kube_config(config_file=args.kubeconfig, context=args.context)
        namespace = args.namespace or config.list_kube_config_contexts(
            config_file=args.kubeconfig)[1]["context"].get("namespace", "default")
    except (config.ConfigException, OSError, TypeError, KeyError) as exc:
        try:
            config.load_incluster_config()
            namespace = args.namespace or "default"
        except config.ConfigException:
            raise ConfigError(f"--kubeconfig {args.kubeconfig or '$KUBECONFIG'}: no usable "
                              f"Kubernetes configuration ({exc})") from None
    api = client.CustomObjectsApi()
    try:
        if args.all_namespaces:
            body = api.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        else:
            body = api.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            raise FluxinfraError(f"{PLURAL}.{GROUP}: not installed on this cluster; deploy the "
                                 "stack with queue.enabled") from None
        raise FluxinfraError(f"listing {PLURAL}: {exc.status} {exc.reason}") from None
    items = body.get("items") or []
    if args.state:
        items = [i for i in items if ((i.get("status") or {}).get("state") or "Queued")
                 in args.state]
    if args.output == "json":
        rows = rows_of(items, time.time())
        for row in rows:
            row.pop("_order")
        print(json.dumps(rows, indent=2))
    elif items:
        print(table(items, wide=args.output == "wide"))
    else:
        where = "any namespace" if args.all_namespaces else f"namespace {namespace}"
        print(f"No FluxJobs in {where}.")
    return 0


def _webhook(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from fluxinfra.queue.webhook import WebhookConfig, serve

    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cert, key = os.path.join(args.tls_dir, "tls.crt"), os.path.join(args.tls_dir, "tls.key")
    for path in (cert, key):
        if not os.path.exists(path):
            raise ConfigError(f"--tls-dir {args.tls_dir}: {os.path.basename(path)} missing; "
                              "mount the webhook's TLS Secret there (tls.crt, tls.key)")
    config = WebhookConfig(scheduler_name=args.scheduler_name,
                           admitters=frozenset(args.admitter or ()))
    try:
        server = serve(config, cert, key, host=args.host, port=args.port)
    except OSError as exc:
        raise ConfigError(f"--port {args.port}: cannot listen ({exc.strerror})") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    logging.getLogger("fluxinfra.queue").info("webhook on https://%s:%d/mutate", args.host,
                                              args.port)
    stop.wait()
    server.shutdown()
    return 0


def parser(prog: str = "fluxinfra queue") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="The Fluxion queue: FluxJobs in the "
                                "order they are served (like squeue / flux jobs).")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    p.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table")
    p.add_argument("--state", action="append", choices=STATES,
                   help="only FluxJobs in this state (repeatable)")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--context")
    sub = p.add_subparsers(dest="command")
    w = sub.add_parser("webhook", help="serve the admission webhook over HTTPS")
    w.add_argument("--tls-dir", required=True, help="directory with tls.crt and tls.key")
    w.add_argument("--host", default="0.0.0.0")
    w.add_argument("--port", type=int, default=9443)
    w.add_argument("--scheduler-name", default="fluxion")
    w.add_argument("--admitter", action="append", metavar="USER",
                   help="who may start queued work (the controller's ServiceAccount "
                        "username); repeatable; none: anyone")
    w.add_argument("--log-level", default="info")
    return p


def main(argv: list[str], prog: str = "fluxinfra queue") -> int:
    args = parser(prog).parse_args(argv)
    if args.command == "webhook":
        return _webhook(args)
    return _list(args)


def plugin_main() -> int:
    """``kubectl flux-queue``: kubectl runs ``kubectl-flux_queue`` with the rest of the line."""
    try:
        return main(sys.argv[1:], prog="kubectl flux-queue")
    except FluxinfraError as exc:
        print(f"kubectl flux-queue: error: {exc}", file=sys.stderr)
        return 2
