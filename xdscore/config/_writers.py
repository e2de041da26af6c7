"""Which files another process is still writing (Linux: inotify).

A file rewritten in place passes through states nobody meant to serve: empty once
truncated, then each piece as it is written. Linux reports every write to a file
(``IN_MODIFY``) and every close of a file that was open for writing (``IN_CLOSE_WRITE``),
whoever the writer is (another user, another container sharing the volume): a file written
since a writer last closed it is still being written. :class:`WriteTracker` follows those
events in every directory under the watched one, and in the directories that files reached
through a symbolic link live in, and says which files are held that way.

It cannot tell (so the reader's second look, the quiet window, is all that guards there):
a writer that closes the file between two pieces; a file held open for writing twice,
once closed; writes through a shared memory map; writes from another machine (a network
file system); writes made before the directory they are in was watched (one created a
moment before, or at start-up); and anything after the kernel's event queue overflowed.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import struct
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

__all__ = ["WriteTracker"]

log = logging.getLogger("xdscore.config")

_IN_MODIFY = 0x00000002
_IN_CLOSE_WRITE = 0x00000008
_IN_MOVED_FROM = 0x00000040
_IN_MOVED_TO = 0x00000080
_IN_CREATE = 0x00000100
_IN_DELETE = 0x00000200
_IN_Q_OVERFLOW = 0x00004000
_IN_IGNORED = 0x00008000
_IN_ONLYDIR = 0x01000000
_IN_EXCL_UNLINK = 0x04000000
_IN_ISDIR = 0x40000000
_MASK = (
    _IN_MODIFY | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
    | _IN_ONLYDIR | _IN_EXCL_UNLINK
)  # fmt: skip
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_BYTES = 64 * 1024


class WriteTracker:
    """The files written since their writer last closed them, under one directory.

    Thread-safe: the watcher asks from the event loop (:meth:`closed`) and from the thread
    that reads the files (:meth:`held`); each question first takes in the events the
    kernel has queued, so the answer covers every write made before it was asked.
    """

    def __init__(self, fd: int, libc: ctypes.CDLL) -> None:
        self._fd = fd
        self._libc = libc
        self._lock = threading.Lock()
        self._directories: dict[int, Path] = {}
        self._watched: set[Path] = set()
        self._written: set[Path] = set()
        """Real paths of the files written and not closed since."""
        self._closed: list[Path] = []
        self._warned = False

    @classmethod
    def open(cls, root: Path) -> WriteTracker | None:
        """A tracker of ``root`` and every directory under it; ``None`` where inotify is
        not available (not Linux, or no instance left)."""
        if not sys.platform.startswith("linux"):
            return None
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            reason = os.strerror(ctypes.get_errno())
            log.warning(
                "cannot follow writers of %s (inotify: %s): a file still being written is "
                "told only by its changing between two reads",
                root,
                reason,
            )
            return None
        tracker = cls(fd, libc)
        with tracker._lock:
            tracker._watch_tree(root)
        return tracker

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def held(self, paths: Iterable[Path]) -> set[Path]:
        """Those of ``paths`` (files, each perhaps a symbolic link) another process has
        written and not closed since; watches the directories they really live in from
        now on."""
        real = {path: Path(os.path.realpath(path)) for path in paths}
        with self._lock:
            for target in real.values():
                self._watch(target.parent)
            self._take_events()
            return {path for path, target in real.items() if target in self._written}

    def closed(self) -> list[Path]:
        """The files a writer closed since the last call, each written before it closed
        (real paths)."""
        with self._lock:
            self._take_events()
            closed, self._closed = self._closed, []
            return closed

    def _watch_tree(self, root: Path) -> None:
        for directory, _, _ in os.walk(root):
            self._watch(Path(directory))

    def _watch(self, directory: Path) -> None:
        real = Path(os.path.realpath(directory))
        if real in self._watched or self._fd < 0:
            return
        wd = self._libc.inotify_add_watch(self._fd, os.fsencode(real), _MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if code not in (errno.ENOENT, errno.ENOTDIR) and not self._warned:
                self._warned = True
                log.warning(
                    "cannot follow writers in %s (inotify: %s%s); files there being written "
                    "are told only by their changing between two reads",
                    real,
                    os.strerror(code),
                    ": raise fs.inotify.max_user_watches" if code == errno.ENOSPC else "",
                )
            return
        self._directories[wd] = real
        self._watched.add(real)

    def _take_events(self) -> None:
        while self._fd >= 0:
            try:
                data = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                return
            offset = 0
            while offset < len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, offset)
                offset += _EVENT.size
                name = data[offset : offset + size].rstrip(b"\0")
                offset += size
                self._event(wd, mask, os.fsdecode(name))

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & _IN_Q_OVERFLOW:
            # Events were lost: which files are held is unknown, and taken as none.
            self._written.clear()
            log.warning("the inotify queue overflowed: writers in progress may go unnoticed")
            return
        directory = self._directories.get(wd)
        if directory is None:
            return
        if mask & _IN_IGNORED:  # the directory is gone
            del self._directories[wd]
            self._watched.discard(directory)
            return
        path = directory / name
        if mask & _IN_ISDIR:
            if mask & (_IN_CREATE | _IN_MOVED_TO):
                self._watch_tree(path)
            return
        if mask & _IN_MODIFY:
            self._written.add(path)
        if mask & _IN_CLOSE_WRITE and path in self._written:
            self._written.discard(path)
            self._closed.append(path)
        if mask & (_IN_DELETE | _IN_MOVED_FROM):
            self._written.discard(path)
