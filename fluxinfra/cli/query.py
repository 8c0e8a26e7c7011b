"""``fluxinfra query``: a resource-query compatible shell over the matcher.

Reads resource-query commands (``match allocate FILE``, ``cancel 3``, ``find status=up`` ...)
from stdin or ``--commands FILE`` and prints what Fluxion's resource-query prints, so its
command files replay unchanged::

    fluxinfra query -L graph.graphml -f grug -P low -t out.txt < cmds.in

Exit status is resource-query's: 0 once the session ran (a match that finds nothing, a refused
cancel or a malformed command is printed and the session goes on), 1 when it cannot start.
``-g dot|graphml -o BASENAME`` writes the graph when the session ends, as resource-query's
writers do; ``-g svg|png`` draws it with the session's jobs coloured (``fluxinfra draw``).

This module is the command: its options, the graph's loading (:func:`open_session`), the
process's collector settings and the graph output. The commands themselves run in
:class:`fluxinfra.cli.query_session.QuerySession`.
"""

from __future__ import annotations

import argparse
import gc
import io
import sys
from pathlib import Path
from typing import TextIO

from fluxinfra.cli.query_session import QuerySession, strtoll
from fluxinfra.errors import FluxinfraError
from fluxinfra.matcher import gcpolicy
from fluxinfra.matcher.errors import GraphError, MatcherError
from fluxinfra.matcher.matcher import Matcher
from fluxinfra.matcher.readers import collector_paused
from fluxinfra.matcher.writers import QUERY_FORMATS

__all__ = ["main", "build_parser", "open_session", "write_graph_output", "SUBSYSTEMS"]

#: -S letters -> subsystem names (first is the dominant one)
SUBSYSTEMS = {"C": "containment", "P": "power", "IB": "ibnet", "V": "virtual1"}


def _subsystems(text: str) -> list[str]:
    out = []
    for part in text.split("+"):
        part = part[:-1] if part.endswith("A") else part
        if part not in SUBSYSTEMS:
            raise MatcherError(f"-S {text!r}: unknown subsystem {part!r}; use CA, PA, IBA, VA "
                               "or combinations like C+PA")
        out.append(SUBSYSTEMS[part])
    return out


