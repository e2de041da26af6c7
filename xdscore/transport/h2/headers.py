"""Request header blocks: decoded with HPACK, checked against RFC 9113 in one pass, the
first of a connection from a memo.

:func:`parse_request` reads a request's fields once, in order, and either returns its
:class:`RequestHead` or raises :class:`MalformedRequest` naming the rule broken (sections
8.2 and 8.3), which the server answers with a stream error PROTOCOL_ERROR:

* a field name with an uppercase letter, a control character, a space or a non-ASCII byte;
  a field value with NUL, CR or LF, or starting or ending with a space or tab;
* a connection-specific field (``connection``, ``keep-alive``, ``proxy-connection``,
  ``transfer-encoding``, ``upgrade``), or ``te`` with any value but ``trailers``;
* a pseudo-header that is unknown or a response's, repeated, or after a regular field;
  ``:method``, ``:scheme`` or ``:path`` missing (``:authority`` alone for CONNECT), or an
  empty ``:path``;
* a ``content-length`` that is not a number (the connection checks that the DATA frames add
  up to it, section 8.1.1).

:func:`check_trailers` holds a client's trailers to the same field rules, and refuses any
pseudo-header in them.

Every connection's HPACK decoder starts from the same state, so its first header block
decodes to the same fields, and leaves the same dynamic table, whenever the bytes are the
same: and a fleet of clients of one build sends the same first block (an xDS client opens
one stream a connection, so that block is usually the only one). The heads of recent first
blocks are kept (:data:`xdscore._memos.HEADER_BLOCKS`); a connection whose first block is
one of them decodes and checks nothing, and brings its decoder up to date by decoding that
block only if a second one arrives.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

from hpack import Decoder
from mypy_extensions import mypyc_attr

from ..._memos import HEADER_BLOCKS, footprint

__all__ = ["HeaderDecoder", "MalformedRequest", "RequestHead", "check_trailers", "parse_request"]

Fields = Iterable[tuple[str, str]]

_BAD_NAME: Final = re.compile(r"[\x00-\x20A-Z\x7f-\xff]")
"""What no field name may hold (8.2.1); a pseudo-header's leading colon is checked apart."""
_CONNECTION_SPECIFIC: Final = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade"}
)
_PSEUDO: Final = frozenset({":method", ":scheme", ":path", ":authority"})


class MalformedRequest(Exception):
    """A request the RFC calls malformed (sections 8.1.1, 8.2, 8.3): a stream error
    PROTOCOL_ERROR. The message names the rule."""


@mypyc_attr(allow_interpreted_subclasses=True)
class RequestHead:
    """A well-formed request's headers: its pseudo-headers, and the other fields by name
    (the last one of a name, as gRPC metadata is read)."""

    __slots__ = ("authority", "content_length", "fields", "method", "path", "scheme")

    def __init__(
        self,
        method: str,
        scheme: str,
        path: str,
        authority: str,
        fields: Mapping[str, str],
        content_length: int,
    ) -> None:
        self.method = method
        self.scheme = scheme
        self.path = path
        self.authority = authority
        self.fields = fields
        """Every regular field (not the pseudo-headers); shared by the connections whose
        first block it came from: never changed."""
        self.content_length = content_length
        """The ``content-length`` the request declares, or -1."""


_KEPT_BLOCK_BYTES = 4096
"""Longer first blocks are not remembered."""
"""By (the decoder's header list limit, the block): what the block decoded to."""


def _bad_name(name: str) -> bool:
    if name.isascii() and name.islower() and name.isprintable() and " " not in name:
        return False  # the usual name, checked by four string methods
    return _BAD_NAME.search(name) is not None or not name


def _bad_value(value: str) -> bool:
    if "\x00" in value or "\r" in value or "\n" in value:
        return True
    return bool(value) and (value[0] in " \t" or value[-1] in " \t")


def _field_problem(name: str, value: str) -> str | None:
    if _bad_name(name):
        return f"the field name {name!r} is not lowercase visible ASCII (8.2.1)"
    if _bad_value(value):
        return f"the value of {name!r} holds NUL, CR or LF, or starts or ends with a space (8.2.1)"
    if name in _CONNECTION_SPECIFIC:
        return f"{name!r} is a connection-specific field (8.2.2)"
    if name == "te" and value.lower() != "trailers":
        return "te other than 'trailers' (8.2.2)"
    return None


