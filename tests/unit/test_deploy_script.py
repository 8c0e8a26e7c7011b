"""``scripts/deploy`` (``make deploy``): the order an empty cluster needs, checked with a
recording double of ``kubectl`` (tests/e2e/test_stacks.py runs it against a real API server)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "scripts" / "deploy"


@pytest.fixture
def kubectl_double(tmp_path: Path) -> tuple[Path, Path]:
    """A ``kubectl`` that appends its arguments to a log and succeeds."""
    log = tmp_path / "calls.log"
    script = tmp_path / "kubectl"
    script.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    script.chmod(0o755)
    return script, log


def run(*args: str, kubectl: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, **({"KUBECTL": str(kubectl)} if kubectl else {}))
    return subprocess.run(["bash", str(DEPLOY), *args], env=env, capture_output=True,
                          text=True, timeout=30, check=False)


def test_crds_are_applied_and_served_before_everything_else(tmp_path, kubectl_double) -> None:
    kubectl, log = kubectl_double
    render = tmp_path / "render"
    render.mkdir()
    (render / "kustomization.yaml").write_text("resources: []\n")
    for name in ("customresourcedefinition-podgroups.yaml", "customresourcedefinition-b.yaml",
                 "job-x.yaml"):
        (render / name).write_text("{}\n")
    proc = run(str(render), "--context", "prod", kubectl=kubectl)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    crds = (f"-f {render}/customresourcedefinition-b.yaml "
            f"-f {render}/customresourcedefinition-podgroups.yaml")
    assert calls == [
        f"--context prod apply --server-side --field-manager=fluxinfra {crds}",
        f"--context prod wait --for=condition=Established --timeout=120s {crds}",
        f"--context prod apply --server-side --field-manager=fluxinfra -k {render}"]


def test_a_render_without_crds_is_one_apply(tmp_path, kubectl_double) -> None:
    kubectl, log = kubectl_double
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    assert run(str(tmp_path), kubectl=kubectl).returncode == 0
    assert log.read_text().splitlines() == [
        f"apply --server-side --field-manager=fluxinfra -k {tmp_path}"]


def test_no_render_and_no_kubectl_are_one_line_errors(tmp_path, kubectl_double) -> None:
    proc = run(str(tmp_path / "nothing"))
    assert proc.returncode == 2 and "not a render" in proc.stderr and "make render" in \
        proc.stderr
    (tmp_path / "kustomization.yaml").write_text("resources: []\n")
    proc = run(str(tmp_path), kubectl=tmp_path / "no-kubectl")
    assert proc.returncode == 2 and "not found" in proc.stderr and "KUBECTL=" in proc.stderr
