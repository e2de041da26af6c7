"""The load generator's shared decoder (benchmarks/loadgen.py): a response the fleet has seen
is decoded once, and no two responses with different resources are ever taken for each other."""

from __future__ import annotations

import sys
from pathlib import Path

from envoy.config.cluster.v3 import cluster_pb2
from envoy.service.discovery.v3 import discovery_pb2

from xdscore import CLUSTER, Resource, make_resource
from xdscore.protocol import DeltaDiscoveryResponse
from xdscore.wire._codec import encode_delta_response
from xdscore.wire._framing import string_field

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from loadgen import SharedDecoder  # noqa: E402


def _clusters(*names_and_timeouts: tuple[str, int]) -> list[Resource]:
    return [
        make_resource(cluster_pb2.Cluster(name=name, connect_timeout={"seconds": seconds}))
        for name, seconds in names_and_timeouts
    ]


def _response(resources: list[Resource], nonce: str, version: str = "v1") -> bytes:
    return encode_delta_response(
        type_url=CLUSTER,
        nonce=nonce,
        system_version_info=version,
        resources=resources,
        removed=("gone",),
    )


def _summary(decoded: DeltaDiscoveryResponse) -> list[tuple[str, str, bytes]]:
    return [(r.name, r.version, r.body) for r in decoded.resources]


def test_a_delta_response_seen_before_is_decoded_once() -> None:
    decoder = SharedDecoder()
    resources = _clusters(("a", 1), ("b", 2))
    first = decoder.delta(_response(resources, "s1.1"))
    again = decoder.delta(_response(resources, "s2.1", version="v2"))
    assert again.resources is first.resources  # one decode for both
    assert (again.nonce, again.system_version_info) == ("s2.1", "v2")
    assert again.removed_resources == ("gone",)
    assert _summary(first) == [(r.name, r.version, r.body) for r in resources]


def test_responses_of_the_same_size_with_other_resources_are_not_confused() -> None:
    decoder = SharedDecoder()
    one = decoder.delta(_response(_clusters(("a", 1), ("b", 2)), "n"))
    other = decoder.delta(_response(_clusters(("a", 1), ("b", 3)), "n"))  # same length
    assert _summary(one) != _summary(other)
    assert [name for name, _, _ in _summary(other)] == ["a", "b"]
    assert other.resources[1].version != one.resources[1].version


def test_entries_after_other_fields_are_read_whole() -> None:
    """A response whose entries do not come together (fields out of order) is decoded from
    all of it, not from the first run of entries alone."""
    decoder = SharedDecoder()
    a, b = _clusters(("a", 1), ("b", 2))
    head = string_field(1, "v1") + a.delta_entry  # (an entry is its field 2, tag and all)
    split = head + string_field(4, CLUSTER) + b.delta_entry
    only_a = head + string_field(4, CLUSTER)
    assert len(decoder.delta(only_a).resources) == 1
    decoded = decoder.delta(split + string_field(5, "n"))
    runtime = discovery_pb2.DeltaDiscoveryResponse.FromString(split)
    assert [r.name for r in decoded.resources] == [r.name for r in runtime.resources] == ["a", "b"]
