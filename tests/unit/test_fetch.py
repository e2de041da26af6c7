"""Unary ``Fetch<Type>`` on every per-type service: in process, over grpclib and grpcio.

One server on loopback serves a snapshot with a resource of every SotW type; each test
calls ``Fetch*`` with the library's grpclib client (``xdscore.transport.grpclib.client``)
or with grpcio's unary call on the protobuf classes, and compares the answer with what a
State-of-the-World stream is sent for the same request.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest
from envoy.config.core.v3 import base_pb2, extension_pb2
from envoy.config.route.v3 import scoped_route_pb2
from envoy.service.discovery.v3 import discovery_pb2
from envoy.service.runtime.v3 import rtds_pb2
from google.protobuf import struct_pb2

from xdscore import (
    CLUSTER,
    ENDPOINT,
    EXTENSION_CONFIG,
    LISTENER,
    ROUTE,
    RUNTIME,
    SCOPED_ROUTE,
    SECRET,
    GrpclibTransport,
    GrpcStatus,
    RemoteProtocolError,
    Snapshot,
    SnapshotCache,
    StreamLimits,
    XdsServer,
    make_resource,
    same_for_all,
)
from xdscore.server import Authorizer, StreamInfo
from xdscore.transport.grpclib.client import GrpclibChannel, open_channel
from xdscore.wire import Node, all_types, type_info

from ..factories import CL_A, CL_B, EP_A, EP_B, LS_1, RC_1, pack, secret

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

RESOURCES = [
    CL_A,
    CL_B,
    EP_A,
    EP_B,
    LS_1,
    RC_1,
    secret("cert"),
    rtds_pb2.Runtime(name="layer", layer=struct_pb2.Struct()),
    scoped_route_pb2.ScopedRouteConfiguration(name="scope", route_configuration_name="r1"),
    extension_pb2.TypedExtensionConfig(name="ext", typed_config=pack(struct_pb2.Struct())),
]
NAMED = {
    CLUSTER: ["a"],
    ENDPOINT: ["a", "b", "missing"],
    LISTENER: ["l1"],
    ROUTE: ["r1"],
    SCOPED_ROUTE: ["scope"],
    SECRET: ["cert"],
    RUNTIME: ["layer"],
    EXTENSION_CONFIG: ["ext"],
}
"""A named request of each type a Fetch method serves."""


def node(node_id: str = "fetcher") -> base_pb2.Node:
    return base_pb2.Node(id=node_id, cluster="fetch-tests")


def request(
    names: list[str] | tuple[str, ...] = (),
    *,
    version: str = "",
    with_node: bool = True,
    type_url: str = "",
) -> bytes:
    message = discovery_pb2.DiscoveryRequest(
        resource_names=list(names), version_info=version, type_url=type_url
    )
    if with_node:
        message.node.CopyFrom(node())
    data: bytes = message.SerializeToString()
    return data


def fetch_path(type_url: str) -> str:
    info = type_info(type_url)
    assert info.service is not None
    assert info.fetch_method is not None
    return f"/{info.service}/{info.fetch_method}"


def names_of(response: discovery_pb2.DiscoveryResponse) -> list[str]:
    return sorted(make_resource(r.value, type_url=r.type_url).name for r in response.resources)


@asynccontextmanager
async def serving(server: XdsServer) -> AsyncIterator[tuple[GrpclibChannel, int]]:
    async with GrpclibTransport(server) as transport:
        port = await transport.start()
        async with open_channel("127.0.0.1", port) as channel:
            yield channel, port


def make_server(
    *, limits: StreamLimits | None = None, authorize: Authorizer | None = None
) -> XdsServer:
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, Snapshot([make_resource(r) for r in RESOURCES]))
    return XdsServer(
        cache, replica_id="r1", control_plane_id="fetch-cp", limits=limits, authorize=authorize
    )


async def fetch(
    channel: GrpclibChannel, type_url: str, data: bytes
) -> discovery_pb2.DiscoveryResponse:
    answer = await channel.unary(fetch_path(type_url), data)
    return discovery_pb2.DiscoveryResponse.FromString(answer)


async def failure(channel: GrpclibChannel, type_url: str, data: bytes) -> RemoteProtocolError:
    with pytest.raises(RemoteProtocolError) as caught:
        await channel.unary(fetch_path(type_url), data)
    return caught.value


class _Done(Exception):
    """Leaves a client stream: grpclib then resets it (the server never ends it)."""


async def streamed(
    channel: GrpclibChannel, type_url: str, names: list[str]
) -> discovery_pb2.DiscoveryResponse:
    """The first response a SotW per-type stream is sent for the same request."""
    info = type_info(type_url)
    data = None
    with contextlib.suppress(_Done):
        async with channel.stream(f"/{info.service}/{info.sotw_method}") as stream:
            await stream.send(request(names))
            data = await stream.receive()
            raise _Done
    assert data is not None
    return discovery_pb2.DiscoveryResponse.FromString(data)


def test_every_fetch_method_of_the_protos_is_in_the_registry() -> None:
    """The registry's Fetch methods are exactly the unary methods the service protos define."""
    modules = [
        "envoy.service.cluster.v3.cds_pb2",
        "envoy.service.endpoint.v3.eds_pb2",
        "envoy.service.endpoint.v3.leds_pb2",
        "envoy.service.listener.v3.lds_pb2",
        "envoy.service.route.v3.rds_pb2",
        "envoy.service.route.v3.srds_pb2",
        "envoy.service.secret.v3.sds_pb2",
        "envoy.service.runtime.v3.rtds_pb2",
        "envoy.service.extension.v3.config_discovery_pb2",
    ]
    defined = set()
    for module in modules:
        for service in importlib.import_module(module).DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                if not method.client_streaming and not method.server_streaming:
                    defined.add(f"/{service.full_name}/{method.name}")
    registered = {fetch_path(i.type_url) for i in all_types() if i.fetch_method is not None}
    assert registered == defined
    assert len(registered) == 8
    assert type_info(CLUSTER).fetch_method == "FetchClusters"


