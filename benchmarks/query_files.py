"""Jobspec files in ``fluxinfra query``: a long session naming one jobspec file at every match.

    .venv/bin/python benchmarks/run.py query_files --quick
    .venv/bin/python benchmarks/run.py query_files --pairs 5000 --rounds 9
    .venv/bin/python benchmarks/run.py query_files --tree /tmp/other-checkout    # A/B

resource-query reads the jobspec file a command names at every command; ``fluxinfra query``
keeps its text while the file is unchanged, and what checking that costs is paid once per
command or once per read of the commands. This measures it where it shows: a command file of
N pairs (``match allocate JOBSPEC``, ``cancel ID``) on a small graph, so the match itself is
short. The jobspec file is dated an hour back, as a user's file is (a file changed in the last
2 s is read at every command).

Each round runs one fresh process per source tree (this checkout, then each ``--tree DIR``,
alternated; ``DIR`` is put first on ``PYTHONPATH``): it builds the session with
``fluxinfra.cli.query``'s own ``build_parser`` and ``open_session``, sets the collector's
thresholds as ``fluxinfra query`` does, and times ``run`` over the command file opened as
``--commands`` opens it, writing its ``-t`` output to a file. A tree's modules load compiled
where ``fluxinfra compile`` made them from its sources (the ``compiled`` column says how
many of ``compiled.MODULES`` did). Per pair: the median over the rounds of run time / N, and
the ratio to the first tree's median (same rounds, alternated). The outputs' SHA-256 must
agree between trees (else the run exits 1).

Graph and jobspec: ``--graph FILE --format F --jobspec FILE`` (e.g. resource-query's test
files), else a 16-node GRUG recipe and a 1-core request.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared benchmarks/_table.py
from _table import format_table  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
RECIPE = {"cluster": "bench", "racks": 1, "nodes_per_rack": 16, "sockets": 2,
          "cores_per_socket": 4}
JOBSPEC = {"version": 1,
           "resources": [{"type": "slot", "count": 1, "label": "task",
                          "with": [{"type": "core", "count": 1}]}],
           "attributes": {"system": {"duration": 3600}},
           "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}
#: what one process runs (argv: its options as JSON); prints its timing as JSON
DRIVER = """
import gc, json, sys, time
from fluxinfra import compiled
from fluxinfra.cli.query import build_parser, open_session
o = json.loads(sys.argv[1])
opts = build_parser().parse_args(o["argv"])
session = open_session(opts, sys.stdout, tune_collector=True)
gc.set_threshold(10_000, 100, 100)  # as fluxinfra query (query._batch_gc)
session.out = open(o["out"], "w", encoding="utf-8", errors="surrogateescape",
                   buffering=1 << 18)
with open(o["commands"], encoding="utf-8", errors="surrogateescape") as fh:
    start = time.perf_counter()
    session.run(fh)
    seconds = time.perf_counter() - start
session.out.close()
print(json.dumps({"seconds": seconds, "compiled": sum(compiled.loaded().values())}))
"""
LEGEND = {
    "tree": "source tree the process imported fluxinfra from",
    "compiled": "modules of compiled.MODULES it loaded compiled",
    "us/pair": "median over the rounds of the session's run time / pairs (match + cancel)",
    "min us": "fastest round",
    "max us": "slowest round",
    "ratio": "us/pair / the first tree's",
    "output": "SHA-256 of the -t output (first 12 hex digits)",
}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="benchmarks/run.py query_files",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1,000 pairs, 3 rounds")
    p.add_argument("--pairs", type=int, default=5000,
                   help="match + cancel pairs per session (default %(default)s)")
    p.add_argument("--rounds", type=int, default=7, help="processes per tree (default 7)")
    p.add_argument("--tree", action="append", default=[], metavar="DIR",
                   help="another source checkout to run side by side (repeatable)")
    p.add_argument("--graph", type=Path, help="resource graph file (default: a GRUG recipe)")
    p.add_argument("--format", default="grug", help="its format, as -f (default grug)")
    p.add_argument("--jobspec", type=Path, help="jobspec file (default: a 1-core request)")
    p.add_argument("--policy", default="first", help="-P (default first)")
    return p


def _inputs(args, work: Path) -> tuple[Path, Path]:
    """The graph and jobspec files, the latter copied and dated an hour back."""
    graph = args.graph
    if graph is None:
        from fluxinfra.matcher.recipe import recipe_to_grug

        graph = work / "graph.graphml"
        graph.write_text(recipe_to_grug(RECIPE))
    spec = work / ("job" + (args.jobspec.suffix if args.jobspec else ".json"))
    spec.write_bytes(args.jobspec.read_bytes() if args.jobspec else
                     json.dumps(JOBSPEC).encode())
    settled = time.time() - 3600
    os.utime(spec, (settled, settled))
    return graph, spec


def _run(tree: Path, options: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(options)], env=env,
                          cwd=tree, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: exit {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    got["digest"] = hashlib.sha256(Path(options["out"]).read_bytes()).hexdigest()[:12]
    return got


def main(argv: list[str]) -> int:
    args, _ = parser().parse_known_args(argv)
    pairs, rounds = (1000, 3) if args.quick else (max(1, args.pairs), max(1, args.rounds))
    trees = [REPO, *(Path(t).resolve() for t in args.tree)]
    for tree in trees[1:]:
        if not (tree / "fluxinfra" / "cli" / "query.py").is_file():
            print(f"query_files benchmark: --tree {tree}: no fluxinfra/cli/query.py there; "
                  "give a fluxinfra source checkout", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="query-files-") as tmp:
        work = Path(tmp)
        graph, spec = _inputs(args, work)
        commands = work / "cmds.in"
        commands.write_text("".join(f"match allocate {spec}\ncancel {i}\n"
                                    for i in range(1, pairs + 1)))
        argv_q = ["-L", str(graph), "-f", args.format, "-P", args.policy]
        runs: list[list[dict]] = [[] for _ in trees]
        for _ in range(rounds):
            for index, tree in enumerate(trees):
                out = work / f"out-{index}.txt"
                runs[index].append(_run(tree, {"argv": argv_q, "out": str(out),
                                               "commands": str(commands)}))
    rows, base, digests = [], None, set()
    for tree, got in zip(trees, runs, strict=True):
        per = [r["seconds"] / pairs * 1e6 for r in got]
        median = statistics.median(per)
        base = median if base is None else base
        digests.update(r["digest"] for r in got)
        rows.append([str(tree), got[-1]["compiled"], median, min(per), max(per),
                     median / base, got[-1]["digest"]])
    print(f"\nfluxinfra query: {pairs:,} pairs (match allocate + cancel) on one jobspec file, "
          f"{rounds} rounds alternated")
    print(format_table(["tree", "compiled", "us/pair", "min us", "max us", "ratio", "output"],
                       rows, legend=LEGEND, keys=1))
    if len(digests) > 1:
        print("DIFFERENT outputs between trees", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
