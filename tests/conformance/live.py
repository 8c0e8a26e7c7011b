"""Differential replay against a real Fluxion ``resource-query`` (when one is on this machine).

Fluxion's own expected outputs cover each case under the one policy its test script uses. With a
real ``resource-query`` at hand, every manifest case can be replayed under *any* policy through
both programs and the ``-t`` outputs compared (byte for byte, then normalised as in
``replay.py``). ``python tests/conformance/live.py --resource-query PATH [--policies a,b] [FILTER]``
prints a line per differing case and the counts per policy; ``test_live.py`` runs the same under
pytest against ``known_live_differences.tsv``.

The binary is found from ``$FLUXINFRA_RESOURCE_QUERY``, else ``resource-query`` on ``PATH``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from replay import TESTDATA, Case, command_text, load_cases, load_extra_cases, normalise, run_case

#: every named policy (custom strings are combinations of the same options)
POLICIES = ["first", "firstnodex", "low", "high", "lonode", "hinode", "lonodex", "hinodex",
            "locality", "variation"]
KNOWN_LIVE = Path(__file__).with_name("known_live_differences.tsv")


def find_resource_query() -> str | None:
    """The real resource-query to compare with, or None."""
    path = os.environ.get("FLUXINFRA_RESOURCE_QUERY") or shutil.which("resource-query")
    return path if path and os.access(path, os.X_OK) else None


def run_real(binary: str, case: Case, timeout: float = 300) -> str:
    """The case's ``-t`` output as Fluxion's resource-query writes it."""
    text = command_text(case)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        argv = [binary, "-L", str(TESTDATA / case.graph), "-f", case.load_format,
                "-S", case.subsystems, "-P", case.policy, "-F", case.match_format,
                *shlex.split(case.extra), "-t", str(out)]
        subprocess.run(argv, input=text, text=True, capture_output=True, timeout=timeout,
                       cwd=tmp, check=False)
        return out.read_text(encoding="utf-8") if out.exists() else ""


def compare_live(binary: str, case: Case, policy: str) -> tuple[str, str]:
    """(identical | normalised | differs, first differing line) for ``case`` under ``policy``."""
    case = dataclasses.replace(case, policy=policy)
    expected = run_real(binary, case)
    try:
        got = run_case(case)
    except Exception as exc:  # noqa: BLE001 - report, don't abort the replay
        return "differs", f"crashed: {type(exc).__name__}: {exc}"
    if got == expected:
        return "identical", ""
    status = "normalised" if normalise(got) == normalise(expected) else "differs"
    exp_lines, got_lines = expected.splitlines(), got.splitlines()
    for i, (a, b) in enumerate(zip(exp_lines, got_lines, strict=False)):
        if a != b:
            return status, f"line {i + 1}: resource-query {a!r}, fluxinfra {b!r}"
    return status, f"length: resource-query {len(exp_lines)} lines, fluxinfra {len(got_lines)}"


def load_known_live() -> dict[tuple[str, str], tuple[str, str]]:
    """(policy, case name) -> (level reached, why)."""
    known: dict[tuple[str, str], tuple[str, str]] = {}
    for line in KNOWN_LIVE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            policy, name, level, reason = (line.split("\t") + ["", ""])[:4]
            known[(policy.strip(), name.strip())] = (level.strip(), reason.strip())
    return known


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resource-query", default=find_resource_query())
    parser.add_argument("--policies", default=",".join(POLICIES))
    parser.add_argument("filter", nargs="?", default="")
    opts = parser.parse_args(argv)
    if not opts.resource_query:
        print("no resource-query: pass --resource-query or set FLUXINFRA_RESOURCE_QUERY",
              file=sys.stderr)
        return 2
    cases = [c for c in load_cases() + load_extra_cases()
             if opts.filter in c.name or opts.filter in c.script]
    for policy in opts.policies.split(","):
        counts = {"identical": 0, "normalised": 0, "differs": 0}
        for case in cases:
            status, why = compare_live(opts.resource_query, case, policy)
            counts[status] += 1
            if status != "identical":
                print(f"{policy}\t{case.name}\t{status}\t{why[:160]}")
        n = len(cases)
        print(f"live {policy}: {counts['identical']}/{n} byte-identical, "
              f"{counts['identical'] + counts['normalised']}/{n} normalised-equal", flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main(sys.argv[1:]))
