"""Collects every replayed case's outcome and prints the conformance counts at session end."""

from __future__ import annotations

from replay import RESULTS


def pytest_terminal_summary(terminalreporter):
    if not RESULTS:
        return
    total = len(RESULTS)
    same = sum(1 for s in RESULTS.values() if s == "identical")
    norm = sum(1 for s in RESULTS.values() if s in ("identical", "normalised"))
    terminalreporter.write_line(
        f"conformance: {same}/{total} byte-identical, {norm}/{total} normalised-equal")
