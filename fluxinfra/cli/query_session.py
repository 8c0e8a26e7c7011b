"""The command shell of ``fluxinfra query``: one resource-query session over a matcher.

:class:`QuerySession` runs resource-query's commands (``match``, ``multi-match``, ``update``,
``cancel``, ``partial-cancel``, ``info``, ``stat``, ``find``, ``set-status`` ...) one line at a
time and prints what resource-query's command handlers (its ``command.cpp``) print, in the
same words, on the same streams. It reads jobspec, R and JGF files the way resource-query's
commands do, with the reader checks resource-query makes before an ``update``. The command
line, the graph's loading and the graph output at the end are :mod:`fluxinfra.cli.query`'s;
the conformance replay and the fuzz tests drive a session in process.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import os
import re
import sys
import time
from typing import TextIO

from fluxinfra.errors import FluxinfraError
from fluxinfra.inputs import (
    INT64_MAX,
    INT64_MIN,
    MAX_GRAPH_BYTES,
    MAX_TEXT_BYTES,
    decode,
    parse_json,
    read_bytes,
)
from fluxinfra.matcher.errors import (
    Busy,
    GraphError,
    JobspecError,
    MatcherError,
    UnknownJob,
    Unsatisfiable,
)
from fluxinfra.matcher.graph import CONTAINMENT
from fluxinfra.matcher.matcher import OPS, Matcher
from fluxinfra.matcher.planner import HORIZON
from fluxinfra.matcher.writers import QueryWriter, WriterError

__all__ = ["QuerySession", "strtoll"]

_BAR = "INFO: =============================\n"
_LEADING_INT = re.compile(r"\s*([-+]?)0*([0-9]*)")
#: a jobspec file whose times are this much (ns) before its read is remembered until its
#: stat changes
_SETTLED_NS = 2_000_000_000
#: most bytes of command input one read takes
_CHUNK = 1 << 16
#: matcher ids of jobs resource-query would have forgotten (far below any id a user gives)
_LEAKED = -(1 << 62)
#: most ranks ``remove IDSET false`` takes
_MAX_REMOVE_RANKS = 1 << 20


class QuerySession:
    """One resource-query session: a matcher, a job counter, and the output stream."""

    def __init__(self, matcher: Matcher, out: TextIO, match_format: str = "simple",
                 err: TextIO | None = None, stdout: TextIO | None = None) -> None:
        self.m = matcher
        self.out = out
        self.err = err if err is not None else sys.stderr
        #: resource-query prints info/stat/list to stdout even with -t
        self.stdout = stdout if stdout is not None else sys.stdout
        self.fmt = match_format
        #: resource-query's writer for ``-F`` (one per session: the shorthand flag sticks)
        self.writer = QueryWriter(match_format)
        self.jobid_counter = 1
        self.jobs: dict[int, tuple[str, int, str]] = {}  # jobid -> (state, at, jobspec file)
        #: job id -> the matcher's id for it, once a writer failure left a job of that id
        #: held but forgotten (as resource-query does) and the id was handed out again
        self._alias: dict[int, int] = {}
        self._leaked = 0
        #: command word -> handler (built once: the loop looks one up per line)
        self._handlers = self._commands()
        #: jobspec path -> (its stat identity, its text, the read of the command input its
        #: identity was last compared at, or None): a command file names the same few
        #: jobspecs thousands of times; a file changed since is read again
        self._texts: dict[str, tuple[tuple[int, ...], str, int | None]] = {}
        self._reads = 0  # reads of command input so far (see _input)
        #: the read the commands now running came from, or None: compare at each command
        self._read: int | None = None

    # -- dispatch ---------------------------------------------------------------------------
    def run(self, lines) -> None:
        """Run each command of ``lines``; one that fails on bad input prints one ``ERROR:``
        line and the session goes on with the next."""
        handlers = self._handlers
        for line in self._input(lines):
            tokens = line.split()
            if not tokens:
                continue
            handler = handlers.get(tokens[0])
            if handler is None:
                continue
            try:
                if handler(tokens) is False:
                    break
            except FluxinfraError as exc:
                self.error(f"{tokens[0]}: {exc}")

    def _input(self, lines):
        """The command lines of ``lines``. A file or pipe (a text stream with a binary buffer)
        is read here, one read of up to _CHUNK bytes at a time (what is there: a terminal
        gives a line, a pipe what was written), and each remembered jobspec file is compared
        with its ``stat`` once per read rather than once per command (see _jobspec_text): a
        command sees every change to a jobspec made before it was read, the order a driver
        that edits a file, then sends the command naming it, sets up. A change made while the
        commands read with it run was not made before them (their writer sent them first).
        Anything else (a list of lines): the file is compared at each command."""
        buffer = getattr(lines, "buffer", None)
        if not isinstance(lines, io.TextIOWrapper) or not hasattr(buffer, "read1"):
            self._read = None
            yield from lines
            return
        # decoded as the stream would (its encoding and universal newlines), bytes that are
        # not UTF-8 kept as they are (file names are bytes, as for resource-query)
        errors = lines.errors if lines.errors not in (None, "strict") else "surrogateescape"
        decoder = io.IncrementalNewlineDecoder(
            codecs.getincrementaldecoder(lines.encoding)(errors), True)
        tail = ""
        skipping = False  # within a line too long to take, until its end
        try:
            while True:
                data = buffer.read1(_CHUNK)
                text = tail + decoder.decode(data, not data)
                self._reads += 1  # (after the read: what changed before it is seen)
                self._read = self._reads
                complete = text.split("\n")
                tail = complete.pop()
                if skipping and complete:
                    complete.pop(0)
                    skipping = False
                yield from complete
                if len(tail) > MAX_TEXT_BYTES:
                    if not skipping:
                        self.error(f"a command longer than {MAX_TEXT_BYTES:,} characters; "
                                   "skipped to its end")
                    tail, skipping = "", True
                if not data:
                    if tail and not skipping:
                        yield tail
                    return
        finally:
            self._read = None

    def _commands(self):
        return {"match": self.cmd_match, "m": self.cmd_match,
                "multi-match": self.cmd_multi_match, "M": self.cmd_multi_match,
                "update": self.cmd_update, "u": self.cmd_update,
                "cancel": self.cmd_cancel, "c": self.cmd_cancel,
                "partial-cancel": self.cmd_partial_cancel, "pc": self.cmd_partial_cancel,
                "info": self.cmd_info, "i": self.cmd_info,
                "stat": self.cmd_stat, "s": self.cmd_stat,
                "find": self.cmd_find, "f": self.cmd_find,
                "set-status": self.cmd_set_status, "t": self.cmd_set_status,
                "get-status": self.cmd_get_status, "e": self.cmd_get_status,
                "set-property": self.cmd_set_property, "p": self.cmd_set_property,
                "get-property": self.cmd_get_property, "g": self.cmd_get_property,
                "list": self.cmd_list, "l": self.cmd_list,
                "cat": self.cmd_cat, "a": self.cmd_cat,
                "attach": self.cmd_attach, "j": self.cmd_attach,
                "remove": self.cmd_remove,
                "quit": self.cmd_quit, "q": self.cmd_quit}

    def _mid(self, jobid: int) -> int:
        """The matcher's id of job ``jobid``."""
        return self._alias.get(jobid, jobid)

    def error(self, text: str) -> None:
        """One ``ERROR:`` line on stderr; the session goes on, as resource-query's does."""
        self.err.write(f"ERROR: {_one_line(text)}\n")

    def emit(self, result, emitted=None, expiration: int | None = None) -> str:
        """The vertices of a match or update in the session's ``-F`` format (``simple``
        writes the matcher's held subtrees without listing them vertex by vertex first)."""
        if emitted is None:
            emitted = result.raw_emitted if self.fmt == "simple" else result.emitted
        return self.writer.write(self.m.graph, emitted,
                                 self.m.trav.sub, result.at,
                                 result.at + result.duration if expiration is None
                                 else expiration)

    # -- commands ---------------------------------------------------------------------------
    def cmd_match(self, args) -> None:
        if len(args) != 3:
            self.error("malformed command")
            return
        self._run_match(args[1], args[2])

    def cmd_multi_match(self, args) -> None:
        if len(args) <= 3:
            self.error("malformed command")
            return
        for path in args[2:]:
            if not self._run_match(args[1], path):
                break  # like resource-query: later jobspecs are not tried

    def _jobspec_text(self, path: str) -> str:
        """The text of jobspec file ``path`` as resource-query reads it, command by command,
        but read again only when the file changed: its ``stat`` identity (size, modification
        and change times, inode, device) differs from the last read's. Any write, truncation,
        ``utime`` (a rewrite that sets the time back, as ``cp -p`` or ``rsync -t`` do),
        rename over it, replaced directory on its path or re-pointed symbolic link moves one
        of them. Only a file whose times are a while before it was read is remembered (git's
        "racy clean" rule): file times tick coarsely, so a file rewritten just after it was
        read could keep them; one settled for _SETTLED_NS cannot change without its change
        time moving. The identity is compared once per read of the command input (see
        _input), else at every command. Raises OSError."""
        texts = self._texts
        hit = texts.get(path)
        read = self._read
        if hit is not None and read is not None and hit[2] == read:
            return hit[1]
        now = time.time_ns()
        try:
            st = os.stat(path)
        except ValueError:  # (a NUL byte in the name)
            raise FileNotFoundError(path) from None
        ident = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
        if hit is not None and hit[0] == ident:
            texts[path] = (ident, hit[1], read)
            return hit[1]
        text = decode(_read_file(path), f"jobspec {path}", JobspecError)
        if max(st.st_mtime_ns, st.st_ctime_ns) < now - _SETTLED_NS:
            if len(texts) >= 256:
                texts.clear()  # many distinct files: start over rather than grow
            texts[path] = (ident, text, read)
        else:
            texts.pop(path, None)
        return text

    def _run_match(self, op: str, path: str) -> bool:
        if op not in OPS:
            self.error(f"unknown subcmd {op}")
            return False
        jobid = self.jobid_counter
        if jobid > INT64_MAX:  # (an update gave job 2**63-1: resource-query's counter wraps)
            self.error(f"no job id left to give: job {INT64_MAX}, the largest Fluxion holds, "
                       "was given; start a new session")
            return False
        try:
            text = self._jobspec_text(path)
        except OSError:
            self.error(f"can't open {path}")
            return True
        except _CantOpen as exc:
            self.error(str(exc))
            return True
        except JobspecError as exc:  # (text that is not UTF-8)
            self.err.write(f"match_allocate: ERROR: Jobspec error for {jobid}: "
                           f"{_one_line(str(exc))}\n")
            self._no_match(jobid, sat=True)
            return False
        counts = op not in ("satisfiability", "without_allocating")
        out = self.out
        result, sat = None, True
        try:
            result = self.m.match(text, op=op, jobid=self._mid(jobid))
        except JobspecError as exc:
            self.err.write(f"match_allocate: ERROR: Jobspec error for {jobid}: "
                           f"{_one_line(str(exc))}\n")
            self._no_match(jobid, sat=True)
            return False
        except Unsatisfiable:
            sat = False
        except Busy:
            pass
        except MatcherError as exc:
            self.err.write(f"match_allocate: ERROR: {_one_line(str(exc))}\n")
        # like resource-query, the writer emits after every traversal, failed or not
        try:
            text = self.emit(result) if result is not None and op != "satisfiability" \
                else self.writer.write(self.m.graph, [], self.m.trav.sub)
        except WriterError as exc:
            # resource-query then reports no match and does not count the job id, yet the
            # job's resources stay held, by a job nobody can name: the id is handed out again
            self.err.write(f"match_allocate: ERROR: match writer emit: {exc}\n")
            if result is not None and self._mid(jobid) in self.m.jobs:
                self._leaked += 1
                self._alias[jobid] = _LEAKED - self._leaked
            sat = exc.errno_name != "ENOENT"
            if op == "satisfiability":
                out.write(_BAR + f"INFO: {'S' if sat else 'Uns'}atisfiable request\n" + _BAR)
            else:
                self._no_match(jobid, sat=sat)
            return False
        if counts:
            self.jobid_counter += 1
        if op == "satisfiability":
            out.write(_BAR + f"INFO: {'S' if sat else 'Uns'}atisfiable request\n" + _BAR)
            return result is not None
        if result is None:
            self._no_match(jobid, sat=sat)
            return False
        allocated = op != "without_allocating"
        mode = ("ALLOCATED" if result.at == 0 else "RESERVED") if allocated else "MATCHED"
        when = "Now" if result.at == 0 else str(result.at)
        out.write(f"{text}{_BAR}INFO: JOBID={jobid}\nINFO: RESOURCES={mode}\n"
                  f"INFO: SCHEDULED AT={when}\n{_BAR}")
        if allocated:
            self.jobs[jobid] = (mode, result.at, path)
        return True

    def cmd_update(self, args) -> None:
        """``update allocate|reserve jgf|jgf_shorthand|rv1exec FILE JOBID AT DURATION``:
        re-register an existing allocation from an R, as resource-query's ``update``."""
        if len(args) != 7:
            self.error("malformed command")
            return
        subcmd, reader, path = args[1], args[2], args[3]
        if subcmd not in ("allocate", "reserve"):
            self.error(f"unknown subcmd {subcmd}")
            return
        if reader not in Matcher.UPDATE_READERS:
            self.error(f"unsupported reader {reader}")
            return
        try:
            text = decode(_read_file(path, MAX_GRAPH_BYTES), f"update: {path}", GraphError)
        except FluxinfraError as exc:
            self.error(str(exc))
            return
        jobid = strtoll(args[4])
        if jobid in self.jobs:
            self.error("existing Jobid ")
            return
        at, duration = strtoll(args[5]), strtoll(args[6]) % (1 << 64)
        if at < 0 or duration == 0:
            self.error(f"invalid time ({at}, {duration})")
            return
        self._run_update(reader, path, text, jobid, at, duration)

    def _run_update(self, reader: str, path: str, text: str, jobid: int, at: int,
                    duration: int) -> None:
        start = time.perf_counter()
        result = None
        try:
            doc = _update_doc(reader, text)
            if at >= HORIZON or at + duration > INT64_MAX:
                # resource-query's planners refuse such a window (the span does not fit)
                raise GraphError(f"update: the window of {duration}s from {at} ends past the "
                                 "end of the graph's time; give a shorter duration")
            result = self.m.update_allocate(self._mid(jobid), doc, at=at,
                                            duration=min(duration, HORIZON - at),
                                            reader=reader, reserve=at != 0)
        except MatcherError as exc:
            self.error(_update_error(self.m.graph, reader, exc))
        elapsed = time.perf_counter() - start
        self.m.record_match(elapsed, True)  # resource-query counts every update's time
        self.jobid_counter = jobid + 1
        if result is None:
            with contextlib.suppress(WriterError):  # what earlier emissions left behind
                self.out.write(self.writer.write(self.m.graph, [], self.m.trav.sub))
            self._no_match(jobid, sat=True)
            return
        result.overhead = elapsed
        emitted = result.emitted
        if reader == "rv1exec":
            emitted = _rv1exec_view(self.m.graph, emitted)
        with contextlib.suppress(WriterError):  # resource-query ignores the writer's error
            self.out.write(self.emit(result, emitted, at + duration))
        mode = "ALLOCATED" if at == 0 else "RESERVED"
        when = "Now" if at == 0 else str(at)
        self.out.write(f"{_BAR}INFO: JOBID={jobid}\nINFO: RESOURCES={mode}\n"
                       f"INFO: SCHEDULED AT={when}\n{_BAR}")
        self.jobs[jobid] = (mode, at, path)

    def _no_match(self, jobid: int, sat: bool) -> None:
        text = _BAR + "INFO: No matching resources found\n"
        if not sat:
            text += "INFO: Unsatisfiable request\n"
        self.out.write(text + f"INFO: JOBID={jobid}\n" + _BAR)

    def cmd_cancel(self, args) -> None:
        if not 2 <= len(args) <= 3:
            self.error("malformed command")
            return
        try:
            jobid = int(args[1])
        except ValueError:
            self.error(f"cancel: job id must be an integer, got {args[1]!r}")
            return
        if jobid not in self.jobs:  # (a job resource-query forgot is no job either)
            self.err.write(f"cancel: ERROR: nonexistent job {jobid}\n")  # resource-query's text
            return
        try:
            self.m.cancel(self._mid(jobid))
        except UnknownJob as exc:
            self.error(f"cancel: {exc}")
            return
        self.jobs.pop(jobid, None)
        if len(args) == 3 and args[2] == "stats":
            pre, post = self.m.last_cancel_counts
            self.out.write(f"{_BAR}INFO: CANCEL PREORDER COUNT=\"{pre}\"\n"
                           f"INFO: CANCEL POSTORDER COUNT=\"{post}\"\n{_BAR}")

    def cmd_partial_cancel(self, args) -> None:
        if not 4 <= len(args) <= 5:
            self.error("malformed command")
            return
        try:
            jobid = int(args[1]) if len(args[1]) < 20 else INT64_MAX + 1
            r = parse_json(read_bytes(args[3], args[3], GraphError, MAX_GRAPH_BYTES), args[3],
                           GraphError)
            if self.m.partial_cancel(self._mid(jobid), r):
                self.jobs.pop(jobid, None)
        except (ValueError, MatcherError) as exc:
            self.error(f"partial-cancel: {exc}")
        if len(args) == 5 and args[4] == "stats":
            # Fluxion releases a partial cancel vertex by vertex, without a traversal
            self.out.write(f"{_BAR}INFO: PARTIAL CANCEL PREORDER COUNT=\"0\"\n"
                           f"INFO: PARTIAL CANCEL POSTORDER COUNT=\"0\"\n{_BAR}")

    def cmd_info(self, args) -> None:
        if len(args) != 2:
            self.error("malformed command")
            return
        try:
            jobid = int(args[1])
        except ValueError:
            jobid = 0
        if jobid not in self.jobs:
            self.err.write(f"info: ERROR: nonexistent job {jobid}\n")
            return
        state, at, path = self.jobs[jobid]
        r = self.m.results.get(self._mid(jobid))
        overhead = r.overhead if r else 0.0
        self.stdout.write(f"INFO: {jobid}, {state}, {at}, {path}, {overhead:g}\n")

    def cmd_list(self, args) -> None:
        for jobid in sorted(self.jobs):
            self.cmd_info(["info", str(jobid)])

    def cmd_stat(self, args) -> None:
        st = self.m.stats  # the match times only (stat() also counts the graph)
        n = len(self.jobs)
        avg = st["sum_match"] / n if n else 0.0
        self.stdout.write(f"INFO: Num. of Jobs Matched: {n}\n"
                         f"INFO: Min. Match Time: {st['min_match'] if n else 0:g}\n"
                         f"INFO: Max. Match Time: {st['max_match']:g}\n"
                         f"INFO: Avg. Match Time: {avg:g}\n")

    def cmd_find(self, args) -> None:
        if len(args) < 2:
            self.error("malformed command: ")
            return
        criteria = " ".join(args[1:])
        try:
            if self.fmt in ("simple", "pretty_simple"):
                lines = self.m.find_text(criteria, self.fmt)
            else:
                from fluxinfra.matcher.find import find_vertices
                g = self.m.graph
                lines = self.writer.write(g, [(lvl, v, g.size[v], True, False)
                                              for lvl, v in find_vertices(self.m, criteria)],
                                          self.m.trav.sub)
        except WriterError as exc:
            self.err.write(f"find: ERROR: find writer emit: {exc}\n")
            return
        except MatcherError as exc:
            self.err.write(f"{exc}\n")
            return
        self.out.write(lines)
        self.out.write(f"{_BAR}INFO: EXPRESSION=\"{criteria}\"\n{_BAR}")

    def _path_vertices(self, path: str, wording: str = "Could not") -> list[int]:
        """The vertices at ``path``, or none after printing resource-query's message."""
        found = self._by_path(path)
        if not found:
            self.out.write(f"{wording} find path {path} in resource graph.\n")
        return found

    def _by_path(self, path: str) -> list[int]:
        g = self.m.graph
        name = path.rsplit("/", 1)[-1]
        return [v for v in g.by_name(name) if g.path(v) == path]

    def cmd_set_status(self, args) -> None:
        if len(args) != 3:
            self.error("malformed command")
            return
        if not self._path_vertices(args[1]):
            return
        if args[2] not in ("up", "down"):
            self.error("unrecognized status")
            return
        self.m.set_status(args[1], args[2])

    def cmd_get_status(self, args) -> None:
        if len(args) != 2:
            self.error("malformed command")
            return
        found = self._path_vertices(args[1])
        if not found:
            return
        for v in found:
            status = "up" if self.m.graph.status[v] else "down"
            self.out.write(f"{args[1]} is {status}\n")

    def cmd_set_property(self, args) -> None:
        if len(args) != 3:
            self.error("malformed command")
            return
        key, sep, value = args[2].partition("=")
        if not key or not sep or not value:
            self.out.write("Incorrect input format. \n"
                           "Please use `set-property <resource> PROPERTY=VALUE`.\n")
            return
        found = self._path_vertices(args[1], "Couldn't")  # set-property's own wording
        if not found:
            return
        for v in found:
            self.m.set_property(v, key, value)

    def cmd_get_property(self, args) -> None:
        if len(args) != 2:
            self.error("malformed command")
            return
        found = self._path_vertices(args[1])
        if not found:
            return
        g = self.m.graph
        for v in found:
            props = g.properties[v]
            if not props:
                self.out.write(f"No properties were found for {args[1]} "
                               f"(vtx's uniq_id={g.uniq_id[v]}).\n")
            else:
                for k in sorted(props):
                    self.out.write(f"{k}={props[k]}\n")

    def cmd_cat(self, args) -> None:
        if len(args) < 2:
            return
        try:
            data = _read_file(args[1])
        except _CantOpen as exc:
            if os.path.exists(args[1]):  # (a missing file prints nothing, as resource-query)
                self.error(str(exc))
            data = b""
        self.stdout.write(data.decode("utf-8", "surrogateescape"))
        self.stdout.write(f"INFO: Jobspec in {args[1]}\n")

    def cmd_attach(self, args) -> None:
        if len(args) != 2:
            self.error("malformed command")
            return
        try:
            data = _read_file(args[1], MAX_GRAPH_BYTES)
        except _CantOpen as exc:
            self.error(str(exc))
            return
        try:
            self.m.add_subgraph(decode(data, args[1], GraphError))
        except MatcherError as exc:
            self.error(f"can't attach JGF subgraph: {exc}")

    def cmd_remove(self, args) -> None:
        if len(args) != 3:
            self.error("malformed command")
            return
        try:
            if args[2] == "true":
                self.m.remove_subgraph(args[1])
            elif args[2] == "false":
                from fluxinfra.matcher.rv1exec import parse_idset
                ranks = set(parse_idset(args[1], "remove", limit=_MAX_REMOVE_RANKS))
                g = self.m.graph
                for v in [v for v in self.m._nodes() if g.rank[v] in ranks]:
                    self.m.remove_subgraph(g.path(v))
            else:
                self.error("invalid path boolean input ")
        except MatcherError as exc:
            self.error(f"can't remove subgraph: {exc}")

    def cmd_quit(self, args) -> bool:
        return False


