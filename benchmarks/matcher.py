"""Matcher benchmark: graph build time/RSS and match latency per policy and job stream.

    .venv/bin/python benchmarks/run.py matcher                       # 256, 4096, 16384 nodes
    .venv/bin/python benchmarks/run.py matcher --quick               # 256 nodes, small caps
    .venv/bin/python benchmarks/run.py matcher --sizes 256,4096 --policies first,low \\
        --resource-query /opt/flux/libexec/flux/cmd/resource-query   # side by side with Fluxion

Graphs are ``graph_from_recipe`` machines of N nodes x 2 sockets x 32 cores, 2 GPUs and 4 x 16 GB
memory per socket (79 vertices per node). Each size runs in its own subprocess, so the RSS printed
is that of building (and matching on) that one graph; another subprocess times the core's GRUG
reader on the GraphML resource-query loads (``recipe_to_grug``), for a like-for-like load figure.
For every policy a fresh ``Matcher`` is made on the graph and each stream runs in two phases:

* **fill**: ``match allocate`` the stream's jobspec until the graph is full (``Busy``) or the cap
  (``--cap``, default 2,000; 200 with ``--quick``) or the per-stream time budget is reached;
* **steady**: ``--steady`` times (default 200; 50 with ``--quick``), cancel the oldest job and
  match again (the state a long-running scheduler lives in); cancel latency is reported too.

All jobs are then cancelled, so the next stream starts from an empty graph. Streams:

* ``1core``  — ``slot[1]{core[1]}``: one core anywhere;
* ``nodex``  — ``node[1](exclusive){slot[1]{core[1]}}``: one whole node;
* ``64node`` — ``node[64](exclusive){slot[64]{core[1]}}``: 64 whole nodes, one task per core
  (``flux run -N64 -n4096 --exclusive``). Exclusive because Fluxion (v0.54 resource-query)
  matches no top-level *shared* node request at all ("No matching resources found").

Latency is wall time around ``Matcher.match`` with the jobspec given as a dict (parsing included,
as in Fluxion's own figure), reported as median and p99 in milliseconds.

With ``--resource-query PATH`` the same graphs (as GRUG GraphML from ``recipe_to_grug``) and the
same command streams (``match allocate`` x fill, then ``cancel``/``match`` pairs) run through
Fluxion's ``resource-query -e``; its per-match time is the ``ELAPSE`` it prints for every match
(jobspec parse + traversal + writer, measured inside resource-query). Its load time and RSS come
from a run whose only command is ``quit``. Fluxion's scoring policies are slow on big
graphs, so their streams are capped (``--rq-cap``, default 100 matches up to 1,024 nodes and 10
above; steady 20/5); the first-fit policies (``first``, ``firstnodex``) run the same whole streams
as ours (``--cap``/``--steady``). The ratio compares medians over the same prefix of each stream
(our first n matches vs its first n).

For each size, our run and Fluxion's run back to back, so both see the same machine. A shared
machine's speed drifts over minutes; ``--rounds R`` repeats that pair R times, alternating
(ours, Fluxion, ours, Fluxion, ...), and pools each side's samples over the rounds (each round's
"same first n" prefix pooled likewise) before taking medians: a slow spell then weighs on both
sides instead of on whichever ran during it. Build and load figures are the first round's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared benchmarks/_table.py
from _table import format_table  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

ALL_POLICIES = ["first", "low", "high", "lonode", "hinode", "lonodex", "hinodex", "firstnodex",
                "locality", "variation"]
STREAMS = ["1core", "nodex", "64node"]
DEFAULT_SIZES = [256, 4096, 16384]
SOCKETS, CORES_PER_SOCKET = 2, 32
CORES_PER_NODE = SOCKETS * CORES_PER_SOCKET


def recipe_for(nodes: int) -> dict:
    """The benchmark machine with ``nodes`` nodes (one rack, as Fluxion's benchmark GRUGs)."""
    return {"cluster": "bench", "racks": 1, "nodes_per_rack": nodes, "sockets": SOCKETS,
            "cores_per_socket": CORES_PER_SOCKET, "gpus_per_socket": 2,
            "memory_per_socket": [4, 16]}


def jobspec_for(stream: str) -> dict:
    """The canonical (RFC 14 v1) jobspec of a stream."""
    if stream == "1core":
        resources = [{"type": "slot", "count": 1, "label": "task",
                      "with": [{"type": "core", "count": 1}]}]
    elif stream == "nodex":
        resources = [{"type": "node", "count": 1, "exclusive": True,
                      "with": [{"type": "slot", "count": 1, "label": "task",
                                "with": [{"type": "core", "count": 1}]}]}]
    elif stream == "64node":
        resources = [{"type": "node", "count": 64, "exclusive": True,
                      "with": [{"type": "slot", "count": CORES_PER_NODE, "label": "task",
                                "with": [{"type": "core", "count": 1}]}]}]
    else:
        raise ValueError(f"unknown stream {stream!r}; use one of {STREAMS}")
    return {"version": 1, "resources": resources,
            "attributes": {"system": {"duration": 3600}},
            "tasks": [{"command": ["app"], "slot": "task", "count": {"per_slot": 1}}]}


def first_fit(policy: str) -> bool:
    """Fluxion's matches stop at the first fit under ``policy``: cheap enough in resource-query
    to run the same whole streams as ours (the others are capped, see --rq-cap)."""
    from fluxinfra.matcher.policies import parse_policy

    return parse_policy(policy).stop_on_k > 0


def capacity(stream: str, nodes: int, policy: str = "") -> int:
    """How many jobs of a stream an empty graph of ``nodes`` nodes holds under ``policy``."""
    from fluxinfra.matcher.policies import parse_policy

    if stream == "1core" and policy and "node" in parse_policy(policy).exclusive_types:
        return nodes  # the policy holds a whole node for one core
    return {"1core": nodes * CORES_PER_NODE, "nodex": nodes, "64node": nodes // 64}[stream]


# ---------------------------------------------------------------------------------- statistics


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def summary_ms(ns: list[int]) -> tuple[float, float] | None:
    """(median, p99) in milliseconds, or None for no samples."""
    if not ns:
        return None
    return statistics.median(ns) / 1e6, percentile(ns, 99) / 1e6


# ---------------------------------------------------------------------------------- our matcher


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_stream(matcher, stream: str, cap: int, steady: int, budget_s: float) -> dict:
    """Fill then steady-state one stream on ``matcher``; leaves the graph empty again."""
    from fluxinfra.matcher import Busy

    jobspec = jobspec_for(stream)
    jobs: deque[int] = deque()
    fill: list[int] = []
    full = False
    deadline = time.monotonic() + budget_s
    clock = time.perf_counter_ns
    while len(fill) < cap and time.monotonic() < deadline:
        start = clock()
        try:
            result = matcher.match(jobspec)
        except Busy:
            full = True
            break
        fill.append(clock() - start)
        jobs.append(result.jobid)
    steady_ns: list[int] = []
    cancel_ns: list[int] = []
    deadline = time.monotonic() + budget_s
    for _ in range(min(steady, len(jobs))):
        if time.monotonic() > deadline:
            break
        oldest = jobs.popleft()
        start = clock()
        matcher.cancel(oldest)
        cancel_ns.append(clock() - start)
        start = clock()
        result = matcher.match(jobspec)
        steady_ns.append(clock() - start)
        jobs.append(result.jobid)
    for jobid in jobs:
        matcher.cancel(jobid)
    return {"fill": fill, "steady": steady_ns, "cancel": cancel_ns, "full": full}


def worker(config: dict) -> dict:
    """Build one graph and run every policy x stream on it (runs in its own process)."""
    from fluxinfra.matcher import Matcher
    from fluxinfra.matcher.recipe import graph_from_recipe

    size = config["size"]
    base_rss = rss_mib()
    start = time.perf_counter()
    graph = graph_from_recipe(recipe_for(size))
    out: dict = {"size": size, "vertices": len(graph),
                 "build_s": time.perf_counter() - start, "build_rss_mib": rss_mib(),
                 "base_rss_mib": base_rss, "policies": {}}
    for policy in config["policies"]:
        entry: dict = {}
        out["policies"][policy] = entry
        start = time.perf_counter()
        try:
            matcher = Matcher(graph, policy=policy)
        except Exception as exc:  # report and go on: a missing policy is a table cell
            entry["error"] = f"{type(exc).__name__}: {exc}"
            continue
        entry["init_s"] = time.perf_counter() - start
        for stream in config["streams"]:
            try:
                entry[stream] = run_stream(matcher, stream, config["cap"], config["steady"],
                                           config["budget_s"])
            except Exception as exc:
                entry[stream] = {"error": f"{type(exc).__name__}: {exc}"}
    out["rss_mib"] = rss_mib()
    return out


def grug_worker(config: dict) -> dict:
    """Time the core's GRUG reader on the GraphML that resource-query loads (own process)."""
    from fluxinfra.matcher import load_graph

    text = Path(config["grug"]).read_text()
    base_rss = rss_mib()
    start = time.perf_counter()
    graph = load_graph(text, fmt="grug")
    return {"size": config["size"], "vertices": len(graph),
            "grug_s": time.perf_counter() - start, "grug_rss_mib": rss_mib(),
            "base_rss_mib": base_rss}


def run_worker(config: dict, mode: str = "--worker") -> dict:
    """``worker(config)`` in a fresh interpreter; returns its JSON result."""
    proc = subprocess.run(
        [sys.executable, __file__, mode, json.dumps(config)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"size": config["size"], "error": " | ".join(tail) or f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------- resource-query


_ELAPSE = re.compile(r"^INFO: ELAPSE=([0-9.eE+-]+)", re.M)


def rq_commands(stream_plan: list[tuple[str, str, int, int]]) -> str:
    """resource-query stdin for streams run back to back: [(stream, jobspec_path, fill, steady)].

    Job ids are resource-query's counter (1, 2, ...; every ``match allocate`` takes one, matched
    or not), so the ids to cancel are known in advance. Each stream ends by cancelling its jobs.
    """
    lines = []
    next_id = 1
    for _stream, path, fill, steady in stream_plan:
        live = deque()
        for _ in range(fill):
            lines.append(f"match allocate {path}")
            live.append(next_id)
            next_id += 1
        for _ in range(min(steady, fill)):
            lines.append(f"cancel {live.popleft()}")
            lines.append(f"match allocate {path}")
            live.append(next_id)
            next_id += 1
        lines += [f"cancel {jobid}" for jobid in live]
    lines.append("quit")
    return "\n".join(lines) + "\n"


def _run_rq(argv: list[str], stdin_text: str, timeout: float) -> tuple[str, float, float, int]:
    """Run resource-query; returns (stdout, wall seconds, its max RSS MiB, exit status)."""
    with tempfile.TemporaryFile("w+") as stdin, tempfile.TemporaryFile("w+") as stdout:
        stdin.write(stdin_text)
        stdin.seek(0)
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=subprocess.STDOUT)
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            # wait4 (not Popen.wait) to get this child's own rusage: its peak RSS.
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        stdout.seek(0)
        return stdout.read(), wall, usage.ru_maxrss / 1024, proc.returncode


def rq_benchmark(rq: str, size: int, policies: list[str], streams: list[str], fill_cap: int,
                 steady: int, fmt: str, workdir: Path,
                 full: tuple[int, int] | None = None) -> dict:
    """Load time/RSS and per-stream ELAPSE samples of Fluxion's resource-query on one graph.
    ``full`` = (fill cap, steady) for the first-fit policies (``first_fit``), which Fluxion runs
    fast enough to take the same streams as ours."""
    from fluxinfra.matcher.recipe import recipe_to_grug

    grug = workdir / f"bench{size}.graphml"
    grug.write_text(recipe_to_grug(recipe_for(size)))

    def make_plan(policy: str, cap: int, pairs: int) -> list[tuple[str, str, int, int]]:
        plan = []
        for stream in streams:
            path = workdir / f"{stream}.json"
            path.write_text(json.dumps(jobspec_for(stream)))
            fill = min(cap, capacity(stream, size, policy))
            plan.append((stream, str(path), fill, min(pairs, fill)))
        return plan

    base = [rq, "-L", str(grug), "-f", "grug", "-S", "CA", "-F", fmt, "-e", "-d"]
    _, load_s, load_rss, rc = _run_rq(base + ["-P", "first"], "quit\n", 600)
    out: dict = {"size": size, "load_s": load_s, "load_rss_mib": load_rss, "policies": {}}
    if rc != 0:
        out["error"] = f"resource-query exit {rc} loading {grug}"
        return out
    for policy in policies:
        plan = make_plan(policy, *(full if full and first_fit(policy) else (fill_cap, steady)))
        commands = rq_commands(plan)
        tfile = workdir / f"{policy}.out"
        stdout, wall, _, rc = _run_rq(base + ["-P", policy, "-t", str(tfile)], commands, 3600)
        samples = [float(x) * 1e9 for x in _ELAPSE.findall(stdout)]
        failed = tfile.read_text().count("No matching resources") if tfile.exists() else 0
        entry: dict = {"wall_s": wall, "failed": failed}
        if rc != 0:
            entry["error"] = f"exit {rc}: {stdout.strip().splitlines()[-1:]}"
        pos = 0
        for stream, _path, fill, steady_n in plan:
            entry[stream] = {"fill": samples[pos:pos + fill],
                             "steady": samples[pos + fill:pos + fill + steady_n]}
            pos += fill + steady_n
        out["policies"][policy] = entry
    return out


# ---------------------------------------------------------------------------------- report


BUILD_LEGEND = {
    "vertices": "vertices of the graph (79 per node)",
    "recipe build s": "graph_from_recipe wall time; build RSS MiB: peak RSS after it",
    "GRUG load s": "the core's GRUG reader on the GraphML resource-query loads; GRUG RSS MiB "
                   "likewise",
    "RSS after matching MiB": "peak RSS of the subprocess after every policy's streams",
    "fluxion GRUG load s": "resource-query's load of the same GraphML (a run whose only "
                           "command is quit); fluxion RSS MiB: its peak RSS",
}
MATCH_LEGEND = {
    "n": "fill matches timed (until full, --cap or --budget); full: the graph filled up",
    "med ms": "median match latency of the fill phase, ms (p99 ms: 99th percentile)",
    "steady med": "median of the steady phase: cancel the oldest job, match again (steady "
                  "p99 likewise); cancel med: median cancel latency",
    "fluxion n": "matches resource-query ran (scoring policies capped by --rq-cap)",
    "fluxion med": "median ELAPSE resource-query printed per match, ms",
    "ours same n": "our median over the same first n matches as Fluxion's",
    "speedup": "fluxion med / ours same n (steady speedup: over the steady pairs)",
    "fluxion steady": "resource-query's steady-phase median, ms",
}


def build_table(results: list[dict], rq_results: dict[int, dict]) -> str:
    headers = ["nodes", "vertices", "recipe build s", "build RSS MiB", "GRUG load s",
               "GRUG RSS MiB", "RSS after matching MiB", "fluxion GRUG load s", "fluxion RSS MiB"]
    rows = []
    for res in results:
        rq = rq_results.get(res["size"], {})
        if "error" in res:
            rows.append([res["size"], "error: " + res["error"][:60]] + [""] * 7)
            continue
        grug = res.get("grug", {})
        rows.append([res["size"], res["vertices"], res["build_s"], res["build_rss_mib"],
                     grug.get("grug_s"), grug.get("grug_rss_mib"), res["rss_mib"],
                     rq.get("load_s"), rq.get("load_rss_mib")])
    return format_table(headers, rows, legend=BUILD_LEGEND)


def match_table(results: list[dict], rq_results: dict[int, dict]) -> str:
    headers = ["nodes", "policy", "stream", "n", "full", "med ms", "p99 ms", "steady med",
               "steady p99", "cancel med", "fluxion n", "fluxion med", "ours same n",
               "speedup", "fluxion steady", "steady speedup"]
    rows = []
    for res in results:
        rq_pol = rq_results.get(res["size"], {}).get("policies", {})
        for policy, entry in res.get("policies", {}).items():
            if "error" in entry:
                rows.append([res["size"], policy, "-", "", "", f"n/a: {entry['error'][:70]}"]
                            + [""] * (len(headers) - 6))
                continue
            for stream in STREAMS:
                data = entry.get(stream)
                if data is None:
                    continue
                if "error" in data:
                    rows.append([res["size"], policy, stream, "", "",
                                 f"error: {data['error'][:70]}"] + [""] * (len(headers) - 6))
                    continue
                fill = summary_ms(data["fill"]) or (None, None)
                steady = summary_ms(data["steady"]) or (None, None)
                cancel = summary_ms(data["cancel"]) or (None, None)
                rq_stream = rq_pol.get(policy, {}).get(stream, {})
                rq_fill = summary_ms(rq_stream.get("fill", []))
                rq_steady = summary_ms(rq_stream.get("steady", []))
                same = summary_ms(data["fill_same"] if "fill_same" in data
                                  else data["fill"][:len(rq_stream.get("fill", []))])
                speedup = rq_fill[0] / same[0] if rq_fill and same and same[0] else None
                steady_speedup = (rq_steady[0] / steady[0]
                                  if rq_steady and steady[0] else None)
                rows.append([
                    res["size"], policy, stream, len(data["fill"]),
                    "yes" if data["full"] else "no", fill[0], fill[1], steady[0], steady[1],
                    cancel[0], len(rq_stream.get("fill", [])) or None,
                    rq_fill[0] if rq_fill else None, same[0] if rq_fill and same else None,
                    f"{speedup:.1f}x" if speedup else None,
                    rq_steady[0] if rq_steady else None,
                    f"{steady_speedup:.1f}x" if steady_speedup else None,
                ])
    return format_table(headers, rows, legend=MATCH_LEGEND, keys=3)


def grug_figures(size: int) -> dict:
    """The core's GRUG reader timed on the GraphML resource-query loads (own subprocess)."""
    from fluxinfra.matcher.recipe import recipe_to_grug

    with tempfile.NamedTemporaryFile("w", suffix=".graphml") as grug:
        grug.write(recipe_to_grug(recipe_for(size)))
        grug.flush()
        return run_worker({"size": size, "grug": grug.name}, "--grug-worker")


def _streams_of(entry: dict):
    for stream in STREAMS:
        data = entry.get(stream)
        if isinstance(data, dict) and "error" not in data:
            yield stream, data


def pool_rounds(ours: list[dict], rq: list[dict]) -> dict:
    """Our rounds of one size as one result: samples concatenated, "full" if any round filled;
    with Fluxion's rounds beside them, ``fill_same`` pools each round's prefix of as many fill
    samples as Fluxion took in the paired round."""
    first = ours[0]
    if "error" in first or len(ours) == 1 and not rq:
        return first
    pooled = json.loads(json.dumps(first))
    for policy, entry in pooled.get("policies", {}).items():
        for stream, data in _streams_of(entry):
            for key in ("fill", "steady", "cancel"):
                data[key] = [x for r in ours
                             for x in r["policies"][policy].get(stream, {}).get(key, [])]
            data["full"] = any(r["policies"][policy].get(stream, {}).get("full") for r in ours)
            if rq:
                data["fill_same"] = [
                    x for r, q in zip(ours, rq, strict=False)
                    for x in r["policies"][policy].get(stream, {}).get("fill", [])[
                        :len(q.get("policies", {}).get(policy, {}).get(stream, {}).get("fill",
                                                                                     []))]]
    pooled["rounds"] = len(ours)
    return pooled


def pool_rq_rounds(rounds: list[dict]) -> dict:
    """Fluxion's rounds of one size as one result (samples concatenated; load figures of the
    first round)."""
    pooled = json.loads(json.dumps(rounds[0]))
    for policy, entry in pooled.get("policies", {}).items():
        for stream, data in _streams_of(entry):
            for key in ("fill", "steady"):
                data[key] = [x for r in rounds
                             for x in r.get("policies", {}).get(policy, {}).get(stream, {}).get(
                                 key, [])]
    pooled["rounds"] = len(rounds)
    return pooled


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/run.py matcher", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", help="comma-separated node counts (default 256,4096,16384)")
    parser.add_argument("--policies",
                        help="comma-separated policies (default: all ten; 'none': build only)")
    parser.add_argument("--streams", help=f"comma-separated streams (default {','.join(STREAMS)})")
    parser.add_argument("--quick", action="store_true",
                        help="256 nodes, cap 200, steady 50: a one-minute smoke run")
    parser.add_argument("--cap", type=int, help="max fill matches per stream (default 2000)")
    parser.add_argument("--steady", type=int, help="cancel+match pairs per stream (default 200)")
    parser.add_argument("--budget", type=float, default=5.0,
                        help="seconds per stream phase before it stops early (default 5)")
    parser.add_argument("--resource-query", metavar="PATH",
                        help="Fluxion's resource-query binary: run the same streams through it")
    parser.add_argument("--rq-sizes", help="sizes to run resource-query on (default 256,4096)")
    parser.add_argument("--rq-cap", type=int,
                        help="fill matches per stream for resource-query (100 / 10 above 1,024)")
    parser.add_argument("--results-from", metavar="JSON",
                        help="print the tables of an earlier --json output instead of running")
    parser.add_argument("--rq-from", metavar="JSON",
                        help="reuse the resource-query figures of an earlier --json output")
    parser.add_argument("--rq-format", default="simple",
                        help="resource-query -F match format (default simple)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="alternate ours and Fluxion's runs R times per size and pool the "
                             "samples (default 1)")
    parser.add_argument("--json", metavar="PATH", help="also write the raw samples as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--grug-worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _csv(text: str | None, default: list, kind=str) -> list:
    return [kind(x) for x in text.split(",") if x.strip()] if text else list(default)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.grug_worker:
        print(json.dumps(grug_worker(json.loads(args.grug_worker))))
        return 0
    sizes = _csv(args.sizes, [256] if args.quick else DEFAULT_SIZES, int)
    policies = [] if args.policies == "none" else _csv(args.policies, ALL_POLICIES)
    streams = _csv(args.streams, STREAMS)
    unknown = sorted(set(streams) - set(STREAMS))
    if unknown:
        print(f"matcher benchmark: unknown stream(s) {unknown}; use {STREAMS}", file=sys.stderr)
        return 2
    cap = args.cap or (200 if args.quick else 2000)
    steady = args.steady if args.steady is not None else (50 if args.quick else 200)
    config = {"policies": policies, "streams": streams, "cap": cap, "steady": steady,
              "budget_s": args.budget}
    print(f"matcher benchmark: sizes {sizes}, policies {','.join(policies)}, streams "
          f"{','.join(streams)}, cap {cap}, steady {steady}, budget {args.budget:.0f} s/phase, "
          f"{os.cpu_count()} CPUs", flush=True)
    if args.rounds < 1:
        print(f"matcher benchmark: --rounds must be >= 1, got {args.rounds}", file=sys.stderr)
        return 2
    results = []
    rq_results: dict[int, dict] = {}
    if args.results_from:
        results = json.loads(Path(args.results_from).read_text())["results"]
        sizes = []
    if args.rq_from:
        saved = json.loads(Path(args.rq_from).read_text()).get("resource_query", {})
        rq_results = {int(size): data for size, data in saved.items()}
    rq_sizes = _csv(args.rq_sizes, [256, 4096], int) if args.resource_query and not args.rq_from \
        else []
    with tempfile.TemporaryDirectory(prefix="fluxinfra-bench-") as tmp:
        for size in sizes:
            ours_rounds, rq_rounds = [], []
            for _ in range(args.rounds):
                started = time.perf_counter()
                result = run_worker({**config, "size": size})
                if not ours_rounds:
                    result["grug"] = grug_figures(size)
                ours_rounds.append(result)
                print(f"  fluxinfra {size} nodes: {time.perf_counter() - started:.0f} s",
                      flush=True)
                if size in rq_sizes:
                    rq_cap = args.rq_cap or (100 if size <= 1024 else 10)
                    rq_steady = min(steady, 20 if size <= 1024 else 5)
                    started = time.perf_counter()
                    rq_rounds.append(rq_benchmark(args.resource_query, size, policies, streams,
                                                  rq_cap, rq_steady, args.rq_format, Path(tmp),
                                                  full=(cap, steady)))
                    print(f"  resource-query {size} nodes: {time.perf_counter() - started:.0f} s",
                          flush=True)
            results.append(pool_rounds(ours_rounds, rq_rounds))
            if rq_rounds:
                rq_results[size] = pool_rq_rounds(rq_rounds)
    print()
    print("Graph build (graph_from_recipe, one subprocess per size)")
    print(build_table(results, rq_results))
    print()
    print("Match latency (ms): fill = match until full or cap; steady = cancel oldest + match")
    print(match_table(results, rq_results))
    if args.json:
        Path(args.json).write_text(json.dumps({"results": results, "resource_query": rq_results}))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
