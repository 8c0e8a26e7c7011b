"""docs/benchmarks.md's tables and the README's headline figures, made from the results files.

    .venv/bin/python benchmarks/run.py --tables           # rewrite the generated regions
    .venv/bin/python benchmarks/run.py --tables --check   # exit 1 if a region is not current

A region of a page is what lies between a start marker and ``<!-- end results -->``; the start
marker names a results file of ``benchmarks/results/`` (``FILE.json``) and, optionally, the
columns to show, the rows to keep and whether to say where the figures come from, as JSON:

    <!-- results {"file": "scheduler"} -->                       every table of the file
    <!-- results {"file": "matcher-first", "columns": ["nodes", "policy", "ms/match"],
                  "where": {"policy": ["first"]}} -->

With ``columns``, the tables that have every one of them are taken together (a benchmark that
prints a table per size records one per size) and only those columns are shown; ``where`` keeps
the rows whose value in a column is one of those given. Each region says the command, the date,
the machine, the outside programs' versions and the load average the figures were taken at
(``"about": false`` leaves that out, for a second region from the same file), then the table in
Markdown, then what its columns mean (the benchmark's own legend). A results
file that is not there gives a region saying which command makes it.

The README's region ``<!-- headlines -->`` ... ``<!-- end headlines -->`` is its table of
headline figures: one row per entry of ``HEADLINES`` whose results file is there.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from _table import cell

__all__ = ["Results", "render_region", "render_page", "render_headlines", "update", "main"]

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
PAGE = REPO / "docs" / "benchmarks.md"
README = REPO / "README.md"
END = "<!-- end results -->"
_REGION = re.compile(r"^<!-- results (\{.*?\}) -->\n(.*?)^" + re.escape(END) + "$",
                     re.M | re.S)
_HEADLINES = re.compile(r"^(<!-- headlines -->\n)(.*?)^(<!-- end headlines -->)$", re.M | re.S)


class RegionError(ValueError):
    """A region's marker or its results file cannot make a table; the message says which."""


@dataclass(frozen=True)
class Results:
    """One results file as ``benchmarks/run.py`` wrote it."""

    name: str
    data: dict

    @classmethod
    def load(cls, name: str, folder: Path | None = None) -> Results | None:
        path = (folder or RESULTS) / f"{name}.json"
        return cls(name, json.loads(path.read_text())) if path.exists() else None

    @property
    def date(self) -> str:
        return self.data["started"][:10]

    @property
    def load_average(self) -> str:
        """The 1-minute load average at the start of the run."""
        before = (self.data.get("load_average") or {}).get("before")
        return _load(before)

    @property
    def command(self) -> str:
        return f"python {self.data['command']}"

    def tables(self) -> list[dict]:
        """The tables the run printed, each once (one printed again is not new figures)."""
        seen: list[dict] = []
        for table in self.data["tables"]:
            if all((t["columns"], t["rows"]) != (table["columns"], table["rows"]) for t in seen):
                seen.append(table)
        return seen

    def rows(self, columns: list[str]) -> list[dict[str, object]]:
        """Every row of the tables that have all of ``columns``, as column -> value."""
        found = [t for t in self.tables() if set(columns) <= set(t["columns"])]
        if not found:
            have = "; ".join(", ".join(t["columns"]) for t in self.tables()) or "none"
            raise RegionError(f"benchmarks/results/{self.name}.json has no table with the "
                              f"columns {columns}; its tables' columns: {have}")
        return [dict(zip(t["columns"], row, strict=False)) for t in found for row in t["rows"]]

    def value(self, columns_match: dict[str, object], column: str) -> object:
        """The value in ``column`` of the one row whose columns hold ``columns_match``."""
        rows = [r for r in self.rows([*columns_match, column])
                if all(r.get(k) == v for k, v in columns_match.items())]
        if len(rows) != 1:
            raise RegionError(f"benchmarks/results/{self.name}.json: {len(rows)} rows with "
                              f"{columns_match} (want one) for {column!r}")
        return rows[0][column]


