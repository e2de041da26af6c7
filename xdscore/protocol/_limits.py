"""Bounds on what one stream may ask for, and the checks the state machines apply."""

from __future__ import annotations

from collections.abc import Collection

import attrs

from .._errors import GrpcStatus, RemoteProtocolError, too_many_names

__all__ = ["StreamLimits", "check_names", "check_subscribed", "check_type_count"]


@attrs.frozen(kw_only=True)
class StreamLimits:
    """Per-stream bounds; a request beyond them ends the stream with RESOURCE_EXHAUSTED."""

    max_names_per_request: int = 100_000
    """Names in one request (``resource_names`` or a Delta subscribe/unsubscribe list)."""
    max_subscribed_names: int = 200_000
    """Names one type may have subscribed at once."""
    max_types: int = 64
    """Distinct type URLs one stream may subscribe to."""
    max_name_length: int = 4096
    """Length of one resource name, in characters."""
    max_request_bytes: int = 16 * 1024 * 1024
    """Size of one encoded request; transports check it before decoding."""


def check_names(names: Collection[str], limits: StreamLimits, what: str) -> None:
    """Reject a request whose name list exceeds the stream limits."""
    if len(names) > limits.max_names_per_request:
        raise too_many_names(what, len(names), limits.max_names_per_request)
    longest = 0
    for name in names:  # (compiled, a loop costs a tenth of max(map(len, names)))
        if len(name) > longest:
            longest = len(name)
    if longest > limits.max_name_length:
        raise RemoteProtocolError(
            f"a name in {what} is {longest} characters long; the limit is {limits.max_name_length}",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )


def check_type_count(known: int, limits: StreamLimits) -> None:
    """Reject subscribing to one more type once ``limits.max_types`` are in use."""
    if known >= limits.max_types:
        raise RemoteProtocolError(
            f"a stream may subscribe to at most {limits.max_types} types",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )


def check_subscribed(count: int, limits: StreamLimits) -> None:
    """Reject a subscription holding more than ``limits.max_subscribed_names`` names."""
    if count > limits.max_subscribed_names:
        raise RemoteProtocolError(
            f"subscription of {count} names exceeds the limit of {limits.max_subscribed_names}",
            GrpcStatus.RESOURCE_EXHAUSTED,
        )