def strtoll(text: str) -> int:
    """C's ``strtoll(text, NULL, 10)``: the leading integer, 0 when there is none, held at
    the int64 range's ends past them (as strtoll does)."""
    m = _LEADING_INT.match(text)
    sign, digits = m.group(1), m.group(2)
    if not digits:
        return 0
    if len(digits) > 19:
        return INT64_MIN if sign == "-" else INT64_MAX
    value = int(sign + digits)
    return min(max(value, INT64_MIN), INT64_MAX)


def _one_line(text: str) -> str:
    """``text`` on one line (an error message quoting input may hold newlines)."""
    return text.replace("\r", "\\r").replace("\n", "\\n")


class _CantOpen(FluxinfraError):
    """A file a command names cannot be read (missing, a directory, a device, too large)."""


def _read_file(path: str, limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a file a command names, or _CantOpen saying ``can't open PATH`` (as
    resource-query does), with the reason when it is one resource-query has not (a device,
    a directory, a file past ``limit`` bytes)."""
    try:
        return read_bytes(path, f"can't open {path}", _CantOpen, limit)
    except _CantOpen:
        if not os.path.exists(path):
            raise _CantOpen(f"can't open {path}") from None
        raise


def _update_doc(reader: str, text: str) -> dict:
    """Parse an ``update`` file the way resource-query's reader checks it."""
    doc = parse_json(text, "update", GraphError)
    if not isinstance(doc, dict):
        raise GraphError("update: the file holds no JSON object")
    if reader == "rv1exec":
        execution = doc.get("execution")
        if doc.get("version") != 1 or not isinstance(execution, dict) \
                or "R_lite" not in execution or "nodelist" not in execution:
            raise GraphError("update: rv1exec needs an Rv1 with execution.R_lite and "
                             "execution.nodelist")
        return doc
    graph = doc.get("graph")
    if not isinstance(graph, dict):
        raise GraphError("fetch_jgf: JGF does not contain a required key (graph).")
    for key in ("nodes", "edges"):
        if key not in graph:
            raise GraphError(f"fetch_jgf: JGF does not contain a required key ({key}).")
    return doc


