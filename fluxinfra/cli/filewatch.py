"""Whether files read earlier may have changed, without asking the file system each time.

``fluxinfra query`` reads the jobspec file named by each ``match`` command, as resource-query
does, but keeps the text of a file it has read and reads it again only when the file changed.
Finding that out with ``stat`` costs a system call and a path walk per command: about 5 us in a
match loop of 50 us. On Linux, :class:`FileWatch` asks the kernel (inotify) to report changes
to a watched file and to every directory on its path instead; the session then only asks
whether any report came in (one ``ioctl``, once per read of its command input), and reads a
file again when one did.

What a watch sees: the file written, truncated, its attributes changed (permissions, times set,
links), the file or any directory on its path renamed, deleted or replaced, the file's name or
a directory's on the path created or removed in the directory above it, and the report queue
overflowing. A path is watched only when that is all that can change it: it has no
symbolic link on the way (a link elsewhere could be re-pointed unseen) and lives on a local
file system (inotify does not see writes made on other hosts of NFS, Lustre, GPFS or FUSE file
systems). Anything else, or no inotify, and :meth:`FileWatch.add` says no: the caller checks
that file with ``stat`` at every use, as before. Not seen: a file system mounted over one of
the directories while the session runs, and a directory's own permissions changed (a
``stat`` would then fail for a user who lost the right to search it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import sys
import termios

__all__ = ["FileWatch", "LOCAL_FILE_SYSTEMS", "shared"]

# inotify(7) event bits
_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x2, 0x4, 0x8
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x40, 0x80, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_UNMOUNT, _IN_Q_OVERFLOW, _IN_IGNORED, _IN_MASK_ADD = 0x2000, 0x4000, 0x8000, 0x20000000
_FILE_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_DELETE_SELF | _IN_MOVE_SELF
#: (not IN_ATTRIB: on a directory it also asks for its children's, and the kernel then marks
#: every child it has cached: 45 ms for a /tmp of 600 entries, once per session)
_DIR_MASK = (_IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE | _IN_DELETE_SELF
             | _IN_MOVE_SELF)

#: statfs(2) f_type of the file systems whose changes inotify reports, whoever makes them
LOCAL_FILE_SYSTEMS = frozenset({
    0xEF53,      # ext2, ext3, ext4
    0x58465342,  # xfs
    0x9123683E,  # btrfs
    0x01021994,  # tmpfs
    0x794C7630,  # overlayfs (containers)
    0xF2F52010,  # f2fs
    0x2FC12FC1,  # zfs
    0x858458F6,  # ramfs
})

#: watches kept before starting over (each path needs one per directory above it)
_MAX_WATCHES = 4096


class FileWatch:
    """A set of watched paths and a *generation* that moves whenever any of them may have
    changed. Use: :meth:`add` a path before reading it, note :meth:`generation` when it was
    read; later, while :meth:`generation` returns the same number, the path holds what was
    read. Without inotify every :meth:`add` answers False and nothing is watched.

    A directory is watched for the one name below it on a watched path: reports about other
    names there (a busy ``/tmp``) are read and dropped without moving the generation."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._gen = 0
        #: watch descriptor -> the names below it that matter (None: a file, every report)
        self._wds: dict[int, set[bytes] | None] = {}
        self._files: dict[str, bool] = {}  # path as given -> watched soundly
        self._count = bytearray(4)  # FIONREAD's answer (an int)

    def add(self, path: str) -> bool:
        """Watch ``path`` (before reading it). True when every change to what ``path`` names
        will move :meth:`generation`; False when it cannot be watched soundly (see the module
        docstring), and then nothing is promised about it."""
        known = self._files.get(path)
        if known is not None:
            return known
        ok = self._add(path)
        self._files[path] = ok
        return ok

    def _add(self, path: str) -> bool:
        libc = _libc()
        if libc is None:
            return False
        try:
            full = os.path.abspath(path)
            if os.path.realpath(full) != full or _fs_type(libc, full) not in \
                    LOCAL_FILE_SYSTEMS:
                return False
        except (OSError, ValueError):
            return False
        if self._fd is None or len(self._wds) >= _MAX_WATCHES:
            self._restart()
            if self._fd is None:
                return False
        wanted: list[tuple[str, bytes | None]] = [(full, None)]  # the file, every report
        child = full
        while True:
            d = os.path.dirname(child)
            wanted.append((d, os.fsencode(os.path.basename(child))))
            if d == child or os.path.dirname(d) == d:
                break
            child = d
        for name, below in wanted:
            mask = (_FILE_MASK if below is None else _DIR_MASK) | _IN_MASK_ADD
            wd = libc.inotify_add_watch(self._fd, os.fsencode(name), mask)
            if wd < 0:
                return False  # out of watches, or gone already: stat it every time
            if below is None:
                self._wds[wd] = None
            else:
                names = self._wds.setdefault(wd, set())
                if names is not None:
                    names.add(below)
        return True

    def generation(self) -> int:
        """A number that changes whenever a watched path may have changed since the last
        call (reports waiting are read first)."""
        fd = self._fd
        if fd is None:
            return self._gen
        count = self._count
        try:
            fcntl.ioctl(fd, termios.FIONREAD, count, True)
        except OSError:
            self._moved()
            return self._gen
        if count != b"\0\0\0\0":
            data = b""
            with contextlib.suppress(BlockingIOError, InterruptedError):
                while True:
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        break
                    data += chunk
            if self._matters(data):
                self._moved()
        return self._gen

    def _matters(self, data: bytes) -> bool:
        """Whether any report in ``data`` (struct inotify_event, one after another) may
        concern a watched path."""
        at = 0
        wds = self._wds
        while at + 16 <= len(data):
            wd, mask, _, size = struct.unpack_from("iIII", data, at)
            name = data[at + 16:at + 16 + size].rstrip(b"\0")
            at += 16 + size
            if mask & (_IN_Q_OVERFLOW | _IN_IGNORED | _IN_UNMOUNT) or wd not in wds:
                return True
            names = wds[wd]
            if names is None or not name or name in names:
                return True
        return at != len(data)  # (a short read: assume the worst)

    def _moved(self) -> None:
        """Something watched may have changed: a new generation, and every path is watched
        afresh at its next add (a deleted or replaced file took its watch with it)."""
        self._gen += 1
        self._files.clear()
        self._wds.clear()

    def _restart(self) -> None:
        """A fresh inotify instance (the first, or after too many watches): every earlier
        promise is withdrawn."""
        self.close()
        fd = _libc().inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        self._fd = fd if fd >= 0 else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._moved()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


