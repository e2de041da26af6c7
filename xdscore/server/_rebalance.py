"""Rebalancing: streams that have lived long enough are ended, so that proxies spread out.

A proxy keeps its xDS stream for as long as the stream lasts, so after a scale-up the new
replicas get only the proxies that happen to reconnect. With ``Rebalancing(max_stream_age=...)``
every stream gets a deadline, ``max_stream_age`` times a factor drawn uniformly from
[1 - ``jitter``, 1 + ``jitter``] after it opened (so that streams opened together do not
end together). Once its deadline has passed, a stream waits for a turn: turns are handed
out one at a time, spaced so that at most ``close_fraction`` of the open streams, and at
least ``min_closes_per_second``, are ended each second. At its turn the stream is ended
between two responses (never in the middle of writing one), once its client has answered
what it was sent, or after ``answer_grace`` seconds if it does not answer.

The stream ends with gRPC status OK and the message :data:`REBALANCE_MESSAGE`. Envoy and
gRPC's xDS clients reconnect after such an end exactly as after UNAVAILABLE (Envoy after
its jittered back-off, reset by the responses the stream carried: 0 to 500 ms by default;
gRPC after its initial back-off of about 1 s, also reset because the stream saw a
response), but Envoy logs an OK end at debug level always, while an UNAVAILABLE end is
remembered as a failure and logged at warning if the next end differs (a refusal while
reconnecting, say). See docs/limits.md.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

import anyio
import attrs

from .._errors import StreamClosed
from ._stream import ByteStream

__all__ = ["REBALANCE_MESSAGE", "Rebalancing", "Recycler"]

REBALANCE_MESSAGE = "rebalancing: the stream reached its maximum age; reconnect"
"""The status message of a stream ended for its age (the status is OK)."""


@attrs.frozen(kw_only=True)
class Rebalancing:
    """When streams are ended for their age, so that proxies spread over replicas.

    Each stream's deadline is ``max_stream_age`` times a factor drawn from
    [1 - ``jitter``, 1 + ``jitter``] after it opened; past it, the stream waits for a turn
    (at most ``close_fraction`` of the open streams a second, and at least
    ``min_closes_per_second``), then ends with status OK between two responses, once its
    client answered what it was sent or ``answer_grace`` seconds later. ``max_stream_age``
    0 (the default) turns it off.
    """

    max_stream_age: float = 0.0
    """Seconds a stream lives, before jitter; 0: streams are never ended for their age."""
    jitter: float = 0.1
    """Each stream's age is ``max_stream_age`` times a factor in [1 - jitter, 1 + jitter]."""
    close_fraction: float = 0.01
    """At most this fraction of the open streams is ended each second..."""
    min_closes_per_second: float = 1.0
    """...and at least this many a second (so a small server still recycles)."""
    answer_grace: float = 5.0
    """Seconds a stream whose turn came waits for its client to answer what it was sent."""

    def __attrs_post_init__(self) -> None:
        if self.max_stream_age < 0:
            raise ValueError("max_stream_age must be 0 (off) or positive")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        if self.close_fraction < 0 or self.min_closes_per_second <= 0:
            raise ValueError("close_fraction must be >= 0 and min_closes_per_second > 0")

    @property
    def enabled(self) -> bool:
        """Whether streams are ended for their age at all."""
        return self.max_stream_age > 0


class _Finishing(Protocol):
    """What the recycler needs of a stream's driver."""

    async def run(self) -> None: ...

    def finish(self, *, now: bool = False) -> None: ...

    @property
    def finishing(self) -> bool: ...


class Recycler:
    """Hands out the turns of the streams whose deadline passed; one per server.

    ``open_streams`` counts the streams being served (the rate is a fraction of it). Turns
    go in the order deadlines passed, ``1 / rate`` seconds apart, and never while the
    streams that ended in the last second plus those told to end and not yet gone reach
    ``rate`` (at least one): so however long a stream takes to end after its turn, no
    second ever sees more ends than the rate. ``clock`` and ``uniform`` are injectable.
    """

    def __init__(
        self,
        policy: Rebalancing,
        open_streams: Callable[[], int],
        *,
        on_recycled: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        uniform: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.policy = policy
        self._open_streams = open_streams
        self._on_recycled = on_recycled
        self._clock = clock
        self._uniform = uniform
        self._next_turn = -math.inf
        self._queue = anyio.Lock()  # fair: waiters get the head of the queue in order
        self._ended: deque[float] = deque()
        self._ending = 0
        self._changed = anyio.Event()
        self.waiting = 0
        """Streams whose deadline passed, waiting for their turn."""

    def deadline(self, opened_at: float) -> float:
        """When a stream opened at ``opened_at`` (on ``clock``) is due to end."""
        policy = self.policy
        factor = self._uniform(1.0 - policy.jitter, 1.0 + policy.jitter)
        return opened_at + policy.max_stream_age * factor

    def rate(self) -> float:
        """Ends a second now: the fraction of the open streams, at least the minimum."""
        policy = self.policy
        return max(policy.min_closes_per_second, policy.close_fraction * self._open_streams())

    async def turn(self) -> None:
        """Wait for this stream's turn to end; the caller must call :meth:`ended` after."""
        self.waiting += 1
        try:
            async with self._queue:
                while True:
                    now = self._clock()
                    while self._ended and self._ended[0] <= now - 1.0:
                        self._ended.popleft()
                    rate = self.rate()
                    busy = len(self._ended) + self._ending >= max(1, int(rate))
                    if not busy and now >= self._next_turn:
                        break
                    wait = self._next_turn - now
                    if busy:
                        wait = max(wait, self._ended[0] + 1.0 - now if self._ended else 60.0)
                    changed = self._changed
                    with anyio.move_on_after(max(wait, 0.001)):
                        await changed.wait()
                self._ending += 1
                self._next_turn = now + 1.0 / rate
        finally:
            self.waiting -= 1

    def ended(self) -> None:
        """A stream whose turn came has ended."""
        self._ending -= 1
        self._ended.append(self._clock())
        self._changed.set()
        self._changed = anyio.Event()

    async def run(self, driver: _Finishing, opened_at: float, stream: ByteStream) -> bool:
        """Run ``driver`` until its stream ends; end it at its turn once its deadline passed
        (then say goodbye on ``stream``, see :func:`say_goodbye`).

        Returns whether the stream was ended for its age. What ``driver.run()`` raises is
        raised as itself.
        """
        failure: BaseException | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(self._expire, driver, opened_at)
            try:
                await driver.run()
            except Exception as exc:
                failure = exc
            group.cancel_scope.cancel()
        if not driver.finishing:
            if failure is not None:
                raise failure
            return False
        try:
            if failure is not None:
                raise failure
            await say_goodbye(stream)
        finally:
            self.ended()
        if self._on_recycled is not None:
            self._on_recycled()
        return True

    async def _expire(self, driver: _Finishing, opened_at: float) -> None:
        await anyio.sleep(max(0.0, self.deadline(opened_at) - self._clock()))
        await self.turn()
        driver.finish()
        await anyio.sleep(self.policy.answer_grace)
        driver.finish(now=True)


async def say_goodbye(stream: ByteStream) -> None:
    """End ``stream`` with OK and :data:`REBALANCE_MESSAGE` (see ``ByteStream.end``); the
    peer having gone already is fine."""
    with contextlib.suppress(StreamClosed):
        await stream.end(REBALANCE_MESSAGE)
