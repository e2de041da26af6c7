"""The codec and the hand-built framing, checked against the protobuf runtime."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import json_format, struct_pb2
from google.protobuf.internal import encoder
from hypothesis import given, settings
from hypothesis import strategies as st

from xdscore import (
    CLUSTER,
    ENDPOINT,
    VIRTUAL_HOST,
    GrpcStatus,
    Node,
    RemoteProtocolError,
    Resource,
    make_resource,
)
from xdscore._memos import SOTW_REQUESTS
from xdscore.builders import eds_cluster, load_assignment
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DiscoveryRequest,
    ErrorDetail,
    Locality,
    Selection,
)
from xdscore.protocol._identity import check_node
from xdscore.wire._client_codec import encode_delta_request, encode_request
from xdscore.wire._codec import (
    SHARED_REQUEST_BYTES,
    _cut,
    decode_delta_request,
    decode_request,
    encode_delta_response,
    encode_sotw_response,
)
from xdscore.wire._framing import bytes_field, string_field, varint
from xdscore.wire._node import decode_node, encode_node, same_node, same_node_bytes
from xdscore.wire._reader import WireError, field_offset, fields, leading_field

# --- varint and fields ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (150, b"\x96\x01"),
        (300, b"\xac\x02"),
        (16383, b"\xff\x7f"),
        (16384, b"\x80\x80\x01"),
        (2**21 - 1, b"\xff\xff\x7f"),
        (2**21, b"\x80\x80\x80\x01"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
        (2**63, b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"),
    ],
)
def test_varint_known_encodings(value: int, encoded: bytes) -> None:
    assert varint(value) == encoded


@pytest.mark.parametrize(
    "value", [0, 1, 127, 128, 255, 256, 16383, 16384, 65535, 2**28 + 3, 2**64 - 1]
)
def test_varint_agrees_with_protobuf_encoder(value: int) -> None:
    assert varint(value) == encoder._VarintBytes(value)


def test_string_field_omits_empty_strings() -> None:
    assert string_field(1, "") == b""
    assert string_field(1, "ab") == b"\x0a\x02ab"


def test_string_field_encodes_utf8() -> None:
    assert string_field(5, "é") == b"\x2a\x02\xc3\xa9"


def test_bytes_field_keeps_empty_payload() -> None:
    # Sub-messages may be empty yet present.
    assert bytes_field(2, b"") == b"\x12\x00"


def test_bytes_field_with_multi_byte_tag() -> None:
    # Field 16 needs a two-byte tag.
    assert bytes_field(16, b"x") == b"\x82\x01\x01x"


# --- SotW responses --------------------------------------------------------------------------


def _cluster_resources(*names: str) -> dict[str, Resource]:
    return {name: make_resource(eds_cluster(name)) for name in names}


def test_sotw_response_parses_to_the_expected_fields() -> None:
    resources = _cluster_resources("b", "a")
    selection = Selection.of(CLUSTER, resources)
    data = encode_sotw_response(
        version_info="v1", nonce="n7", body=selection.sotw_body, control_plane="cp-1"
    )
    parsed = discovery_pb2.DiscoveryResponse.FromString(data)
    assert parsed.version_info == "v1"
    assert parsed.nonce == "n7"
    assert parsed.type_url == CLUSTER
    assert parsed.control_plane.identifier == "cp-1"
    assert len(parsed.resources) == 2
    for packed, name in zip(parsed.resources, ["a", "b"], strict=True):
        assert packed.type_url == CLUSTER
        assert packed.value == resources[name].body
        cluster = cluster_pb2.Cluster.FromString(packed.value)
        assert cluster.name == name
        assert cluster == eds_cluster(name)


def test_sotw_response_bytes_equal_the_runtime_encoding() -> None:
    resources = _cluster_resources("a")
    selection = Selection.of(CLUSTER, resources)
    data = encode_sotw_response(version_info="v", nonce="n", body=selection.sotw_body)
    expected = discovery_pb2.DiscoveryResponse(version_info="v", nonce="n", type_url=CLUSTER)
    expected.resources.add(type_url=CLUSTER, value=resources["a"].body)
    assert discovery_pb2.DiscoveryResponse.FromString(data) == expected


def test_sotw_response_without_control_plane_or_resources() -> None:
    selection = Selection.of(CLUSTER, {})
    data = encode_sotw_response(version_info="v0", nonce="n1", body=selection.sotw_body)
    parsed = discovery_pb2.DiscoveryResponse.FromString(data)
    assert not parsed.HasField("control_plane")
    assert list(parsed.resources) == []
    assert parsed.type_url == CLUSTER
    assert parsed.version_info == "v0"
    assert parsed.nonce == "n1"


@pytest.mark.parametrize("size", [100, 128, 200, 16383, 16384, 20000, 300_000])
def test_large_bodies_are_framed_correctly(size: int) -> None:
    body = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert len(body) == size
    resource = Resource(type_url=CLUSTER, name="big", body=body)
    data = encode_sotw_response(
        version_info="v", nonce="n", body=Selection.of(CLUSTER, {"big": resource}).sotw_body
    )
    parsed = discovery_pb2.DiscoveryResponse.FromString(data)
    assert len(parsed.resources) == 1
    assert parsed.resources[0].value == body
    assert parsed.resources[0].type_url == CLUSTER
    assert parsed.nonce == "n"
    delta = encode_delta_response(
        type_url=CLUSTER, nonce="n", system_version_info="", resources=[resource], removed=[]
    )
    parsed_delta = discovery_pb2.DeltaDiscoveryResponse.FromString(delta)
    assert parsed_delta.resources[0].resource.value == body
    assert parsed_delta.resources[0].version == resource.version


def test_many_resources_and_long_strings() -> None:
    resources = {f"c{i:04d}-" + "x" * 200: None for i in range(300)}
    built = {name: make_resource(eds_cluster(name)) for name in resources}
    selection = Selection.of(CLUSTER, built)
    long_version = "v" * 500
    data = encode_sotw_response(
        version_info=long_version,
        nonce="n" * 200,
        body=selection.sotw_body,
        control_plane="c" * 300,
    )
    parsed = discovery_pb2.DiscoveryResponse.FromString(data)
    assert parsed.version_info == long_version
    assert parsed.nonce == "n" * 200
    assert parsed.control_plane.identifier == "c" * 300
    assert [cluster_pb2.Cluster.FromString(r.value).name for r in parsed.resources] == sorted(built)


# --- Delta responses -------------------------------------------------------------------------


def test_delta_response_parses_to_the_expected_fields() -> None:
    plain = make_resource(load_assignment("a", [("10.0.0.1", 80)]))
    aliased = Resource(
        type_url=VIRTUAL_HOST,
        name="rc/vh",
        body=b"\x0a\x02vh",
        aliases=("rc/example.com", "rc/www.example.com"),
    )
    data = encode_delta_response(
        type_url=ENDPOINT,
        nonce="n3",
        system_version_info="sys-1",
        resources=[plain, aliased],
        removed=["gone-1", "gone-2"],
        control_plane="cp",
    )
    parsed = discovery_pb2.DeltaDiscoveryResponse.FromString(data)
    assert parsed.type_url == ENDPOINT
    assert parsed.nonce == "n3"
    assert parsed.system_version_info == "sys-1"
    assert parsed.control_plane.identifier == "cp"
    assert list(parsed.removed_resources) == ["gone-1", "gone-2"]
    first, second = parsed.resources
    assert first.name == "a"
    assert first.version == plain.version
    assert first.resource.type_url == ENDPOINT
    assert first.resource.value == plain.body
    assert list(first.aliases) == []
    assert second.name == "rc/vh"
    assert second.version == aliased.version
    assert second.resource.type_url == VIRTUAL_HOST
    assert second.resource.value == b"\x0a\x02vh"
    assert list(second.aliases) == ["rc/example.com", "rc/www.example.com"]


def test_delta_response_with_only_removals() -> None:
    data = encode_delta_response(
        type_url=CLUSTER, nonce="n1", system_version_info="", resources=[], removed=["x"]
    )
    parsed = discovery_pb2.DeltaDiscoveryResponse.FromString(data)
    assert list(parsed.resources) == []
    assert list(parsed.removed_resources) == ["x"]
    assert parsed.nonce == "n1"
    assert parsed.system_version_info == ""
    assert not parsed.HasField("control_plane")


# --- requests --------------------------------------------------------------------------------


def make_node(*, id: str, metadata: dict[str, object] | None = None, **fields: object) -> Node:
    """A Node as the codec decodes it from a client's request (``raw`` filled in)."""
    message = base_pb2.Node(id=id, **fields)
    if metadata:
        json_format.ParseDict(metadata, message.metadata)
    wrapper = discovery_pb2.DiscoveryRequest(type_url=CLUSTER)
    wrapper.node.CopyFrom(message)
    node = decode_request(wrapper.SerializeToString(deterministic=True)).node
    assert node is not None
    return node