async def test_each_fetch_answers_as_a_sotw_stream_would() -> None:
    async with serving(make_server()) as (channel, _):
        for type_url, names in NAMED.items():
            response = await fetch(channel, type_url, request(names))
            stream = await streamed(channel, type_url, names)
            assert response.type_url == type_url
            assert response.version_info == stream.version_info != ""
            assert list(response.resources) == list(stream.resources)
            assert response.nonce.startswith("r1-")
            assert response.control_plane.identifier == "fetch-cp"
        # Names that do not exist are left out, as on the stream.
        endpoints = await fetch(channel, ENDPOINT, request(["a", "missing"]))
        assert names_of(endpoints) == ["a"]


async def test_empty_names_mean_everything_only_for_wildcard_types() -> None:
    async with serving(make_server()) as (channel, _):
        clusters = await fetch(channel, CLUSTER, request())
        assert names_of(clusters) == ["a", "b"]
        assert names_of(await fetch(channel, LISTENER, request())) == ["l1"]
        assert names_of(await fetch(channel, SCOPED_ROUTE, request())) == ["scope"]
        # Not for a named type: nothing, not everything.
        endpoints = await fetch(channel, ENDPOINT, request())
        assert names_of(endpoints) == []
        # Nonces come from the server's scheme and never repeat.
        again = await fetch(channel, CLUSTER, request())
        assert again.nonce != clusters.nonce
        assert again.version_info == clusters.version_info


async def test_a_current_version_is_not_modified_and_an_old_one_is_answered() -> None:
    async with serving(make_server()) as (channel, _):
        current = await fetch(channel, CLUSTER, request())
        error = await failure(channel, CLUSTER, request(version=current.version_info))
        assert error.status is GrpcStatus.FAILED_PRECONDITION
        assert error.message.startswith("not modified")
        answered = await fetch(channel, CLUSTER, request(version="old"))
        assert answered.version_info == current.version_info
        # The version is the selection's: other names make another version.
        only_a = await fetch(channel, CLUSTER, request(["a"], version=current.version_info))
        assert names_of(only_a) == ["a"]


