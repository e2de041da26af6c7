"""Errors that say who broke the protocol, each carrying the gRPC status it suggests, and
the transport-neutral signal that the peer went away."""

from __future__ import annotations

import enum

__all__ = [
    "GrpcStatus",
    "LocalProtocolError",
    "ProtocolError",
    "RemoteProtocolError",
    "StreamClosed",
    "too_many_names",
]


class GrpcStatus(enum.IntEnum):
    """The canonical gRPC status codes."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class ProtocolError(Exception):
    """A violation of the xDS protocol; ``status`` is the gRPC status to end the stream with.

    Never raised directly: see :class:`LocalProtocolError` and :class:`RemoteProtocolError`.
    """

    status: GrpcStatus

    def __init__(self, message: str, status: GrpcStatus) -> None:
        if type(self) is ProtocolError:
            raise TypeError("raise LocalProtocolError or RemoteProtocolError")
        super().__init__(message)
        self.message = message
        self.status = status


class LocalProtocolError(ProtocolError):
    """The code driving a state machine asked for something the protocol forbids."""

    def __init__(self, message: str, status: GrpcStatus = GrpcStatus.INTERNAL) -> None:
        super().__init__(message, status)


class RemoteProtocolError(ProtocolError):
    """The peer sent something the protocol forbids; the stream should end with ``status``."""

    def __init__(self, message: str, status: GrpcStatus = GrpcStatus.INVALID_ARGUMENT) -> None:
        super().__init__(message, status)


class StreamClosed(Exception):
    """The peer went away: it reset its stream or dropped its connection.

    A transport raises it from a byte stream's ``receive`` or ``send``; the driver then ends
    the stream cleanly. It is not a failure and carries no status.
    """


def too_many_names(what: str, count: int, limit: int) -> RemoteProtocolError:
    """The error for a request whose list ``what`` holds ``count`` names, over ``limit``."""
    return RemoteProtocolError(
        f"{what} lists {count} names; the limit is {limit}", GrpcStatus.RESOURCE_EXHAUSTED
    )