def _node() -> Node:
    return make_node(
        id="envoy-1",
        cluster="edge",
        user_agent_name="envoy",
        client_features=["envoy.lb.does_not_support_overprovisioning", "xds.config.x"],
        locality=base_pb2.Locality(region="eu", zone="eu-1a", sub_zone="rack-3"),
        metadata={"team": "core", "replicas": 3.0, "nested": {"on": True}},
    )


def test_request_round_trip() -> None:
    request = DiscoveryRequest(
        type_url=CLUSTER,
        version_info="v1",
        resource_names=("a", "b", "*"),
        response_nonce="n5",
        error_detail=ErrorDetail(code=13, message="bad things"),
        node=_node(),
    )
    decoded = decode_request(encode_request(request))
    assert decoded == request
    assert decoded.node is not None
    assert decoded.node.raw == _node().raw
    assert decoded.node.locality == Locality(region="eu", zone="eu-1a", sub_zone="rack-3")
    assert decoded.node.metadata == {"team": "core", "replicas": 3.0, "nested": {"on": True}}
    assert decoded.node.supports("xds.config.x")


def _runtime_request(request: DiscoveryRequest) -> bytes:
    message = discovery_pb2.DiscoveryRequest(
        type_url=request.type_url,
        version_info=request.version_info,
        resource_names=list(request.resource_names),
        response_nonce=request.response_nonce,
    )
    if request.node is not None:
        node = encode_node(request.node)
        assert node is not None
        message.node.CopyFrom(node)
    if request.error_detail is not None:
        message.error_detail.code = request.error_detail.code
        message.error_detail.message = request.error_detail.message
    # Deterministic: a node's metadata is a map, which the runtime otherwise writes in no
    # fixed order; a node's own bytes are its deterministic encoding.
    data: bytes = message.SerializeToString(deterministic=True)
    return data


