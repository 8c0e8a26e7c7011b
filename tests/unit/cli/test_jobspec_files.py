"""Jobspec files in a ``fluxinfra query`` session: a file's text is kept while its ``stat``
identity (size, modification and change times, inode, device) is the one it had when read,
compared once per read of the command input (else at every command), and every way of changing
what the path names is seen by the next command read after it.

These use the real file system of the test's temporary directory. A file is remembered only
once its times are ``_SETTLED_NS`` old; the tests shorten that wait to 50 ms and sleep past it
(the one test of the real program waits the real 2 s).
"""

from __future__ import annotations

import io
import json
import os
import time

import pytest

from fluxinfra.cli import query_session
from fluxinfra.cli.query import build_parser, open_session
from fluxinfra.matcher.recipe import recipe_to_grug

RECIPE = {"cluster": "c", "racks": 1, "nodes_per_rack": 4, "sockets": 1, "cores_per_socket": 2}
#: the settling time the tests give a session (ns), far above any file system's time tick
SETTLE_NS = 50_000_000


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
    """Date ``path``'s times an hour back (or to ``when``): a user's jobspec file."""
    when = time.time() - 3600 if when is None else when
    os.utime(path, (when, when))
    return when


def ripen() -> None:
    """Wait until every file changed so far is settled (its change time, which ``utime``
    sets to now, is SETTLE_NS old)."""
    time.sleep(2 * SETTLE_NS / 1e9)


@pytest.fixture
def short_settling(monkeypatch):
    monkeypatch.setattr(query_session, "_SETTLED_NS", SETTLE_NS)


class Counting:
    """``os.stat`` or ``os.open``, counting the calls on one path."""

    def __init__(self, name: str, path) -> None:
        self.path, self.calls, self.real = str(path), 0, getattr(os, name)

    def __call__(self, path, *args, **kwargs):
        if str(path) == self.path:
            self.calls += 1
        return self.real(path, *args, **kwargs)


def counting(monkeypatch, path) -> tuple[Counting, Counting]:
    """(stats, opens) of ``path`` from now on."""
    stats, opens = Counting("stat", path), Counting("open", path)
    monkeypatch.setattr(os, "stat", stats)
    monkeypatch.setattr(os, "open", opens)
    return stats, opens


def session(tmp_path):
    grug = tmp_path / "m.graphml"
    grug.write_text(recipe_to_grug(RECIPE))
    opts = build_parser().parse_args(["-L", str(grug), "-f", "grug", "-P", "first"])
    out = io.StringIO()
    return open_session(opts, out, err=io.StringIO(), stdout=io.StringIO()), out


def allocated(out) -> list[str]:
    return [line for line in out.getvalue().splitlines() if line.startswith("INFO: JOBID=")]


def test_a_settled_jobspec_is_read_once_and_compared_at_each_listed_command(
        tmp_path, short_settling, monkeypatch):
    s, out = session(tmp_path)
    spec = tmp_path / "one.json"
    spec.write_text(jobspec(1))
    settle(spec)
    ripen()
    stats, opens = counting(monkeypatch, spec)
    s.run([f"match allocate {spec}\n"] * 4)
    assert len(allocated(out)) == 4
    assert (stats.calls, opens.calls) == (4, 1)


def test_a_jobspec_changed_within_the_settling_time_is_read_at_every_command(
        tmp_path, monkeypatch):
    """Times tick coarsely: a file rewritten in the tick it was read could keep them, so a
    file changed in the last _SETTLED_NS (2 s) is read again at each command."""
    s, out = session(tmp_path)
    spec = tmp_path / "one.json"
    spec.write_text(jobspec(1))
    settle(spec)  # (an old modification time; its change time is now)
    stats, opens = counting(monkeypatch, spec)
    s.run([f"match allocate {spec}\n"] * 3)
    assert len(allocated(out)) == 3
    assert opens.calls == 3


def replace_keeping_size_and_time(path, text: str, when: float) -> None:
    """A new file (new inode) at ``path`` with ``text`` and the old file's times."""
    fresh = path.with_name(path.name + ".new")
    fresh.write_text(text)
    settle(fresh, when)
    os.replace(fresh, path)


