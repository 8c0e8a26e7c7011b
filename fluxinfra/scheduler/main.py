"""The scheduler's process: its flags, start-up, serving, leading and shutdown.

Pods opt in with ``spec.schedulerName: <--scheduler-name>``. The scheduler lists nodes, PodGroups
and pods, registers every running pod, then watches and binds; ``/healthz`` answers 200 once that
start-up is done, ``/metrics`` serves Prometheus text. See docs/scheduler.md.

What the process hosts beside the scheduler, on the scheduler's core and books, is handed in
as a :class:`Hosted` (its flags, the core's binder, the runner): the commands ``fluxinfra
scheduler`` and ``python -m fluxinfra.scheduler`` (:mod:`fluxinfra.cli.scheduler`, above both)
hand in the queue, which this package never imports.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from fluxinfra.errors import ConfigError, FluxinfraError
from fluxinfra.signals import termination_signals

__all__ = ["Hosted", "SchedulerParts", "main", "parser", "run", "start"]


@dataclass(frozen=True)
class SchedulerParts:
    """The scheduler's parts, built from its flags, that what it hosts builds on."""

    #: the scheduler's :class:`~fluxinfra.scheduler.client.ClientKubeApi`
    api: Any
    #: the :class:`~fluxinfra.scheduler.core.SchedulerCore`
    core: Any
    #: the core's binder (:meth:`Hosted.binder`'s answer)
    binder: Any
    #: the scheduler's :class:`~fluxinfra.scheduler.metrics.Metrics`
    metrics: Any
    #: this replica's name in Events and Leases (``$POD_NAME`` or ``<scheduler>-<host>``)
    instance: str
    #: ``--default-duration`` in seconds
    default_duration: int
    #: the :class:`~fluxinfra.scheduler.runner.Runner`'s keyword arguments from the flags
    #: (resync, watch and stall timeouts, the backend's sync, the metrics)
    runner_settings: dict[str, Any]


class Hosted(Protocol):
    """Work the scheduler's process runs beside the scheduler, on its core and books."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add its flags (``--help`` lists them before ``--log-level``)."""
        ...

    def binder(self, args: argparse.Namespace, binder: Any) -> Any:
        """The binder the core is built with: the scheduler's ``binder``, or one in front of
        it."""
        ...

    def runner(self, args: argparse.Namespace, parts: SchedulerParts) -> tuple[Any, Any] | None:
        """The runner that hosts it and what ``/metrics`` serves; ``None`` when ``args`` leave
        it off (the scheduler's own runner then). A :class:`~fluxinfra.errors.ConfigError`
        stops the process before it serves or leads."""
        ...


