"""Giving the memory that ended streams freed back to the system.

A stream that ends frees what it held, but the C allocator keeps freed memory for reuse
and returns the top of its heap only: a few live objects allocated after a large request
(a 10 MB node, a list of 100,000 names) keep the memory freed below them in the process,
and a server's RSS stays at its peak after the streams that caused it have closed. Where
the C library is glibc, :class:`Trimmer` asks it (``malloc_trim``) to return every free page,
a few seconds after streams end (once for a burst of ends): about 2 ms with 600 MB live on
the benchmark machine. Elsewhere it does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
from collections.abc import Callable

__all__ = ["TRIM_DELAY", "Trimmer"]

TRIM_DELAY = 2.0
"""Seconds after a stream ends before freed memory is given back (ends meanwhile join)."""


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, where the process runs on glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


class Trimmer:
    """Returns freed memory to the system ``delay`` seconds after :meth:`stream_ended`."""

    def __init__(self, delay: float = TRIM_DELAY) -> None:
        self.delay = delay
        self.trims = 0
        self._trim = _malloc_trim()
        self._pending: asyncio.TimerHandle | None = None

    @property
    def available(self) -> bool:
        return self._trim is not None

    def stream_ended(self) -> None:
        if self._trim is None or self._pending is not None:
            return
        self._pending = asyncio.get_running_loop().call_later(self.delay, self._run)

    def _run(self) -> None:
        self._pending = None
        if self._trim is not None:
            self._trim(0)
            self.trims += 1
