"""What connections still syncing may read in one turn of the event loop.

One poll of the event loop can find thousands of sockets readable: in a reconnect storm
the clients' first requests arrive together, then their ACKs. Handled as they come, each
turn sets up streams and parses requests for all of them (a 20,000-stream storm made turns
of 1-2 s), and a push to a proxy that was connected all along, whose write leaves only at
the end of the turn, waits as long. :class:`Intake` lets at most ``per_turn`` reads of
*unsettled* connections (any with a stream still in its initial sync, or with no stream
yet) be handled in a turn; the others keep what they read unparsed (and stop reading
past a bound, so that the kernel buffers and TCP pushes back) and take their turn in order,
``per_turn`` a turn. Settled connections read at once, always: a storm does not delay an
established proxy's ACK.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Protocol

__all__ = ["INTAKE_PER_TURN", "Intake"]

INTAKE_PER_TURN = 64
"""Reads of unsettled connections handled in one turn of the event loop, by default."""


class _Held(Protocol):
    @property
    def closing(self) -> bool: ...

    def resume_intake(self) -> None: ...


class Intake:
    """At most ``per_turn`` reads of unsettled connections handled in a loop turn (0: no
    bound); those past it wait in arrival order (``waiting``), each one told to
    ``on_deferred``."""

    def __init__(
        self, per_turn: int = INTAKE_PER_TURN, *, on_deferred: Callable[[], None] | None = None
    ) -> None:
        if per_turn < 0:
            raise ValueError(f"per_turn must not be negative, not {per_turn}")
        self.per_turn = per_turn
        self._on_deferred = on_deferred
        self._used = 0
        self._turn_end_scheduled = False
        self._queue: deque[_Held] = deque()

    @property
    def waiting(self) -> int:
        """Connections holding a read for a later turn."""
        return len(self._queue)

    def admit(self, connection: _Held) -> bool:
        """Whether ``connection`` may handle its read now. If not, it is queued: it holds
        the read, and its ``resume_intake()`` is called in a later turn."""
        if not self.per_turn:
            return True
        if self._used < self.per_turn and not self._queue:
            self._take()
            return True
        self._queue.append(connection)
        if self._on_deferred is not None:
            self._on_deferred()
        self._schedule()
        return False

    def _take(self) -> None:
        self._used += 1
        self._schedule()

    def _schedule(self) -> None:
        if not self._turn_end_scheduled:
            self._turn_end_scheduled = True
            asyncio.get_running_loop().call_soon(self._turn_end)

    def _turn_end(self) -> None:
        """A new turn: the budget is whole again, and the first of those waiting use it."""
        self._turn_end_scheduled = False
        self._used = 0
        queue = self._queue
        while queue and self._used < self.per_turn:
            connection = queue.popleft()
            if connection.closing:
                continue
            self._take()
            connection.resume_intake()
        if queue:
            self._schedule()