def parser(hosted: Hosted | None = None) -> argparse.ArgumentParser:
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
    p.add_argument("--fluxion-tls-dir", metavar="DIR",
                   help="mutual TLS to the Fluxion service: ca.crt (the service's CA), tls.crt "
                        "and tls.key (the scheduler's client certificate and key)")
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
    p.add_argument("--api-timeout", type=float, default=30.0,
                   help="read timeout of every Kubernetes API call, seconds (connects: 5 s)")
    p.add_argument("--watch-timeout", type=int, default=300,
                   help="seconds after which the API server ends each watch (the client's "
                        "read timeout is 30 s longer, so a half-open watch cannot hang)")
    p.add_argument("--stall-timeout", type=float, default=120.0,
                   help="/healthz fails when one batch-and-cycle runs longer than this, or "
                        "the API server is silent for the watch timeout + this (seconds)")
    p.add_argument("--page-size", type=int, default=500, help="objects per LIST request")
    p.add_argument("--bind-workers", type=int, default=16,
                   help="parallel binds per group, and as many Event and status senders")
    p.add_argument("--shutdown-grace", type=float, default=15.0,
                   help="seconds after SIGTERM for the binds in flight to finish and every "
                        "pending Event and status write to be sent (default 15; keep it 10 s "
                        "below the pod's terminationGracePeriodSeconds, 30 by default)")
    p.add_argument("--leader-elect", action=argparse.BooleanOptionalAction, default=None,
                   help="hold a Lease so only one replica schedules (default: on in a pod)")
    p.add_argument("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "kube-system"),
                   help="namespace of the Lease (default: $POD_NAMESPACE or kube-system)")
    p.add_argument("--lease-name", help="name of the Lease (default: <scheduler-name>-scheduler)")
    p.add_argument("--topology", default="zone=topology.kubernetes.io/zone",
                   help="graph levels between the cluster and the nodes, outermost first, as "
                        "LEVEL=NODE_LABEL,... (e.g. zone=topology.kubernetes.io/zone,"
                        "rack=example.com/rack); PodGroups ask for one with the annotation "
                        "fluxinfra.io/topology-required (or -preferred): LEVEL")
    p.add_argument("--bind-timeout", type=int, default=60,
                   help="seconds a failed bind is retried to its reserved node when the "
                        "PodGroup sets no scheduleTimeoutSeconds")
    p.add_argument("--podgroup-status-interval", type=float, default=1.0, metavar="SECONDS",
                   help="seconds between two status writes of a PodGroup whose phase stays "
                        "(only its counts move); a new phase is written at once")
    p.add_argument("--no-preemption", dest="preemption", action="store_false",
                   help="never evict lower-priority pods (default: DefaultPreemption)")
    if hosted is not None:
        hosted.add_arguments(p)
    p.add_argument("--log-level", default="info", help="debug, info, warning, error")
    return p


def main(argv: list[str], hosted: Hosted | None = None) -> int:
    """:func:`start` on ``argv`` parsed with :func:`parser` (``hosted``'s flags included)."""
    return start(parser(hosted).parse_args(argv), hosted)


def start(args: argparse.Namespace, hosted: Hosted | None = None) -> int:
    """Run the scheduler (and ``hosted`` beside it) on flags :func:`parser` parsed, until a
    signal or the lost Lease stops it: 0 when stopped, 1 when the Lease was lost; bad flags
    raise a :class:`~fluxinfra.errors.ConfigError`."""
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from fluxinfra.scheduler.pods import PodSpecError, parse_duration

    try:
        default_duration = parse_duration(args.default_duration, "--default-duration")
    except PodSpecError as exc:
        raise ConfigError(str(exc)) from None
    if args.reserve_depth < 0 or args.queue_depth < 1:
        raise ConfigError(f"--reserve-depth {args.reserve_depth} / --queue-depth "
                          f"{args.queue_depth}: use >= 0 and >= 1")
    if args.fluxion_tls_dir and not args.fluxion_service:
        raise ConfigError(f"--fluxion-tls-dir {args.fluxion_tls_dir}: given without "
                          "--fluxion-service; name the service HOST:PORT too, or drop it")
    for flag, value, low in (("--api-timeout", args.api_timeout, 0.1),
                             ("--watch-timeout", args.watch_timeout, 1),
                             ("--stall-timeout", args.stall_timeout, 1.0),
                             ("--page-size", args.page_size, 1)):
        if value < low:
            raise ConfigError(f"{flag} {value}: use >= {low}")
    if args.bind_timeout < 1:
        raise ConfigError(f"--bind-timeout {args.bind_timeout}: use whole seconds >= 1")
    if not 0 <= args.podgroup_status_interval <= 60:
        raise ConfigError(f"--podgroup-status-interval {args.podgroup_status_interval}: use "
                          "seconds from 0 (every change written) to 60")
    if args.bind_workers < 1:
        raise ConfigError(f"--bind-workers {args.bind_workers}: use >= 1")
    if not 0 <= args.shutdown_grace <= 300:
        raise ConfigError(f"--shutdown-grace {args.shutdown_grace}: use seconds from 0 to 300, "
                          "below the pod's terminationGracePeriodSeconds")
    from fluxinfra.kube.pools import parse_topology

    try:
        levels = parse_topology(args.topology)
    except FluxinfraError as exc:
        raise ConfigError(f"--topology {args.topology!r}: {exc}") from None
    with termination_signals() as wait_for_signal:  # before any thread exists
        return _schedule(args, default_duration, levels, wait_for_signal, hosted)


