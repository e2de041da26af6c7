"""Protobuf wire framing for the envelope messages, from bytes that are already encoded.

A response is mostly resources that were encoded once; these helpers put the per-stream
fields (version, nonce) around them without decoding or re-encoding anything. The codec's
tests check every frame built here against the protobuf runtime.
"""

from __future__ import annotations

__all__ = ["bytes_field", "field_offset", "leading_field", "string_field", "varint"]

_LEN = 2  # wire type of length-delimited fields


def varint(value: int) -> bytes:
    """The base-128 varint encoding of a non-negative ``value``."""
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def bytes_field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (bytes, string or sub-message) numbered ``number``."""
    return varint((number << 3) | _LEN) + varint(len(payload)) + payload


def string_field(number: int, text: str) -> bytes:
    """A string field; empty strings are omitted as proto3 does."""
    if not text:
        return b""
    return bytes_field(number, text.encode())


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``at`` and the offset after it; ``IndexError`` past the end or for
    one longer than ten bytes."""
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise IndexError("varint too long")


def leading_field(data: bytes, number: int) -> tuple[int, int, int] | None:
    """Where the length-delimited field ``number`` (below 16) of the message ``data`` is, if
    it comes first or after only length-delimited fields numbered below it (every encoder
    writes fields in number order): ``(tag start, payload start, end)``.

    ``None`` when it is not there or anything is unusual (another wire type first, a length
    past the end): the caller then parses the whole message. (The field may come again
    later, to be merged: the caller checks what is left of the message for it.)
    """
    at = 0
    size = len(data)
    try:
        while at < size:
            key = data[at]
            if key & 7 != _LEN or key >= 0x80:
                return None
            length = data[at + 1]
            if length < 0x80:
                start = at + 2
            else:
                length, start = _read_varint(data, at + 1)
            end = start + length
            field = key >> 3
            if end > size or field > number:
                return None
            if field == number:
                return at, start, end
            at = end
    except IndexError:
        return None
    return None


def field_offset(data: bytes, number: int) -> int | None:
    """Where the first field numbered ``number`` or above starts in the message ``data``
    (its end if there is none), when every field before it is length-delimited; ``None``
    otherwise, or for bytes that are no message."""
    at = 0
    size = len(data)
    try:
        while at < size:
            key, start = _read_varint(data, at)
            if key >> 3 >= number:
                return at
            if key & 7 != _LEN:
                return None
            length, start = _read_varint(data, start)
            at = start + length
    except IndexError:
        return None
    return at if at == size else None
