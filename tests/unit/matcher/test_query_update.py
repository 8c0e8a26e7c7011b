"""``fluxinfra query``'s ``update`` command and its JSON match formats, against what Fluxion's
resource-query prints (expected texts below were taken from an -O2 resource-query run on the
same graph, jobspecs and commands; the last test replays them through the real binary when
it is on this machine).

The graph is this module's own: ``cluster0`` with two nodes (ranks 0 and 1), each with two
sockets holding two cores, one GPU and a 4 GB memory pool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from matcher_testlib import TESTDATA

from fluxinfra.cli import main


def _live():
    """tests/conformance/live.py (with its directory on sys.path while it and replay.py load)."""
    here = str(Path(__file__).resolve().parents[2] / "conformance")
    sys.path.insert(0, here)
    try:
        import live
    finally:
        sys.path.remove(here)
    return live


#: a real resource-query to compare with, found as the live differential finds it
#: ($FLUXINFRA_RESOURCE_QUERY, else on PATH; CI has none: those tests are skipped)
RESOURCE_QUERY = _live().find_resource_query()


def jobspec(resources: str) -> str:
    """A jobspec (600 s, one task per slot ``task``) around a ``resources`` YAML list."""
    return ("version: 1\nresources:\n" + resources + "attributes:\n  system:\n"
            "    duration: 600\ntasks:\n  - command: [app]\n    slot: task\n"
            "    count:\n      per_slot: 1\n")


#: one core of a socket of a node
CORE = jobspec("  - type: node\n    count: 1\n    with:\n      - type: socket\n"
               "        count: 1\n        with:\n          - type: slot\n"
               "            count: 1\n            label: task\n            with:\n"
               "              - type: core\n                count: 1\n")
#: a whole socket (2 cores, the GPU, 4 GB) of a node
SOCKET = jobspec("  - type: node\n    count: 1\n    with:\n      - type: slot\n"
                 "        count: 1\n        label: task\n        with:\n"
                 "          - type: socket\n            count: 1\n            with:\n"
                 "              - type: core\n                count: 2\n"
                 "              - type: gpu\n                count: 1\n"
                 "              - type: memory\n                count: 4\n")
#: one core of a node (no socket level)
NODE_CORE = jobspec("  - type: node\n    count: 1\n    with:\n      - type: slot\n"
                    "        count: 1\n        label: task\n        with:\n"
                    "          - type: core\n            count: 1\n")
#: resource-query -F jgf_shorthand, first match of SOCKET: the socket stands for its cores,
#: GPU and memory (left out), so the writer says so
SHORTHAND_SOCKET0 = (
    '{"graph": {"nodes": [{"id": "2", "metadata": {"type": "socket", "id": 0, "rank": 0, '
    '"exclusive": true, "paths": {"containment": "/cluster0/node0/socket0"}}}, {"id": "1", '
    '"metadata": {"type": "node", "id": 0, "rank": 0, "paths": {"containment": '
    '"/cluster0/node0"}}}, {"id": "0", "metadata": {"type": "cluster", "id": 0, "rank": -1, '
    '"paths": {"containment": "/cluster0"}}}], "edges": [{"source": "1", "target": "2"}, '
    '{"source": "0", "target": "1"}]}, "writer": "fluxion:jgf_shorthand"}\n')
#: the next match (one core, nothing left out) still carries the writer URI in resource-query
SHORTHAND_CORE2 = (
    '{"graph": {"nodes": [{"id": "8", "metadata": {"type": "core", "id": 2, "rank": 0, '
    '"exclusive": true, "paths": {"containment": "/cluster0/node0/socket1/core2"}}}, {"id": '
    '"7", "metadata": {"type": "socket", "id": 1, "rank": 0, "paths": {"containment": '
    '"/cluster0/node0/socket1"}}}, {"id": "1", "metadata": {"type": "node", "id": 0, "rank": 0, '
    '"paths": {"containment": "/cluster0/node0"}}}, {"id": "0", "metadata": {"type": '
    '"cluster", "id": 0, "rank": -1, "paths": {"containment": "/cluster0"}}}], "edges": '
    '[{"source": "7", "target": "8"}, {"source": "1", "target": "7"}, {"source": "0", '
    '"target": "1"}]}, "writer": "fluxion:jgf_shorthand"}\n')
BAR = "INFO: =============================\n"
SOCKET0_SIMPLE = ("      ------------core0[1:x]\n      ------------core1[1:x]\n"
                  "      ------------gpu0[1:x]\n      ------------memory0[4:x]\n"
                  "      ---------socket0[1:x]\n      ------node0[1:s]\n"
                  "      ---cluster0[1:s]\n")


def small_jgf() -> dict:
    nodes: list[dict] = []
    edges: list[dict] = []

    def add(vtype: str, vid: int, parent: int | None, prefix: str, rank: int = -1,
            size: int = 1, unit: str = "") -> tuple[int, str]:
        uid = len(nodes)
        path = f"{prefix}/{vtype}{vid}"
        nodes.append({"id": str(uid), "metadata": {
            "type": vtype, "basename": vtype, "name": f"{vtype}{vid}", "id": vid,
            "uniq_id": uid, "rank": rank, "exclusive": False, "unit": unit, "size": size,
            "paths": {"containment": path}}})
        if parent is not None:
            edges.append({"source": str(parent), "target": str(uid),
                          "metadata": {"subsystem": "containment"}})
        return uid, path

    root, rpath = add("cluster", 0, None, "")
    for n in range(2):
        node, npath = add("node", n, root, rpath, rank=n)
        for s in range(2):
            sock, spath = add("socket", s, node, npath, rank=n)
            for c in range(2):
                add("core", 2 * s + c, sock, spath, rank=n)
            add("gpu", s, sock, spath, rank=n)
            add("memory", s, sock, spath, rank=n, size=4, unit="GB")
    return {"graph": {"nodes": nodes, "edges": edges}}


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    (tmp_path / "small.json").write_text(json.dumps(small_jgf()))
    (tmp_path / "core.yaml").write_text(CORE)
    (tmp_path / "sock.yaml").write_text(SOCKET)
    return tmp_path


def query(work: Path, commands: str, fmt: str = "simple", graph: str = "small.json",
          load: str = "jgf", capsys=None) -> tuple[int, str, str]:
    """Run ``fluxinfra query`` in ``work`` (file names in commands are relative to it)."""
    (work / "cmds.in").write_text(commands)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        rc = main(["query", "-L", graph, "-f", load, "-P", "low", "-F", fmt, "-t", "out.txt",
                   "--commands", "cmds.in"])
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err if capsys is not None else ""
    return rc, (work / "out.txt").read_text(), err


def split_results(out: str, work: Path, prefix: str) -> list[str]:
    """Write each emitted R/JGF line of ``out`` to its own file, like t3022's ``split``."""
    names = []
    for i, line in enumerate(x for x in out.splitlines() if not x.startswith("INFO")):
        name = f"{prefix}{i + 1}.json"
        (work / name).write_text(line + "\n")
        names.append(name)
    return names