def build_parser() -> argparse.ArgumentParser:
    from fluxinfra.cli.draw import PICTURE_FORMATS
    from fluxinfra.cli.graphs import LOAD_FORMATS
    from fluxinfra.matcher.graphout import GRAPH_FORMATS

    p = _QueryParser(prog="fluxinfra query",
                     description="resource-query compatible shell over the matcher: reads "
                                 "resource-query commands from stdin (or --commands FILE) and "
                                 "prints what resource-query prints. Exits 0 once the session "
                                 "ran (a failed match or a refused command is an answer, "
                                 "printed), 1 when it cannot start, as resource-query does.")
    p.add_argument("-L", "--load-file", required=True,
                   help="resource graph file (resource-query's conf/default is not shipped)")
    p.add_argument("-f", "--load-format", default="grug", choices=LOAD_FORMATS,
                   help="format of the -L file (default: %(default)s); rv1exec_force loads "
                        "like rv1exec, as in resource-query")
    p.add_argument("-W", "--load-allowlist", default=None,
                   help="resource types to keep (hwloc), e.g. node,socket,core")
    p.add_argument("-S", "--match-subsystems", default="CA",
                   help="subsystems to match on, the first one dominant: CA (containment), "
                        "PA (power), IBA, VA, or combinations like C+PA (default: %(default)s)")
    p.add_argument("-P", "--match-policy", default="first",
                   help="policy name (first, low, high, lonode, hinode, lonodex, hinodex, "
                        "firstnodex, locality, variation) or a custom string like "
                        "'policy=high node_exclusive=true' (default: %(default)s)")
    p.add_argument("-F", "--match-format", default="simple", choices=QUERY_FORMATS,
                   help="how matched resources are written: simple and pretty_simple (text "
                        "trees), jgf, jgf_shorthand, rlite, rv1, rv1_nosched, rv1_shorthand "
                        "(JSON, as resource-query writes them) (default: %(default)s)")
    p.add_argument("-T", "--traverser-policy", default="simple", choices=["simple", "flexible"],
                   help="simple: depth-first match of the jobspec as written; flexible: "
                        "sibling slots are alternatives and xor_slot siblings expand into "
                        "variants, as resource-query's -T flexible (default: %(default)s)")
    p.add_argument("-p", "--prune-filters", default=None,
                   help="subtree aggregates to track, e.g. ALL:core,ALL:gpu "
                        "(default ALL:core,ALL:node)")
    p.add_argument("-g", "--graph-format", default=None,
                   choices=[*GRAPH_FORMATS, *(f for f in PICTURE_FORMATS if f != "dot")],
                   help="format of the -o file, written when the session ends: dot or "
                        "graphml (the whole graph, as resource-query's writers), or svg / png "
                        "(a picture with each job's allocation coloured; needs Graphviz's "
                        "dot) (default: dot)")
    p.add_argument("-o", "--graph-output", default=None, metavar="BASENAME",
                   help="write the graph to BASENAME.<-g format> when the session ends")
    p.add_argument("-r", "--reserve-vtx-vec", default=None, metavar="SIZE",
                   help="accepted for compatibility: resource-query reserves memory for SIZE "
                        "vertices (0..2000000); Python's lists need no reservation")
    p.add_argument("-t", "--test-output", default=None, help="also write match output here")
    p.add_argument("-e", "--elapse-time", action="store_true", help="accepted for compatibility")
    p.add_argument("-d", "--disable-prompt", action="store_true", help="accepted (no prompt)")
    p.add_argument("--commands", default=None, help="read commands from FILE instead of stdin")
    return p


class _QueryParser(argparse.ArgumentParser):
    """resource-query exits 1 on a bad command line (its usage(1)); argparse would exit 2."""

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


def open_session(opts, out: TextIO, err: TextIO | None = None,
                 stdout: TextIO | None = None, *, tune_collector: bool = False) -> QuerySession:
    """Load the graph and build a session from parsed options (shared with the replay test).

    The collector stays paused from the load to the matcher (:func:`collector_paused`).
    ``tune_collector`` (the command, which owns its process): beside a large graph, what is
    alive is then frozen and the thresholds raised (:func:`gcpolicy.tune_for`) while the
    collector is still paused, since collecting before that would walk every object the load
    made (about 0.2 s at 16,384 nodes) to find next to nothing."""
    from fluxinfra.cli.graphs import load_graph_file

    kwargs = {}
    if opts.load_allowlist and opts.load_format == "hwloc":
        kwargs["allowlist"] = opts.load_allowlist
    with collector_paused():
        graph = load_graph_file(opts.load_file, opts.load_format, option="-L", **kwargs)
        if opts.load_format in ("jgf", "jgf_shorthand"):
            # Fluxion's JGF reader does not keep a vertex's unit, so its writers never print
            # one
            graph.unit[:] = [""] * len(graph.unit)
        subsystems = _subsystems(opts.match_subsystems)
        _check_prune_filters(opts.prune_filters)
        matcher = Matcher(graph, policy=opts.match_policy, subsystem=subsystems[0],
                          prune_filters=opts.prune_filters,
                          flexible=opts.traverser_policy == "flexible")
        if tune_collector:
            gcpolicy.tune_for(matcher)
    return QuerySession(matcher, out, opts.match_format, err, stdout)


def _check_prune_filters(text: str | None) -> None:
    """resource-query's rule for -p: comma-separated HIGH:LOW pairs, neither side empty."""
    if text is None or not text.strip():
        return  # resource-query keeps its default then
    for pair in text.split(","):
        high, sep, low = pair.partition(":")
        if not sep or not high.strip() or not low.strip():
            raise MatcherError(f"-p {text!r}: {pair!r} is not a HIGH:LOW pair; give pairs like "
                               "ALL:core,rack:node (ALL = at every vertex)")


