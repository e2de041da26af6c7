"""One misbehaviour per conformance case, for :class:`~tests.conformance._faulty.FaultyServer`.

``FAULTS`` maps every case id to the fault that case must catch. Each fault is a bug a real
control plane has had or plausibly could: a NACKed config sent again (go-control-plane
#962), a re-subscription not answered (java-control-plane #339),
``initial_resource_versions`` ignored (java-control-plane #463), an empty list read as a
wildcard (go-control-plane's default), and so on. Faults are narrow where that costs
little, so that as few other cases as possible see them.
"""

from __future__ import annotations

from typing import Any

import anyio
from envoy.config.cluster.v3 import cluster_pb2
from envoy.config.listener.v3 import listener_pb2
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf import any_pb2

from xdscore import GrpcStatus, RemoteProtocolError
from xdscore.wire import CLUSTER, ENDPOINT, LISTENER, RESOURCE_WRAPPER, ROUTE, Resource, type_info
from xdscore.wire._reader import name_field

from ._faulty import Fault, Message

IDLE_RESEND = 0.45
"""Seconds of a client's silence after which :class:`ResendWhenIdle` sends again; the tests
run the suite with a quiet period of 0.3 s."""


# -- reading messages -----------------------------------------------------------------------------


def entry_name(item: Any) -> str:
    """The name of one SotW ``resources`` entry (plain or wrapped)."""
    if item.type_url == RESOURCE_WRAPPER:
        wrapper = discovery_pb2.Resource.FromString(item.value)
        return wrapper.name or name_field(wrapper.resource.value)
    return name_field(item.value)


def names_of(response: Message) -> list[str]:
    if isinstance(response, discovery_pb2.DiscoveryResponse):
        return [entry_name(item) for item in response.resources]
    return [item.name for item in response.resources]


def copy(message: Message) -> Message:
    fresh = type(message)()
    fresh.CopyFrom(message)
    return fresh


def keep_resources(response: Message, keep: Any) -> Message:
    """``response`` with only the resources whose name ``keep`` accepts."""
    changed = copy(response)
    del changed.resources[:]
    changed.resources.extend(
        item
        for item, name in zip(response.resources, names_of(response), strict=True)
        if keep(name)
    )
    return changed


def registered(type_url: str) -> bool:
    return type_info(type_url).rank < 1000


# -- the stream -----------------------------------------------------------------------------------


class NodeOnEveryRequest(Fault):
    """Ends the stream when a request after the first has no node."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.first = True

    async def request(self, request: Message) -> list[Message]:
        if not self.first and not request.HasField("node"):
            raise RemoteProtocolError(
                "every request must carry the node", GrpcStatus.INVALID_ARGUMENT
            )
        self.first = False
        return [request]


def _first_routes(log: Any, response: Message) -> bool:
    """Whether ``response`` is the stream's first route configuration response with any."""
    return bool(response.type_url == ROUTE and response.resources and ROUTE not in log.responses)


class ForeignResourceInRoutes(Fault):
    """Adds a cluster to the first route configuration response of a stream."""

    async def response(self, response: Message) -> list[Message]:
        if not _first_routes(self.log, response):
            return [response]
        stray = any_pb2.Any(
            type_url=CLUSTER, value=cluster_pb2.Cluster(name="xdscore-stray").SerializeToString()
        )
        changed = copy(response)
        if self.log.delta:
            changed.resources.add(name="xdscore-stray", version="1", resource=stray)
        else:
            changed.resources.append(stray)
        return [changed]


class DuplicateInRoutes(Fault):
    """Repeats the first resource of the first SotW route configuration response of a
    stream; over Delta, also removes it in the same response."""

    async def response(self, response: Message) -> list[Message]:
        if not _first_routes(self.log, response):
            return [response]
        changed = copy(response)
        if self.log.delta:
            changed.removed_resources.append(response.resources[0].name)
        else:
            changed.resources.append(response.resources[0])
        return [changed]


class InnerNameDiffers(Fault):
    """Sends each Delta listener under its name, carrying a listener named otherwise."""

    protocols = ("delta",)

    async def response(self, response: Message) -> list[Message]:
        if response.type_url != LISTENER:
            return [response]
        changed = copy(response)
        for item in changed.resources:
            if item.HasField("resource"):
                listener = listener_pb2.Listener.FromString(item.resource.value)
                listener.name += "-inner"
                item.resource.value = listener.SerializeToString()
        return [changed]


