"""benchmarks/run.py's help and the tables every benchmark prints (benchmarks/_table.py)."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "run.py"), *argv], capture_output=True,
                          text=True, timeout=120)


def test_help_lists_every_benchmark_and_its_options():
    proc = run("--help")
    assert proc.returncode == 0, proc.stderr
    runner = load("run")
    for name in runner.discover():
        assert f"\n{name}: " in proc.stdout, name
    for option in ("--sizes SIZES", "--resource-query PATH", "--rounds ROUNDS",  # matcher
                   "--scenarios SCENARIOS", "--rate RATE",                        # scheduler
                   "--warm-runs WARM_RUNS", "--repeats REPEATS"):                  # others
        assert option in proc.stdout, option
    assert proc.stdout.count("--quick") >= 4


def test_help_runs_no_benchmark(tmp_path):
    """A module whose main builds its parser inline is asked for it without running; one
    without argparse has the options its source tests argv for listed, and is not run."""
    runner = load("run")
    inline = tmp_path / "inline.py"
    inline.write_text("import argparse\n\ndef main(argv):\n    p = argparse.ArgumentParser()\n"
                      "    p.add_argument('--size', help='how big')\n    p.parse_args(argv)\n"
                      "    raise SystemExit('ran')\n")
    plain = tmp_path / "plain.py"
    plain.write_text('"""Plain."""\n\ndef main(argv):\n    quick = "--quick" in argv\n'
                     "    raise SystemExit('ran')\n")
    assert any("--size SIZE" in line for line in runner._options(runner._load("inline", inline)))
    assert runner._options(runner._load("plain", plain)) == ["--quick   (see its docstring)"]


def test_help_of_one_benchmark_lists_only_it():
    proc = run("render", "--help")
    assert "\nrender: " in proc.stdout and "\nmatcher: " not in proc.stdout


def test_list_gives_each_a_summary():
    lines = run("--list").stdout.splitlines()
    assert len(lines) == len(load("run").discover())
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_an_unknown_benchmark_is_refused():
    proc = run("nosuch")
    assert proc.returncode == 2 and "no benchmark named 'nosuch'" in proc.stderr


# -- tables --------------------------------------------------------------------------------------
def test_a_table_has_no_nan_no_empty_column_fits_and_explains():
    table = load("_table")
    headers = ["scenario", "nodes", *(f"figure {i}" for i in range(14)), "empty"]
    rows = [["single", 500, *(1234.5 * i for i in range(14)), None],
            ["restart", 500, *([math.nan] * 14), float("nan")]]
    text = table.format_table(headers, rows, legend={"figure 3": "what figure 3 means"})
    assert "nan" not in text and "empty" not in text
    assert max(len(line) for line in text.splitlines()) <= table.WIDTH
    parts = [line for line in text.splitlines() if line.startswith("scenario")]
    assert len(parts) > 1, "split in parts, the key column repeated"
    assert "figure 3  what figure 3 means" in text


def test_the_scheduler_table_prints_missing_figures_as_dashes():
    scheduler = load("scheduler")
    rows = [{"scenario": "restart", "nodes": 5, "pods": 10, "bound": 10, "seconds": 0.5,
             "p50_ms": None, "p99_ms": None, "matches": 0, "rss_mib": 60.0},
            {"scenario": "grpc", "nodes": 16, "pods": 200, "bound": 200, "p50_ms": 1.2,
             "p99_ms": 5.0, "rss_mib": 48.0}]
    text = scheduler._table(rows)
    assert "nan" not in text and "groups/s" not in text  # no gangs: the column is left out
    assert "p50 ms    median time from a pod's arrival" in text


@pytest.mark.parametrize("name", ["matcher", "scheduler", "render", "ansible_site"])
def test_every_benchmark_prints_through_the_shared_table(name):
    assert "from _table import format_table" in (BENCH / f"{name}.py").read_text()


def test_the_matcher_tables_fit_and_explain():
    matcher = load("matcher")
    ours = {"size": 8, "vertices": 10, "load_s": 1.0, "load_rss_mib": 1.0, "rss_mib": 2.0,
            "policies": {"low": {"1core": {
                "fill": [1000, 2000], "steady": [1500], "cancel": [100], "full": False}}}}

    def run(marks, digest="d1"):
        return {"marks": marks, "wall": 2.0, "rss_mib": 10.0, "rc": 0, "digest": digest}

    row = {"policy": "low", "stream": "1core", "fill": 10, "steady": 5,
           "runs": {"ours": [run([1.0, 1.1, 1.15])], "fluxion": [run([2.0, 3.0, 4.0])]}}
    inprocess = matcher.inprocess_table([ours])
    processes, _ = matcher.process_tables([{"size": 8, "rows": [row]}])
    for text in (inprocess, processes):
        assert "nan" not in text
        assert max(len(line) for line in text.splitlines()) <= 100
    assert "median match latency" in inprocess
    assert "same <SHA-256 prefix>" in processes


def test_a_table_without_rows_is_its_headers():
    """A load-only run (``--policies none``) has no per-match rows: the table is its
    headers, not a traceback."""
    table = load("_table")
    text = table.format_table(["nodes", "policy"], [], keys=2)
    assert text.splitlines()[:2] == ["nodes  policy", "-----  ------"]


def test_a_load_only_matcher_run_prints_loads_and_compares_nothing(capsys):
    matcher = load("matcher")
    matcher.report([], [{"size": 256, "vertices": 100, "load_s": 0.1, "load_rss_mib": 50,
                         "rss_mib": 50, "policies": {}}])
    out = capsys.readouterr().out
    assert "GRUG load s" in out and "policy" not in out


def test_a_run_writes_what_it_printed_as_json(tmp_path, capsys):
    """Every table a benchmark formats, in its process or in one it starts, lands in the results
    file with the command, the machine and the exit status; --quick runs get a file of their
    own; nothing is written with --no-results."""
    runner = load("run")
    bench = tmp_path / "demo.py"
    bench.write_text(
        "import subprocess, sys\n"
        f"sys.path.insert(0, {str(BENCH)!r})\n"
        "from _table import format_table\n\n"
        "def main(argv):\n"
        "    print(format_table(['nodes', 'med ms'], [[256, 0.5], [4096, None]]))\n"
        "    subprocess.run([sys.executable, '-c', 'import sys; sys.path.insert(0, %r); '\n"
        "                    'from _table import format_table; '\n"
        "                    'print(format_table([\"child\"], [[1]]))' % sys.path[0]],\n"
        "                   check=True)\n"
        "    return 3\n")
    module = runner._load("demo", bench)
    folder = tmp_path / "results"
    assert runner.run_one("demo", module, ["--quick"], folder) == 3
    saved = json.loads((folder / "demo-quick.json").read_text())
    assert saved["command"] == "benchmarks/run.py demo --quick" and saved["exit"] == 3
    assert saved["machine"]["cpus"] == os.cpu_count() and saved["machine"]["os"]
    assert saved["tools"] == {} and saved["label"] is None
    assert [t["columns"] for t in saved["tables"]] == [["nodes", "med ms"], ["child"]]
    assert saved["tables"][0]["rows"] == [[256, 0.5], [4096, None]]
    assert runner.run_one("demo", module, [], folder) == 3
    assert (folder / "demo.json").exists()
    assert "results in" in capsys.readouterr().out
    assert runner.run_one("demo", module, [], None) == 3
    assert sorted(p.name for p in folder.iterdir()) == ["demo-quick.json", "demo.json"]
    assert runner.RECORD_ENV not in os.environ


def test_a_run_that_prints_no_table_keeps_the_results_there(tmp_path, capsys):
    """A benchmark that skips (nothing to measure with here) leaves the figures measured where
    it could run; with no file yet, its skip is written."""
    runner = load("run")
    bench = tmp_path / "demo.py"
    bench.write_text("def main(argv):\n    print('demo: skipped: no bed here')\n    return 0\n")
    module = runner._load("demo", bench)
    folder = tmp_path / "results"
    folder.mkdir()
    kept = folder / "demo.json"
    kept.write_text('{"tables": [{"columns": ["pods/s"], "rows": [[214]]}]}\n')
    assert runner.run_one("demo", module, [], folder) == 0
    assert json.loads(kept.read_text())["tables"][0]["rows"] == [[214]]
    assert f"no table printed; {kept} kept" in capsys.readouterr().out
    assert runner.run_one("demo", module, ["--quick"], folder) == 0
    assert json.loads((folder / "demo-quick.json").read_text())["tables"] == []


def test_run_keeps_its_results_options_to_itself(tmp_path):
    runner = load("run")
    rest, folder = runner._pop_results_options(["matcher", "--results-dir", str(tmp_path),
                                                "--quick"])
    assert rest == ["matcher", "--quick"] and folder == tmp_path
    assert runner._pop_results_options(["--no-results", "--sizes", "256"]) == (
        ["--sizes", "256"], None)
    assert runner._pop_results_options([])[1] == runner.RESULTS
    assert runner.RECORD_ENV == load("_table").RECORD_ENV


def test_a_label_names_its_own_results_file(tmp_path):
    runner = load("run")
    assert runner._pop_label(["matcher", "--label", "ranking", "--rounds", "1"]) == (
        ["matcher", "--rounds", "1"], "ranking")
    assert runner.results_path("matcher", [], tmp_path, "ranking") == tmp_path / \
        "matcher-ranking.json"
    assert runner.results_path("matcher", ["--quick"], tmp_path, "first").name == \
        "matcher-first-quick.json"
    with pytest.raises(SystemExit, match="--label 'My Run': use lower-case letters"):
        runner._pop_label(["--label", "My Run"])


#: the Flux build and the Kubernetes binaries the benchmarks would use (as benchmarks/run.py
#: finds them); the version tests skip without them
FLUX_PREFIX = os.environ.get("FLUXINFRA_FLUX_PREFIX", "/opt/flux")
KUBE_BIN = os.environ.get("FLUXINFRA_KUBE_BIN") or str(
    Path(shutil.which("kube-apiserver") or "/nonexistent/kube-apiserver").parent)


@pytest.mark.skipif(not Path(FLUX_PREFIX, "bin", "flux").exists(),
                    reason=f"no Flux build at {FLUX_PREFIX} (set FLUXINFRA_FLUX_PREFIX)")
def test_the_flux_versions_are_read_from_the_build(monkeypatch):
    runner = load("run")
    monkeypatch.delenv("FLUXINFRA_FLUX", raising=False)
    monkeypatch.setenv("FLUXINFRA_FLUX_PREFIX", FLUX_PREFIX)
    rq = f"{FLUX_PREFIX}/bin/resource-query"
    versions = runner.tool_versions(["flux", "resource-query"], ["--resource-query", rq])
    assert versions["flux"].startswith("flux-core 0.") and ", flux-sched 0." in \
        versions["flux"], versions
    assert versions["resource-query"].startswith("resource-query of flux-sched 0."), versions


@pytest.mark.skipif(not Path(KUBE_BIN, "kube-apiserver").exists(),
                    reason=f"no Kubernetes binaries at {KUBE_BIN} (set FLUXINFRA_KUBE_BIN)")
def test_the_kubernetes_version_is_the_api_servers(monkeypatch):
    runner = load("run")
    monkeypatch.setenv("FLUXINFRA_KUBE_BIN", KUBE_BIN)
    assert runner.tool_versions(["kubernetes"], [])["kubernetes"].startswith("Kubernetes v1.")


def test_a_tool_that_is_not_there_is_said_so(monkeypatch, tmp_path):
    runner = load("run")
    monkeypatch.setenv("FLUXINFRA_FLUX_PREFIX", str(tmp_path))
    monkeypatch.delenv("FLUXINFRA_FLUX", raising=False)
    monkeypatch.setenv("FLUXINFRA_KUBE_BIN", str(tmp_path))
    assert runner.tool_versions(["flux", "kubernetes", "resource-query"], []) == dict.fromkeys(
        ["flux", "kubernetes", "resource-query"], "not found")


def test_each_benchmark_names_the_outside_programs_it_uses():
    runner = load("run")
    modules = {name: runner._load(name, path) for name, path in runner.discover().items()}
    assert runner._tools_of(modules["matcher"], ["--resource-query", "/x/rq"]) == \
        ["resource-query"]
    assert runner._tools_of(modules["matcher"], ["--sizes", "256"]) == []
    assert runner._tools_of(modules["fluxjobs"], ["--real"]) == ["kubernetes"]
    assert runner._tools_of(modules["fluxjobs"], []) == []
    assert runner._tools_of(modules["kube_scheduler"], []) == ["kubernetes"]
    for name in ("flux_membership", "distribute", "ansible_site"):
        assert runner._tools_of(modules[name], []) == ["flux"], name


def test_the_memory_benchmark_serves_every_kind_the_scheduler_lists():
    """Its stand-in API answers the LIST of every kind the runner starts with (a kind it does
    not know would stop the benchmark before it measures anything)."""
    from fluxinfra.scheduler.kube import KINDS

    memory = load("memory")
    api = memory.InMemoryApi(nodes=3, pods=4, running=True)
    listed = {kind: api.list_objects(kind)[0] for kind in KINDS}
    assert [len(listed[k]) for k in ("nodes", "pods", "namespaces")] == [3, 4, 1]
    assert {p["metadata"]["namespace"] for p in listed["pods"]} == \
        {n["metadata"]["name"] for n in listed["namespaces"]}
    assert all(p["spec"].get("nodeName") for p in listed["pods"])


def test_the_kube_scheduler_rounds_alternate_their_order():
    bench = load("kube_scheduler")
    args = bench.parser().parse_args(["--gangs", "--coscheduling", "/bin/true"])
    first, second, third = (bench._plan(args, [16, 32], rnd) for rnd in range(3))
    assert first[:2] == [("kube-scheduler", 1, 0), ("fluxion", 1, 0)]
    assert second == first[::-1]
    assert third == first
    assert sorted(first) == sorted(second)  # every run in every round, only the order moves
    only = bench.parser().parse_args(["--gangs", "--only", "fluxion,ceiling"])
    assert bench._plan(only, [16], 1) == [("ceiling", 16, 16), ("fluxion", 16, 0),
                                          ("ceiling", 1, 16), ("fluxion", 1, 0)]


def test_the_kube_scheduler_ratios_are_of_medians_and_round_by_round():
    bench = load("kube_scheduler")

    def row(who, label, rnd, rate, size=1):
        return {"mode": "burst", "group_size": size, "who": who, "scheduler": label,
                "round": rnd, "pods_per_s": rate}

    rows = [row("fluxion", "fluxion", 1, 90), row("ceiling", "ceiling, 16 threads", 1, 100),
            row("ceiling", "ceiling, 32 threads", 1, 80),
            row("fluxion", "fluxion", 2, 60), row("ceiling", "ceiling, 16 threads", 2, 50),
            row("ceiling", "ceiling, 32 threads", 2, 120),
            row("fluxion", "fluxion", 3, 100), row("ceiling", "ceiling, 16 threads", 3, 100),
            row("ceiling", "ceiling, 32 threads", 3, 90),
            row("fluxion", "fluxion, gangs of 16", 1, 40, 16),
            row("ceiling", "ceiling, 16 threads, gangs of 16", 1, 50, 16)]
    # medians: fluxion 90, the 16-thread ceiling 100, the 32-thread 90: rounds against the
    # 16 threads' 100, 50, 100 (not round 2's better 120): 90 %, 120 %, 100 %; one round of
    # gangs: no round figure
    assert bench._ratios(rows, ["burst"]) == [
        "burst, lone pods: fluxion / ceiling, median pods/s: 90.0 / 100.0 = 90%; "
        "by round 100% (90%-120%, 3 rounds)",
        "burst, gangs of 16: fluxion, gangs of 16 / ceiling, median pods/s: 40.0 / 50.0 = 80%"]
