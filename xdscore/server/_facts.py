"""What a stream session reports beside the machine's events: small immutable facts.

The session (`._session`) returns them; the observer (`._observer`) turns them,
with the machine's events, into metrics, logs and callbacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ..protocol._events import ResponseNacked
from ..protocol._record import Record
from ..wire._records import Node
from ..wire._resource import Resource

__all__ = ["Converged", "Fact", "Identified", "Rejected", "Sent", "Settled", "Synced"]


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


class Settled(Fact):
    """The client holds exactly what the cache gives it now, of every type it asked for,
    with nothing of it in flight: checked against the view of revision ``seq`` (a sequence
    number of the server's revision log). ``changed``: it was sent something since it last
    settled."""

    # record fields:
    #     seq: int
    #     changed: bool
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("seq", "changed")
    __slots__ = _fields

    def __init__(self, seq: int, changed: bool) -> None:
        self.seq: Final = seq
        self.changed: Final = changed

    # --- end generated ---


class Rejected(Fact):
    """The client rejected ``response`` (the machine's event is ``nack``), written in a
    round that read revision ``seq``; ``held`` is what it holds of the type, by name."""

    # record fields:
    #     nack: ResponseNacked
    #     response: Any
    #     seq: int
    #     held: Mapping[str, Resource]
    # --- generated from the fields above by `make records`; do not edit ---
    _fields = ("nack", "response", "seq", "held")
    __slots__ = _fields

    def __init__(
        self, nack: ResponseNacked, response: Any, seq: int, held: Mapping[str, Resource]
    ) -> None:
        self.nack: Final = nack
        self.response: Final = response
        self.seq: Final = seq
        self.held: Final = held

    # --- end generated ---
