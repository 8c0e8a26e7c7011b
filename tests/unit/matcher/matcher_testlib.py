"""Helpers shared by the matcher tests: fixture graphs and the one invariant checker.

Imported as ``matcher_testlib`` (a unique name: several test folders have a conftest.py)."""

from __future__ import annotations

from pathlib import Path

from fluxinfra.matcher import Matcher, ResourceGraph

TESTDATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "fluxion-testdata"


def build_cluster(nodes: int = 4, sockets: int = 2, cores: int = 4, gpus: int = 1,
                  mem_per_socket: int = 16) -> ResourceGraph:
    """cluster0 -> node{i} -> socket{j} -> core/gpu/memory (one memory pool per socket)."""
    g = ResourceGraph()
    root = g.add_vertex(type="cluster", basename="cluster", id=0)
    core_id = gpu_id = 0
    for n in range(nodes):
        node = g.add_vertex(type="node", id=n, rank=n)
        g.add_edge(root, node)
        for s in range(sockets):
            sock = g.add_vertex(type="socket", id=n * sockets + s)
            g.add_edge(node, sock)
            for _ in range(cores):
                g.add_edge(sock, g.add_vertex(type="core", id=core_id))
                core_id += 1
            for _ in range(gpus):
                g.add_edge(sock, g.add_vertex(type="gpu", id=gpu_id))
                gpu_id += 1
            g.add_edge(sock, g.add_vertex(type="memory", id=n * sockets + s,
                                          size=mem_per_socket, unit="GB"))
    g.finalize()
    return g


def check_invariants(m: Matcher) -> None:
    """No vertex used beyond its size at any instant; exclusive holders are alone."""
    g = m.graph
    for v, planner in m.trav.sched.items():
        assert max(planner.usage) <= g.size[v], f"{g.name[v]} over-allocated: {planner.usage}"
        assert min(planner.usage) >= 0, f"{g.name[v]} negative usage: {planner.usage}"
    held: dict[int, list[int]] = {}
    for jobid, job in m.jobs.items():
        for v in job.sched:
            held.setdefault(v, []).append(jobid)
    for v, jobs in held.items():
        total = 0
        for jobid in jobs:
            job = m.jobs[jobid]
            total += next(amount for _, u, amount, excl, _ in job.vertices if u == v and excl)
        if len(jobs) > 1:
            # overlapping holders must not overlap in time beyond the size
            spans = sorted((m.jobs[j].at, m.jobs[j].at + m.jobs[j].duration) for j in jobs)
            for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
                if g.size[v] == 1:
                    assert start >= end, f"{g.name[v]} held by {jobs} at overlapping times"


def counts_met(result, want: dict[str, int]) -> None:
    got: dict[str, int] = {}
    for _, v, amount, excl, _ in result.emitted:
        if excl:
            t = result._graph.type[v]
            got[t] = got.get(t, 0) + amount
    for t, n in want.items():
        assert got.get(t, 0) >= n, f"wanted {n} {t}, got {got.get(t, 0)}"

