"""Matcher benchmark: what users run, ``fluxinfra query`` beside Fluxion's resource-query.

    .venv/bin/python benchmarks/run.py matcher --quick                     # ours, 256 nodes
    .venv/bin/python benchmarks/run.py matcher                             # ours, 256/4096/16384
    .venv/bin/python benchmarks/run.py matcher --resource-query /opt/flux/bin/resource-query \
        --sizes 4096,16384                                 # + whole processes, side by side

Machines: N nodes x 2 sockets x 32 cores, 2 GPUs and 4 x 16 GB memory per socket, in racks of
256 nodes (79 vertices per node), written as GRUG GraphML (``recipe_to_grug``). Streams:

* ``1core``  — ``slot[1]{core[1]}``: one core anywhere;
* ``nodex``  — ``node[1](exclusive){slot[1]{core[1]}}``: one whole node;
* ``64node`` — ``node[64](exclusive){slot[64]{core[1]}}``: 64 whole nodes, one task per core.
  (A *shared* ``node`` with a slot directly below it is never matched by Fluxion v0.54: see
  docs/matcher.md, "Live differential against a real resource-query".)

**Whole processes** (``--resource-query PATH``): the same GRUG file and the same command file
go through ``fluxinfra query`` (the console script users run) and ``resource-query``, each a
fresh process per policy, alternating (ours, theirs; ``--rounds R`` repeats the lot). The
command file runs every stream back to back, each bracketed by ``stat`` marks whose output
times it:

* *load*: from the start of the process to the first ``stat``;
* *fill*: K x ``match allocate`` (K per stream and policy: the stream's capacity or ``--cap``;
  for Fluxion's scoring policies ``--rq-cap``, they take seconds per match at 16,384 nodes);
* *steady*: M x (``cancel`` the oldest, ``match allocate``); then the stream's jobs are
  cancelled (not timed) and the next stream starts on an empty machine.

Per match = median *fill* time / K; per steady pair = median *steady* time / M. Both programs
write their ``-t`` output; its SHA-256 is printed beside the times, and a row whose two digests
differ is marked ``DIFFERENT`` (the run then exits 1). Load averages are printed before and
after (the machine may be shared).

**In process** (always): a ``Matcher`` per policy on the graph read from the same GRUG file;
each stream is matched until full, ``--cap`` or ``--budget`` seconds, then ``--steady`` times
"cancel the oldest, match again". Median and p99 per match in ms (the p99 target is here).
Each size runs in its own subprocess (its RSS is that graph's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
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
from _table import cell as cell_text  # noqa: E402
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
RACK = 256  # nodes per rack


def recipe_for(nodes: int) -> dict:
    """The benchmark machine with ``nodes`` nodes, in racks of 256."""
    return {"cluster": "bench", "racks": max(1, nodes // RACK),
            "nodes_per_rack": min(nodes, RACK), "sockets": SOCKETS,
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
    """Fluxion stops at the first fit under ``policy`` (cheap: the same long streams run)."""
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


def ratio(theirs: float | None, ours: float | None) -> str | None:
    """How many times faster ours is (None when either side is missing)."""
    if theirs is None or ours is None:
        return None
    if ours <= 0:
        return ">1000x" if theirs > 0 else None
    return f"{theirs / ours:.1f}x"


# ---------------------------------------------------------------------------------- in process


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_stream(matcher, stream: str, cap: int, steady: int, budget_s: float) -> dict:
    """Fill then steady-state one stream on ``matcher``; leaves the graph empty again."""
    from fluxinfra.matcher import Busy

    jobspec = jobspec_for(stream)
    jobs: deque[int] = deque()
    fill: list[int] = []
    fill_cpu: list[int] = []  # the same matches in CPU time (this thread's, not the machine's)
    full = False
    deadline = time.monotonic() + budget_s
    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    while len(fill) < cap and time.monotonic() < deadline:
        start, start_cpu = clock(), cpu()
        try:
            result = matcher.match(jobspec)
        except Busy:
            full = True
            break
        fill_cpu.append(cpu() - start_cpu)
        fill.append(clock() - start)
        jobs.append(result.jobid)
    steady_ns: list[int] = []
    steady_cpu: list[int] = []
    cancel_ns: list[int] = []
    deadline = time.monotonic() + budget_s
    for _ in range(min(steady, len(jobs))):
        if time.monotonic() > deadline:
            break
        oldest = jobs.popleft()
        start = clock()
        matcher.cancel(oldest)
        cancel_ns.append(clock() - start)
        start, start_cpu = clock(), cpu()
        result = matcher.match(jobspec)
        steady_cpu.append(cpu() - start_cpu)
        steady_ns.append(clock() - start)
        jobs.append(result.jobid)
    for jobid in jobs:
        matcher.cancel(jobid)
    return {"fill": fill, "steady": steady_ns, "cancel": cancel_ns, "full": full,
            "fill_cpu": fill_cpu, "steady_cpu": steady_cpu}


def worker(config: dict) -> dict:
    """Read one machine's GRUG file and run every policy x stream on it (own process)."""
    from fluxinfra.matcher import Matcher, gcpolicy, load_graph

    size = config["size"]
    text = Path(config["grug"]).read_text()
    base_rss = rss_mib()
    start = time.perf_counter()
    graph = load_graph(text, fmt="grug")
    out: dict = {"size": size, "vertices": len(graph), "load_s": time.perf_counter() - start,
                 "load_rss_mib": rss_mib(), "base_rss_mib": base_rss, "policies": {}}
    for policy in config["policies"]:
        entry: dict = {}
        out["policies"][policy] = entry
        try:
            matcher = Matcher(graph, policy=policy)
        except Exception as exc:  # report and go on: a missing policy is a table cell
            entry["error"] = f"{type(exc).__name__}: {exc}"
            continue
        gcpolicy.tune_for(matcher)  # as the service and the scheduler do beside their matcher
        for stream in config["streams"]:
            try:
                entry[stream] = run_stream(matcher, stream, config["cap"], config["steady"],
                                           config["budget_s"])
            except Exception as exc:
                entry[stream] = {"error": f"{type(exc).__name__}: {exc}"}
    out["rss_mib"] = rss_mib()
    return out


