"""Every ``fluxinfra`` example in README.md and examples/README.md runs as written on examples/.

Each command line of the fenced ``console``/``sh`` blocks that starts with ``fluxinfra`` or
``python -m fluxinfra`` runs through a shell from a scratch directory holding a copy of
examples/ (so out.txt and pictures land there), with the project's virtualenv first on PATH. It
must exit 0 unless the line ends in ``# exit N``. Two substitutions, both said here: the
service's fixed port 4242 becomes a free one (other tests on this machine may hold 4242), and
``fluxinfra scheduler`` is skipped (it needs a Kubernetes API server).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCS = [REPO / "README.md", REPO / "examples" / "README.md"]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
_EXIT = re.compile(r"#\s*exit (\d+)\s*$")


def code_blocks(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _FENCE.finditer(path.read_text())]


def commands(path: Path) -> list[str]:
    """The fluxinfra command lines of ``path``'s shell blocks (continuations joined)."""
    out = []
    for lang, body in code_blocks(path):
        if lang not in ("console", "sh", "shell", "bash"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ").strip()
            if line.startswith(("fluxinfra ", "python -m fluxinfra")):
                out.append(line)
    return out


ALL = [(path.relative_to(REPO).as_posix(), line) for path in DOCS for line in commands(path)]


def test_the_readmes_show_examples():
    names = {line.split()[1] if line.startswith("fluxinfra") else "client" for _, line in ALL}
    assert {"query", "match", "draw", "service", "client", "simulate"} <= names, names


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    return tmp_path


def _env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(REPO)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _shell(line: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=_env(), text=True,
                          capture_output=True, **kwargs)


#: examples that take more than a few seconds of CPU (skipped by `make test-fast`)
SLOW = ("fluxinfra simulate ",)


@pytest.mark.parametrize(("doc", "line"), [
    pytest.param(doc, line, marks=[pytest.mark.slow] if line.startswith(SLOW) else [])
    for doc, line in ALL if " service " not in line and "fluxinfra.service.client" not in line],
    ids=lambda v: v if "/" in str(v) or v.endswith(".md") else v[:60])
def test_example_runs_as_written(doc, line, scratch):
    if line.startswith("fluxinfra scheduler"):
        pytest.skip("fluxinfra scheduler needs a Kubernetes API server")
    want = int(_EXIT.search(line).group(1)) if _EXIT.search(line) else 0
    proc = _shell(line, scratch, timeout=300)
    assert proc.returncode == want, f"{doc}: {line}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr


def test_service_and_client_examples_run_as_written(scratch):
    """The service line, started as written but on a free port, answers the client line."""
    service = [line for _, line in ALL if line.startswith("fluxinfra service ")]
    client = [line for _, line in ALL if "fluxinfra.service.client" in line]
    assert service and client
    for serve in service:
        port = _free_port()
        proc = subprocess.Popen(["bash", "-c", "exec " + serve.replace("4242", str(port))],
                                cwd=scratch, env=_env(), text=True, stderr=subprocess.PIPE)
        try:
            assert "listening on" in proc.stderr.readline(), serve
            for call in client:
                for _ in range(20):
                    done = _shell(call.replace("4242", str(port)), scratch, timeout=60)
                    if done.returncode == 0 or "UNAVAILABLE" not in done.stderr:
                        break
                    time.sleep(0.2)
                assert done.returncode == 0, f"{serve} | {call}\n{done.stderr}"
                assert '"status": "ALLOCATED"' in done.stdout
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_the_command_file_block_is_examples_cmds_in():
    blocks = [body for lang, body in code_blocks(REPO / "examples" / "README.md")
              if lang == "text" and body.startswith("# resource-query commands")]
    assert blocks == [(REPO / "examples" / "cmds.in").read_text()]


def test_the_python_example_runs(scratch):
    body = next(body for lang, body in code_blocks(REPO / "README.md")
                if lang == "python" and "Matcher(" in body)
    proc = subprocess.run([sys.executable, "-c", body], cwd=scratch, env=_env(), text=True,
                          capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_examples_graph_is_the_recipe_machine():
    from fluxinfra.matcher import load_graph
    from fluxinfra.matcher.recipe import graph_from_recipe, load_recipe

    jgf = load_graph(str(REPO / "examples" / "graph.json"), "jgf")
    recipe = graph_from_recipe(load_recipe(str(REPO / "examples" / "cluster.yaml")))
    assert [(jgf.path(v), jgf.size[v], jgf.rank[v]) for v in range(len(jgf))] == \
        [(recipe.path(v), recipe.size[v], recipe.rank[v]) for v in range(len(recipe))]


def test_every_example_file_is_described():
    listed = (REPO / "examples" / "README.md").read_text()
    for path in (REPO / "examples").iterdir():
        if path.name != "README.md":
            assert f"`{path.name}" in listed, f"examples/README.md does not describe {path.name}"
