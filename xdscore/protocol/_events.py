"""Facts the state machines report about a stream, named in the past tense."""

from __future__ import annotations

from typing import Final, final

from ..wire._records import ErrorDetail, Node
from ._record import Record
from ._subscription import Subscription

__all__ = [
    "Event",
    "NodeIdentified",
    "ResponseAcked",
    "ResponseNacked",
    "StaleNonceSeen",
    "SubscriptionChanged",
]


_NODE_IDENTIFIED_FIELDS = ("node",)


@final
class NodeIdentified(Record):
    """The first request of the stream named the client."""

    __slots__ = _NODE_IDENTIFIED_FIELDS
    _fields = _NODE_IDENTIFIED_FIELDS

    def __init__(self, *, node: Node) -> None:
        self.node: Final = node


_SUBSCRIPTION_CHANGED_FIELDS = ("type_url", "previous", "subscription")


@final
class SubscriptionChanged(Record):
    """The client's subscription for ``type_url`` became ``subscription``."""

    __slots__ = _SUBSCRIPTION_CHANGED_FIELDS
    _fields = _SUBSCRIPTION_CHANGED_FIELDS

    def __init__(
        self, *, type_url: str, previous: Subscription | None, subscription: Subscription
    ) -> None:
        self.type_url: Final = type_url
        self.previous: Final = previous
        self.subscription: Final = subscription


_RESPONSE_ACKED_FIELDS = ("type_url", "version_info", "nonce")


@final
class ResponseAcked(Record):
    """The client applied the response with ``nonce``; ``version_info`` is what it now holds.

    In Delta, ``version_info`` is the ``system_version_info`` of the acknowledged response.
    """

    __slots__ = _RESPONSE_ACKED_FIELDS
    _fields = _RESPONSE_ACKED_FIELDS

    def __init__(self, *, type_url: str, version_info: str, nonce: str) -> None:
        self.type_url: Final = type_url
        self.version_info: Final = version_info
        self.nonce: Final = nonce


_RESPONSE_NACKED_FIELDS = ("type_url", "rejected", "version_info", "nonce", "error")


@final
class ResponseNacked(Record):
    """The client rejected the response with ``nonce`` (its ``version_info`` is ``rejected``).

    ``version_info`` is what the client says it still holds; ``error`` is its reason.
    """

    __slots__ = _RESPONSE_NACKED_FIELDS
    _fields = _RESPONSE_NACKED_FIELDS

    def __init__(
        self, *, type_url: str, rejected: str, version_info: str, nonce: str, error: ErrorDetail
    ) -> None:
        self.type_url: Final = type_url
        self.rejected: Final = rejected
        self.version_info: Final = version_info
        self.nonce: Final = nonce
        self.error: Final = error


_STALE_NONCE_SEEN_FIELDS = ("type_url", "nonce", "latest")


@final
class StaleNonceSeen(Record):
    """A request echoed ``nonce`` after ``latest`` was sent; it was not taken as ACK or NACK."""

    __slots__ = _STALE_NONCE_SEEN_FIELDS
    _fields = _STALE_NONCE_SEEN_FIELDS

    def __init__(self, *, type_url: str, nonce: str, latest: str) -> None:
        self.type_url: Final = type_url
        self.nonce: Final = nonce
        self.latest: Final = latest


Event = NodeIdentified | SubscriptionChanged | ResponseAcked | ResponseNacked | StaleNonceSeen
"""Any event a state machine reports."""
