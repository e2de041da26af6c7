"""Fuzzing the server machines and the request codec.

Any decoded request, however odd (random strings, nonces the server did or did not send,
versions, huge or empty name lists, ``error_detail``, the node present, absent or changed,
any type URL), fed in any order to a fresh SotW or Delta machine, yields events or a
:class:`RemoteProtocolError`; after the error the machine is in ERROR and refuses to go on
(:class:`LocalProtocolError`); ``poll`` never raises while it is open and what it sends is
well formed. Raw bytes, random or mutated encodings, decode to a request or raise
:class:`RemoteProtocolError`, nothing else.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from envoy.service.discovery.v3 import discovery_pb2
from hypothesis import event, given
from hypothesis import strategies as st

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LBENDPOINT,
    LISTENER,
    LocalProtocolError,
    RemoteProtocolError,
    ResponseAcked,
    ResponseNacked,
    StreamLimits,
)
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DeltaServer,
    DiscoveryRequest,
    NodeIdentified,
    SotwServer,
    StaleNonceSeen,
    StreamState,
    SubscriptionChanged,
)
from xdscore.testing.strategies import (
    configs,
    error_details,
    resource_names,
    type_urls,
)
from xdscore.wire import make_node
from xdscore.wire._client_codec import encode_delta_request, encode_request
from xdscore.wire._codec import decode_delta_request, decode_request

EVENTS = (NodeIdentified, SubscriptionChanged, ResponseAcked, ResponseNacked, StaleNonceSeen)
NODES = (
    make_node(id="fuzz"),
    None,
    make_node(id="fuzz", cluster="elsewhere"),
    make_node(id="", metadata={"k": [1, "x", {"y": None}]}),
)
"""The usual node first: hypothesis draws the first choices most often."""
SMALL = StreamLimits(
    max_names_per_request=6, max_subscribed_names=8, max_types=3, max_name_length=40
)
VIEWS = st.one_of(
    st.none(), *[configs(["a", "b", "c"], max_size=3).map(lambda c: c.snapshot())] * 3
)

odd_type_url = st.one_of(
    type_urls(unregistered=True, delta_only=None),
    st.text(max_size=30),
    st.just(""),
)
any_type_url = st.one_of(*[st.sampled_from([CLUSTER, ENDPOINT, LISTENER])] * 6, odd_type_url)
any_name = st.one_of(resource_names(max_size=20), st.sampled_from(["*", "", "a", "b"]))
plain_names = st.lists(st.sampled_from(["a", "b", "c", "*"]), max_size=3)
name_lists = st.one_of(
    plain_names,
    plain_names,
    st.lists(any_name, max_size=4),
    st.lists(st.sampled_from(["a", "b", "c", "*"]), min_size=5, max_size=40),
)
later_node = st.one_of(*[st.sampled_from(NODES[:2])] * 8, st.sampled_from(NODES))
first_node = st.one_of(*[st.just(NODES[0])] * 8, st.sampled_from(NODES))
any_error = st.one_of(st.none(), st.none(), error_details())


def _nonce(issued: list[str]) -> st.SearchStrategy[str]:
    options = [st.just(""), st.text(max_size=8)]
    if issued:
        options += [st.just(issued[-1])] * 2 + [st.sampled_from(issued)]
    return st.one_of(options)


def _type_url(fixed: str | None) -> st.SearchStrategy[str]:
    if fixed is None:
        return any_type_url
    return st.one_of(*[st.sampled_from([fixed, ""])] * 6, any_type_url)


def sotw_requests(
    issued: list[str], fixed: str | None = None, *, first: bool = True
) -> st.SearchStrategy[DiscoveryRequest]:
    return st.builds(
        DiscoveryRequest,
        type_url=_type_url(fixed),
        version_info=st.text(max_size=30),
        resource_names=name_lists.map(tuple),
        response_nonce=_nonce(issued),
        error_detail=any_error,
        node=first_node if first else later_node,
    )


def delta_requests(
    issued: list[str], fixed: str | None = None, *, first: bool = True
) -> st.SearchStrategy[DeltaDiscoveryRequest]:
    return st.builds(
        DeltaDiscoveryRequest,
        type_url=_type_url(fixed),
        resource_names_subscribe=name_lists.map(tuple),
        resource_names_unsubscribe=name_lists.map(tuple),
        initial_resource_versions=st.dictionaries(any_name, st.text(max_size=12), max_size=6),
        response_nonce=_nonce(issued),
        error_detail=any_error,
        node=first_node if first else later_node,
    )


def _well_formed(response: Any, nonces: set[str]) -> None:
    assert response.nonce, "a response without a nonce"
    assert response.nonce not in nonces, f"nonce {response.nonce} sent twice"
    nonces.add(response.nonce)
    if hasattr(response, "removed"):
        names = [r.name for r in response.resources]
        assert len(set(names)) == len(names)
        assert len(set(response.removed)) == len(response.removed)
        assert not set(names) & set(response.removed)
    else:
        names = list(response.selection.resources)
        assert len(set(names)) == len(names)
    assert all(r.type_url == response.type_url for r in getattr(response, "resources", ()))


KINDS = ("request", "ack", "nack", "change", "odd")
"""What each step sends. Sane kinds come first: hypothesis draws early choices most often,
and an odd request usually ends the stream, so it goes last."""


def _sane(
    data: st.DataObject, delta: bool, fixed: str | None, kind: str, issued: list[str], first: bool
) -> DiscoveryRequest | DeltaDiscoveryRequest:
    type_url = fixed or data.draw(st.sampled_from([CLUSTER, ENDPOINT, LISTENER]), label="type")
    names = tuple(data.draw(plain_names, label="names"))
    nonce = issued[-1] if kind in ("ack", "nack") and issued else ""
    error = data.draw(error_details(), label="error") if kind == "nack" else None
    node = NODES[0] if first else data.draw(st.sampled_from(NODES[:2]), label="node")
    if delta:
        return DeltaDiscoveryRequest(
            type_url=type_url,
            resource_names_subscribe=names if kind != "ack" else (),
            resource_names_unsubscribe=tuple(data.draw(plain_names)) if kind == "change" else (),
            response_nonce=nonce,
            error_detail=error,
            node=node,
        )
    return DiscoveryRequest(
        type_url=type_url,
        resource_names=names,
        response_nonce=nonce,
        version_info=data.draw(st.sampled_from(["", "v1"]), label="version"),
        error_detail=error,
        node=node,
    )


@given(
    data=st.data(),
    delta=st.booleans(),
    fixed=st.sampled_from([None, CLUSTER, ENDPOINT, "type.example/x", LBENDPOINT]),
    ordered=st.booleans(),
    limits=st.sampled_from([None, SMALL]),
)
def test_odd_requests_give_events_or_a_remote_protocol_error(
    data: st.DataObject, delta: bool, fixed: str | None, ordered: bool, limits: StreamLimits | None
) -> None:
    counter = iter(range(1, 10_000))
    machine: Any = (DeltaServer if delta else SotwServer)(
        nonce_source=lambda: f"n{next(counter)}", type_url=fixed, limits=limits, ordered=ordered
    )
    issued: list[str] = []
    nonces: set[str] = set()
    requests = delta_requests if delta else sotw_requests
    received = 0
    for _ in range(data.draw(st.integers(1, 25), label="steps")):
        if data.draw(st.booleans(), label="poll?"):
            for response in machine.poll(data.draw(VIEWS, label="view")):
                _well_formed(response, nonces)
                issued.append(response.nonce)
                event("fuzz: a response was sent")
            continue
        kind = data.draw(st.sampled_from(KINDS), label="kind")
        first = machine.node is None
        if kind == "odd":
            request = data.draw(requests(issued, fixed, first=first), label="request")
        else:
            request = _sane(data, delta, fixed, kind, issued, first)
        try:
            events = machine.receive(request)
        except RemoteProtocolError as error:
            event(f"fuzz: ended by {error.status.name} after {min(received, 3)}+ requests")
            assert machine.state is StreamState.ERROR
            with pytest.raises(LocalProtocolError):
                machine.receive(request)
            with pytest.raises(LocalProtocolError):
                machine.poll(None)
            return
        received += 1
        assert isinstance(events, list)
        assert all(isinstance(each, EVENTS) for each in events), events
        for each in events:
            if not isinstance(each, NodeIdentified | SubscriptionChanged):
                event(f"fuzz: {type(each).__name__}")
        assert machine.state is StreamState.OPEN


# --- the codec -----------------------------------------------------------------------------

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def encodings(draw: st.DrawFn) -> bytes:
    """Valid encodings of odd requests (node metadata included), then maybe damaged."""
    if draw(st.booleans()):
        request: Any = draw(sotw_requests([]))
        encoded = encode_request(request)
        message: Any = discovery_pb2.DiscoveryRequest.FromString(encoded)
    else:
        request = draw(delta_requests([]))
        encoded = encode_delta_request(request)
        message = discovery_pb2.DeltaDiscoveryRequest.FromString(encoded)
    metadata = draw(st.dictionaries(st.text(max_size=5), json_values, max_size=3))
    if metadata:
        message.node.metadata.update(metadata)
    data = bytearray(message.SerializeToString())
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        action = draw(st.sampled_from(["flip", "drop", "insert", "truncate"]))
        if action == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif action == "drop":
            del data[at]
        elif action == "insert":
            data.insert(at, draw(st.integers(0, 255)))
        else:
            del data[at:]
    return bytes(data)


@given(st.one_of(st.binary(max_size=300), encodings()))
def test_request_bytes_decode_or_raise_remote_protocol_error(data: bytes) -> None:
    for decode in (decode_request, decode_delta_request):
        try:
            decoded = decode(data)
        except RemoteProtocolError:
            continue
        assert isinstance(decoded, DiscoveryRequest | DeltaDiscoveryRequest)


def _outcome(decode: Any, data: bytes, nonce: str) -> object:
    try:
        return decode(data, None, 0, nonce)
    except RemoteProtocolError as error:
        return (error.status, str(error))


@given(
    st.one_of(st.binary(max_size=300), encodings()),
    st.text(max_size=20),
    st.sampled_from(["none", "appended", "inside"]),
    st.booleans(),
)
def test_a_nonce_hint_never_changes_what_a_request_decodes_to(
    data: bytes, nonce: str, where: str, hinted_first: bool
) -> None:
    """The codec's shortcut for an ACK ending in the stream's last nonce: whatever the
    bytes, the hint changes nothing of the outcome (the record, or the error)."""
    for decode, tag in ((decode_request, 0x2A), (decode_delta_request, 0x32)):
        raw = nonce.encode()
        field = bytes((tag, len(raw))) + raw if len(raw) < 0x80 else b""
        request = data
        if where == "appended":
            request = data + field
        elif where == "inside" and field:
            # The nonce field's bytes at the end of another field's payload (field 4 is a
            # string in both messages: the type URL, the names to unsubscribe).
            request = data + bytes((0x22, len(field) + 1)) + b"x" + field
        runs = [nonce, ""] if hinted_first else ["", nonce]
        first, second = (_outcome(decode, request, hint) for hint in runs)
        assert first == second


@pytest.mark.parametrize("number", [math.inf, -math.inf, math.nan])
def test_non_finite_node_metadata_is_decoded(number: float) -> None:
    # Valid protobuf that JSON cannot express: the codec keeps the number as it is.
    message = discovery_pb2.DiscoveryRequest(type_url=CLUSTER)
    message.node.id = "fuzz"
    message.node.metadata.fields["weight"].number_value = number
    decoded = decode_request(message.SerializeToString())
    assert decoded.node is not None
    weight = decoded.node.metadata["weight"]
    assert isinstance(weight, float)
    assert weight == number or (math.isnan(number) and math.isnan(weight))
