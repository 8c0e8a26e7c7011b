"""``python -m fluxinfra.service.client`` against a live service on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fluxinfra.kube.graph import graph_from_k8s
from fluxinfra.matcher import Matcher
from fluxinfra.service.client import main
from fluxinfra.service.jobspecs import slots_jobspec
from fluxinfra.service.server import serve


@pytest.fixture(scope="module")
def target():
    nodes = [{"metadata": {"name": "n0"}, "status": {"allocatable": {"cpu": "4", "memory": "4Gi"}}}]
    srv, port = serve(Matcher(graph_from_k8s(nodes, [], subtract_pods=False)),
                      host="127.0.0.1", port=0)
    yield f"127.0.0.1:{port}"
    srv.stop(grace=None)


def test_match_info_cancel_dump_health(target: str, tmp_path: Path, capsys) -> None:
    spec = tmp_path / "js.yaml"
    spec.write_text(yaml.safe_dump(slots_jobspec(2, cores=1, duration=60)))
    assert main(["--target", target, "match", str(spec)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "ALLOCATED" and out["tasks"] == {"n0": 2}
    assert main(["--target", target, "info", str(out["jobid"])]) == 0
    assert json.loads(capsys.readouterr().out)["nodes"] == ["n0"]
    assert main(["--target", target, "dump"]) == 0
    assert json.loads(capsys.readouterr().out)["jobs"][0]["jobid"] == out["jobid"]
    assert main(["--target", target, "cancel", str(out["jobid"])]) == 0
    capsys.readouterr()
    assert main(["--target", target, "health"]) == 0
    assert json.loads(capsys.readouterr().out) == {"status": "SERVING"}


def test_errors_are_one_line_and_exit_2(target: str, tmp_path: Path, capsys) -> None:
    assert main(["--target", target, "match", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "jobspec" in err and "missing.yaml" in err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "resources": [{"type": "core", "count": 0}]}))
    assert main(["--target", target, "match", str(bad)]) == 2
    assert "resources[0].count" in capsys.readouterr().err
    assert main(["--target", target, "cancel", "4242"]) == 2
    assert "UnknownJob" in capsys.readouterr().err


def test_unreachable_service_is_a_clear_error(capsys) -> None:
    assert main(["--target", "127.0.0.1:1", "--timeout", "1", "health"]) == 2
    assert "127.0.0.1:1" in capsys.readouterr().err