class NoncePerType(Fault):
    """Numbers nonces per type (1, 2, ...), so two types share nonces."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.mine: dict[str, dict[str, str]] = {}

    async def response(self, response: Message) -> list[Message]:
        mapping = self.mine.setdefault(response.type_url, {})
        changed = copy(response)
        changed.nonce = str(len(mapping) + 1)
        mapping[changed.nonce] = response.nonce
        return [changed]

    async def request(self, request: Message) -> list[Message]:
        real = self.mine.get(request.type_url, {}).get(request.response_nonce)
        if real is not None:
            request.response_nonce = real
        return [request]


class UnknownTypeEndsStream(Fault):
    """Ends the stream on a type URL it does not know."""

    async def request(self, request: Message) -> list[Message]:
        if request.type_url and not registered(request.type_url):
            raise RemoteProtocolError(
                f"unknown type {request.type_url}", GrpcStatus.INVALID_ARGUMENT
            )
        return [request]


class PerTypeResendsOnAck(Fault):
    """On a per-type service, answers every ACK with the last response again."""

    per_type_streams = True

    async def request(self, request: Message) -> list[Message]:
        if not self.log.is_ack(request):
            return [request]
        last = self.log.last_response(request.type_url)
        if last is not None:
            again = copy(last)
            again.nonce = self.stream.fresh_nonce()
            await self.stream.write(again)
        return [] if request.response_nonce.startswith("fault-") else [request]


# -- ACK and NACK ---------------------------------------------------------------------------------


class ResendWhenIdle(Fault):
    """Once a client has acknowledged all four types, sends its last acknowledged response
    again whenever it has said nothing for a while."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.generation = 0
        self.acked_types: set[str] = set()

    async def request(self, request: Message) -> list[Message]:
        self.generation += 1
        if self.log.is_ack(request):
            self.acked_types.add(request.type_url)
            if {CLUSTER, ENDPOINT, LISTENER, ROUTE} <= self.acked_types:
                self.stream.group.start_soon(self._later, self.generation, request.type_url)
        return [] if request.response_nonce.startswith("fault-") else [request]

    async def _later(self, generation: int, type_url: str) -> None:
        await anyio.sleep(IDLE_RESEND)
        last = self.log.last_response(type_url)
        if generation == self.generation and last is not None:
            again = copy(last)
            again.nonce = self.stream.fresh_nonce()
            await self.stream.write(again)


def _same_subscription(log: Any, request: Message) -> bool:
    previous = log.last_request(request.type_url)
    if log.delta:
        return not request.resource_names_subscribe and not request.resource_names_unsubscribe
    return previous is not None and list(previous.resource_names) == list(request.resource_names)


class ResendNacked(Fault):
    """Answers a NACK that changes nothing else with the rejected response again."""

    async def request(self, request: Message) -> list[Message]:
        if self.log.is_nack(request) and _same_subscription(self.log, request):
            for sent in self.log.responses.get(request.type_url, []):
                if sent.nonce == request.response_nonce:
                    again = copy(sent)
                    again.nonce = self.stream.fresh_nonce()
                    await self.stream.write(again)
        return [request]


