"""The admin HTTP endpoint: metrics, status, config dumps and probes, as an ASGI app.

[`AdminApp`][xdscore.transport.AdminApp] is a plain ASGI application, so an embedder can mount it in
the ASGI server it already runs; [`serve_admin`][xdscore.transport.serve_admin] serves it with
uvicorn on a port of its own. Every route is a GET:

* ``/metrics``: the server's Prometheus metrics (``prometheus-client``'s exposition);
* ``/status``: JSON, every connected proxy and each type's sync state and versions, the
  revision each holds, and the revisions the cache adopted (the newest with every proxy's
  state on it);
* ``/revision?id=ID``: JSON, where one revision stands (its id, or its number; default:
  the newest): which proxies it changed, which hold it, rejected it (what, from where,
  Envoy's message) or are pending; 404 for a revision this server does not know;
* ``/config_dump?node=ID``: JSON, what the control plane would send that node now, each
  resource in the proto3 JSON mapping with its version and its source (where it came
  from, as the snapshot's provenance says; ``null`` when not said);
* ``/healthz``: 200 while the process serves HTTP; ``/readyz``: 200 once a transport
  listens and the cache has something to serve, else 503.

Bad requests get a 4xx with a one-line reason; the xDS side never notices. The path, the
query string and the headers are bounded by the app itself, so the bounds hold however the
bytes reached the ASGI server (h11's own bound applies only to a request that arrives in
pieces).
"""

from __future__ import annotations

import contextlib
import json
import socket
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import anyio
import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..server._revisions import revision_json
from ..server._server import XdsServer
from ..server._status import StreamStatus, TypeStatus
from ..wire._messages import resource_json
from ..wire._node import make_node
from ..wire._records import Node
from ..wire._typeurls import all_types, type_info

__all__ = ["MAX_HEADER_BYTES", "MAX_PATH_BYTES", "MAX_QUERY_BYTES", "AdminApp", "serve_admin"]

