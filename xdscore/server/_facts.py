"""What a stream session reports beside the machine's events: small immutable facts.

The session (:mod:`._session`) returns them; the observer (:mod:`._observer`) turns them,
with the machine's events, into metrics, logs and callbacks.
"""

from __future__ import annotations

from typing import Any, Final

from ..protocol._record import Record
from ..wire._records import Node

__all__ = ["Converged", "Fact", "Identified", "Sent", "Synced"]


class Fact(Record):
    """Something a stream session reports."""

    __slots__ = ()


class Identified(Fact):
    """The first request named the stream's node; its features and policy are in place."""

    # record fields:
    #     node: Node
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("node",)
    __slots__ = _fields

    def __init__(self, node: Node) -> None:
        self.node: Final = node

    # --- end generated ---


class Synced(Fact):
    """The client has answered a response of every type it asked for."""

    __slots__ = ()


class Converged(Fact):
    """The client acknowledged a response carrying a cache change ``seconds`` after the
    change was first seen."""

    # record fields:
    #     type_url: str
    #     seconds: float
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("type_url", "seconds")
    __slots__ = _fields

    def __init__(self, type_url: str, seconds: float) -> None:
        self.type_url: Final = type_url
        self.seconds: Final = seconds

    # --- end generated ---


class Sent(Fact):
    """``response`` (``size`` bytes) was written, ``seconds`` after its round began."""

    # record fields:
    #     response: Any
    #     size: int
    #     seconds: float
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("response", "size", "seconds")
    __slots__ = _fields

    def __init__(self, response: Any, size: int, seconds: float) -> None:
        self.response: Final = response
        self.size: Final = size
        self.seconds: Final = seconds

    # --- end generated ---