def _reserve_vtx_vec(text: str | None) -> None:
    """resource-query's check of -r: C's atoi, a warning (not an error) outside 0..2000000."""
    if text is not None and not 0 <= strtoll(text) <= 2_000_000:
        sys.stderr.write(f"WARN: out of range specified for --reserve-vtx-vec: {text}\n")


def write_graph_output(session: QuerySession, fmt: str, basename: str) -> None:
    """``-o BASENAME``: the graph as resource-query's writers give it (dot, graphml), or a
    picture of the graph and the session's jobs (svg, png)."""
    from fluxinfra.cli.draw import picture_dot, write_picture
    from fluxinfra.matcher.graphout import write_dot, write_graphml

    path = Path(f"{basename}.{fmt}")
    session.stdout.write("INFO: Write the target graph of the matcher...\n")
    session.stdout.flush()
    g, sub = session.m.graph, session.m.trav.sub
    if fmt in ("svg", "png"):
        write_picture(picture_dot(g, session.m, sub), path, fmt)
        return
    text = write_dot(g, sub) if fmt == "dot" else write_graphml(g)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise GraphError(f"-o {basename}: cannot write {path}: {exc.strerror}") from None


def main(argv: list[str] | None = None) -> int:
    """Run a session. Exit status as resource-query's: 0 once the session ran, whatever its
    commands answered (errors go to stderr and the session goes on); 1 when it cannot start
    (bad option, unreadable or malformed graph, unwritable -t file) or -o cannot be written."""
    opts = build_parser().parse_args(argv)
    _reserve_vtx_vec(opts.reserve_vtx_vec)
    # file names in commands are bytes, as for resource-query: those that are not UTF-8 come
    # back out (in messages) as they went in
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="surrogateescape")
    try:
        _session(opts)
    except FluxinfraError as exc:
        print(f"fluxinfra query: error: {exc}", file=sys.stderr)
        return 1
    return 0


def _batch_gc() -> None:
    """Tune the cyclic garbage collector for a session: young objects are collected every
    10,000 allocations rather than 700. A match makes no reference cycles, yet the
    collector's default thresholds re-scan the jobs' surviving objects every few hundred
    matches: about a third of a first-fit match's cost in a long command file. It still runs,
    less often. Beside a large graph, :func:`open_session` has already moved the graph out of
    the collector's sight (``gcpolicy.tune_for``); a small one is left in sight, where
    scanning it costs little.
    (Freezing every session as well would keep an in-process replay's earlier sessions for
    good, or cost a full collection per session to avoid that: twice the conformance suite's
    time.)"""
    gc.set_threshold(10_000, 100, 100)


def _session(opts) -> None:
    if opts.graph_format and not opts.graph_output:
        sys.stderr.write(f"WARN: -g {opts.graph_format} without -o writes nothing (as in "
                         "resource-query); add -o BASENAME\n")
    # the graph first, then -t: resource-query's order
    session = open_session(opts, sys.stdout, tune_collector=True)
    _batch_gc()
    if opts.test_output:
        try:
            # a large buffer: a long command file writes kilobytes per match
            session.out = open(opts.test_output, "w", encoding="utf-8",  # noqa: SIM115
                               errors="surrogateescape", buffering=1 << 18)
        except OSError as exc:
            raise GraphError(f"-t {opts.test_output}: cannot write: {exc.strerror}") from None
    try:
        if opts.commands:
            try:
                commands = open(opts.commands, encoding="utf-8",  # noqa: SIM115
                                errors="surrogateescape")
            except OSError as exc:
                raise GraphError(f"--commands {opts.commands}: {exc.strerror}") from None
            with commands:
                session.run(commands)
        else:
            session.run(sys.stdin)
    finally:
        if session.out is not sys.stdout:
            session.out.close()
    if opts.graph_output:
        write_graph_output(session, opts.graph_format or "dot", opts.graph_output)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
