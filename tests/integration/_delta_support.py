"""Helpers for the real-Envoy Delta (incremental) xDS tests: a recording callbacks object
that understands Delta responses, resource builders and admin readers (traffic and the
callback log itself are in ``_envoy_support``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from xdscore import Resource, make_resource
from xdscore import builders as b
from xdscore.protocol import DeltaDiscoveryRequest, DeltaResponse
from xdscore.testing import Envoy, EnvoyError

from ..factories import short
from ._envoy_support import ALL_TYPES, CallbackLog

__all__ = [
    "DeltaRecorder",
    "cluster_hosts",
    "dynamic_clusters",
    "resources",
    "stats_reached",
]


class DeltaRecorder(CallbackLog):
    """Records every callback of one server in order (use one recorder per server: stream
    ids and nonces restart with each :class:`XdsServer`)."""

    def requests(self, type_url: str | None = None, since: int = 0) -> list[DeltaDiscoveryRequest]:
        return self.select("request", type_url, since=since)

    def responses(
        self, type_url: str | None = None, since: int = 0, until: int | None = None
    ) -> list[DeltaResponse]:
        return self.select("response", type_url, since=since, until=until)

    def is_acked(self, response: DeltaResponse) -> bool:
        """True if the client ACKed ``response`` (same stream, same nonce)."""
        streams = [e.stream for e in self.entries if e.kind == "response" and e.item is response]
        return any(
            entry.kind == "ack"
            and entry.item.nonce == response.nonce
            and entry.item.type_url == response.type_url
            and any(entry.stream is stream for stream in streams)
            for entry in self.entries
        )

    def latest_acked(self, type_url: str, since: int = 0) -> bool:
        """True if at least one response of ``type_url`` was sent after ``since`` and the
        latest of them is ACKed."""
        sent = self.responses(type_url, since)
        return bool(sent) and self.is_acked(sent[-1])

    def all_acked(self, types: Iterable[str] = ALL_TYPES, since: int = 0) -> bool:
        return all(self.latest_acked(type_url, since) for type_url in types)

    def dump(self, since: int = 0) -> str:
        """The log as text, for assertion messages."""
        lines = []
        for entry in self.entries[since:]:
            item = entry.item
            if entry.kind == "request":
                detail = (
                    f"{short(item.type_url)} n={item.response_nonce!r} "
                    f"sub={list(item.resource_names_subscribe)} "
                    f"unsub={list(item.resource_names_unsubscribe)} "
                    f"irv={sorted(item.initial_resource_versions)}"
                    + (" ERROR" if item.error_detail else "")
                )
            elif entry.kind == "response":
                detail = (
                    f"{short(item.type_url)} n={item.nonce!r} "
                    f"resources={[r.name for r in item.resources]} removed={list(item.removed)}"
                )
            elif entry.kind in ("ack", "nack"):
                detail = f"{short(item.type_url)} n={item.nonce!r}"
            elif entry.kind == "event":
                continue
            else:
                detail = repr(item) if item else ""
            lines.append(f"  stream {entry.stream.id} {entry.kind:8} {detail}")
        return "\n".join(lines)


# -- resources ------------------------------------------------------------------------------


def resources(
    listener_port: int,
    routed: str,
    endpoints: Mapping[str, Iterable[tuple[str, int]]],
) -> list[Resource]:
    """One EDS cluster and its ClusterLoadAssignment per ``endpoints`` entry, and a listener
    on ``listener_port`` whose route ``route_0`` sends ``/`` to ``routed``."""
    out: list[Resource] = []
    for name, hosts in endpoints.items():
        out.append(make_resource(b.eds_cluster(name)))
        out.append(make_resource(b.load_assignment(name, list(hosts))))
    out.append(make_resource(b.http_listener("listener_0", listener_port, "route_0")))
    out.append(make_resource(b.route_configuration("route_0", [("/", routed)])))
    return out


# -- admin ----------------------------------------------------------------------------------


async def cluster_hosts(envoy: Envoy) -> dict[str, set[tuple[str, int]]]:
    """``/clusters?format=json``: every cluster's hosts as (address, port)."""
    data = json.loads(await envoy.admin("/clusters?format=json"))
    hosts: dict[str, set[tuple[str, int]]] = {}
    for status in data.get("cluster_statuses", []):
        found = hosts.setdefault(status["name"], set())
        for host in status.get("host_statuses", []):
            address = host["address"]["socket_address"]
            found.add((address["address"], int(address["port_value"])))
    return hosts


async def stats_reached(
    envoy: Envoy, recorder: DeltaRecorder, wanted: Mapping[str, int], *, since: float
) -> float:
    """Seconds from ``since`` (monotonic) until Envoy's stats hold ``wanted``; fails with the
    server's log after 10 s."""

    async def reached() -> bool:
        stats = await envoy.stats()
        return all(stats.get(name) == value for name, value in wanted.items())

    try:
        await envoy.wait_for(reached, timeout=10, interval=0.02)
    except EnvoyError as exc:
        raise AssertionError(f"{exc}\n{recorder.dump()}") from None
    return time.monotonic() - since


def dynamic_clusters(dump: Mapping[str, Any]) -> set[str]:
    """The names of the dynamic active clusters in a ``/config_dump``."""
    for config in dump["configs"]:
        if config["@type"].endswith(".ClustersConfigDump"):
            return {item["cluster"]["name"] for item in config.get("dynamic_active_clusters", [])}
    raise AssertionError("no ClustersConfigDump in config_dump")
