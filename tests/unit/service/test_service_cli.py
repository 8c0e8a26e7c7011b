"""``fluxinfra service`` as a process: listens, answers health and Match, stops on SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest

from fluxinfra.service.client import FluxionClient, ServiceError
from fluxinfra.service.jobspecs import slots_jobspec

RECIPE = json.dumps({"cluster": "t", "racks": 1, "nodes_per_rack": 2, "sockets": 1,
                     "cores_per_socket": 4, "memory_per_socket": [1, 4]})


def fluxinfra(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fluxinfra", *args],
                            stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **kw)


def test_service_process_serves_and_stops_cleanly() -> None:
    proc = fluxinfra("service", "--host", "127.0.0.1", "--port", "0", "--recipe", RECIPE)
    try:
        line = proc.stderr.readline()
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
        assert match, line
        target = f"127.0.0.1:{match.group(1)}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with FluxionClient(target, timeout=2) as client:
                    assert client.health() == "SERVING"
                    result = client.match(slots_jobspec(1, cores=2, duration=60))
                break
            except ServiceError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert result.status == "ALLOCATED" and len(result.nodes) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize(("args", "needle"), [
    ([], "no graph"),
    (["--graph", "/nonexistent.json"], "--graph /nonexistent.json: no such file"),
    (["--graph", "recipe.yaml"], "a YAML file is not a resource graph; a graph is JGF"),
    (["--recipe", "{not json"], "recipe"),
    (["--recipe", RECIPE, "--policy", "bogus"], "bogus"),
    (["--recipe", RECIPE, "--port", "70000"], "--port 70000"),
])
def test_bad_service_flags_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}
    proc = fluxinfra("service", "--port", "0", *args, env=env)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    assert err.count("\n") == 1 and needle in err, err


def test_scheduler_flags_are_checked_before_connecting() -> None:
    proc = subprocess.run([sys.executable, "-m", "fluxinfra.scheduler", "--default-duration",
                           "soon"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--default-duration" in proc.stderr


def test_scheduler_without_a_cluster_says_so() -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "KUBECONFIG": "/nonexistent"}
    proc = subprocess.run([sys.executable, "-m", "fluxinfra.scheduler", "--port", "0"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "--kubeconfig" in proc.stderr