class QuietAfterNack(Fault):
    """After a NACK of a type, pushes nothing more of it: only answers to requests that
    change the subscription go out."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.nacked: set[str] = set()
        self.asked: set[str] = set()

    async def request(self, request: Message) -> list[Message]:
        if self.log.is_nack(request):
            self.nacked.add(request.type_url)
        if not _same_subscription(self.log, request):
            self.asked.add(request.type_url)
        return [request]

    async def response(self, response: Message) -> list[Message]:
        if response.type_url in self.nacked and response.type_url not in self.asked:
            return []
        self.asked.discard(response.type_url)
        return [response]


class NackDropsSubscriptionChange(Fault):
    """Applies a NACK, but not the subscription change the same request carries."""

    async def request(self, request: Message) -> list[Message]:
        if not self.log.is_nack(request):
            return [request]
        if self.log.delta:
            del request.resource_names_subscribe[:]
            del request.resource_names_unsubscribe[:]
        else:
            previous = self.log.last_request(request.type_url)
            del request.resource_names[:]
            request.resource_names.extend(previous.resource_names if previous is not None else ())
        return [request]


class StaleNonceTakenAsCurrent(Fault):
    """Takes a request echoing an older nonce as if it echoed the latest."""

    protocols = ("sotw",)

    async def request(self, request: Message) -> list[Message]:
        latest = self.log.nonces.get(request.type_url)
        if request.response_nonce and latest and request.response_nonce != latest:
            request.response_nonce = latest
        return [request]


class StaleNonceRequestDropped(Fault):
    """Ignores a Delta request echoing an older nonce, subscription change and all."""

    protocols = ("delta",)

    async def request(self, request: Message) -> list[Message]:
        latest = self.log.nonces.get(request.type_url)
        if request.response_nonce and latest and request.response_nonce != latest:
            return []
        return [request]


# -- SotW subscriptions ---------------------------------------------------------------------------


def _for_type(base: type[Fault], type_url: str, protocol: str) -> type[Fault]:
    """``base`` for one type and protocol."""
    return type(
        f"{base.__name__}_{type_info(type_url).short_name}_{protocol}",
        (base,),
        {"type_url": type_url, "protocols": (protocol,)},
    )


class _Typed(Fault):
    type_url = CLUSTER

    def mine(self, message: Message) -> bool:
        return bool(message.type_url == self.type_url)


class LegacyWildcardDropsLast(_Typed):
    """Under the legacy wildcard, leaves the last resource out of the first response."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.legacy = False

    async def request(self, request: Message) -> list[Message]:
        if self.mine(request):
            first = self.log.last_request(self.type_url) is None
            named = bool(self.log.names(request))
            self.legacy = (first and not named) or (self.legacy and not named)
        return [request]

    async def response(self, response: Message) -> list[Message]:
        first = self.log.last_response(self.type_url) is None
        if self.mine(response) and self.legacy and first and len(response.resources) > 1:
            last = max(names_of(response))
            return [keep_resources(response, lambda name: name != last)]
        return [response]


class ExplicitWildcardDropsLast(_Typed):
    """Asked for '*', leaves the last resource out of the first response."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.star = False

    async def request(self, request: Message) -> list[Message]:
        if self.mine(request):
            names = self.log.names(request)
            self.star = names == ["*"] or (self.log.delta and ("*" in names or self.star))
        return [request]

    async def response(self, response: Message) -> list[Message]:
        first = self.log.last_response(self.type_url) is None
        if self.mine(response) and self.star and first and len(response.resources) > 1:
            last = max(names_of(response))
            return [keep_resources(response, lambda name: name != last)]
        return [response]


class FirstNamedRequestGetsAll(_Typed):
    """Answers a first request naming one resource with every resource of the type."""

    async def request(self, request: Message) -> list[Message]:
        if self.mine(request) and self.log.last_request(self.type_url) is None:
            names = self.log.names(request)
            if len(names) == 1 and "*" not in names:
                everything = sorted(self.log.served(self.type_url))
                if self.log.delta:
                    request.resource_names_subscribe.extend(sorted(set(everything) - set(names)))
                elif type_info(self.type_url).wildcard_capable:
                    request.resource_names.append("*")
                else:
                    del request.resource_names[:]
                    request.resource_names.extend(everything)
        return [request]


class StarWithNamesIgnoresStar(_Typed):
    """Reads '*' plus names as the names alone."""

    async def request(self, request: Message) -> list[Message]:
        names = list(request.resource_names)
        if self.mine(request) and "*" in names and len(names) > 1:
            del request.resource_names[:]
            request.resource_names.extend(n for n in names if n != "*")
        return [request]


class EmptyListIsWildcard(_Typed):
    """Reads an empty list as the wildcard (after names, for LDS and CDS; always for
    other types, as go-control-plane does by default)."""

    async def request(self, request: Message) -> list[Message]:
        if not self.mine(request) or request.resource_names:
            return [request]
        if type_info(self.type_url).wildcard_capable:
            earlier = self.log.requests.get(self.type_url, [])
            if any(r.resource_names for r in earlier):
                request.resource_names.append("*")
        else:
            request.resource_names.extend(sorted(self.log.served(self.type_url)))
        return [request]


class SubscriptionNeverShrinks(_Typed):
    """Keeps every name ever asked for: a name left out of a list stays subscribed."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ever: set[str] = set()

    async def request(self, request: Message) -> list[Message]:
        names = list(request.resource_names)
        if self.mine(request) and names:
            self.ever.update(n for n in names if n != "*")
            del request.resource_names[:]
            request.resource_names.extend(sorted(self.ever) + (["*"] if "*" in names else []))
        return [request]