MATCHES = ("match allocate sock.yaml\nmatch allocate core.yaml\n"
           "match allocate_orelse_reserve sock.yaml\nmatch allocate_orelse_reserve sock.yaml\n"
           "match allocate_orelse_reserve sock.yaml\n")
# -- update replays the match output --------------------------------------------------------


@pytest.mark.parametrize(("fmt", "reader"), [("jgf", "jgf"), ("rv1", "jgf"),
                                             ("jgf_shorthand", "jgf_shorthand"),
                                             ("rv1_shorthand", "jgf_shorthand")])
def test_update_of_each_match_prints_what_the_match_printed(work, fmt, reader) -> None:
    """resource-query's t3022 idea: the R of every match, re-registered by ``update`` in a
    fresh session under the same job ids and times, prints the same text."""
    _, matched, _ = query(work, MATCHES + "quit\n", fmt)
    files = split_results(matched, work, "r")
    if fmt == "jgf_shorthand":
        assert matched.startswith(SHORTHAND_SOCKET0 + BAR + "INFO: JOBID=1\n")
    if fmt in ("jgf", "jgf_shorthand"):  # an R file for update jgf is a JGF, not an Rv1
        doc = json.loads((work / files[0]).read_text())
        assert set(doc) <= {"graph", "writer"}
    starts = [0, 0, 0, 0, 600]  # the fifth is reserved after the first socket job ends
    cmds = "".join(f"update {'allocate' if at == 0 else 'reserve'} {reader} {name} {i + 1} "
                   f"{at} 600\n" for i, (name, at) in enumerate(zip(files, starts, strict=True)))
    # an Rv1 file is read by the jgf readers through its scheduling key only in the
    # library; resource-query's jgf reader wants a JGF, so feed it the scheduling part
    if fmt.startswith("rv1"):
        for name in files:
            r = json.loads((work / name).read_text())
            (work / name).write_text(json.dumps(r["scheduling"]) + "\n")
    _, updated, _ = query(work, cmds + "quit\n", fmt)
    assert updated == matched
    assert "INFO: JOBID=5\nINFO: RESOURCES=RESERVED\nINFO: SCHEDULED AT=600\n" in updated