_SHARED: list[FileWatch] = []


def shared() -> FileWatch:
    """The process's one FileWatch (one inotify instance however many sessions run)."""
    if not _SHARED:
        _SHARED.append(FileWatch())
    return _SHARED[0]


_LIBC: list = []


def _libc():
    """The C library with inotify (Linux only; None elsewhere or without ctypes' libc)."""
    if not _LIBC:
        lib = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes  # (only here: a session that watches nothing never loads it)

                lib = ctypes.CDLL(None, use_errno=True)
                lib.inotify_init1.argtypes = [ctypes.c_int]
                lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
                lib.statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
            except (OSError, AttributeError):
                lib = None
        _LIBC.append(lib)
    return _LIBC[0]


def _fs_type(libc, path: str) -> int:
    """statfs(2)'s f_type of the file system holding ``path`` (-1 when it cannot be read).
    f_type is the first field of struct statfs, a C long, on every Linux architecture."""
    import ctypes

    if not _STATFS:
        _STATFS.append(ctypes.c_char * 256)  # (a new array type per call would be garbage)
    buf = _STATFS[0]()
    if libc.statfs(os.fsencode(path), buf) != 0:
        return -1
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


_STATFS: list = []  # the buffer type statfs(2) fills (struct statfs is at most 120 bytes)
