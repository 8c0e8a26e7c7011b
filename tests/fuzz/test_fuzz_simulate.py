"""Workload files of ``fluxinfra simulate`` through ``load_workload``: a workload within its
bounds, or a WorkloadError with a one-line message."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from fuzzlib import clean, fuzz, json_values, mutated, mutations
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.scheduler.simulator import (
    MAX_NODES,
    MAX_PODS,
    MAX_SECONDS,
    Workload,
    WorkloadError,
    load_workload,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "workloads"
SEEDS = [p.read_text() for p in sorted(EXAMPLES.glob("*.yaml"))]
DOCS = [yaml.safe_load(text) for text in SEEDS]
SNIPPETS = ["&a ", "*a", "<<: *a\n", "!!set {a, b}", "2024-01-01", ".nan", "[", "{", "- ",
            ": ", "\n  ", "~", "yes", "'", "1e400", "9" * 5000, "---\n", "\x00", "\t",
            "repeat: 1000000000\n", "nodes: 99999999999\n", "arrival: 1e308\n", "cpu: 16Ei\n",
            "{\"a\": " * 200]


def checked(data: bytes) -> Workload | Exception:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "workload.yaml")
        path.write_bytes(data)
        result = clean(load_workload, path)
    if isinstance(result, Exception):
        assert isinstance(result, WorkloadError), type(result)
        assert "\n" not in str(result), "a WorkloadError on more than one line"
        return result
    assert 0 < len(result.nodes) <= MAX_NODES
    assert sum(j.pods for j in result.jobs) <= MAX_PODS
    assert all(0 <= j.arrival <= MAX_SECONDS for j in result.jobs)
    return result


@fuzz(mutated(SEEDS, SNIPPETS).map(lambda t: t.encode("utf-8", "surrogatepass"))
      | st.binary(max_size=200))
@example(bytes(range(200)))
@example(b"cluster: {nodes: 1}\njobs: [{name: a, arrival: 10000000000000000000000}]\n")
@example(b"cluster: {nodes: 1}\njobs: [{name: a, repeat: 1000000000}]\n")
@example(b"cluster: {nodes: 1000000000000}\njobs: [{name: a}]\n")
@example(b"cluster: {nodes: 1, cpu: [1]}\njobs: [{name: a}]\n")
@example(b"cluster: {nodes: 1, cpu: lots}\njobs: [{name: a}]\n")
@example(b"cluster: {nodes: 1}\njobs: [{name: [a], cpu: 1}]\n")
@example(b"cluster: &a {nodes: 1, x: *a}\njobs: [{name: a}]\n")
def test_workload_files(data: bytes) -> None:
    checked(data)


@fuzz(st.sampled_from(DOCS).flatmap(mutations) | json_values(8))
@example({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "arrival": 2**63, "repeat": 2}]})
@example({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "every": 10**9, "repeat": 3}]})
@example({"cluster": {"nodes": 1, "memory": 1e308}, "jobs": [{"name": "a"}]})
@example({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "cpu": "9" * 5000}]})
@example({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "pods": 10**6, "repeat": 2}]})
def test_workload_documents(doc) -> None:
    checked(yaml.safe_dump(doc, allow_unicode=True).encode())