def test_rv1exec_update_of_each_match_prints_what_the_match_printed(work) -> None:
    r = {"version": 1, "execution": {"R_lite": [{"rank": "0-1", "children": {
        "core": "0-3", "gpu": "0-1"}}], "nodelist": ["node[0-1]"], "starttime": 0,
        "expiration": 0}}
    (work / "rv1.json").write_text(json.dumps(r))
    (work / "one.yaml").write_text(NODE_CORE)
    _, matched, _ = query(work, "match allocate one.yaml\n" * 3 + "quit\n", "rv1_nosched",
                          graph="rv1.json", load="rv1exec")
    assert matched.splitlines()[0] == (
        '{"version": 1, "execution": {"R_lite": [{"rank": "0", "children": {"core": "0"}}], '
        '"nodelist": ["node0"], "starttime": 0, "expiration": 600}}')
    files = split_results(matched, work, "x")
    cmds = "".join(f"update allocate rv1exec {n} {i + 1} 0 600\n" for i, n in enumerate(files))
    _, updated, _ = query(work, cmds + "quit\n", "rv1_nosched", graph="rv1.json",
                          load="rv1exec")
    assert updated == matched
    # resource-query prints each node an rv1exec R names as exclusive
    _, simple, _ = query(work, cmds + "quit\n", "simple", graph="rv1.json", load="rv1exec")
    assert simple.startswith("      ---------core0[1:x]\n      ------node0[1:x]\n"
                             "      ---cluster0[1:s]\n" + BAR + "INFO: JOBID=1\n")


# -- the session around update --------------------------------------------------------------
def test_update_errors_print_resource_query_lines_and_the_no_match_block(work, capsys) -> None:
    _, matched, _ = query(work, MATCHES + "quit\n", "jgf_shorthand")
    files = split_results(matched, work, "s")
    _, full, _ = query(work, MATCHES + "quit\n", "jgf")
    full_files = split_results(full, work, "f")
    cmds = (f"update allocate jgf_shorthand {files[0]} 1 0 600\n"
            f"update allocate jgf {full_files[1]} 2 0 600\n"
            f"update reserve jgf_shorthand {files[4]} 5 600 600\n"
            f"update allocate jgf {full_files[2]} 3 0 600\n"
            f"update allocate jgf_shorthand {full_files[0]} 6 0 600\n"  # busy socket0 cores
            f"update allocate jgf {full_files[0]} 7 0 600\n"
            f"update allocate jgf_shorthand {files[0]} 8 1200 600\n"
            f"update allocate jgf_shorthand {files[0]} 8 1200 600\n"
            f"update foo jgf {files[0]} 9 0 600\n"
            f"update allocate bar {files[0]} 9 0 600\n"
            "update allocate jgf missing.json 9 0 600\n"
            f"update allocate jgf {files[0]} 9 -1 600\n"
            f"update allocate jgf {files[0]} 9 0 0\n"
            f"update allocate jgf {files[0]} 9 0\n"
            "match allocate_orelse_reserve sock.yaml\nquit\n")
    rc, out, err = query(work, cmds, capsys=capsys)
    assert rc == 0  # as resource-query: refused commands are printed and the session goes on
    assert err.splitlines() == [
        "ERROR: update_vtx_plan: can't add span into core0.",
        "ERROR: update_vtx_plan: can't add span into core0.",
        "ERROR: existing Jobid ",
        "ERROR: unknown subcmd foo",
        "ERROR: unsupported reader bar",
        "ERROR: can't open missing.json",
        "ERROR: invalid time (-1, 600)",
        "ERROR: invalid time (0, 0)",
        "ERROR: malformed command"]
    assert out.startswith(SOCKET0_SIMPLE + BAR + "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED\n")
    assert (BAR + "INFO: No matching resources found\nINFO: JOBID=6\n" + BAR + BAR
            + "INFO: No matching resources found\nINFO: JOBID=7\n" + BAR) in out
    assert "INFO: JOBID=8\nINFO: RESOURCES=RESERVED\nINFO: SCHEDULED AT=1200\n" in out
    # the job counter goes on from the last update's id
    assert out.endswith("INFO: JOBID=9\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n"
                        + BAR)


