"""Bounds on what one stream may ask for, enforced by the state machines."""

from __future__ import annotations

import attrs

__all__ = ["StreamLimits"]


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
