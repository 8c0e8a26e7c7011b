"""docs/benchmarks.md's tables and the README's headline figures are made from the committed
results files (benchmarks/_docs.py), and those files say how, when and where they were made."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"
sys.path.insert(0, str(BENCH))
import _docs  # noqa: E402
import run  # noqa: E402

COMMITTED = sorted(_docs.RESULTS.glob("*.json"))


def results_file(folder: Path, name: str, tables: list[dict], **fields) -> Path:
    """A results file shaped as benchmarks/run.py writes one."""
    data = {"benchmark": name.split("-")[0], "label": None, "argv": [],
            "command": f"benchmarks/run.py {name.split('-')[0]}",
            "started": "2026-01-02T03:04:05+00:00", "seconds": 1.0, "exit": 0,
            "machine": {"host": "h", "os": "Debian GNU/Linux 12 (bookworm)", "kernel": "6.1",
                        "cpus": 2, "processor": "AMD EPYC", "memory_bytes": 24 * 2**30,
                        "python": "3.11.7", "niceness": -5},
            "tools": {}, "load_average": {"before": [1.5, 1, 1], "after": [2.25, 1, 1]},
            "tables": tables, **fields}
    path = folder / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def test_the_docs_tables_and_the_readme_figures_are_made_from_the_committed_results():
    stale = _docs.update(check=True)
    assert not stale, (f"{[str(p.relative_to(REPO)) for p in stale]} differ from what the "
                       "results make: run `python benchmarks/run.py --tables` and commit")


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_a_committed_results_file_says_how_when_and_where(path):
    data = json.loads(path.read_text())
    assert data["benchmark"] in run.discover(), f"{path.name}: no benchmark {data['benchmark']}"
    assert path.stem == "-".join(filter(None, [data["benchmark"], data.get("label")]))
    assert "--quick" not in data["argv"], f"{path.name}: a --quick run is not a figure to keep"
    assert data["command"].startswith(f"benchmarks/run.py {data['benchmark']}")
    assert isinstance(data["exit"], int)  # a missed goal exits 1: its region says so
    for field in ("os", "cpus", "processor", "memory_bytes", "python"):
        assert data["machine"].get(field), f"{path.name}: machine.{field} missing"
    assert all(data["load_average"][k] for k in ("before", "after")), path.name
    assert all("not found" not in v for v in data["tools"].values()), path.name
    assert data["tables"] and all(t["columns"] and t["rows"] for t in data["tables"]), path.name


def test_every_marker_names_a_benchmark():
    text = _docs.PAGE.read_text()
    specs = [json.loads(m.group(1)) for m in _docs._REGION.finditer(text)]
    assert len(specs) >= 10
    names = run.discover()
    for spec in specs:
        assert spec["file"].split("-")[0] in names, spec


def test_a_region_takes_the_columns_from_every_table_that_has_them(tmp_path):
    """A benchmark printing a table per size records one per size: the region shows them
    together, only the columns asked for, only the rows kept, and the legend of those."""
    legend = {"ms": "median match latency"}
    results_file(tmp_path, "matcher-first", [
        {"columns": ["nodes", "policy", "ms", "x"], "rows": [[256, "first", 0.1, 1]],
         "legend": legend},
        {"columns": ["nodes", "policy", "ms", "x"],
         "rows": [[4096, "first", 0.25, 2], [4096, "low|high", 3.0, 3]], "legend": legend},
        {"columns": ["nodes", "vertices"], "rows": [[256, 10]], "legend": {}}])
    text = _docs.render_region({"file": "matcher-first", "columns": ["nodes", "policy", "ms"],
                                "where": {"policy": ["first", "low|high"]}}, tmp_path)
    about, _, *table = text.splitlines()
    assert about == ("`python benchmarks/run.py matcher`, measured 2026-01-02 on 2 CPUs "
                     "(AMD EPYC), 24.0 GiB, Debian GNU/Linux 12 (bookworm), Python 3.11.7; "
                     "load average 1.50 at the start, 2.25 at the end, run at niceness -5.")
    assert table[:5] == ["| nodes | policy | ms |", "| --- | --- | --- |",
                         "| 256 | first | 0.100 |", "| 4096 | first | 0.250 |",
                         "| 4096 | low\\|high | 3.00 |"]
    assert table[-1] == "*ms*: median match latency."
    kept = _docs.render_region({"file": "matcher-first", "columns": ["nodes", "ms"],
                                "where": {"policy": ["first"]}, "about": False}, tmp_path)
    assert kept.splitlines()[0] == "| nodes | ms |" and "3.00" not in kept


def test_a_region_without_columns_shows_every_table(tmp_path):
    results_file(tmp_path, "render", [
        {"columns": ["stack", "cold s"], "rows": [["dev", 4.25]], "legend": {}},
        {"columns": ["stack", "warm s", "never"], "rows": [["dev", None, None],
                                                            ["prod", 1.5, None]], "legend": {}}],
        tools={"flux": "flux-core 0.88.0, flux-sched 0.54.0"})
    text = _docs.render_region({"file": "render"}, tmp_path)
    assert "Python 3.11.7; flux-core 0.88.0, flux-sched 0.54.0; load average" in text
    assert "| dev | 4.25 |" in text
    assert "| stack | warm s |\n| --- | --- |\n| dev | - |\n| prod | 1.50 |" in text, \
        "a missing figure is '-', a column without any is left out"


@pytest.mark.parametrize("spec, message", [
    ({"file": "render", "columns": ["stack", "nosuch"]},
     "render.json has no table with the columns ['stack', 'nosuch']; its tables' columns: "
     "stack, cold s"),
    ({"file": "render", "colums": ["stack"]}, "a results marker takes file, columns, where"),
])
def test_a_region_that_cannot_be_made_says_why(tmp_path, spec, message):
    results_file(tmp_path, "render", [{"columns": ["stack", "cold s"], "rows": [["dev", 1.0]],
                                       "legend": {}}])
    with pytest.raises(_docs.RegionError) as caught:
        _docs.render_region(spec, tmp_path)
    assert message in str(caught.value)


def test_a_region_without_its_results_file_says_which_command_makes_it(tmp_path):
    text = _docs.render_region({"file": "kube_scheduler"}, tmp_path)
    assert "`python benchmarks/run.py kube_scheduler` writes " \
           "`benchmarks/results/kube_scheduler.json`" in text
    text = _docs.render_region({"file": "fluxjobs-real"}, tmp_path)
    assert "`python benchmarks/run.py fluxjobs` with the options above and `--label real` " \
           "writes `benchmarks/results/fluxjobs-real.json`" in text


def test_a_page_is_rewritten_between_its_markers_only(tmp_path):
    results_file(tmp_path, "render", [{"columns": ["stack"], "rows": [["dev"]], "legend": {}}])
    page = ("# Render\n\nBy hand.\n\n<!-- results {\"file\": \"render\"} -->\nold figures\n"
            "<!-- end results -->\n\nAfter.\n")
    made = _docs.render_page(page, tmp_path)
    assert made.startswith("# Render\n\nBy hand.\n\n<!-- results {\"file\": \"render\"} -->\n")
    assert "old figures" not in made and "| dev |" in made
    assert made.endswith("<!-- end results -->\n\nAfter.\n")
    assert _docs.render_page(made, tmp_path) == made


def test_tables_check_says_what_is_stale(tmp_path, monkeypatch, capsys):
    page = tmp_path / "benchmarks.md"
    page.write_text("<!-- results {\"file\": \"render\"} -->\nold\n<!-- end results -->\n")
    readme = tmp_path / "README.md"
    readme.write_text("<!-- headlines -->\n<!-- end headlines -->\n")
    monkeypatch.setattr(_docs, "PAGE", page)
    monkeypatch.setattr(_docs, "README", readme)
    monkeypatch.setattr(_docs, "REPO", tmp_path)
    monkeypatch.setattr(_docs, "RESULTS", tmp_path / "results")
    assert run.main(["--tables", "--check"]) == 1
    out = capsys.readouterr().out
    assert "benchmarks.md: not current" in out and "README.md: not current" in out
    assert "old" in page.read_text()
    assert run.main(["--tables"]) == 0 and run.main(["--tables", "--check"]) == 0
    assert "No results recorded yet" in page.read_text()
    assert readme.read_text().startswith("<!-- headlines -->\n| what | figure |")


def test_the_headlines_are_ratios_taken_from_one_run(tmp_path):
    """The README's figures: the matcher's ratios at the largest size, the scheduler's gain
    over the spread baseline of the same run, each with the run's date and command."""
    columns = ["nodes", "policy", "stream", "load s", "fluxion load s", "faster", "RSS MiB",
               "fluxion RSS MiB", "-t output"]
    rows = [[4096, "first", "1core", 0.3, 2.0, "3.9x", 130.0, 1000.0, "same ab12"]]
    rows += [[16384, policy, stream, load, 12.0, faster, 400.0, 4000.0, "same cd34"]
             for policy, load in (("first", 0.6), ("firstnodex", 0.8))
             for stream, faster in (("1core", "3.8x"), ("nodex", "7.4x"), ("64node", "25.1x"))]
    results_file(tmp_path, "matcher-first", [{"columns": columns, "rows": rows, "legend": {}}],
                 command="benchmarks/run.py matcher --label first")
    results_file(tmp_path, "scheduler", [{"columns": ["scenario", "pods/s", "groups/s"], "rows": [
        ["single", 15000.0, None], ["spread", 5000.0, None], ["groups", 17000.0, 1100.0]],
        "legend": {}}])
    table = _docs.render_headlines(tmp_path).splitlines()
    assert table[2] == ("| matcher vs resource-query, `first`, per match (1 core / 1 node / 64 "
                        "nodes) | 3.8x / 7.4x / 25.1x faster at 16,384 nodes, same output | "
                        "2026-01-02 | `python benchmarks/run.py matcher --label first` |")
    assert "| 16,384 nodes: 0.700 s, 400 MiB vs 12.0 s, 4,000 MiB (17.1x faster, 10.0x less " \
           "memory; medians) |" in table[3]
    assert "| 3.0x the pods/s of a kube-scheduler-like spread in the same core (15,000 pods/s, " \
           "1,100 gangs of 16/s at load 1.50) |" in table[4]
    assert len(table) == 5, "no row for a results file that is not there"


def test_a_table_printed_twice_is_shown_once(tmp_path):
    """A benchmark that prints a table again (a summary at the end) has recorded it twice: its
    rows are not new figures."""
    table = {"columns": ["nodes", "ms"], "rows": [[4096, 1.5]], "legend": {}}
    results_file(tmp_path, "matcher-first", [table, dict(table),
                                             {**table, "rows": [[16384, 2.5]]}])
    text = _docs.render_region({"file": "matcher-first", "columns": ["nodes", "ms"]}, tmp_path)
    assert text.count("| 4096 | 1.50 |") == 1 and "| 16384 | 2.50 |" in text