def _schedule(args: argparse.Namespace, default_duration: int, levels: Any,
              wait_for_signal: Callable[[], int], hosted: Hosted | None) -> int:
    """Build the scheduler, serve /healthz and /metrics, (lead and) run until told to stop."""
    from fluxinfra.matcher import gcpolicy
    from fluxinfra.scheduler.allocator import SpreadAllocator
    from fluxinfra.scheduler.binder import KubeBinder
    from fluxinfra.scheduler.client import Timeouts, connect
    from fluxinfra.scheduler.core import SchedulerConfig, SchedulerCore
    from fluxinfra.scheduler.fluxion import FluxionAllocator, InProcessBackend, RemoteBackend
    from fluxinfra.scheduler.kube import KINDS
    from fluxinfra.scheduler.leader import LeaderElector
    from fluxinfra.scheduler.metrics import Metrics, serve_http

    backend: RemoteBackend | None = None
    if args.allocator == "spread":
        allocator: Any = SpreadAllocator(levels=levels)
    elif args.fluxion_service:
        from fluxinfra.service.tls import read_tls_dir

        tls = read_tls_dir(args.fluxion_tls_dir, "--fluxion-tls-dir") \
            if args.fluxion_tls_dir else None
        backend = RemoteBackend(args.fluxion_service, tls=tls)
        allocator = FluxionAllocator(args.policy, backend, levels=levels)
    else:
        # this command owns its process: the collector is settled beside each matcher built
        allocator = FluxionAllocator(
            args.policy, InProcessBackend(args.policy, on_matcher=gcpolicy.tune_for),
            levels=levels)
    # as many event senders as bind workers (a bind's Event goes out as fast as the bind), and
    # a pooled connection for each watch, bind worker and sender, the Lease and a spare
    senders = args.bind_workers
    api = connect(args.kubeconfig, args.context, page_size=args.page_size,
                  timeouts=Timeouts(read=args.api_timeout),
                  connections=len(KINDS) + args.bind_workers + senders + 2)
    metrics = Metrics()
    instance = os.environ.get("POD_NAME") or f"{args.scheduler_name}-{socket.gethostname()}"
    binder = KubeBinder(api, scheduler_name=args.scheduler_name, instance=instance,
                        metrics=metrics, workers=args.bind_workers, async_events=True,
                        senders=senders)
    config = SchedulerConfig(scheduler_name=args.scheduler_name,
                             default_duration=default_duration,
                             reserve_depth=args.reserve_depth, queue_depth=args.queue_depth,
                             bind_timeout=args.bind_timeout, preemption=args.preemption,
                             podgroup_status_interval=args.podgroup_status_interval)
    core_binder = hosted.binder(args, binder) if hosted is not None else binder
    core = SchedulerCore(allocator, core_binder, config, metrics)
    log = logging.getLogger("fluxinfra.scheduler")
    sync_backend = None
    if backend is not None:
        sync_backend = _replay_reporter(allocator, backend, api, args.scheduler_name, instance)
        metrics.matcher_replays.set_function(lambda: allocator.replays)
    runner, served = _runner(args, hosted, SchedulerParts(
        api, core, core_binder, metrics, instance, default_duration,
        {"resync_seconds": args.resync, "watch_timeout": args.watch_timeout,
         "stall_seconds": args.stall_timeout, "sync_backend": sync_backend,
         "metrics": metrics}))
    elect = bool(os.environ.get("POD_NAMESPACE")) if args.leader_elect is None \
        else args.leader_elect
    elector = LeaderElector(api, args.lease_namespace,
                            args.lease_name or f"{args.scheduler_name}-scheduler", instance,
                            controller=args.scheduler_name)

    def health() -> tuple[bool, str]:
        # A standby replica is healthy; the leader once it has synced and while not stalled.
        if runner.stopped.is_set():
            return False, "stopping"
        if elect and not elector.leading.is_set():
            return True, "standby: another replica holds the lease"
        return runner.health()

    metrics.healthy.set_function(lambda: float(health()[0]))
    try:
        http = serve_http(served, health, args.host, args.port)
    except OSError as exc:
        raise ConfigError(f"--port {args.port}: cannot listen ({exc.strerror})") from None

    drain_by: list[float] = []  # when the pending writes must be out (set by the signal)

    def on_signal() -> None:
        signum = wait_for_signal()
        drain_by.append(time.monotonic() + args.shutdown_grace)
        log.info("signal %d: stopping; binds in flight and pending writes get %.0f s", signum,
                 args.shutdown_grace)
        runner.stop()
        # A loop stuck in a call cannot stop; leave before the kubelet's SIGKILL would.
        _exit_later(args.shutdown_grace + 10.0,
                    f"did not stop within {args.shutdown_grace + 10.0:.0f} s of SIGTERM")

    threading.Thread(target=on_signal, name="signals", daemon=True).start()
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
                # Another replica may lead in moments: never bind alongside it.
                _exit_later(5.0, "lost the lease and the loop did not stop within 5 s")

            elector.keep(runner.stopped, on_lost, healthy=lambda: not runner.stalled())
        runner.run()
    finally:
        # Stop taking work (the loop has), then finish what is in hand: the binds already
        # started and their Events, every queued Event and status write; then the Lease.
        # Having lost the Lease, another replica may already lead: only a short while then.
        deadline = drain_by[0] if drain_by else time.monotonic() + (
            min(3.0, args.shutdown_grace) if lost else args.shutdown_grace)
        runner.finish(deadline)
        binder.drain(deadline)
        http.shutdown()
        if elect and not lost:
            elector.release()
    return 1 if lost else 0