def _gib(n: object) -> str:
    return f"{n / 2**30:.1f} GiB" if isinstance(n, int | float) else "memory unknown"


def _load(pair: object) -> str:
    return cell(pair[0]) if isinstance(pair, list) and pair else "-"


def provenance(results: Results) -> str:
    """Where and when the figures were taken: command, date, machine, tools, load."""
    machine = results.data.get("machine", {})
    parts = [f"{machine.get('cpus', '?')} CPUs ({machine.get('processor') or 'unknown'})",
             _gib(machine.get("memory_bytes")), machine.get("os", "an unknown system"),
             f"Python {machine.get('python', '?')}"]
    tools = [v for v in (results.data.get("tools") or {}).values()]
    load = results.data.get("load_average") or {}
    nice = machine.get("niceness")
    text = (f"`{results.command}`, measured {results.date} on {', '.join(parts)}"
            + (f"; {', '.join(tools)}" if tools else "")
            + f"; load average {_load(load.get('before'))} at the start, "
              f"{_load(load.get('after'))} at the end"
            + (f", run at niceness {nice}" if nice else "")
            + (f"; it exited {results.data['exit']}, which the benchmark gives for a missed goal "
               "or a failure" if results.data.get("exit") else "")
            + ".")
    return text


def _md(value: object) -> str:
    return cell(value).replace("|", "\\|")


def markdown_table(columns: list[str], rows: list[dict[str, object]]) -> list[str]:
    shown = [c for c in columns if any(cell(r.get(c)) != "-" for r in rows)] or columns
    return [f"| {' | '.join(shown)} |", f"| {' | '.join('---' for _ in shown)} |",
            *(f"| {' | '.join(_md(r.get(c)) for c in shown)} |" for r in rows)]


def _legend(tables: list[dict], columns: list[str]) -> list[str]:
    meaning: dict[str, str] = {}
    for table in tables:
        for column, text in (table.get("legend") or {}).items():
            meaning.setdefault(column, text)
    described = [c for c in columns if c in meaning]
    return [f"*{c}*: {meaning[c]}." if not meaning[c].endswith(".") else f"*{c}*: {meaning[c]}"
            for c in described]


def render_region(spec: dict, folder: Path | None = None) -> str:
    """A region's text, from its marker's ``spec`` and the results files in ``folder``."""
    unknown = set(spec) - {"file", "columns", "where", "about"}
    if "file" not in spec or unknown:
        raise RegionError(f"a results marker takes file, columns, where and about; got {spec}")
    results = Results.load(spec["file"], folder)
    if results is None:
        name, _, label = spec["file"].partition("-")
        labelled = f" with the options above and `--label {label}`" if label else ""
        return (f"No results recorded yet: `python benchmarks/run.py {name}`{labelled} writes "
                f"`benchmarks/results/{spec['file']}.json` and `python benchmarks/run.py "
                "--tables` puts its figures here.\n")
    lines = [provenance(results), ""] if spec.get("about", True) else []
    tables = results.tables()
    where = spec.get("where") or {}
    if "columns" in spec:
        columns = list(spec["columns"])
        rows = [r for r in results.rows([*columns, *where])
                if all(r.get(k) in allowed for k, allowed in where.items())]
        lines += markdown_table(columns, rows)
        legend = _legend(tables, columns)
    else:
        legend = []
        for n, table in enumerate(tables):
            lines += ([""] if n else []) + markdown_table(
                table["columns"], [dict(zip(table["columns"], row, strict=False))
                                   for row in table["rows"]])
            legend += [line for line in _legend([table], table["columns"]) if line not in legend]
    if legend:
        lines += ["", *legend]
    return "\n".join(lines) + "\n"