def run_worker(config: dict) -> dict:
    """``worker(config)`` in a fresh interpreter; returns its JSON result."""
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(config)],
        capture_output=True, text=True, cwd=REPO, check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"size": config["size"], "error": " | ".join(tail) or f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


INPROCESS_LEGEND = {
    "n": "fill matches timed (until full, --cap or --budget); full: the graph filled up",
    "med ms": "median match latency of the fill phase, ms (p99 ms: 99th percentile)",
    "steady med": "median of the steady phase: cancel the oldest job, match again (steady "
                  "p99 likewise); cancel med: median cancel latency",
    "cpu p99": "99th percentile of the same matches in CPU time of the matching thread "
               "(time the machine gave other processes left out; steady cpu p99 likewise)",
}
PROCESS_LEGEND = {
    "load s": "start of the process to the first stat (reading the GRUG file), median of "
              "the rounds; fluxion load s likewise for resource-query",
    "K": "matches in the fill phase (both programs the same command file)",
    "ms/match": "(second stat - first stat) / K, median of the rounds; fluxion ms/match "
                "likewise for resource-query",
    "faster": "fluxion ms/match / ms/match",
    "M": "steady pairs: cancel the oldest job, match again",
    "ms/pair": "(third stat - second stat) / M; fluxion ms/pair likewise; pair faster: "
               "their ratio",
    "RSS MiB": "peak RSS of the process (max of the rounds); fluxion RSS MiB likewise",
    "-t output": "same <SHA-256 prefix> when every run of both programs wrote the same -t "
                 "output, else DIFFERENT (the run exits 1)",
}