class DroppedNamesPushed(_Typed):
    """Answers a list that leaves names out as it should, but keeps sending those names in
    the pushes that follow a change (as a server that updates what it pushes from every
    name ever asked for might)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ever: set[str] = set()
        self.answered = True
        """Whether the latest request of the type had its answer."""

    async def request(self, request: Message) -> list[Message]:
        if self.mine(request):
            self.ever.update(n for n in request.resource_names if n != "*")
            self.answered = _same_subscription(self.log, request)
        return [request]

    async def response(self, response: Message) -> list[Message]:
        if not self.mine(response):
            return [response]
        if not self.answered:
            self.answered = True
            return [response]
        asked = self.log.last_request(self.type_url)
        if asked is None or not asked.resource_names or "*" in asked.resource_names:
            return [response]
        served = self.log.served(self.type_url)
        dropped = self.ever - set(asked.resource_names) - set(names_of(response))
        extra = sorted(dropped & set(served))
        changed = copy(response)
        changed.resources.extend(
            any_pb2.Any(type_url=self.type_url, value=served[name].body) for name in extra
        )
        return [changed]


class UnsubscribeIgnored(_Typed):
    """Over Delta, ignores unsubscribes."""

    protocols = ("delta",)

    async def request(self, request: Message) -> list[Message]:
        if self.mine(request):
            del request.resource_names_unsubscribe[:]
        return [request]


class PushesEndpointsUnasked(Fault):
    """Once a client that asked for clusters and listeners, and not for endpoints,
    acknowledges clusters, sends it the endpoints of every cluster."""

    async def request(self, request: Message) -> list[Message]:
        if (
            request.type_url == CLUSTER
            and self.log.is_ack(request)
            and LISTENER in self.log.requests
            and ENDPOINT not in self.log.requests
        ):
            everything = sorted(self.log.served(ENDPOINT))
            if self.log.delta:
                extra = discovery_pb2.DeltaDiscoveryRequest(
                    type_url=ENDPOINT, resource_names_subscribe=everything
                )
            else:
                extra = discovery_pb2.DiscoveryRequest(type_url=ENDPOINT, resource_names=everything)
            return [request, extra]
        return [request]


class ReaddedNamesNotResent(Fault):
    """Does not send again an endpoint assignment the client dropped and asks for again,
    when it sent it before on the stream at the same version (as a server that remembers
    what it sent, not what the client holds, might)."""

    protocols = ("sotw",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.dropped: set[str] = set()
        self.readded: set[str] = set()

    async def request(self, request: Message) -> list[Message]:
        previous = self.log.last_request(ENDPOINT)
        if request.type_url == ENDPOINT and previous is not None:
            now, before = set(request.resource_names), set(previous.resource_names)
            self.dropped |= before - now
            self.readded |= self.dropped & (now - before)
        return [request]

    async def response(self, response: Message) -> list[Message]:
        if response.type_url != ENDPOINT or not self.readded:
            return [response]
        readded, self.readded = self.readded, set()
        return [keep_resources(response, lambda name: name not in readded)]


class ForgetsMissingNames(Fault):
    """Never sends a resource asked for before it existed."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.missing: set[str] = set()

    async def request(self, request: Message) -> list[Message]:
        if request.type_url == ENDPOINT:
            served = self.log.served(ENDPOINT)
            self.missing.update(n for n in self.log.names(request) if n not in served)
        return [request]

    async def response(self, response: Message) -> list[Message]:
        if response.type_url != ENDPOINT or not self.missing:
            return [response]
        return [keep_resources(response, lambda name: name not in self.missing)]


class DeletionsKept(Fault):
    """Keeps sending clusters deleted since its previous cluster response, while the client
    still asks for them (SotW)."""

    protocols = ("sotw",)

    async def response(self, response: Message) -> list[Message]:
        previous = self.log.last_response(CLUSTER)
        asked = self.log.last_request(CLUSTER)
        if response.type_url != CLUSTER or previous is None or asked is None:
            return [response]
        names = set(asked.resource_names)
        legacy = not any(r.resource_names for r in self.log.requests[CLUSTER])
        wildcard = legacy or "*" in names
        now = set(names_of(response))
        changed = copy(response)
        changed.resources.extend(
            item
            for item, name in zip(previous.resources, names_of(previous), strict=True)
            if name not in now and (wildcard or name in names)
        )
        return [changed]


