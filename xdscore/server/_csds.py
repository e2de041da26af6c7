"""The Client Status Discovery Service: each client's resources, as the server sees them.

For every connected client a query selects, each resource it holds, is being sent, wants
or was told does not exist becomes one ``GenericXdsConfig``: its version, the type's sync
state as ``config_status`` (SYNCED, STALE, NOT_SENT, or ERROR for a NACK) and the
resource's own ``client_status`` (ACKED, NACKED with the client's message, REQUESTED,
DOES_NOT_EXIST). Streams of the same node (per-type services) are reported together.

Who is told what: an operator (the server's ``operators`` check allows the client's
certificate) is told about every client. Any other client with a verified certificate is
told only about streams opened with the same certificate identity and, when the server has
an authorizer, only about nodes that identity may claim: its own node, never another
tenant's. A client without a certificate is told about every client only where nothing
binds nodes to certificates (no authorizer), since there any client may claim any node;
with an authorizer it is told about none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..protocol._view import ResourceView
from ..wire._csds import (
    ClientReport,
    ResourceReport,
    StatusQuery,
    decode_status_query,
    encode_status_response,
)
from ..wire._messages import redacted
from ._authorization import PeerIdentity
from ._callbacks import StreamInfo
from ._codecs import checked
from ._status import ResourceStatus, SyncState, TypeStatus, resource_statuses, stream_status
from ._stream import ByteStream

if TYPE_CHECKING:
    from ._server import ActiveStream, XdsServer

__all__ = ["ClientStatus"]

_CONFIG_STATUS = {
    SyncState.SYNCED: "SYNCED",
    SyncState.STALE: "STALE",
    SyncState.NACKED: "ERROR",
    SyncState.NOT_SENT: "NOT_SENT",
}


class ClientStatus:
    """Answers CSDS requests about ``server``'s clients."""

    def __init__(self, server: XdsServer) -> None:
        self._server = server

    def reports(
        self, query: StatusQuery, visible: Callable[[ActiveStream], bool] | None = None
    ) -> list[ClientReport]:
        """One report per client the query selects (of the streams ``visible`` allows:
        all, when ``None``), in the order the clients connected."""
        by_node: dict[bytes, tuple[ClientReport, list[ResourceReport]]] = {}
        server = self._server
        for stream in server.streams():
            node = stream.info.node
            if node is None or not query.selects(node.id):
                continue
            if visible is not None and not visible(stream):
                continue
            view = server.cache.view(node)
            status = stream_status(stream.info, stream.machine, stream.records, view)
            entry = by_node.setdefault(node.raw, (ClientReport(node=node), []))
            for type_status in status.types:
                if type_status.sync is SyncState.IGNORED:
                    continue
                resources = resource_statuses(type_status.type_url, stream.machine, view)
                entry[1].extend(_report(type_status, resource) for resource in resources)
                reported = {resource.name for resource in resources}
                entry[1].extend(_missing(type_status, reported, view))
        return [
            ClientReport(node=report.node, resources=tuple(resources))
            for report, resources in by_node.values()
        ]

    def visible_to(self, identity: PeerIdentity | None) -> Callable[[ActiveStream], bool] | None:
        """Which streams a CSDS client with ``identity`` (its verified certificate's, or
        ``None``) is told about: ``None`` for every stream (see the module docstring)."""
        server = self._server
        if server.operators is not None and server.operators(identity):
            return None
        authorize = server.authorize
        if identity is None:
            return None if authorize is None else _none
        asker = StreamInfo(id=0, protocol="sotw", type_url=None, identity=identity)

        def own(stream: ActiveStream) -> bool:
            node = stream.info.node
            if stream.info.identity != identity or node is None:
                return False
            return authorize is None or authorize(asker, node) is None

        return own

    def answer(self, data: bytes, identity: PeerIdentity | None = None) -> bytes:
        """The encoded ``ClientStatusResponse`` to an encoded ``ClientStatusRequest`` from
        a client with ``identity``.

        Raises :class:`~xdscore.RemoteProtocolError` (INVALID_ARGUMENT) for a request that
        does not parse or asks with a matcher the server does not support, and
        RESOURCE_EXHAUSTED for one over the server's request size limit.
        """
        limit = self._server.limits.max_request_bytes
        query = decode_status_query(checked(data, limit, "request"))
        return encode_status_response(
            self.reports(query, self.visible_to(identity)),
            contents=not query.exclude_resource_contents,
        )

    async def run_stream(self, stream: ByteStream, identity: PeerIdentity | None = None) -> None:
        """Answer each request of a ``StreamClientStatus`` stream from a client with
        ``identity`` until the client closes it."""
        while True:
            data = await stream.receive()
            if data is None:
                return
            await stream.send(self.answer(data, identity))


def _none(_: ActiveStream) -> bool:
    return False


def _report(status: TypeStatus, resource: ResourceStatus) -> ResourceReport:
    if resource.nacked:
        config, client = "ERROR", "NACKED"
    elif resource.acked:
        config, client = ("SYNCED" if resource.current else "STALE"), "ACKED"
    else:
        config = "NOT_SENT" if status.sync is SyncState.NOT_SENT else "STALE"
        client = "REQUESTED"
    nack = status.nack if resource.nacked else None
    return ResourceReport(
        type_url=status.type_url,
        name=resource.name,
        version=resource.version,
        config_status=config,
        client_status=client,
        resource=redacted(resource.resource) if resource.resource is not None else None,
        last_updated=status.acked_at if resource.acked else status.sent_at,
        error=nack.message if nack is not None else "",
        error_version=nack.version if nack is not None else "",
        error_at=nack.at if nack is not None else 0.0,
    )


def _missing(
    status: TypeStatus, reported: set[str], view: ResourceView | None
) -> list[ResourceReport]:
    """Names the client asked for by name that the server does not have (a glob collection
    is no resource: its members are reported as what the client wants)."""
    resources = view.resources(status.type_url) if view is not None else None
    if resources is None:
        return []
    return [
        ResourceReport(
            type_url=status.type_url,
            name=name,
            version="",
            config_status=_CONFIG_STATUS[status.sync],
            client_status="DOES_NOT_EXIST",
            last_updated=status.sent_at,
        )
        for name in sorted(status.subscription.names - status.subscription.collections)
        if name not in resources and name not in reported
    ]
