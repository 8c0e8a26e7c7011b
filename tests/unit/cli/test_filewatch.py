"""The jobspec file watch (``fluxinfra.cli.filewatch``): a ``fluxinfra query`` session skips the
per-command ``stat`` of a remembered jobspec only while inotify reports nothing on its path,
and every way of changing what the path names is reported.

These use the real kernel's inotify on the test's temporary directory; they skip (saying why)
where it is not available or the directory is on a file system the watch does not trust.
"""

from __future__ import annotations

import io
import json
import os
import time

import pytest

from fluxinfra.cli import filewatch
from fluxinfra.cli.query import build_parser, open_session
from fluxinfra.matcher.recipe import recipe_to_grug

RECIPE = {"cluster": "c", "racks": 1, "nodes_per_rack": 4, "sockets": 1, "cores_per_socket": 2}


def jobspec(nodes: int) -> str:
    """A whole-node request of ``nodes`` nodes, padded so every count has the same length
    (a rewrite that keeps the file's size)."""
    spec = {"version": 1, "resources": [{"type": "node", "count": nodes, "exclusive": True,
                                         "with": [{"type": "slot", "count": 1, "label": "t",
                                                   "with": [{"type": "core", "count": 1}]}]}],
            "attributes": {"system": {"duration": 60}},
            "tasks": [{"command": ["app"], "slot": "t", "count": {"per_slot": 1}}]}
    return json.dumps(spec)


def settle(path, when: float | None = None) -> float:
    """Date ``path`` an hour back (or to ``when``): a file the session may remember."""
    when = time.time() - 3600 if when is None else when
    os.utime(path, (when, when))
    return when


@pytest.fixture
def watchable(tmp_path):
    probe = tmp_path / "probe"
    probe.write_text("x")
    if not filewatch.FileWatch().add(str(probe)):
        pytest.skip(f"no inotify watch possible on {tmp_path} (not Linux, no inotify, or not "
                    "a local file system): the session stats every time there")
    return tmp_path


class CountingStat:
    """os.stat, counting the calls on one path."""

    def __init__(self, path) -> None:
        self.path, self.calls, self.real = str(path), 0, os.stat

    def __call__(self, path, *args, **kwargs):
        if str(path) == self.path:
            self.calls += 1
        return self.real(path, *args, **kwargs)


def session(tmp_path):
    grug = tmp_path / "m.graphml"
    grug.write_text(recipe_to_grug(RECIPE))
    opts = build_parser().parse_args(["-L", str(grug), "-f", "grug", "-P", "first"])
    out = io.StringIO()
    return open_session(opts, out, err=io.StringIO(), stdout=io.StringIO()), out


def allocated(out) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line.startswith("INFO: JOBID=")]


def test_a_watched_jobspec_is_not_stat_ed_again_while_nothing_changes(watchable, monkeypatch):
    s, out = session(watchable)
    spec = watchable / "one.json"
    spec.write_text(jobspec(1))
    settle(spec)
    counting = CountingStat(spec)
    monkeypatch.setattr(os, "stat", counting)
    s.run([f"match allocate {spec}\n"] * 4)
    assert len(allocated(out)) == 4
    assert counting.calls == 1


def test_a_jobspec_behind_a_symbolic_link_is_stat_ed_every_time(watchable, monkeypatch):
    s, out = session(watchable)
    spec = watchable / "one.json"
    spec.write_text(jobspec(1))
    settle(spec)
    link = watchable / "link.json"
    link.symlink_to(spec)  # could be re-pointed without a report on link's own path
    counting = CountingStat(link)
    monkeypatch.setattr(os, "stat", counting)
    s.run([f"match allocate {link}\n"] * 3)
    assert len(allocated(out)) == 3
    assert counting.calls == 3