def inprocess_table(results: list[dict]) -> str:
    headers = ["nodes", "policy", "stream", "n", "full", "med ms", "p99 ms", "steady med",
               "steady p99", "cancel med", "cpu p99", "steady cpu p99"]
    rows = []
    for res in results:
        for policy, entry in res.get("policies", {}).items():
            if "error" in entry:
                rows.append([res["size"], policy, "-", "", "", f"error: {entry['error'][:60]}"]
                            + [""] * 6)
                continue
            for stream in STREAMS:
                data = entry.get(stream)
                if data is None:
                    continue
                if "error" in data:
                    rows.append([res["size"], policy, stream, "", "",
                                 f"error: {data['error'][:60]}"] + [""] * 6)
                    continue
                fill = summary_ms(data["fill"]) or (None, None)
                steady = summary_ms(data["steady"]) or (None, None)
                cancel = summary_ms(data["cancel"]) or (None, None)
                fill_cpu = summary_ms(data.get("fill_cpu", [])) or (None, None)
                steady_cpu = summary_ms(data.get("steady_cpu", [])) or (None, None)
                rows.append([res["size"], policy, stream, len(data["fill"]),
                             "yes" if data["full"] else "no", fill[0], fill[1], steady[0],
                             steady[1], cancel[0], fill_cpu[1], steady_cpu[1]])
    return format_table(headers, rows, legend=INPROCESS_LEGEND, keys=3)


#: the issue's latency goal: p99 per match under this many ms at 16,384 nodes
P99_GOAL_MS = 5.0


def p99_summary(res: dict, goal_ms: float = P99_GOAL_MS) -> list[str]:
    """Per phase (fill, steady; wall clock, then CPU time), how many policy x stream rows of
    one size have a p99 per match under ``goal_ms``, and the worst rows."""
    lines = []
    for phase in ("fill", "steady", "fill_cpu", "steady_cpu"):
        rows = []
        for policy, entry in res.get("policies", {}).items():
            for stream in STREAMS:
                data = entry.get(stream)
                got = summary_ms(data[phase]) if data and phase in data else None
                if got is not None:
                    rows.append((got[1], policy, stream))
        if not rows:
            continue
        rows.sort(reverse=True)
        under = sum(1 for p99, _, _ in rows if p99 < goal_ms)
        worst = ", ".join(f"{policy} {stream} {cell_text(p99)}" for p99, policy, stream
                          in rows[:4])
        what = phase.replace("_cpu", " (CPU time)")
        lines.append(f"p99 per match, {res['size']} nodes, {what}: {under}/{len(rows)} rows "
                     f"under {goal_ms:g} ms; worst (ms): {worst}")
    return lines


# ---------------------------------------------------------------------------------- processes


def command_text(plan: list[tuple[str, int, int]]) -> str:
    """One process's commands for the streams of ``plan`` [(jobspec path, K, M)], back to
    back: ``stat`` once loading is done, then per stream K matches, ``stat``, M x (cancel the
    oldest, match), ``stat``, cancel the rest, ``stat``; ``quit``. Job ids are both programs'
    counter (1, 2, ... one per match), so the ids to cancel are known. ``stat`` writes to
    stdout only, not to the ``-t`` output both programs' digests are taken of."""
    lines = ["stat"]
    first = 1  # the id of the stream's first job
    for path, fill, steady in plan:
        lines += [f"match allocate {path}"] * fill + ["stat"]
        for oldest in range(first, first + steady):
            lines += [f"cancel {oldest}", f"match allocate {path}"]
        lines.append("stat")
        lines += [f"cancel {job}" for job in range(first + steady, first + fill + steady)]
        lines.append("stat")
        first += fill + steady
    lines.append("quit")
    return "\n".join(lines) + "\n"


def plan_for(policy: str, stream: str, nodes: int, cap: int, steady: int, rq_cap: int,
             rq_steady: int) -> tuple[int, int]:
    """(K matches, M steady pairs) of one policy and stream: Fluxion's scoring policies take
    seconds per match on large machines, so they run shorter streams (both sides alike)."""
    fill = min(cap if first_fit(policy) else rq_cap, capacity(stream, nodes, policy))
    return fill, min(steady if first_fit(policy) else rq_steady, fill)


#: the first line ``stat`` prints, in both programs
STAT_MARK = b"INFO: Num. of Jobs Matched"


