"""Request headers for Http2Transport (and GrpclibTransport's check): every RFC 9113 rule of
sections 8.1.1, 8.2 and 8.3 that ``parse_request`` enforces, one malformed request each
next to the well-formed one; and ``HeaderDecoder``: a connection's first block from the
memo, later blocks decoded against the dynamic table that block would have built."""

from __future__ import annotations

import pytest
from hpack import Encoder
from hpack.exceptions import HPACKError

from xdscore._memos import HEADER_BLOCKS
from xdscore.transport.h2.headers import (
    HeaderDecoder,
    MalformedRequest,
    RequestHead,
    check_trailers,
    parse_request,
)

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
REQUEST = [
    (":method", "POST"),
    (":scheme", "http"),
    (":path", ADS),
    (":authority", "xds.example:18000"),
    ("content-type", "application/grpc"),
    ("te", "trailers"),
    ("user-agent", "grpc-c++/1.0 fleet-build-7"),
]


def head_of(fields: list[tuple[str, str]]) -> tuple[str, str, str, str, dict[str, str], int]:
    head = parse_request(fields)
    return (
        head.method,
        head.scheme,
        head.path,
        head.authority,
        dict(head.fields),
        head.content_length,
    )


def test_a_grpc_request_parses_to_its_head() -> None:
    assert head_of(REQUEST) == (
        "POST",
        "http",
        ADS,
        "xds.example:18000",
        {"content-type": "application/grpc", "te": "trailers", "user-agent": REQUEST[6][1]},
        -1,
    )
    assert head_of([*REQUEST, ("content-length", "12")])[5] == 12
    assert head_of([*REQUEST, ("TE".lower(), "Trailers")])[4]["te"] == "Trailers"
    # CONNECT names its target in :authority alone (8.5).
    assert head_of([(":method", "CONNECT"), (":authority", "h:1")])[:4] == (
        "CONNECT",
        "",
        "",
        "h:1",
    )


def _replaced(name: str, value: str | None) -> list[tuple[str, str]]:
    """REQUEST with the field ``name`` given ``value`` (``None``: removed)."""
    if value is None:
        return [(n, v) for n, v in REQUEST if n != name]
    return [(n, value if n == name else v) for n, v in REQUEST]


MALFORMED = {
    # 8.2: field names are lowercase; 8.2.1: no control, space or non-ASCII in a name.
    "uppercase-name": ([*REQUEST, ("X-Trace", "1")], "not lowercase"),
    "space-in-name": ([*REQUEST, ("x trace", "1")], "not lowercase"),
    "non-ascii-name": ([*REQUEST, ("x-\xe9", "1")], "not lowercase"),
    # 8.2.1: field values hold no NUL, CR, LF and do not start or end with whitespace.
    "nul-in-value": ([*REQUEST, ("x-trace", "a\x00b")], "NUL, CR or LF"),
    "lf-in-value": ([*REQUEST, ("x-trace", "a\nb")], "NUL, CR or LF"),
    "leading-space": ([*REQUEST, ("x-trace", " a")], "NUL, CR or LF"),
    "trailing-tab": ([*REQUEST, ("x-trace", "a\t")], "NUL, CR or LF"),
    "cr-in-pseudo": (_replaced(":authority", "h\r"), "not a valid field value"),
    # 8.2.2: connection-specific fields, and te other than trailers.
    "connection": ([*REQUEST, ("connection", "keep-alive")], "connection-specific"),
    "keep-alive": ([*REQUEST, ("keep-alive", "5")], "connection-specific"),
    "proxy-connection": ([*REQUEST, ("proxy-connection", "x")], "connection-specific"),
    "transfer-encoding": ([*REQUEST, ("transfer-encoding", "chunked")], "connection-specific"),
    "upgrade": ([*REQUEST, ("upgrade", "h2c")], "connection-specific"),
    "te-gzip": (_replaced("te", "trailers, deflate"), "te other than"),
    # 8.3: pseudo-headers known, once each, before regular fields, the three required.
    "unknown-pseudo": ([*REQUEST[:4], (":foo", "x"), *REQUEST[4:]], "not a request pseudo"),
    "response-pseudo": ([(":status", "200"), *REQUEST], "not a request pseudo"),
    "protocol-pseudo": ([*REQUEST[:4], (":protocol", "ws"), *REQUEST[4:]], "not a request"),
    "pseudo-after-regular": ([*REQUEST, (":authority", "b")], "follows a regular field"),
    "method-twice": ([(":method", "POST"), *REQUEST], "appears twice"),
    "scheme-twice": ([(":scheme", "https"), *REQUEST], "appears twice"),
    "path-twice": ([(":path", "/other"), *REQUEST], "appears twice"),
    "no-method": (_replaced(":method", None), ":method is missing"),
    "no-scheme": (_replaced(":scheme", None), ":scheme is missing"),
    "no-path": (_replaced(":path", None), ":path is missing"),
    "empty-path": (_replaced(":path", ""), ":path is missing or empty"),
    "connect-with-path": (
        [(":method", "CONNECT"), (":authority", "h:1"), (":path", "/")],
        "CONNECT",
    ),
    # 8.1.1: content-length is a number, the same each time it appears.
    "content-length-word": ([*REQUEST, ("content-length", "ten")], "not a number"),
    "content-length-negative": ([*REQUEST, ("content-length", "-1")], "not a number"),
    "content-length-huge": ([*REQUEST, ("content-length", "9" * 5000)], "not a number"),
    "content-length-twice": (
        [*REQUEST, ("content-length", "1"), ("content-length", "2")],
        "two different",
    ),
}