_TEXT = st.text(max_size=12)
_BUILT_NODE = Node(id="built", cluster="c", client_features=("f",))
"""A node made without its bytes: the codec encodes it."""


@settings(max_examples=300, deadline=None)
@given(
    version=_TEXT,
    names=st.lists(_TEXT, max_size=6),
    type_url=st.sampled_from(["", CLUSTER, ENDPOINT]),
    nonce=_TEXT,
    error=st.none() | st.tuples(st.integers(-(2**31), 2**31 - 1), _TEXT),
    node=st.sampled_from(["none", "decoded", "built"]),
)
def test_request_encoding_is_the_runtimes(
    version: str,
    names: list[str],
    type_url: str,
    nonce: str,
    error: tuple[int, str] | None,
    node: str,
) -> None:
    """The hand-framed request is byte for byte what the protobuf runtime writes, empty
    names, empty strings, negative codes, empty messages and nodes with and without their
    own bytes included."""
    request = DiscoveryRequest(
        type_url=type_url,
        version_info=version,
        resource_names=tuple(names),
        response_nonce=nonce,
        error_detail=None if error is None else ErrorDetail(code=error[0], message=error[1]),
        node={"none": None, "decoded": _node(), "built": _BUILT_NODE}[node],
    )
    assert encode_request(request) == _runtime_request(request)


