"""Facts the state machines report about a stream, named in the past tense."""

from __future__ import annotations

import attrs

from ..wire._records import ErrorDetail, Node
from ._subscription import Subscription

__all__ = [
    "Event",
    "NodeIdentified",
    "ResponseAcked",
    "ResponseNacked",
    "StaleNonceSeen",
    "SubscriptionChanged",
]


@attrs.frozen(kw_only=True)
class NodeIdentified:
    """The first request of the stream named the client."""

    node: Node


@attrs.frozen(kw_only=True)
class SubscriptionChanged:
    """The client's subscription for ``type_url`` became ``subscription``."""

    type_url: str
    previous: Subscription | None
    subscription: Subscription


@attrs.frozen(kw_only=True)
class ResponseAcked:
    """The client applied the response with ``nonce``; ``version_info`` is what it now holds.

    In Delta, ``version_info`` is the ``system_version_info`` of the acknowledged response.
    """

    type_url: str
    version_info: str
    nonce: str


@attrs.frozen(kw_only=True)
class ResponseNacked:
    """The client rejected the response with ``nonce`` (its ``version_info`` is ``rejected``).

    ``version_info`` is what the client says it still holds; ``error`` is its reason.
    """

    type_url: str
    rejected: str
    version_info: str
    nonce: str
    error: ErrorDetail


@attrs.frozen(kw_only=True)
class StaleNonceSeen:
    """A request echoed ``nonce`` after ``latest`` was sent; it was not taken as ACK or NACK."""

    type_url: str
    nonce: str
    latest: str


Event = NodeIdentified | SubscriptionChanged | ResponseAcked | ResponseNacked | StaleNonceSeen
"""Any event a state machine reports."""
