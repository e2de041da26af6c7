"""The server side of one State-of-the-World xDS stream, as a pure state machine.

Theory of operation
-------------------
One :class:`SotwServer` exists per gRPC stream (ADS, or a per-type service when
``type_url`` is fixed). It never does I/O and never awaits: the driver hands it each decoded
request with :meth:`~SotwServer.receive`, which returns the events the request
caused, and asks it with :meth:`~SotwServer.poll` what to send given the current
:class:`~xdscore.ResourceView`. Each type URL is an independent sub-stream with its own
subscription, nonce pairing and versions.

Per type the machine keeps an immutable :class:`SotwTypeState`:

* ``subscription``: replaced by each non-stale request (:class:`~xdscore.Subscription`).
* ``held``: the version the client is known to hold: the one it ACKed, or, for LDS, CDS and
  SRDS watched with the legacy wildcard, the ``version_info`` it presents on the first
  request of the stream (its last accepted version: with content-hash versions a
  reconnecting client that already holds the current full state is sent nothing).
  Otherwise a new stream is always answered: a version says what was sent, not what the
  client kept of it (a client drops resources it stops watching), so it is only trusted
  where the client cannot have narrowed what it watches (inv. 8). ``None`` after a NACK,
  since clients may apply part of a rejected response.
* ``rejected``: the version last NACKed. It is never sent again; the next different one is.
* ``outstanding``: the response awaiting ACK/NACK. While one is outstanding nothing more of
  that type is sent, so a slow client coalesces to the latest state instead of queueing.
* ``owed``: a response is due even if the content is unchanged: the client asked again with
  the latest nonce after acknowledging it, or (on ADS) a cluster response was just sent and
  clusters warm until they get their endpoints.
* ``holding``: the content the client acknowledged, which make-before-break ordering reads.

Rules, in the order :meth:`receive` applies them:

1. The first request must carry a node; later ones may omit it; a different node is an error.
2. ADS requests must name their type; per-type services accept only their own type.
3. A non-empty ``response_nonce`` that is not the latest sent for the type is stale: it is
   reported and is neither ACK nor NACK. If a response of the type was sent, the request is
   otherwise ignored too (a newer request will follow the response the client has not seen
   yet); if none was, nothing is in flight and its ``resource_names`` still count.
4. A request echoing the outstanding nonce is a NACK if it has ``error_detail``, else an ACK.
5. The request's ``resource_names`` replace the subscription (wildcard rules in
   :mod:`xdscore._subscription`).

:meth:`poll` then sends, per subscribed type in make-before-break order, the current
selection when nothing is outstanding, it differs from the rejected version, and it differs
from what the client holds or a response is owed. LDS, CDS and SRDS selections are full
state: all their resources, every time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import attrs

from ..wire._records import DiscoveryRequest, ErrorDetail
from ..wire._resource import Resource
from ..wire._typeurls import CLUSTER, ENDPOINT, TypeInfo, type_info
from ._events import (
    Event,
    NodeIdentified,
    ResponseAcked,
    ResponseNacked,
    StaleNonceSeen,
    SubscriptionChanged,
)
from ._identity import check_node, resolve_type
from ._limits import StreamLimits, check_names, check_subscribed, check_type_count
from ._machine import ServerMachine
from ._ordering import blocked, referenced
from ._subscription import Subscription
from ._view import ResourceView, Selection

__all__ = ["SotwResponse", "SotwServer", "SotwTypeState"]

_NOTHING: Mapping[str, Resource] = MappingProxyType({})


@attrs.frozen(kw_only=True)
class SotwResponse:
    """A response to send: ``selection`` framed with this stream's version and nonce."""

    type_url: str
    version_info: str
    nonce: str
    selection: Selection


@attrs.frozen(kw_only=True)
class SotwTypeState:
    """What one stream knows about one type (see the module docstring)."""

    subscription: Subscription
    requested: tuple[str, ...] = ()
    """The ``resource_names`` of the last request, to skip re-reading an unchanged list."""
    held: str | None = None
    rejected: str | None = None
    last_error: ErrorDetail | None = None
    latest_nonce: str = ""
    outstanding: SotwResponse | None = None
    owed: bool = False
    holding: Selection | None = None
    """The content the client acknowledged (or presented on reconnect), for ordering."""
    acks: int = 0
    nacks: int = 0


