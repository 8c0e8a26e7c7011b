"""The Flux commands a distribution uses, run as subprocesses of one ``flux`` command line.

``FluxClient(["flux"])`` runs ``flux ...`` here (``FLUX_URI`` from the environment, or ``flux
proxy``); ``FluxClient(["runuser", "-u", "flux", "--", "/opt/flux/bin/flux"])`` or a ``kubectl
exec ... nsenter ... setpriv ...`` prefix runs the same commands as the instance owner or on the
lead node of a Kubernetes instance (see :mod:`fluxinfra.distribute.kube`).

Behaviour relied on (flux-core 0.88, read from its source and checked against the binaries):

- ``flux archive create -n NAME [--mmap] [--chunksize N] -C DIR PATH...`` commits the RFC 37
  archive to KVS key ``archive.NAME``; it fails ("archive.NAME: key exists") unless
  ``--overwrite``; ``--mmap`` works only on rank 0 and the files must stay unchanged while the
  archive exists; ``flux archive remove -f -n NAME`` unlinks ``archive.NAME`` and
  ``archive.NAME_blobs`` and unmaps the files.
- ``flux exec -r IDSET -l CMD`` runs CMD on each rank, broadcasts stdin, labels output
  ``RANK: ``; a rank that is down or whose broker dies is reported on stderr as
  ``flux-exec: Error: rank N: CMD: No route to host`` (exit 68); non-zero exits are summed up
  as ``[1-2]: Exit 1``; a rank outside the instance is refused up front
  ("One or more invalid --ranks specified: 5", exit 1).
- ``flux exec`` forwards SIGINT and SIGTERM to every rank's process (the broker's ``rexec.kill``,
  which signals the process group it started); a second SIGINT is forwarded too and prints
  "interrupt (Ctrl+C) one more time within 1.00 sec to exit", a third within that second makes it
  exit 1 ("[0-3]: command still running at exit") and the brokers SIGKILL what it leaves. Its
  standard output, when a pipe, is block-buffered (stdio, 4 KiB); standard error is not.
- ``rexec.kill`` (``{"pid": P, "signum": S}`` to a rank's broker) signals the process group of a
  process that rank's ``rexec`` started, and refuses any other pid ("pid P does not belong to any
  subprocess"), so a recorded pid cannot hit a stranger.
- ``flux overlay status --no-pretty`` prints ``RANK HOST: STATE[ reason]`` depth first, STATE one
  of full, partial, degraded, lost, offline.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from collections.abc import Callable, Iterable, Sequence

from fluxinfra.distribute.errors import DistributeError, FluxCommandError
from fluxinfra.distribute.topology import TopologyError, Tree
from fluxinfra.idset import encode as encode_idset

__all__ = ["FluxClient", "Instance", "DOWN_STATES", "parse_overlay_status", "parse_exec_error"]

#: overlay states of a broker that cannot run anything
DOWN_STATES = frozenset({"lost", "offline"})

_STATUS_LINE = re.compile(r"^(\d+)\s+(\S+):\s+(\w+)(?:\s+(.*))?$")
_EXEC_ERROR = re.compile(r"^flux-exec: Error: rank (\d+): (?:[^:]*): (.*)$")

#: signals process groups that the ranks' ``rexec`` started (pids on stdin as JSON); one line per
#: rank: ``RANK ok`` or ``RANK error text``
_KILL_SNIPPET = (
    "import json, sys, flux\n"
    "want = json.load(sys.stdin)\n"
    "h = flux.Flux()\n"
    "sent = {r: h.rpc('rexec.kill', {'pid': p, 'signum': want['signum']}, nodeid=int(r))\n"
    "        for r, p in want['pids'].items()}\n"
    "for r, f in sent.items():\n"
    "    try:\n"
    "        f.get()\n"
    "        print(r, 'ok')\n"
    "    except OSError as exc:\n"
    "        print(r, exc.strerror or exc)\n"
)

_TOPOLOGY_SNIPPET = (
    "import json, flux\n"
    "print(json.dumps(flux.Flux().rpc('overlay.topology', {'rank': 0}).get()))\n"
)


def parse_overlay_status(text: str) -> dict[int, tuple[str, str, str]]:
    """``flux overlay status --no-pretty`` -> ``{rank: (host, state, reason)}``."""
    out = {}
    for line in text.splitlines():
        match = _STATUS_LINE.match(line.strip())
        if match:
            out[int(match[1])] = (match[2], match[3], (match[4] or "").strip())
    return out


def parse_exec_error(line: str) -> tuple[int, str] | None:
    """``flux-exec: Error: rank 3: sh: No route to host`` -> ``(3, 'No route to host')``."""
    match = _EXEC_ERROR.match(line.strip())
    return (int(match[1]), match[2]) if match else None


@dataclasses.dataclass
class Instance:
    """What a distribution needs to know about the instance it talks to."""

    size: int
    rank: int
    topo: str
    tree: Tree
    hosts: dict[int, str]
    states: dict[int, str]

    def host(self, rank: int) -> str:
        return self.hosts.get(rank, "?")

    def down(self) -> set[int]:
        return {r for r, s in self.states.items() if s in DOWN_STATES}

    def describe(self, ranks: Iterable[int]) -> str:
        ranks = sorted(ranks)
        return ", ".join(f"{r} ({self.host(r)})" for r in ranks)


class FluxClient:
    """Runs ``flux`` subcommands through one command prefix.

    ``signals_pass``: a signal sent to the process group of a command started through the prefix
    reaches flux itself. True for flux run here and for prefixes that keep it in their process
    group (``runuser``, ``sudo``, ``setpriv``, ``env``: ``runuser`` blocks SIGINT itself and
    passes on nothing but SIGTERM, which is why the group is signalled, not the prefix's
    process); False where the prefix carries no signals to flux (``kubectl exec``): then the
    ranks are stopped through ``rexec.kill`` alone.
    """

    def __init__(self, argv: Sequence[str] = ("flux",), env: dict[str, str] | None = None, *,
                 signals_pass: bool = True):
        if not argv:
            raise DistributeError("--flux-command: empty; give the flux command, e.g. flux")
        self.argv = list(argv)
        self.env = env
        self.signals_pass = signals_pass

    # -- plain commands ----------------------------------------------------------------------
    def run(self, *args: str, input: str | None = None, timeout: float | None = 120) -> str:
        argv = self.argv + list(args)
        try:
            proc = subprocess.run(argv, input=input, capture_output=True, text=True,
                                  timeout=timeout, env=self.env)
        except FileNotFoundError:
            raise DistributeError(f"--flux-command: {argv[0]!r} was not found: put flux on "
                                  "PATH or name it with --flux-command") from None
        except subprocess.TimeoutExpired:
            raise FluxCommandError(args, -1, f"no answer within {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise FluxCommandError(args, proc.returncode, proc.stderr)
        return proc.stdout

    def getattr(self, name: str) -> str:
        return self.run("getattr", name).strip()

    def probe(self) -> Instance:
        """Size, rank, topology, host names and overlay state of the instance."""
        try:
            size = int(self.getattr("size"))
        except FluxCommandError as exc:
            raise DistributeError(
                f"cannot reach a Flux instance ({exc.message}): run inside it (FLUX_URI, e.g. "
                "local:///run/flux/local, or `flux proxy URI`) as its owner (e.g. `runuser -u "
                "flux --`), or name the command with --flux-command") from None
        rank = int(self.getattr("rank"))
        topo = self.getattr("tbon.topo")
        status = parse_overlay_status(self.run("overlay", "status", "--no-pretty"))
        return Instance(
            size=size, rank=rank, topo=topo, tree=self.tree(topo, size),
            hosts={r: h for r, (h, _, _) in status.items()},
            states={r: s for r, (_, s, _) in status.items()},
        )

    def tree(self, topo: str, size: int) -> Tree:
        """The live tree (``overlay.topology``), or the one ``tbon.topo`` implies."""
        try:
            tree = Tree.from_json(json.loads(self.run("python", "-c", _TOPOLOGY_SNIPPET)))
            if tree.size == size:
                return tree
        except (FluxCommandError, TopologyError, ValueError):
            pass
        return Tree.from_spec(topo, size)

    # -- archives ------------------------------------------------------------------------------
    def archive_create(self, name: str, directory: str, paths: Sequence[str], *,
                       mmap: bool, chunksize: int | None, overwrite: bool = True,
                       started: Callable[[subprocess.Popen], None] | None = None) -> None:
        """``flux archive create``; ``started`` receives the process (in a session of its own,
        like :meth:`exec_popen`'s, so that it can be interrupted by :meth:`signal`)."""
        args = ["archive", "create", "-n", name, "-C", directory]
        if overwrite:
            args.append("--overwrite")
        if mmap:
            args.append("--mmap")
        if chunksize is not None:
            args.append(f"--chunksize={chunksize}")
        args += ["--", *paths]
        proc = self._popen(args, stdin=subprocess.DEVNULL)
        if started is not None:
            started(proc)
        _, stderr = proc.communicate()
        if proc.returncode != 0:
            raise FluxCommandError(args, proc.returncode, stderr)

    def archive_remove(self, name: str) -> None:
        self.run("archive", "remove", "-f", "-n", name)

    def archive_exists(self, name: str) -> bool:
        try:
            self.run("archive", "list", "-n", name)
        except FluxCommandError:
            return False
        return True

    # -- exec ----------------------------------------------------------------------------------
    def exec_popen(self, ranks: Iterable[int], command: Sequence[str]) -> subprocess.Popen:
        """``flux exec -r IDSET -l -d / COMMAND`` with pipes for stdin, stdout and stderr."""
        # -d /: the caller's working directory need not exist on the other nodes
        return self._popen(["exec", "-r", encode_idset(list(ranks)), "-l", "-d", "/",
                            *command], stdin=subprocess.PIPE)

    def _popen(self, args: Sequence[str], stdin) -> subprocess.Popen:
        # A session of its own: a Ctrl-C on the terminal reaches only us, and we forward exactly
        # one SIGINT (three in a second make flux exec quit without waiting for the ranks).
        argv = self.argv + list(args)
        try:
            return subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, bufsize=1, env=self.env,
                                    start_new_session=True)
        except FileNotFoundError:
            raise DistributeError(f"--flux-command: {argv[0]!r} was not found: put flux on "
                                  "PATH or name it with --flux-command") from None

    def signal(self, proc: subprocess.Popen, signum: int) -> bool:
        """Send ``signum`` to a command :meth:`_popen` started: to its whole process group, so
        that it reaches flux behind a prefix that does not pass it on (``runuser``). False when
        the prefix carries no signals (``signals_pass``): nothing is sent."""
        if not self.signals_pass or proc.poll() is not None:
            return False
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            return False
        except PermissionError:  # flux runs as another user, e.g. under sudo: sudo relays it
            proc.send_signal(signum)
        return True

    def kill_remote(self, pids: dict[int, int], signum: int) -> dict[int, str]:
        """Signal, through each rank's broker (``rexec.kill``), the process group of the process
        that rank's ``flux exec`` started with pid ``pids[rank]``; rank -> ``ok`` or the error.
        Needs flux's Python bindings on this side (``flux python``)."""
        if not pids:
            return {}
        payload = json.dumps({"signum": int(signum), "pids": {str(r): p for r, p in pids.items()}})
        try:
            out = self.run("python", "-c", _KILL_SNIPPET, input=payload, timeout=60)
        except FluxCommandError as exc:
            return {r: f"rexec.kill not sent: {exc.message}" for r in pids}
        answers = {r: "no answer" for r in pids}
        for line in out.splitlines():
            rank, _, text = line.partition(" ")
            if rank.isdigit():
                answers[int(rank)] = text.strip()
        return answers
