"""``fluxinfra draw GRAPH [JOBSPEC...] -o FILE``: a picture of a resource graph and of the
allocations jobspecs get in it, for people who would rather look than read.

    fluxinfra draw examples/graph.json -o graph.svg
    fluxinfra draw examples/graph.json examples/job.yaml examples/gang.yaml -o alloc.png

Each jobspec is matched in turn (``--op``, ``--policy``); each job's vertices are filled with
its colour (a reservation's with a dashed border), the legend lists the jobs, vertices that are
down are grey. Runs of sibling leaves in the same state are drawn as one box (``core[0-17]``),
so a node with 36 cores stays readable. ``.svg`` and ``.png`` need Graphviz's ``dot``
(Debian: graphviz); ``.dot`` writes the Graphviz text, to render elsewhere.
``fluxinfra query -g svg|png -o BASENAME`` draws a session's end state the same way.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from fluxinfra.errors import FluxinfraError
from fluxinfra.inputs import read_text

__all__ = ["main", "picture_dot", "write_picture", "DrawError", "PICTURE_FORMATS"]

#: picture formats by file extension (dot: the Graphviz text itself)
PICTURE_FORMATS = ("svg", "png", "dot")
#: more boxes than this make a picture nobody can read (and dot takes minutes)
MAX_BOXES = 3000
_PALETTE = ("#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5",
            "#ffffb3", "#bc80bd", "#ccebc5")
_DOWN = "#d9d9d9"


class DrawError(FluxinfraError):
    """A picture cannot be made (no Graphviz, too large, unknown format)."""


@dataclass
class _Job:
    jobid: int
    status: str
    at: int
    colour: str
    #: vertex -> (amount, exclusive)
    holds: dict[int, tuple[int, bool]] = field(default_factory=dict)


def _jobs(matcher) -> list[_Job]:
    jobs = []
    for i, (jobid, result) in enumerate(sorted(matcher.results.items())):
        job = _Job(jobid, result.status, result.at, _PALETTE[i % len(_PALETTE)])
        for _, v, amount, excl, _ in result.emitted:
            job.holds[v] = (amount, excl)
        jobs.append(job)
    return jobs


def _state(g, v: int, jobs: list[_Job]) -> tuple:
    """What a box shows beyond its name: up/down and who holds it (how much, exclusively)."""
    return (g.status[v], tuple((j.jobid, *j.holds[v]) for j in jobs if v in j.holds))


def _boxes(g, subsystem: str, jobs: list[_Job]) -> list[tuple[int, list[int]]]:
    """(parent box vertex or -1, the vertices one box stands for), parents before children:
    consecutive leaf siblings of one type, size and state share a box."""
    kids = g.children[subsystem]
    out: list[tuple[int, list[int]]] = [(-1, [g.roots[subsystem]])]
    stack = [g.roots[subsystem]]
    while stack:
        v = stack.pop()
        run: list[int] = []
        for child in kids[v]:
            if g.removed[child]:
                continue
            if kids[child]:
                out.append((v, [child]))
                stack.append(child)
                continue
            key = (g.type[child], g.size[child], _state(g, child, jobs))
            if run and (g.type[run[0]], g.size[run[0]], _state(g, run[0], jobs)) == key:
                run.append(child)
            else:
                if run:
                    out.append((v, run))
                run = [child]
        if run:
            out.append((v, run))
    return out


def _label(g, vertices: list[int], jobs: list[_Job]) -> str:
    """Name (a run of leaves as a hostlist), size, and the part of a pool each job holds."""
    from fluxinfra.hostlist import encode as hostlist

    v = vertices[0]
    name = g.name[v] if len(vertices) == 1 else hostlist([g.name[u] for u in vertices])
    lines = [name + (f" ×{len(vertices)}" if len(vertices) > 1 else "")]
    if g.size[v] != 1:
        lines.append(f"size {g.size[v]}{' ' + g.unit[v] if g.unit[v] else ''}")
    lines += [f"job {j.jobid}: {j.holds[v][0]}" for j in jobs
              if v in j.holds and j.holds[v][0] != g.size[v]]
    if not g.status[v]:
        lines.append("down")
    return "\\n".join(line.replace('"', '\\"') for line in lines)


def _style(g, v: int, jobs: list[_Job], kids: list) -> str:
    """Filled with the colour of each running job that holds the box whole (a leaf, or a
    vertex held exclusively; several: stripes); a dashed border in a reserved job's colour;
    grey and dashed: down. Vertices jobs only pass through stay white."""
    if not g.status[v]:
        return f'fillcolor="{_DOWN}", style="rounded,filled,dashed"'
    whole = [j for j in jobs if v in j.holds and (j.holds[v][1] or not kids[v])]
    running = [j.colour for j in whole if j.at == 0]
    reserved = [j.colour for j in whole if j.at > 0]
    fill = ":".join(running) or "white"
    style = "rounded,striped" if len(running) > 1 else "rounded,filled"
    if reserved:
        return f'fillcolor="{fill}", style="{style},dashed", color="{reserved[0]}", penwidth=2.5'
    return f'fillcolor="{fill}", style="{style}"'


def _legend(jobs: list[_Job]) -> str:
    """One table: a row per job in its colour (dashed note for reservations)."""
    rows = "".join(
        f'<tr><td bgcolor="{j.colour}">job {j.jobid}</td><td align="left">{j.status} '
        f'{"now" if j.at == 0 else f"at {j.at} (dashed border)"}</td></tr>' for j in jobs)
    return (f'  legend [shape=plaintext, style=solid, label=<<table border="0" cellborder="1" '
            f'cellspacing="0" cellpadding="4">{rows}</table>>];')


def picture_dot(g, matcher=None, subsystem: str = "containment", title: str = "") -> str:
    """Graphviz text of ``g`` (and of ``matcher``'s jobs, coloured), one box per run of alike
    leaves; raises DrawError past :data:`MAX_BOXES` boxes."""
    jobs = _jobs(matcher) if matcher is not None else []
    boxes = _boxes(g, subsystem, jobs)
    if len(boxes) > MAX_BOXES:
        raise DrawError(f"the picture would have {len(boxes)} boxes ({len(g)} vertices); "
                        f"at most {MAX_BOXES} make a readable picture: draw a smaller graph, "
                        "or write -g dot / -g graphml instead")
    lines = ["digraph resources {",
             '  graph [rankdir=TB, nodesep=0.15, ranksep=0.35, fontname="Helvetica"'
             + (f', label="{title}", labelloc=t' if title else "") + "];",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
             "  edge [arrowhead=none, color=gray50];"]
    kids = g.children[subsystem]
    box_of: dict[int, int] = {}
    for i, (parent, vertices) in enumerate(boxes):
        for v in vertices:
            box_of[v] = i
        v = vertices[0]
        lines.append(f'  b{i} [label="{_label(g, vertices, jobs)}", '
                     f'{_style(g, v, jobs, kids)}];')
        if parent != -1:
            lines.append(f"  b{box_of[parent]} -> b{i};")
    if jobs:
        lines.append(_legend(jobs))
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_picture(dot_text: str, path: Path, fmt: str | None = None) -> None:
    """Write ``dot_text`` to ``path`` as svg, png (through Graphviz's ``dot``) or dot."""
    fmt = fmt or path.suffix.lstrip(".").lower()
    if fmt not in PICTURE_FORMATS:
        raise DrawError(f"{path}: unknown picture format {fmt!r}; use a file name ending in "
                        f"{', '.join('.' + f for f in PICTURE_FORMATS)}")
    if fmt == "dot":
        _write(path, dot_text)
        return
    dot = shutil.which("dot")
    if dot is None:
        raise DrawError(f"{path}: drawing .{fmt} needs Graphviz's 'dot', which is not installed "
                        "(Debian: apt-get install graphviz); or write a .dot file and render it "
                        "elsewhere")
    proc = subprocess.run([dot, f"-T{fmt}", "-o", str(path)], input=dot_text.encode(),
                          capture_output=True, timeout=600, check=False)
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()
        raise DrawError(f"{path}: dot -T{fmt} failed: {detail[-1] if detail else proc.returncode}")


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise DrawError(f"{path}: cannot write: {exc.strerror}") from None


def parser() -> argparse.ArgumentParser:
    from fluxinfra.cli.graphs import LOAD_FORMATS

    p = argparse.ArgumentParser(prog="fluxinfra draw",
                                description="Draw a resource graph, and the allocations of "
                                            "jobspecs matched in turn, as SVG, PNG or dot.")
    p.add_argument("graph", help="resource graph file (JGF, GRUG GraphML, hwloc XML, R)")
    p.add_argument("jobspecs", nargs="*", help="jobspecs to match in turn and colour")
    p.add_argument("-o", "--output", required=True, type=Path,
                   help="picture file: .svg, .png (both need Graphviz's dot) or .dot")
    p.add_argument("-f", "--format-in", default=None, choices=LOAD_FORMATS,
                   help="graph format (default: from the file name: .graphml grug, .xml "
                        "hwloc, otherwise jgf)")
    p.add_argument("-P", "--policy", default="first", help="match policy (default: first)")
    p.add_argument("--op", default="allocate_orelse_reserve",
                   choices=("allocate", "allocate_orelse_reserve"),
                   help="how each jobspec is matched (default: %(default)s; a reservation is "
                        "drawn dashed)")
    return p


def main(argv: list[str]) -> int:
    from fluxinfra.cli.graphs import load_graph_file
    from fluxinfra.matcher import Matcher, gcpolicy
    from fluxinfra.matcher.errors import Busy, JobspecError, Unsatisfiable
    from fluxinfra.matcher.readers import collector_paused

    args = parser().parse_args(argv)
    fmt = args.output.suffix.lstrip(".").lower()
    if fmt not in PICTURE_FORMATS:
        raise DrawError(f"-o {args.output}: unknown picture format {fmt!r}; use a file name "
                        f"ending in {', '.join('.' + f for f in PICTURE_FORMATS)}")
    with collector_paused():  # from the load to the matcher, as in ``fluxinfra match``
        graph = load_graph_file(args.graph, args.format_in)
        matcher = Matcher(graph, policy=args.policy)
        gcpolicy.tune_for(matcher)  # this command owns its process
    for path in args.jobspecs:
        text = read_text(path, f"jobspec {path}", JobspecError)
        try:
            result = matcher.match(text, op=args.op)
        except (Busy, Unsatisfiable) as exc:
            print(f"{path}: not placed ({exc})", file=sys.stderr)
            continue
        when = "now" if result.at == 0 else f"at {result.at}"
        print(f"{path}: job {result.jobid} {result.status} {when} on {', '.join(result.nodes)}")
    title = f"{Path(args.graph).name}, policy {args.policy}" if args.jobspecs else \
        Path(args.graph).name
    write_picture(picture_dot(graph, matcher, matcher.trav.sub, title), args.output, fmt)
    print(f"wrote {args.output}")
    return 0
