"""The matcher benchmark's whole-process comparison (``benchmarks/matcher.py``): the command
file both programs run, the phases each process times between its ``stat`` marks, medians over
the rounds, and the verdict on the two programs' ``-t`` outputs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks" / "matcher.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("fluxinfra_bench_matcher", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(marks: list[float], digest: str = "abc", rc: int = 0) -> dict:
    return {"marks": marks, "wall": marks[-1] + 0.1 if marks else 1.0, "rss_mib": 10.0,
            "rc": rc, "digest": digest}


def test_the_command_file_brackets_each_phase_with_stat() -> None:
    bench = load_bench()
    text = bench.command_text([("/j.json", 3, 2), ("/k.json", 1, 1)]).splitlines()
    assert text == ["stat"] + ["match allocate /j.json"] * 3 + [
        "stat", "cancel 1", "match allocate /j.json", "cancel 2", "match allocate /j.json",
        "stat", "cancel 3", "cancel 4", "cancel 5", "stat",
        "match allocate /k.json", "stat", "cancel 6", "match allocate /k.json", "stat",
        "cancel 7", "stat", "quit"]


def test_phases_are_medians_of_the_rounds_between_the_marks() -> None:
    bench = load_bench()
    got = bench.phases([run([1.0, 1.5, 1.7]), run([3.0, 3.1, 3.2]), run([2.0, 2.3, 2.5]),
                        run([9.0], rc=1)])  # a failed run counts for nothing
    assert got["load_s"] == 2.0
    assert got["fill_ms"] == pytest.approx(300.0) and got["steady_ms"] == pytest.approx(200.0)
    # the second stream of a process: its marks follow the first's cancel-the-rest mark
    second = bench.phases([run([1.0, 1.5, 1.7, 1.8, 2.8, 3.0, 3.1])], 1)
    assert second["load_s"] == 1.0
    assert second["fill_ms"] == pytest.approx(1000.0)
    assert second["steady_ms"] == pytest.approx(200.0)


def test_a_row_is_the_same_only_when_every_run_of_both_wrote_one_output() -> None:
    bench = load_bench()
    row = {"policy": "low", "stream": "1core", "fill": 10, "steady": 5,
           "runs": {"ours": [run([1.0, 1.1, 1.15], "d1"), run([1.0, 1.1, 1.15], "d1")],
                    "fluxion": [run([2.0, 3.0, 4.0], "d1")]}}
    assert bench.same_output(row) == "same d1"
    table, identical = bench.process_tables([{"size": 8, "rows": [row]}])
    # the table comes in parts ~100 columns wide, the key columns repeated in each
    line = " ".join(x for x in table.splitlines() if " low " in x)
    # ours 100 ms / 10 = 10 ms per match, fluxion 1000 / 10 = 100: 10x; pairs 10 vs 200: 20x
    assert identical and "10.0x" in line and "20.0x" in line
    row["runs"]["fluxion"][0]["digest"] = "d2"
    assert bench.same_output(row).startswith("DIFFERENT")
    assert not bench.process_tables([{"size": 8, "rows": [row]}])[1]


def test_scoring_policies_run_shorter_streams_than_first_fit() -> None:
    bench = load_bench()
    assert bench.plan_for("first", "1core", 4096, 2000, 200, 10, 5) == (2000, 200)
    assert bench.plan_for("low", "1core", 4096, 2000, 200, 10, 5) == (10, 5)
    assert bench.plan_for("firstnodex", "64node", 256, 2000, 200, 10, 5) == (4, 4)


def test_a_real_program_is_timed_between_its_stat_marks(tmp_path) -> None:
    # a stand-in program that prints stat blocks like both programs do
    bench = load_bench()
    prog = tmp_path / "prog.py"
    prog.write_text("import sys, time\n"
                    "for line in sys.stdin:\n"
                    "    if line.strip() == 'stat':\n"
                    "        print('INFO: Num. of Jobs Matched: 0')\n"
                    "    elif line.startswith('match'):\n"
                    "        time.sleep(0.01)\n")
    commands = tmp_path / "c.in"
    commands.write_text(bench.command_text([("/j", 5, 2)]))
    got = bench.run_process([sys.executable, str(prog)], commands, 30)
    marks = got["marks"]
    assert got["rc"] == 0 and len(marks) == 4 and marks == sorted(marks)
    assert marks[1] >= 0.05  # five 10 ms matches before the second stat


def test_the_p99_summary_counts_rows_under_the_goal_and_names_the_worst() -> None:
    bench = load_bench()
    ms = 1_000_000  # samples are nanoseconds
    res = {"size": 16384, "policies": {
        "first": {"1core": {"fill": [ms // 10] * 99 + [2 * ms], "steady": [ms // 10] * 10},
                  "nodex": {"fill": [7 * ms] * 5, "steady": []}},
        "low": {"error": "boom"}}}
    fill, steady = bench.p99_summary(res)
    assert fill.startswith("p99 per match, 16384 nodes, fill: 1/2 rows under 5 ms; worst")
    assert fill.index("first nodex 7") < fill.index("first 1core 0.100")
    assert steady == "p99 per match, 16384 nodes, steady: 1/1 rows under 5 ms; worst (ms): " \
        "first 1core 0.100"


def test_the_p99_summary_gives_cpu_time_rows_when_they_were_measured() -> None:
    bench = load_bench()
    ms = 1_000_000
    res = {"size": 4096, "policies": {"first": {"1core": {
        "fill": [9 * ms] * 10, "steady": [], "fill_cpu": [ms // 5] * 10, "steady_cpu": []}}}}
    lines = bench.p99_summary(res)
    assert lines == [
        "p99 per match, 4096 nodes, fill: 0/1 rows under 5 ms; worst (ms): first 1core 9.00",
        "p99 per match, 4096 nodes, fill (CPU time): 1/1 rows under 5 ms; worst (ms): "
        "first 1core 0.200"]
    table = bench.inprocess_table([res | {"policies": {"first": {"1core": res["policies"][
        "first"]["1core"] | {"cancel": [], "full": False}}}}])
    assert "cpu p99" in table and "0.200" in table


def _with_stand_in(tmp_path, per_match: str):
    """The benchmark module with both programs replaced by a stand-in that answers ``stat`` as
    they do and writes, per match, the Python expression ``per_match`` (over ``line``)."""
    bench = load_bench()
    stand_in = tmp_path / "prog.py"
    stand_in.write_text(
        "import os, sys, time\n"
        "out = open(sys.argv[sys.argv.index('-t') + 1], 'w')\n"
        "for line in sys.stdin:\n"
        "    if line.strip() == 'stat':\n"
        "        print('INFO: Num. of Jobs Matched: 0', flush=True)\n"
        "    elif line.startswith('match'):\n"
        f"        out.write({per_match} + '\\n')\n")
    argv = lambda *args: [sys.executable, str(stand_in), "-t", str(args[-1])]  # noqa: E731
    bench.ours_argv = argv
    bench.rq_argv = argv
    return bench


def test_the_jobspec_files_are_dated_back_before_the_first_process(tmp_path) -> None:
    """`fluxinfra query` reads a jobspec file modified in the last 2 s again at every command
    (a rewrite could keep its mtime); the benchmark writes its files just before the first
    process, so it dates them back an hour, as a user's files are: no round pays a read per
    match for it. A stand-in for both programs writes, per match, how old the file is."""
    bench = _with_stand_in(tmp_path, "f'{time.time() - os.stat(line.split()[2]).st_mtime:.0f}'")
    opts = {"cap": 3, "steady": 1, "rq_cap": 3, "rq_steady": 1, "rounds": 1, "timeout": 30}
    got = bench.process_benchmark("rq", 4, tmp_path / "g.graphml", ["first"], ["1core"], opts,
                                  tmp_path)
    (row,) = got["rows"]
    assert bench.same_output(row).startswith("same")
    ages = [int(age) for age in (tmp_path / "ours.out").read_text().split()]
    assert len(ages) == 4 and min(ages) >= 3000, ages  # 3 fill matches and 1 steady one


def test_plain_too_runs_ours_as_plain_python_in_the_same_rounds(tmp_path, monkeypatch) -> None:
    """--plain-too: a third program, `fluxinfra query` with FLUXINFRA_PURE_PYTHON=1, in the
    same alternation; its own table, and a row is the same only if its output is too. A
    stand-in writes, per match, whether it ran as plain Python."""
    monkeypatch.delenv("FLUXINFRA_PURE_PYTHON", raising=False)  # (make test's second pass)
    bench = _with_stand_in(tmp_path, "os.environ.get('FLUXINFRA_PURE_PYTHON', '-')")
    opts = {"cap": 3, "steady": 1, "rq_cap": 3, "rq_steady": 1, "rounds": 2, "timeout": 30,
            "plain_too": True}
    got = bench.process_benchmark("rq", 4, tmp_path / "g.graphml", ["first"], ["1core"], opts,
                                  tmp_path)
    (row,) = got["rows"]
    assert set(row["runs"]) == {"ours", "fluxion", "plain"}
    assert all(len(runs) == 2 for runs in row["runs"].values())
    assert (tmp_path / "plain.out").read_text() == "1\n" * 4
    assert (tmp_path / "ours.out").read_text() == "-\n" * 4
    # the stand-in's outputs differ by design: the row says so, naming plain Python
    assert "plain Python" in bench.same_output(row)
    for run in row["runs"]["plain"]:
        run["digest"] = row["runs"]["ours"][0]["digest"]
    for run in row["runs"]["fluxion"]:
        run["digest"] = row["runs"]["ours"][0]["digest"]
    assert bench.same_output(row).startswith("same")
    table, identical = bench.process_tables([got])
    # (its per-match columns may be blank: the stand-in answers below the timer's resolution)
    assert identical and "plain load s" in table
