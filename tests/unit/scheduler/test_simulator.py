"""The simulator: workload parsing errors, determinism, and the shipped example workloads."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluxinfra.cli.simulate import main
from fluxinfra.scheduler.allocator import SpreadAllocator
from fluxinfra.scheduler.fluxion import FluxionAllocator
from fluxinfra.scheduler.simulator import (
    Simulation,
    WorkloadError,
    load_workload,
    parse_workload,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "workloads"
SMALL = {"cluster": {"nodes": 1, "cpu": "4", "memory": "8Gi"}, "jobs": [
    {"name": "running", "cpu": "2", "duration": 100},
    {"name": "head", "arrival": 1, "cpu": "4", "duration": 100},
    {"name": "long", "arrival": 2, "cpu": "2", "duration": 1000},
    {"name": "short", "arrival": 3, "cpu": "2", "duration": 90},
]}


@pytest.mark.parametrize(("data", "needle"), [
    ({"jobs": [{"name": "a"}]}, "cluster"),
    ({"cluster": {"nodes": 0}, "jobs": [{"name": "a"}]}, "cluster.nodes: 0"),
    ({"cluster": [{"nodes": 2}, {"nodes": 0}], "jobs": [{"name": "a"}]}, "cluster[1].nodes: 0"),
    ({"cluster": {"nodes": 1}, "jobs": []}, "jobs"),
    ({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "pods": 0}]}, "jobs[0] (a).pods"),
    ({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "cpu": "lots"}]}, "'lots'"),
    ({"cluster": {"nodes": 1}, "jobs": [{"name": "a"}, {"name": "a"}]}, "'a' is used twice"),
    # an arrival past what a timestamp holds was an OverflowError traceback
    ({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "arrival": 10**22}]},
     "jobs[0] (a).arrival: 10000000000000000000000; give an integer from 0 to 1000000000"),
    ({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "repeat": 3, "every": 10**9}]},
     "jobs[0] (a): the last of 3 copies 1000000000 s apart arrives after 1000000000 s"),
    ({"cluster": {"nodes": 10**12}, "jobs": [{"name": "a"}]},
     "cluster.nodes: 1000000000000; give an integer from 1 to 100000"),
    ({"cluster": {"nodes": 1}, "jobs": [{"name": "a", "pods": 10**6, "repeat": 2}]},
     "jobs[0] (a): 2000000 pods bring the workload past 1,000,000 pods"),
    ({"cluster": {"nodes": 1, "cpu": "lots"}, "jobs": [{"name": "a"}]}, "cluster.cpu: 'lots'"),
    ({"cluster": {"nodes": 1, "memory": [8]}, "jobs": [{"name": "a"}]},
     "cluster.memory: [8] is a list; give a Kubernetes quantity"),
    ({"cluster": {"nodes": 1}, "jobs": [{"name": ["a"]}]}, "jobs[0].name: ['a']; give a name"),
])
def test_bad_workloads_name_the_field(data: dict, needle: str) -> None:
    with pytest.raises(WorkloadError, match=None) as info:
        parse_workload(data)
    assert needle in str(info.value)


@pytest.mark.parametrize(("data", "needle"), [
    (b"cluster: {nodes: 1}\xff\n", "not UTF-8 text (byte 0xff at offset 19)"),
    (b"a: [" * 200, "nested more than 100 levels deep"),
    (b"cluster: &a {nodes: 1, x: *a}\n", "a YAML alias refers to itself"),
    (b"cluster: {nodes: 1}\njobs: [{name: a, arrival: 2026-01-01}]\n", "is a YAML date"),
])
def test_bad_workload_files_get_one_line(tmp_path: Path, data: bytes, needle: str) -> None:
    path = tmp_path / "w.yaml"
    path.write_bytes(data)
    with pytest.raises(WorkloadError) as info:
        load_workload(path)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_a_device_is_refused_not_read_forever() -> None:
    with pytest.raises(WorkloadError, match="is a device, not a file"):
        load_workload("/dev/zero")


def test_fluxion_reservation_protects_the_head_job() -> None:
    w = parse_workload(SMALL)
    flux = Simulation(w, FluxionAllocator()).run()
    spread = Simulation(w, SpreadAllocator()).run()
    assert flux.completed_pods == spread.completed_pods == 4
    # Fluxion reserves t=100 for 'head'; 'short' ends before that and is backfilled, 'long' is
    # not. The spread baseline starts 'long' at once and 'head' waits for it.
    assert flux.waits == {"running": 0, "head": 99, "long": 198, "short": 0}
    assert spread.waits["head"] > 1000 - 2
    again = Simulation(w, FluxionAllocator()).run()
    assert again.waits == flux.waits and again.makespan == flux.makespan


def test_unschedulable_job_is_reported_not_retried() -> None:
    data = {"cluster": {"nodes": 1, "cpu": "4"}, "jobs": [
        {"name": "ok", "cpu": "1", "duration": 10}, {"name": "huge", "pods": 9, "cpu": "1"}]}
    r = Simulation(parse_workload(data), FluxionAllocator()).run()
    assert r.never_scheduled == ["huge"] and r.waits == {"ok": 0}


@pytest.mark.parametrize("name", ["mixed-hpc.yaml", "gpu-training.yaml"])
def test_example_workloads_load(name: str) -> None:
    w = load_workload(EXAMPLES / name)
    assert w.jobs and w.nodes


def test_cli_prints_a_comparison_table(tmp_path: Path, capsys) -> None:
    import yaml

    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(SMALL))
    assert main([str(path), "--policy", "first"]) == 0
    out = capsys.readouterr().out
    assert "fluxion:first" in out and "spread" in out and "makespan vs spread" in out
