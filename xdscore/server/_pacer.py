"""Debounce in the runtime: a burst of cache writes reaches the streams as one push.

Every cache write that changes a type is told to the `Pacer` (through the cache's
``on_update``). Writes are grouped in bursts: a burst ends once no write came for the quiet
window, or at the latest ``max_delay`` after it began; a stream woken by a write pushes when
the burst ends, so twenty writes in a second become one push of the last state. High-churn
types (endpoints by default) have their own burst with its own, shorter, quiet window: an
endpoint change goes out at once, without waiting behind a listener change that is still
settling, and without pushing that listener change early. A stream's own requests are
answered at once, whatever is settling. A cache that cannot say which type changed is
treated as changing the slow kind.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import attrs

from ..wire._typeurls import ENDPOINT

__all__ = ["Pacer", "Pacing"]


@attrs.frozen(kw_only=True)
class Pacing:
    """Quiet windows and the longest delay, in seconds; 0 turns a delay off."""

    quiet: float = 0.1
    """A burst of changes ends once the cache has been quiet this long..."""
    max_delay: float = 10.0
    """...or at the latest this long after it began."""
    fast_types: frozenset[str] = frozenset({ENDPOINT})
    """Types with a burst of their own (high churn, nothing waits on them)."""
    fast_quiet: float = 0.0
    """The quiet window of the fast types."""


@attrs.define
class _Burst:
    quiet: float
    max_delay: float
    first: float = -1.0
    last: float = -1.0

    def deadline(self) -> float:
        """When the current burst ends."""
        end = self.last + self.quiet
        if self.max_delay > 0:
            end = min(end, self.first + self.max_delay)
        return end

    def note(self, now: float) -> None:
        if self.first < 0 or now > self.deadline():
            self.first = now  # the previous burst ended: this write begins a new one
        self.last = now


class Pacer:
    """Tells streams when the changes they were woken for have settled."""

    def __init__(self, pacing: Pacing, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.pacing = pacing
        self.clock = clock
        self._slow = _Burst(pacing.quiet, pacing.max_delay)
        self._fast = _Burst(pacing.fast_quiet, pacing.max_delay)
        self.told = False
        """Whether the cache tells which types change (else every change counts as slow)."""

    @property
    def fast_types(self) -> frozenset[str]:
        """The types whose changes settle on their own, shorter, window."""
        return self.pacing.fast_types

    def changed(self, type_url: str | None) -> None:
        """A cache write changed ``type_url`` (``None``: some type, unknown)."""
        if type_url is not None:
            self.told = True
        now = self.clock()
        if type_url is not None and type_url in self.pacing.fast_types:
            self._fast.note(now)
        else:
            self._slow.note(now)

    def due(self, since: float) -> tuple[bool, bool]:
        """(fast, slow): whether each kind changed after ``since``."""
        return self._fast.last > since, self._slow.last > since

    def settles(self, *, fast: bool) -> float:
        """When the current burst of that kind ends (a ``clock()`` time)."""
        return (self._fast if fast else self._slow).deadline()