def replace_keeping_size_and_time(path, text: str, when: float) -> None:
    """A new file (new inode) at ``path`` with ``text`` and the old file's times."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    settle(fresh, when)
    os.replace(fresh, path)


@pytest.mark.parametrize("how", ["rewrite", "restored-time", "replace", "directory"])
def test_every_change_to_what_the_path_names_is_seen(watchable, how):
    """Three nodes of four are free after the first job; a rewritten request for four must
    find them busy. Each change keeps the file's size; only the watch and the (size, mtime,
    inode) check together see each one; a rewrite that sets the time back only the watch."""
    d = watchable / "jobs"
    d.mkdir()
    spec = d / "job.json"
    spec.write_text(jobspec(1))
    when = settle(spec)
    s, out = session(watchable)
    s.run([f"match allocate {spec}\n"] * 2)  # remembered, watched
    assert len(allocated(out)) == 2
    if how == "rewrite":  # same inode, new time
        spec.write_text(jobspec(4))
        settle(spec, when - 60)
    elif how == "restored-time":  # same inode, size and time (cp -p, rsync -t): only the watch
        spec.write_text(jobspec(4))
        settle(spec, when)
    elif how == "replace":  # a new inode at the path, same size and times
        replace_keeping_size_and_time(spec, jobspec(4), when)
    else:  # the directory above replaced by another holding a file of that name
        os.rename(d, watchable / "jobs.old")
        d.mkdir()
        spec.write_text(jobspec(4))
        settle(spec, when)
    s.run([f"match allocate {spec}\n"])
    assert out.getvalue().endswith("INFO: No matching resources found\nINFO: JOBID=3\n"
                                   "INFO: =============================\n"), how


def test_a_file_recreated_after_a_change_is_watched_again(watchable):
    """A deleted file takes its watch with it: the next add must watch the new one."""
    w = filewatch.FileWatch()
    p = watchable / "a.json"
    p.write_text("1")
    assert w.add(str(p))
    g = w.generation()
    p.unlink()
    p.write_text("2")
    assert w.generation() != g
    assert w.add(str(p))
    g = w.generation()
    with open(p, "a") as fh:  # only the new inode's own watch reports a write
        fh.write("3")
    assert w.generation() != g
    w.close()


def test_without_inotify_nothing_is_watched(tmp_path, monkeypatch):
    monkeypatch.setattr(filewatch, "_LIBC", [None])
    w = filewatch.FileWatch()
    p = tmp_path / "a.json"
    p.write_text("1")
    assert not w.add(str(p))
    assert w.generation() == w.generation()


def test_a_file_system_inotify_cannot_vouch_for_is_not_watched(watchable, monkeypatch):
    monkeypatch.setattr(filewatch, "LOCAL_FILE_SYSTEMS", frozenset())  # as on NFS or Lustre
    p = watchable / "a.json"
    p.write_text("1")
    assert not filewatch.FileWatch().add(str(p))


class CountingAsks:
    """The session's real watch, counting how often it is asked for its generation."""

    def __init__(self, watch) -> None:
        self.watch, self.asks = watch, 0

    def add(self, path: str) -> bool:
        return self.watch.add(path)

    def generation(self) -> int:
        self.asks += 1
        return self.watch.generation()


def test_the_watch_is_asked_once_per_read_of_the_commands(watchable):
    """From a file or pipe the commands are read a chunk at a time and the watch is asked
    once per read (a system call each), not once per command; a list of lines asks per
    command."""
    spec = watchable / "one.json"
    spec.write_text(jobspec(1))
    settle(spec)
    s, out = session(watchable)
    s._watch = counting = CountingAsks(s._watch)
    commands = watchable / "cmds.in"
    lines = [f"match allocate {spec}\n", "cancel 1\r\n"] * 500  # (CRLF: universal newlines)
    commands.write_text("".join(lines) + "info 1001")  # (the last line without its newline)
    with open(commands, encoding="utf-8") as fh:
        s.run(fh)
    assert len(allocated(out)) == 500
    reads = -(-commands.stat().st_size // (1 << 16)) + 1  # (the last read finds the end)
    assert 1 <= counting.asks <= reads + 2, counting.asks  # (+ the first read of the file)
    assert s._gen is None
    s2, out2 = session(watchable)
    s2._watch = counting = CountingAsks(s2._watch)
    s2.run(lines[:20])
    assert len(allocated(out2)) == 10 and counting.asks >= 10


def test_a_driver_s_edit_before_its_next_command_is_seen(watchable):
    """The order a program driving ``fluxinfra query`` through pipes sets up: send a command,
    read its answer, edit the jobspec (same size and times: only the watch can tell), send
    the next command. The real program, through its own stdin and stdout."""
    import subprocess
    import sys

    spec = watchable / "job.json"
    spec.write_text(jobspec(1))
    when = settle(spec)
    grug = watchable / "m.graphml"
    grug.write_text(recipe_to_grug(RECIPE))
    proc = subprocess.Popen([sys.executable, "-m", "fluxinfra", "query", "-L", str(grug), "-f",
                             "grug", "-P", "first"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def answer(command: str) -> list[str]:
        proc.stdin.write(command)
        proc.stdin.flush()
        got = []
        while not got or got[-1] != "INFO: =============================" or \
                not any(line.startswith(("INFO: JOBID=", "INFO: SCHEDULED AT=")) for line in got):
            line = proc.stdout.readline()
            assert line, f"the program ended: {got}"
            got.append(line.rstrip("\n"))
        return got

    try:
        for jobid in (1, 2):
            assert f"INFO: JOBID={jobid}" in answer(f"match allocate {spec}\n")
        replace_keeping_size_and_time(spec, jobspec(4), when)  # four nodes: two are held
        assert "INFO: No matching resources found" in answer(f"match allocate {spec}\n")
        spec.write_text(jobspec(1))  # the same inode, size and (set back) time as read
        settle(spec, when)
        got = answer(f"match allocate {spec}\n")
        assert "INFO: JOBID=4" in got and "INFO: RESOURCES=ALLOCATED" in got
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