async def test_clear_errors_for_requests_the_stream_would_refuse() -> None:
    limits = StreamLimits(max_names_per_request=3, max_request_bytes=2048)
    async with serving(make_server(limits=limits)) as (channel, _):
        no_node = await failure(channel, CLUSTER, request(with_node=False))
        assert no_node.status is GrpcStatus.INVALID_ARGUMENT
        assert "node" in no_node.message
        other = await failure(channel, CLUSTER, request(type_url=LISTENER))
        assert other.status is GrpcStatus.INVALID_ARGUMENT
        many = await failure(channel, ENDPOINT, request(["a", "b", "c", "d"]))
        assert many.status is GrpcStatus.RESOURCE_EXHAUSTED
        large = await failure(channel, ENDPOINT, request(["x" * 3000]))
        assert large.status is GrpcStatus.RESOURCE_EXHAUSTED
        # The server goes on answering.
        assert names_of(await fetch(channel, CLUSTER, request())) == ["a", "b"]


async def test_a_type_or_node_the_cache_does_not_serve_is_not_found() -> None:
    cache = SnapshotCache(group=lambda node: node.id)
    cache.set_snapshot("fetcher", Snapshot([make_resource(CL_A)]))
    async with serving(XdsServer(cache)) as (channel, _):
        assert names_of(await fetch(channel, CLUSTER, request())) == ["a"]
        missing_type = await failure(channel, LISTENER, request())
        assert missing_type.status is GrpcStatus.NOT_FOUND
        assert "lds" in missing_type.message
        other_node = discovery_pb2.DiscoveryRequest(node=node("stranger")).SerializeToString()
        assert (await failure(channel, CLUSTER, other_node)).status is GrpcStatus.NOT_FOUND


async def test_the_authorization_hook_decides_each_fetch() -> None:
    seen: list[StreamInfo] = []

    def authorize(info: StreamInfo, who: Node) -> str | None:
        seen.append(info)
        return None if who.id == "fetcher" else f"{who.id} may not fetch"

    async with serving(make_server(authorize=authorize)) as (channel, _):
        assert names_of(await fetch(channel, CLUSTER, request())) == ["a", "b"]
        denied = discovery_pb2.DiscoveryRequest(node=node("intruder")).SerializeToString()
        error = await failure(channel, CLUSTER, denied)
        assert error.status is GrpcStatus.PERMISSION_DENIED
        assert error.message == "intruder may not fetch"
    assert [info.type_url for info in seen] == [CLUSTER, CLUSTER]
    assert seen[0].peer.startswith("127.0.0.1:")


async def test_fetches_are_counted_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    server = make_server()
    caplog.set_level(logging.INFO, logger="xdscore.server")
    async with serving(server) as (channel, _):
        await fetch(channel, CLUSTER, request())
        await failure(channel, CLUSTER, request(with_node=False))
    assert server.metrics is not None
    sample = server.metrics.registry.get_sample_value
    assert sample("xdscore_fetches_total", {"type": "cds", "code": "ok"}) == 1
    assert sample("xdscore_fetches_total", {"type": "cds", "code": "invalid_argument"}) == 1
    assert sample("xdscore_responses_total", {"type": "cds"}) == 1
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("fetch ")]
    assert len(lines) == 2
    assert "node=fetcher" in lines[0]
    assert "mode=sotw/cds" in lines[0]
    assert "(2 resources)" in lines[0]
    assert "INVALID_ARGUMENT" in lines[1]


async def test_grpcio_fetches_with_the_protobuf_classes() -> None:
    async with (
        serving(make_server()) as (_, port),
        grpc.aio.insecure_channel(f"127.0.0.1:{port}") as chan,
    ):
        for type_url, names in NAMED.items():
            call = chan.unary_unary(
                fetch_path(type_url),
                request_serializer=discovery_pb2.DiscoveryRequest.SerializeToString,
                response_deserializer=discovery_pb2.DiscoveryResponse.FromString,
            )
            response = await call(
                discovery_pb2.DiscoveryRequest(node=node(), resource_names=names), timeout=5
            )
            assert response.type_url == type_url
            assert names_of(response) == sorted(set(names) - {"missing"})
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(
                    discovery_pb2.DiscoveryRequest(
                        node=node(), resource_names=names, version_info=response.version_info
                    ),
                    timeout=5,
                )
            assert caught.value.code() is grpc.StatusCode.FAILED_PRECONDITION
