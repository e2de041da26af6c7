"""Per-proxy sync status: what each stream was sent, what it acknowledged, where it stands.

The session keeps one small mutable `TypeRecord` per type of each stream and
updates it in O(1) when a response is written and when the client answers one; nothing in
it grows with the number of pushes. Reading status (`stream_status`) combines those
records with the machine's own per-type state and the cache's current view into immutable
[`StreamStatus`][xdscore.server.StreamStatus] values, in the words ``istioctl proxy-status`` uses:
SYNCED (the client acknowledged what the cache holds for it now), STALE (a response awaits its
answer, or the cache moved on and nothing newer was sent yet), NACKED, NOT SENT, and IGNORED (the
server has nothing of that type for this client). Reading never awaits and changes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from ..protocol._delta_server import DeltaServer, DeltaTypeState
from ..protocol._sotw_server import SotwServer, SotwTypeState
from ..protocol._state import Phase
from ..protocol._subscription import EVERYTHING, Subscription
from ..protocol._view import ResourceView, Selection
from ..wire._records import Locality
from ..wire._resource import Resource
from ._authorization import PeerIdentity
from ._callbacks import StreamInfo

__all__ = [
    "NackRecord",
    "ResourceStatus",
    "StreamStatus",
    "SyncState",
    "TypeRecord",
    "TypeStatus",
    "holds_current",
    "resource_statuses",
    "stream_status",
]


class SyncState(enum.Enum):
    """Where one type of one proxy stands, in ``istioctl proxy-status`` words."""

    SYNCED = "SYNCED"
    STALE = "STALE"
    NACKED = "NACKED"
    NOT_SENT = "NOT SENT"
    IGNORED = "IGNORED"


@attrs.frozen(kw_only=True)
class NackRecord:
    """The last NACK of one type: what was refused, and the client's reason."""

    version: str
    nonce: str
    code: int
    message: str
    at: float
    """Wall-clock time (``time.time()``)."""


@attrs.define(kw_only=True, slots=True)
class TypeRecord:
    """What the driver saw of one type; updated in place, O(1) per response or answer."""

    sent_version: str = ""
    sent_nonce: str = ""
    sent_at: float = 0.0
    acked_version: str = ""
    acked_at: float = 0.0
    nack: NackRecord | None = None


@attrs.frozen(kw_only=True)
class ResourceStatus:
    """One resource of one type as the server believes a client holds it."""

    name: str
    version: str
    """The version the client holds, or is being sent, or is asked to take."""
    acked: bool
    """The client acknowledged this version."""
    nacked: bool
    """The client refused this version; its last NACK's message says why."""
    current: bool
    """The version is the one the cache holds for the client now."""
    resource: Resource | None
    """The resource the cache holds for the client now (what it is meant to have), or the
    one the client holds when the cache no longer has it."""


@attrs.frozen(kw_only=True)
class TypeStatus:
    """One type of one stream."""

    type_url: str
    subscription: Subscription
    sync: SyncState
    cache_version: str
    """The version of what the cache holds for this client now ("" if nothing)."""
    sent_version: str
    sent_nonce: str
    sent_at: float
    acked_version: str
    acked_at: float
    nack: NackRecord | None
    acks: int
    nacks: int


@attrs.frozen(kw_only=True)
class StreamStatus:
    """One stream: who the client says it is, how it connects, and each type's state."""

    id: int
    node_id: str
    cluster: str
    locality: Locality | None
    user_agent_name: str
    user_agent_version: str
    client_features: tuple[str, ...]
    peer: str
    identity: PeerIdentity | None
    """The client certificate's identity, when TLS verified one."""
    protocol: str
    """``"sotw"`` or ``"delta"``."""
    aggregated: bool
    connected_since: float
    """Wall-clock time the stream opened."""
    types: tuple[TypeStatus, ...]
    scope: str | None = None
    """The scope the cache put the proxy in (a [`ScopedCache`][xdscore.ScopedCache]), if any."""

    @property
    def synced(self) -> bool:
        """Every type the server serves this client is SYNCED."""
        return all(t.sync in (SyncState.SYNCED, SyncState.IGNORED) for t in self.types)


def stream_status(
    info: StreamInfo,
    machine: SotwServer | DeltaServer,
    records: Mapping[str, TypeRecord],
    view: ResourceView | None,
    *,
    scope: str | None = None,
) -> StreamStatus:
    """The status of one stream now (reads the machine, the records and ``view``)."""
    node = info.node
    types = []
    for type_url, state in machine.type_states().items():
        record = records.get(type_url) or TypeRecord()
        if isinstance(state, SotwTypeState):
            assert isinstance(machine, SotwServer)
            sync, version = _sotw_sync(state, machine.selection(type_url, view))
        else:
            sync, version = _delta_sync(type_url, state, view)
        types.append(
            TypeStatus(
                type_url=type_url,
                subscription=state.subscription,
                sync=sync,
                cache_version=version,
                sent_version=record.sent_version,
                sent_nonce=record.sent_nonce,
                sent_at=record.sent_at,
                acked_version=record.acked_version,
                acked_at=record.acked_at,
                nack=record.nack,
                acks=state.acks,
                nacks=state.nacks,
            )
        )
    return StreamStatus(
        id=info.id,
        node_id=node.id if node is not None else "",
        cluster=node.cluster if node is not None else "",
        locality=node.locality if node is not None else None,
        user_agent_name=node.user_agent_name if node is not None else "",
        user_agent_version=node.user_agent_version if node is not None else "",
        client_features=node.client_features if node is not None else (),
        peer=info.peer,
        identity=info.identity,
        protocol=info.protocol,
        aggregated=info.aggregated,
        connected_since=info.connected_at,
        types=tuple(types),
        scope=scope,
    )


