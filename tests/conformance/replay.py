"""Replay Fluxion's resource-query test cases through ``fluxinfra query`` (in process).

Each manifest row is run with the same options resource-query gets, through the CLI's entry
point (``fluxinfra.cli.query.main``, in process), and its ``-t`` output is compared with the
expected file byte for byte and normalised (per job: the set of vertex lines plus the INFO
block), and its exit status with resource-query's (0 for every case).
``python tests/conformance/replay.py [FILTER]`` prints a per-case table.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTDATA = (REPO / ".." / "shared" / "fluxion-testdata").resolve()
KNOWN = Path(__file__).with_name("known_differences.tsv")
EXTRA = Path(__file__).with_name("cases")
#: case id -> identical | normalised | differs (filled by the pytest replay, summed at the end)
RESULTS: dict[str, str] = {}
#: replay through Fluxion's full walk (``Matcher(exact=True)``) instead of the default one
FULL_WALK = bool(os.environ.get("FLUXINFRA_FULL_WALK"))
_STATS = re.compile(r"^INFO: (ELAPSE|PREORDER VISIT COUNT|POSTORDER VISIT COUNT|"
                    r"(PARTIAL )?CANCEL (PRE|POST)ORDER COUNT)=")


@dataclass
class Case:
    index: int
    script: str
    description: str
    graph: str
    load_format: str
    subsystems: str
    policy: str
    match_format: str
    extra: str
    cmds: str
    expected: str

    @property
    def name(self) -> str:
        test = self.script.split("-", 1)[0]
        return f"{test}/{Path(self.expected).parent.name}/{Path(self.expected).name.split('.')[0]}"


def load_cases() -> list[Case]:
    with open(TESTDATA / "manifest.tsv", encoding="utf-8") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    return [Case(i, *row[:10]) for i, row in enumerate(rows[1:], 1)]


def load_extra_cases() -> list[Case]:
    """Cases of our own (``cases/cases.tsv``) on Fluxion's graphs, for the live differential
    only (no stored expected output): command files are read from ``cases/``."""
    rows = [line.split("\t") for line in EXTRA.joinpath("cases.tsv").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    return [dataclasses.replace(Case(1000 + i, *row[:10]), cmds=str(EXTRA / row[8]))
            for i, row in enumerate(rows[1:], 1)]


def load_known() -> dict[str, tuple[str, str]]:
    """case name -> (level reached: normalised | differs, reason)."""
    known: dict[str, tuple[str, str]] = {}
    if KNOWN.exists():
        for line in KNOWN.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                name, level, reason = (line.split("\t") + ["", ""])[:3]
                known[name.strip()] = (level.strip(), reason.strip())
    return known


def query_argv(case: Case) -> list[str]:
    """The options resource-query gets for ``case`` (both programs take the same)."""
    return ["-L", str(TESTDATA / case.graph), "-f", case.load_format, "-S", case.subsystems,
            "-P", case.policy, "-F", case.match_format, *shlex.split(case.extra)]


def case_commands(case: Case) -> str:
    """The case's command file with its placeholders filled in."""
    text = (TESTDATA / case.cmds).read_text(encoding="utf-8")
    return text.replace("@TEST_SRCDIR@", str(TESTDATA)).replace("@CASES@", str(EXTRA))


@dataclass
class Run:
    """What one program did with a case: its ``-t`` output, exit status and stderr."""
    output: str
    status: int
    stderr: str = ""


def run_query(case: Case) -> Run:
    """``case`` through ``fluxinfra query``'s entry point (in process): output and status."""
    from unittest import mock

    from fluxinfra.cli import query

    opened = query.open_session

    def open_session(*args, **kwargs):
        session = opened(*args, **kwargs)
        if FULL_WALK:
            session.m.exact = True
            session.m.trav.fast = False
        return session

    with tempfile.TemporaryDirectory() as tmp:
        out, cmds = Path(tmp) / "out", Path(tmp) / "cmds.in"
        cmds.write_text(case_commands(case), encoding="utf-8")
        stdout, stderr = io.StringIO(), io.StringIO()
        with mock.patch.object(query, "open_session", open_session), \
                contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            status = query.main([*query_argv(case), "-t", str(out), "--commands", str(cmds)])
        return Run(out.read_text(encoding="utf-8") if out.exists() else "", status,
                   stderr.getvalue())


def run_case(case: Case) -> str:
    """The case's ``-t`` output as ``fluxinfra query`` writes it."""
    return run_query(case).output


def normalise(text: str) -> list:
    """Per block: the set of vertex lines and the INFO lines (statistics dropped)."""
    blocks: list = []
    vertices: list[str] = []
    info: list[str] = []
    in_info = False
    for line in text.splitlines():
        if _STATS.match(line):
            continue
        if line.startswith("INFO: ====="):
            if in_info:
                blocks.append((frozenset(vertices), tuple(info)))
                vertices, info = [], []
            in_info = not in_info
            continue
        if in_info:
            info.append(line)
        elif line.startswith("      "):
            vertices.append(line.strip(" -"))
        else:
            blocks.append((frozenset(), (line,)))
    if vertices or info:
        blocks.append((frozenset(vertices), tuple(info)))
    return blocks


def compare(case: Case) -> tuple[bool, bool, str]:
    """(byte-identical, normalised-equal, first difference). resource-query exits 0 on every
    case (Fluxion's own tests run each under test_expect_success), so a status other than 0
    is a difference too."""
    expected = (TESTDATA / case.expected).read_text(encoding="utf-8")
    try:
        run = run_query(case)
    except Exception as exc:  # noqa: BLE001 - report, don't abort the replay
        return False, False, f"crashed: {type(exc).__name__}: {exc}"
    if run.status != 0:
        return False, False, f"exit status {run.status}, resource-query's is 0: {run.stderr[-300:]}"
    got = run.output
    if got == expected:
        return True, True, ""
    norm = normalise(got) == normalise(expected)
    exp_lines, got_lines = expected.splitlines(), got.splitlines()
    for i, (a, b) in enumerate(zip(exp_lines, got_lines, strict=False)):
        if a != b:
            return False, norm, f"line {i + 1}: expected {a!r} got {b!r}"
    return False, norm, f"length: expected {len(exp_lines)} lines, got {len(got_lines)}"


def main(argv: list[str]) -> int:
    pattern = argv[0] if argv else ""
    cases = [c for c in load_cases() if pattern in c.name or pattern in c.script]
    same = norm = 0
    for case in cases:
        ident, equal, why = compare(case)
        same += ident
        norm += equal
        mark = "=" if ident else ("~" if equal else "X")
        print(f"{mark} {case.name:28} {case.script:32} {case.policy[:12]:12} {why[:150]}")
    print(f"conformance: {same}/{len(cases)} byte-identical, {norm}/{len(cases)} normalised-equal")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main(sys.argv[1:]))