class ResumesOnAnyVersion(Fault):
    """On a new stream, takes a first request presenting a version as up to date."""

    protocols = ("sotw",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.skip: set[str] = set()

    async def request(self, request: Message) -> list[Message]:
        if self.log.last_request(request.type_url) is None and request.version_info:
            self.skip.add(request.type_url)
        return [request]

    async def response(self, response: Message) -> list[Message]:
        if response.type_url in self.skip:
            self.skip.discard(response.type_url)
            return []
        return [response]


# -- Delta subscriptions --------------------------------------------------------------------------


class NoRemovalForMissing(Fault):
    """Sends no removal for a name it never had, unless the client listed it as held."""

    protocols = ("delta",)

    async def response(self, response: Message) -> list[Message]:
        listed = {
            name
            for request in self.log.requests.get(response.type_url, [])
            for name in request.initial_resource_versions
        }
        sent = {name for r in self.log.responses.get(response.type_url, []) for name in names_of(r)}
        kept = [n for n in response.removed_resources if n in listed or n in sent]
        if len(kept) == len(response.removed_resources):
            return [response]
        changed = copy(response)
        del changed.removed_resources[:]
        changed.removed_resources.extend(kept)
        return [changed]


class ResubscribeOfHeldNameIgnored(Fault):
    """Ignores a subscription to a name already subscribed."""

    protocols = ("delta",)

    async def request(self, request: Message) -> list[Message]:
        held = self.log.subscribed.get(request.type_url, set())
        fresh = [n for n in request.resource_names_subscribe if n not in held]
        del request.resource_names_subscribe[:]
        request.resource_names_subscribe.extend(fresh)
        return [request]


class ResubscribeAfterUnsubscribeIgnored(Fault):
    """Ignores a subscription to a name the client unsubscribed from earlier."""

    protocols = ("delta",)

    async def request(self, request: Message) -> list[Message]:
        gone = self.log.unsubscribed.get(request.type_url, set())
        fresh = [n for n in request.resource_names_subscribe if n not in gone]
        del request.resource_names_subscribe[:]
        request.resource_names_subscribe.extend(fresh)
        return [request]


class WildcardUnsubscribeSwallowed(Fault):
    """Under '*', ignores a request that only unsubscribes."""

    protocols = ("delta",)

    async def request(self, request: Message) -> list[Message]:
        star = "*" in self.log.subscribed.get(request.type_url, set())
        pure = request.resource_names_unsubscribe and not request.resource_names_subscribe
        if star and pure and not request.response_nonce:
            return []
        return [request]


class DeletionNotRemoved(Fault):
    """Sends no removal for a resource it sent before (Delta)."""

    protocols = ("delta",)

    async def response(self, response: Message) -> list[Message]:
        sent = {name for r in self.log.responses.get(response.type_url, []) for name in names_of(r)}
        kept = [n for n in response.removed_resources if n not in sent]
        if len(kept) == len(response.removed_resources):
            return [response]
        changed = copy(response)
        del changed.removed_resources[:]
        changed.removed_resources.extend(kept)
        return [changed]


class InitialVersionsIgnored(Fault):
    """Takes every version a reconnecting client lists as old: everything is sent again."""

    protocols = ("delta",)

    async def request(self, request: Message) -> list[Message]:
        for name in list(request.initial_resource_versions):
            request.initial_resource_versions[name] = "fault-old"
        return [request]


class InitialVersionsTrusted(Fault):
    """Takes a reconnecting client's names as current, whatever versions it lists."""

    protocols = ("delta",)

    async def request(self, request: Message) -> list[Message]:
        if not request.initial_resource_versions:
            return [request]
        served = self.log.served(request.type_url)
        listed = dict(request.initial_resource_versions)
        request.initial_resource_versions.clear()
        for name in listed:
            if name in served:
                request.initial_resource_versions[name] = served[name].version
        return [request]


# -- ordering, warming, TTLs, errors --------------------------------------------------------------


class RoutesBeforeNewClusters(Fault):
    """When a cluster response brings a new cluster, sends the route configurations the
    client asks for as they are now right after it, before the new cluster's endpoints
    (as a server without make-before-break ordering for additions would). The client's
    answers to those extra responses are not passed on."""

    async def request(self, request: Message) -> list[Message]:
        return [] if request.response_nonce.startswith("fault-") else [request]

    async def response(self, response: Message) -> list[Message]:
        previous = self.log.last_response(CLUSTER)
        if response.type_url != CLUSTER or previous is None or ROUTE not in self.log.requests:
            return [response]
        if not set(names_of(response)) - set(names_of(previous)):
            return [response]
        served = self.log.served(ROUTE)
        if self.log.delta:
            wanted = sorted(self.log.subscribed.get(ROUTE, set()) & set(served))
            routes = discovery_pb2.DeltaDiscoveryResponse(
                type_url=ROUTE, nonce=self.stream.fresh_nonce()
            )
            for name in wanted:
                routes.resources.add(
                    name=name,
                    version=served[name].version,
                    resource=any_pb2.Any(type_url=ROUTE, value=served[name].body),
                )
        else:
            asked = self.log.last_request(ROUTE)
            wanted = sorted(set(asked.resource_names) & set(served))
            routes = discovery_pb2.DiscoveryResponse(
                type_url=ROUTE,
                version_info="fault",
                nonce=self.stream.fresh_nonce(),
                resources=[any_pb2.Any(type_url=ROUTE, value=served[n].body) for n in wanted],
            )
        return [response, routes] if wanted else [response]


class RemovesClustersEarly(Fault):
    """When a route configuration stops naming a cluster that is being deleted, sends the
    cluster's removal before the route configuration."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.routes: dict[str, set[str]] = {}

    def _targets(self, response: Message) -> dict[str, set[str]]:
        found = {}
        for item, name in zip(response.resources, names_of(response), strict=True):
            body = item.resource.value if self.log.delta else item.value
            route = Resource(type_url=ROUTE, name=name, body=body)
            found[name] = {ref.name for ref in route.references if ref.type_url == CLUSTER}
        return found

    async def response(self, response: Message) -> list[Message]:
        if response.type_url != ROUTE:
            return [response]
        now = self._targets(response)
        dropped = set().union(*(self.routes.get(n, set()) - t for n, t in now.items()))
        dropped -= set(self.log.served(CLUSTER))
        self.routes.update(now)
        last = self.log.last_response(CLUSTER)
        if not dropped or last is None:
            return [response]
        if self.log.delta:
            early = discovery_pb2.DeltaDiscoveryResponse(
                type_url=CLUSTER, nonce=self.stream.fresh_nonce(), removed_resources=sorted(dropped)
            )
        else:
            early = keep_resources(last, lambda name: name not in dropped)
            early.nonce = self.stream.fresh_nonce()
        return [early, response]


class EndpointsNotRepeated(Fault):
    """Never sends endpoints again at the version last sent (SotW) after clusters changed
    (none added), so a cluster that changed warms for ever."""

    protocols = ("sotw",)

    async def response(self, response: Message) -> list[Message]:
        last = self.log.last_response(ENDPOINT)
        clusters = self.log.responses.get(CLUSTER, [])
        if (
            response.type_url == ENDPOINT
            and last is not None
            and last.version_info == response.version_info
            and len(clusters) > 1
            and set(names_of(clusters[-1])) <= set(names_of(clusters[-2]))
        ):
            return []
        return [response]


class HeartbeatsDropped(Fault):
    """Sends no heartbeat: a resource with a TTL lapses."""

    async def response(self, response: Message) -> list[Message]:
        if self.log.delta:
            if response.resources and all(not r.HasField("resource") for r in response.resources):
                return []
            return [response]
        last = self.log.last_response(response.type_url)
        wrapped = any(item.type_url == RESOURCE_WRAPPER for item in response.resources)
        if wrapped and last is not None and last.version_info == response.version_info:
            return []
        return [response]


class ErrorsForSentNames(Fault):
    """Where it reports resource errors, also reports one for every resource it sends."""

    async def response(self, response: Message) -> list[Message]:
        if not response.resource_errors:
            return [response]
        changed = copy(response)
        for name in names_of(response):
            error = changed.resource_errors.add()
            error.resource_name.name = name
            error.error_detail.code = GrpcStatus.NOT_FOUND
            error.error_detail.message = "fault: reported though sent"
        return [changed]


# -- the catalogue --------------------------------------------------------------------------------


def _both(case: str, fault: type[Fault]) -> dict[str, type[Fault]]:
    """``fault`` for the SotW and the Delta case of the same name."""
    return {
        f"sotw/{case}": type(f"{fault.__name__}_sotw", (fault,), {"protocols": ("sotw",)}),
        f"delta/{case}": type(f"{fault.__name__}_delta", (fault,), {"protocols": ("delta",)}),
    }


FAULTS: dict[str, type[Fault]] = {
    **_both("node/first-request-only", NodeOnEveryRequest),
    **_both("response/type-consistent", ForeignResourceInRoutes),
    **_both("response/no-duplicate-names", DuplicateInRoutes),
    "delta/response/names-match": InnerNameDiffers,
    **_both("nonce/unique", NoncePerType),
    **_both("unknown-type/others-served", UnknownTypeEndsStream),
    **_both("per-type/served", PerTypeResendsOnAck),
    **_both("ack/silence", ResendWhenIdle),
    **_both("nack/no-resend", ResendNacked),
    **_both("nack/next-change-delivered", QuietAfterNack),
    **_both("nack/with-subscription-change", NackDropsSubscriptionChange),
    "sotw/nonce/stale-ignored": StaleNonceTakenAsCurrent,
    "delta/nonce/stale-subscription-honoured": StaleNonceRequestDropped,
    **{
        f"sotw/{type_info(t).short_name}/{case}": _for_type(fault, t, "sotw")
        for t in (CLUSTER, LISTENER)
        for case, fault in (
            ("legacy-wildcard", LegacyWildcardDropsLast),
            ("explicit-wildcard", ExplicitWildcardDropsLast),
            ("named", FirstNamedRequestGetsAll),
            ("wildcard-and-names", StarWithNamesIgnoresStar),
            ("empty-after-names", EmptyListIsWildcard),
            ("unsubscribe", SubscriptionNeverShrinks),
        )
    },
    **{
        f"sotw/{type_info(t).short_name}/{case}": _for_type(fault, t, "sotw")
        for t in (ENDPOINT, ROUTE)
        for case, fault in (
            ("named-only", FirstNamedRequestGetsAll),
            ("empty-list", EmptyListIsWildcard),
        )
    },
    "sotw/rds/unsubscribe": _for_type(SubscriptionNeverShrinks, ROUTE, "sotw"),
    "sotw/eds/unsubscribe": _for_type(DroppedNamesPushed, ENDPOINT, "sotw"),
    **_both("eds-rds/never-unasked", PushesEndpointsUnasked),
    "sotw/eds/readded-name-resent": ReaddedNamesNotResent,
    **_both("eds/missing-name-remembered", ForgetsMissingNames),
    "sotw/cds/deletion-is-omission": DeletionsKept,
    "sotw/reconnect/new-names-answered": ResumesOnAnyVersion,
    **{
        f"delta/{type_info(t).short_name}/{case}": _for_type(fault, t, "delta")
        for t in (CLUSTER, LISTENER)
        for case, fault in (
            ("legacy-wildcard", LegacyWildcardDropsLast),
            ("explicit-wildcard", ExplicitWildcardDropsLast),
        )
    },
    **{
        f"delta/{type_info(t).short_name}/{case}": _for_type(fault, t, "delta")
        for t in (ENDPOINT, ROUTE)
        for case, fault in (
            ("subscribe", FirstNamedRequestGetsAll),
            ("unsubscribe", UnsubscribeIgnored),
        )
    },
    "delta/missing/removed": NoRemovalForMissing,
    "delta/resubscribe/held-name": ResubscribeOfHeldNameIgnored,
    "delta/resubscribe/after-unsubscribe": ResubscribeAfterUnsubscribeIgnored,
    "delta/wildcard/unsubscribe-answered": WildcardUnsubscribeSwallowed,
    "delta/cds/removal-on-delete": DeletionNotRemoved,
    "delta/reconnect/nothing-current-resent": InitialVersionsIgnored,
    "delta/reconnect/stale-updated": InitialVersionsTrusted,
    **_both("ads/make-before-break-add", RoutesBeforeNewClusters),
    **_both("ads/make-before-break-remove", RemovesClustersEarly),
    "sotw/ads/endpoints-after-cluster-change": EndpointsNotRepeated,
    **_both("ttl/refreshed-in-time", HeartbeatsDropped),
    **_both("resource-errors/named-missing-only", ErrorsForSentNames),
}
"""The fault each case must catch, by case id."""
