"""The node-binding policy, the operator identities and the identity a transport reads from
a certificate."""

from __future__ import annotations

import re
from typing import Any

import attrs
import pytest

from xdscore import StreamInfo
from xdscore.server import PeerIdentity, SpiffeNodePolicy, SpiffeOperators
from xdscore.transport._tls import peer_identity
from xdscore.wire import Node, make_node

ALICE = "spiffe://example.org/ns/shop/sa/cart"


def stream(*uris: str) -> StreamInfo:
    identity = PeerIdentity(uri_sans=uris) if uris else None
    return StreamInfo(id=1, protocol="sotw", type_url=None, identity=identity)


def test_the_node_the_certificate_allows_is_allowed() -> None:
    policy = SpiffeNodePolicy()
    assert policy(stream(ALICE), make_node(id="cart.shop")) is None


def test_another_node_is_denied_naming_the_mismatch() -> None:
    reason = SpiffeNodePolicy()(stream(ALICE), make_node(id="billing.bank"))
    assert reason is not None
    assert "'billing.bank'" in reason
    assert ALICE in reason
    assert "'cart.shop'" in reason


def test_no_certificate_is_denied() -> None:
    reason = SpiffeNodePolicy()(stream(), make_node(id="cart.shop"))
    assert reason is not None
    assert "no verified client certificate" in reason


def test_a_certificate_without_a_matching_spiffe_id_is_denied() -> None:
    reason = SpiffeNodePolicy()(stream("spiffe://example.org/other/cart"), make_node(id="cart"))
    assert reason is not None
    assert "no SPIFFE ID of the form" in reason
    assert "spiffe://example.org/other/cart" in reason


def test_the_policy_can_check_the_cluster_instead() -> None:
    policy = SpiffeNodePolicy("spiffe://{domain}/{team}", "{team}", "cluster")
    assert policy(stream("spiffe://corp/edge"), make_node(id="x", cluster="edge")) is None
    assert policy(stream("spiffe://corp/edge"), make_node(id="x", cluster="core")) is not None


def test_a_placeholder_matches_one_path_segment_only() -> None:
    policy = SpiffeNodePolicy("spiffe://{domain}/{name}", "{name}")
    assert policy(stream("spiffe://corp/a/b"), make_node(id="a/b")) is not None


def test_a_node_template_with_an_unknown_placeholder_is_refused() -> None:
    with pytest.raises(ValueError, match="account"):
        SpiffeNodePolicy("spiffe://{domain}/{name}", "{account}")


def test_peer_identity_reads_sans_and_subject() -> None:
    certificate = {
        "subject": ((("commonName", "cart"),), (("organizationName", "shop"),)),
        "subjectAltName": (("URI", ALICE), ("DNS", "cart.shop.svc"), ("IP Address", "10.0.0.1")),
    }
    identity = peer_identity(certificate)
    assert identity == PeerIdentity(
        uri_sans=(ALICE,),
        dns_sans=("cart.shop.svc",),
        subject="CN=cart,O=shop",
    )
    assert identity.spiffe_ids == (ALICE,)
    assert peer_identity(None) is None
    assert peer_identity({}) is None


# -- more than one field bound ----------------------------------------------------------------

TENANT = "spiffe://example.org/ns/team-a/sa/edge"


def test_every_bound_field_must_match() -> None:
    policy = SpiffeNodePolicy(also={"cluster": "{namespace}", "metadata.tier": "{account}"})
    assert policy.bound_fields == frozenset({"id", "cluster", "metadata.tier"})
    own = Node(id="edge.team-a", cluster="team-a", metadata={"tier": "edge"})
    assert policy(stream(TENANT), own) is None
    # The right id in another tenant's cluster: denied, naming the field.
    reason = policy(stream(TENANT), attrs.evolve(own, cluster="team-b"))
    assert reason == (
        f"node cluster 'team-b' does not match the certificate: {TENANT} allows 'team-a'"
    )
    reason = policy(stream(TENANT), attrs.evolve(own, metadata={"tier": "core"}))
    assert reason == (
        f"node metadata.tier 'core' does not match the certificate: {TENANT} allows 'edge'"
    )
    reason = policy(stream(TENANT), attrs.evolve(own, metadata={}))
    assert reason is not None
    assert "node metadata.tier None does not match" in reason


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"field": "zone"}, "a node field is id, cluster or metadata.KEY, not 'zone'"),
        ({"also": {"metadata.": "{account}"}}, "not 'metadata.'"),
        ({"also": {"id": "{account}"}}, "node field 'id' is bound twice"),
        ({"also": {"cluster": "{team}"}}, "uses ['team']"),
    ],
)
def test_a_binding_that_cannot_hold_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        SpiffeNodePolicy(**kwargs)


# -- operators -------------------------------------------------------------------------------


def test_operators_are_matched_by_spiffe_id_one_segment_per_star() -> None:
    operators = SpiffeOperators(["spiffe://example.org/ns/ops/sa/*"])
    assert operators(PeerIdentity(uri_sans=("spiffe://example.org/ns/ops/sa/status",)))
    assert not operators(PeerIdentity(uri_sans=("spiffe://example.org/ns/ops/sa/a/b",)))
    assert not operators(PeerIdentity(uri_sans=("spiffe://example.org/ns/opsx/sa/status",)))
    assert not operators(PeerIdentity(uri_sans=(TENANT,)))
    assert not operators(PeerIdentity(dns_sans=("ops.example.org",)))
    assert not operators(None)
    with pytest.raises(ValueError, match="not a SPIFFE ID pattern"):
        SpiffeOperators(["ops"])
    with pytest.raises(ValueError, match="at least one"):
        SpiffeOperators([])