@settings(max_examples=300, deadline=None)
@given(
    subscribe=st.lists(_TEXT, max_size=6),
    unsubscribe=st.lists(_TEXT, max_size=3),
    versions=st.dictionaries(_TEXT, _TEXT, max_size=4),
    type_url=st.sampled_from(["", CLUSTER, ENDPOINT]),
    nonce=_TEXT,
    error=st.none() | st.tuples(st.integers(-(2**31), 2**31 - 1), _TEXT),
    node=st.sampled_from(["none", "decoded", "built"]),
)
def test_delta_request_encoding_reads_as_the_runtimes(
    subscribe: list[str],
    unsubscribe: list[str],
    versions: dict[str, str],
    type_url: str,
    nonce: str,
    error: tuple[int, str] | None,
    node: str,
) -> None:
    """The hand-framed Delta request parses, with the protobuf runtime, to the message the
    runtime builds from the same record (a map's entries may come in any order)."""
    request = DeltaDiscoveryRequest(
        type_url=type_url,
        resource_names_subscribe=tuple(subscribe),
        resource_names_unsubscribe=tuple(unsubscribe),
        initial_resource_versions=versions,
        response_nonce=nonce,
        error_detail=None if error is None else ErrorDetail(code=error[0], message=error[1]),
        node={"none": None, "decoded": _node(), "built": _BUILT_NODE}[node],
    )
    expected = discovery_pb2.DeltaDiscoveryRequest(
        type_url=type_url,
        resource_names_subscribe=subscribe,
        resource_names_unsubscribe=unsubscribe,
        initial_resource_versions=versions,
        response_nonce=nonce,
    )
    if request.node is not None:
        encoded_node = encode_node(request.node)
        assert encoded_node is not None
        expected.node.CopyFrom(encoded_node)
    if error is not None:
        expected.error_detail.code, expected.error_detail.message = error
    data = encode_delta_request(request)
    assert discovery_pb2.DeltaDiscoveryRequest.FromString(data) == expected
    if node != "built":  # (a node decoded keeps its bytes, which a built one lacks)
        assert decode_delta_request(data) == request


def test_request_round_trip_minimal() -> None:
    request = DiscoveryRequest(type_url=ENDPOINT)
    decoded = decode_request(encode_request(request))
    assert decoded == request
    assert decoded.node is None
    assert decoded.error_detail is None


def test_decode_request_from_runtime_bytes() -> None:
    message = discovery_pb2.DiscoveryRequest(
        version_info="v9", resource_names=["x"], type_url=ENDPOINT, response_nonce="n2"
    )
    message.node.id = "n"
    message.error_detail.code = 3
    message.error_detail.message = "m"
    decoded = decode_request(message.SerializeToString())
    assert decoded.version_info == "v9"
    assert decoded.resource_names == ("x",)
    assert decoded.type_url == ENDPOINT
    assert decoded.response_nonce == "n2"
    assert decoded.error_detail == ErrorDetail(code=3, message="m")
    assert decoded.node is not None
    assert decoded.node.id == "n"


def test_empty_error_detail_still_marks_a_nack() -> None:
    message = discovery_pb2.DiscoveryRequest(type_url=CLUSTER, response_nonce="n1")
    message.error_detail.SetInParent()
    decoded = decode_request(message.SerializeToString())
    assert decoded.error_detail == ErrorDetail(code=0, message="")


def test_delta_request_round_trip() -> None:
    request = DeltaDiscoveryRequest(
        type_url=CLUSTER,
        resource_names_subscribe=("a", "*"),
        resource_names_unsubscribe=("b",),
        initial_resource_versions={"a": "va", "c": "vc"},
        response_nonce="n4",
        error_detail=ErrorDetail(code=13, message="nope"),
        node=_node(),
    )
    decoded = decode_delta_request(encode_delta_request(request))
    assert decoded == request
    assert dict(decoded.initial_resource_versions) == {"a": "va", "c": "vc"}


def test_delta_request_round_trip_minimal() -> None:
    request = DeltaDiscoveryRequest(type_url=ENDPOINT)
    decoded = decode_delta_request(encode_delta_request(request))
    assert decoded == request
    assert decoded.node is None


def test_nodes_with_different_contents_have_different_raw() -> None:
    one = make_node(id="a", metadata={"k": "1"})
    two = make_node(id="a", metadata={"k": "2"})
    assert one.raw != two.raw
    again = make_node(id="a", metadata={"k": "1"})
    assert again.raw == one.raw


@pytest.mark.parametrize(
    "data",
    [
        b"\xff",
        b"\x0a\x05ab",  # length runs past the end
        b"\x0a",  # tag without length
        b"\x07",  # invalid wire type / field 0
        b"\x08" + b"\xff" * 11,  # over-long varint
    ],
)
def test_malformed_request_is_invalid_argument(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError) as caught:
        decode_request(data)
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    with pytest.raises(RemoteProtocolError) as caught_delta:
        decode_delta_request(data)
    assert caught_delta.value.status == GrpcStatus.INVALID_ARGUMENT


def test_malformed_nested_node_is_invalid_argument() -> None:
    # Field 2 (node) whose content is a truncated sub-message.
    with pytest.raises(RemoteProtocolError) as caught:
        decode_request(b"\x12\x02\x0a\x05")
    assert caught.value.status == GrpcStatus.INVALID_ARGUMENT
    with pytest.raises(RemoteProtocolError) as against_known:
        decode_request(b"\x12\x02\x0a\x05", _node())  # compared with the stream's node
    assert against_known.value.status == GrpcStatus.INVALID_ARGUMENT


