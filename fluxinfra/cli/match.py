"""``fluxinfra match GRAPH JOBSPEC``: one-shot match, JSON out.

    fluxinfra match examples/graph.json examples/job.yaml --policy low
    fluxinfra match tiny.graphml job.yaml --op allocate_orelse_reserve   # GRUG, from the name

Prints ``{"jobid", "status", "at", "overhead", "nodes", "slots", "R"}``; a request that does not
fit prints ``{"status": "BUSY"|"UNSATISFIABLE", "error": ...}`` and exits 1. Bad input (a
malformed graph or jobspec) is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from fluxinfra.cli.graphs import LOAD_FORMATS, load_graph_file
from fluxinfra.inputs import decode, read_bytes, read_stream
from fluxinfra.matcher import Busy, Matcher, Unsatisfiable, gcpolicy
from fluxinfra.matcher.errors import JobspecError
from fluxinfra.matcher.matcher import OPS
from fluxinfra.matcher.readers import collector_paused

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fluxinfra match",
                                description="match one jobspec against a resource graph")
    p.add_argument("graph", help="resource graph file (JGF, GRUG GraphML, R, hwloc XML)")
    p.add_argument("jobspec", help="jobspec file (YAML or JSON), or - for stdin")
    p.add_argument("--policy", "-P", default="first", help="match policy (default first)")
    p.add_argument("--format-in", "-f", default=None, choices=LOAD_FORMATS,
                   help="graph format (default: from the file name: .graphml grug, .xml "
                        "hwloc, otherwise jgf)")
    p.add_argument("--op", default="allocate", choices=OPS, help="match operation")
    p.add_argument("--subsystem", "-S", default="containment", help="dominant subsystem")
    p.add_argument("--exact-pools", action="store_true",
                   help="take exactly the amount asked from pools (memory) instead of a whole "
                        "vertex")
    p.add_argument("--indent", type=int, default=2, help="JSON indent (0: one line)")
    return p


def _jobspec_text(path: str) -> str:
    """The jobspec named on the command line (``-``: standard input), read as
    :mod:`fluxinfra.inputs` reads (at most MAX_TEXT_BYTES, UTF-8)."""
    if path == "-":
        data = read_stream(sys.stdin.buffer, "jobspec", JobspecError, name="standard input")
    else:
        data = read_bytes(path, f"jobspec {path}", JobspecError)
    return decode(data, f"jobspec {path}", JobspecError)


def main(argv: list[str] | None = None) -> int:
    opts = build_parser().parse_args(argv)
    # the collector stays paused from the load until the graph is frozen, as in
    # ``fluxinfra query``: a young collection before that would walk every object the load made
    with collector_paused():
        graph = load_graph_file(opts.graph, opts.format_in,
                                hint="the order is: fluxinfra match GRAPH JOBSPEC")
        text = _jobspec_text(opts.jobspec)
        matcher = Matcher(graph, policy=opts.policy, subsystem=opts.subsystem,
                          exact_pools=opts.exact_pools)
        gcpolicy.tune_for(matcher)  # this command owns its process
    indent = opts.indent or None
    try:
        result = matcher.match(text, op=opts.op)
    except (Busy, Unsatisfiable) as exc:
        status = "BUSY" if isinstance(exc, Busy) else "UNSATISFIABLE"
        print(json.dumps({"status": status, "error": str(exc)}, indent=indent))
        return 1
    print(json.dumps(result.to_dict(), indent=indent))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
