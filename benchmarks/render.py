"""Offline render speed: `fluxinfra render` per stack, cold (first, schemas loaded) and warm.

    .venv/bin/python benchmarks/run.py render [--quick]

The goal is a render well under 20 s per stack on a 2-core machine. Prints one row per stack:
manifests, Kubernetes versions validated, cold and median warm seconds, and the warm time's share
of the 20 s budget.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

BUDGET_S = 20.0
ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str]) -> int:
    from fluxinfra.render import render

    repeats = 1 if "--quick" in argv else 5
    stacks = sorted(p.name[len("Pulumi."):-len(".yaml")]
                    for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
    print(f"{'stack':<8} {'manifests':>9} {'versions':>9} {'cold s':>7} {'warm s':>7} "
          f"{'of budget':>9}")
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
        print(f"{stack:<8} {len(result.files):>9} {len(result.versions):>9} {cold:>7.2f} "
              f"{median:>7.2f} {median / BUDGET_S:>8.0%}")
    return 0 if worst < BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