def parse_request(fields: Fields) -> RequestHead:
    """The head of the request whose header block decoded to ``fields`` (names and values
    as Latin-1 text); raises :class:`MalformedRequest`."""
    pseudo: dict[str, str] = {}
    regular: dict[str, str] = {}
    content_length = -1
    for name, value in fields:
        if name[:1] == ":":
            if regular:
                raise MalformedRequest(f"the pseudo-header {name} follows a regular field (8.3)")
            if name not in _PSEUDO:
                raise MalformedRequest(f"{name} is not a request pseudo-header (8.3)")
            if name in pseudo:
                raise MalformedRequest(f"{name} appears twice (8.3.1)")
            if _bad_value(value):
                raise MalformedRequest(f"the value of {name} is not a valid field value (8.2.1)")
            pseudo[name] = value
            continue
        problem = _field_problem(name, value)
        if problem is not None:
            raise MalformedRequest(problem)
        if name == "content-length":
            if not value.isdigit() or not value.isascii() or len(value) > 18:
                raise MalformedRequest("content-length is not a number (8.1.1)")
            if content_length >= 0 and int(value) != content_length:
                raise MalformedRequest("two different content-length values (8.1.1)")
            content_length = int(value)
        regular[name] = value
    method = pseudo.get(":method")
    if method is None:
        raise MalformedRequest(":method is missing (8.3.1)")
    path = pseudo.get(":path")
    scheme = pseudo.get(":scheme")
    authority = pseudo.get(":authority", "")
    if method == "CONNECT":
        if path is not None or scheme is not None or not authority:
            raise MalformedRequest("CONNECT takes :authority alone (8.5)")
        return RequestHead(method, "", "", authority, regular, content_length)
    if scheme is None:
        raise MalformedRequest(":scheme is missing (8.3.1)")
    if not path:
        raise MalformedRequest(":path is missing or empty (8.3.1)")
    return RequestHead(method, scheme, path, authority, regular, content_length)


def check_trailers(fields: Fields) -> None:
    """Raise :class:`MalformedRequest` unless ``fields`` are valid request trailers: no
    pseudo-header (8.1), every field valid (8.2)."""
    for name, value in fields:
        if name[:1] == ":":
            raise MalformedRequest(f"the pseudo-header {name} in trailers (8.1)")
        problem = _field_problem(name, value)
        if problem is not None:
            raise MalformedRequest(problem)


def _text(fields: Iterable[tuple[bytes, bytes]]) -> list[tuple[str, str]]:
    return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in fields]


class HeaderDecoder:
    """One connection's HPACK decoding; hpack's ``HPACKError`` is a connection error."""

    __slots__ = ("_decoder", "_first", "_limit", "_replay")

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = Decoder()
        self._decoder.max_header_list_size = max_header_list_size
        self._limit = max_header_list_size
        self._first = True
        self._replay: bytes | None = None
        """A first block taken from the memo: not yet decoded into this decoder's table."""

    def request(self, block: bytes) -> RequestHead:
        """The head of the request whose header block is ``block``, the next block of the
        connection; raises :class:`MalformedRequest` once the block is decoded."""
        if self._first:
            self._first = False
            key = (self._limit, block)
            found = HEADER_BLOCKS.get(key)
            if found is not None:
                assert isinstance(found, RequestHead)
                self._replay = block
                return found
            head = parse_request(_text(self._decoder.decode(block, raw=True)))
            if len(block) <= _KEPT_BLOCK_BYTES:
                HEADER_BLOCKS.put(key, head, footprint(key, head))
            return head
        return parse_request(self.decode(block))

    def decode(self, block: bytes) -> list[tuple[str, str]]:
        """The fields of the next header block of the connection (a block that opens no
        request: trailers, or a block on a stream already closed)."""
        decoder = self._decoder
        if self._first:
            self._first = False
        elif self._replay is not None:
            replay, self._replay = self._replay, None
            decoder.decode(replay, raw=True)
        return _text(decoder.decode(block, raw=True))
