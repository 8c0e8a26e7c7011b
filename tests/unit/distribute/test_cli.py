"""``fluxinfra distribute`` as a user runs it: one-line errors, exit codes, --json, Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the CLI as a process against the flux double: seconds each

CLI = [sys.executable, "-m", "fluxinfra"]


def cli(args: list[str], env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "distribute", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def setup(double_instance, tmp_path):
    inst = double_instance(3, "kary:2")
    src = tmp_path / "payload.bin"
    src.write_bytes(os.urandom(2 << 20))
    common = ["--dest", str(tmp_path / "out" / "{rank}"), "--state-dir", str(tmp_path / "state"),
              "--staging-dir", str(tmp_path / "staging")]
    return inst, src, common


@pytest.mark.parametrize(("args", "expected"), [
    (["--ranks", "x"], "--ranks 'x': not an idset; use all or ranks like 0-3,7"),
    (["--ranks", "3-1"], "--ranks '3-1': not an idset"),
    (["--ranks", "0-7"], "--ranks '0-7': rank 3 is outside this instance (ranks 0-2)"),
    (["--dest", "relative/dir"], "--dest 'relative/dir': must be an absolute path"),
    (["--dest", "/x/{node}"], "--dest '/x/{node}': unknown placeholder {node}; only {rank} and "
                              "{host} are substituted"),
    (["--import", "docker"], "argument --import: invalid choice: 'docker' (choose from 'none', "
                             "'containerd', 'podman')"),
    (["--import", "podman"], "is not an OCI or docker image archive (no oci-layout or "
                             "manifest.json inside): pass --import none"),
    (["--chunk-size", "4X"], "--chunk-size '4X': not a size; use bytes or a number with K, M or "
                             "G, e.g. 4M"),
    (["--chunk-size", "3G"], "--chunk-size '3G': use 1 byte to 2G"),
    (["--stall-timeout", "0"], "--stall-timeout 0.0: must be more than 0 seconds"),
    (["--stall-timeout", "soon"], "argument --stall-timeout: invalid float value: 'soon'"),
    (["--flux-command", ""], "--flux-command '': give the flux command, e.g. flux"),
    (["--mmap", "--no-mmap"], "argument --no-mmap: not allowed with argument --mmap"),
])
def test_bad_input_is_one_line_naming_option_value_and_fix(setup, args, expected):
    inst, src, common = setup
    proc = cli([str(src), *common, *args], inst.env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("fluxinfra distribute: error: ")
    assert expected in lines[0]


@pytest.mark.parametrize(("source", "expected"), [
    ("./no-such-file", "SOURCE './no-such-file': no such file or directory, and not an image "
                       "reference"),
    ("/no/such/file.tar", "SOURCE '/no/such/file.tar': no such file or directory"),
])
def test_a_missing_source_is_one_line(setup, source, expected):
    inst, _, common = setup
    proc = cli([source, *common], inst.env)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and expected in proc.stderr


def test_a_directory_cannot_be_imported(setup, tmp_path):
    inst, _, common = setup
    proc = cli([str(tmp_path), *common, "--import", "containerd"], inst.env)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "--import containerd: SOURCE" in proc.stderr and "is a directory" in proc.stderr


def test_json_report_and_exit_zero(setup, tmp_path):
    inst, src, common = setup
    proc = cli([str(src), *common, "--json"], inst.env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is True and sorted(report["results"]) == ["0", "1", "2"]
    assert {r["status"] for r in report["results"].values()} == {"ok"}
    assert report["kind"] == "file" and report["bytes"] == 2 << 20
    # not a terminal: one line per rank, then the summary
    lines = proc.stderr.strip().splitlines()
    assert sum(line.startswith("rank ") for line in lines) == 3
    assert lines[-1].startswith("3 of 3 ranks have ")


def test_exit_one_and_the_resume_hint_when_a_rank_is_down(setup):
    inst, src, common = setup
    inst.kill(2)
    proc = cli([str(src), *common], inst.env)
    assert proc.returncode == 1
    assert "rank 2 (node2): down at plan: broker lost" in proc.stderr
    assert "run the same command with --resume" in proc.stderr.splitlines()[-1]


def test_ctrl_c_cleans_up_and_resume_finishes(setup, tmp_path):
    inst, src, common = setup
    env = {**inst.env, "FLUX_DOUBLE_EXTRACT_DELAY": "0.5"}
    proc = subprocess.Popen([*CLI, "distribute", str(src), *common, "--chunk-size", "256K"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = tmp_path / "out"
    deadline = time.monotonic() + 60
    while not list(out.glob("*/.fluxinfra-*.partial/*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list(out.glob("*/.fluxinfra-*.partial/*")), "extraction never started"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Interrupted." in stderr and "--resume" in stderr
    assert inst.kvs() == {}, "the archive was removed"
    assert not list(out.glob("*/.fluxinfra-*.partial")), "agents removed their staging dirs"
    assert not list(out.glob("*/payload.bin")), "nothing half-written under the final name"
    resumed = cli([str(src), *common, "--resume"], inst.env)
    assert resumed.returncode == 0, resumed.stderr
    for rank in range(3):
        assert Path(out / str(rank) / "payload.bin").read_bytes() == src.read_bytes()


def test_help_lists_the_options():
    proc = subprocess.run([*CLI, "distribute", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0
    for option in ("--ranks", "--dest", "--import", "--resume"):
        assert option in proc.stdout
