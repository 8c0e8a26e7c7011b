"""``scripts/kube up|down|status|deps``: the command line of the Kubernetes test bed."""

from __future__ import annotations

import argparse
import json
import sys

from . import hollow
from .bed import Bed, BedError, all_beds
from .deps import ensure_packages
from .layout import LayoutError
from .procs import CommandError


def _up(args: argparse.Namespace) -> int:
    ensure_packages(log=lambda m: print(f"kube: {m}", file=sys.stderr))
    nodes = [hollow.node_object(f"hollow-{i}", cpu=args.hollow_cpu, memory=args.hollow_memory)
             for i in range(args.hollow)]
    bed = Bed.up(args.name, real_node=not args.no_node, scheduler=not args.no_scheduler,
                 node_monitor_grace=args.node_monitor_grace, hollow_nodes=nodes,
                 log=lambda m: print(f"kube: {m}", file=sys.stderr))
    print(f"bed {bed.layout.name} is up: {bed.layout.server}"
          + (f", node {bed.node_name}" if bed.node_name else "")
          + (f", {args.hollow} hollow nodes" if args.hollow else ""))
    print(f"export KUBECONFIG={bed.kubeconfig}")
    return 0


def _down(args: argparse.Namespace) -> int:
    names = all_beds() if args.all else [args.name]
    for name in names:
        Bed.load(name).down(keep_logs=args.keep_logs)
        print(f"bed {name} is down")
    return 0


def _status(args: argparse.Namespace) -> int:
    names = [args.name] if args.name else all_beds()
    report = [Bed.load(n).status() for n in names]
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    if not report:
        print("no beds")
    for r in report:
        procs = " ".join(f"{n}={s}" for n, s in r["processes"].items())
        print(f"{r['name']} (slot {r['slot']}) {r['server']} node={r['node'] or '-'}\n"
              f"  kubeconfig {r['kubeconfig']}\n  {procs}")
    return 0


def _deps(args: argparse.Namespace) -> int:
    installed = ensure_packages()
    print("installed: " + (" ".join(installed) if installed else "nothing (all present)"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/kube", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a bed and print its kubeconfig")
    up.add_argument("--name", default="default", help="bed name (default: default)")
    up.add_argument("--no-node", action="store_true", help="control plane only, no kubelet")
    up.add_argument("--no-scheduler", action="store_true", help="no kube-scheduler")
    up.add_argument("--hollow", type=int, default=0, metavar="N", help="N hollow nodes")
    up.add_argument("--hollow-cpu", default="32")
    up.add_argument("--hollow-memory", default="128Gi")
    up.add_argument("--node-monitor-grace", type=int, default=40, metavar="SECONDS",
                    help="the node-lifecycle controller's grace period (default 40)")
    up.set_defaults(func=_up)
    down = sub.add_parser("down", help="stop a bed and undo every change it made")
    down.add_argument("--name", default="default")
    down.add_argument("--all", action="store_true", help="every registered bed")
    down.add_argument("--keep-logs", metavar="DIR", help="copy the bed's logs to DIR/<name>")
    down.set_defaults(func=_down)
    status = sub.add_parser("status", help="the registered beds and their processes")
    status.add_argument("--name")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)
    deps = sub.add_parser("deps", help="install the Debian packages a bed needs (root)")
    deps.set_defaults(func=_deps)
    args = parser.parse_args(argv)
    if getattr(args, "hollow", 0) < 0:
        parser.error(f"--hollow {args.hollow}: use a count >= 0")
    try:
        return args.func(args)
    except (BedError, LayoutError, CommandError) as err:
        print(f"kube: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
