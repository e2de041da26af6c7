"""A level-triggered wake-up flag that synchronous code can raise."""

from __future__ import annotations

import asyncio

import anyio

__all__ = ["Wakeup"]


class Wakeup:
    """Raised by :meth:`set` (from any code on the event loop), consumed by :meth:`wait`.

    Any number of :meth:`set` calls between two waits collapse into one wake-up. On asyncio
    a wait is one future (every stream waits on one after each round, and an anyio event
    costs several times that); on another backend, an anyio event. Either is cancelled as
    anything else in an anyio cancel scope is.
    """

    __slots__ = ("_raised", "_waiter")

    def __init__(self, *, raised: bool = False) -> None:
        self._raised = raised
        self._waiter: asyncio.Future[None] | anyio.Event | None = None

    @property
    def raised(self) -> bool:
        """Whether the flag is raised (set, and not yet consumed by a wait)."""
        return self._raised

    def set(self) -> None:
        """Raise the flag; never blocks."""
        self._raised = True
        waiter = self._waiter
        if waiter is None:
            return
        self._waiter = None
        if isinstance(waiter, asyncio.Future):
            if not waiter.done():
                waiter.set_result(None)
        else:
            waiter.set()

    async def wait(self) -> None:
        """Return once the flag is raised, lowering it."""
        while not self._raised:
            loop = _asyncio_loop()
            if loop is not None:
                future = self._waiter = loop.create_future()
                try:
                    await future
                finally:
                    if self._waiter is future:
                        self._waiter = None
            else:
                event = self._waiter = anyio.Event()
                await event.wait()
        self._raised = False


def _asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop (``None`` on another backend)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
