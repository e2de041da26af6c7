"""What a server serves, found the way Envoy finds it, and waiting for a world to be served.

`discover` opens a SotW ADS stream, watches listeners and clusters with the legacy
wildcard and follows what they refer to (endpoints of EDS clusters, route configurations
of listeners), acknowledging everything until the server is quiet. The
`Inventory` it returns is what the cases take names from, so that they work against
any server, passive ones included. `wait_until_served` keeps such a stream open
until what it holds matches a `World`.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import attrs

from ...protocol._features import RESOURCE_IN_SOTW, SUPPORTS_TTL
from ...protocol._sotw_client import SotwClient
from ...wire._messages import decode_resource
from ...wire._node import make_node
from ...wire._records import Node
from ...wire._resource import Resource
from ...wire._typeurls import CLUSTER, ENDPOINT, LISTENER, ROUTE, type_info
from ._channel import ADS_SOTW, Channel
from ._session import Rejector, SotwSession
from ._trace import Trace
from ._verdicts import CaseFailed
from ._world import LISTENER_NAME, ROUTE_NAME, World

__all__ = ["Inventory", "discover", "wait_until_served"]

USER_AGENT = "xdscore-conformance"
_probes = itertools.count(1)


@attrs.frozen
class Inventory:
    """The resources a discovery stream was sent, by type and name."""

    resources: Mapping[str, Mapping[str, Resource]]

    def names(self, type_url: str) -> list[str]:
        return sorted(self.resources.get(type_url, {}))

    @property
    def clusters(self) -> list[str]:
        return self.names(CLUSTER)

    @property
    def endpoints(self) -> list[str]:
        """Names of the endpoint assignments served (those of EDS clusters)."""
        return self.names(ENDPOINT)

    @property
    def listeners(self) -> list[str]:
        return self.names(LISTENER)

    @property
    def routes(self) -> list[str]:
        return self.names(ROUTE)

    def describe(self) -> str:
        return (
            f"{len(self.listeners)} listener(s), {len(self.routes)} route configuration(s), "
            f"{len(self.clusters)} cluster(s), {len(self.endpoints)} endpoint assignment(s)"
        )


def probe_node(node_id: str | None = None, cluster: str = "") -> Node:
    """The node of the suite's own streams: one that reads TTLs and wrapped SotW entries."""
    return make_node(
        id=node_id or f"xdscore-conformance-probe-{next(_probes)}",
        cluster=cluster,
        user_agent_name=USER_AGENT,
        client_features=(SUPPORTS_TTL, RESOURCE_IN_SOTW),
    )


@contextlib.asynccontextmanager
async def _discovery(
    channel: Channel,
    node: Node,
    *,
    quiet: float,
    response_timeout: float,
    clusters: list[str] | None = None,
    listeners: list[str] | None = None,
) -> AsyncIterator[SotwSession]:
    """A stream watching ``clusters`` and ``listeners`` (``None``: the legacy wildcard) and,
    once settled with ``follow``, what they refer to."""
    trace = Trace()
    rejector = Rejector()
    async with channel.stream(ADS_SOTW) as raw, anyio.create_task_group() as group:
        session = SotwSession(
            "discovery",
            raw,
            trace,
            SotwClient(node=node, validate=rejector),
            rejector,
            response_timeout=response_timeout,
            quiet=quiet,
            path=ADS_SOTW,
        )
        group.start_soon(session.read_forever)
        await session.watch(CLUSTER, clusters)
        await session.watch(LISTENER, listeners)
        try:
            yield session
        finally:
            group.cancel_scope.cancel()


def _holdings(session: SotwSession) -> Inventory:
    """What the stream was sent: resources of another type than their response's are left
    out, and a response the client rejected still counts (a malformed response is the
    business of the case that checks for it, not of every case)."""
    held: dict[str, dict[str, Resource]] = {t: {} for t in (CLUSTER, ENDPOINT, LISTENER, ROUTE)}
    for response in session.received:
        kind = response.type_url
        if kind not in held:
            continue
        fresh = {r.name: r for r in response.resources if r.type_url == kind and not r.name_only}
        if type_info(kind).sotw_full_state:
            held[kind] = fresh
        else:
            held[kind].update(fresh)
    return Inventory(held)


