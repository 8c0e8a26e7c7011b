"""Differential replay against a real Fluxion ``resource-query`` (when one is on this machine).

Fluxion's own expected outputs cover each case under the one policy its test script uses. With a
real ``resource-query`` at hand, every manifest case can be replayed under *any* policy through
both programs and the ``-t`` outputs compared (byte for byte, then normalised as in
``replay.py``), and the exit statuses.
``python tests/conformance/live.py --resource-query PATH [--policies a,b] [FILTER]`` prints a
line per differing case and the counts per policy; ``test_live.py`` runs the same under pytest
against ``known_live_differences.tsv``.

The binary is found from ``$FLUXINFRA_RESOURCE_QUERY``, else ``resource-query`` on ``PATH``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from replay import (
    TESTDATA,
    Case,
    Run,
    case_commands,
    load_cases,
    normalise,
    query_argv,
    run_query,
)

#: every named policy (custom strings are combinations of the same options)
POLICIES = ["first", "firstnodex", "low", "high", "lonode", "hinode", "lonodex", "hinodex",
            "locality", "variation"]
KNOWN_LIVE = Path(__file__).with_name("known_live_differences.tsv")


def find_resource_query() -> str | None:
    """The real resource-query to compare with, or None."""
    path = os.environ.get("FLUXINFRA_RESOURCE_QUERY") or shutil.which("resource-query")
    return path if path and os.access(path, os.X_OK) else None


def run_real(binary: str, case: Case, timeout: float = 300) -> Run:
    """The case's ``-t`` output, exit status and stderr as Fluxion's resource-query gives them."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        argv = [binary, *query_argv(case), "-t", str(out)]
        proc = subprocess.run(argv, input=case_commands(case), text=True, capture_output=True,
                              timeout=timeout, cwd=tmp, check=False)
        return Run(out.read_text(encoding="utf-8") if out.exists() else "", proc.returncode,
                   proc.stderr)


def compare_live(binary: str, case: Case, policy: str) -> tuple[str, str]:
    """(identical | normalised | differs, first difference) for ``case`` under ``policy``:
    the ``-t`` outputs and the exit statuses of both programs."""
    case = dataclasses.replace(case, policy=policy)
    real = run_real(binary, case)
    try:
        ours = run_query(case)
    except Exception as exc:  # noqa: BLE001 - report, don't abort the replay
        return "differs", f"crashed: {type(exc).__name__}: {exc}"
    if ours.status != real.status:
        return "differs", f"exit status: resource-query {real.status}, fluxinfra {ours.status}"
    expected, got = real.output, ours.output
    if got == expected:
        return "identical", ""
    status = "normalised" if normalise(got) == normalise(expected) else "differs"
    exp_lines, got_lines = expected.splitlines(), got.splitlines()
    for i, (a, b) in enumerate(zip(exp_lines, got_lines, strict=False)):
        if a != b:
            return status, f"line {i + 1}: resource-query {a!r}, fluxinfra {b!r}"
    return status, f"length: resource-query {len(exp_lines)} lines, fluxinfra {len(got_lines)}"


@dataclasses.dataclass(frozen=True)
class Start:
    """A command line ``resource-query`` refuses (or accepts) before any command is read."""
    name: str
    argv: tuple[str, ...]
    #: resource-query v0.54.0's exit status (checked against the binary by test_live.py)
    real: int
    #: ours, where it differs on purpose (a C++ abort or crash is one line and exit 1 here)
    ours: int | None = None


_TINY = "@DATA@/grugs/tiny.graphml"
#: what resource-query exits with before its session starts, by kind of bad input
STARTS = [
    Start("unknown option", ("-L", _TINY, "--bogus"), 1),
    Start("no such -L file", ("-L", "/nonexistent.graphml"), 1),
    Start("-L is a directory", ("-L", "@DATA@"), 1),
    Start("no -L (conf/default absent)", (), 1),
    Start("unknown -f", ("-L", _TINY, "-f", "yaml"), 1),
    Start("unknown -F", ("-L", _TINY, "-F", "xml"), 1),
    Start("unknown -g", ("-L", _TINY, "-g", "gif"), 1),
    Start("an argument that is no option", ("-L", _TINY, "extra"), 1),
    Start("graph in another format than -f", ("-L", _TINY, "-f", "jgf"), 1),
    Start("unknown policy", ("-L", _TINY, "-P", "bogus"), 1),
    Start("malformed prune filter", ("-L", _TINY, "-p", "bogus"), 1),
    Start("unknown subsystem (resource-query aborts: std::out_of_range)",
          ("-L", _TINY, "-S", "XYZ"), 134, ours=1),
    Start("unknown traverser (resource-query crashes: SIGSEGV)",
          ("-L", _TINY, "-T", "weird"), 139, ours=1),
    Start("unwritable -t (resource-query aborts: std::ios_base::failure)",
          ("-L", _TINY, "-t", "/nonexistent-dir/out"), 134, ours=1),
    Start("-r out of range: a warning", ("-L", _TINY, "-r", "3000000"), 0),
    Start("-r not a number: atoi gives 0", ("-L", _TINY, "-r", "abc"), 0),
    Start("-o with -g: accepted (v0.54.0 writes nothing)", ("-L", _TINY, "-o", "g", "-g",
                                                             "graphml"), 0),
    Start("-h", ("-h",), 0),
    Start("rv1exec_force of a GRUG file", ("-L", _TINY, "-f", "rv1exec_force"), 1),
]


def start_argv(start: Start) -> list[str]:
    return [a.replace("@DATA@", str(TESTDATA / "data" / "resource")) for a in start.argv]


def real_start_status(binary: str, start: Start) -> int:
    """resource-query's exit status for ``start`` (a signal as 128 + its number, as a shell
    reports it), with ``quit`` as its only command, in a scratch directory."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([binary, *start_argv(start)], input="quit\n", text=True,
                              capture_output=True, timeout=60, cwd=tmp, check=False)
    return proc.returncode if proc.returncode >= 0 else 128 - proc.returncode


def our_start_status(start: Start) -> tuple[int, str]:
    """``fluxinfra query``'s exit status for ``start`` (in process, in a scratch directory)
    and what it printed on stderr."""
    from fluxinfra.cli import query

    with tempfile.TemporaryDirectory() as tmp, contextlib.chdir(tmp):
        cmds = Path(tmp) / "cmds.in"
        cmds.write_text("quit\n")
        argv = start_argv(start)
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = query.main([*argv, "--commands", str(cmds)])
            except SystemExit as exc:  # argparse: -h, or a bad command line
                status = exc.code if isinstance(exc.code, int) else 1
        return status, stderr.getvalue()


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
    cases = [c for c in load_cases() if opts.filter in c.name or opts.filter in c.script]
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