def run_process(argv: list[str], commands: Path, timeout: float,
                env: dict[str, str] | None = None) -> dict:
    """Run a program on a command file with its stdout on a pseudo-terminal (line-buffered in
    both programs), noting when each ``stat`` block appears: {"marks": [seconds since start,
    ...], "wall": seconds, "rss_mib": peak RSS, "rc": exit status}."""
    import pty

    master, slave = pty.openpty()
    marks: list[float] = []

    def watch() -> None:
        tail = b""
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return  # the child closed its end
            if not data:
                return
            now = time.perf_counter()
            tail += data
            lines = tail.split(b"\n")
            tail = lines.pop()
            marks.extend(now - start for line in lines if line.startswith(STAT_MARK))

    with open(commands, "rb") as stdin:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=stdin, stdout=slave, stderr=subprocess.DEVNULL,
                                env=env)
        os.close(slave)
        reader = threading.Thread(target=watch, daemon=True)
        reader.start()
        killer = threading.Timer(timeout, proc.kill)
        killer.start()
        try:
            # wait4 (not Popen.wait) to get this child's own rusage: its peak RSS
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            killer.cancel()
        wall = time.perf_counter() - start
        reader.join(5)
        os.close(master)
    return {"marks": marks, "wall": wall, "rss_mib": usage.ru_maxrss / 1024,
            "rc": os.waitstatus_to_exitcode(status)}


def digest(path: Path) -> str:
    """SHA-256 of a ``-t`` output (first 12 hex digits; "missing" if it was not written)."""
    if not path.exists():
        return "missing"
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def ours_argv(grug: Path, policy: str, out: Path) -> list[str]:
    script = Path(sys.executable).with_name("fluxinfra")
    front = [str(script)] if script.exists() else [
        sys.executable, "-c", "from fluxinfra.cli import script; script()"]
    return front + ["query", "-L", str(grug), "-f", "grug", "-S", "CA", "-P", policy,
                    "-F", "simple", "-t", str(out)]


def rq_argv(rq: str, grug: Path, policy: str, out: Path) -> list[str]:
    return [rq, "-L", str(grug), "-f", "grug", "-S", "CA", "-P", policy, "-F", "simple",
            "-d", "-t", str(out)]


def process_benchmark(rq: str, size: int, grug: Path, policies: list[str],
                      streams: list[str], opts: dict, workdir: Path) -> dict:
    """Both programs on one machine, one process per policy and round (every stream back to
    back), alternating. Each process times its own phases between its ``stat`` marks:
    loading (until the first), and per stream K matches and M steady pairs."""
    programs = {"ours": lambda pol, out: ours_argv(grug, pol, out),
                "fluxion": lambda pol, out: rq_argv(rq, grug, pol, out)}
    envs: dict[str, dict[str, str] | None] = {"ours": None, "fluxion": None}
    if opts.get("plain_too"):  # the same fluxinfra query, its modules as plain Python
        programs["plain"] = programs["ours"]
        envs["plain"] = dict(os.environ, FLUXINFRA_PURE_PYTHON="1")
    out: dict = {"size": size, "rows": []}
    settled = time.time() - 3600
    for stream in streams:
        path = workdir / f"{stream}.json"
        path.write_text(json.dumps(jobspec_for(stream)))
        # dated an hour back, like a user's jobspec files: `fluxinfra query` reads a file
        # modified in the last 2 s again at every command (its mtime could hide a rewrite);
        # a file written just before the first process would otherwise cost that process
        # a read per match (resource-query reads the file at every command either way)
        os.utime(path, (settled, settled))
    for policy in policies:
        plan = [(stream, *plan_for(policy, stream, size, opts["cap"], opts["steady"],
                                   opts["rq_cap"], opts["rq_steady"])) for stream in streams]
        commands = workdir / f"{policy}.in"
        commands.write_text(command_text([(str(workdir / f"{stream}.json"), fill, steady)
                                          for stream, fill, steady in plan]))
        runs: dict[str, list[dict]] = {name: [] for name in programs}
        for _ in range(opts["rounds"]):
            for name, argv in programs.items():
                result = workdir / f"{name}.out"
                result.unlink(missing_ok=True)
                got = run_process(argv(policy, result), commands, opts["timeout"],
                                  envs[name])
                got["digest"] = digest(result)
                runs[name].append(got)
        for index, (stream, fill, steady) in enumerate(plan):
            out["rows"].append({"policy": policy, "stream": stream, "fill": fill,
                                "steady": steady, "runs": runs, "index": index})
            print("    " + progress_line(size, out["rows"][-1]), flush=True)
    return out


