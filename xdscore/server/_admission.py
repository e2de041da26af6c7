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
* **Push slots.** At most ``push_concurrency`` established streams compute and write a
  push at once, and as many streams still in their initial sync, from a pool of their own:
  a storm of new streams cannot make proxies that are already connected wait. A stream
  gives its slot back before a write that would wait for the client to read, so a client
  that stops reading never holds one; a syncing stream's slot comes back at the end of the
  loop turn, so a turn runs at most ``push_concurrency`` syncs.
* **Deadlines.** A stream whose first request does not come within
  ``first_request_timeout`` is ended (DEADLINE_EXCEEDED); it holds a stream slot until then.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import time
from collections import deque
from collections.abc import Callable

import attrs
from mypy_extensions import mypyc_attr

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
    """Established streams computing and writing a push at once; as many syncing streams
    (from a pool of their own), which each turn of the event loop runs at most."""
    first_request_timeout: float = 15.0
    """Seconds a new stream may take to send its first request."""


@mypyc_attr(allow_interpreted_subclasses=True)
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
    (`SYNC_RATE_GUESS` a second until one has), each next one a sync's time after the
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


WAKES_PER_TURN = 128
"""Streams a cache change wakes in one turn of the event loop while syncs wait for push
slots (see [`PushSlots.wake`][xdscore.server.PushSlots.wake])."""


@mypyc_attr(allow_interpreted_subclasses=True)
class PushSlots:
    """Push slots, in two pools of ``capacity``: one for established streams, one for
    streams in their initial sync. Neither waits for the other's.

    A push holds its slot until a write would wait for the client, so a client that stops
    reading holds none. A syncing stream's slot comes back at the end of the event loop's
    turn (``release(at_turn_end=True)``), with every other slot syncs gave back in that
    turn, in one callback: a turn runs at most ``capacity`` of a reconnect storm's syncs.
    (Holding the slot across a yield did the same at the cost of a task switch per sync.)
    An established push never waits for a sync's slot: when they shared one pool, the
    slots a turn's end gave back went to syncs waiting for them before an established push
    woken by a cache change could ask, and in a 20,000-stream storm the push waited a turn
    more, as long as it took to wake every other stream (0.1 s). On an event loop other
    than asyncio's, a sync's slot comes back at once.
    """

    def __init__(self, capacity: int, *, on_deferred: Callable[[], None] | None = None) -> None:
        self.capacity = capacity
        self._on_deferred = on_deferred
        """Called for each stream [`wake`][xdscore.server.PushSlots.wake] leaves for a later
        turn."""
        self._free = [capacity, capacity]
        """Free slots: established streams', syncing streams'."""
        self._waiting: tuple[deque[Wakeup], deque[Wakeup]] = (deque(), deque())
        self._held_over = 0
        """Syncs' slots given back in this loop turn, to be released at its end."""
        self._to_wake: list[tuple[int, Callable[[], None]]] = []
        """A heap of the streams a cache change is still to wake, by age."""
        self._orders = itertools.count()
        self._woken_ahead = 0
        """Streams [`wake`][xdscore.server.PushSlots.wake] woke in this loop turn ahead of the
        queue."""
        self._wake_turn_scheduled = False

    @property
    def in_use(self) -> int:
        """Slots held now, in both pools (those given back for the turn's end included)."""
        return 2 * self.capacity - self._free[0] - self._free[1]

    @property
    def waiting(self) -> int:
        """Streams waiting for a slot."""
        return len(self._waiting[0]) + len(self._waiting[1])

    async def acquire(self, *, syncing: bool) -> None:
        """Wait for a slot of the ``syncing`` streams' pool or the established ones'."""
        if self.capacity <= 0:
            return
        # A free slot is taken at once; a push holds it only until a write would wait, so
        # pushes to every stream after a change do not queue for slots one after another.
        # (Established streams yielded first until 3 December: in a 20,000-stream storm that
        # put each of them behind the first step of every other stream woken by the change.)
        if self.try_acquire(syncing=syncing):
            return
        granted = Wakeup()
        queue = self._waiting[syncing]
        queue.append(granted)
        try:
            await granted.wait()
        except BaseException:
            if granted.raised:
                self.release(at_turn_end=syncing)  # handed over as it was cancelled
            else:
                queue.remove(granted)
            raise

    def try_acquire(self, *, syncing: bool) -> bool:
        """Take a slot of the pool if one is free and no stream waits for one; never waits."""
        if self.capacity <= 0:
            return True
        if self._free[syncing] > 0 and not self._waiting[syncing]:
            self._free[syncing] -= 1
            return True
        return False

    def release(self, *, at_turn_end: bool = False) -> None:
        """Give an established stream's slot back, or (``at_turn_end``) a syncing stream's,
        once this turn of the event loop is over; to the pool's oldest waiter, if any."""
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
        self._give_back(at_turn_end)

    @property
    def to_wake(self) -> int:
        """Streams a cache change is still to wake (see [`wake`][xdscore.server.PushSlots.wake])."""
        return len(self._to_wake)

    def next_order(self) -> int:
        """A new stream's place in the order [`wake`][xdscore.server.PushSlots.wake] follows (older
        first)."""
        return next(self._orders)

    def wake(self, wake: Callable[[], None], *, order: int) -> None:
        """Call ``wake`` (a stream's, for a cache change) now, unless syncs wait for slots
        (a storm): then at most `WAKES_PER_TURN` streams are woken in a turn, the
        oldest (lowest ``order``, from [`next_order`][xdscore.server.PushSlots.next_order]) first,
        and the others in later turns. The caller queues its stream once until it is woken."""
        queue = self._to_wake
        if not queue and not self._waiting[1]:
            wake()
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            wake()
            return
        if self._woken_ahead < WAKES_PER_TURN and (not queue or order < queue[0][0]):
            # Older than every stream still to wake (a cache change wakes streams oldest
            # first): at once, without waiting for the turn's share of the queue.
            self._woken_ahead += 1
            wake()
        else:
            heapq.heappush(queue, (order, wake))
            if self._on_deferred is not None:
                self._on_deferred()
        if not self._wake_turn_scheduled:
            self._wake_turn_scheduled = True
            loop.call_soon(self._next_wakes)

    def _next_wakes(self) -> None:
        self._woken_ahead = 0
        queue = self._to_wake
        for _ in range(min(WAKES_PER_TURN, len(queue))):
            heapq.heappop(queue)[1]()
        self._wake_turn_scheduled = bool(queue)
        if queue:
            asyncio.get_running_loop().call_soon(self._next_wakes)

    def _give_back(self, syncing: bool) -> None:
        queue = self._waiting[syncing]
        if queue:
            queue.popleft().set()
        else:
            self._free[syncing] += 1

    def _turn_ended(self) -> None:
        count, self._held_over = self._held_over, 0
        for _ in range(count):
            self._give_back(True)
