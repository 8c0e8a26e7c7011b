"""The per-rank side of ``fluxinfra distribute``: extract, verify, commit, import, report.

It runs on every target rank through ``flux exec ... flux python -c <this file> run``, reading its
spec (JSON) from standard input, which ``flux exec`` broadcasts to every rank. Nodes do not have
fluxinfra installed, so this module is self-contained: the Python standard library only, nothing
newer than Python 3.7 (whatever interpreter ``flux python`` names on the node).

What it does on one rank, in order:

1. resolve the destination (``{rank}`` and ``{host}`` are substituted) and create it;
2. if every entry is already there with the expected checksum, report ``present`` (this is what
   makes ``--resume`` and re-runs cheap); other content under the same name is refused unless the
   spec says ``overwrite``;
3. check the free space (the whole payload plus a margin) before writing anything;
4. ``flux archive extract`` (on the lead node, which holds SOURCE, a local copy instead) into a
   private staging directory ``DEST/.fluxinfra-DIGEST.partial``
   (one run at a time per destination: a lock on the directory; ``flux
   archive`` sizes a file before writing its blocks, so a killed extract leaves a file that looks
   complete: nothing is ever read from the staging directory except by step 5);
5. hash every file and compare with the lead's manifest;
6. rename each entry into place (atomic per entry; an overwritten entry is moved aside first);
7. import image archives into the node's runtime (``ctr -n k8s.io images import`` or ``podman
   load``) when asked.

Events go to standard error as lines ``@fluxinfra {json}`` (``flux exec -l`` prefixes the rank;
standard error because ``flux exec`` passes it on as it comes, while its standard output, a pipe
to the lead, is block-buffered by stdio and arrives in 4 KiB bursts or at exit): ``start`` (with
the pid ``flux exec`` started, the process group the lead can signal through the broker's
``rexec.kill``), ``progress`` (allocated bytes so far, every ``progress_interval`` seconds while
they grow), ``verify`` (bytes hashed, as often), ``done`` with ``status`` ``ok``, ``present`` or
``failed`` (and ``stage`` + ``reason`` when failed). SIGINT, SIGTERM or SIGHUP stop the extract
(``flux exec`` and ``rexec.kill`` signal the whole process group), remove the staging directory
and report ``failed`` at stage ``interrupted``; exit status 0 means ok/present, 1 failed,
128+N interrupted by signal N.

The lead uses :func:`manifest` from this same file for the source, so both sides hash alike:

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> _ = (root / "a.txt").write_text("hello")
>>> m = manifest(str(root), ["a.txt"])
>>> m["bytes"], m["files"][0][:3]
(5, ['f', 'a.txt', 5])
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time

__all__ = ["manifest", "differences", "expand_dest", "inspect", "main"]

EVENT_PREFIX = "@fluxinfra "
_READ_SIZE = 1 << 20


def hash_file(path: str, progress=None) -> str:
    """sha256 of a file; ``progress(n)`` is called with the bytes of each block read."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        block = handle.read(_READ_SIZE)
        while block:
            digest.update(block)
            if progress is not None:
                progress(len(block))
            block = handle.read(_READ_SIZE)
    return digest.hexdigest()


def _walk(root: str, rel: str, out: list, progress=None) -> None:
    path = os.path.join(root, rel)
    if os.path.islink(path):
        out.append(["l", rel, 0, os.readlink(path)])
    elif os.path.isdir(path):
        out.append(["d", rel, 0, ""])
        for name in sorted(os.listdir(path)):
            _walk(root, f"{rel}/{name}", out, progress)
    elif os.path.isfile(path):
        out.append(["f", rel, os.path.getsize(path), hash_file(path, progress)])
    else:
        raise ValueError(f"{path} is neither a regular file, a directory nor a symlink")


def manifest(root: str, entries: list, progress=None) -> dict:
    """Every file, directory and symlink under ``root/<entry>``: ``{"files": [[kind, path, size,
    sha256 | link target]], "bytes": total file bytes, "digest": sha256 of the whole listing}``.

    Modes are left out on purpose: ``flux archive extract`` applies the extracting user's umask.
    ``progress(n)`` is called as file bytes are hashed.
    """
    files: list = []
    for entry in entries:
        _walk(root, entry, files, progress)
    digest = hashlib.sha256()
    for kind, path, size, value in files:
        digest.update(f"{kind}\t{path}\t{size}\t{value}\n".encode())
    return {"files": files, "bytes": sum(f[2] for f in files), "digest": digest.hexdigest()}


