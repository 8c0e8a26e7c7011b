"""One distribution, end to end: plan, archive, fan out, collect, clean up, remember for --resume.

1. **Plan**: ask the instance for its size, tree (``overlay.topology``) and which brokers are
   down (``flux overlay status``); pick the target ranks; resolve SOURCE on the lead node and hash
   it (the manifest every rank is checked against).
2. **Archive**: ``flux archive create`` under a name unique to this run, with ``--mmap`` when the
   command runs on rank 0's host (the file is mapped into rank 0's content cache instead of being
   copied into the backing store; it is re-hashed there on every load, so a run that cannot map
   falls back to copying).
3. **Fan out**: one ``flux exec -r TARGETS -l flux python -c AGENT run`` with the spec on stdin;
   every rank's ``flux archive extract`` pulls the blobs through its broker's content cache from
   its TBON parent, so the tree does the fan-out (see :mod:`.topology`). Ranks that are down are
   not asked; ranks that go silent for ``stall_timeout`` seconds are given up once the others
   finish; ``flux exec`` reports a broker that dies as "No route to host".
4. **Clean up**: ``flux archive remove`` always; the state file is written when ranks are left
   to do and deleted when none are.

**Interrupts** (SIGINT, SIGTERM, SIGHUP) from the archive's creation on: the first is passed to the
process group of the running flux command (not to its process alone: ``runuser``, the usual prefix
for an instance owned by ``flux``, blocks SIGINT and would swallow it), so ``flux archive create``
stops, or ``flux exec`` forwards one SIGINT to every rank's agent; ranks still running
``REMOTE_GRACE`` seconds later (or at once, where the prefix carries no signals: ``kubectl exec``)
are signalled through their broker's ``rexec.kill`` by the pid each agent reported at its start. The
agents stop ``flux archive extract``, remove their staging directories and report ``interrupted``;
then the archive is removed. Later signals change nothing (a third SIGINT within a second would make
``flux exec`` leave the ranks to be SIGKILLed, staging directories and all); ``flux exec`` still
running ``STOP_GRACE`` seconds after the interrupt is killed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from fluxinfra import idset
from fluxinfra.distribute import agent
from fluxinfra.distribute.errors import DistributeError, FluxCommandError
from fluxinfra.distribute.flux import FluxClient, Instance, parse_exec_error
from fluxinfra.distribute.source import Host, LocalHost, Payload, resolve_source
from fluxinfra.distribute.state import RunState, StateStore, default_state_dir, state_key

__all__ = ["Options", "RankResult", "Report", "distribute", "parse_ranks", "parse_size"]

OK_STATUSES = ("ok", "present", "earlier")
#: seconds after an interrupt before ranks still running are signalled through ``rexec.kill``
REMOTE_GRACE = 5.0
#: seconds after an interrupt before ``flux exec`` (and with it what the ranks still run) is killed
STOP_GRACE = 60.0
_LABELLED = re.compile(r"^(\d+): (.*)$")


@dataclasses.dataclass
class Options:
    """Everything ``fluxinfra distribute`` takes (see the CLI for each option's meaning)."""

    source: str
    ranks: str = "all"
    dest: str = "/var/tmp/fluxinfra-distribute"
    importer: str = "none"
    resume: bool = False
    overwrite: bool = False
    mmap: bool | None = None
    chunksize: int | None = None
    stall_timeout: float = 120.0
    progress_interval: float = 1.0
    state_dir: str | None = None
    staging_dir: str = "/var/tmp/fluxinfra-staging"
    containerd_namespace: str = "k8s.io"
    space_margin: int = 64 << 20


@dataclasses.dataclass
class RankResult:
    rank: int
    host: str
    status: str  # ok | present | earlier | failed | down | lost | stalled
    stage: str = ""
    reason: str = ""
    dest: str = ""
    seconds: dict = dataclasses.field(default_factory=dict)
    imported: list = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES


@dataclasses.dataclass
class Report:
    source: str
    kind: str
    name: str
    digest: str
    bytes: int
    files: int
    topo: str
    depth: int
    targets: list[int]
    lead_copies: int
    mmap: bool
    results: dict[int, RankResult]
    seconds: dict
    notes: list[str] = dataclasses.field(default_factory=list)
    state_file: str = ""
    entries: list[str] = dataclasses.field(default_factory=list)  # names under --dest
    refs: list[str] = dataclasses.field(default_factory=list)  # image names, for importers
    interrupted: int = 0  # the signal that stopped the run, if one did

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results.values())

    def failed(self) -> list[RankResult]:
        return [r for r in self.results.values() if not r.ok]

    def to_json(self) -> dict:
        out = dataclasses.asdict(self)
        out["ok"] = self.ok
        out["results"] = {str(r): dataclasses.asdict(v) for r, v in sorted(self.results.items())}
        return out


