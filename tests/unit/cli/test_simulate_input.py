"""``fluxinfra simulate``: a typo in a workload is refused by name, paths say where, YAML
errors are one line; through the real command."""

from __future__ import annotations

import pytest
import yaml

from fluxinfra.cli import main

CLUSTER = {"nodes": 2, "cpu": "4", "memory": "8Gi"}


def run(tmp_path, text: str, capsys) -> tuple[int, str]:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    rc = main(["simulate", str(path), "--no-baseline"])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize(("doc", "needle"), [
    ({"cluster": CLUSTER, "jobs": [{"name": "a", "duraton": 10}]},
     "jobs[0] (a): unknown key 'duraton'; did you mean 'duration'? (accepted: name, arrival,"),
    ({"cluster": {**CLUSTER, "gpu": 1}, "jobs": [{"name": "a"}]},
     "cluster: unknown key 'gpu'; did you mean 'gpus'?"),
    ({"cluster": [CLUSTER, {**CLUSTER, "cpus": "8"}], "jobs": [{"name": "a"}]},
     "cluster[1]: unknown key 'cpus'; did you mean 'cpu'?"),
    ({"cluster": CLUSTER, "job": [{"name": "a"}]},
     "workload: unknown key 'job'; did you mean 'jobs'?"),
    ({"cluster": CLUSTER, "jobs": [{"name": "a", "color": "red"}]},
     "jobs[0] (a): unknown key 'color' (accepted:"),
    ({"cluster": {"nodes": "many"}, "jobs": [{"name": "a"}]}, "cluster.nodes: 'many'"),
    ({"cluster": 5, "jobs": [{"name": "a"}]}, "cluster: 5 is not a node group"),
    ({"cluster": [5], "jobs": [{"name": "a"}]}, "cluster[0]: 5 is not a mapping"),
    ({"cluster": CLUSTER, "jobs": ["a"]}, "jobs[0]: 'a' is not a mapping"),
])
def test_bad_workload_is_one_line_naming_the_field(tmp_path, capsys, doc, needle):
    rc, err = run(tmp_path, yaml.safe_dump(doc), capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert needle in err, err


def test_yaml_error_is_one_line_with_its_place(tmp_path, capsys):
    rc, err = run(tmp_path, "cluster:\n  nodes: 2\n jobs: [\n", capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "malformed YAML at line 3:" in err