def test_update_names_a_vertex_the_graph_lacks_and_a_file_without_graph(work, capsys) -> None:
    _, full, _ = query(work, "match allocate core.yaml\nquit\n", "jgf")
    doc = json.loads(full.splitlines()[0])
    doc["graph"]["nodes"][0]["metadata"]["paths"]["containment"] = "/cluster0/node0/x/core9"
    doc["graph"]["nodes"][0]["id"] = "99"
    (work / "bad.json").write_text(json.dumps(doc))
    (work / "r.json").write_text(json.dumps({"version": 1, "execution": {}}))
    rc, out, err = query(work, "update allocate jgf bad.json 1 0 600\n"
                               "update allocate jgf r.json 2 0 600\nquit\n", capsys=capsys)
    assert err.splitlines() == [
        "ERROR: exist: inconsistent input vertex: nonexistent path (/cluster0/node0/x/core9) 99.",
        "ERROR: fetch_jgf: JGF does not contain a required key (graph)."]
    assert out.count("INFO: No matching resources found\n") == 2


def test_update_parses_numbers_like_strtoll_and_refuses_windows_past_int64(work,
                                                                         capsys) -> None:
    _, full, _ = query(work, MATCHES + "quit\n", "jgf")
    f = split_results(full, work, "f")
    cmds = (f"update allocate jgf {f[0]} abc 0 600\n"  # job id 0, as strtoll reads it
            f"update allocate jgf {f[2]} 12x 5x 600\n"  # job 12 from 5
            f"update allocate jgf {f[3]} 20 0 -5\n"  # 2**64 - 5 seconds: refused
            f"update allocate jgf {f[3]} 21 0 9223372036854775807\n"
            "match allocate core.yaml\nquit\n")
    _, out, err = query(work, cmds, capsys=capsys)
    jobs = [line for line in out.splitlines() if line.startswith("INFO: JOBID")]
    assert jobs == ["INFO: JOBID=0", "INFO: JOBID=12", "INFO: JOBID=20", "INFO: JOBID=21",
                    "INFO: JOBID=22"]
    assert "INFO: RESOURCES=RESERVED\nINFO: SCHEDULED AT=5\n" in out
    assert "INFO: No matching resources found\nINFO: JOBID=20\n" in out
    assert err.count("\n") == 1 and "ends past the end of the graph's time" in err


def test_info_and_find_after_updates(work, capsys) -> None:
    """As in resource-query, an update (even ``reserve``) is booked as an allocation: find
    sees it as allocated now, not as reserved (and an empty rlite find is an error)."""
    _, matched, _ = query(work, "match allocate sock.yaml\nquit\n", "jgf_shorthand")
    name = split_results(matched, work, "s")[0]
    capsys.readouterr()
    cmds = (f"update reserve jgf_shorthand {name} 4 600 600\ninfo 4\ninfo 5\n"
            "find sched-future=reserved\nfind sched-now=allocated\nfind sched-now=free\nquit\n")
    (work / "cmds.in").write_text(cmds)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        main(["query", "-L", "small.json", "-f", "jgf", "-P", "low", "-F", "rlite", "-t",
              "out.txt", "--commands", "cmds.in"])
    finally:
        os.chdir(cwd)
    out, (stdout, err) = (work / "out.txt").read_text(), capsys.readouterr()
    socket0 = '[{"rank": "0", "children": {"core": "0-1", "gpu": "0"}}]\n'
    assert out == (socket0 + BAR + "INFO: JOBID=4\nINFO: RESOURCES=RESERVED\n"
                   "INFO: SCHEDULED AT=600\n" + BAR
                   + socket0 + BAR + 'INFO: EXPRESSION="sched-now=allocated"\n' + BAR
                   + '[{"rank": "1", "children": {"core": "0-3", "gpu": "0-1"}}, {"rank": "0", '
                   '"children": {"core": "2-3", "gpu": "1"}}]\n' + BAR
                   + 'INFO: EXPRESSION="sched-now=free"\n' + BAR)
    assert stdout.startswith(f"INFO: 4, RESERVED, 600, {name}, ")
    assert err == ("info: ERROR: nonexistent job 5\n"
                   "find: ERROR: find writer emit: Invalid argument\n")


