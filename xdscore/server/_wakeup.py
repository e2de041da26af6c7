"""A level-triggered wake-up flag that synchronous code can raise."""

from __future__ import annotations

import anyio

__all__ = ["Wakeup"]


class Wakeup:
    """Raised by :meth:`set` (from any code on the event loop), consumed by :meth:`wait`.

    Any number of :meth:`set` calls between two waits collapse into one wake-up.
    """

    __slots__ = ("_event", "_raised")

    def __init__(self, *, raised: bool = False) -> None:
        self._raised = raised
        self._event: anyio.Event | None = None

    def set(self) -> None:
        """Raise the flag; never blocks."""
        self._raised = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        """Return once the flag is raised, lowering it."""
        while not self._raised:
            self._event = anyio.Event()
            await self._event.wait()
        self._raised = False
        self._event = None
