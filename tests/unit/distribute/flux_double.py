#!/usr/bin/env python3
"""TEST DOUBLE for the parts of ``flux`` that ``fluxinfra distribute`` uses. It is NOT Flux.

CI has no Flux build, so the distribution's planning, chunking, verification, resume and reporting
are tested against this stand-in for one instance of N brokers on this machine. Its answers,
messages and exit codes were recorded from flux-core 0.88.0 (``flux start --test-size=N``) and
``test_double_matches_flux.py`` replays the same script through both wherever a real Flux exists.

The instance lives in ``$FLUX_DOUBLE_DIR``: ``instance.json`` (size, tbon.topo, host names, the
pid of a placeholder process per rank standing in for its broker, the KVS) and ``blobs/`` (the
content store, sha1 blobrefs as flux's default ``content.hash``). The rank a command talks to is
read from ``FLUX_URI`` (``local://$FLUX_DOUBLE_DIR/rank<N>/local``), as ``flux exec`` sets it for
the processes it starts. Killing a rank's placeholder (its ``broker.pid``) is a broker dying:
``flux exec`` then reports that rank and every rank below it "No route to host" (exit 68), and
``flux overlay status`` shows them lost and their ancestors degraded, as flux-core 0.88 does.

Implemented: version, getattr, overlay status, python, archive create|extract|list|remove (RFC 37
blobvec, chunked at --chunksize, default 1M; a file is sized before its blocks are written, like
libarchive), exec (-r, -l, -n, -d; stdin broadcast; standard output block-buffered when it is not a
terminal, as stdio does in flux-exec, standard error not; SIGINT and SIGTERM forwarded to the
process group of every command still running, the second SIGINT announcing "one more time", a third
within a second leaving with the ranks still running named, which the brokers then SIGKILL) and, in
``flux python``, the ``rexec.kill`` RPC (the process group of a pid this rank's exec started,
anything else refused). Anything else fails loudly. ``FLUX_DOUBLE_EXTRACT_DELAY`` and
``FLUX_DOUBLE_CREATE_DELAY`` (seconds per blob) slow extraction and archive creation down for tests
that interrupt them; ``FLUX_DOUBLE_HANG_RANKS`` (an id list) makes extraction on those ranks hang.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # the repository: the double shares the tree code

from fluxinfra import idset  # noqa: E402
from fluxinfra.distribute.topology import Tree  # noqa: E402

DIR = Path(os.environ.get("FLUX_DOUBLE_DIR", "/nonexistent-flux-double"))
STATE = DIR / "instance.json"


def die(prog: str, message: str, code: int = 1) -> None:
    sys.stderr.write(f"{prog}: {message}\n")
    sys.exit(code)


class Instance:
    def __init__(self):
        if not STATE.exists():
            die("flux", "flux_open: No such file or directory")
        self.lock = open(DIR / "lock", "a+")  # noqa: SIM115
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.data = json.loads(STATE.read_text())
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        self.size = self.data["size"]
        self.tree = Tree.from_spec(self.data["topo"], self.size)

    def update(self, change) -> None:
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            self.data = json.loads(STATE.read_text())
            change(self.data)
            tmp = STATE.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data))
            os.replace(tmp, STATE)
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)

    def reload(self) -> None:
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        self.data = json.loads(STATE.read_text())
        fcntl.flock(self.lock, fcntl.LOCK_UN)

    @property
    def kvs(self) -> dict:
        return self.data["kvs"]

    def host(self, rank: int) -> str:
        return self.data["hosts"][rank]

    def alive(self, rank: int) -> bool:
        pid = self.data["pids"][rank]
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        # a zombie placeholder is a dead broker too
        try:
            return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
        except OSError:
            return False

    def lost(self) -> set[int]:
        """Ranks whose broker died, and every rank below one."""
        dead = {r for r in range(self.size) if not self.alive(r)}
        return dead | self.tree.cut_off(dead)

    def my_rank(self) -> int:
        uri = os.environ.get("FLUX_URI", "")
        prefix = f"local://{DIR}/rank"
        if not uri.startswith(prefix):
            die("flux", "flux_open: No such file or directory")
        rank = int(uri[len(prefix):].split("/")[0])
        if rank in self.lost():
            die("flux", "flux_open: Connection refused")
        return rank


def uri(rank: int) -> str:
    return f"local://{DIR}/rank{rank}/local"


# -- getattr / overlay / python -------------------------------------------------------------------
def cmd_getattr(inst: Instance, args: list[str]) -> int:
    rank = inst.my_rank()
    values = {"rank": rank, "size": inst.size, "tbon.topo": inst.data["topo"],
              "hostlist": ",".join(inst.data["hosts"]), "broker.pid": inst.data["pids"][rank],
              "content.hash": "sha1"}
    if len(args) != 1 or args[0] not in values:
        die("flux-getattr", f"{args[0] if args else ''}: No such file or directory")
    print(values[args[0]])
    return 0


def cmd_overlay(inst: Instance, args: list[str]) -> int:
    inst.my_rank()
    if args[:1] != ["status"] or "--no-pretty" not in args:
        die("flux-double", "only `overlay status --no-pretty` is implemented", 97)
    dead = {r for r in range(inst.size) if not inst.alive(r)}
    below = inst.tree.cut_off(dead)

    def visit(rank: int) -> None:
        if rank in dead:
            state = "lost lost connection"
        elif rank in below:
            state = "lost"
        elif any(rank in inst.tree.ancestors(d) for d in dead | below):
            state = "degraded"
        else:
            state = "full"
        print(f"{rank} {inst.host(rank)}: {state}")
        for child in inst.tree.children(rank):
            visit(child)

    visit(0)
    return 0


def cmd_python(inst: Instance, args: list[str]) -> int:
    """Python with a ``flux`` module whose one RPC is ``overlay.topology`` (the shape of 0.88's)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(HERE / "flux_double_python"), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    os.execve(sys.executable, [sys.executable, *args], env)
    return 127


# -- archives ----------------------------------------------------------------------------------
def parse_size(text: str) -> int:
    units = {"k": 1 << 10, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def archive_files(root: str, path: str) -> list[str]:
    full = os.path.join(root, path)
    if os.path.isdir(full) and not os.path.islink(full):
        out = []
        for base, dirs, files in os.walk(full):
            dirs.sort()
            rel = os.path.relpath(base, root)
            out.append(rel)
            out.extend(os.path.join(rel, f) for f in sorted(files))
            out.extend(os.path.join(rel, d) for d in dirs if os.path.islink(os.path.join(base, d)))
        return out
    return [path]


def cmd_archive(inst: Instance, args: list[str]) -> int:
    sub, rest = (args[0], args[1:]) if args else ("", [])
    opts = {"name": "main", "directory": None, "chunksize": "1M", "paths": []}
    flags = set()
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("-n", "--name", "-C", "--directory"):
            opts["name" if a in ("-n", "--name") else "directory"] = rest[i + 1]
            i += 2
            continue
        if a.startswith("--chunksize="):
            opts["chunksize"] = a.split("=", 1)[1]
        elif a.startswith("--waitcreate"):
            flags.add("waitcreate")
            opts["waitcreate"] = a.split("=", 1)[1] if "=" in a else ""
        elif a == "--":
            opts["paths"].extend(rest[i + 1:])
            break
        elif a.startswith("-"):
            flags.add(a.lstrip("-"))
        else:
            opts["paths"].append(a)
        i += 1
    rank = inst.my_rank()
    key = f"archive.{opts['name']}"
    if sub == "create":
        return archive_create(inst, rank, key, opts, flags)
    if sub == "extract":
        return archive_extract(inst, rank, key, opts, flags)
    if sub == "list":
        if key not in inst.kvs:
            die("flux-archive", f"KVS lookup {key}: No such file or directory")
        for entry in inst.kvs[key]:
            print(entry["path"])
        return 0
    if sub == "remove":
        if key not in inst.kvs and "f" not in flags and "force" not in flags:
            die("flux-archive", f"{key} does not exist")
        inst.update(lambda d: [d["kvs"].pop(k, None) for k in (key, key + "_blobs")])
        return 0
    die("flux-double", f"archive {sub}: not implemented", 97)
    return 97


def archive_create(inst: Instance, rank: int, key: str, opts: dict, flags: set) -> int:
    if not opts["paths"]:
        die("flux-archive", "usage: flux archive create [OPTIONS] PATH ...")
    if "mmap" in flags and rank > 0:
        die("flux-archive", "--mmap only works on the rank 0 broker")
    if key in inst.kvs and "overwrite" not in flags:
        die("flux-archive", f"{key}: key exists")
    root = opts["directory"] or "."
    if not os.path.isdir(root):
        die("flux-archive", f"chdir {root}: No such file or directory")
    chunk = parse_size(opts["chunksize"]) or (1 << 62)
    delay = float(os.environ.get("FLUX_DOUBLE_CREATE_DELAY", "0"))
    blobs = DIR / "blobs"
    blobs.mkdir(exist_ok=True)
    archive = []
    for path in opts["paths"]:
        if not os.path.lexists(os.path.join(root, path)):
            die("flux-archive", f"{path}: No such file or directory")
        for rel in archive_files(root, path):
            full = os.path.join(root, rel)
            st = os.lstat(full)
            entry = {"path": os.path.normpath(rel), "mode": st.st_mode, "size": st.st_size,
                     "mtime": int(st.st_mtime), "ctime": int(st.st_ctime)}
            if os.path.islink(full):
                entry.update(data=os.readlink(full), size=0)
            elif os.path.isfile(full) and st.st_size:
                data = []
                with open(full, "rb") as handle:
                    offset = 0
                    while block := handle.read(chunk):
                        ref = "sha1-" + hashlib.sha1(block).hexdigest()
                        (blobs / ref).write_bytes(block)
                        time.sleep(delay)
                        data.append([offset, len(block), ref])
                        offset += len(block)
                entry.update(encoding="blobvec", data=data)
            elif os.path.isfile(full):
                entry.update(encoding="base64", data=base64.b64encode(b"").decode())
            archive.append(entry)
    inst.update(lambda d: d["kvs"].__setitem__(key, archive))
    return 0


def archive_extract(inst: Instance, rank: int, key: str, opts: dict, flags: set) -> int:
    if opts["directory"]:
        try:
            os.chdir(opts["directory"])
        except OSError as exc:
            die("flux-archive", f"chdir {opts['directory']}: {exc.strerror}")
    if key not in inst.kvs:
        if "waitcreate" in flags:
            die("flux-archive", f"{key}: key was not created within timeout window")
        die("flux-archive", f"KVS lookup {key}: No such file or directory")
    delay = float(os.environ.get("FLUX_DOUBLE_EXTRACT_DELAY", "0"))
    if str(rank) in os.environ.get("FLUX_DOUBLE_HANG_RANKS", "").split(","):
        time.sleep(3600)  # a rank whose extract never makes progress (a hung filesystem)
    for entry in inst.kvs[key]:
        path = entry["path"]
        mode = entry["mode"]
        if os.path.lexists(path) and "overwrite" not in flags and not os.path.isdir(path):
            die("flux-archive", f"{path}: write: Attempt to overwrite existing file")
        if entry.get("encoding") is None and isinstance(entry.get("data"), str):
            os.symlink(entry["data"], path)
        elif (mode & 0o170000) == 0o040000:
            os.makedirs(path, exist_ok=True)
        else:
            with open(path, "wb") as handle:
                handle.truncate(entry["size"])  # sized first, blocks after (as libarchive)
                for offset, size, ref in entry.get("data") or []:
                    blob = DIR / "blobs" / ref
                    if not blob.exists():
                        die("flux-archive", f"{path}: error loading offset={offset} size={size} "
                                            f"from {ref}: No such file or directory")
                    if rank in inst.lost():
                        die("flux-archive", f"{path}: error loading offset={offset} "
                                            f"size={size} from {ref}: Connection reset by peer")
                    handle.seek(offset)
                    handle.write(blob.read_bytes())
                    handle.flush()
                    os.fsync(handle.fileno())
                    time.sleep(delay)
            os.chmod(path, mode & 0o777 & ~_umask())
    return 0


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- exec --------------------------------------------------------------------------------------
def parse_idset(text: str) -> list[int] | None:
    try:
        return idset.decode(text)
    except idset.IdsetError:
        return None


def encode_idset(ids: list[int]) -> str:
    """flux exec's exit summary form: ``3`` alone, ``[0-2,5]`` for more than one rank."""
    return idset.encode(ids, brackets=True)


def cmd_exec(inst: Instance, args: list[str]) -> int:
    inst.my_rank()
    ranks_arg, label, noinput, cwd = "all", False, False, None
    while args and args[0].startswith("-"):
        a = args.pop(0)
        if a in ("-r", "--rank"):
            ranks_arg = args.pop(0)
        elif a.startswith("--rank="):
            ranks_arg = a.split("=", 1)[1]
        elif a in ("-l", "--label-io"):
            label = True
        elif a in ("-n", "--noinput"):
            noinput = True
        elif a in ("-d", "--dir"):
            cwd = args.pop(0)
        else:
            die("flux-double", f"exec {a}: not implemented", 97)
    if ranks_arg == "all":
        ranks = list(range(inst.size))
    else:
        ranks = parse_idset(ranks_arg)
        if ranks is None:
            die("flux-exec", f"failed to decode idset '{ranks_arg}': Invalid argument")
        if ranks and ranks[-1] >= inst.size:
            die("flux-exec", f"One or more invalid --ranks specified: {ranks_arg}")
    if not args:
        die("flux-exec", "No targets specified")
    stdin = b"" if noinput else sys.stdin.buffer.read()
    exit_code, exitsets, out_lock = 0, {}, threading.Lock()
    stdout = _StdioBuffer(sys.stdout.buffer)
    procs: dict[int, subprocess.Popen] = {}
    reported: set[int] = set()

    def error(rank: int, message: str, code: int) -> None:
        nonlocal exit_code
        with out_lock:
            sys.stderr.write(f"flux-exec: Error: rank {rank}: {args[0]}: {message}\n")
            sys.stderr.flush()
        exit_code = max(exit_code, code)
        reported.add(rank)

    started: dict[str, int] = {}
    sigints = {"count": 0, "last": 0.0}

    def forward_signal(signum, frame) -> None:
        hanging = [r for r, proc in procs.items() if proc.poll() is None]
        if (signum == signal.SIGINT and sigints["count"] >= 2
                and time.monotonic() - sigints["last"] < 1.0):
            with out_lock:
                stdout.flush()
                sys.stderr.write(f"{encode_idset(hanging)}: command still running at exit\n")
                sys.stderr.flush()
            for rank in hanging:  # the brokers kill what a client leaves behind (disconnect)
                _killpg(procs[rank].pid, signal.SIGKILL)
            forget()
            os._exit(1)
        for rank in hanging:
            _killpg(procs[rank].pid, signum)
        if signum == signal.SIGINT:
            if sigints["count"]:
                with out_lock:
                    sys.stderr.write("interrupt (Ctrl+C) one more time within 1.00 sec to "
                                     "exit\n")
                    sys.stderr.flush()
            sigints["last"] = time.monotonic()
            sigints["count"] += 1

    def forget() -> None:
        inst.update(lambda d: [d["rexec"][r].remove(pid) for r, pid in started.items()])

    # before anything starts, as flux exec does: a command inherits the default disposition (a
    # handler is reset at exec; an ignored SIGINT, as bash gives `cmd &`, would be inherited)

    signal.signal(signal.SIGINT, forward_signal)
    signal.signal(signal.SIGTERM, forward_signal)
    lost = inst.lost()
    for rank in ranks:
        if rank in lost:
            error(rank, "No route to host", 68)
            continue
        env = dict(os.environ, FLUX_URI=uri(rank))
        try:
            # a process group each, as rexec makes (rexec.kill and flux exec signal the group)
            procs[rank] = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, env=env, cwd=cwd,
                                           start_new_session=True)
        except FileNotFoundError:
            error(rank, "error launching process: No such file or directory", 127)
        except PermissionError:
            error(rank, "error launching process: Permission denied", 126)

    def forward(rank: int, stream, out) -> None:
        for line in iter(stream.readline, b""):
            with out_lock:
                out.write((f"{rank}: " if label else "").encode() + line)
                if out is not stdout:
                    out.flush()

    started.update({str(rank): proc.pid for rank, proc in procs.items()})
    inst.update(lambda d: [d.setdefault("rexec", {}).setdefault(r, []).append(pid)
                           for r, pid in started.items()])
    threads = []
    for rank, proc in procs.items():
        for stream, out in ((proc.stdout, stdout), (proc.stderr, sys.stderr.buffer)):
            t = threading.Thread(target=forward, args=(rank, stream, out), daemon=True)
            t.start()
            threads.append(t)
        try:
            proc.stdin.write(stdin)
            proc.stdin.close()
        except BrokenPipeError:
            pass

    running = dict(procs)
    while running:
        time.sleep(0.05)
        # exits first, then the brokers: an exit seen on a rank that is now lost may have
        # happened after its path to this client died, and then its status never arrives
        exited = {rank for rank, proc in running.items() if proc.poll() is not None}
        lost = inst.lost()
        for rank, proc in list(running.items()):
            if rank in lost:
                if rank not in exited:
                    _killpg(proc.pid, signal.SIGKILL)  # the node went down with its broker
                    proc.wait()
                error(rank, "No route to host", 68)
                del running[rank]
            elif rank in exited:
                del running[rank]
    for t in threads:
        t.join()
    forget()
    stdout.flush()
    for rank, proc in procs.items():
        if rank in reported:
            continue
        rc = proc.returncode
        if rc < 0:
            key, code = signal.strsignal(-rc), 128 - rc
        elif rc > 0:
            key, code = f"Exit {rc}", rc
        else:
            continue
        exit_code = max(exit_code, code)
        exitsets.setdefault(key, []).append(rank)
    for key, ids in exitsets.items():
        sys.stderr.write(f"{encode_idset(ids)}: {key}\n")
    return exit_code


class _StdioBuffer:
    """flux-exec's standard output through stdio: line-buffered on a terminal, otherwise
    written in 4 KiB blocks (a pipe's st_blksize) and at exit."""

    SIZE = 4096

    def __init__(self, out):
        self.out = out
        self.tty = out.isatty()
        self.pending = bytearray()

    def write(self, data: bytes) -> None:
        self.pending += data
        if self.tty:
            self.flush()
            return
        while len(self.pending) >= self.SIZE:
            self.out.write(self.pending[:self.SIZE])
            self.out.flush()
            del self.pending[:self.SIZE]

    def flush(self) -> None:
        if self.pending:
            self.out.write(self.pending)
            del self.pending[:]
        self.out.flush()


def _killpg(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def main(argv: list[str]) -> int:
    # a C program dies quietly of SIGPIPE when its reader goes away (`... | grep -q`), and of
    # SIGINT unless it handles it (flux exec does, below)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if argv[:1] == ["version"]:
        print("commands:    \t\t0.88.0\nlibflux-core:\t\t0.88.0\n"
              "build-options:\t\t+fluxinfra-test-double")
        return 0
    commands = {"getattr": cmd_getattr, "overlay": cmd_overlay, "python": cmd_python,
                "archive": cmd_archive, "exec": cmd_exec}
    if not argv or argv[0] not in commands:
        die("flux-double", f"'flux {' '.join(argv)}' is not implemented: this is the fluxinfra "
                           "test double, not Flux", 97)
    return commands[argv[0]](Instance(), argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
