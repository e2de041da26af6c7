"""The fast name scan agrees with the general field reader on any bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from xdscore.wire._framing import bytes_field, string_field, varint
from xdscore.wire._reader import WireError, fields, name_field

_FIELD = st.one_of(
    st.builds(lambda n, t: string_field(n, t), st.integers(1, 20), st.text(max_size=8)),
    st.builds(lambda n, b: bytes_field(n, b), st.integers(1, 20), st.binary(max_size=8)),
    st.builds(lambda n, v: varint(n << 3) + varint(v), st.integers(1, 20), st.integers(0, 2**40)),
    st.builds(lambda n: varint((n << 3) | 1) + b"\x00" * 8, st.integers(1, 20)),
    st.builds(lambda n: varint((n << 3) | 5) + b"\x00" * 4, st.integers(1, 20)),
)
_MESSAGES = st.lists(_FIELD, max_size=6).map(b"".join)


def _reference(body: bytes, number: int) -> str:
    name = b""
    for field_number, wire_type, value in fields(body):
        if field_number == number and wire_type == 2 and isinstance(value, bytes):
            name = value
    return name.decode()


@given(body=st.one_of(_MESSAGES, st.binary(max_size=40)), number=st.integers(1, 3))
def test_name_field_matches_the_field_reader(body: bytes, number: int) -> None:
    try:
        expected: str | type[Exception] = _reference(body, number)
    except (WireError, UnicodeDecodeError) as error:
        expected = type(error)
    try:
        got: str | type[Exception] = name_field(body, number)
    except (WireError, UnicodeDecodeError) as error:
        got = type(error)
    assert got == expected