def test_find_with_rlite_and_nothing_found_is_resource_querys_writer_error(work, capsys):
    _, out, err = query(work, "find sched-now=allocated\nquit\n", "rlite", capsys=capsys)
    assert out == "" and err == "find: ERROR: find writer emit: Invalid argument\n"


# -- jgf_shorthand as match format ------------------------------------------------------------
def test_jgf_shorthand_match_format_and_its_sticky_writer_uri(work) -> None:
    _, out, _ = query(work, "match allocate sock.yaml\nmatch allocate core.yaml\nquit\n",
                      "jgf_shorthand")
    assert out.splitlines(keepends=True)[0] == SHORTHAND_SOCKET0
    assert out.splitlines(keepends=True)[6] == SHORTHAND_CORE2
    # alone, the core job leaves nothing out: no writer URI (a plain JGF)
    _, alone, _ = query(work, "match allocate core.yaml\nquit\n", "jgf_shorthand")
    _, plain, _ = query(work, "match allocate core.yaml\nquit\n", "jgf")
    assert alone == plain and '"writer"' not in alone
    assert alone.startswith('{"graph": {"nodes": [{"id": "3", "metadata": {"type": "core", '
                            '"id": 0, "rank": 0, "exclusive": true, "paths": {"containment": '
                            '"/cluster0/node0/socket0/core0"}}}, ')


def test_shorthand_loads_as_a_graph_with_f_jgf_shorthand(work) -> None:
    """``-f jgf_shorthand`` loads like ``-f jgf`` (t3041)."""
    _, a, _ = query(work, "match allocate sock.yaml\nquit\n", "rv1_nosched", load="jgf_shorthand")
    _, b, _ = query(work, "match allocate sock.yaml\nquit\n", "rv1_nosched")
    assert a == b and a.startswith('{"version": 1, "execution": {"R_lite": [{"rank": "0", '
                                   '"children": {"core": "0-1", "gpu": "0"}}], "nodelist": '
                                   '["node0"], "starttime": 0, "expiration": 600}}\n')


# -- against the real binary ------------------------------------------------------------------
@pytest.mark.skipif(RESOURCE_QUERY is None,
                    reason="no real resource-query to compare with (set "
                           "FLUXINFRA_RESOURCE_QUERY=/path/to/resource-query or put it on PATH)")
@pytest.mark.parametrize("fmt", ["simple", "jgf", "jgf_shorthand", "rv1", "rv1_shorthand",
                                 "rlite", "rv1_nosched", "pretty_simple"])
def test_same_bytes_as_resource_query(work, fmt) -> None:
    _, matched, _ = query(work, MATCHES + "quit\n", "jgf_shorthand")
    short = split_results(matched, work, "s")
    _, full, _ = query(work, MATCHES + "quit\n", "jgf")
    whole = split_results(full, work, "f")
    cmds = (MATCHES + f"cancel 1\ncancel 3\nupdate allocate jgf_shorthand {short[0]} 11 0 600\n"
            f"update allocate jgf {whole[2]} 12 0 600\n"
            f"update allocate jgf_shorthand {whole[0]} 13 0 600\n"
            f"update reserve jgf {whole[3]} 14 3000 600\n"
            "find sched-now=allocated\nfind sched-future=reserved\nquit\n")
    (work / "cmp.in").write_text(cmds)
    with open(work / "cmp.in") as stdin:
        real = subprocess.run([RESOURCE_QUERY, "-L", "small.json", "-f", "jgf", "-P",
                               "low", "-F", fmt, "-t", "rq.txt"], stdin=stdin, cwd=work,
                              capture_output=True, text=True, timeout=60)
    with open(work / "cmp.in") as stdin:
        ours = subprocess.run([sys.executable, "-m", "fluxinfra", "query", "-L", "small.json",
                               "-f", "jgf", "-P", "low", "-F", fmt, "-t", "fi.txt"],
                              stdin=stdin, cwd=work, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[3])})
    assert (work / "fi.txt").read_text() == (work / "rq.txt").read_text()
    # stderr: resource-query's detail lines, without its generic "traverser run ()" line
    assert ours.stderr.splitlines() == [
        line for line in real.stderr.splitlines() if "traverser run () returned" not in line]