def differences(expected: dict, actual: dict, limit: int = 3) -> list:
    """Human-readable differences between two manifests (at most ``limit``, then a count)."""
    want = {f[1]: f for f in expected["files"]}
    have = {f[1]: f for f in actual["files"]}
    out = []
    for path in sorted(set(want) | set(have)):
        a, b = want.get(path), have.get(path)
        if a == b:
            continue
        if b is None:
            out.append(f"{path}: missing")
        elif a is None:
            out.append(f"{path}: not in the source")
        elif a[0] != b[0]:
            out.append(f"{path}: is a {_KINDS[b[0]]}, expected a {_KINDS[a[0]]}")
        elif a[0] == "f":
            out.append(f"{path}: sha256 {b[3][:12]}..., expected {a[3][:12]}... "
                       f"({b[2]} of {a[2]} bytes)")
        else:
            out.append(f"{path}: link to {b[3]!r}, expected {a[3]!r}")
    if len(out) > limit:
        out = out[:limit] + [f"and {len(out) - limit} more"]
    return out


_KINDS = {"f": "file", "d": "directory", "l": "symlink"}


def inspect(path: str) -> dict:
    """What ``path`` is: ``{"kind": "file"|"directory"|"missing"|"other", "image": format,
    "refs": [image names]}``, format ``"oci"`` (an ``oci-layout`` member), ``"docker"``
    (``manifest.json``) or ``""``; refs from docker's ``RepoTags`` or OCI's ``ref.name``."""
    if not os.path.lexists(path):
        return {"kind": "missing", "image": "", "refs": []}
    if os.path.isdir(path):
        return {"kind": "directory", "image": "", "refs": []}
    if not os.path.isfile(path):
        return {"kind": "other", "image": "", "refs": []}
    image, refs = "", []
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                name = member.name.lstrip("./") if member.name != "./" else ""
                if name == "oci-layout":
                    image = image or "oci"
                elif name in ("manifest.json", "index.json") and member.isfile():
                    refs += _image_refs(name, tar.extractfile(member).read())
                    if name == "manifest.json":
                        image = "docker"
    except (tarfile.TarError, OSError, EOFError):
        image = ""
    return {"kind": "file", "image": image, "refs": refs if image else []}


def _image_refs(name: str, data: bytes) -> list:
    try:
        doc = json.loads(data.decode())
    except ValueError:
        return []
    if name == "manifest.json" and isinstance(doc, list):
        return [tag for entry in doc if isinstance(entry, dict)
                for tag in entry.get("RepoTags") or []]
    if name == "index.json" and isinstance(doc, dict):
        return [m.get("annotations", {}).get("org.opencontainers.image.ref.name")
                for m in doc.get("manifests", [])
                if m.get("annotations", {}).get("org.opencontainers.image.ref.name")]
    return []


def expand_dest(template: str, rank: int, host: str) -> str:
    return template.replace("{rank}", str(rank)).replace("{host}", host)


class Failed(Exception):
    """This rank failed at ``stage``; the message is the reason (one line)."""

    def __init__(self, stage: str, reason: str):
        super().__init__(reason)
        self.stage = stage


class Interrupted(Exception):
    pass


