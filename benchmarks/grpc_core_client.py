"""The load generator's neutral client: grpc-core's HTTP/2 and the protobuf runtime, per client.

Each client owns one grpcio channel (grpc-core's C stack, its own subchannel and so its own
TCP connection: ``grpc.use_local_subchannel_pool``) and one ADS stream on it, and behaves as
Envoy does (requests recorded from Envoy 1.40 by benchmarks/h2_capture.py): it asks for
clusters and listeners with a wildcard, decodes every response with the protobuf runtime
into typed resources (``Cluster``, ``ClusterLoadAssignment``, ``Listener`` and the
``HttpConnectionManager`` inside it, ``RouteConfiguration``), subscribes by name to the
endpoints of its EDS clusters and to the route configurations its listeners name (before
ACKing the response that named them, as Envoy does), and ACKs every response; a resource
that does not decode is NACKed. Its node goes on every request, as Envoy's does. Nothing is
shared between clients but the encoded node they were given: no channel, no response, no
decoded resource. Nothing of xdscore is on its path, so it measures any xDS server alike.

A session (:class:`SotwSession`, :class:`DeltaSession`) is the client's protocol state
without I/O: ``start()`` gives the first requests, ``receive(data)`` decodes a response and
gives the requests it calls for, ``reconnect()`` the first requests of a new stream that
presents what the client holds. :func:`open_call` opens the channel and the call.
"""

from __future__ import annotations

from typing import Any

import grpc
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.core.v3 import base_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.config.route.v3 import route_pb2
from envoy.extensions.filters.network.http_connection_manager.v3 import (
    http_connection_manager_pb2,
)
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

__all__ = ["CDS", "EDS", "LDS", "RDS", "DeltaSession", "SotwSession", "open_call"]

_PREFIX = "type.googleapis.com/"
CDS = _PREFIX + "envoy.config.cluster.v3.Cluster"
EDS = _PREFIX + "envoy.config.endpoint.v3.ClusterLoadAssignment"
LDS = _PREFIX + "envoy.config.listener.v3.Listener"
RDS = _PREFIX + "envoy.config.route.v3.RouteConfiguration"
_HCM = _PREFIX + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_MESSAGES: dict[str, Any] = {
    CDS: cluster_pb2.Cluster,
    EDS: endpoint_pb2.ClusterLoadAssignment,
    LDS: listener_pb2.Listener,
    RDS: route_pb2.RouteConfiguration,
}
_FOLLOWS = {CDS: EDS, LDS: RDS}
"""The type whose names a held type's resources give: a cluster's endpoints, a listener's routes."""
_INVALID_ARGUMENT = 3

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
    ("grpc.use_local_subchannel_pool", 1),
]
"""No message size limit, and a subchannel (a connection) of the channel's own."""


def open_call(target: str, delta: bool) -> tuple[grpc.aio.Channel, Any]:
    """A new channel to ``target`` and an ADS call on it, sending and receiving bytes."""
    channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
    method = "DeltaAggregatedResources" if delta else "StreamAggregatedResources"
    return channel, channel.stream_stream(ADS + method)()


def _name(type_url: str, message: Any) -> str:
    return str(message.cluster_name if type_url == EDS else message.name)


def _decode(type_url: str, resource: Any) -> Any:
    """One resource (an ``Any``) as its typed message; ``DecodeError`` if it is not one."""
    if resource.type_url != type_url:
        raise DecodeError(f"a {resource.type_url} in a {type_url} response")
    return _MESSAGES[type_url].FromString(resource.value)


def _endpoint_names(clusters: dict[str, Any]) -> set[str]:
    """What EDS clusters ask for: their service name, or their own name."""
    return {
        c.eds_cluster_config.service_name or c.name
        for c in clusters.values()
        if c.type == cluster_pb2.Cluster.EDS
    }


def _route_names(listeners: dict[str, Any]) -> set[str]:
    """The route configurations the listeners' HTTP connection managers take from RDS."""
    names = set()
    for listener in listeners.values():
        chains = list(listener.filter_chains)
        if listener.HasField("default_filter_chain"):
            chains.append(listener.default_filter_chain)
        managers = [f.typed_config for chain in chains for f in chain.filters]
        if listener.HasField("api_listener"):
            managers.append(listener.api_listener.api_listener)
        for packed in managers:
            if packed.type_url == _HCM:
                manager = http_connection_manager_pb2.HttpConnectionManager.FromString(packed.value)
                if manager.HasField("rds"):
                    names.add(manager.rds.route_config_name)
    return names


def _followed(type_url: str, held: dict[str, Any]) -> set[str]:
    return _endpoint_names(held) if type_url == CDS else _route_names(held)