# --- the node a request repeats ------------------------------------------------------------


def _struct_entry(key: str, value: str) -> bytes:
    data: bytes = struct_pb2.Struct(
        fields={key: struct_pb2.Value(string_value=value)}
    ).SerializeToString()
    return data


def _node_bytes(*entries: bytes) -> bytes:
    """A node (id "n") whose metadata map has ``entries`` in this order."""
    return string_field(1, "n") + bytes_field(3, b"".join(entries))


def test_a_repeated_node_is_the_streams_own_without_decoding() -> None:
    first = decode_request(encode_request(DiscoveryRequest(type_url=CLUSTER, node=_node())))
    assert first.node is not None
    again = encode_request(DiscoveryRequest(type_url=CLUSTER, response_nonce="1", node=_node()))
    assert decode_request(again, first.node).node is first.node
    assert decode_request(again).node == first.node
    delta = encode_delta_request(DeltaDiscoveryRequest(type_url=CLUSTER, node=_node()))
    known = decode_delta_request(delta).node
    assert known is not None
    assert decode_delta_request(delta, known).node is known


def test_a_node_sent_in_other_bytes_is_the_same_node() -> None:
    a, b = _struct_entry("a", "1"), _struct_entry("b", "2")
    one, other = _node_bytes(a, b), _node_bytes(b, a)  # a map's entries in either order
    first = decode_request(bytes_field(2, one) + string_field(4, CLUSTER))
    assert first.node is not None
    again = decode_request(bytes_field(2, other) + string_field(4, CLUSTER), first.node)
    assert again.node is first.node  # the stream's own node, kept
    alone = decode_request(bytes_field(2, other) + string_field(4, CLUSTER)).node
    assert alone is not None
    assert alone.raw != first.node.raw
    assert same_node(alone, first.node)
    assert check_node(first.node, alone) is first.node
    changed = decode_request(bytes_field(2, _node_bytes(a)) + string_field(4, CLUSTER))
    assert changed.node is not None
    with pytest.raises(RemoteProtocolError, match="node changed mid-stream"):
        check_node(first.node, changed.node)


@pytest.mark.parametrize(
    "data",
    [
        # The node twice (the runtime merges the two), with the names between them.
        bytes_field(2, string_field(1, "n"))
        + string_field(3, "x")
        + bytes_field(2, string_field(2, "c")),
        # Fields out of number order: the node after the type URL.
        string_field(4, CLUSTER) + bytes_field(2, string_field(1, "n")),
        # A varint field first: the runtime's parse throughout.
        varint((6 << 3) | 2) + b"\x02\x08\x03" + bytes_field(2, string_field(1, "n")),
    ],
    ids=["node-twice", "out-of-order", "error-first"],
)
def test_a_request_in_unusual_order_reads_as_the_runtime_reads_it(data: bytes) -> None:
    runtime = discovery_pb2.DiscoveryRequest.FromString(data)
    decoded = decode_request(data)
    assert decoded.node is not None
    assert decoded.node == decode_node(runtime.node)
    assert decoded.resource_names == tuple(runtime.resource_names)
    assert decoded.type_url == runtime.type_url


@given(
    prefix=st.lists(st.binary(max_size=6), max_size=3),
    node=st.binary(max_size=20),
    tail=st.binary(max_size=20),
)
def test_leading_field_finds_a_field_after_lower_ones(
    prefix: list[bytes], node: bytes, tail: bytes
) -> None:
    head = b"".join(bytes_field(1, each) for each in prefix)
    data = head + bytes_field(2, node) + tail
    span = leading_field(data, 2)
    assert span is not None
    tag, start, end = span
    assert (tag, data[start:end]) == (len(head), node)
    assert leading_field(bytes_field(3, node) + bytes_field(2, node), 2) is None
    assert leading_field(b"\x08\x01" + bytes_field(2, node), 2) is None


def _reference_offset(data: bytes, number: int) -> int | None:
    """``field_offset`` by the general reader: where the first field numbered ``number`` or
    above starts, when only length-delimited fields come before it."""
    at = 0
    try:
        for field, wire_type, value in fields(data):
            if field >= number:
                return at
            if wire_type != 2:
                return None
            assert isinstance(value, bytes)
            at += len(varint((field << 3) | 2)) + len(varint(len(value))) + len(value)
    except WireError:
        return None
    return at


