"""``fluxinfra scheduler`` and ``python -m fluxinfra.scheduler``: the scheduler's process,
hosting the Fluxion queue with ``--queue`` (docs/scheduler.md, docs/queue.md).

The scheduler (:mod:`fluxinfra.scheduler.main`) never imports the queue, and the queue builds
on the scheduler; this module, above both, wires them: :class:`QueueHosting` adds the queue's
flags, puts the queue's binder in front of the scheduler's and runs the queue's controller on
the scheduler's core. The queue's modules are imported only when ``--queue`` is given.
"""

from __future__ import annotations

import argparse
from typing import Any

from fluxinfra.scheduler import main as process
from fluxinfra.scheduler.main import SchedulerParts

__all__ = ["QueueHosting", "main", "parser", "run"]


class QueueHosting:
    """The queue as the scheduler's process hosts it (a :class:`~fluxinfra.scheduler.main.
    Hosted`): FluxJobs, suspended Jobs and gated pods, placed by the scheduler's own core."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--queue", action="store_true",
                            help="host the Fluxion queue (FluxJobs, suspended Jobs, gated pods; "
                                 "docs/queue.md): needs its CRDs installed")
        parser.add_argument("--queue-config", metavar="JSON", default="",
                            help="with --queue: the stack's FluxJobQueues as a JSON list of "
                                 "{namespace, name, maxRunning, maxCores, maxMemory, maxGPUs}; "
                                 "the controller creates them and keeps their limits")

    def binder(self, args: argparse.Namespace, binder: Any) -> Any:
        """With ``--queue``, the queue's binder in front of the scheduler's: it takes the
        queue's own pods."""
        if not args.queue:
            return binder
        from fluxinfra.queue.binding import QueueBinder

        return QueueBinder(binder)

    def runner(self, args: argparse.Namespace, parts: SchedulerParts) -> tuple[Any, Any] | None:
        """With ``--queue``: the runner over the queue's controller (which drives the
        scheduler's core) on a client of its own, the configured queues kept, and one
        ``/metrics`` page for both."""
        if not args.queue:
            return None
        from fluxinfra.queue.controller import QueueConfig, QueueCore
        from fluxinfra.queue.kube import QUEUE_CONNECTIONS, QUEUE_KINDS, QueueClient
        from fluxinfra.queue.metrics import QueueMetrics, combined
        from fluxinfra.scheduler.runner import Runner

        queue_api = QueueClient.on_settings_of(parts.api, connections=QUEUE_CONNECTIONS)
        if args.queue_config:
            from fluxinfra.queue.configured import parse_queue_config, start_keeping

            start_keeping(queue_api.custom_objects(), parse_queue_config(args.queue_config),
                          manager=args.scheduler_name)
        queue_metrics = QueueMetrics()
        hosted = QueueCore(parts.core, queue_api, QueueConfig(
            scheduler_name=args.scheduler_name, default_duration=parts.default_duration,
            instance=parts.instance, async_events=True), queue_metrics, binder=parts.binder)
        runner = Runner(queue_api, hosted, hosted_kinds=QUEUE_KINDS, **parts.runner_settings)
        return runner, combined(parts.metrics, queue_metrics)


HOSTED = QueueHosting()


def parser() -> argparse.ArgumentParser:
    """``fluxinfra scheduler``'s flags: the scheduler's and the queue's."""
    return process.parser(HOSTED)


def main(argv: list[str]) -> int:
    return process.start(parser().parse_args(argv), HOSTED)


def run(argv: list[str] | None = None) -> int:
    """``python -m fluxinfra.scheduler``: one line on stderr and exit 2 on errors."""
    return process.run(argv, HOSTED)