class SotwServer(ServerMachine[SotwTypeState, DiscoveryRequest, SotwResponse]):
    """The server side of one SotW stream. ``type_url`` fixes the type on per-type services."""

    def __init__(
        self,
        *,
        nonce_source: Callable[[], str],
        type_url: str | None = None,
        limits: StreamLimits | None = None,
        ordered: bool = True,
    ) -> None:
        super().__init__(
            nonce_source=nonce_source, type_url=type_url, limits=limits, ordered=ordered
        )
        self._endpoints_owed = False

    def holds(self, type_url: str) -> Mapping[str, Resource]:
        """What the client acknowledged of ``type_url`` and no response in flight takes away."""
        status = self._types.get(type_url)
        if status is None or status.holding is None:
            return _NOTHING
        held = status.holding.resources
        outstanding = status.outstanding
        if outstanding is None or not type_info(type_url).sotw_full_state:
            return held
        coming = outstanding.selection.resources
        return {name: resource for name, resource in held.items() if name in coming}

    def may_hold(self, type_url: str) -> list[Resource]:
        """Every version of ``type_url`` resources the client acknowledged or is being sent."""
        status = self._types.get(type_url)
        if status is None:
            return []
        held = list(status.holding.resources.values()) if status.holding is not None else []
        if status.outstanding is not None:
            held.extend(status.outstanding.selection.resources.values())
        return held

    def _receive(self, request: DiscoveryRequest) -> list[Event]:
        events: list[Event] = []
        first = self.node is None
        self.node = check_node(self.node, request.node)
        if first:
            events.append(NodeIdentified(node=self.node))
        info = resolve_type(self._fixed_type, request.type_url, delta=False)
        check_names(request.resource_names, self._limits, "resource_names")
        type_url = info.type_url
        status = self._types.get(type_url)
        if status is None:
            check_type_count(len(self._types), self._limits)
            subscription = Subscription.sotw(
                None, request.resource_names, wildcard_capable=info.wildcard_capable
            )
            status = SotwTypeState(
                subscription=subscription,
                requested=request.resource_names,
                held=(request.version_info or None) if _resumable(info, subscription) else None,
            )
            check_subscribed(len(status.subscription.names), self._limits)
            self._types[type_url] = status
            events.append(
                SubscriptionChanged(
                    type_url=type_url, previous=None, subscription=status.subscription
                )
            )
            return events

        nonce = request.response_nonce
        if nonce and nonce != status.latest_nonce:
            events.append(
                StaleNonceSeen(type_url=type_url, nonce=nonce, latest=status.latest_nonce)
            )
            if status.latest_nonce:
                return events
            # Nothing of this type was sent on the stream, so no response is in flight that
            # a later request will follow: the nonce is not ours, but the names still count.

        outstanding = status.outstanding
        if nonce and outstanding is not None and nonce == outstanding.nonce:
            if request.error_detail is not None:
                status = attrs.evolve(
                    status,
                    held=None,
                    rejected=outstanding.version_info,
                    last_error=request.error_detail,
                    outstanding=None,
                    nacks=status.nacks + 1,
                )
                events.append(
                    ResponseNacked(
                        type_url=type_url,
                        rejected=outstanding.version_info,
                        version_info=request.version_info,
                        nonce=nonce,
                        error=request.error_detail,
                    )
                )
            else:
                status = attrs.evolve(
                    status,
                    held=outstanding.version_info,
                    holding=outstanding.selection,
                    rejected=None,
                    outstanding=None,
                    acks=status.acks + 1,
                )
                events.append(
                    ResponseAcked(
                        type_url=type_url, version_info=outstanding.version_info, nonce=nonce
                    )
                )
        elif outstanding is None and status.latest_nonce:
            # Every response was answered and the client asks again: it wants an answer.
            status = attrs.evolve(status, owed=True)

        if request.resource_names != status.requested:
            previous = status.subscription
            subscription = Subscription.sotw(
                previous, request.resource_names, wildcard_capable=info.wildcard_capable
            )
            status = attrs.evolve(status, requested=request.resource_names)
            if subscription != previous:
                check_subscribed(len(subscription.names), self._limits)
                status = attrs.evolve(status, subscription=subscription)
                if not status.latest_nonce and not _resumable(info, subscription):
                    status = attrs.evolve(status, held=None)
                events.append(
                    SubscriptionChanged(
                        type_url=type_url, previous=previous, subscription=subscription
                    )
                )
        self._types[type_url] = status
        return events

    def _respond(self, type_url: str, view: ResourceView) -> SotwResponse | None:
        status = self._types[type_url]
        if status.outstanding is not None:
            return None
        selection = view.select(type_url, status.subscription)
        if selection is None:
            return None
        canonical = selection.subscription
        if canonical is not None and canonical is not status.subscription:
            # Share one subscription object with every stream that asks the same (the view's
            # memo key), so later look-ups compare by identity instead of by content.
            status = attrs.evolve(status, subscription=canonical)
            self._types[type_url] = status
        if status.holding is None and status.held == selection.version:
            status = attrs.evolve(status, holding=selection)
            self._types[type_url] = status
        owed = status.owed or (type_url == ENDPOINT and self._endpoints_owed)
        if not owed and selection.version == status.held:
            return None
        if self._ordered:
            ordered = self._make_before_break(type_url, selection, status.holding, view)
            if ordered is not selection and not _news(type_url, ordered, status.holding):
                return None  # everything new must wait for the client to catch up
            selection = ordered
        if selection.version == status.rejected:
            return None
        if not owed and selection.version == status.held:
            return None
        response = SotwResponse(
            type_url=type_url,
            version_info=selection.version,
            nonce=self._nonce_source(),
            selection=selection,
        )
        self._types[type_url] = attrs.evolve(
            status, outstanding=response, latest_nonce=response.nonce, owed=False
        )
        if self.aggregated:
            # Clusters warm until their endpoints arrive, even unchanged ones: after a cluster
            # response, the next endpoints request is answered whatever the client holds.
            if type_url == CLUSTER:
                self._endpoints_owed = True
            elif type_url == ENDPOINT:
                self._endpoints_owed = False
        return response

    def _make_before_break(
        self, type_url: str, desired: Selection, holding: Selection | None, view: ResourceView
    ) -> Selection:
        """``desired`` less what must wait, plus what must stay (see :mod:`._ordering`)."""
        held = holding.resources if holding is not None else _NOTHING
        chosen: dict[str, Resource] | None = None
        if desired.has_lower_references:
            for name, resource in desired.resources.items():
                old = held.get(name)
                if (old is None or old.version != resource.version) and blocked(
                    resource, self, view
                ):
                    chosen = chosen if chosen is not None else dict(desired.resources)
                    if old is not None:
                        chosen[name] = old
                    else:
                        del chosen[name]
        if type_info(type_url).sotw_full_state and held:
            gone = [name for name in held if name not in desired.resources]
            if gone:
                kept = referenced(self, self._types)
                for name in gone:
                    if (type_url, name) in kept:
                        chosen = chosen if chosen is not None else dict(desired.resources)
                        chosen[name] = held[name]
        return desired if chosen is None else Selection.of(type_url, chosen)


def _news(type_url: str, selection: Selection, holding: Selection | None) -> bool:
    """Whether sending ``selection`` would change anything for a client holding ``holding``."""
    held = holding.resources if holding is not None else _NOTHING
    for name, resource in selection.resources.items():
        old = held.get(name)
        if old is None or old.version != resource.version:
            return True
    return type_info(type_url).sotw_full_state and len(held) != len(selection.resources)


def _resumable(info: TypeInfo, subscription: Subscription) -> bool:
    """Whether a version presented on a new stream says what the client holds.

    Only for full-state types watched with the legacy wildcard (how Envoy watches listeners
    and clusters): such a client never narrows what it watches, so an accepted version is
    the whole set and it kept all of it. A client that names resources (``*`` included)
    may have dropped some since it accepted the version, which still names them.
    """
    return info.sotw_full_state and subscription.legacy
