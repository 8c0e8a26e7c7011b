"""A whole distribution against the flux double: planning, fan-out, verification, failures, resume.

Every test drives :class:`Distribution` (what ``fluxinfra distribute`` runs) against an instance of
the flux double (flux_double.py), whose ``flux exec`` runs the real agent on every "rank" with
``{rank}`` keeping their destinations apart.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fluxinfra.distribute import DistributeError, Distribution, FluxClient, Options
from fluxinfra.distribute.run import Listener

pytestmark = pytest.mark.slow  # a distribution per test against the flux double: seconds each


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def options(source: Path | str, tmp_path: Path, **kw) -> Options:
    return Options(str(source), dest=str(tmp_path / "out" / "{rank}"),
                   state_dir=str(tmp_path / "state"), staging_dir=str(tmp_path / "staging"),
                   progress_interval=0.05, **kw)


def distribute(inst, source, tmp_path, listener=None, **kw):
    opts = options(source, tmp_path, **kw)
    return Distribution(opts, FluxClient([inst.flux], env=inst.env), listener=listener).run()


def revive(inst, rank: int) -> None:
    """The broker of ``rank`` comes back (a new placeholder process in its place)."""
    proc = subprocess.Popen(["sleep", "3600"])
    inst.placeholders[rank] = proc
    state = json.loads((inst.dir / "instance.json").read_text())
    state["pids"][rank] = proc.pid
    (inst.dir / "instance.json").write_text(json.dumps(state))


@pytest.fixture
def payload(tmp_path) -> Path:
    path = tmp_path / "src" / "model.bin"
    path.parent.mkdir()
    path.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    return path


def test_every_rank_gets_the_content_and_the_archive_is_removed(double_instance, tmp_path,
                                                                payload):
    inst = double_instance(4, "kary:2")
    report = distribute(inst, payload, tmp_path, chunksize=1 << 20)
    assert report.ok, report.results
    assert sorted(report.results) == [0, 1, 2, 3]
    for rank in range(4):
        assert sha256(tmp_path / "out" / str(rank) / "model.bin") == sha256(payload)
        assert report.results[rank].status == "ok"
        assert not list((tmp_path / "out" / str(rank)).glob(".fluxinfra-*"))
    assert inst.kvs() == {}, "the archive is removed from the KVS"
    assert report.lead_copies == 2 and report.depth == 2 and report.topo == "kary:2"
    assert report.bytes == payload.stat().st_size and report.files == 1
    assert not (tmp_path / "state").exists() or not list((tmp_path / "state").iterdir())


def test_the_content_is_chunked_at_the_chunk_size(double_instance, tmp_path, payload):
    inst = double_instance(2, "kary:2")
    assert distribute(inst, payload, tmp_path, chunksize=1 << 20).ok
    # blobs stay in the content store (flux collects them at garbage collection)
    sizes = sorted(p.stat().st_size for p in (inst.dir / "blobs").iterdir())
    assert sizes == [17, 1 << 20, 1 << 20, 1 << 20]


def test_the_rank_on_the_source_s_host_copies_it_locally(double_instance, tmp_path, payload):
    """The lead node holds SOURCE: its rank copies the file instead of pulling it back through
    its own broker (which is busy serving the tree); the others extract."""
    inst = double_instance(3, "kary:2", hosts=[socket.gethostname(), "node1", "node2"])
    report = distribute(inst, payload, tmp_path)
    assert report.ok, report.results
    assert set(report.results[0].seconds) == {"copy", "verify"}
    assert set(report.results[1].seconds) == {"extract", "verify"}
    for rank in range(3):
        assert sha256(tmp_path / "out" / str(rank) / "model.bin") == sha256(payload)


@pytest.mark.parametrize("lead_here", [False, True], ids=["extracted", "copied-on-the-lead"])
def test_a_directory_tree_with_a_symlink_arrives_whole(double_instance, tmp_path, lead_here):
    src = tmp_path / "src" / "dataset"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "x.txt").write_text("x" * 5000)
    (src / "top.txt").write_text("top")
    (src / "a" / "link").symlink_to("b/x.txt")
    hosts = [socket.gethostname() if lead_here else "node0", "node1", "node2"]
    inst = double_instance(3, "kary:2", hosts=hosts)
    report = distribute(inst, src, tmp_path)
    assert report.ok, report.results
    assert report.kind == "directory" and report.files == 2
    for rank in range(3):
        out = tmp_path / "out" / str(rank) / "dataset"
        assert (out / "a" / "b" / "x.txt").read_text() == "x" * 5000
        assert os.readlink(out / "a" / "link") == "b/x.txt"


def test_only_the_chosen_ranks_are_written(double_instance, tmp_path, payload):
    inst = double_instance(4, "kary:2")
    report = distribute(inst, payload, tmp_path, ranks="1,3")
    assert sorted(report.results) == [1, 3] and report.ok
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["1", "3"]
    # rank 1 is on the way to rank 3, so rank 0 sends one copy
    assert report.lead_copies == 1


def test_content_already_there_is_reported_present(double_instance, tmp_path, payload):
    inst = double_instance(2, "kary:2")
    assert distribute(inst, payload, tmp_path).ok
    again = distribute(inst, payload, tmp_path)
    assert {r.status for r in again.results.values()} == {"present"}


def test_other_content_at_the_destination_is_refused_unless_overwrite(double_instance, tmp_path,
                                                                      payload):
    inst = double_instance(2, "kary:2")
    (tmp_path / "out" / "1").mkdir(parents=True)
    (tmp_path / "out" / "1" / "model.bin").write_text("someone else's file")
    report = distribute(inst, payload, tmp_path)
    assert report.results[0].ok
    failed = report.results[1]
    assert failed.status == "failed" and failed.stage == "dest"
    assert "already exists with other content: pass --overwrite" in failed.reason
    assert (tmp_path / "out" / "1" / "model.bin").read_text() == "someone else's file"
    report = distribute(inst, payload, tmp_path, overwrite=True, resume=True)
    assert report.ok and report.results[1].status == "ok"
    assert sha256(tmp_path / "out" / "1" / "model.bin") == sha256(payload)


def test_not_enough_space_fails_before_writing(double_instance, tmp_path, payload):
    inst = double_instance(2, "kary:2")
    report = distribute(inst, payload, tmp_path, space_margin=1 << 60)
    assert {r.stage for r in report.results.values()} == {"space"}
    assert "free but needs" in report.results[0].reason
    assert not any((tmp_path / "out" / str(r) / "model.bin").exists() for r in range(2))


def test_down_ranks_are_named_and_resume_finishes_them(double_instance, tmp_path, payload):
    inst = double_instance(4, "kary:2")
    inst.kill(1)  # rank 3 sits below rank 1
    report = distribute(inst, payload, tmp_path)
    assert not report.ok
    assert {r: x.status for r, x in report.results.items()} == {
        0: "ok", 1: "down", 2: "ok", 3: "down"}
    assert report.results[1].reason == "broker lost"
    assert report.results[3].reason == "cut off below rank 1 (node1), which is lost"
    assert report.state_file and Path(report.state_file).exists()
    revive(inst, 1)
    resumed = distribute(inst, payload, tmp_path, resume=True)
    assert resumed.ok
    assert sorted(resumed.targets) == [1, 3]
    assert {r: x.status for r, x in resumed.results.items()} == {
        0: "earlier", 1: "ok", 2: "earlier", 3: "ok"}
    assert not Path(report.state_file).exists()
    for rank in range(4):
        assert sha256(tmp_path / "out" / str(rank) / "model.bin") == sha256(payload)


def test_a_broker_killed_mid_run_leaves_nothing_that_looks_complete(double_instance, tmp_path,
                                                                    payload, monkeypatch):
    monkeypatch.setenv("FLUX_DOUBLE_EXTRACT_DELAY", "0.3")
    inst = double_instance(4, "kary:2")
    progress = threading.Event()

    class KillOnProgress(Listener):
        def progress(self, rank, done, total):
            if rank == 1 and 0 < done < total and not progress.is_set():
                progress.set()
                inst.kill(1)

    opts = options(payload, tmp_path, chunksize=256 << 10)
    client = FluxClient([inst.flux], env={**inst.env, "FLUX_DOUBLE_EXTRACT_DELAY": "0.3"})
    report = Distribution(opts, client, listener=KillOnProgress()).run()
    assert progress.is_set()
    assert report.results[1].status == "lost"
    assert "No route to host" in report.results[1].reason
    assert report.results[3].status == "lost"
    assert "cut off when rank 1 (node1)" in report.results[3].reason
    assert report.results[0].ok and report.results[2].ok
    # rank 1's half-written file never reached its final name
    assert not (tmp_path / "out" / "1" / "model.bin").exists()
    assert inst.kvs() == {}
    revive(inst, 1)
    resumed = Distribution(options(payload, tmp_path, resume=True), FluxClient(
        [inst.flux], env=inst.env)).run()
    assert resumed.ok and sorted(resumed.targets) == [1, 3]
    assert sha256(tmp_path / "out" / "1" / "model.bin") == sha256(payload)
    assert not list((tmp_path / "out" / "1").glob(".fluxinfra-*.partial"))


def test_a_rank_that_stops_making_progress_is_given_up(double_instance, tmp_path, payload):
    inst = double_instance(3, "kary:2")
    client = FluxClient([inst.flux], env={**inst.env, "FLUX_DOUBLE_HANG_RANKS": "2"})
    started = time.monotonic()
    report = Distribution(options(payload, tmp_path, stall_timeout=8.0), client).run()
    assert time.monotonic() - started < 60
    assert report.results[0].ok and report.results[1].ok
    assert report.results[2].status in ("stalled", "failed")
    assert not (tmp_path / "out" / "2" / "model.bin").exists()
    assert not list((tmp_path / "out" / "2").glob(".fluxinfra-*.partial"))
    assert inst.kvs() == {}


def test_resume_refuses_when_nothing_is_unfinished(double_instance, tmp_path, payload):
    inst = double_instance(2, "kary:2")
    with pytest.raises(DistributeError, match=r"--resume: no unfinished distribution of .* run "
                                              r"without --resume"):
        distribute(inst, payload, tmp_path, resume=True)


def test_resume_refuses_a_changed_source(double_instance, tmp_path, payload):
    inst = double_instance(2, "kary:2")
    inst.kill(1)
    assert not distribute(inst, payload, tmp_path).ok
    payload.write_bytes(b"new content")
    with pytest.raises(DistributeError, match="changed since the interrupted run"):
        distribute(inst, payload, tmp_path, resume=True)


def test_ranks_outside_the_instance_are_refused(double_instance, tmp_path, payload):
    inst = double_instance(2, "kary:2")
    with pytest.raises(DistributeError, match=r"--ranks '0-5': rank 2 is outside this instance "
                                              r"\(ranks 0-1\)"):
        distribute(inst, payload, tmp_path, ranks="0-5")


def test_an_unreachable_instance_is_one_line_naming_the_fix(tmp_path, payload):
    env = {**os.environ, "FLUX_URI": "local:///nonexistent/local"}
    opts = options(payload, tmp_path)
    fake = tmp_path / "bin" / "flux"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'flux: flux_open: No such file or directory' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(DistributeError) as info:
        Distribution(opts, FluxClient([str(fake)], env=env)).run()
    message = str(info.value)
    assert "\n" not in message
    assert "flux_open: No such file or directory" in message and "FLUX_URI" in message
