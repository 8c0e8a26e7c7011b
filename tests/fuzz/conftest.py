"""The fuzz tests: hypothesis properties over every input surface, bounded in time.

One file per surface, ``test_fuzz_<surface>.py``; each test is ``@fuzz`` over ``@given`` (see
``fuzzlib.py`` for the budget, the per-input deadline and the contract helper ``clean``). The
contract every surface keeps: a valid result, or the project's error class with a message;
never another exception, never a hang.

The normal test run gives each test FLUXINFRA_FUZZ_SECONDS (default 3) seconds; ``make fuzz``
gives each 60 (``make fuzz FLUXINFRA_FUZZ_SECONDS=600`` for longer) and prints the table below.
At the end of a session this prints, per surface, the inputs tried, the seconds and the
failures.
"""

from __future__ import annotations

import fuzzlib


def pytest_terminal_summary(terminalreporter):
    stats = fuzzlib.STATS
    if not stats:
        return
    surfaces: dict[str, list] = {}
    for key, stat in stats.items():
        surfaces.setdefault(stat.surface, []).append((key, stat))
    budget = (f"{fuzzlib.EXAMPLES} inputs per test" if fuzzlib.EXAMPLES
              else f"{fuzzlib.SECONDS:g} s per test")
    terminalreporter.section(f"fuzz: inputs tried per surface ({budget}, deadline "
                             f"{fuzzlib.DEADLINE:g} s per input)")
    terminalreporter.write_line(f"{'surface':<14} {'tests':>5} {'inputs':>9} {'rounds':>6} "
                                f"{'seconds':>8} {'failed':>6}")
    for surface in sorted(surfaces):
        rows = surfaces[surface]
        terminalreporter.write_line(
            f"{surface:<14} {len(rows):>5} {sum(s.tried for _, s in rows):>9} "
            f"{sum(s.rounds for _, s in rows):>6} {sum(s.seconds for _, s in rows):>8.1f} "
            f"{sum(s.failed for _, s in rows):>6}")
    for key, stat in stats.items():
        if stat.failed:
            terminalreporter.write_line(f"failed: {key} after {stat.tried} inputs")
    terminalreporter.write_line(f"{'all':<14} {len(stats):>5} "
                                f"{sum(s.tried for s in stats.values()):>9} "
                                f"{sum(s.rounds for s in stats.values()):>6} "
                                f"{sum(s.seconds for s in stats.values()):>8.1f} "
                                f"{sum(s.failed for s in stats.values()):>6}")
