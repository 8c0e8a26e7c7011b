"""``fluxinfra service``: run the gRPC Fluxion service.

Where the graph comes from (first that applies):

``--graph FILE [--format jgf|grug|rv1exec|hwloc]``   a resource graph file (format from the
                                                      name when not given, as ``match``)
``--recipe FILE|YAML|JSON``                           a compact recipe (matcher.recipe)
``--from-cluster`` (default when running in a pod)    the Kubernetes nodes, minus running pods

A scheduler using the service (``fluxinfra scheduler --fluxion-service host:port``) replaces the
graph with its own view on start, so in that deployment the initial graph only matters until then.

Examples::

    fluxinfra service --port 4242 --recipe '{"nodes_per_rack": 4, "cores_per_socket": 8}'
    python -m fluxinfra.service.client --target localhost:4242 match jobspec.yaml
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from fluxinfra.cli.graphs import LOAD_FORMATS, load_graph_file
from fluxinfra.errors import ConfigError

__all__ = ["main"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fluxinfra service",
                                description="Run the gRPC Fluxion service (fluxcli.FluxcliService"
                                            " + grpc.health.v1).")
    p.add_argument("--host", default="[::]", help="address to listen on (default: all)")
    p.add_argument("--port", type=int, default=4242, help="gRPC port (0 picks a free one)")
    p.add_argument("--policy", default="first",
                   help="match policy: first, high, low, lonode, hinode, ... or a custom "
                        "'policy=... key=value' string")
    p.add_argument("--workers", type=int, default=8, help="gRPC worker threads")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--graph", help="resource graph file")
    src.add_argument("--recipe", help="compact recipe: a YAML/JSON file or inline YAML/JSON")
    src.add_argument("--from-cluster", action="store_true",
                     help="build the graph from the Kubernetes nodes (default in a pod)")
    p.add_argument("--format", default=None, choices=LOAD_FORMATS,
                   help="format of --graph (default: from the file name: .graphml grug, .xml "
                        "hwloc, otherwise jgf)")
    p.add_argument("--kubeconfig", help="kubeconfig for --from-cluster outside a pod")
    p.add_argument("--log-level", default="info", help="debug, info, warning, error")
    return p


def build_graph(args: argparse.Namespace):
    """The service's initial graph, from whichever source the flags name."""
    if args.graph:
        return load_graph_file(args.graph, args.format, option="--graph",
                               hint="a recipe (YAML) goes to --recipe")
    if args.recipe:
        from fluxinfra.matcher.recipe import graph_from_recipe, load_recipe

        return graph_from_recipe(load_recipe(args.recipe))
    if args.from_cluster or os.environ.get("KUBERNETES_SERVICE_HOST"):
        from fluxinfra.matcher.k8s import graph_from_k8s
        from fluxinfra.scheduler.client import connect

        api = connect(args.kubeconfig)
        nodes, _ = api.list_objects("nodes")
        pods, _ = api.list_objects("pods")
        return graph_from_k8s(nodes, pods, subtract_pods=True)
    raise ConfigError("no graph: pass --graph FILE, --recipe RECIPE or --from-cluster "
                      "(the default only inside a Kubernetes pod)")


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port}: not a TCP port; use 0..65535")
    from fluxinfra.matcher import Matcher
    from fluxinfra.service.server import serve

    matcher = Matcher(build_graph(args), policy=args.policy)
    try:
        server, port = serve(matcher, host=args.host, port=args.port, workers=args.workers,
                             policy=args.policy)
    except OSError as exc:
        raise ConfigError(str(exc)) from None
    stat = matcher.stat()
    print(f"fluxinfra service: listening on {args.host}:{port} (policy {args.policy}, "
          f"{stat['vertices']} vertices)", file=sys.stderr, flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    server.stop(grace=5).wait()
    return 0
