"""A level-triggered wake-up flag that synchronous code can raise, on asyncio."""

from __future__ import annotations

import asyncio
import time

__all__ = ["Wakeup"]


class Wakeup:
    """Raised by :meth:`set` (from any code on the event loop), consumed by :meth:`wait`.

    Any number of :meth:`set` calls between two waits collapse into one wake-up. A wait is
    one future (every stream waits on one after each round, and an anyio event costs
    several times that); it is cancelled as any other await is.
    """

    __slots__ = ("_raised", "_waiter")

    def __init__(self, *, raised: bool = False) -> None:
        self._raised = raised
        self._waiter: asyncio.Future[None] | None = None

    @property
    def raised(self) -> bool:
        """Whether the flag is raised (set, and not yet consumed by a wait)."""
        return self._raised

    def set(self) -> None:
        """Raise the flag; never blocks."""
        self._raised = True
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, until: float | None = None) -> None:
        """Return once the flag is raised, lowering it; or at ``until`` (a
        ``time.monotonic()`` time), if given, leaving it as it is."""
        if not self._raised:
            loop = asyncio.get_running_loop()
            future = self._waiter = loop.create_future()
            timer = None
            if until is not None:
                timer = loop.call_later(max(0.0, until - time.monotonic()), _expire, future)
            try:
                await future
            finally:
                if timer is not None:
                    timer.cancel()
                if self._waiter is future:
                    self._waiter = None
        self._raised = False


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
