"""Who CSDS tells about which stream (``ClientStatus.visible_to``), case by case.

tests/fault/test_isolation.py asks over both transports with real certificates; here each
rule is checked on its own, including a stream a certificate opened claiming another
node, which the authorizer is about to deny: registered for a moment, it must not show
that node to its holder.
"""

from __future__ import annotations

from typing import Any, cast

import attrs

from xdscore import SnapshotCache, StreamInfo, XdsServer
from xdscore.server import ActiveStream, PeerIdentity, SpiffeNodePolicy, SpiffeOperators
from xdscore.wire import make_node

A = PeerIdentity(uri_sans=("spiffe://example.org/ns/a/sa/edge",))
B = PeerIdentity(uri_sans=("spiffe://example.org/ns/b/sa/edge",))
OPERATOR = PeerIdentity(uri_sans=("spiffe://example.org/ns/ops/sa/status",))


@attrs.frozen
class _Stream:
    """What ``visible_to`` reads of an :class:`ActiveStream`: its info."""

    info: StreamInfo


def streams() -> dict[str, ActiveStream]:
    def stream(identity: PeerIdentity | None, node_id: str) -> ActiveStream:
        info = StreamInfo(id=0, protocol="sotw", type_url=None, identity=identity)
        info.node = make_node(id=node_id)
        return cast(ActiveStream, _Stream(info))

    return {
        "a": stream(A, "edge.a"),
        "b": stream(B, "edge.b"),
        "a-claiming-b": stream(A, "edge.b"),
        "no-certificate": stream(None, "edge.c"),
    }


def visible(server: XdsServer, identity: PeerIdentity | None) -> list[str] | str:
    """The streams ``identity`` is told about, or "all"."""
    rule = server.client_status.visible_to(identity)
    if rule is None:
        return "all"
    return [name for name, stream in streams().items() if rule(stream)]


def server(**options: Any) -> XdsServer:
    return XdsServer(SnapshotCache(), metrics=False, **options)


def test_with_node_binding_a_certificate_sees_its_own_node_only() -> None:
    bound = server(
        authorize=SpiffeNodePolicy(), operators=SpiffeOperators(["spiffe://example.org/ns/ops/*/*"])
    )
    assert visible(bound, A) == ["a"]  # not its own stream that claims edge.b
    assert visible(bound, B) == ["b"]
    assert visible(bound, OPERATOR) == "all"
    assert visible(bound, None) == []
    assert visible(bound, PeerIdentity(uri_sans=("spiffe://example.org/other",))) == []


def test_without_node_binding_a_certificate_sees_the_streams_it_opened() -> None:
    unbound = server()
    assert visible(unbound, A) == ["a", "a-claiming-b"]
    assert visible(unbound, OPERATOR) == []
    # No certificate, nothing bound: any client may claim any node, so nothing is hidden.
    assert visible(unbound, None) == "all"