async def discover(
    channel: Channel, node: Node, *, quiet: float, response_timeout: float
) -> Inventory:
    """What the server sends a client like Envoy (see the module docstring)."""
    async with _discovery(channel, node, quiet=quiet, response_timeout=response_timeout) as session:
        await session.settle(follow=True, first=response_timeout)
        return _holdings(session)


def mismatch(inventory: Inventory, world: World, *, ttl: bool) -> str | None:
    """How what was discovered differs from ``world`` (``None``: it matches). With ``ttl``
    false the listener's TTL is not compared."""
    if inventory.clusters != world.cluster_names:
        return f"clusters {inventory.clusters}, expected {world.cluster_names}"
    for name, cluster in inventory.resources.get(CLUSTER, {}).items():
        timeout = decode_resource(CLUSTER, cluster.body).connect_timeout.ToNanoseconds() / 1e9
        if abs(timeout - world.connect_timeout) > 1e-6:
            return f"{name}'s connect timeout is {timeout:g} s, expected {world.connect_timeout:g}"
    assignments = inventory.resources.get(ENDPOINT, {})
    for name in world.cluster_names:
        resource = assignments.get(name)
        if resource is None:
            return f"no endpoints for {name}"
        ports = _ports(decode_resource(ENDPOINT, resource.body))
        if ports != {world.port}:
            return f"{name}'s endpoints on ports {sorted(ports)}, expected {world.port}"
    route = inventory.resources.get(ROUTE, {}).get(ROUTE_NAME)
    if route is None:
        return f"no {ROUTE_NAME}"
    target = _first_cluster(decode_resource(ROUTE, route.body))
    if target != world.route_cluster:
        return f"{ROUTE_NAME} routes to {target!r}, expected {world.route_cluster!r}"
    listener = inventory.resources.get(LISTENER, {}).get(LISTENER_NAME)
    if listener is None:
        return f"no {LISTENER_NAME}"
    if ttl and listener.ttl != world.ttl:
        return f"{LISTENER_NAME} has TTL {listener.ttl}, expected {world.ttl}"
    return None


def _ports(assignment: Any) -> set[int]:
    return {
        lb.endpoint.address.socket_address.port_value
        for group in assignment.endpoints
        for lb in group.lb_endpoints
    }


def _first_cluster(route_configuration: Any) -> str:
    for host in route_configuration.virtual_hosts:
        for route in host.routes:
            return str(route.route.cluster)
    return ""


TTL_GRACE = 2.0
"""Seconds to wait for a listener's TTL to show once everything else matches: a server
that does not send TTLs never shows it."""


async def wait_until_served(
    channel: Channel, world: World, *, timeout: float, quiet: float, node_id: str | None = None
) -> None:
    """Return once a client like Envoy is served ``world``; raise `CaseFailed`
    saying what differs after ``timeout`` seconds. The stream asks for the world's
    clusters and listeners by name, so that it depends on no wildcard."""
    deadline = time.monotonic() + timeout
    matched_at: float | None = None
    last = "nothing was received"
    async with _discovery(
        channel,
        probe_node(node_id),
        quiet=quiet,
        response_timeout=timeout,
        clusters=world.cluster_names,
        listeners=world.listener_names,
    ) as session:
        while time.monotonic() < deadline:
            await session.settle(follow=True, within=min(quiet, 0.2))
            inventory = _holdings(session)
            found = mismatch(inventory, world, ttl=True)
            if found is None:
                return
            last = found
            if mismatch(inventory, world, ttl=False) is None:
                matched_at = matched_at or time.monotonic()
                if time.monotonic() - matched_at > TTL_GRACE:
                    return  # the server does not send TTLs; everything else is served
            else:
                matched_at = None
            session.check_alive("waiting for the configuration to be served")
    raise CaseFailed(f"the server did not serve the configuration within {timeout:g} s: {last}")