MAX_QUERY_BYTES = 2048
"""A longer query string is refused with 414."""
MAX_PATH_BYTES = 2048
"""A longer path is refused with 414."""
MAX_HEADER_BYTES = 16 * 1024
"""Headers longer than this in all (names and values) are refused with 431."""
_KNOWN_TYPES = frozenset(name for info in all_types() for name in (info.short_name, info.type_url))
_NAMES_SHOWN = 100
"""Subscribed names listed per type in ``/status`` (the count is always given)."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class _Reply(Exception):
    """A response other than 200, raised by a route."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class AdminApp:
    """The admin endpoint of ``server``; ``ready`` replaces the readiness test if given."""

    def __init__(self, server: XdsServer, *, ready: Callable[[], bool] | None = None) -> None:
        self.server = server
        self._ready = ready or server.ready
        self._routes: dict[str, Callable[[dict[str, list[str]]], tuple[int, str, bytes]]] = {
            "/metrics": self._metrics,
            "/status": self._status,
            "/revision": self._revision,
            "/config_dump": self._config_dump,
            "/healthz": lambda query: (200, "text/plain", b"ok\n"),
            "/readyz": self._readyz,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            status, content_type, body = self._handle(scope)
        except _Reply as reply:
            status, content_type, body = reply.status, "text/plain", (reply.message + "\n").encode()
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        head = scope.get("method") == "HEAD"
        await send({"type": "http.response.body", "body": b"" if head else body})

    def _handle(self, scope: Scope) -> tuple[int, str, bytes]:
        if scope.get("method") not in ("GET", "HEAD"):
            raise _Reply(405, "only GET is served")
        raw_path: bytes = scope.get("raw_path") or scope.get("path", "").encode()
        if len(raw_path) > MAX_PATH_BYTES:
            raise _Reply(414, f"the path is longer than {MAX_PATH_BYTES} bytes")
        raw_query: bytes = scope.get("query_string", b"")
        if len(raw_query) > MAX_QUERY_BYTES:
            raise _Reply(414, f"the query string is longer than {MAX_QUERY_BYTES} bytes")
        headers = sum(len(name) + len(value) for name, value in scope.get("headers", ()))
        if headers > MAX_HEADER_BYTES:
            raise _Reply(431, f"the headers are longer than {MAX_HEADER_BYTES} bytes in all")
        path: str = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        route = self._routes.get(path)
        if route is None:
            known = ", ".join(sorted(self._routes))
            raise _Reply(404, f"no such page; there are {known}")
        try:
            query = urllib.parse.parse_qs(raw_query.decode(), strict_parsing=bool(raw_query))
        except (UnicodeDecodeError, ValueError):
            raise _Reply(400, "the query string does not parse") from None
        return route(query)

    def _metrics(self, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        metrics = self.server.metrics
        if metrics is None:
            raise _Reply(404, "this server records no metrics")
        return 200, CONTENT_TYPE_LATEST, generate_latest(metrics.registry)

    def _readyz(self, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        if self._ready():
            return 200, "text/plain", b"ready\n"
        raise _Reply(503, "not ready: no transport listens or the cache has nothing yet")

    def _status(self, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        prefix = _one(query, "node", default="")
        server = self.server
        revisions = server.revisions
        proxies = []
        for status in server.status():
            if status.node_id.startswith(prefix):
                held = revisions.holds(status.id)
                proxies.append(_stream_json(status) | {"revision": held and held.id})
        current = revisions.current
        replica = server.replica_id
        return _json(
            {
                "proxies": proxies,
                "ready": self._ready(),
                "replica": replica,
                "revision": None
                if current is None
                else revision_json(revisions.status(current), replica=replica),
                "revisions": [
                    revision_json(revisions.status(kept), replica=replica, proxies=False)
                    for kept in revisions.revisions()
                ],
            }
        )

    def _revision(self, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        wanted = _one(query, "id", default="")
        revisions = self.server.revisions
        key: str | int | None = (
            int(wanted) if wanted.isdigit() and len(wanted) < 16 else wanted
        ) or None
        found = revisions.find(key)
        if found is None:
            what = f"revision {wanted}" if wanted else "any revision"
            raise _Reply(404, f"this server does not know {what}")
        return _json(revision_json(revisions.status(found), replica=self.server.replica_id))

    def _config_dump(self, query: dict[str, list[str]]) -> tuple[int, str, bytes]:
        node_id = _one(query, "node")
        if not node_id:
            raise _Reply(400, "give the node: /config_dump?node=ID")
        node = self._node(node_id)
        view = self.server.cache.view(node)
        if view is None:
            raise _Reply(404, f"the cache has nothing for node {node_id!r}")
        wanted = _one(query, "type", default="")
        if wanted and wanted not in _KNOWN_TYPES and wanted not in self._type_urls(node_id):
            raise _Reply(400, f"unknown type {wanted!r}; give a short name (cds, eds, ...)")
        revisions = self.server.revisions
        types = []
        for type_url in self._type_urls(node_id):
            info = type_info(type_url)
            if wanted and wanted not in (info.short_name, type_url):
                continue
            resources = view.resources(type_url)
            if resources is None:
                continue
            types.append(
                {
                    "type_url": type_url,
                    "type": info.short_name,
                    "resources": [
                        {
                            "name": name,
                            "version": resource.version,
                            "source": revisions.source_of(resource),
                            "resource": resource_json(resource),
                        }
                        for name, resource in sorted(resources.items())
                    ],
                }
            )
        scope_of = getattr(self.server.cache, "scope_of", None)
        scope = scope_of(node) if scope_of is not None else None
        return _json({"node": node_id, "scope": scope, "types": types})

    def _node(self, node_id: str) -> Node:
        """The node a connected proxy presents with ``node_id``, else one with just the id."""
        for stream in self.server.streams():
            if stream.info.node is not None and stream.info.node.id == node_id:
                return stream.info.node
        return make_node(id=node_id)

    def _type_urls(self, node_id: str) -> Iterator[str]:
        seen = [info.type_url for info in all_types()]
        for stream in self.server.streams():
            if stream.info.node is not None and stream.info.node.id == node_id:
                seen.extend(url for url in stream.machine.type_states() if url not in seen)
        return iter(seen)


def _one(query: dict[str, list[str]], key: str, *, default: str = "") -> str:
    values = query.get(key, [])
    if len(values) > 1:
        raise _Reply(400, f"give {key!r} once")
    return values[0] if values else default


def _json(document: object) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps(document, indent=1, sort_keys=True).encode()


def _type_json(status: TypeStatus) -> dict[str, Any]:
    names = sorted(status.subscription.names)
    nack = status.nack
    return {
        "type_url": status.type_url,
        "type": type_info(status.type_url).short_name,
        "sync": status.sync.value,
        "subscription": {
            "wildcard": status.subscription.wildcard,
            "names": names[:_NAMES_SHOWN],
            "count": len(names),
        },
        "cache_version": status.cache_version,
        "sent": {"version": status.sent_version, "nonce": status.sent_nonce, "at": status.sent_at},
        "acked": {"version": status.acked_version, "at": status.acked_at},
        "last_nack": None
        if nack is None
        else {
            "version": nack.version,
            "nonce": nack.nonce,
            "code": nack.code,
            "message": nack.message,
            "at": nack.at,
        },
        "acks": status.acks,
        "nacks": status.nacks,
    }


def _stream_json(status: StreamStatus) -> dict[str, Any]:
    locality = status.locality
    return {
        "stream": status.id,
        "node": status.node_id,
        "cluster": status.cluster,
        "scope": status.scope,
        "locality": None
        if locality is None
        else {"region": locality.region, "zone": locality.zone, "sub_zone": locality.sub_zone},
        "user_agent": {"name": status.user_agent_name, "version": status.user_agent_version},
        "client_features": list(status.client_features),
        "peer": status.peer,
        "identity": None
        if status.identity is None
        else {
            "uri_sans": list(status.identity.uri_sans),
            "dns_sans": list(status.identity.dns_sans),
            "subject": status.identity.subject,
        },
        "protocol": status.protocol,
        "aggregated": status.aggregated,
        "connected_since": status.connected_since,
        "synced": status.synced,
        "types": [_type_json(t) for t in status.types],
    }


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class _Uvicorn(uvicorn.Server):
    """uvicorn without its signal handlers (the embedding application owns the signals),
    telling when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serve_admin(app: AdminApp, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[int]:
    """Serve ``app`` with uvicorn on ``host:port`` (0 picks a free port) while inside.

    Yields the bound port. Leaving the block stops the server within about 0.1 s.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    config = uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False)
    server = _Uvicorn(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            await server.listening.wait()
        try:
            yield int(sock.getsockname()[1])
        finally:
            server.should_exit = True
