"""``fluxinfra service``: run the gRPC Fluxion service.

Where the graph comes from (first that applies):

``--graph FILE [--format jgf|grug|rv1exec|hwloc]``   a resource graph file (format from the
                                                      name when not given, as ``match``)
``--recipe FILE|YAML|JSON``                           a compact recipe (matcher.recipe)
``--from-cluster`` (default when running in a pod)    the Kubernetes nodes, minus running pods

A scheduler using the service (``fluxinfra scheduler --fluxion-service host:port``) replaces the
graph with its own view on start, so in that deployment the initial graph only matters until then.

Authentication: ``--tls-dir DIR`` (``ca.crt``, ``tls.crt``, ``tls.key``) makes the port speak
only mutual TLS, answering only clients whose certificate ``ca.crt`` signed; ``--health-port``
then serves ``grpc.health.v1`` alone in plain text for the kubelet's probes. Without
``--tls-dir`` anyone who can reach the port can replace the graph or cancel every job: fine on
a laptop, never in a cluster (the Pulumi component always sets it).

Examples::

    fluxinfra service --port 4242 --recipe '{"nodes_per_rack": 4, "cores_per_socket": 8}'
    python -m fluxinfra.service.client --target localhost:4242 match jobspec.yaml
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from fluxinfra.cli.graphs import LOAD_FORMATS, load_graph_file
from fluxinfra.errors import ConfigError
from fluxinfra.signals import termination_signals

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
    p.add_argument("--tls-dir", help="mutual TLS: a directory with tls.crt, tls.key (the "
                   "service's) and ca.crt (the CA client certificates must be signed by)")
    p.add_argument("--health-port", type=int,
                   help="also serve grpc.health.v1 alone, in plain text, on this port (for "
                        "probes that cannot present a client certificate)")
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
        from fluxinfra.kube.graph import graph_from_k8s
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
    for flag, value in (("--port", args.port), ("--health-port", args.health_port)):
        if value is not None and not 0 <= value <= 65535:
            raise ConfigError(f"{flag} {value}: not a TCP port; use 0..65535")
    from fluxinfra.matcher import Matcher, gcpolicy
    from fluxinfra.matcher.readers import collector_paused
    from fluxinfra.service.server import new_epoch, serve, serve_health
    from fluxinfra.service.tls import read_tls_dir

    tls = read_tls_dir(args.tls_dir, "--tls-dir") if args.tls_dir else None
    with termination_signals() as wait_for_signal:  # before gRPC starts any thread
        with collector_paused():  # from the build to the freeze, as in ``fluxinfra match``
            matcher = Matcher(build_graph(args), policy=args.policy)
            gcpolicy.tune_for(matcher)  # this command owns its process
        epoch = new_epoch()
        try:
            # and each matcher a load_nodes call builds is settled the same way
            server, port = serve(matcher, host=args.host, port=args.port, workers=args.workers,
                                 policy=args.policy, tls=tls, epoch=epoch,
                                 on_matcher=gcpolicy.tune_for)
        except OSError as exc:
            raise ConfigError(str(exc)) from None
        servers = [server]
        health = ""
        if args.health_port is not None:
            try:
                health_server, health_port = serve_health(args.host, args.health_port)
            except OSError as exc:
                server.stop(grace=None)
                raise ConfigError(str(exc).replace("--port", "--health-port", 1)) from None
            servers.append(health_server)
            health = f", plain-text health on port {health_port}"
        stat = matcher.stat()
        print(f"fluxinfra service: listening on {args.host}:{port} "
              f"({'mutual TLS' if tls else 'plain text'}, policy {args.policy}, "
              f"{stat['vertices']} vertices, epoch {epoch}{health})", file=sys.stderr,
              flush=True)
        if tls is None:
            logging.getLogger("fluxinfra.service").warning(
                "serving without authentication: anyone who reaches port %d can change the "
                "graph and cancel every job; pass --tls-dir for mutual TLS", port)
        wait_for_signal()
        for running in servers:
            running.stop(grace=5).wait()
    return 0
