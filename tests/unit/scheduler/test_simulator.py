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
])
def test_bad_workloads_name_the_field(data: dict, needle: str) -> None:
    with pytest.raises(WorkloadError, match=None) as info:
        parse_workload(data)
    assert needle in str(info.value)


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
