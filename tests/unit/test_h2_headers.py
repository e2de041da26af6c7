"""HeaderDecoder: a connection's first header block from the memo, and later blocks decoded
against the dynamic table that block would have built."""

from __future__ import annotations

import pytest
from hpack import Encoder
from hpack.exceptions import HPACKError

from xdscore.transport import _h2_headers
from xdscore.transport._h2_headers import HeaderDecoder

REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"),
    (":authority", "xds.example:18000"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("user-agent", "grpc-c++/1.0 fleet-build-7"),
]


def raw(fields: list[tuple[str, str]]) -> tuple[tuple[bytes, bytes], ...]:
    return tuple((name.encode(), value.encode()) for name, value in fields)


def test_same_first_block_on_another_connection_and_then_a_second_block() -> None:
    first = Encoder().encode(REQUEST)
    assert HeaderDecoder(65536).decode(first) == raw(REQUEST)
    assert (65536, first) in _h2_headers._first_blocks

    # A second connection of the same build: its encoder indexes the same entries, so its
    # second block refers to them in the dynamic table.
    encoder = Encoder()
    block = encoder.encode(REQUEST)
    assert block == first
    second_request = [*REQUEST[:2], (":path", REQUEST[2][1]), ("x-trace", "abc")]
    second = encoder.encode(second_request)
    decoder = HeaderDecoder(65536)
    assert decoder.decode(block) == raw(REQUEST)
    assert decoder.decode(second) == raw(second_request)
    assert decoder.decode(encoder.encode(REQUEST)) == raw(REQUEST)


def test_a_different_first_block_is_decoded_and_kept_within_the_bound() -> None:
    for n in range(_h2_headers._KEPT_BLOCKS + 10):
        fields = [*REQUEST[:6], ("user-agent", f"client-{n}")]
        assert HeaderDecoder(65536).decode(Encoder().encode(fields)) == raw(fields)
    assert len(_h2_headers._first_blocks) == _h2_headers._KEPT_BLOCKS


def test_a_block_that_does_not_decode_is_an_error_and_not_kept() -> None:
    broken = b"\xff\xff\xff\xff\xff"
    with pytest.raises(HPACKError):
        HeaderDecoder(65536).decode(broken)
    assert (65536, broken) not in _h2_headers._first_blocks


def test_a_block_kept_under_a_larger_limit_is_still_refused_under_a_smaller_one() -> None:
    fields = [*REQUEST, ("x-big", "v" * 500)]
    block = Encoder().encode(fields)
    assert HeaderDecoder(65536).decode(block) == raw(fields)
    with pytest.raises(HPACKError):
        HeaderDecoder(100).decode(block)
