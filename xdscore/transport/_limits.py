"""HTTP/2 abuse bounds, per connection, shared by both transports: rapid resets, PING floods
and SETTINGS floods.

Three kinds of frame cost the server work and give a client nothing it needs at a high rate:

* **rapid resets** (CVE-2023-44487): streams the client opens and resets (RST_STREAM) while
  they are young, and streams the server resets because the client broke the protocol on
  them (the "made you reset" variant). Every such stream costs a request handler being
  started and cancelled; the concurrent-stream limit does not bound them, since a reset
  stream no longer counts as open;
* **PING frames**, each answered with a PING ACK whether or not the client reads;
* **SETTINGS frames**, each applied and acknowledged.

Each kind has a token bucket (a sustained rate, and a burst that can arrive at once). A
frame arriving with the bucket empty cuts the connection: GOAWAY with ENHANCE_YOUR_CALM,
every stream on the connection ended, one WARNING naming the peer (:func:`log_cut`), and
one count in ``xdscore_connections_cut_total{reason}``. Counting costs a clock read and a
few float operations per counted frame (the runtime's token bucket,
``xdscore.server._admission.TokenBucket``); other frames cost nothing.
"""

from __future__ import annotations

import logging
import time
from typing import Literal

import attrs

from ..server._admission import TokenBucket

__all__ = ["Bucket", "ConnectionLimits", "CutReason", "bucket", "log_cut"]

log = logging.getLogger("xdscore.transport")

CutReason = Literal["rapid_reset", "ping_flood", "settings_flood"]


@attrs.frozen(kw_only=True)
class ConnectionLimits:
    """Per-connection bounds on HTTP/2 frames that cost work; a rate of 0 means no bound.

    Each bound is a token bucket: ``*_burst`` frames may arrive at once, and the bucket
    refills at ``*_per_second``. Past it the connection is cut (GOAWAY ENHANCE_YOUR_CALM).
    """

    resets_per_second: float = 200.0
    """Sustained rate of rapid resets (see :attr:`reset_age`) once the burst is used up."""
    resets_burst: int = 400
    """Rapid resets accepted at once."""
    reset_age: float = 1.0
    """A stream reset (by the client, or by the server for the client's protocol error)
    less than this many seconds after it opened counts as a rapid reset."""
    pings_per_second: float = 100.0
    """Sustained rate of PING frames (and unsolicited PING ACKs) from the client."""
    pings_burst: int = 100
    """PING frames accepted at once."""
    settings_per_second: float = 100.0
    """Sustained rate of SETTINGS frames from the client."""
    settings_burst: int = 100
    """SETTINGS frames accepted at once."""
    close_grace: float = 1.0
    """Seconds a cut connection may take to flush its GOAWAY before it is aborted."""


class Bucket(TokenBucket):
    """The runtime's token bucket, counting what it is asked for (for the log line)."""

    count = 0

    def take(self) -> float:
        self.count += 1
        return super().take()


def bucket(rate: float, burst: int) -> Bucket | None:
    return Bucket(rate, burst) if rate > 0 else None


WHAT = {
    "rapid_reset": "streams reset within {age:g} s of opening",
    "ping_flood": "PING frames",
    "settings_flood": "SETTINGS frames",
}


def log_cut(
    peer: str, reason: CutReason, bucket: Bucket, limits: ConnectionLimits, opened: float
) -> None:
    """The one WARNING a cut connection gets."""
    log.warning(
        "cut the connection from %s (%s): %d %s %.2f s after it opened, past %g a second "
        "with a burst of %d; sent GOAWAY ENHANCE_YOUR_CALM",
        peer,
        reason,
        bucket.count,
        WHAT[reason].format(age=limits.reset_age),
        time.monotonic() - opened,
        bucket.rate,
        bucket.burst,
    )