def _sotw_sync(state: SotwTypeState, selection: Selection | None) -> tuple[SyncState, str]:
    """The sync state of a type against ``selection``, what the client would be sent now."""
    if selection is None:
        return SyncState.IGNORED, ""
    if state.phase is Phase.SENT:
        return SyncState.STALE, selection.version
    if state.phase is Phase.NACKED:
        return SyncState.NACKED, selection.version
    if state.held_version == selection.version:
        return SyncState.SYNCED, selection.version
    if state.phase is Phase.REQUESTED:
        return SyncState.NOT_SENT, selection.version
    return SyncState.STALE, selection.version


def _delta_sync(
    type_url: str, state: DeltaTypeState, view: ResourceView | None
) -> tuple[SyncState, str]:
    resources = view.resources(type_url) if view is not None else None
    if view is None or resources is None:
        return SyncState.IGNORED, ""
    everything = view.select(type_url, EVERYTHING)
    version = everything.version if everything is not None else ""
    if state.phase is Phase.SENT:
        return SyncState.STALE, version
    if state.phase is Phase.REQUESTED and not state.answered:
        return SyncState.NOT_SENT, version
    nacked = state.phase is Phase.NACKED
    if state.synced is resources and not state.owed and not nacked:
        return SyncState.SYNCED, version
    # The client holds exactly what it wants of the cache, at the cache's versions (after a
    # NACK too: the cache may have gone back to what the client kept).
    held = state.held_versions
    wanted = {n: r for n, r in resources.items() if state.subscription.wants(n)}
    in_sync = held.keys() == wanted.keys() and all(held[n] == r.version for n, r in wanted.items())
    if in_sync:
        return SyncState.SYNCED, version
    return (SyncState.NACKED if nacked else SyncState.STALE), version


def holds_current(machine: SotwServer | DeltaServer, view: ResourceView | None) -> bool:
    """Whether the client holds exactly what ``view`` gives it, of every type it asked for,
    with no change of it in flight (a heartbeat in flight changes nothing): every type is
    SYNCED or IGNORED. O(types) when nothing changed since the machine last looked (SotW:
    the view's memoised selections; Delta: the mapping it reconciled with); a Delta type
    it did not reconcile with (after a NACK, a deferred removal) costs O(its resources)."""
    for type_url, state in machine.type_states().items():
        outstanding = state.outstanding
        if outstanding is not None and not outstanding.heartbeat:
            return False
        if isinstance(state, SotwTypeState):
            assert isinstance(machine, SotwServer)
            selection = machine.selection(type_url, view)
            if selection is not None and state.held_version != selection.version:
                return False
            continue
        resources = view.resources(type_url) if view is not None else None
        if resources is None:
            continue
        if state.synced is resources and not state.owed and state.phase is not Phase.NACKED:
            continue
        held = state.held_versions
        wants = state.subscription.wants
        wanted = 0
        for name, resource in resources.items():
            if wants(name):
                wanted += 1
                if held.get(name) != resource.version:
                    return False
        # (A name still owed has nothing to send: the round that checks sent what it could,
        # and a wanted name that does not exist, not held, owes the client nothing.)
        if wanted != len(held):
            return False
    return True


def resource_statuses(
    type_url: str,
    machine: SotwServer | DeltaServer,
    view: ResourceView | None,
) -> list[ResourceStatus]:
    """Each resource of ``type_url`` the client holds, is being sent, or wants, by name."""
    state = machine.type_state(type_url)
    if state is None:
        return []
    if isinstance(state, SotwTypeState):
        assert isinstance(machine, SotwServer)
        return _sotw_resources(state, machine.selection(type_url, view))
    return _delta_resources(type_url, state, view)


def _sotw_resources(state: SotwTypeState, selection: Selection | None) -> list[ResourceStatus]:
    # A SotW client knows a resource by the version_info of the response that carried it,
    # as Envoy's own dumps show it; the resource reported is the one the cache holds now.
    current = selection.resources if selection is not None else {}
    held = state.held.resources if state.held is not None else {}
    rejected = state.phase is Phase.NACKED and state.rejected_version is not None
    out = []
    for name in sorted(set(current) | set(held)):
        mine = held.get(name)
        now = current.get(name)
        if mine is not None:
            version = state.held_version or (state.held.version if state.held else "")
        else:
            version = selection.version if selection is not None else ""
        out.append(
            ResourceStatus(
                name=name,
                version=version,
                acked=mine is not None,
                nacked=rejected
                and now is not None
                and (mine is None or mine.version != now.version),
                current=mine is not None and now is not None and mine.version == now.version,
                resource=now if now is not None else mine,
            )
        )
    return out


def _delta_resources(
    type_url: str, state: DeltaTypeState, view: ResourceView | None
) -> list[ResourceStatus]:
    resources = (view.resources(type_url) if view is not None else None) or {}
    wanted = {n: r for n, r in resources.items() if state.subscription.wants(n)}
    out = []
    for name in sorted(set(wanted) | set(state.held_versions)):
        held_version = state.held_versions.get(name)
        now = wanted.get(name)
        known = state.held.get(name)
        version = held_version or (now.version if now is not None else "")
        out.append(
            ResourceStatus(
                name=name,
                version=version,
                acked=held_version is not None and held_version != "",
                nacked=now is not None and state.rejected_versions.get(name) == now.version,
                current=now is not None and version == now.version,
                resource=now if now is not None else known,
            )
        )
    return out