# -- input ---------------------------------------------------------------------------------------
def parse_ranks(text: str, size: int) -> list[int]:
    """``all`` or an RFC 22 idset (``0-3,7``) of ranks below ``size``."""
    text = (text or "").strip()
    if text == "all":
        return list(range(size))
    try:
        spans = idset.merge(idset.ranges(text, strict=False))
    except idset.IdsetError:
        spans = []
    if not spans:
        raise DistributeError(f"--ranks {text!r}: not an idset; use all or ranks like "
                              "0-3,7 (ascending ranges)")
    if spans[-1][1] >= size:
        outside = max(spans[-1][0], size)
        raise DistributeError(f"--ranks {text!r}: rank {outside} is outside this instance "
                              f"(ranks 0-{size - 1})")
    return [rank for lo, hi in spans for rank in range(lo, hi + 1)]


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str, option: str = "--chunk-size") -> int:
    """``4M`` -> 4194304 (k/K, m/M, g/G are powers of 1024, as flux archive reads them)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)\s*", str(text))
    if not match:
        raise DistributeError(f"{option} {text!r}: not a size; use bytes or a number with K, M "
                              "or G, e.g. 4M")
    value = int(float(match[1]) * _UNITS[match[2].lower()])
    if option == "--chunk-size" and not (0 < value <= 2**31 - 1):
        raise DistributeError(f"{option} {text!r}: use 1 byte to 2G (flux archive's INT_MAX)")
    return value


def check_options(opts: Options) -> None:
    if not os.path.isabs(opts.dest.replace("{rank}", "0").replace("{host}", "h")):
        raise DistributeError(f"--dest {opts.dest!r}: must be an absolute path (it is resolved "
                              "on every node)")
    unknown = set(re.findall(r"{([^}]*)}", opts.dest)) - {"rank", "host"}
    if unknown:
        raise DistributeError(f"--dest {opts.dest!r}: unknown placeholder {{{sorted(unknown)[0]}}}"
                              "; only {rank} and {host} are substituted")
    if opts.stall_timeout <= 0:
        raise DistributeError(f"--stall-timeout {opts.stall_timeout}: must be more than 0 seconds")
    if opts.progress_interval <= 0:
        raise DistributeError(f"--progress-interval {opts.progress_interval}: must be more than "
                              "0 seconds")


# -- reporting hooks -----------------------------------------------------------------------------
class Listener:
    """Receives what happens; :mod:`.report` renders it (progress bar or one line per rank)."""

    def planned(self, report: Report, instance: Instance) -> None: ...

    def progress(self, rank: int, done: int, total: int) -> None: ...

    def rank_done(self, result: RankResult) -> None: ...

    def imported(self, result: RankResult) -> None: ...

    def note(self, text: str) -> None: ...


#: imports image archives on the nodes after the fan-out, as root, when the agents (running as the
#: instance owner) cannot: (ranks that have the content, payload, options); it updates the results
Importer = Callable[[list[RankResult], Payload, Options], None]


# -- the run -------------------------------------------------------------------------------------
class Distribution:
    def __init__(self, opts: Options, flux: FluxClient, host: Host | None = None,
                 listener: Listener | None = None, remote_flux: str | None = None,
                 importer: Importer | None = None):
        check_options(opts)
        self.importer = importer
        self.opts = opts
        self.flux = flux
        self.host = host or LocalHost()
        self.listener = listener or Listener()
        self.remote_flux = remote_flux or _resolve(flux.argv[-1])
        self.store = StateStore(opts.state_dir or default_state_dir())
        self.proc: subprocess.Popen | None = None  # the running flux archive create or exec
        self.interrupted = 0
        self.interrupted_at = 0.0
        self.hosts: dict[int, str] = {}
        self.lead_rank = -1

    # -- planning --------------------------------------------------------------------------
    def _payload(self, state: RunState | None) -> tuple[Payload, dict]:
        if state is not None:
            payload = Payload(**state.payload)
            manifest = self.host.manifest(payload.directory, payload.entries)
            if manifest["digest"] != state.digest:
                raise DistributeError(
                    f"--resume: SOURCE {self.opts.source!r} changed since the interrupted run "
                    f"(sha256 {state.digest[:12]}... then, {manifest['digest'][:12]}... now): run "
                    "without --resume to distribute the new content")
            return payload, manifest
        staging = os.path.join(self.opts.staging_dir, secrets.token_hex(6))
        payload = resolve_source(self.opts.source, importer=self.opts.importer, host=self.host,
                                 staging=staging)
        return payload, self.host.manifest(payload.directory, payload.entries)

    def run(self) -> Report:
        started = time.monotonic()
        opts = self.opts
        inst = self.flux.probe()
        requested = parse_ranks(opts.ranks, inst.size)
        key = state_key(opts.source, opts.dest, inst.host(0))
        state = self.store.load(key) if opts.resume else None
        if opts.resume and state is None:
            raise DistributeError(
                f"--resume: no unfinished distribution of {opts.source!r} to {opts.dest!r} on "
                f"this instance (looked in {self.store.directory}): run without --resume")
        payload, manifest = self._payload(state)
        if state is None:
            state = RunState(key=key, source=opts.source, dest=opts.dest, importer=opts.importer,
                             digest=manifest["digest"], payload=dataclasses.asdict(payload),
                             targets=requested)
        earlier = state.done() if opts.resume else set()
        targets = [r for r in requested if r not in earlier]
        down = inst.down() | inst.tree.cut_off(inst.down())
        live = [r for r in targets if r not in down]
        copies = inst.tree.copies_sent(live)
        name = f"fluxinfra-{manifest['digest'][:16]}-{secrets.token_hex(3)}"
        report = Report(
            source=opts.source, kind=payload.kind, name=name, digest=manifest["digest"],
            bytes=manifest["bytes"], files=sum(f[0] == "f" for f in manifest["files"]),
            topo=inst.topo, depth=inst.tree.depth(), targets=targets,
            lead_copies=copies.get(0, 0), mmap=False, results={},
            seconds={"prepare": round(time.monotonic() - started, 3)},
            entries=list(payload.entries), refs=list(payload.refs))
        for rank in sorted(earlier & set(requested)):
            report.results[rank] = RankResult(rank, inst.host(rank), "earlier",
                                              reason="done by an earlier run")
        for rank in sorted(set(targets) & down):
            above = [a for a in inst.tree.ancestors(rank) if a in down]
            why = (f"cut off below rank {inst.describe(above[-1:])}, which is "
                   f"{inst.states.get(above[-1], 'down')}" if above
                   else f"broker {inst.states.get(rank, 'down')}")
            report.results[rank] = RankResult(rank, inst.host(rank), "down", "plan", why)
        self.listener.planned(report, inst)
        previous = _install_signal_forwarding(self._interrupt)
        try:
            if live:
                try:
                    self._create_archive(report, payload, inst)
                    if not self.interrupted:
                        self._fan_out(report, payload, manifest, inst, live)
                    else:
                        for rank in live:
                            report.results[rank] = RankResult(
                                rank, inst.host(rank), "failed", "interrupted",
                                f"interrupted by signal {self.interrupted} before the fan-out")
                finally:
                    self._remove_archive(report)
        finally:
            _restore_signals(previous)
            self._remember(report, state, payload)
            report.seconds["total"] = round(time.monotonic() - started, 3)
        report.interrupted = self.interrupted
        return report

    # -- archive -----------------------------------------------------------------------------
    def _create_archive(self, report: Report, payload: Payload, inst: Instance) -> None:
        mmap = self.opts.mmap
        if mmap is None:
            mmap = inst.rank == 0 and inst.host(0) == self.host.hostname()
        started = time.monotonic()
        try:
            self.flux.archive_create(report.name, payload.directory, payload.entries, mmap=mmap,
                                     chunksize=self.opts.chunksize, started=self._started)
        except FluxCommandError as exc:
            if self.interrupted:
                return
            if not mmap or self.opts.mmap:
                raise DistributeError(f"flux archive create failed: {exc.message}") from None
            self.listener.note(f"--mmap refused ({exc.message}); copying into the content "
                               "store instead")
            report.notes.append(f"mmap refused: {exc.message}")
            mmap = False
            try:
                self.flux.archive_create(report.name, payload.directory, payload.entries,
                                         mmap=False, chunksize=self.opts.chunksize,
                                         started=self._started)
            except FluxCommandError as exc:
                if self.interrupted:
                    return
                raise DistributeError(f"flux archive create failed: {exc.message}") from None
        finally:
            self.proc = None
        report.mmap = mmap
        report.seconds["create"] = round(time.monotonic() - started, 3)

    def _remove_archive(self, report: Report) -> None:
        try:
            self.flux.archive_remove(report.name)
        except DistributeError as exc:
            report.notes.append(f"could not remove archive {report.name}: {exc} (remove it "
                                f"with `flux archive remove -f -n {report.name}`)")

    # -- fan-out -------------------------------------------------------------------------------
    def spec(self, report: Report, payload: Payload, manifest: dict) -> dict:
        return {
            "version": 1, "name": report.name, "dest": self.opts.dest,
            "entries": payload.entries, "images": payload.images, "manifest": manifest,
            "import": "none" if self.importer else self.opts.importer,
            "overwrite": self.opts.overwrite,
            "flux": [self.remote_flux], "progress_interval": self.opts.progress_interval,
            "containerd_namespace": self.opts.containerd_namespace,
            "space_margin": self.opts.space_margin,
            "hosts": {str(r): h for r, h in self.hosts.items()},
            # the rank on the host where SOURCE lives copies it instead of extracting it
            "local_copy": {"rank": self.lead_rank, "directory": payload.directory},
        }

    def _fan_out(self, report: Report, payload: Payload, manifest: dict, inst: Instance,
                 live: list[int]) -> None:
        started = time.monotonic()
        self.hosts = inst.hosts
        here = self.host.hostname()
        self.lead_rank = next((r for r in live if inst.host(r) == here), -1)
        command = [self.remote_flux, "python", "-c", agent_source(), "run"]
        self._started(self.flux.exec_popen(live, command))
        lines: queue.Queue = queue.Queue()
        readers = [threading.Thread(target=_pump, args=(stream, name, lines), daemon=True)
                   for stream, name in ((self.proc.stdout, "out"), (self.proc.stderr, "err"))]
        for thread in readers:
            thread.start()
        threading.Thread(target=_feed, args=(self.proc.stdin, self.spec(report, payload,
                         manifest)), daemon=True).start()
        collector = Collector(inst, live, self.listener)
        signalled: set[int] = set()  # ranks sent SIGINT through rexec.kill
        killed = False
        eof = 0
        while eof < 2:
            try:
                stream, line = lines.get(timeout=0.5)
            except queue.Empty:
                stream = None
            if stream is not None and line is None:
                eof += 1
            elif stream is not None:
                collector.line(stream, line)
            if self.proc.poll() is not None:
                continue
            if self.interrupted:
                since = time.monotonic() - self.interrupted_at
                if since > STOP_GRACE and not killed:
                    self.listener.note(f"flux exec still running {STOP_GRACE:.0f} s after the "
                                       "interrupt: killing it")
                    self._stop(collector, grace=0)
                    killed = True
                elif not self.flux.signals_pass or since > REMOTE_GRACE:
                    self._signal_ranks(collector, signalled)
            elif collector.stalled(self.opts.stall_timeout):
                self._stop(collector, grace=10.0)
        self.proc.wait()
        report.results.update(collector.results(self.opts.stall_timeout, self.interrupted))
        report.seconds["fan_out"] = round(time.monotonic() - started, 3)
        if self.importer and payload.images and not self.interrupted:
            started = time.monotonic()
            done = [r for r in report.results.values() if r.status in ("ok", "present")]
            self.importer(done, payload, self.opts)
            for result in done:
                self.listener.imported(result)
            report.seconds["import"] = round(time.monotonic() - started, 3)

    def _started(self, proc: subprocess.Popen) -> None:
        """``proc`` (flux archive create, flux exec) is what an interrupt now stops."""
        self.proc = proc
        if self.interrupted:  # the signal came while it was being started
            self.flux.signal(proc, signal.SIGINT)

    def _interrupt(self, signum: int, frame) -> None:
        if self.interrupted:
            return  # once is enough: a third SIGINT would make flux exec abandon the ranks
        self.interrupted = signum
        self.interrupted_at = time.monotonic()
        proc = self.proc
        if proc is not None:
            # to the process group: flux exec forwards one SIGINT to every rank's agent
            self.flux.signal(proc, signal.SIGINT)

    def _signal_ranks(self, collector: Collector, signalled: set[int],
                      signum: int = signal.SIGINT) -> None:
        """``signum`` through their brokers (``rexec.kill``) to the ranks still running that
        reported their pid and have not had it."""
        pids = {r: p for r, p in collector.pids.items()
                if r in collector.pending() and r not in signalled}
        if not pids:
            return
        signalled.update(pids)
        for rank, answer in sorted(self.flux.kill_remote(pids, signum).items()):
            if answer != "ok" and rank in collector.pending():
                self.listener.note(f"rank {rank}: rexec.kill: {answer}")

    def _stop(self, collector: Collector, grace: float) -> None:
        """Stop what the ranks still run: SIGINT (when ``grace``), then SIGKILL once ``grace``
        seconds are over."""
        if grace > 0:
            self._signal_all(collector, signal.SIGINT)
            try:
                self.proc.wait(timeout=grace)
                return
            except subprocess.TimeoutExpired:
                pass
        self._signal_all(collector, signal.SIGKILL)
        if self.proc.poll() is None and not self.flux.signals_pass:
            self.proc.kill()  # kubectl exec: the brokers have been told to kill the agents

    def _signal_all(self, collector: Collector, signum: int) -> None:
        """``signum`` to flux exec's process group (flux exec forwards SIGINT to every rank;
        SIGKILL ends it, and the brokers then SIGKILL what it started), or through the brokers
        where the prefix carries no signals."""
        if not self.flux.signal(self.proc, signum):
            self._signal_ranks(collector, set(), signum)

    # -- state -------------------------------------------------------------------------------
    def _remember(self, report: Report, state: RunState, payload: Payload) -> None:
        for rank, result in report.results.items():
            state.ranks[rank] = {"status": result.status, "host": result.host,
                                 "reason": result.reason}
        state.targets = sorted(set(state.targets) | set(report.targets))
        if report.ok and set(report.results) >= set(state.targets):
            self.store.delete(state.key)
            if payload.staged:
                self.host.remove(payload.staged)
        else:
            report.state_file = str(self.store.save(state))


class Collector:
    """Turns ``flux exec -l`` output into per-rank progress and results."""

    def __init__(self, inst: Instance, ranks: Iterable[int], listener: Listener):
        self.inst = inst
        self.ranks = list(ranks)
        self.listener = listener
        self.done: dict[int, RankResult] = {}
        self.last_seen = {r: time.monotonic() for r in self.ranks}
        self.exec_errors: dict[int, str] = {}
        self.stderr: dict[int, str] = {}
        self.dest: dict[int, str] = {}
        self.pids: dict[int, int] = {}  # the pid rexec started on each rank (its process group)

    def line(self, stream: str, line: str) -> None:
        line = line.rstrip("\n")
        error = parse_exec_error(line)
        if error:
            self.exec_errors[error[0]] = error[1]
            return
        match = _LABELLED.match(line)
        if not match or int(match[1]) not in self.last_seen:
            return
        rank, text = int(match[1]), match[2]
        self.last_seen[rank] = time.monotonic()
        if not text.startswith(agent.EVENT_PREFIX):
            if stream == "err" and text.strip():
                self.stderr[rank] = text.strip()
            return
        try:
            event = json.loads(text[len(agent.EVENT_PREFIX):])
        except ValueError:
            return
        kind = event.get("event")
        if kind == "start":
            self.dest[rank] = event.get("dest", "")
            if isinstance(event.get("pid"), int):
                self.pids[rank] = event["pid"]
        elif kind == "progress":
            self.listener.progress(rank, int(event.get("bytes", 0)), int(event.get("total", 0)))
        elif kind == "done":
            result = RankResult(rank, self.inst.hosts.get(rank) or event.get("host", "?"),
                                event.get("status", "failed"), event.get("stage", ""),
                                event.get("reason", ""), event.get("dest", self.dest.get(rank, "")),
                                event.get("seconds", {}), event.get("imported", []))
            self.done[rank] = result
            self.listener.rank_done(result)

    def pending(self) -> list[int]:
        return [r for r in self.ranks if r not in self.done and r not in self.exec_errors]

    def stalled(self, timeout: float) -> bool:
        """True when every unfinished rank has been silent for ``timeout`` seconds."""
        now = time.monotonic()
        pending = self.pending()
        return bool(pending) and all(now - self.last_seen[r] > timeout for r in pending)

    def results(self, timeout: float, interrupted: int) -> dict[int, RankResult]:
        out = dict(self.done)
        for rank in self.ranks:
            lost = "No route to host" in self.exec_errors.get(rank, "")
            relabelled = rank in out and lost and out[rank].status == "failed"
            if relabelled:
                # its extract failed because the tree above it went away, and its report came
                # through before flux exec noticed: the broker's loss is the cause to report
                failed = out.pop(rank)
                self.listener.note(f"rank {self.inst.describe([rank])} failed at {failed.stage} "
                                   f"({failed.reason}), then its broker was unreachable")
            if rank in out:
                continue
            host = self.inst.host(rank)
            if rank in self.exec_errors:
                reason = self.exec_errors[rank]
                status = "lost" if lost else "failed"
                if lost:
                    reason = "its broker went away during the run (flux exec: No route to host)"
                    above = [a for a in self.inst.tree.ancestors(rank)
                             if "No route to host" in self.exec_errors.get(a, "")]
                    if above:
                        reason = (f"cut off when rank {self.inst.describe(above[-1:])} above "
                                  "it went away (flux exec: No route to host)")
                result = RankResult(rank, host, status, "exec", reason)
            elif interrupted:
                result = RankResult(rank, host, "failed", "interrupted",
                                    f"interrupted by signal {interrupted}")
            else:
                last = self.stderr.get(rank, "no output")
                result = RankResult(rank, host, "stalled", "exec",
                                    f"no progress for {timeout:.0f} s (last: {last})")
            out[rank] = result
            if not relabelled:  # the listener has had this rank once already
                self.listener.rank_done(result)
        return out


def agent_source() -> str:
    return Path(agent.__file__).read_text()


def _resolve(program: str) -> str:
    import shutil

    return shutil.which(program) or program


def _pump(stream, name: str, lines: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        lines.put((name, line))
    lines.put((name, None))


def _feed(stdin, spec: dict) -> None:
    try:
        stdin.write(json.dumps(spec))
        stdin.close()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _install_signal_forwarding(handler: Callable) -> dict:
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}


def _restore_signals(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def distribute(opts: Options, flux: FluxClient | None = None, host: Host | None = None,
               listener: Listener | None = None) -> Report:
    """Distribute ``opts.source`` to ``opts.ranks`` of the instance ``flux`` talks to."""
    return Distribution(opts, flux or FluxClient(), host, listener).run()
