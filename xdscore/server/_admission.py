"""Protection under load: which streams are let in, and how pushes share the event loop.

A control plane rarely dies of load; it gets slow, and slowness feeds itself: every proxy
reconnects at once after a restart, all pull everything, and established proxies wait
behind them. Three mechanisms, all in the runtime:

* **Admission.** A new stream is refused with RESOURCE_EXHAUSTED (Envoy and gRPC retry with
  back-off) when the server serves ``max_streams``, when new streams arrive faster than
  ``new_streams_per_second`` beyond a burst, or when the streams that have not yet answered
  their first responses are ``max_initial_syncs``, or more than the server syncs in
  ``max_sync_seconds`` at the rate syncs have been finishing. The refusal's message carries
  a jittered hint of when to retry.
* **Push slots.** At most ``push_concurrency`` streams compute and write a push at once. A
  waiting established stream always goes before a stream still in its initial sync, so a
  storm of new streams cannot starve proxies that are already connected. A stream gives its
  slot back before a write that would wait for the client to read, so a client that stops
  reading never holds one; a syncing stream's slot comes back at the end of the loop turn,
  so a turn runs at most ``push_concurrency`` syncs.
* **Deadlines.** A stream whose first request does not come within
  ``first_request_timeout`` is ended (DEADLINE_EXCEEDED); it holds a stream slot until then.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import deque
from collections.abc import Callable

import attrs

from .._errors import GrpcStatus, RemoteProtocolError
from ._wakeup import Wakeup

__all__ = ["PushSlots", "ServerLimits", "TokenBucket", "refusal"]


@attrs.frozen(kw_only=True)
class ServerLimits:
    """Bounds on the server as a whole (see the module docstring); 0 means no bound."""

    max_streams: int = 10_000
    """Streams served at once; one more is refused."""
    new_streams_per_second: float = 1_000.0
    """Sustained rate of new streams, once the burst is used up."""
    new_streams_burst: int = 10_000
    """New streams let in at once before the rate applies."""
    max_initial_syncs: int = 10_000
    """Streams at once that have not yet answered a response of every type they asked for
    (a cap: it also holds for a burst that arrives before any sync has finished)."""
    max_sync_seconds: float = 10.0
    """Once syncs have been seen finishing with others queued behind them: how long the
    streams syncing now may take to finish, at that rate, before a new stream is refused.
    Envoy waits 15 s for its first configuration (``initial_fetch_timeout``): a proxy let
    into a longer queue gives up before its turn."""
    push_concurrency: int = 32
    """Streams computing and writing a push at once."""
    first_request_timeout: float = 15.0
    """Seconds a new stream may take to send its first request."""


class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved; ``clock`` is injectable."""

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> float:
        """Take a token; 0.0 if there was one, else the seconds until there will be."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        return (1.0 - self._tokens) / self.rate


class RateMeter:
    """Events a second, over the span of those of the last ``window`` seconds (so that a
    burst after a quiet spell is not diluted by it); 0.0, unknown, for fewer than
    ``least`` events. ``clock`` is injectable."""

    def __init__(
        self,
        window: float = 2.0,
        *,
        least: int = 10,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window = window
        self.least = least
        self._clock = clock
        self._times: deque[float] = deque()

    def mark(self) -> None:
        now = self._clock()
        self._times.append(now)
        self._trim(now)

    def rate(self) -> float:
        now = self._clock()
        self._trim(now)
        times = self._times
        if len(times) < self.least:
            return 0.0
        return len(times) / max(now - times[0], 0.1)

    def _trim(self, now: float) -> None:
        times = self._times
        while times and times[0] <= now - self.window:
            times.popleft()


SYNC_RATE_GUESS = 1_000.0
"""Initial syncs a second assumed before any has been seen to finish."""
SYNC_HINT_MIN = 0.5
SYNC_HINT_MAX = 30.0
SYNC_BACKLOG = 64
"""Streams syncing beyond which a sync that finishes counts towards the rate the server
syncs at (with fewer, the syncs finish as fast as streams arrive, whatever the server
could do)."""
SYNC_TURN_SPREAD = 0.1
"""A turn's hint is stretched by up to this fraction (the turns are spread already)."""


