"""The command language of ``fluxinfra query`` (resource-query's): any command line, naming
any file, prints what it prints (errors one ``ERROR`` line each) and the session goes on to
the next command; nothing raises out of the session."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path

from fuzzlib import EDGE_INTS, fuzz
from hypothesis import example
from hypothesis import strategies as st

from fluxinfra.cli.query_session import QuerySession
from fluxinfra.matcher import Matcher, load_graph

ROOT = Path(__file__).resolve().parents[2]
GRAPH_DOC = json.loads((ROOT / "examples" / "graph.json").read_text())
JOB = (ROOT / "examples" / "job.yaml").read_bytes()
SUBGRAPH = json.dumps({"graph": {"nodes": [
    {"id": "1", "metadata": {"type": "rack", "paths": {"containment": "/demo0/rack0"}}},
    {"id": "900", "metadata": {"type": "node", "name": "extra0",
                               "paths": {"containment": "/demo0/rack0/extra0"}}}],
    "edges": [{"source": "1", "target": "900"}]}}).encode()
#: file name -> contents a session's commands can name (plus a directory and missing files)
FILES = {"job.yaml": JOB, "bad.yaml": bytes(range(128, 256)), "empty": b"",
         "sub.json": SUBGRAPH, "cycle.json": SUBGRAPH.replace(b'"edges": [', b'"edges": [{'
                                                              b'"source": "900", "target": "1"}, '),
         "deep.json": b"[" * 5000 + b"]" * 5000, "nan.yaml": JOB + b"\nattributes: {system: "
                                                                  b"{duration: .nan}}\n"}
WORDS = ["match", "m", "multi-match", "M", "update", "u", "cancel", "c", "partial-cancel", "pc",
         "info", "i", "stat", "s", "find", "f", "set-status", "t", "get-status", "e",
         "set-property", "p", "get-property", "g", "list", "l", "cat", "a", "attach", "j",
         "remove", "help", "nope"]
ARGS = ["allocate", "allocate_orelse_reserve", "satisfiability", "without_allocating", "reserve",
        "jgf", "jgf_shorthand", "rv1exec", "true", "false", "stats", "up", "down",
        "/demo0/rack0/node1", "/demo0", "node1", "a=b", "status=up", "names=node[0-99999999]",
        "(status=up", "and", "or", "sched-now=free", "jobid-alloc=1", "0-3", "0-99999999999",
        "/dev/zero", "/", "a\x00b", "\udcff.yaml", "x" * 300] + [str(i) for i in EDGE_INTS]


@st.composite
def command_lines(draw) -> list[str]:
    lines = []
    for _ in range(draw(st.integers(1, 8))):
        words = [draw(st.sampled_from(WORDS))]
        for _ in range(draw(st.integers(0, 6))):
            words.append(draw(st.sampled_from(ARGS + list(FILES) + ["missing.yaml", "dir"])
                              | st.text(st.characters(exclude_characters="\n\r\x0b\x0c\x1c"
                                                      "\x1d\x1e\x85\u2028\u2029"), max_size=6)))
        lines.append(" ".join(words))
    return lines


def session(lines, raw: bytes | None = None) -> tuple[str, str, str]:
    """Run ``lines`` (or the command stream ``raw``) in a fresh session whose files are
    FILES; then ``stat``, which must answer (the session went on)."""
    out, err, stdout = io.StringIO(), io.StringIO(), io.StringIO()
    s = QuerySession(Matcher(load_graph(GRAPH_DOC), policy="first"), out, "simple", err, stdout)
    with tempfile.TemporaryDirectory() as folder:
        for name, data in FILES.items():
            Path(folder, name).write_bytes(data)
        os.mkdir(Path(folder, "dir"))
        here = os.getcwd()
        os.chdir(folder)
        try:
            if raw is None:
                s.run(list(lines) + ["stat"])
            else:
                s.run(io.TextIOWrapper(io.BytesIO(raw + b"\nstat\n"), encoding="utf-8"))
        finally:
            os.chdir(here)
    assert "INFO: Num. of Jobs Matched" in stdout.getvalue(), "the session stopped early"
    for line in err.getvalue().splitlines():
        assert line.startswith(("ERROR", "match_allocate: ERROR", "cancel: ERROR",
                                "info: ERROR", "find", "update_vertex", "WARN")), line
    return out.getvalue(), err.getvalue(), stdout.getvalue()


@fuzz(command_lines().filter(lambda ls: not any(x.split()[:1] in (["quit"], ["q"])
                                                   for x in ls)))
@example(["match allocate bad.yaml"])
@example(["match allocate /dev/zero", "cat /dev/zero"])
@example(["match allocate a\x00b", "attach a\x00b"])
@example(["attach cycle.json", "find status=up"])
@example(["match allocate job.yaml", "update allocate jgf job.yaml 99999999999999999999 0 10",
          "match allocate job.yaml"])
@example(["update allocate jgf deep.json 5 0 10", "partial-cancel 1 jgf deep.json"])
@example(["find names=node[0-99999999]", "find " + "(" * 5000 + "status=up" + ")" * 5000])
@example(["remove 0-99999999999 false", "match allocate nan.yaml"])
def test_command_lines(lines):
    session(lines)


@fuzz(st.binary(max_size=300) | command_lines().map(lambda ls: "\n".join(ls).encode(
    "utf-8", "surrogatepass")))
@example(b"match allocate \xff\xfe.yaml\ncat \xff\n")
@example(b"find " + b"x" * (1 << 20) + b"\nmatch allocate job.yaml\n")
@example(b"\tq")
def test_command_stream(raw):
    if quits(raw):
        return  # (a session that quits answers nothing after)
    session((), raw)


def quits(raw: bytes) -> bool:
    """A command of ``raw`` is ``quit`` (split into lines and words as the session does)."""
    text = raw.decode("utf-8", "surrogateescape").replace("\r\n", "\n").replace("\r", "\n")
    return any(line.split()[:1] in (["q"], ["quit"]) for line in text.split("\n"))
