"""The life of a stream machine, shared by the SotW and Delta machines."""

from __future__ import annotations

import enum

from .._errors import LocalProtocolError

__all__ = ["StreamState", "ensure_open"]


class StreamState(enum.Enum):
    """OPEN until a protocol error, then ERROR for good (the stream must end)."""

    OPEN = "open"
    ERROR = "error"


def ensure_open(state: StreamState) -> None:
    """Refuse to drive a machine that already failed."""
    if state is not StreamState.OPEN:
        raise LocalProtocolError(f"stream machine is in state {state.name}")
