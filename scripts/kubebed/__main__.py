"""``scripts/kube up|down|status|add-node|remove-node|restart|load-image|flux-image|deps``:
the command line of the Kubernetes test bed."""

from __future__ import annotations

import argparse
import json
import sys

from . import hollow
from .bed import Bed, BedError, all_beds
from .deps import ensure_packages
from .layout import MAX_NODES, LayoutError
from .procs import CommandError


def _up(args: argparse.Namespace) -> int:
    ensure_packages(log=lambda m: print(f"kube: {m}", file=sys.stderr))
    nodes = [hollow.node_object(f"hollow-{i}", cpu=args.hollow_cpu, memory=args.hollow_memory)
             for i in range(args.hollow)]
    bed = Bed.up(args.name, nodes=0 if args.no_node else args.nodes,
                 scheduler=not args.no_scheduler,
                 node_monitor_grace=args.node_monitor_grace, hollow_nodes=nodes,
                 hollow_kubelet=not args.leases_only,
                 log=lambda m: print(f"kube: {m}", file=sys.stderr))
    print(f"bed {bed.layout.name} is up: {bed.layout.server}"
          + (f", nodes {' '.join(bed.node_names)}" if bed.node_names else "")
          + (f", {args.hollow} hollow nodes" if args.hollow else ""))
    print(f"export KUBECONFIG={bed.kubeconfig}")
    return 0


def _down(args: argparse.Namespace) -> int:
    names = all_beds() if args.all else [args.name]
    for name in names:
        Bed.load(name).down(keep_logs=args.keep_logs)
        print(f"bed {name} is down")
    return 0


def _add_node(args: argparse.Namespace) -> int:
    bed = Bed.load(args.name)
    name = bed.add_node(log=lambda m: print(f"kube: {m}", file=sys.stderr))
    print(f"node {name} joined bed {args.name}")
    return 0


def _remove_node(args: argparse.Namespace) -> int:
    bed = Bed.load(args.name)
    bed.remove_node(args.node, drain=not args.no_drain,
                    log=lambda m: print(f"kube: {m}", file=sys.stderr))
    print(f"node {args.node} left bed {args.name}")
    return 0


def _load_image(args: argparse.Namespace) -> int:
    from .loadimages import load_image

    bed = Bed.load(args.name)
    load_image(bed, args.image, args.as_names)
    print(f"{args.image} loaded into {', '.join(bed.node_names)}"
          + (f" (also as {', '.join(args.as_names)})" if args.as_names else ""))
    return 0


def _flux_image(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .loadimages import build_flux_image, load_image

    bed = Bed.load(args.name)
    tag = build_flux_image(Path(args.prefix), args.tag)
    load_image(bed, tag, args.as_names)
    print(f"{tag} (Flux from {args.prefix}) loaded into {', '.join(bed.node_names)}"
          + (f" (also as {', '.join(args.as_names)})" if args.as_names else ""))
    return 0


def _restart(args: argparse.Namespace) -> int:
    took = Bed.load(args.name).restart(args.process)
    print(f"{args.process} of bed {args.name} killed and answering again after {took:.1f}s")
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
        print(f"{r['name']} (slot {r['slot']}) {r['server']} "
              f"nodes={','.join(r['nodes']) or '-'}\n"
              f"  kubeconfig {r['kubeconfig']}\n  {procs}")
    return 0


def _deps(args: argparse.Namespace) -> int:
    installed = ensure_packages()
    print("installed: " + (" ".join(installed) if installed else "nothing (all present)"))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/kube", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    bed = argparse.ArgumentParser(add_help=False)  # the options several commands share
    bed.add_argument("--name", default="default", help="the bed's name (default: default)")
    alias = argparse.ArgumentParser(add_help=False)
    alias.add_argument("--as", dest="as_names", action="append", default=[], metavar="NAME",
                       help="another name for it on the nodes, e.g. the image a stack names "
                       "(repeatable)")
    up = sub.add_parser("up", parents=[bed], help="start a bed and print its kubeconfig")
    up.add_argument("--nodes", type=int, default=1, metavar="N",
                    help="N real nodes, each with its own kubelet, containerd, namespaces and "
                    "addresses (default 1)")
    up.add_argument("--no-node", action="store_true", help="control plane only, no kubelet")
    up.add_argument("--no-scheduler", action="store_true", help="no kube-scheduler")
    up.add_argument("--hollow", type=int, default=0, metavar="N", help="N hollow nodes")
    up.add_argument("--hollow-cpu", default="32")
    up.add_argument("--hollow-memory", default="128Gi")
    up.add_argument("--leases-only", action="store_true",
                    help="hollow nodes only stay Ready: no kubelet reports their pods "
                    "Running (pods bound to them stay Pending)")
    up.add_argument("--node-monitor-grace", type=int, default=40, metavar="SECONDS",
                    help="the node-lifecycle controller's grace period (default 40)")
    up.set_defaults(func=_up)
    down = sub.add_parser("down", parents=[bed],
                          help="stop a bed and undo every change it made")
    down.add_argument("--all", action="store_true", help="every registered bed")
    down.add_argument("--keep-logs", metavar="DIR", help="copy the bed's logs to DIR/<name>")
    down.set_defaults(func=_down)
    status = sub.add_parser("status", help="the registered beds and their processes")
    status.add_argument("--name")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=_status)
    add = sub.add_parser("add-node", parents=[bed],
                         help="join one more real node to a running bed")
    add.set_defaults(func=_add_node)
    rm = sub.add_parser("remove-node", parents=[bed],
                        help="drain a real node, stop it, delete its Node")
    rm.add_argument("node", help="the node's name (scripts/kube status lists them)")
    rm.add_argument("--no-drain", action="store_true", help="stop it without draining")
    rm.set_defaults(func=_remove_node)
    load = sub.add_parser("load-image", parents=[bed, alias],
                          help="load an image from podman into every node")
    load.add_argument("image", help="an image podman has, e.g. localhost/fluxinfra:0.1.0")
    load.set_defaults(func=_load_image)
    fimg = sub.add_parser("flux-image", parents=[bed, alias], help="an image with the Flux "
                          "build at --prefix, loaded into every node")
    fimg.add_argument("--prefix", required=True, help="the Flux build's prefix, e.g. /opt/flux")
    fimg.add_argument("--tag", default="localhost/flux-view:bed", help="its podman name")
    fimg.set_defaults(func=_flux_image)
    restart = sub.add_parser("restart", parents=[bed], help="kill a control-plane process "
                             "and start it again (same flags and data)")
    restart.add_argument("process", choices=("etcd", "kube-apiserver", "kube-controller-manager",
                                             "kube-scheduler"))
    restart.set_defaults(func=_restart)
    deps = sub.add_parser("deps", help="install the Debian packages a bed needs (root)")
    deps.set_defaults(func=_deps)
    args = parser.parse_args(argv)
    if getattr(args, "hollow", 0) < 0:
        parser.error(f"--hollow {args.hollow}: use a count >= 0")
    if not 0 <= getattr(args, "nodes", 1) <= MAX_NODES:
        parser.error(f"--nodes {args.nodes}: use a count from 0 to {MAX_NODES}")
    try:
        return args.func(args)
    except (BedError, LayoutError, CommandError) as err:
        print(f"kube: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
