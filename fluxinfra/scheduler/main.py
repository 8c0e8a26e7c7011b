"""The scheduler's entry point: ``fluxinfra scheduler`` and ``python -m fluxinfra.scheduler``.

Pods opt in with ``spec.schedulerName: <--scheduler-name>``. The scheduler lists nodes, PodGroups
and pods, registers every running pod, then watches and binds; ``/healthz`` answers 200 once that
start-up is done, ``/metrics`` serves Prometheus text. See docs/scheduler.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from typing import Any

from fluxinfra.errors import ConfigError, FluxinfraError

__all__ = ["main", "parser", "run"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fluxinfra scheduler",
                                description="Fluxion's policies as a Kubernetes scheduler.")
    p.add_argument("--scheduler-name", default="fluxion",
                   help="pods with this spec.schedulerName are ours (default fluxion)")
    p.add_argument("--policy", default="first", help="Fluxion match policy (first, high, low, "
                   "lonode, hinode, ... or 'policy=... key=value')")
    p.add_argument("--allocator", choices=("fluxion", "spread"), default="fluxion",
                   help="fluxion (default) or spread, the kube-scheduler-like baseline")
    p.add_argument("--fluxion-service", metavar="HOST:PORT",
                   help="use a remote Fluxion service instead of the in-process matcher")
    p.add_argument("--host", default="0.0.0.0", help="HTTP address for /healthz and /metrics")
    p.add_argument("--port", type=int, default=10259, help="HTTP port for /healthz and /metrics")
    p.add_argument("--kubeconfig", help="kubeconfig when not running in a pod")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--default-duration", default="3600s",
                   help="expected runtime of pods without fluxinfra.io/duration (e.g. 1h)")
    p.add_argument("--reserve-depth", type=int, default=1,
                   help="reservations per cycle: 1 = EASY backfill, 0 = none")
    p.add_argument("--queue-depth", type=int, default=1000, help="groups tried per cycle")
    p.add_argument("--resync", type=float, default=300.0, help="seconds between relists")
    p.add_argument("--bind-workers", type=int, default=16, help="parallel binds per group")
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=None,
                   help="hold a Lease so only one replica schedules (default: on in a pod)")
    p.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "kube-system"),
                   help="namespace of the Lease (default: $POD_NAMESPACE or kube-system)")
    p.add_argument("--lease-name", help="name of the Lease (default: <scheduler-name>-scheduler)")
    p.add_argument("--queue", action="store_true",
                   help="host the Fluxion queue (FluxJobs, suspended Jobs, gated pods; "
                        "docs/queue.md): needs its CRDs installed")
    p.add_argument("--log-level", default="info", help="debug, info, warning, error")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from fluxinfra.scheduler.allocator import SpreadAllocator
    from fluxinfra.scheduler.binder import KubeBinder
    from fluxinfra.scheduler.client import connect
    from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
    from fluxinfra.scheduler.fluxion import FluxionAllocator, RemoteBackend
    from fluxinfra.scheduler.leader import LeaderElector
    from fluxinfra.scheduler.metrics import Metrics, serve_http
    from fluxinfra.scheduler.pods import PodSpecError, parse_duration

    try:
        default_duration = parse_duration(args.default_duration, "--default-duration")
    except PodSpecError as exc:
        raise ConfigError(str(exc)) from None
    if args.reserve_depth < 0 or args.queue_depth < 1:
        raise ConfigError(f"--reserve-depth {args.reserve_depth} / --queue-depth "
                          f"{args.queue_depth}: use >= 0 and >= 1")
    if args.allocator == "spread":
        allocator = SpreadAllocator()
    elif args.fluxion_service:
        allocator = FluxionAllocator(args.policy, RemoteBackend(args.fluxion_service))
    else:
        allocator = FluxionAllocator(args.policy)
    api = connect(args.kubeconfig, args.context)
    metrics = Metrics()
    instance = os.environ.get("POD_NAME") or f"{args.scheduler_name}-{socket.gethostname()}"
    binder = KubeBinder(api, scheduler_name=args.scheduler_name, instance=instance,
                        metrics=metrics, workers=args.bind_workers, async_events=True)
    config = SchedulerConfig(scheduler_name=args.scheduler_name,
                             default_duration=default_duration,
                             reserve_depth=args.reserve_depth, queue_depth=args.queue_depth)
    core = SchedulerCore(allocator, binder, config, metrics)
    runner, served = _runner(args, api, core, metrics, instance, default_duration)
    elect = bool(os.environ.get("POD_NAMESPACE")) if args.leader_elect is None \
        else args.leader_elect
    elector = LeaderElector(api, args.lease_namespace,
                            args.lease_name or f"{args.scheduler_name}-scheduler", instance)

    def healthy() -> bool:
        # A standby replica is healthy; the leader is healthy once it has synced.
        if runner.stopped.is_set():
            return False
        return runner.healthy() if (not elect or elector.leading.is_set()) else True

    try:
        http = serve_http(served, healthy, args.host, args.port)
    except OSError as exc:
        raise ConfigError(f"--port {args.port}: cannot listen ({exc.strerror})") from None
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: runner.stop())
    log = logging.getLogger("fluxinfra.scheduler")
    log.info("scheduler %s (%s) starting; /healthz and /metrics on %s:%d",
             args.scheduler_name, allocator.name, args.host, args.port)
    lost = False
    try:
        if elect:
            log.info("waiting for the lease %s/%s", elector.namespace, elector.name)
            if not elector.acquire(runner.stopped):
                return 0

            def on_lost() -> None:
                nonlocal lost
                lost = True
                runner.stop()

            elector.keep(runner.stopped, on_lost)
        runner.run()
    finally:
        http.shutdown()
        binder.close()
        if elect and not lost:
            elector.release()
    return 1 if lost else 0


def _runner(args: argparse.Namespace, api: Any, core: Any, metrics: Any, instance: str,
            default_duration: int) -> tuple[Any, Any]:
    """The runner, hosting the queue when ``--queue`` asks for it; and what /metrics serves."""
    from fluxinfra.scheduler.runner import Runner

    if not args.queue:
        return Runner(api, core, resync_seconds=args.resync), metrics
    from fluxinfra.queue.controller import QueueConfig, QueueCore
    from fluxinfra.queue.kube import QUEUE_KINDS, QueueClient
    from fluxinfra.queue.metrics import QueueMetrics, combined

    queue_api = QueueClient.wrap(api)
    queue_metrics = QueueMetrics()
    hosted = QueueCore(core, queue_api, QueueConfig(
        scheduler_name=args.scheduler_name, default_duration=default_duration,
        instance=instance, async_events=True), queue_metrics)
    runner = Runner(queue_api, hosted, resync_seconds=args.resync, hosted_kinds=QUEUE_KINDS)
    return runner, combined(metrics, queue_metrics)


def run(argv: list[str] | None = None) -> int:
    """``python -m fluxinfra.scheduler``: like the CLI, one line on stderr and exit 2 on errors."""
    try:
        return main(list(sys.argv[1:] if argv is None else argv))
    except FluxinfraError as exc:
        print(f"fluxinfra scheduler: error: {exc}", file=sys.stderr)
        return 2
