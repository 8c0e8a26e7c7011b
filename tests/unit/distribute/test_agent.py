"""The per-rank agent: manifests, image detection, verification, commit and import, run as the
separate process ``flux exec`` starts (here under the flux double's ``flux python``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fluxinfra.distribute import agent
from fluxinfra.distribute.run import agent_source

from .conftest import make_tar


def test_manifest_is_stable_and_ignores_modes(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_text("abc")
    first = agent.manifest(str(tmp_path), ["d"])
    os.chmod(tmp_path / "d" / "f", 0o600)
    assert agent.manifest(str(tmp_path), ["d"]) == first
    assert first["files"] == [["d", "d", 0, ""], ["f", "d/f", 3, agent.hash_file(
        str(tmp_path / "d" / "f"))]]
    (tmp_path / "d" / "f").write_text("abd")
    changed = agent.manifest(str(tmp_path), ["d"])
    assert changed["digest"] != first["digest"]
    assert agent.differences(first, changed) == [
        f"d/f: sha256 {changed['files'][1][3][:12]}..., expected {first['files'][1][3][:12]}... "
        "(3 of 3 bytes)"]


def test_differences_name_missing_extra_and_kind_changes():
    want = {"files": [["f", "a", 1, "x" * 64], ["l", "b", 0, "t"], ["d", "c", 0, ""]]}
    have = {"files": [["d", "a", 0, ""], ["f", "z", 1, "y" * 64]]}
    assert agent.differences(want, have, limit=5) == [
        "a: is a directory, expected a file", "b: missing", "c: missing", "z: not in the source"]
    assert agent.differences(want, have, limit=2)[-1] == "and 2 more"


@pytest.mark.parametrize(("members", "image", "refs"), [
    ({"manifest.json": b'[{"RepoTags": ["docker.io/library/app:1"]}]', "layer.tar": b"x"},
     "docker", ["docker.io/library/app:1"]),
    ({"oci-layout": b"{}", "index.json": b'{"manifests": [{"annotations": '
      b'{"org.opencontainers.image.ref.name": "localhost/app:2"}}]}'}, "oci", ["localhost/app:2"]),
    ({"./oci-layout": b"{}"}, "oci", []),
    ({"readme.txt": b"hi", "index.json": b"{}"}, "", []),
])
def test_image_archives_are_recognised(tmp_path, members, image, refs):
    assert agent.inspect(str(make_tar(tmp_path / "x.tar", members))) == {
        "kind": "file", "image": image, "refs": refs}


def test_inspect_kinds(tmp_path):
    (tmp_path / "plain").write_bytes(b"\x00not a tar")
    assert agent.inspect(str(tmp_path / "plain")) == {"kind": "file", "image": "", "refs": []}
    assert agent.inspect(str(tmp_path)) == {"kind": "directory", "image": "", "refs": []}
    assert agent.inspect(str(tmp_path / "none"))["kind"] == "missing"


#: the agent as its own process under the flux double: seconds each
as_a_process = pytest.mark.slow


def run_agent(inst, rank: int, spec: dict, env_extra: dict | None = None):
    """The agent as flux exec starts it on ``rank``: ``flux python -c <source> run``."""
    env = {**inst.env, "FLUX_URI": f"local://{inst.dir}/rank{rank}/local", **(env_extra or {})}
    proc = subprocess.run([inst.flux, "python", "-c", agent_source(), "run"],
                          input=json.dumps(spec), env=env, capture_output=True, text=True,
                          timeout=60)
    events = [json.loads(line[len(agent.EVENT_PREFIX):]) for line in proc.stderr.splitlines()
              if line.startswith(agent.EVENT_PREFIX)]
    return proc.returncode, events


def archived(inst, tmp_path: Path, name: str, content: bytes) -> dict:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "blob.bin").write_bytes(content)
    subprocess.run([inst.flux, "archive", "create", "-n", name, "-C", str(src), "blob.bin"],
                   env=inst.env, check=True)
    return agent.manifest(str(src), ["blob.bin"])


def spec_for(name: str, dest: Path, manifest: dict, inst, **extra) -> dict:
    return {"name": name, "dest": str(dest), "entries": ["blob.bin"], "images": [],
            "manifest": manifest, "flux": [inst.flux], "progress_interval": 0.05, **extra}


@as_a_process
def test_a_checksum_mismatch_fails_and_leaves_nothing(double_instance, tmp_path):
    inst = double_instance(2, "kary:2")
    real = archived(inst, tmp_path, "a1", b"the real content")
    claimed = dict(real, digest="0" * 64, files=[["f", "blob.bin", 16, "f" * 64]])
    rc, events = run_agent(inst, 1, spec_for("a1", tmp_path / "out", claimed, inst))
    assert rc == 1
    done = events[-1]
    assert done["event"] == "done" and done["status"] == "failed" and done["stage"] == "verify"
    assert done["reason"].startswith("checksum mismatch: blob.bin: sha256 ")
    assert done["rank"] == 1
    assert os.listdir(tmp_path / "out") == []  # no final file, no staging directory


@as_a_process
def test_the_agent_reports_start_progress_and_done(double_instance, tmp_path):
    inst = double_instance(2, "kary:2")
    manifest = archived(inst, tmp_path, "a2", os.urandom(3 << 20))
    rc, events = run_agent(inst, 1, spec_for("a2", tmp_path / "out", manifest, inst),
                           {"FLUX_DOUBLE_EXTRACT_DELAY": "0.1"})
    assert rc == 0
    kinds = [e["event"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and "progress" in kinds
    progress = [e["bytes"] for e in events if e["event"] == "progress"]
    assert progress == sorted(progress) and progress[-1] == manifest["bytes"]
    assert events[-1]["status"] == "ok" and events[-1]["digest"] == manifest["digest"]
    assert set(events[-1]["seconds"]) == {"extract", "verify"}


@as_a_process
def test_a_missing_archive_is_an_extract_failure_with_flux_s_message(double_instance, tmp_path):
    inst = double_instance(2, "kary:2")
    manifest = {"files": [["f", "blob.bin", 1, "a" * 64]], "bytes": 1, "digest": "b" * 64}
    rc, events = run_agent(inst, 0, spec_for("gone", tmp_path / "out", manifest, inst))
    assert rc == 1
    assert events[-1]["stage"] == "extract"
    assert events[-1]["reason"] == ("flux archive extract exited 1: flux-archive: archive.gone: "
                                    "key was not created within timeout window")


@as_a_process
def test_a_destination_that_cannot_be_made_names_the_broker_user(double_instance, tmp_path):
    inst = double_instance(1, "kary:2")
    (tmp_path / "a-file").write_text("not a directory")
    manifest = archived(inst, tmp_path, "a3", b"x")
    rc, events = run_agent(inst, 0, spec_for("a3", tmp_path / "a-file" / "sub", manifest, inst))
    assert rc == 1 and events[-1]["stage"] == "dest"
    assert events[-1]["reason"].startswith(f"cannot create {tmp_path}/a-file/sub: Not a directory")
    assert "make the directory writable by that user" in events[-1]["reason"]


def recording_tool(bin_dir: Path, name: str, log: Path, fail: bool = False) -> None:
    """A test double of ``podman``/``ctr``/``sudo`` that records its argv (and runs the rest for
    sudo)."""
    body = f'echo "{name} $*" >> {log}\n'
    if name == "sudo":
        body += 'shift; exec "$@"\n'  # drop -n
    elif fail:
        body += 'echo "Error: payload does not match any of the supported image formats" >&2\n'
        body += "exit 125\n"
    (bin_dir / name).write_text("#!/bin/sh\n" + body)
    (bin_dir / name).chmod(0o755)


@as_a_process
@pytest.mark.parametrize("runtime", ["podman", "containerd"])
def test_images_are_imported_with_the_runtime_s_own_command(double_instance, tmp_path, runtime):
    inst = double_instance(1, "kary:2")
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for tool in ("podman", "ctr", "sudo"):
        recording_tool(bin_dir, tool, log)
    manifest = archived(inst, tmp_path, "img", b"pretend image archive")
    spec = spec_for("img", tmp_path / "out", manifest, inst, images=["blob.bin"],
                    **{"import": runtime})
    rc, events = run_agent(inst, 0, spec, {"PATH": f"{bin_dir}:{inst.env['PATH']}"})
    assert rc == 0, events
    assert events[-1]["imported"] == ["blob.bin"]
    path = tmp_path / "out" / "blob.bin"
    expected = {"podman": f"podman load -i {path}",
                "containerd": f"ctr -n k8s.io images import {path}"}[runtime]
    calls = log.read_text().splitlines()
    assert calls[-1] == expected
    if os.geteuid() != 0:
        assert calls[0].startswith("sudo -n ")


@as_a_process
def test_a_failed_import_keeps_the_verified_file_and_says_why(double_instance, tmp_path):
    inst = double_instance(1, "kary:2")
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir()
    recording_tool(bin_dir, "podman", tmp_path / "calls.log", fail=True)
    recording_tool(bin_dir, "sudo", tmp_path / "calls.log")
    manifest = archived(inst, tmp_path, "img2", b"not an image")
    spec = spec_for("img2", tmp_path / "out", manifest, inst, images=["blob.bin"],
                    **{"import": "podman"})
    rc, events = run_agent(inst, 0, spec, {"PATH": f"{bin_dir}:{inst.env['PATH']}"})
    assert rc == 1 and events[-1]["stage"] == "import"
    assert "exited 125: Error: payload does not match" in events[-1]["reason"]
    assert (tmp_path / "out" / "blob.bin").read_bytes() == b"not an image"


def test_the_agent_runs_on_the_oldest_python_it_claims(tmp_path):
    """Python 3.7 syntax only: compile it with the feature flags of this interpreter's parser
    restricted to 3.7 (no walrus, no match, no PEP 604 at runtime)."""
    import ast

    source = agent_source()
    tree = ast.parse(source, feature_version=(3, 7))
    assert tree is not None
    assert sys.version_info >= (3, 7)
