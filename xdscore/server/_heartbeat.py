"""When one stream's heartbeats are due, and which resources stay quiet.

A client that supports TTLs drops a resource whose TTL lapses without news of it. While such
a resource is unchanged the runtime sends heartbeats: every ``fraction`` of the shortest TTL
the client holds (a third by default, so one lost or late heartbeat costs nothing). The
machine says what the shortest TTL is and builds the heartbeat
(:meth:`~xdscore.protocol.SotwServer.heartbeat`); this schedule only keeps the time, given
the runtime's clock readings, and the server-wide set of resources whose heartbeats were stopped
(:meth:`~xdscore.XdsServer.stop_heartbeats`).
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["DEFAULT_HEARTBEAT_FRACTION", "HeartbeatSchedule"]

DEFAULT_HEARTBEAT_FRACTION = 1 / 3
"""Heartbeats go out every third of the shortest TTL a client holds."""


class HeartbeatSchedule:
    """One stream's next heartbeat time, in the runtime's monotonic seconds (``now``).

    ``fraction`` of the shortest TTL separates two heartbeats; 0 turns them off. ``quiet``
    is the live set of ``(type_url, name)`` not to heartbeat.
    """

    __slots__ = ("_fraction", "at", "quiet")

    def __init__(self, fraction: float, quiet: Collection[tuple[str, str]]) -> None:
        self._fraction = fraction
        self.quiet = quiet
        self.at: float | None = None
        """When the next heartbeat is due (``None``: none is planned)."""

    @property
    def enabled(self) -> bool:
        return self._fraction > 0

    def held(self, shortest_ttl: float | None, now: float) -> None:
        """The client now holds ``shortest_ttl`` as its shortest TTL (after a send): the next
        heartbeat is due within that fraction of it (an earlier one stays)."""
        if shortest_ttl is None or not self.enabled:
            self.at = None
            return
        due = now + shortest_ttl * self._fraction
        if self.at is None or due < self.at:
            self.at = due

    def beaten(self, shortest_ttl: float | None, now: float) -> None:
        """Heartbeats went out (or were due) and the client now holds ``shortest_ttl`` as its
        shortest TTL: the next are one interval away (none if nothing it holds expires)."""
        self.at = None
        self.held(shortest_ttl, now)

    def due(self, now: float) -> bool:
        """Whether the next heartbeat's time has come."""
        return self.at is not None and now >= self.at

    def wait(self, now: float) -> float | None:
        """Seconds until the next heartbeat (``None``: none is planned)."""
        if self.at is None:
            return None
        return max(0.0, self.at - now)