class SyncTurns:
    """When streams refused for ``max_initial_syncs`` should come back: the first once the
    streams syncing now would be done, at the rate syncs have been finishing
    (:data:`SYNC_RATE_GUESS` a second until one has), each next one a sync's time after the
    one before, within [0.5 s, 30 s]. Refused clients that heed their hint so come back at
    the pace the server syncs them: neither all at once, which brought 10,000 streams to
    154 s where 23 s sufficed, nor spread over twice the time, as a hint of the drain time
    jittered by 1-2x was. ``clock`` is injectable."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._next = 0.0
        """The turn the next refused stream gets (a time of ``clock``)."""

    def retry_after(self, syncing: int, rate: float) -> float:
        """Seconds until the turn of a stream refused now, with ``syncing`` streams syncing
        and syncs finishing at ``rate`` a second (0: unknown)."""
        now = self._clock()
        pace = rate if rate > 0 else SYNC_RATE_GUESS
        turn = max(now + syncing / pace, self._next)
        self._next = turn + 1.0 / pace
        return min(SYNC_HINT_MAX, max(SYNC_HINT_MIN, turn - now))


def refusal(message: str, retry_after: float, *, spread: float = 1.0) -> RemoteProtocolError:
    """RESOURCE_EXHAUSTED with a hint to retry after ``retry_after`` seconds, stretched by a
    random factor between 1 and 1 + ``spread`` (so refused clients do not come back all at
    once)."""
    hint = retry_after * random.uniform(1.0, 1.0 + spread)
    return RemoteProtocolError(
        f"{message}; retry after {hint:.1f} s", GrpcStatus.RESOURCE_EXHAUSTED
    )


class PushSlots:
    """``capacity`` slots for pushes; established streams are served before syncing ones.

    A syncing stream's slot stays taken until the end of the event loop's turn
    (``release(at_turn_end=True)``), and comes back then with every other slot syncs gave
    back in that turn, in one callback: once every slot is taken, the syncs that come
    meanwhile queue behind established pushes, so a turn runs at most ``capacity`` of a
    reconnect storm's syncs and an established push waits behind no more. (Holding the slot
    across a yield did the same at the cost of a task switch per sync.) On an event loop
    other than asyncio's, the slot comes back at once.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free = capacity
        self._waiting: tuple[deque[Wakeup], deque[Wakeup]] = (deque(), deque())
        self._held_over = 0
        """Slots given back in this loop turn, to be released at its end."""

    @property
    def in_use(self) -> int:
        """Slots held now (those given back for the end of the turn included)."""
        return self.capacity - self._free

    @property
    def waiting(self) -> int:
        """Streams waiting for a slot."""
        return len(self._waiting[0]) + len(self._waiting[1])

    async def acquire(self, *, syncing: bool) -> None:
        """Wait for a slot; ``syncing`` streams wait behind every established one."""
        if self.capacity <= 0:
            return
        # A free slot is taken at once; a push holds it only until a write would wait, so
        # pushes to every stream after a change do not queue for slots one after another.
        # (Established streams yielded first until 3 December: in a 20,000-stream storm that
        # put each of them behind the first step of every other stream woken by the change.)
        if self.try_acquire(syncing=syncing):
            return
        granted = Wakeup()
        queue = self._waiting[1 if syncing else 0]
        queue.append(granted)
        try:
            await granted.wait()
        except BaseException:
            if granted.raised:
                self.release()  # handed over just as it was cancelled: pass it on
            else:
                queue.remove(granted)
            raise

    def try_acquire(self, *, syncing: bool) -> bool:
        """Take a slot if one is free and no stream that goes first waits; never waits."""
        if self.capacity <= 0:
            return True
        if self._free > 0 and not self._waiting[0] and (not syncing or not self._waiting[1]):
            self._free -= 1
            return True
        return False

    def release(self, *, at_turn_end: bool = False) -> None:
        """Give a slot back: to the oldest established waiter, else the oldest syncing one;
        ``at_turn_end`` (a syncing stream's): once this turn of the event loop is over."""
        if self.capacity <= 0:
            return
        if at_turn_end:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = None
            if loop is not None:
                self._held_over += 1
                if self._held_over == 1:
                    loop.call_soon(self._turn_ended)
                return
        for queue in self._waiting:
            if queue:
                queue.popleft().set()
                return
        self._free += 1

    def _turn_ended(self) -> None:
        count, self._held_over = self._held_over, 0
        for _ in range(count):
            self.release()