# -- an R from another subsystem's traversal (resource-query's t3023) ---------------------------
POWER = TESTDATA / "data" / "resource"


@pytest.mark.skipif(not POWER.exists(), reason=f"Fluxion test data not at {POWER}")
def test_an_R_of_the_containment_traversal_updates_a_power_aware_session(work, capsys) -> None:
    """The R names no vertex of the power subsystem's root: resource-query holds its exclusive
    vertices (nodes 36-71 here) without a traversal and prints no vertex; power-aware
    matches then avoid those nodes."""
    graph = str(POWER / "grugs" / "power.graphml")
    job_ca = str(POWER / "jobspecs" / "update" / "test006.yaml")
    job_pa = str(POWER / "jobspecs" / "update" / "test005.yaml")
    (work / "cmds.in").write_text(f"match allocate {job_ca}\nquit\n")
    main(["query", "-L", graph, "-S", "CA", "-P", "high", "-F", "jgf", "-t",
          str(work / "ca.txt"), "--commands", str(work / "cmds.in")])
    (work / "r1.json").write_text((work / "ca.txt").read_text().splitlines()[0])
    (work / "cmds.in").write_text(f"update allocate jgf {work / 'r1.json'} 1 0 3600\n"
                                  f"match allocate {job_pa}\nmatch allocate {job_pa}\nquit\n")
    main(["query", "-L", graph, "-S", "PA", "-P", "high", "-t", str(work / "pa.txt"),
          "--commands", str(work / "cmds.in")])
    out = (work / "pa.txt").read_text()
    assert out.startswith(BAR + "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED\n"
                          "INFO: SCHEDULED AT=Now\n" + BAR + "      ------------power0[10:x]\n"
                          "      ------------power1[10:x]\n      ---------node0[1:x]\n")
    job2 = out.split("INFO: JOBID=2")[0]
    assert sorted(int(line.split("node")[1].split("[")[0]) for line in job2.splitlines()
                  if "-node" in line) == list(range(36))
    assert out.endswith(BAR + "INFO: No matching resources found\nINFO: JOBID=3\n" + BAR)


@pytest.mark.skipif(not POWER.exists(), reason=f"Fluxion test data not at {POWER}")
def test_rlite_writer_errors_keep_the_job_counter_like_resource_query(tmp_path, capsys) -> None:
    """resource-query's rlite writer fails on an empty set (a match that found nothing):
    it prints the writer error, reports no match and does not count the job id."""
    job = POWER / "jobspecs" / "basics" / "test001.yaml"
    (tmp_path / "cmds.in").write_text(f"match allocate {job}\n" * 4 + "quit\n")
    main(["query", "-L", str(POWER / "grugs" / "tiny.graphml"), "-P", "hinodex", "-F",
          "rlite", "-t", str(tmp_path / "out.txt"), "--commands", str(tmp_path / "cmds.in")])
    assert (tmp_path / "out.txt").read_text() == (
        '[{"rank": "1", "children": {"core": "0-35", "gpu": "0-1"}}]\n' + BAR
        + "INFO: JOBID=1\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n" + BAR
        + '[{"rank": "0", "children": {"core": "0-35", "gpu": "0-1"}}]\n' + BAR
        + "INFO: JOBID=2\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n" + BAR
        + (BAR + "INFO: No matching resources found\nINFO: JOBID=3\n" + BAR) * 2)
    assert capsys.readouterr().err == "match_allocate: ERROR: match writer emit: " \
                                      "Invalid argument\n" * 2