class Agent:
    def __init__(self, spec: dict, out=None):
        self.spec = spec
        self.out = out or sys.stderr
        self.flux = list(spec.get("flux") or ["flux"])
        self.name = spec["name"]
        self.entries = list(spec["entries"])
        self.expected = spec["manifest"]
        self.interrupted = 0
        self.child = None
        self.rank = -1
        self.lock_fd = -1
        self.host = socket.gethostname()
        self.timings: dict = {}

    # -- reporting ---------------------------------------------------------------------------
    def emit(self, event: str, **fields) -> None:
        record = {"event": event, "rank": self.rank, "host": self.host}
        record.update(fields)
        self.out.write(f"{EVENT_PREFIX}{json.dumps(record, sort_keys=True)}\n")
        self.out.flush()

    def _on_signal(self, signum, frame) -> None:
        self.interrupted = signum
        if self.child is not None and self.child.poll() is None:
            self.child.terminate()

    def check_interrupted(self) -> None:
        if self.interrupted:
            raise Interrupted()

    # -- steps ---------------------------------------------------------------------------------
    def flux_rank(self) -> int:
        try:
            out = subprocess.run(self.flux + ["getattr", "rank"], capture_output=True,
                                 text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise Failed("connect", f"cannot run {self.flux[0]} getattr rank: {exc}") from None
        if out.returncode != 0:
            raise Failed("connect", f"flux getattr rank: {_last_line(out.stderr)}")
        return int(out.stdout.strip())

    def lock(self, dest: str) -> None:
        """Create ``dest`` and hold a lock on it: one distribution at a time per destination on
        this node (released when this process exits, however it exits)."""
        try:
            os.makedirs(dest, exist_ok=True)
            self.lock_fd = os.open(dest, os.O_RDONLY)
        except OSError as exc:
            raise Failed("dest", f"cannot create {dest}: {exc.strerror} (the broker runs as "
                         f"{_user()}: make the directory writable by that user)") from None
        while True:  # polled, so that a signal stops the wait for another run's lock
            try:
                fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                self.check_interrupted()
                time.sleep(0.2)

    def prepare(self, dest: str) -> bool:
        """True when the content is already in ``dest`` (nothing to extract)."""
        existing = [e for e in self.entries if os.path.lexists(os.path.join(dest, e))]
        if existing and len(existing) == len(self.entries):
            have = manifest(dest, self.entries, lambda n: self.check_interrupted())
            if have["digest"] == self.expected["digest"]:
                return True
        if existing and not self.spec.get("overwrite"):
            raise Failed("dest", f"{os.path.join(dest, existing[0])} already exists with other "
                         "content: pass --overwrite to replace it, or choose another --dest")
        return False

    def check_space(self, dest: str) -> None:
        stat = os.statvfs(dest)
        free = stat.f_bavail * stat.f_frsize
        margin = int(self.spec.get("space_margin", 64 << 20))
        need = int(self.expected["bytes"]) + margin
        if free < need:
            raise Failed("space", f"{dest} has {_size(free)} free but needs {_size(need)} (the "
                         f"content plus {_size(margin)}): free space there or choose another "
                         "--dest")

    def extract(self, stage: str) -> None:
        argv = self.flux + ["archive", "extract", "-n", self.name, "-C", stage,
                            f"--waitcreate={self.spec.get('waitcreate', '60s')}"]
        total = int(self.expected["bytes"])
        interval = float(self.spec.get("progress_interval", 1.0))
        started = time.monotonic()
        self.check_interrupted()  # a signal before the extract starts: do not start it
        try:
            self.child = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True)
        except OSError as exc:
            raise Failed("extract", f"cannot run {argv[0]}: {exc}") from None
        if self.interrupted:  # it came while the child was being started
            self.child.terminate()
        last = -1
        while True:
            try:
                self.child.wait(timeout=interval)
                break
            except subprocess.TimeoutExpired:
                pass
            done = min(_allocated(stage), total)
            if done != last:
                self.emit("progress", bytes=done, total=total)
                last = done
        stderr = self.child.stderr.read()
        rc = self.child.returncode
        self.child = None
        self.check_interrupted()
        if rc != 0:
            raise Failed("extract", f"flux archive extract exited {rc}: {_last_line(stderr)}")
        self.timings["extract"] = round(time.monotonic() - started, 3)
        self.emit("progress", bytes=total, total=total)

    def copy_local(self, stage: str) -> bool:
        """The lead node holds SOURCE already: copy it (kernel copy_file_range) rather than
        pull it back through its own broker, which is busy serving the tree. False when the
        copy cannot be made (then the archive is extracted as on every other rank)."""
        source = self.spec.get("local_copy", {}).get("directory")
        if not source or self.spec["local_copy"].get("rank") != self.rank:
            return False
        started = time.monotonic()
        try:
            for entry in self.entries:
                src, dst = os.path.join(source, entry), os.path.join(stage, entry)
                if os.path.islink(src):
                    os.symlink(os.readlink(src), dst)
                elif os.path.isdir(src):
                    shutil.copytree(src, dst, symlinks=True)
                else:
                    shutil.copyfile(src, dst)
        except OSError:
            for entry in self.entries:
                _remove(os.path.join(stage, entry))
            return False
        self.timings["copy"] = round(time.monotonic() - started, 3)
        total = int(self.expected["bytes"])
        self.emit("progress", bytes=total, total=total)
        return True

    def verify(self, stage: str) -> None:
        started = time.monotonic()
        interval = float(self.spec.get("progress_interval", 1.0))
        hashed = [0, started]

        def progress(n: int) -> None:  # hashing a big file is not silence
            self.check_interrupted()  # nor deaf: a signal stops the hashing
            hashed[0] += n
            if time.monotonic() - hashed[1] >= interval:
                hashed[1] = time.monotonic()
                self.emit("verify", bytes=hashed[0], total=int(self.expected["bytes"]))

        try:
            have = manifest(stage, self.entries, progress)
        except (OSError, ValueError) as exc:
            raise Failed("verify", f"cannot read the extracted content: {exc}") from None
        self.timings["verify"] = round(time.monotonic() - started, 3)
        if have["digest"] != self.expected["digest"]:
            raise Failed("verify", "checksum mismatch: " + "; ".join(
                differences(self.expected, have)))

    def commit(self, stage: str, dest: str) -> None:
        old = os.path.join(stage, ".replaced")
        for entry in self.entries:
            final = os.path.join(dest, entry)
            if os.path.lexists(final):
                os.makedirs(old, exist_ok=True)
                os.rename(final, os.path.join(old, entry.replace("/", "_")))
            os.rename(os.path.join(stage, entry), final)
        _fsync_dir(dest)

    def import_images(self, dest: str) -> list:
        runtime = self.spec.get("import", "none")
        if runtime == "none" or not self.spec.get("images"):
            return []
        started = time.monotonic()
        done = []
        for image in self.spec["images"]:
            path = os.path.join(dest, image)
            if runtime == "containerd":
                argv = ["ctr", "-n", self.spec.get("containerd_namespace", "k8s.io"),
                        "images", "import", path]
            else:
                argv = ["podman", "load", "-i", path]
            hint = ""
            if os.geteuid() != 0:
                hint = (f" (the broker runs as {_user()}, not root: allow it `sudo -n "
                        f"{argv[0]}`, or import as root: playbooks/distribute.yml and "
                        "--kubernetes do)")
                argv = ["sudo", "-n"] + argv
            try:
                out = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
            except OSError as exc:
                raise Failed("import", f"cannot run {argv[0]}: {exc.strerror}{hint}") from None
            if out.returncode != 0:
                raise Failed("import", f"{' '.join(argv[:-1])} exited {out.returncode}: "
                             f"{_last_line(out.stdout)}{hint}")
            done.append(image)
        self.timings["import"] = round(time.monotonic() - started, 3)
        return done

    # -- the whole run -------------------------------------------------------------------------
    def run(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._on_signal)
        stage = None
        try:
            self.rank = self.flux_rank()
            # the name the instance knows this node by (flux matched it to `hostname` at start)
            self.host = self.spec.get("hosts", {}).get(str(self.rank), self.host)
            dest = expand_dest(self.spec["dest"], self.rank, self.host)
            self.emit("start", dest=dest, pid=os.getpid())
            self.lock(dest)
            stage = os.path.join(dest, f".fluxinfra-{self.expected['digest'][:16]}.partial")
            _remove(stage)  # whatever an interrupted earlier run left
            present = self.prepare(dest)
            self.check_interrupted()
            if not present:
                self.check_space(dest)
                os.mkdir(stage, 0o700)
                if not self.copy_local(stage):
                    self.extract(stage)
                self.check_interrupted()
                self.verify(stage)
                self.check_interrupted()
                self.commit(stage, dest)
            imported = self.import_images(dest)
            self.emit("done", status="present" if present else "ok", dest=dest,
                      bytes=int(self.expected["bytes"]), digest=self.expected["digest"],
                      imported=imported, seconds=self.timings)
            return 0
        except Failed as exc:
            self.emit("done", status="failed", stage=exc.stage, reason=str(exc))
            return 1
        except Interrupted:
            self.emit("done", status="failed", stage="interrupted",
                      reason=f"interrupted by signal {self.interrupted}")
            return 128 + self.interrupted
        except OSError as exc:
            self.emit("done", status="failed", stage="io",
                      reason=f"{exc.filename or ''}: {exc.strerror or exc}")
            return 1
        finally:
            if stage is not None:
                _remove(stage)


def _allocated(root: str) -> int:
    """Bytes actually written under ``root`` (blocks, not sizes: extract pre-sizes its files)."""
    total = 0
    for base, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(base, name)).st_blocks * 512
    return total


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        with contextlib.suppress(OSError):
            os.unlink(path)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return f"uid {os.geteuid()}"


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024.0
    return f"{n:.1f} TiB"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


def main(argv: list) -> int:
    """``run`` (spec JSON on stdin), ``manifest ROOT ENTRY...`` or ``inspect PATH`` (JSON out)."""
    if argv[:1] == ["run"]:
        return Agent(json.loads(sys.stdin.read())).run()
    if argv[:1] == ["manifest"] and len(argv) >= 3:
        result = manifest(argv[1], argv[2:])
    elif argv[:1] == ["inspect"] and len(argv) == 2:
        result = inspect(argv[1])
    else:
        sys.stderr.write("usage: agent run < spec.json | manifest ROOT ENTRY... | inspect PATH\n")
        return 2
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
