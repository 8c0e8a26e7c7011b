"""``fluxinfra distribute SOURCE``: pull once on the lead node, fan out through the broker tree.

Runs against the Flux instance that ``flux`` reaches (``FLUX_URI``, ``flux proxy``, or
``--flux-command``), or with ``--kubernetes`` against the instance the installer DaemonSet runs
(through ``kubectl exec`` into the installer pods). Exit status: 0 every target rank has the
content, 1 some do not (``--resume`` retries only those), 2 bad input, 130 interrupted.
See docs/distribute.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

__all__ = ["main", "parser"]


class _OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the option, the value and the fix."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parser() -> argparse.ArgumentParser:
    p = _OneLineParser(prog="fluxinfra distribute",
                       description="Distribute a file, directory or container image to the "
                                   "ranks of a Flux instance through its broker tree.")
    p.add_argument("source", metavar="SOURCE",
                   help="file, directory, OCI/docker image archive, or image reference (pulled "
                        "and saved once on the lead node)")
    p.add_argument("--ranks", default="all", metavar="all|IDLIST",
                   help="target ranks: all (default) or an idset such as 0-3,7")
    p.add_argument("--dest", default="/var/tmp/fluxinfra-distribute", metavar="DIR",
                   help="absolute directory on every node ({rank} and {host} are substituted); "
                        "default /var/tmp/fluxinfra-distribute")
    p.add_argument("--import", dest="importer", default="none",
                   choices=("none", "containerd", "podman"),
                   help="import image archives into the node's runtime: containerd (ctr -n "
                        "k8s.io images import), podman (podman load) or none (default)")
    p.add_argument("--resume", action="store_true",
                   help="retry only the ranks an earlier run of the same SOURCE and --dest left "
                        "undone")
    p.add_argument("--overwrite", action="store_true",
                   help="replace different content already at the destination")
    mmap = p.add_mutually_exclusive_group()
    mmap.add_argument("--mmap", dest="mmap", action="store_true", default=None,
                      help="map the files into rank 0's content cache (default when run on "
                           "rank 0's host)")
    mmap.add_argument("--no-mmap", dest="mmap", action="store_false",
                      help="copy the content into the content store instead")
    p.add_argument("--chunk-size", metavar="N[KMG]",
                   help="content blob size (flux archive --chunksize; default flux's 1M)")
    p.add_argument("--stall-timeout", type=float, default=120.0, metavar="SECONDS",
                   help="give up on a rank silent this long once the others finish "
                        "(default 120)")
    p.add_argument("--flux-command", metavar="CMD",
                   help="how to run flux on the lead node, e.g. 'runuser -u flux -- "
                        "/opt/flux/bin/flux' (default: flux on PATH)")
    p.add_argument("--state-dir", metavar="DIR",
                   help="where --resume state is kept (default ~/.local/state/fluxinfra/"
                        "distribute)")
    p.add_argument("--staging-dir", default="/var/tmp/fluxinfra-staging", metavar="DIR",
                   help="where a pulled image is saved on the lead node")
    p.add_argument("--containerd-namespace", default="k8s.io", metavar="NS",
                   help="containerd namespace for --import containerd (default k8s.io)")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    kube = p.add_argument_group("Kubernetes (the installer's instance, through kubectl exec)")
    kube.add_argument("--kubernetes", action="store_true",
                      help="talk to the instance of the fluxinfra installer DaemonSet")
    kube.add_argument("--namespace", default="flux-installer",
                      help="installer namespace (default flux-installer)")
    kube.add_argument("--installer", default="flux-installer",
                      help="installer name, i.e. its app.kubernetes.io/instance label "
                           "(default flux-installer)")
    kube.add_argument("--context", help="kubeconfig context")
    kube.add_argument("--kubectl", default="kubectl", help="kubectl command (default kubectl)")
    kube.add_argument("--flux-prefix", default="/opt/fluxinfra/flux",
                      help="Flux prefix on the nodes (the installer's prefix)")
    kube.add_argument("--flux-user", default="flux",
                      help="the instance owner on the nodes (the installer's fluxUser)")
    kube.add_argument("--run-dir", default="/run/flux",
                      help="the brokers' run directory on the nodes (the installer's runDir)")
    kube.add_argument("--host-target", default="1",
                      help="the host process whose namespaces are the node's: a PID or a "
                           "command name such as kubelet (the installer's hostTarget)")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from fluxinfra.distribute.errors import DistributeError
    from fluxinfra.distribute.flux import FluxClient
    from fluxinfra.distribute.report import TextListener, summary
    from fluxinfra.distribute.run import Distribution, Options, parse_size

    opts = Options(
        source=args.source, ranks=args.ranks, dest=args.dest, importer=args.importer,
        resume=args.resume, overwrite=args.overwrite, mmap=args.mmap,
        chunksize=parse_size(args.chunk_size) if args.chunk_size else None,
        stall_timeout=args.stall_timeout, state_dir=args.state_dir,
        staging_dir=args.staging_dir, containerd_namespace=args.containerd_namespace)
    listener = TextListener(sys.stderr)
    if args.kubernetes:
        from fluxinfra.distribute.kube import KubeTarget

        if args.flux_command is not None:
            raise DistributeError("--flux-command and --kubernetes: --kubernetes runs flux in "
                                  "the installer pods; drop --flux-command (or --kubernetes)")
        target = KubeTarget(kubectl=shlex.split(args.kubectl), namespace=args.namespace,
                            installer=args.installer, context=args.context,
                            flux_prefix=args.flux_prefix, flux_user=args.flux_user,
                            run_dir=args.run_dir, host_target=args.host_target)
        distribution = target.distribution(opts, listener)
    else:
        if args.flux_command is not None and not shlex.split(args.flux_command):
            raise DistributeError("--flux-command '': give the flux command, e.g. flux")
        flux = FluxClient(shlex.split(args.flux_command) if args.flux_command else ["flux"])
        distribution = Distribution(opts, flux, listener=listener)
    try:
        report = distribution.run()
    finally:
        listener.close()
    if args.json:
        json.dump(report.to_json(), sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    print(summary(report), file=sys.stderr)
    if report.ok:  # an interrupt that came once every rank had it changed nothing
        return 0
    return 130 if report.interrupted else 1