class SotwSession:
    """One SotW client's state: per type what it holds, its version, nonce and names."""

    def __init__(self, node: base_pb2.Node) -> None:
        self.node = node
        self.held: dict[str, dict[str, Any]] = {}
        self._names: dict[str, list[str]] = {}
        """Names asked for, by type; a wildcard type is not in it."""
        self._versions: dict[str, str] = {}
        self._nonces: dict[str, str] = {}

    def holds(self, type_url: str) -> dict[str, Any]:
        return self.held.get(type_url, {})

    def _request(self, type_url: str, error: str = "") -> bytes:
        request = discovery_pb2.DiscoveryRequest(
            version_info=self._versions.get(type_url, ""),
            node=self.node,
            resource_names=self._names.get(type_url, []),
            type_url=type_url,
            response_nonce=self._nonces.get(type_url, ""),
        )
        if error:
            request.error_detail.CopyFrom(status_pb2.Status(code=_INVALID_ARGUMENT, message=error))
        return request.SerializeToString()

    def start(self) -> list[bytes]:
        return [self._request(CDS), self._request(LDS)]

    def reconnect(self) -> list[bytes]:
        """A new stream's first requests: every type, the versions it accepted, no nonce."""
        self._nonces.clear()
        types = [CDS, LDS, *(t for t in (EDS, RDS) if t in self._names)]
        return [self._request(type_url) for type_url in types]

    def receive(self, data: bytes) -> tuple[Any, list[bytes]]:
        """Decode one response and apply it; the response and the requests it calls for."""
        response = discovery_pb2.DiscoveryResponse.FromString(data)
        type_url = response.type_url
        self._nonces[type_url] = response.nonce
        try:
            decoded = [_decode(type_url, resource) for resource in response.resources]
        except (DecodeError, KeyError) as error:
            return response, [self._request(type_url, f"cannot decode: {error}")]
        self.held[type_url] = {_name(type_url, message): message for message in decoded}
        self._versions[type_url] = response.version_info
        out = []
        follow = _FOLLOWS.get(type_url)
        if follow is not None:
            names = sorted(_followed(type_url, self.held[type_url]))
            if names != self._names.get(follow):
                self._names[follow] = names
                out.append(self._request(follow))
        out.append(self._request(type_url))
        return response, out


class DeltaSession:
    """One Delta client's state: per type the resources it holds and the names it asked for."""

    def __init__(self, node: base_pb2.Node) -> None:
        self.node = node
        self.held: dict[str, dict[str, Any]] = {}
        self._versions: dict[str, dict[str, str]] = {}
        self._names: dict[str, set[str]] = {}

    def holds(self, type_url: str) -> dict[str, Any]:
        return self.held.get(type_url, {})

    def _request(self, type_url: str, **fields: Any) -> bytes:
        return discovery_pb2.DeltaDiscoveryRequest(
            node=self.node, type_url=type_url, **fields
        ).SerializeToString()

    def start(self) -> list[bytes]:
        return [self._request(CDS), self._request(LDS)]

    def reconnect(self) -> list[bytes]:
        """A new stream's first requests: each type's names and what it holds of them."""
        requests = []
        for type_url in (CDS, LDS, EDS, RDS):
            if type_url in (CDS, LDS) or type_url in self._names:
                requests.append(
                    self._request(
                        type_url,
                        resource_names_subscribe=sorted(self._names.get(type_url, ())),
                        initial_resource_versions=self._versions.get(type_url, {}),
                    )
                )
        return requests

    def receive(self, data: bytes) -> tuple[Any, list[bytes]]:
        """Decode one response and apply it; the response and the requests it calls for."""
        response = discovery_pb2.DeltaDiscoveryResponse.FromString(data)
        type_url = response.type_url
        try:
            decoded = [(r, _decode(type_url, r.resource)) for r in response.resources]
        except (DecodeError, KeyError) as error:
            detail = status_pb2.Status(code=_INVALID_ARGUMENT, message=f"cannot decode: {error}")
            return response, [
                self._request(type_url, response_nonce=response.nonce, error_detail=detail)
            ]
        held = self.held.setdefault(type_url, {})
        versions = self._versions.setdefault(type_url, {})
        for entry, message in decoded:
            held[entry.name] = message
            versions[entry.name] = entry.version
        for name in response.removed_resources:
            held.pop(name, None)
            versions.pop(name, None)
        out = []
        follow = _FOLLOWS.get(type_url)
        if follow is not None:
            wanted, asked = _followed(type_url, held), self._names.get(follow, set())
            if wanted != asked:
                self._names[follow] = wanted
                out.append(
                    self._request(
                        follow,
                        resource_names_subscribe=sorted(wanted - asked),
                        resource_names_unsubscribe=sorted(asked - wanted),
                    )
                )
        out.append(self._request(type_url, response_nonce=response.nonce))
        return response, out