def render_page(text: str, folder: Path | None = None) -> str:
    """``text`` with every results region made again from ``folder``."""
    def one(match: re.Match) -> str:
        try:
            spec = json.loads(match.group(1))
        except json.JSONDecodeError as exc:
            raise RegionError(f"a results marker is not JSON ({exc}): {match.group(1)}") from exc
        return f"<!-- results {match.group(1)} -->\n{render_region(spec, folder)}{END}"

    return _REGION.sub(one, text)


# -- the README's headline figures ---------------------------------------------------------------


def _x(n: float) -> str:
    """A ratio as the tables give it: ``3.8x``, ``26.0x``, ``1,628x``."""
    return f"{n:,.0f}x" if n >= 100 else f"{n:.1f}x"


def _ratio(a: object, b: object) -> str:
    """How many times ``b`` is ``a``: ``4.7x`` (``-`` when either is missing)."""
    if isinstance(a, int | float) and isinstance(b, int | float) and a:
        return _x(b / a)
    return "-"


def _times(value: object) -> float | None:
    """A "how many times faster" cell as a number: ``3.9x`` -> 3.9 (``>1000x`` -> 1000)."""
    if isinstance(value, int | float):
        return float(value)
    text = str(value or "").lstrip(">").rstrip("x").replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def _range(values: list[object], unit: str = "") -> str:
    """The lowest and the highest of some figures: ``0.62-0.75 s`` (one figure when equal)."""
    numbers = [v for v in values if isinstance(v, int | float)]
    if not numbers:
        return "-"
    low, high = cell(min(numbers)), cell(max(numbers))
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def _span(values: list[object]) -> str:
    """The lowest and the highest of some ratios: ``3.8x-26.0x``."""
    numbers = [n for n in map(_times, values) if n is not None]
    if not numbers:
        return "-"
    low, high = _x(min(numbers)), _x(max(numbers))
    return low if low == high else f"{low}-{high}"


def _largest(rows: list[dict[str, object]]) -> int:
    return max(int(row["nodes"]) for row in rows)


def _same_output(rows: list[dict[str, object]]) -> str:
    same = all(str(row["-t output"]).startswith("same") for row in rows)
    return "same output" if same else "DIFFERENT output"


def _matcher_first(r: Results) -> str:
    rows = r.rows(["nodes", "policy", "stream", "faster", "-t output"])
    nodes = _largest(rows)
    spans = [_span([row["faster"] for row in rows if row["nodes"] == nodes
                    and row["policy"] == "first" and row["stream"] == stream])
             for stream in ("1core", "nodex", "64node")]
    return f"{' / '.join(spans)} faster at {nodes:,} nodes, {_same_output(rows)}"


def _matcher_ranking(r: Results) -> str:
    rows = r.rows(["nodes", "policy", "stream", "faster", "-t output"])
    sizes = sorted({int(row["nodes"]) for row in rows})
    spans = [f"{_span([row['faster'] for row in rows if row['nodes'] == n])} at {n:,} nodes"
             for n in sizes]
    return f"{', '.join(spans)}, {_same_output(rows)}"


def _median(values: list[object]) -> float | None:
    numbers = sorted(v for v in values if isinstance(v, int | float))
    return statistics.median(numbers) if numbers else None


def _matcher_load(r: Results) -> str:
    rows = r.rows(["nodes", "load s", "fluxion load s", "RSS MiB", "fluxion RSS MiB"])
    nodes = _largest(rows)
    big = [row for row in rows if row["nodes"] == nodes]
    medians = {c: _median([row[c] for row in big])
               for c in ("load s", "fluxion load s", "RSS MiB", "fluxion RSS MiB")}
    return (f"{nodes:,} nodes: {cell(medians['load s'])} s, {cell(medians['RSS MiB'])} MiB vs "
            f"{cell(medians['fluxion load s'])} s, {cell(medians['fluxion RSS MiB'])} MiB "
            f"({_ratio(medians['load s'], medians['fluxion load s'])} faster, "
            f"{_ratio(medians['RSS MiB'], medians['fluxion RSS MiB'])} less memory; medians)")