@given(
    entries=st.lists(
        st.tuples(st.integers(1, 40), st.binary(max_size=200) | st.integers(0, 2**40)),
        max_size=6,
    ),
    number=st.integers(1, 40),
)
def test_field_offset_agrees_with_the_general_reader(
    entries: list[tuple[int, bytes | int]], number: int
) -> None:
    """Fields numbered past 15 and payloads past 127 bytes take two-byte varints; a varint
    field before the one looked for makes it ``None``."""
    data = b"".join(
        bytes_field(field, value)
        if isinstance(value, bytes)
        else varint(field << 3) + varint(value)
        for field, value in entries
    )
    assert field_offset(data, number) == _reference_offset(data, number)


def _extension(name: str) -> bytes:
    return bytes_field(9, string_field(1, name) + string_field(2, "envoy.filters"))


def test_a_node_whose_build_version_map_comes_in_another_order_is_the_same() -> None:
    # Envoy writes its build version's metadata entries in a new order on each request.
    a, b = _struct_entry("build.type", "RELEASE"), _struct_entry("revision.status", "Clean")
    extensions = _extension("envoy.a") + _extension("envoy.b")

    def node(*entries: bytes, tail: bytes = extensions) -> bytes:
        version = bytes_field(1, b"\x08\x01\x10\x28") + bytes_field(2, b"".join(entries))
        return string_field(1, "envoy") + bytes_field(8, version) + tail

    assert same_node_bytes(node(a, b), node(b, a))
    assert not same_node_bytes(node(a, b), node(a))
    assert not same_node_bytes(node(a, b), node(a, b, tail=_extension("envoy.a")))
    first = decode_request(bytes_field(2, node(a, b)))
    assert first.node is not None
    assert decode_request(bytes_field(2, node(b, a)), first.node).node is first.node
    other = decode_request(bytes_field(2, node(a, b, tail=extensions + _extension("x"))))
    assert other.node is not None
    assert decode_request(bytes_field(2, other.node.raw), first.node).node is not first.node


def test_a_map_past_the_extensions_in_another_order_is_the_same_node() -> None:
    # dynamic_parameters (12) is a map too: compared by content as a whole.
    a = bytes_field(12, string_field(1, "k1") + bytes_field(2, b""))
    b = bytes_field(12, string_field(1, "k2") + bytes_field(2, b""))
    head = string_field(1, "n") + _extension("envoy.a")
    assert same_node_bytes(head + a + b, head + b + a)
    assert not same_node_bytes(head + a + b, head + a)


# --- requests a fleet repeats ----------------------------------------------------------------

_fresh = itertools.count()