@pytest.mark.parametrize(("fields", "rule"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_refused_naming_its_rule(
    fields: list[tuple[str, str]], rule: str
) -> None:
    with pytest.raises(MalformedRequest, match=rule):
        parse_request(fields)


def test_trailers_take_no_pseudo_header_and_the_same_field_rules() -> None:
    check_trailers([("grpc-status", "0"), ("x-trace", "1")])
    with pytest.raises(MalformedRequest, match="in trailers"):
        check_trailers([("x-trace", "1"), (":path", "/")])
    with pytest.raises(MalformedRequest, match="not lowercase"):
        check_trailers([("X-Trace", "1")])
    with pytest.raises(MalformedRequest, match="connection-specific"):
        check_trailers([("transfer-encoding", "chunked")])


def test_same_first_block_on_another_connection_and_then_a_second_block() -> None:
    first = Encoder().encode(REQUEST)
    kept = HeaderDecoder(65536).request(first)
    assert (65536, first) in HEADER_BLOCKS
    assert HeaderDecoder(65536).request(first) is kept  # decoded and checked once

    # A second connection of the same build: its encoder indexes the same entries, so its
    # second block refers to them in the dynamic table.
    encoder = Encoder()
    block = encoder.encode(REQUEST)
    assert block == first
    second_request = [*REQUEST[:2], (":path", "/x"), (":authority", "b"), ("x-trace", "abc")]
    second = encoder.encode(second_request)
    decoder = HeaderDecoder(65536)
    assert decoder.request(block) is kept
    head = decoder.request(second)
    assert (head.path, head.authority, dict(head.fields)) == ("/x", "b", {"x-trace": "abc"})
    assert decoder.decode(encoder.encode([("grpc-status", "0")])) == [("grpc-status", "0")]


def test_a_malformed_first_block_still_updates_the_table_and_is_not_kept() -> None:
    encoder = Encoder()
    malformed = encoder.encode([*REQUEST, ("X-Trace", "1")])
    decoder = HeaderDecoder(65536)
    with pytest.raises(MalformedRequest):
        decoder.request(malformed)
    assert (65536, malformed) not in HEADER_BLOCKS
    # The next block indexes what the first added to the dynamic table.
    assert isinstance(decoder.request(encoder.encode(REQUEST)), RequestHead)


def test_a_different_first_block_is_decoded_and_kept_within_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(HEADER_BLOCKS, "max_bytes", 16 * 1024)
    HEADER_BLOCKS.clear()
    for n in range(200):
        fields = [*REQUEST[:6], ("user-agent", f"client-{n}")]
        head = HeaderDecoder(65536).request(Encoder().encode(fields))
        assert head.fields["user-agent"] == f"client-{n}"
        assert HEADER_BLOCKS.bytes <= HEADER_BLOCKS.max_bytes
    assert 10 < len(HEADER_BLOCKS) < 200


def test_a_block_that_does_not_decode_is_an_error_and_not_kept() -> None:
    broken = b"\xff\xff\xff\xff\xff"
    with pytest.raises(HPACKError):
        HeaderDecoder(65536).request(broken)
    assert (65536, broken) not in HEADER_BLOCKS


def test_a_block_kept_under_a_larger_limit_is_still_refused_under_a_smaller_one() -> None:
    fields = [*REQUEST, ("x-big", "v" * 500)]
    block = Encoder().encode(fields)
    assert HeaderDecoder(65536).request(block).fields["x-big"] == "v" * 500
    with pytest.raises(HPACKError):
        HeaderDecoder(100).request(block)
