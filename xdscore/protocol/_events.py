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


@final
class NodeIdentified(Record):
    """The first request of the stream named the client."""

    # record fields:
    #     *
    #     node: Node
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("node",)
    __slots__ = _fields

    def __init__(self, *, node: Node) -> None:
        self.node: Final = node

    # --- end generated ---


@final
class SubscriptionChanged(Record):
    """The client's subscription for ``type_url`` became ``subscription``."""

    # record fields:
    #     *
    #     type_url: str
    #     previous: Subscription | None
    #     subscription: Subscription
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("type_url", "previous", "subscription")
    __slots__ = _fields

    def __init__(
        self, *, type_url: str, previous: Subscription | None, subscription: Subscription
    ) -> None:
        self.type_url: Final = type_url
        self.previous: Final = previous
        self.subscription: Final = subscription

    # --- end generated ---


@final
class ResponseAcked(Record):
    """The client applied the response with ``nonce``; ``version_info`` is what it now holds.

    In Delta, ``version_info`` is the ``system_version_info`` of the acknowledged response.
    """

    # record fields:
    #     *
    #     type_url: str
    #     version_info: str
    #     nonce: str
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("type_url", "version_info", "nonce")
    __slots__ = _fields

    def __init__(self, *, type_url: str, version_info: str, nonce: str) -> None:
        self.type_url: Final = type_url
        self.version_info: Final = version_info
        self.nonce: Final = nonce

    # --- end generated ---


@final
class ResponseNacked(Record):
    """The client rejected the response with ``nonce`` (its ``version_info`` is ``rejected``).

    ``version_info`` is what the client says it still holds; ``error`` is its reason.
    """

    # record fields:
    #     *
    #     type_url: str
    #     rejected: str
    #     version_info: str
    #     nonce: str
    #     error: ErrorDetail
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("type_url", "rejected", "version_info", "nonce", "error")
    __slots__ = _fields

    def __init__(
        self, *, type_url: str, rejected: str, version_info: str, nonce: str, error: ErrorDetail
    ) -> None:
        self.type_url: Final = type_url
        self.rejected: Final = rejected
        self.version_info: Final = version_info
        self.nonce: Final = nonce
        self.error: Final = error

    # --- end generated ---


@final
class StaleNonceSeen(Record):
    """A request echoed ``nonce`` after ``latest`` was sent; it was not taken as ACK or NACK."""

    # record fields:
    #     *
    #     type_url: str
    #     nonce: str
    #     latest: str
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("type_url", "nonce", "latest")
    __slots__ = _fields

    def __init__(self, *, type_url: str, nonce: str, latest: str) -> None:
        self.type_url: Final = type_url
        self.nonce: Final = nonce
        self.latest: Final = latest

    # --- end generated ---


Event = NodeIdentified | SubscriptionChanged | ResponseAcked | ResponseNacked | StaleNonceSeen
"""Any event a state machine reports."""