def _fresh_type() -> str:
    """A type URL no other test decodes (the codec remembers requests across calls)."""
    return f"type.googleapis.com/test.Shared{next(_fresh)}"


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The bytes the protobuf runtime parses as a SotW or Delta request, in order."""
    seen: list[bytes] = []
    for cls in (discovery_pb2.DiscoveryRequest, discovery_pb2.DeltaDiscoveryRequest):
        original = cls.FromString

        def recorded(data: bytes, original: Any = original) -> Any:
            seen.append(data)
            return original(data)

        monkeypatch.setattr(cls, "FromString", recorded)
    return seen


def _other_node(name: str) -> Node:
    return make_node(id=name, cluster="edge", metadata={"who": name})


def test_a_fleets_requests_are_parsed_once(parses: list[bytes]) -> None:
    """Requests that differ only in their node and nonce share one parse; each keeps its
    own node and nonce."""
    type_url = _fresh_type()
    names = tuple(f"cluster-{i}" for i in range(100))
    nodes = [_other_node(f"envoy-{i}") for i in range(3)]
    before = len(parses)
    for nonce in ("", "a-1.1", "a-2.7"):
        decoded = [
            decode_request(
                encode_request(
                    DiscoveryRequest(
                        type_url=type_url,
                        version_info="v1" if nonce else "",
                        resource_names=names,
                        response_nonce=nonce,
                        node=node,
                    )
                )
            )
            for node in nodes
        ]
        for request, node in zip(decoded, nodes, strict=True):
            assert request.response_nonce == nonce
            assert request.resource_names == names
            assert request.node == node
            assert request.node is not None
            assert request.node.raw == encode_node(node).SerializeToString(deterministic=True)
    assert len(parses) == before + 2  # the first request, and the ACKs of v1
    # Without a node or a nonce: the one record, as it is.
    bare = encode_request(DiscoveryRequest(type_url=type_url, version_info="v2"))
    assert decode_request(bare) is decode_request(bare)
    assert len(parses) == before + 3
    for nonce in ("", "d-1.1"):
        delta = [
            decode_delta_request(
                encode_delta_request(
                    DeltaDiscoveryRequest(
                        type_url=type_url,
                        resource_names_subscribe=names,
                        initial_resource_versions={"cluster-1": "v0"},
                        response_nonce=nonce,
                        node=node,
                    )
                )
            )
            for node in nodes
        ]
        assert [request.node for request in delta] == nodes
        assert {request.response_nonce for request in delta} == {nonce}
        assert {request.resource_names_subscribe for request in delta} == {names}
    assert len(parses) == before + 4  # (the two Delta requests differ in their nonces alone)


def test_a_remembered_request_still_checks_its_node_and_nonce() -> None:
    type_url = _fresh_type()
    good = encode_request(DiscoveryRequest(type_url=type_url, response_nonce="n", node=_node()))
    assert decode_request(good).node == _node()
    span = leading_field(good, 2)
    assert span is not None
    rest = good[span[2] :]
    broken_node = bytes_field(2, b"\x0a\x05") + rest
    not_utf8 = good[: span[2]] + string_field(4, type_url) + bytes_field(5, b"\xff\xfe")
    for broken in (broken_node, not_utf8):
        with pytest.raises(RemoteProtocolError) as caught:
            decode_request(broken)
        assert caught.value.status == GrpcStatus.INVALID_ARGUMENT


@pytest.mark.parametrize(
    "data",
    [
        # The nonce twice: the last one counts.
        string_field(4, "t") + string_field(5, "first") + string_field(5, "second"),
        # The nonce before the names.
        string_field(5, "n") + string_field(3, "a") + string_field(3, "b"),
        # A node, the nonce, then the node again, to be merged.
        bytes_field(2, string_field(1, "n")) + string_field(5, "x") + bytes_field(2, b"\x12\x01c"),
    ],
    ids=["nonce-twice", "nonce-first", "node-around-nonce"],
)
def test_a_request_around_its_nonce_reads_as_the_runtime_reads_it(data: bytes) -> None:
    runtime = discovery_pb2.DiscoveryRequest.FromString(data)
    for _ in range(2):  # parsed, then perhaps remembered
        decoded = decode_request(data)
        assert decoded.response_nonce == runtime.response_nonce
        assert decoded.resource_names == tuple(runtime.resource_names)
        assert decoded.type_url == runtime.type_url
        assert (decoded.node is None) == (not runtime.HasField("node"))
        if decoded.node is not None:
            assert decoded.node == decode_node(runtime.node)


def test_the_remembered_requests_are_bounded_in_bytes(
    parses: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(SOTW_REQUESTS, "max_bytes", 64 * 1024)
    SOTW_REQUESTS.clear()
    first = encode_request(DiscoveryRequest(type_url=_fresh_type(), node=_node()))
    before = len(parses)
    decode_request(first)
    decode_request(first)
    assert len(parses) == before + 1
    fillers = 0
    while _remembered(first):
        decode_request(encode_request(DiscoveryRequest(type_url=_fresh_type())))
        fillers += 1
        assert SOTW_REQUESTS.bytes <= SOTW_REQUESTS.max_bytes
    assert fillers > 10  # (each entry counted at what it holds: a few hundred bytes)
    decode_request(first)  # forgotten: parsed again
    assert len(parses) == before + fillers + 2
    names = tuple(f"name-{i:05}" for i in range(SHARED_REQUEST_BYTES // 10))
    large = encode_request(DiscoveryRequest(type_url=_fresh_type(), resource_names=names))
    assert len(large) > SHARED_REQUEST_BYTES
    assert decode_request(large).resource_names == names
    assert decode_request(large).resource_names == names  # not remembered: parsed again
    assert len(parses) == before + fillers + 4


def _remembered(data: bytes) -> bool:
    """Whether the request ``data`` (with a node, no nonce) is in the memo."""
    key = _cut(data, 2, 5)
    assert key is not None
    return key[0] in SOTW_REQUESTS


@given(
    names=st.lists(st.text(min_size=1, max_size=8), max_size=5, unique=True),
    version=st.text(max_size=5),
    ids=st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=3),
    nonce=st.text(max_size=5),
    error=st.booleans(),
)
def test_a_remembered_request_reads_as_a_fresh_parse(
    names: list[str], version: str, ids: list[str], nonce: str, error: bool
) -> None:
    type_url = _fresh_type()
    for node_id in ids:
        request = DiscoveryRequest(
            type_url=type_url,
            version_info=version,
            resource_names=tuple(names),
            response_nonce=nonce,
            error_detail=ErrorDetail(code=3, message="bad") if error else None,
            node=_other_node(node_id),
        )
        data = encode_request(request)
        runtime = discovery_pb2.DiscoveryRequest.FromString(data)
        decoded = decode_request(data)
        assert decoded == request
        assert decoded.resource_names == tuple(runtime.resource_names)
        assert decoded.response_nonce == runtime.response_nonce
        assert decoded.node == decode_node(runtime.node)


def _nonce_field(nonce: str, number: int = 5) -> bytes:
    return string_field(number, nonce)


def test_an_ack_ending_in_the_hinted_nonce_is_decoded_without_walking_its_names(
    parses: list[bytes],
) -> None:
    type_url = _fresh_type()
    names = tuple(f"cluster-{i:03}" for i in range(100))
    for node in (_node(), None):
        ack = encode_request(
            DiscoveryRequest(
                version_info="v1",
                node=node,
                resource_names=names,
                type_url=type_url,
                response_nonce="r-7.3",
            )
        )
        plain = decode_request(ack)
        before = len(parses)
        hinted = decode_request(ack, None, 0, "r-7.3")
        assert hinted == plain
        assert hinted.response_nonce == "r-7.3"
        assert len(parses) == before  # remembered, without node and nonce
        # Another stream's ACK of the same names, its own nonce: found the same way.
        other = ack[: -len(_nonce_field("r-7.3"))] + _nonce_field("r-12.3")
        assert decode_request(other, None, 0, "r-12.3") == decode_request(other)
        assert len(parses) == before
    # A hint that is not the request's last field changes nothing.
    nack = encode_request(
        DiscoveryRequest(
            type_url=type_url,
            response_nonce="r-7.3",
            error_detail=ErrorDetail(code=3, message="bad"),
        )
    )
    assert decode_request(nack, None, 0, "r-7.3") == decode_request(nack)
    assert decode_request(nack, None, 0, "r-7.3").error_detail is not None
    delta = encode_delta_request(
        DeltaDiscoveryRequest(type_url=type_url, node=_node(), response_nonce="d.1")
    )
    assert decode_delta_request(delta, None, 0, "d.1") == decode_delta_request(delta)


def test_the_hinted_nonces_bytes_inside_another_field_are_not_taken_for_it() -> None:
    tail = _nonce_field("n.1")
    type_url = _fresh_type() + "/"
    inside = string_field(1, "v") + bytes_field(4, type_url.encode() + tail)
    decoded = decode_request(inside, None, 0, "n.1")
    assert decoded == decode_request(inside)
    assert decoded.response_nonce == ""
    assert decoded.type_url.endswith("n.1")
    # ... nor when a field as long as the nonce's follows, so that the bytes before it
    # are a whole message of their own.
    followed = inside + string_field(1, "w" * (len(tail) - 2))
    assert len(followed) == len(inside) + len(tail)
    decoded = decode_request(followed, None, 0, "n.1")
    assert decoded == decode_request(followed)
    assert (decoded.version_info, decoded.response_nonce) == ("w" * (len(tail) - 2), "")


def test_a_node_sent_twice_is_merged_when_the_nonce_is_hinted() -> None:
    a, b = _struct_entry("a", "1"), _struct_entry("b", "2")
    type_url = _fresh_type()
    data = (
        bytes_field(2, _node_bytes(a))
        + string_field(4, type_url)
        + bytes_field(2, _node_bytes(b))
        + _nonce_field("n.2")
    )
    decoded = decode_request(data, None, 0, "n.2")
    assert decoded == decode_request(data)
    assert decoded.node is not None
    assert set(decoded.node.metadata) == {"a", "b"}
    assert decoded.response_nonce == "n.2"
    # Not remembered with the second node in it: the same bytes less the first node and the
    # nonce decode to no node at all.
    assert decode_request(string_field(4, type_url) + bytes_field(2, _node_bytes(b))).node