def progress_line(size: int, row: dict) -> str:
    """One row as soon as it is measured: per match and per pair, each program, verdict."""
    index = row.get("index", 0)
    parts = [f"{size} {row['policy']} {row['stream']}:"]
    for name, runs in row["runs"].items():
        got = phases(runs, index)
        each = _each(got["fill_ms"], row["fill"])
        pair = _each(got["steady_ms"], row["steady"])
        parts.append(f"{name} load {cell_text(got['load_s'])} s, {cell_text(each)} ms/match, "
                     f"{cell_text(pair)} ms/pair, {cell_text(got['rss_mib'])} MiB;")
    return " ".join(parts + [same_output(row)])


def phases(runs: list[dict], index: int = 0) -> dict[str, float | None]:
    """Medians over the rounds for stream ``index`` of each process: load s, ms for its K
    matches, ms for its M steady pairs; peak RSS MiB of the process."""
    loads, fills, steadies = [], [], []
    for run in runs:
        marks = run["marks"]
        if run["rc"] != 0 or len(marks) < 3 * index + 3:
            continue
        loads.append(marks[0])
        start, filled, steadied = marks[3 * index:3 * index + 3]
        fills.append((filled - start) * 1e3)
        steadies.append((steadied - filled) * 1e3)
    med = statistics.median
    return {"load_s": med(loads) if loads else None, "fill_ms": med(fills) if fills else None,
            "steady_ms": med(steadies) if steadies else None,
            "rss_mib": max((r["rss_mib"] for r in runs), default=None)}


def same_output(row: dict) -> str:
    """"same <digest>" when every run of every program (both, or the three with
    ``--plain-too``) wrote the same ``-t`` output."""
    seen = {name: {r["digest"] for r in runs} for name, runs in row["runs"].items()}
    ours, theirs = seen.get("ours", set()), seen.get("fluxion", set())
    plain = seen.get("plain", ours)
    if len(ours) == 1 and ours == theirs == plain and "missing" not in ours:
        return "same " + next(iter(ours))
    extra = f", plain Python {sorted(plain)}" if "plain" in seen else ""
    return f"DIFFERENT (ours {sorted(ours)}, fluxion {sorted(theirs)}{extra})"


def _each(total_ms: float | None, n: int) -> float | None:
    return None if total_ms is None or not n else total_ms / n


def process_tables(results: list[dict]) -> tuple[str, bool]:
    """The whole-process table and whether every output was identical."""
    rows = []
    identical = True
    for res in results:
        for row in res["rows"]:
            index = row.get("index", 0)
            ours = phases(row["runs"]["ours"], index)
            theirs = phases(row["runs"]["fluxion"], index)
            ours_fill, rq_fill = _each(ours["fill_ms"], row["fill"]), _each(
                theirs["fill_ms"], row["fill"])
            ours_st, rq_st = _each(ours["steady_ms"], row["steady"]), _each(
                theirs["steady_ms"], row["steady"])
            verdict = same_output(row)
            identical &= verdict.startswith("same")
            rows.append([res["size"], row["policy"], row["stream"], ours["load_s"],
                         theirs["load_s"], row["fill"], ours_fill, rq_fill,
                         ratio(rq_fill, ours_fill), row["steady"], ours_st, rq_st,
                         ratio(rq_st, ours_st), ours["rss_mib"], theirs["rss_mib"], verdict])
    table = format_table(["nodes", "policy", "stream", "load s", "fluxion load s", "K",
                          "ms/match", "fluxion ms/match", "faster", "M", "ms/pair",
                          "fluxion ms/pair", "pair faster", "RSS MiB", "fluxion RSS MiB",
                          "-t output"], rows, legend=PROCESS_LEGEND, keys=3)
    plain = plain_table(results)
    return (table + "\n\n" + plain if plain else table), identical