@pytest.mark.parametrize("how", ["rewrite", "restored-time", "replace", "directory",
                                 "symlink"])
def test_every_change_to_what_the_path_names_is_seen(tmp_path, short_settling, monkeypatch,
                                                     how):
    """Three nodes of four are free after the first job; a rewritten request for four must
    find them busy. Each change keeps the file's size; a rewrite that sets the modification
    time back (cp -p, rsync -t) is seen by the change time alone."""
    d = tmp_path / "jobs"
    d.mkdir()
    spec = d / "job.json"
    spec.write_text(jobspec(1))
    when = settle(spec)
    named = spec
    if how == "symlink":  # a link re-pointed to another file of the same size and times
        other = d / "other.json"
        other.write_text(jobspec(4))
        settle(other, when)
        named = tmp_path / "link.json"
        named.symlink_to(spec)
    ripen()
    s, out = session(tmp_path)
    _, opens = counting(monkeypatch, named)
    s.run([f"match allocate {named}\n"] * 2)
    assert len(allocated(out)) == 2
    assert opens.calls == 1, "the settled file is remembered"
    if how == "rewrite":  # same inode, new time
        spec.write_text(jobspec(4))
        settle(spec, when - 60)
    elif how == "restored-time":  # same inode, size and modification time
        spec.write_text(jobspec(4))
        settle(spec, when)
    elif how == "replace":  # a new inode at the path, same size and times
        replace_keeping_size_and_time(spec, jobspec(4), when)
    elif how == "directory":  # the directory above replaced by another holding that name
        os.rename(d, tmp_path / "jobs.old")
        d.mkdir()
        spec.write_text(jobspec(4))
        settle(spec, when)
    else:
        named.unlink()
        named.symlink_to(other)
    s.run([f"match allocate {named}\n"])
    assert out.getvalue().endswith("INFO: No matching resources found\nINFO: JOBID=3\n"
                                   "INFO: =============================\n"), how


def test_a_remembered_jobspec_is_compared_once_per_read_of_the_commands(
        tmp_path, short_settling, monkeypatch):
    """From a file or pipe the commands are read a chunk at a time and a remembered file's
    ``stat`` is compared once per read (a system call each), not once per command."""
    spec = tmp_path / "one.json"
    spec.write_text(jobspec(1))
    settle(spec)
    ripen()
    s, out = session(tmp_path)
    commands = tmp_path / "cmds.in"
    lines = [f"match allocate {spec}\n", "cancel 1\r\n"] * 500  # (CRLF: universal newlines)
    commands.write_text("".join(lines) + "info 1001")  # (the last line without its newline)
    stats, opens = counting(monkeypatch, spec)
    with open(commands, encoding="utf-8") as fh:
        s.run(fh)
    assert len(allocated(out)) == 500
    reads = -(-commands.stat().st_size // (1 << 16)) + 1  # (the last read finds the end)
    assert 1 <= stats.calls <= reads, stats.calls
    assert opens.calls == 1


def test_a_driver_s_edit_before_its_next_command_is_seen(tmp_path):
    """The order a program driving ``fluxinfra query`` through pipes sets up: send a command,
    read its answer, edit the jobspec (same size and times), send the next command. The real
    program, through its own stdin and stdout, with its real settling time."""
    import subprocess
    import sys

    spec = tmp_path / "job.json"
    spec.write_text(jobspec(1))
    when = settle(spec)
    settled_at = time.time() + query_session._SETTLED_NS / 1e9 + 0.2
    grug = tmp_path / "m.graphml"
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
        time.sleep(max(0.0, settled_at - time.time()))  # (the file is remembered when read)
        for jobid in (1, 2):
            assert f"INFO: JOBID={jobid}" in answer(f"match allocate {spec}\n")
        replace_keeping_size_and_time(spec, jobspec(4), when)  # four nodes: two are held
        assert "INFO: No matching resources found" in answer(f"match allocate {spec}\n")
        spec.write_text(jobspec(1))  # the same inode and size, the modification time set back
        settle(spec, when)
        got = answer(f"match allocate {spec}\n")
        assert "INFO: JOBID=4" in got and "INFO: RESOURCES=ALLOCATED" in got
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
