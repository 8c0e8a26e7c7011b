"""``fluxinfra simulate WORKLOAD``: replay a workload through the scheduler core (simulated time).

Prints, per allocator (each ``--policy`` of Fluxion's matcher, then the kube-scheduler-like spread
baseline): makespan, core utilisation, wait times (arrival to start of the whole job), jobs never
placed, matcher calls and wall time. See :mod:`fluxinfra.scheduler.simulator` for the workload
format and ``examples/workloads/`` for two workloads.
"""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["main"]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fluxinfra simulate",
                                description="Replay a workload through the scheduler core.")
    p.add_argument("workload", help="workload file (YAML or JSON)")
    p.add_argument("--policy", action="append", dest="policies",
                   help="Fluxion policy to compare (repeatable; default: first)")
    p.add_argument("--no-baseline", action="store_true", help="skip the spread baseline")
    p.add_argument("--reserve-depth", type=int, default=1,
                   help="reservations per cycle: 1 = EASY backfill (default), 0 = none")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    from fluxinfra.errors import ConfigError
    from fluxinfra.matcher import gcpolicy
    from fluxinfra.scheduler.simulator import compare, format_table, load_workload

    if args.reserve_depth < 0:
        raise ConfigError(f"--reserve-depth {args.reserve_depth}: use 0 or more")
    workload = load_workload(args.workload)
    policies = args.policies or ["first"]
    results = compare(workload, policies, baseline=not args.no_baseline,
                      reserve_depth=args.reserve_depth,
                      on_matcher=gcpolicy.tune_for)  # this command owns its process
    if args.json:
        json.dump([{"allocator": r.allocator, "makespan": r.makespan,
                    "utilisation": r.utilisation, "waits": r.wait_stats(),
                    "never_scheduled": r.never_scheduled, "completed_pods": r.completed_pods,
                    "matches": r.matches, "wall_seconds": r.wall_seconds} for r in results],
                  sys.stdout, indent=2)
        print()
        return 0
    print(f"{args.workload}: {len(workload.nodes)} nodes, {workload.total_cores} cores, "
          f"{len(workload.jobs)} jobs, {sum(j.pods for j in workload.jobs)} pods")
    print(format_table(results))
    unplaced = sorted({n for r in results for n in r.never_scheduled})
    if unplaced:
        print(f"\nnever placed (by some allocator): {', '.join(unplaced)}")
    return 0