def plain_table(results: list[dict]) -> str:
    """With ``--plain-too``: ours compiled beside ours as plain Python, the same rounds."""
    rows = []
    for res in results:
        for row in res["rows"]:
            if "plain" not in row["runs"]:
                continue
            index = row.get("index", 0)
            ours, plain = phases(row["runs"]["ours"], index), phases(row["runs"]["plain"], index)
            fill = (_each(plain["fill_ms"], row["fill"]), _each(ours["fill_ms"], row["fill"]))
            pair = (_each(plain["steady_ms"], row["steady"]),
                    _each(ours["steady_ms"], row["steady"]))
            rows.append([res["size"], row["policy"], row["stream"], plain["load_s"],
                         ours["load_s"], *fill, ratio(*fill), *pair, ratio(*pair),
                         same_output(row)])
    if not rows:
        return ""
    return format_table(["nodes", "policy", "stream", "plain load s", "load s",
                         "plain ms/match", "ms/match", "compiled faster", "plain ms/pair",
                         "ms/pair", "pair faster", "-t output"], rows, keys=3)


# ---------------------------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmarks/run.py matcher", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", help="comma-separated node counts (default 256,4096,16384)")
    parser.add_argument("--policies",
                        help="comma-separated policies (default: all ten; 'none': load only)")
    parser.add_argument("--streams", help=f"comma-separated streams (default {','.join(STREAMS)})")
    parser.add_argument("--quick", action="store_true",
                        help="256 nodes, cap 200, steady 50: a one-minute smoke run")
    parser.add_argument("--cap", type=int,
                        help="max fill matches per stream (default 2000; whole processes: "
                             "first-fit policies)")
    parser.add_argument("--steady", type=int,
                        help="cancel+match pairs per stream (default 200)")
    parser.add_argument("--budget", type=float, default=5.0,
                        help="in process: seconds per stream phase before it stops (default 5)")
    parser.add_argument("--resource-query", metavar="PATH",
                        help="Fluxion's resource-query: run both programs as whole processes")
    parser.add_argument("--rq-cap", type=int, default=10,
                        help="whole processes, ranking policies: fill matches (default 10)")
    parser.add_argument("--rq-steady", type=int, default=5,
                        help="whole processes, ranking policies: steady pairs (default 5)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="whole processes: alternate the two programs' runs R times and "
                             "take medians (default 1)")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds one process may run (default 3600)")
    parser.add_argument("--plain-too", action="store_true",
                        help="whole processes: also run fluxinfra query as plain Python "
                             "(FLUXINFRA_PURE_PYTHON=1) in the same rounds, and print it "
                             "beside the compiled form")
    parser.add_argument("--no-inprocess", action="store_true",
                        help="skip the in-process figures")
    parser.add_argument("--json", metavar="PATH", help="also write the raw figures as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _csv(text: str | None, default: list, kind=str) -> list:
    return [kind(x) for x in text.split(",") if x.strip()] if text else list(default)


def _load_line(when: str) -> str:
    one, five, fifteen = os.getloadavg()
    return (f"{when}: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, load average {one:.1f} "
            f"{five:.1f} {fifteen:.1f}, {os.cpu_count()} CPUs")


def compiled_line() -> str:
    """Which form of the matcher `fluxinfra query` and the in-process runs use: its modules
    compiled from their source (fluxinfra compile) or plain Python."""
    from fluxinfra import compiled

    states = compiled.status()
    done = sum(state == "compiled" for state in states.values())
    if done == len(states):
        return (f"ours: the matcher's {done} hot modules compiled from their source "
                "(fluxinfra compile; FLUXINFRA_PURE_PYTHON=1 measures plain Python)")
    if set(states.values()) == {"off"}:
        return "ours: plain Python (FLUXINFRA_PURE_PYTHON is set)"
    stale = sum(state == "stale" for state in states.values())
    if stale:
        return (f"ours: {stale} of {len(states)} hot modules compiled from OLDER sources "
                "(not the code measured here: run make setup)")
    return (f"ours: plain Python ({done} of {len(states)} hot modules compiled: run "
            "fluxinfra compile)")


def report(processes: list[dict], inprocess: list[dict]) -> None:
    """Print the tables of what has been measured (each size's as soon as it is done)."""
    print(_load_line("now"))
    if processes:
        print("\nWhole processes (fluxinfra query | resource-query, same GRUG and command file)")
        print(process_tables(processes)[0])
    if inprocess:
        print("\nIn process (fluxinfra.matcher.Matcher on the GRUG file), ms per match")
        print(format_table(["nodes", "vertices", "GRUG load s", "RSS after load MiB",
                            "RSS after matching MiB"],
                           [[r["size"], r.get("vertices"), r.get("load_s"),
                             r.get("load_rss_mib"), r.get("rss_mib")] for r in inprocess]))
        if any(r.get("policies") for r in inprocess):  # (--policies none: load only)
            print(inprocess_table(inprocess))
        for res in inprocess:
            for line in p99_summary(res):
                print(line)
    print(flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    sizes = _csv(args.sizes, [256] if args.quick else DEFAULT_SIZES, int)
    policies = [] if args.policies == "none" else _csv(args.policies, ALL_POLICIES)
    streams = _csv(args.streams, STREAMS)
    unknown = sorted(set(streams) - set(STREAMS))
    if unknown:
        print(f"matcher benchmark: --streams {','.join(unknown)}: unknown; use "
              f"{','.join(STREAMS)}", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print(f"matcher benchmark: --rounds {args.rounds}: give 1 or more", file=sys.stderr)
        return 2
    if args.resource_query and not os.access(args.resource_query, os.X_OK):
        print(f"matcher benchmark: --resource-query {args.resource_query}: not an executable "
              "file; give the path of Fluxion's resource-query", file=sys.stderr)
        return 2
    cap = args.cap or (200 if args.quick else 2000)
    steady = args.steady if args.steady is not None else (50 if args.quick else 200)
    print(f"matcher benchmark: sizes {sizes}, policies {','.join(policies)}, streams "
          f"{','.join(streams)}, cap {cap}, steady {steady}", flush=True)
    print(_load_line("start"), flush=True)
    print(compiled_line(), flush=True)
    from fluxinfra.matcher.recipe import recipe_to_grug

    inprocess, processes = [], []
    with tempfile.TemporaryDirectory(prefix="fluxinfra-bench-") as tmp:
        workdir = Path(tmp)
        for size in sizes:
            grug = workdir / f"bench{size}.graphml"
            grug.write_text(recipe_to_grug(recipe_for(size)))
            if args.resource_query:
                started = time.perf_counter()
                processes.append(process_benchmark(
                    args.resource_query, size, grug, policies, streams,
                    {"rounds": args.rounds, "timeout": args.timeout, "cap": cap,
                     "steady": steady, "rq_cap": args.rq_cap, "rq_steady": args.rq_steady,
                     "plain_too": args.plain_too},
                    workdir))
                print(f"  whole processes, {size} nodes: {time.perf_counter() - started:.0f} s",
                      flush=True)
                report(processes[-1:], [])
            if not args.no_inprocess:
                started = time.perf_counter()
                inprocess.append(run_worker({"size": size, "grug": str(grug),
                                             "policies": policies, "streams": streams,
                                             "cap": cap, "steady": steady,
                                             "budget_s": args.budget}))
                print(f"  in process, {size} nodes: {time.perf_counter() - started:.0f} s",
                      flush=True)
                report([], inprocess[-1:])
            if args.json:  # after each size: a long run that is stopped keeps what it did
                Path(args.json).write_text(json.dumps({"processes": processes,
                                                       "inprocess": inprocess}))
    print(_load_line("end"))
    # (not process_tables: it formats, and so records, every table a second time)
    identical = all(same_output(row).startswith("same") for res in processes
                    for row in res["rows"])
    if processes:  # (in process only: nothing was compared)
        print(f"\nEvery -t output the same in both programs: {'yes' if identical else 'NO'}")
    failed = any("error" in r for r in inprocess + processes)
    return 1 if failed or not identical else 0


def tools(argv: list[str]) -> list[str]:
    """The outside programs a run uses (benchmarks/run.py records their versions)."""
    return ["resource-query"] if any(a.startswith("--resource-query") for a in argv) else []


if __name__ == "__main__":
    sys.exit(main())
