"""HTTP/2 framing for :class:`~xdscore.transport.Http2Transport`: constants, frame headers,
the server's SETTINGS and the header blocks it sends (gRPC's, and a plain HTTP refusal's).

Frames are built and split here; HPACK is the ``hpack`` library's. The server never adds
to the dynamic table of the header blocks it sends (every field is a never-indexed literal
or a static-table entry), so its blocks do not depend on the connection and the common
ones are encoded once, at import.
"""

from __future__ import annotations

import enum
import struct
from urllib.parse import quote

from hpack import Encoder, NeverIndexedHeaderTuple

__all__ = [
    "ACK",
    "END_HEADERS",
    "END_STREAM",
    "PADDED",
    "PREFACE",
    "PRIORITY_FLAG",
    "ErrorCode",
    "FrameType",
    "Setting",
    "encode_grpc_message",
    "frame",
    "goaway",
    "plain_response_headers",
    "response_headers",
    "rst_stream",
    "settings",
    "trailers",
    "window_update",
]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
"""What a client sends first on every connection."""

END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65_535
DEFAULT_FRAME = 16_384
MAX_FRAME = 2**24 - 1


class FrameType(enum.IntEnum):
    DATA = 0
    HEADERS = 1
    PRIORITY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PUSH_PROMISE = 5
    PING = 6
    GOAWAY = 7
    WINDOW_UPDATE = 8
    CONTINUATION = 9


class ErrorCode(enum.IntEnum):
    """The error codes of RST_STREAM and GOAWAY (RFC 9113 section 7) the server sends."""

    NO_ERROR = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2
    FLOW_CONTROL_ERROR = 3
    STREAM_CLOSED = 5
    FRAME_SIZE_ERROR = 6
    REFUSED_STREAM = 7
    CANCEL = 8
    COMPRESSION_ERROR = 9
    ENHANCE_YOUR_CALM = 11


class Setting(enum.IntEnum):
    HEADER_TABLE_SIZE = 1
    ENABLE_PUSH = 2
    MAX_CONCURRENT_STREAMS = 3
    INITIAL_WINDOW_SIZE = 4
    MAX_FRAME_SIZE = 5
    MAX_HEADER_LIST_SIZE = 6


_HEADER = struct.Struct(">BHBBL")
"""A frame header: 24-bit length (as a byte and a short), type, flags, stream id."""


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    """One frame, header and payload joined."""
    size = len(payload)
    return _HEADER.pack(size >> 16, size & 0xFFFF, kind, flags, stream_id) + payload


def data_header(size: int, stream_id: int, *, end_stream: bool = False) -> bytes:
    """The 9-byte header of a DATA frame carrying ``size`` bytes."""
    flags = END_STREAM if end_stream else 0
    return _HEADER.pack(size >> 16, size & 0xFFFF, FrameType.DATA, flags, stream_id)


def settings(values: dict[Setting, int]) -> bytes:
    payload = b"".join(struct.pack(">HL", key, value) for key, value in values.items())
    return frame(FrameType.SETTINGS, 0, 0, payload)


def window_update(stream_id: int, increment: int) -> bytes:
    return frame(FrameType.WINDOW_UPDATE, 0, stream_id, struct.pack(">L", increment))


def rst_stream(stream_id: int, code: ErrorCode) -> bytes:
    return frame(FrameType.RST_STREAM, 0, stream_id, struct.pack(">L", code))


def goaway(last_stream_id: int, code: ErrorCode, debug: bytes = b"") -> bytes:
    return frame(FrameType.GOAWAY, 0, 0, struct.pack(">LL", last_stream_id, code) + debug)


_ENCODER = Encoder()
"""Used for never-indexed fields only, so it never holds state between blocks."""


def _block(fields: list[tuple[str, str]]) -> bytes:
    return _ENCODER.encode([NeverIndexedHeaderTuple(name, value) for name, value in fields])


_HEADERS = [(":status", "200"), ("content-type", "application/grpc")]
RESPONSE_HEADERS = _block(_HEADERS)
"""A gRPC response's headers."""
_OK_TRAILERS = _block([("grpc-status", "0")])


def response_headers(stream_id: int) -> bytes:
    return frame(FrameType.HEADERS, END_HEADERS, stream_id, RESPONSE_HEADERS)


_GRPC_MESSAGE_SAFE = "".join(chr(code) for code in range(0x20, 0x7F) if code != 0x25)


def encode_grpc_message(message: str) -> str:
    """``grpc-message`` as gRPC carries it: UTF-8, percent-encoded outside printable ASCII
    (and ``%`` itself)."""
    return quote(message, safe=_GRPC_MESSAGE_SAFE)


def trailers(
    stream_id: int, status: int, message: str | None, *, headers_sent: bool, max_frame: int
) -> list[bytes]:
    """The trailers ending a stream (a trailers-only response when no headers were sent),
    as a HEADERS frame and CONTINUATION frames if the block is longer than ``max_frame``."""
    fields = [] if headers_sent else list(_HEADERS)
    fields.append(("grpc-status", str(status)))
    if message:
        fields.append(("grpc-message", encode_grpc_message(message)))
    if headers_sent and len(fields) == 1 and status == 0:
        return [frame(FrameType.HEADERS, END_HEADERS | END_STREAM, stream_id, _OK_TRAILERS)]
    block = _block(fields)
    pieces = [block[start : start + max_frame] for start in range(0, len(block), max_frame)]
    frames = []
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        flags = END_HEADERS if last else 0
        if index == 0:
            frames.append(frame(FrameType.HEADERS, flags | END_STREAM, stream_id, piece))
        else:
            frames.append(frame(FrameType.CONTINUATION, flags, stream_id, piece))
    return frames


def plain_response_headers(stream_id: int, status: int, length: int) -> bytes:
    """The headers of a plain HTTP response of ``length`` bytes of text, for a request that
    is not gRPC at all (its body follows in DATA frames)."""
    block = _block(
        [
            (":status", str(status)),
            ("content-type", "text/plain; charset=utf-8"),
            ("content-length", str(length)),
        ]
    )
    return frame(FrameType.HEADERS, END_HEADERS, stream_id, block)
