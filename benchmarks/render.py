"""Offline render speed: `fluxinfra render` per stack, cold (first, schemas loaded) and warm.

    .venv/bin/python benchmarks/run.py render [--quick]

The goal is a render well under 20 s per stack on a 2-core machine. Prints one row per stack:
manifests, Kubernetes versions validated, cold and median warm seconds, and the warm time's share
of the 20 s budget.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared benchmarks/_table.py
from _table import format_table  # noqa: E402

BUDGET_S = 20.0
ROOT = Path(__file__).resolve().parents[1]
LEGEND = {
    "manifests": "Kubernetes manifests written and validated",
    "versions": "Kubernetes versions each manifest is validated against (strict schemas)",
    "cold s": "first render in this process (schemas loaded, program imported)",
    "warm s": "median of the renders after it",
    "of budget": f"warm s as a share of the {BUDGET_S:.0f} s goal",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/run.py render",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="one warm render per stack, not five")
    p.add_argument("--repeats", type=int, default=5, help="warm renders per stack (default 5)")
    return p


def main(argv: list[str]) -> int:
    from fluxinfra.render import render

    args, _ = parser().parse_known_args(argv)
    repeats = 1 if args.quick else max(1, args.repeats)
    stacks = sorted(p.name[len("Pulumi."):-len(".yaml")]
                    for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
    rows = []
    worst = 0.0
    for stack in stacks:
        t0 = time.perf_counter()
        result = render(stack, root=ROOT)
        cold = time.perf_counter() - t0
        warm = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            render(stack, root=ROOT)
            warm.append(time.perf_counter() - t0)
        median = statistics.median(warm)
        worst = max(worst, cold)
        rows.append([stack, len(result.files), len(result.versions), cold, median,
                     f"{median / BUDGET_S:.0%}"])
    print(format_table(["stack", "manifests", "versions", "cold s", "warm s", "of budget"], rows,
                       legend=LEGEND))
    return 0 if worst < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