def _runner(args: argparse.Namespace, hosted: Hosted | None,
            parts: SchedulerParts) -> tuple[Any, Any]:
    """The runner (``hosted``'s when it runs) and what /metrics serves."""
    from fluxinfra.scheduler.runner import Runner

    if hosted is not None and (built := hosted.runner(args, parts)) is not None:
        return built
    return Runner(parts.api, parts.core, **parts.runner_settings), parts.metrics


def _exit_later(seconds: float, why: str) -> None:
    """Exit the process (code 1) after ``seconds`` unless it has exited by then."""
    def leave() -> None:
        logging.getLogger("fluxinfra.scheduler").error("exiting: %s", why)
        os._exit(1)

    timer = threading.Timer(seconds, leave)
    timer.daemon = True
    timer.start()


def _replay_reporter(allocator: Any, backend: Any, api: Any, scheduler_name: str,
                     instance: str) -> Callable[[int], bool]:
    """The allocator's ``sync_backend``, plus an Event on the scheduler's own pod (when it
    knows it: ``$POD_NAME``/``$POD_NAMESPACE``) each time the books are replayed."""
    from fluxinfra.scheduler.events import pod_event
    from fluxinfra.scheduler.kube import ApiError

    pod, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")

    def sync(now: int) -> bool:
        before = allocator.replays
        ok = allocator.sync_backend(now)
        if allocator.replays > before and pod and namespace:
            note = (f"the Fluxion service {backend.client.target} lost our allocations "
                    f"({backend.last_reset}); replayed {len(allocator.jobs)} jobs on "
                    f"{len(allocator.nodes)} nodes")
            try:
                api.create_event(namespace, pod_event(namespace, pod, "", "MatcherReplayed",
                                                      note, scheduler_name, instance,
                                                      action="Replay"))
            except ApiError as exc:
                logging.getLogger("fluxinfra.scheduler").warning(
                    "recording the replay failed: %s", exc)
        return ok

    return sync


def run(argv: list[str] | None = None, hosted: Hosted | None = None) -> int:
    """:func:`main` as a program (``python -m fluxinfra.scheduler``): like the CLI, one line on
    stderr and exit 2 on errors."""
    try:
        return main(list(sys.argv[1:] if argv is None else argv), hosted)
    except FluxinfraError as exc:
        print(f"fluxinfra scheduler: error: {exc}", file=sys.stderr)
        return 2