def _update_error(g, reader: str, exc: MatcherError) -> str:
    """resource-query's reader message for a failed update (its detail line), else ours."""
    v = getattr(exc, "vertex", None)
    if isinstance(exc, Busy) and v is not None:
        if reader == "rv1exec":
            return f"update_vertex: {g.name[v]} is unavailable."
        if getattr(exc, "exclusive", False):
            return f"update_vtx_plan: can't add span into {g.name[v]}."
        return f"update_vtx_plan: {g.name[v]} is unavailable."
    if getattr(exc, "duplicate", False) and v is not None:
        return f"find_vtx: found duplicate JGF node id for {g.uniq_id[v]}."
    missing = getattr(exc, "missing", None)
    if missing is not None:
        if reader == "rv1exec":
            return f"add_or_update: couldn't find vertex in graph for {missing}."
        return (f"exist: inconsistent input vertex: nonexistent path ({missing}) "
                f"{getattr(exc, 'jgf_id', '')}.")
    return str(exc)


def _rv1exec_view(g, emitted: list) -> list:
    """resource-query marks every node an R_lite names exclusive in what ``update ...
    rv1exec`` prints (and so the node's children as below an exclusive parent), even when
    the node stays shared for scheduling."""
    nodes = {v for _, v, _, _, _ in emitted if g.type[v] == "node"}
    parent = g.parent[CONTAINMENT]
    return [(lvl, v, amount, excl or v in nodes, xp or parent[v] in nodes)
            for lvl, v, amount, excl, xp in emitted]