def test_a_jgf_with_a_vertex_but_no_edge_is_a_writer_error_and_stays(work) -> None:
    """Like resource-query's JGF writer: a lone vertex is ENOENT (unsatisfiable, job id not
    counted) and stays in the writer, coming out with the next emission."""
    from fluxinfra.matcher import load_graph
    from fluxinfra.matcher.writers import QueryWriter, WriterError
    g = load_graph(small_jgf(), "jgf")
    w = QueryWriter("jgf")
    with pytest.raises(WriterError, match="No such file or directory"):
        w.write(g, [(1, g.root, 1, True, False)])
    doc = json.loads(w.write(g, [(3, 3, 1, True, False), (2, 2, 1, False, False),
                                 (1, 1, 1, False, False)]))
    assert [n["id"] for n in doc["graph"]["nodes"]] == ["0", "3", "2", "1"]
    assert doc["graph"]["edges"] == [{"source": "2", "target": "3"},
                                     {"source": "1", "target": "2"}]


def test_a_lone_root_jgf_fails_and_its_job_stays_held_but_forgotten(work, capsys) -> None:
    """resource-query under -F jgf_shorthand: a whole-cluster exclusive job's JGF is the root
    alone, the writer fails (ENOENT: unsatisfiable, job id not counted) and the job is
    forgotten while its resources stay held, so the next match finds nothing either."""
    (work / "clus.yaml").write_text(jobspec(
        "  - type: cluster\n    count: 1\n    exclusive: true\n    with:\n"
        "      - type: slot\n        count: 1\n        label: task\n        with:\n"
        "          - type: node\n            count: 2\n"))
    _, out, err = query(work, "match allocate clus.yaml\nmatch allocate core.yaml\ninfo 1\n"
                              "match allocate core.yaml\nfind sched-now=free\nquit\n",
                        "jgf_shorthand", capsys=capsys)
    block = (BAR + "INFO: No matching resources found\nINFO: Unsatisfiable request\n"
             "INFO: JOBID=1\n" + BAR)
    assert out == block * 3
    emit = "match_allocate: ERROR: match writer emit: No such file or directory\n"
    assert err == (emit * 2 + "info: ERROR: nonexistent job 1\n" + emit
                   + "find: ERROR: find writer emit: No such file or directory\n")


def test_rv1exec_hosts_without_a_number_load_as_fluxion_reads_them(tmp_path, capsys):
    """Two ranks on one host named ``node`` (no numeric suffix: id -1, as Fluxion's reader
    splits host names); updates by rank hold each rank's cores. The expected text is what
    resource-query v0.54 prints for the same files."""
    def r(ranks: str, cores: str, nodelist: list[str], end: int) -> str:
        return json.dumps({"version": 1, "execution": {
            "R_lite": [{"rank": ranks, "children": {"core": cores}}], "nodelist": nodelist,
            "starttime": 0, "expiration": end}})

    (tmp_path / "g.json").write_text(r("0-1", "0-3", ["node", "node"], 1000000))
    (tmp_path / "j1.json").write_text(r("0", "0-1", ["node"], 3600))
    (tmp_path / "j2.json").write_text(r("1", "2-3", ["node"], 3600))
    rc, out, _ = query(tmp_path, "update allocate rv1exec j1.json 1 0 3600\n"
                       "update allocate rv1exec j2.json 2 0 3600\nfind sched-now=free\nquit\n",
                       graph="g.json", load="rv1exec", capsys=capsys)

    def job(cores: str, jobid: int) -> str:
        held = "".join(f"      ---------core{c}[1:x]\n" for c in cores)
        return (held + "      ------node[1:x]\n      ---cluster0[1:s]\n" + BAR
                + f"INFO: JOBID={jobid}\nINFO: RESOURCES=ALLOCATED\nINFO: SCHEDULED AT=Now\n"
                + BAR)
    free = ("      ---------core2[1:x]\n      ---------core3[1:x]\n      ------node[1:x]\n"
            "      ---------core0[1:x]\n      ---------core1[1:x]\n      ------node[1:x]\n"
            "      ---cluster0[1:x]\n" + BAR + 'INFO: EXPRESSION="sched-now=free"\n' + BAR)
    assert rc == 0
    assert out == job("01", 1) + job("23", 2) + free
