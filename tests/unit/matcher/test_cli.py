"""``fluxinfra query`` and ``fluxinfra match`` through the real entry point."""

from __future__ import annotations

import json

import pytest
from matcher_testlib import TESTDATA

from fluxinfra.cli import main

DATA = TESTDATA / "data" / "resource"
pytestmark = pytest.mark.skipif(not DATA.exists(), reason=f"Fluxion test data not at {DATA}")
TINY = str(DATA / "grugs" / "tiny.graphml")
JOB = str(DATA / "jobspecs" / "basics" / "test001.yaml")


def run_query(tmp_path, commands: str, *extra: str) -> tuple[int, str]:
    cmds = tmp_path / "cmds.in"
    cmds.write_text(commands)
    out = tmp_path / "out.txt"
    rc = main(["query", "-L", TINY, "-f", "grug", "-P", "high", "-t", str(out),
               "--commands", str(cmds), *extra])
    return rc, out.read_text()


def test_query_prints_vertex_lines_and_info_block(tmp_path):
    rc, out = run_query(tmp_path, f"match allocate {JOB}\nquit\n")
    assert rc == 0
    assert out.splitlines()[0] == "      ---------------core35[1:x]"
    assert "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n" in out


def test_query_reports_unsatisfiable_and_keeps_counting(tmp_path):
    big = str(DATA / "jobspecs" / "basics" / "test007.yaml")
    rc, out = run_query(tmp_path, f"match allocate_with_satisfiability {big}\n"
                                  f"match allocate {JOB}\nquit\n")
    assert "INFO: No matching resources found\nINFO: Unsatisfiable request\nINFO: JOBID=1" in out
    assert "INFO: JOBID=2\nINFO: RESOURCES=ALLOCATED" in out


def test_query_cancel_stats_and_find(tmp_path):
    rc, out = run_query(tmp_path, f"match allocate {JOB}\ncancel 1 stats\n"
                                  "find sched-now=allocated\nquit\n")
    assert 'INFO: CANCEL POSTORDER COUNT="5"' in out
    assert out.endswith('INFO: EXPRESSION="sched-now=allocated"\n'
                        "INFO: =============================\n")


def test_query_pretty_simple_prints_parents_first(tmp_path):
    rc, out = run_query(tmp_path, f"match allocate {JOB}\nquit\n", "-F", "pretty_simple")
    assert out.splitlines()[0] == "      ---tiny0[1:shared]"


def test_query_bad_graph_is_exit_1_like_resource_query(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["query", "-L", str(bad), "-f", "jgf"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("fluxinfra query: error: JGF: malformed JSON") and "\n" not in err


def test_match_prints_json(capsys):
    assert main(["match", TINY, JOB, "--policy", "low", "--indent", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["status"], doc["nodes"], doc["slots"]) == (
        "ALLOCATED", ["node0"], [{"node0": {"socket": 1, "core": 1}}])
    assert doc["R"]["execution"]["R_lite"] == [{"rank": "0", "children": {"core": "0"}}]


def test_match_bad_jobspec_is_exit_2(tmp_path, capsys):
    spec = tmp_path / "job.yaml"
    spec.write_text("version: 1\nresources:\n  - type: slot\n    count: 1\n    with:\n"
                    "      - type: core\n        count: 1\n")
    assert main(["match", TINY, str(spec)]) == 2
    assert "resources[0].label: missing" in capsys.readouterr().err


def test_query_unknown_job_is_one_line_and_exit_0_after_the_session(tmp_path, capsys):
    rc, out = run_query(tmp_path, f"cancel 7\nmatch allocate {JOB}\nquit\n")
    assert rc == 0  # an answer, as resource-query gives it
    assert "INFO: JOBID=1" in out  # the session went on, like resource-query
    err = capsys.readouterr().err
    assert err == "cancel: ERROR: nonexistent job 7\n"  # resource-query's words


def _program(tmp_path, argv: list[str], stdin: str = "") -> tuple[int, str, str, bool]:
    """``fluxinfra ARGV`` as its own process through :func:`fluxinfra.cli.script` (what the
    console script and ``python -m fluxinfra`` run), with an exit handler registered first:
    (status, stdout, stderr, whether the handler ran)."""
    import subprocess
    import sys

    ran = tmp_path / "atexit-ran"
    code = ("import atexit, pathlib, sys\n"
            f"atexit.register(pathlib.Path({str(ran)!r}).write_text, 'yes')\n"
            f"sys.argv = ['fluxinfra', *{argv!r}]\n"
            "from fluxinfra.cli import script\nscript()\n")
    proc = subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, proc.stdout, proc.stderr, ran.exists()


def test_the_program_ends_a_query_with_everything_written(tmp_path, capsys):
    # A query ends without the interpreter's teardown (QUICK_EXIT): what it wrote to a pipe
    # (far more than a pipe holds) and to -t is whole, exit handlers ran, and the bytes are
    # those of the same session run in process.
    commands = "".join(f"match allocate {JOB}\ncancel {i + 1}\n" for i in range(300))
    commands += f"match allocate {JOB}\ninfo 301\n"
    out = tmp_path / "t.txt"
    argv = ["query", "-L", TINY, "-f", "grug", "-P", "first", "-t", str(out)]
    rc, stdout, stderr, ran = _program(tmp_path, argv + ["-F", "pretty_simple"], commands)
    assert (rc, stderr, ran) == (0, "", True)
    rc2, stdout2, _, _ = _program(tmp_path, argv[:-2] + ["-F", "pretty_simple"], commands)
    assert rc2 == 0 and len(stdout2) > 1 << 16  # (more than a pipe's buffer)
    expect = tmp_path / "expect.txt"
    cmds = tmp_path / "cmds.in"
    cmds.write_text(commands)
    capsys.readouterr()
    assert main(argv[:-1] + [str(expect), "-F", "pretty_simple", "--commands", str(cmds)]) == 0
    def untimed(text: str) -> str:
        return text.rpartition(",")[0]  # (the last field of info's line is the match's time)

    # info prints to stdout with -t too; without -t, the matches come before it
    assert untimed(stdout) == untimed(capsys.readouterr().out) != ""
    assert out.read_text() == expect.read_text()
    assert "INFO: JOBID=301" in out.read_text()
    assert untimed(stdout2) == out.read_text() + untimed(stdout)


def test_the_program_keeps_a_failed_query_s_status(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    rc, _, stderr, ran = _program(tmp_path, ["query", "-L", str(bad), "-f", "jgf"])
    assert (rc, ran) == (1, True)
    assert stderr.startswith("fluxinfra query: error: JGF: malformed JSON")
