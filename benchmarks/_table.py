"""The benchmarks' tables: aligned, no ``nan``, no empty columns, ~100 columns wide, a legend.

    >>> print(format_table(["nodes", "policy", "med ms", "fluxion ms"],
    ...                    [[256, "first", 0.1234, None], [4096, "low", 12.5, None]],
    ...                    legend={"med ms": "median match latency"}, keys=2))
    nodes  policy  med ms
    -----  ------  ------
      256  first    0.123
     4096  low       12.5
    <BLANKLINE>
      med ms  median match latency

A value that is missing (``None``, ``nan``, ``""``) prints as ``-``; a column with no value in
any row is left out. When the columns do not fit in ``width``, the table is printed in parts,
the first ``keys`` columns repeated in each. The legend explains every column shown that
``legend`` describes.

When ``$FLUXINFRA_BENCH_RECORD`` names a file, every table is also appended to it as one JSON
line (its columns, its rows with the values as given, missing ones ``null``, and its legend):
``benchmarks/run.py`` sets it, in its own process and the subprocesses a benchmark starts, and
writes the results file from those lines.
"""

from __future__ import annotations

import json
import math
import os
import textwrap

from fluxinfra.console import format_table as aligned

__all__ = ["format_table", "cell", "record", "RECORD_ENV"]

WIDTH = 100
_GAP = "  "
#: the file every table is also recorded in, one JSON object per line (see the docstring)
RECORD_ENV = "FLUXINFRA_BENCH_RECORD"


def cell(value: object) -> str:
    """A value as the tables print it: 3 significant-ish digits, ``-`` when missing."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}" if abs(value) < 1 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value}" if abs(value) < 100_000 else f"{value:,}"
    return str(value)


def _numeric(values: list[object]) -> bool:
    present = [v for v in values if cell(v) != "-"]
    return bool(present) and all(isinstance(v, int | float) and not isinstance(v, bool)
                                 or (isinstance(v, str) and v.rstrip("x%").replace(",", "")
                                     .replace(".", "", 1).isdigit())
                                 for v in present)


def _render(headers: list[str], cols: list[list[str]], numeric: list[bool]) -> list[str]:
    rows = [list(r) for r in zip(*cols, strict=True)] if cols else []
    return aligned(headers, rows, right={i for i, num in enumerate(numeric) if num}, rule=True,
                   gap=_GAP).split("\n")


def _json_value(value: object) -> object:
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool | int | float | str):
        return value
    return str(value)


def record(headers: list[str], rows: list[list[object]],
           legend: dict[str, str] | None = None) -> None:
    """Append one table to the file ``$FLUXINFRA_BENCH_RECORD`` names, if it names one."""
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    entry = {"columns": list(headers),
             "rows": [[_json_value(v) for v in row] for row in rows],
             "legend": dict(legend or {})}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(entry) + "\n")


def format_table(headers: list[str], rows: list[list[object]], *,
                 legend: dict[str, str] | None = None, keys: int = 1,
                 width: int = WIDTH) -> str:
    """``rows`` under ``headers`` as text (see the module docstring); recorded as well when
    ``$FLUXINFRA_BENCH_RECORD`` is set."""
    record(headers, rows, legend)
    columns = [[row[i] if i < len(row) else None for row in rows] for i in range(len(headers))]
    shown = [i for i in range(len(headers))
             if i < keys or any(cell(v) != "-" for v in columns[i])]
    text = {i: [cell(v) for v in columns[i]] for i in shown}
    numeric = {i: _numeric(columns[i]) for i in shown}
    col_width = {i: max(len(headers[i]), *(len(c) for c in text[i]), 1) for i in shown}
    key_cols = [i for i in shown if i < keys]
    rest = [i for i in shown if i >= keys]
    base = sum(col_width[i] + len(_GAP) for i in key_cols)
    parts: list[list[int]] = []
    current: list[int] = []
    used = base
    for i in rest:
        if current and used + col_width[i] > width:
            parts.append(current)
            current, used = [], base
        current.append(i)
        used += col_width[i] + len(_GAP)
    if current or not parts:
        parts.append(current)
    out: list[str] = []
    for n, part in enumerate(parts):
        if n:
            out.append("")
        idx = key_cols + part
        out += _render([headers[i] for i in idx], [text[i] for i in idx],
                       [numeric[i] for i in idx])
    described = [(headers[i], legend[headers[i]]) for i in shown
                 if legend and headers[i] in legend]
    if described:
        out.append("")
        name_w = max(len(h) for h, _ in described)
        for header, meaning in described:
            wrapped = textwrap.wrap(meaning, max(30, width - name_w - 6)) or [""]
            out.append(f"  {header.ljust(name_w)}  {wrapped[0]}")
            out += [f"  {' ' * name_w}  {more}" for more in wrapped[1:]]
    return "\n".join(out)