def _matcher_p99(r: Results) -> str:
    rows = r.rows(["nodes", "policy", "stream", "p99 ms", "steady p99", "cpu p99",
                   "steady cpu p99"])
    nodes = _largest(rows)
    big = [row for row in rows if row["nodes"] == nodes]

    def under(column: str) -> str:
        values = [row[column] for row in big if row[column] is not None]
        return f"{sum(v < 5 for v in values)}/{len(values)}"
    return (f"{nodes:,} nodes, rows under 5 ms: fill {under('p99 ms')}, steady "
            f"{under('steady p99')} (in CPU time {under('cpu p99')}, "
            f"{under('steady cpu p99')}) at load {r.load_average}")


def _scheduler(r: Results) -> str:
    single = r.value({"scenario": "single"}, "pods/s")
    groups = r.value({"scenario": "groups"}, "groups/s")
    spread = r.value({"scenario": "spread"}, "pods/s")
    return (f"{_ratio(spread, single)} the pods/s of a kube-scheduler-like spread in the same "
            f"core ({cell(single)} pods/s, {cell(groups)} gangs of 16/s at load {r.load_average})")


def _memory(r: Results) -> str:
    rows = r.rows(["scenario", "peak RSS MiB"])
    peak = {row["scenario"]: row["peak RSS MiB"] for row in rows}
    sched = max(v for k, v in peak.items() if k != "service")
    return f"scheduler {cell(sched)} MiB, service {cell(peak.get('service'))} MiB"


@dataclass(frozen=True)
class Headline:
    what: str
    file: str
    figure: Callable[[Results], str]


HEADLINES = [
    Headline("matcher vs resource-query, `first`, per match (1 core / 1 node / 64 nodes)",
             "matcher-first", _matcher_first),
    Headline("the same, the eight ranking policies", "matcher-ranking", _matcher_ranking),
    Headline("graph load: ours vs resource-query", "matcher-first", _matcher_load),
    Headline("match p99 in process, every policy and stream", "matcher-inprocess",
             _matcher_p99),
    Headline("scheduler core, 5,000 nodes, 10,000 pods (binds in memory)", "scheduler",
             _scheduler),
    Headline("scheduler / service peak RSS, 5,000 nodes, 10,000 pods", "memory", _memory),
]


def render_headlines(folder: Path | None = None) -> str:
    lines = ["| what | figure | measured | command |", "| --- | --- | --- | --- |"]
    for headline in HEADLINES:
        results = Results.load(headline.file, folder)
        if results is not None:
            lines.append(f"| {headline.what} | {headline.figure(results)} | {results.date} | "
                         f"`{results.command}` |")
    return "\n".join(lines) + "\n"


def render_readme(text: str, folder: Path | None = None) -> str:
    return _HEADLINES.sub(lambda m: m.group(1) + render_headlines(folder) + m.group(3), text)


# -- the command ---------------------------------------------------------------------------------


def update(check: bool = False, folder: Path | None = None) -> list[Path]:
    """Rewrite (or with ``check``, only compare) the generated regions; the pages not current."""
    stale = []
    folder = folder or RESULTS
    for page, render in ((PAGE, render_page), (README, render_readme)):
        text = page.read_text()
        made = render(text, folder)
        if made != text:
            stale.append(page)
            if not check:
                page.write_text(made)
    return stale


def main(argv: list[str]) -> int:
    check = "--check" in argv
    try:
        stale = update(check)
    except RegionError as exc:
        print(f"benchmarks/run.py --tables: {exc}")
        return 2
    for page in stale:
        print(f"{page.relative_to(REPO)}: {'not current' if check else 'rewritten'}")
    if check and stale:
        print("run `python benchmarks/run.py --tables` to make them from benchmarks/results/")
    return 1 if check and stale else 0


if __name__ == "__main__":  # (for completeness; benchmarks/run.py --tables is the command)
    import sys

    sys.exit(main(sys.argv[1:]))
