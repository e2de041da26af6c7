"""Reading protobuf wire format without a schema: just enough to find a field.

A client of SotW needs each resource's name, which lives inside the resource. Every xDS
resource type registered here keeps its name in field 1 (``cluster_name`` for endpoints),
so scanning the top-level fields is far cheaper than decoding the whole message. The server
finds a request's node the same way, to recognise it unparsed (``leading_field``,
``field_offset``).
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["WireError", "count_field", "field_offset", "fields", "leading_field", "name_field"]

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class WireError(ValueError):
    """The bytes are not valid protobuf wire format."""


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if offset >= len(data):
            raise WireError("truncated varint")
        byte = data[offset]
        offset += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, offset
        shift += 7
        if shift > 63:
            raise WireError("varint too long")


def fields(data: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """Top-level fields as (number, wire type, bytes for length-delimited else integer)."""
    offset = 0
    end = len(data)
    while offset < end:
        key, offset = _varint(data, offset)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireError("field number 0")
        if wire_type == _VARINT:
            value, offset = _varint(data, offset)
            yield number, wire_type, value
        elif wire_type == _LEN:
            length, offset = _varint(data, offset)
            if offset + length > end:
                raise WireError("truncated length-delimited field")
            yield number, wire_type, data[offset : offset + length]
            offset += length
        elif wire_type == _I64:
            if offset + 8 > end:
                raise WireError("truncated fixed64")
            yield number, wire_type, int.from_bytes(data[offset : offset + 8], "little")
            offset += 8
        elif wire_type == _I32:
            if offset + 4 > end:
                raise WireError("truncated fixed32")
            yield number, wire_type, int.from_bytes(data[offset : offset + 4], "little")
            offset += 4
        else:
            raise WireError(f"unsupported wire type {wire_type}")


def name_field(body: bytes, number: int = 1) -> str:
    """The string in field ``number`` of ``body`` (the last one wins, as in protobuf).

    Walks the top-level fields without copying any but the one it returns.
    """
    name = b""
    offset = 0
    end = len(body)
    while offset < end:
        key = body[offset]
        if key < 0x80:
            offset += 1
        else:
            key, offset = _varint(body, offset)
        wire_type = key & 7
        if wire_type == _LEN:
            length = body[offset] if offset < end else 0x80
            if length < 0x80:
                offset += 1
            else:
                length, offset = _varint(body, offset)
            stop = offset + length
            if stop > end:
                raise WireError("truncated length-delimited field")
            if key >> 3 == number:
                name = body[offset:stop]
            offset = stop
        elif wire_type == _VARINT:
            _, offset = _varint(body, offset)
        elif wire_type == _I64:
            offset += 8
        elif wire_type == _I32:
            offset += 4
        else:
            raise WireError(f"unsupported wire type {wire_type}")
        if key >> 3 == 0:
            raise WireError("field number 0")
    if offset > end:
        raise WireError("truncated field")
    return name.decode()


def count_field(data: bytes, number: int) -> int:
    """How many times the field ``number`` occurs at the top level of the message ``data``
    (entries of a repeated field), walking the fields without copying any."""
    count = 0
    offset = 0
    end = len(data)
    while offset < end:
        key = data[offset]
        if key < 0x80:
            offset += 1
        else:
            key, offset = _varint(data, offset)
        wire_type = key & 7
        if key >> 3 == number:
            count += 1
        if wire_type == _LEN:
            length = data[offset] if offset < end else 0x80
            if length < 0x80:
                offset += 1
            else:
                length, offset = _varint(data, offset)
            offset += length
        elif wire_type == _VARINT:
            _, offset = _varint(data, offset)
        elif wire_type == _I64:
            offset += 8
        elif wire_type == _I32:
            offset += 4
        else:
            raise WireError(f"unsupported wire type {wire_type}")
    if offset > end:
        raise WireError("truncated field")
    return count


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
            length = data[at + 1] if at + 1 < size else 0x80
            if length < 0x80:
                start = at + 2
            else:
                length, start = _varint(data, at + 1)
            end = start + length
            field = key >> 3
            if end > size or field > number:
                return None
            if field == number:
                return at, start, end
            at = end
    except WireError:
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
            key = data[at]
            if key < 0x80:  # (one byte: the common case, read without a call)
                start = at + 1
            else:
                key, start = _varint(data, at)
            if key >> 3 >= number:
                return at
            if key & 7 != _LEN:
                return None
            length = data[start] if start < size else 0x80
            if length < 0x80:
                start += 1
            else:
                length, start = _varint(data, start)
            at = start + length
    except WireError:
        return None
    return at if at == size else None
