"""Protobuf wire framing for the envelope messages, from bytes that are already encoded.

A response is mostly resources that were encoded once; these helpers put the per-stream
fields (version, nonce) around them without decoding or re-encoding anything. The codec's
tests check every frame built here against the protobuf runtime.
"""

from __future__ import annotations

__all__ = ["bytes_field", "string_field", "varint"]

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
