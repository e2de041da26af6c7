"""Make-before-break ordering on ADS (:mod:`xdscore._ordering`), on both state machines.

Each test drives a :class:`SotwServer` or a :class:`DeltaServer` (parametrized
as ``protocol``) through :class:`Client`, a small model of an xDS client: it subscribes,
applies each response as it arrives (SotW CDS/LDS replace everything they hold, SotW
EDS/RDS update the names present, Delta applies resources and removals), ACKs it or NACKs
it (undoing it), and can re-derive
its subscriptions the way Envoy does (EDS follows the clusters it holds, RDS the listeners)
or the way proxyless gRPC does (every type by name, following references from the listener
down). Test names say which rule they check; the rules are the module docstring of
:mod:`xdscore._ordering`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from xdscore import (
    CLUSTER,
    ENDPOINT,
    LISTENER,
    ROUTE,
    SECRET,
    Resource,
    Snapshot,
)
from xdscore.builders import eds_cluster, http_listener, load_assignment, route_configuration
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DeltaResponse,
    DeltaServer,
    DiscoveryRequest,
    SotwResponse,
    SotwServer,
)
from xdscore.wire import type_info

from ..factories import (
    CL_A,
    CL_A2,
    CL_B,
    CL_C,
    EP_A,
    EP_A2,
    EP_B,
    EP_C,
    ERROR,
    LS_2,
    NODE,
    nonce_source,
    secret,
    tls_cluster,
    version,
)

Protocol = Literal["sotw", "delta"]
Follow = Literal["envoy", "grpc"] | None

SHORT = {SECRET: "SDS", CLUSTER: "CDS", ENDPOINT: "EDS", LISTENER: "LDS", ROUTE: "RDS"}

LS = http_listener("l", 10000, "r")
RC_A = route_configuration("r", [("/", "a")])
RC_A_HEADER = route_configuration("r", [("/", "a")], response_headers={"x-v": "2"})
RC_B = route_configuration("r", [("/", "b")])
RC_C = route_configuration("r", [("/", "c")])
RC_2_C = route_configuration("r2", [("/", "c")])

ON_A = Snapshot([CL_A, EP_A, LS, RC_A])
"""Listener ``l`` -> route ``r`` -> cluster ``a`` -> its endpoints."""
MOVED_TO_B = Snapshot([CL_B, EP_B, LS, RC_B])
"""One change: the route goes to the new cluster ``b``; ``a`` and its endpoints are gone."""
MOVED_TO_C = Snapshot([CL_C, EP_C, LS, RC_C])


# -- the client model ---------------------------------------------------------------------


@attrs.frozen
class Pending:
    """A response the client applied but has not answered yet, and what it held before."""

    response: SotwResponse | DeltaResponse
    before: dict[str, Resource]


class Client:
    """One ADS (or per-type, with ``type_url``) client of a server state machine.

    ``names[type]`` is the subscription (``None``: wildcard); ``has[type]`` what the client
    holds (name -> Resource): it applies every response as it arrives, in order, and undoes
    one it NACKs; ``pending[type]`` the response it has not answered yet; ``log`` every
    response, in order. With ``follow`` the client re-derives its subscriptions from what it
    holds after each ACK. On ordered ADS every response applied (and every NACK) checks the
    point of the ordering: nothing the client holds refers to something it wants but lacks
    (or to a cluster it lacks the endpoints of).
    """

    def __init__(
        self,
        protocol: Protocol,
        *,
        ordered: bool = True,
        type_url: str | None = None,
        follow: Follow = None,
    ) -> None:
        source = nonce_source()
        self.protocol = protocol
        self.machine: SotwServer | DeltaServer
        if protocol == "sotw":
            self.machine = SotwServer(nonce_source=source, type_url=type_url, ordered=ordered)
        else:
            self.machine = DeltaServer(nonce_source=source, type_url=type_url, ordered=ordered)
        self.fixed = type_url
        self.follow = follow
        self.check = ordered and type_url is None  # assert "nothing dangling" throughout
        self.names: dict[str, frozenset[str] | None] = {}
        self.has: dict[str, dict[str, Resource]] = {}
        self.pending: dict[str, Pending] = {}
        self.acked_version: dict[str, str] = {}
        self.latest_nonce: dict[str, str] = {}
        self.log: list[SotwResponse | DeltaResponse] = []
        self._node_sent = False

    # requests

    def _send(self, type_url: str, **fields: object) -> None:
        node = None if self._node_sent else NODE
        self._node_sent = True
        wire_type = "" if self.fixed is not None else type_url
        if self.protocol == "sotw":
            self.machine.receive(DiscoveryRequest(type_url=wire_type, node=node, **fields))  # type: ignore[arg-type]
        else:
            self.machine.receive(DeltaDiscoveryRequest(type_url=wire_type, node=node, **fields))  # type: ignore[arg-type]

    def subscribe(self, type_url: str, names: Iterable[str] | None = None) -> None:
        """Ask for ``names`` of ``type_url`` (``None``: every one: legacy wildcard or ``*``)."""
        wanted = None if names is None else frozenset(names)
        if type_url not in self.names:
            self.names[type_url] = wanted
            self.has.setdefault(type_url, {})
            listed = tuple(sorted(_wire(type_url, wanted)))
            if self.protocol == "sotw":
                self._send(type_url, resource_names=listed)
            else:
                self._send(type_url, resource_names_subscribe=listed)
            return
        assert type_url not in self.pending, "answer the pending response first"
        self._request(type_url, wanted, nonce=self.latest_nonce.get(type_url, ""))

    def _request(
        self, type_url: str, wanted: frozenset[str] | None, *, nonce: str, error: bool = False
    ) -> None:
        previous = self.names[type_url]
        self.names[type_url] = wanted
        if wanted is not None:  # the client forgets what it stops watching
            for name in set(self.has[type_url]) - wanted:
                del self.has[type_url][name]
        if self.protocol == "sotw":
            self._send(
                type_url,
                version_info=self.acked_version.get(type_url, ""),
                resource_names=tuple(sorted(_wire(type_url, wanted))),
                response_nonce=nonce,
                error_detail=ERROR if error else None,
            )
            return
        before, after = _wire(type_url, previous), _wire(type_url, wanted)
        gone = sorted(before - after)
        self._send(
            type_url,
            resource_names_subscribe=tuple(sorted(after - before)),
            resource_names_unsubscribe=tuple(gone),
            response_nonce=nonce,
            error_detail=ERROR if error else None,
        )

    def poll(self, view: Snapshot) -> list[str]:
        """Let the machine answer; the client applies each response as it arrives (in
        order, like a proxy on one stream). Returns the types sent, in order."""
        sent = self.machine.poll(view)
        for response in sent:
            assert response.type_url not in self.pending, f"two outstanding {response}"
            self.pending[response.type_url] = Pending(response, dict(self.has[response.type_url]))
            self.latest_nonce[response.type_url] = response.nonce
            self.log.append(response)
            self._apply(response)
            if self.check:
                assert not self.dangling(), f"after {response}: {self.dangling()}"
        return [response.type_url for response in sent]

    def _apply(self, response: SotwResponse | DeltaResponse) -> None:
        held = self.has[response.type_url]
        if isinstance(response, SotwResponse):
            if type_info(response.type_url).sotw_full_state:
                held.clear()
            held.update(response.selection.resources)
        else:
            held.update((resource.name, resource) for resource in response.resources)
            for name in response.removed:
                held.pop(name, None)

    def ack(self, type_url: str) -> None:
        response = self.pending.pop(type_url).response
        if isinstance(response, SotwResponse):
            self.acked_version[type_url] = response.version_info
        self._request(type_url, self._derived(type_url), nonce=response.nonce)
        self._follow_others(type_url)

    def nack(self, type_url: str) -> None:
        """Reject the pending response of ``type_url``: the client undoes it."""
        pending = self.pending.pop(type_url)
        self.has[type_url] = pending.before
        if self.check:
            assert not self.dangling(), f"after rejecting {pending.response}: {self.dangling()}"
        self._request(type_url, self.names[type_url], nonce=pending.response.nonce, error=True)

    def ack_all(self) -> None:
        for type_url in sorted(self.pending, key=lambda url: type_info(url).rank):
            self.ack(type_url)

    def settle(self, view: Snapshot, rounds: int = 20) -> list[list[str]]:
        """Poll and ACK until the machine is quiet; the types sent in each round."""
        history: list[list[str]] = []
        for _ in range(rounds):
            sent = self.poll(view)
            if not sent and not self.pending:
                return history
            history.append(sent)
            self.ack_all()
        raise AssertionError(f"still sending after {rounds} rounds: {history}")

    # subscriptions that follow what the client holds

    def _referenced(self, source: str, target: str) -> frozenset[str]:
        return frozenset(
            ref.name
            for resource in self.has.get(source, {}).values()
            for ref in resource.references
            if ref.type_url == target
        )

    def _derived(self, type_url: str) -> frozenset[str] | None:
        current = self.names[type_url]
        if self.follow is None:
            return current
        parent = {ENDPOINT: CLUSTER, ROUTE: LISTENER}
        if self.follow == "grpc":
            parent[CLUSTER] = ROUTE
        if type_url not in parent:
            return current
        return self._referenced(parent[type_url], type_url)

    def _follow_others(self, changed: str) -> None:
        for type_url in list(self.names):
            if type_url == changed or type_url in self.pending:
                continue
            wanted = self._derived(type_url)
            if wanted != self.names[type_url]:
                self._request(type_url, wanted, nonce=self.latest_nonce.get(type_url, ""))

    # reading

    def held(self, type_url: str) -> dict[str, str]:
        """What the client accepted of ``type_url``: name -> version."""
        return {name: resource.version for name, resource in self.has.get(type_url, {}).items()}

    def offered(self, type_url: str) -> dict[str, str]:
        """The pending response of ``type_url``: name -> version of what it carries."""
        pending = self.pending.get(type_url)
        if pending is None:
            return {}
        response = pending.response
        if isinstance(response, SotwResponse):
            return {n: r.version for n, r in response.selection.resources.items()}
        return {r.name: r.version for r in response.resources}

    def removes(self, type_url: str) -> set[str]:
        """Names the pending response of ``type_url`` took away from the client."""
        pending = self.pending.get(type_url)
        if pending is None:
            return set()
        response = pending.response
        if isinstance(response, DeltaResponse):
            return set(response.removed)
        if not type_info(type_url).sotw_full_state:
            return set()
        return set(pending.before) - set(response.selection.resources)

    def dangling(self) -> list[str]:
        """References from what the client holds to what it wants but lacks (or lacks warm)."""
        found = []
        for type_url, held in self.has.items():
            rank = type_info(type_url).rank
            for resource in held.values():
                for ref in resource.references:
                    if type_info(ref.type_url).rank >= rank or ref.type_url not in self.names:
                        continue
                    wanted = self.names[ref.type_url]
                    if wanted is not None and ref.name not in wanted:
                        continue
                    target = self.has[ref.type_url].get(ref.name)
                    if target is None:
                        found.append(f"{resource.name} -> missing {ref.name}")
                        continue
                    for inner in target.references:
                        if (
                            inner.type_url == ENDPOINT
                            and ENDPOINT in self.names
                            and inner.name not in self.has[ENDPOINT]
                        ):
                            found.append(f"{resource.name} -> {ref.name} without endpoints")
        return found


def _wire(type_url: str, names: frozenset[str] | None) -> frozenset[str]:
    """The names a request lists: for "everything", nothing (legacy wildcard) or ``*``."""
    if names is not None:
        return names
    return frozenset() if type_info(type_url).wildcard_capable else frozenset({"*"})


def envoy_client(protocol: Protocol, view: Snapshot, *, ordered: bool = True) -> Client:
    """An Envoy-like ADS client that holds all of ``view`` (wildcard CDS/LDS)."""
    client = Client(protocol, ordered=ordered, follow="envoy")
    client.subscribe(CLUSTER)
    client.subscribe(LISTENER)
    client.subscribe(ENDPOINT, sorted(name for name in _names(view, CLUSTER)))
    client.subscribe(ROUTE, sorted(name for name in _names(view, ROUTE)))
    client.settle(view)
    assert client.held(CLUSTER) == _versions(view, CLUSTER)
    assert client.held(ROUTE) == _versions(view, ROUTE)
    assert not client.dangling()
    return client


def _names(view: Snapshot, type_url: str) -> Iterable[str]:
    return view.resources(type_url) or {}


def _versions(view: Snapshot, type_url: str) -> dict[str, str]:
    return {name: r.version for name, r in (view.resources(type_url) or {}).items()}


def round_(client: Client, view: Snapshot) -> list[str]:
    """One exchange: the machine sends what is due, the client ACKs all of it."""
    sent = client.poll(view)
    client.ack_all()
    return sent


def short(types: Iterable[str]) -> list[str]:
    return [SHORT.get(type_url, type_url) for type_url in types]


PROTOCOLS = pytest.mark.parametrize("protocol", ["sotw", "delta"])


# -- rule 1: additions in make-before-break order -----------------------------------------


@PROTOCOLS
def test_additions_go_cds_eds_lds_rds(protocol: Protocol) -> None:
    client = Client(protocol)
    # Subscribed in the "wrong" order; route r names cluster a.
    client.subscribe(ROUTE, ["r"])
    client.subscribe(LISTENER)
    client.subscribe(ENDPOINT, ["a"])
    client.subscribe(CLUSTER)
    assert client.poll(ON_A) == [CLUSTER, ENDPOINT, LISTENER]
    # The route waits for cluster a and its endpoints to be ACKed ...
    assert client.poll(ON_A) == []
    client.ack(LISTENER)
    client.ack(CLUSTER)
    assert client.poll(ON_A) == []
    client.ack(ENDPOINT)
    # ... and then goes.
    assert client.poll(ON_A) == [ROUTE]
    assert client.offered(ROUTE) == {"r": version(RC_A)}
    client.ack(ROUTE)
    assert client.settle(ON_A) == []


@PROTOCOLS
def test_additions_at_runtime_go_cluster_endpoints_listener_then_route(protocol: Protocol) -> None:
    client = envoy_client(protocol, ON_A)
    grown = Snapshot([CL_A, EP_A, CL_C, EP_C, LS, LS_2, RC_A, RC_2_C])
    # The new listener goes with the new cluster (a listener warms on its route); the route
    # does not. (Endpoints are resent after a cluster response: clusters warm on them.)
    sent = round_(client, grown)
    assert [t for t in sent if t != ENDPOINT] == [CLUSTER, LISTENER], short(sent)
    assert "c" in client.held(CLUSTER)
    assert "l2" in client.held(LISTENER)
    # The client now asks for c's endpoints and for r2; r2 still waits for c to be warm.
    assert client.names[ENDPOINT] == frozenset({"a", "c"})
    assert client.names[ROUTE] == frozenset({"r", "r2"})
    assert round_(client, grown) == [ENDPOINT]
    assert "r2" not in client.held(ROUTE)
    assert round_(client, grown) == [ROUTE]
    assert client.held(ROUTE)["r2"] == version(RC_2_C)
    assert client.settle(grown) == []


# -- rule 2: a route to a new cluster waits until the cluster is warm ----------------------


@PROTOCOLS
def test_route_to_new_cluster_waits_for_cds_and_eds_acks(protocol: Protocol) -> None:
    client = envoy_client(protocol, ON_A)

    sent = client.poll(MOVED_TO_B)
    assert sent[0] == CLUSTER, short(sent)
    assert ROUTE not in sent, "RDS went out before the client held cluster b"
    assert "b" in client.offered(CLUSTER)
    client.ack_all()  # the client holds cluster b now, and asks for its endpoints
    assert client.held(ROUTE) == {"r": version(RC_A)}
    assert client.names[ENDPOINT] == frozenset({"a", "b"})

    sent = client.poll(MOVED_TO_B)
    assert sent == [ENDPOINT], "RDS went out before the client held b's endpoints"
    assert client.offered(ENDPOINT) == {"b": version(EP_B)}
    assert client.poll(MOVED_TO_B) == []  # nothing more until the endpoints are ACKed
    client.ack(ENDPOINT)

    # Cluster b and its endpoints are ACKed: now, and only now, the route moves.
    assert client.poll(MOVED_TO_B) == [ROUTE]
    assert client.offered(ROUTE) == {"r": version(RC_B)}
    client.ack(ROUTE)


@PROTOCOLS
def test_route_to_new_cluster_waits_for_the_cluster_even_with_its_endpoints_held(
    protocol: Protocol,
) -> None:
    # The client already holds b's endpoints (it asked for them by name): the route still
    # waits for cluster b itself.
    client = Client(protocol)
    client.subscribe(CLUSTER)
    client.subscribe(ENDPOINT, ["a", "b"])
    client.subscribe(ROUTE, ["r"])
    client.settle(Snapshot([CL_A, EP_A, EP_B, RC_A]))
    assert client.held(ENDPOINT) == {"a": version(EP_A), "b": version(EP_B)}
    moved = Snapshot([CL_A, CL_B, EP_A, EP_B, RC_B])
    sent = client.poll(moved)
    assert sent[0] == CLUSTER, short(sent)  # (and the endpoints clusters warm on)
    assert ROUTE not in sent
    assert ROUTE not in client.poll(moved)
    client.ack(CLUSTER)
    assert client.poll(moved) == [ROUTE]
    assert client.offered(ROUTE) == {"r": version(RC_B)}


@PROTOCOLS
def test_route_to_new_cluster_waits_while_cluster_response_is_unanswered(
    protocol: Protocol,
) -> None:
    client = envoy_client(protocol, ON_A)
    client.poll(MOVED_TO_B)
    for _ in range(3):  # however often the server looks, the route does not go
        assert ROUTE not in client.poll(MOVED_TO_B)
    assert ROUTE not in client.pending
    assert client.held(ROUTE) == {"r": version(RC_A)}


@PROTOCOLS
def test_route_to_new_cluster_sends_nothing_of_rds_until_then(protocol: Protocol) -> None:
    client = envoy_client(protocol, ON_A)
    routes_before = sum(1 for response in client.log if response.type_url == ROUTE)
    round_(client, MOVED_TO_B)
    round_(client, MOVED_TO_B)
    # Two exchanges (cluster, endpoints) and not one RDS response, not even an empty one.
    assert sum(1 for response in client.log if response.type_url == ROUTE) == routes_before


# -- rule 3: what a held route names is kept until the route that left it is ACKed -------


@PROTOCOLS
def test_old_cluster_is_kept_until_the_route_leaving_it_is_acked(protocol: Protocol) -> None:
    client = envoy_client(protocol, ON_A)

    # CDS (+b), then EDS (b): a is neither removed nor dropped from full-state CDS.
    for _ in range(2):
        sent = client.poll(MOVED_TO_B)
        assert "a" not in client.removes(CLUSTER)
        assert "a" not in client.removes(ENDPOINT)
        if protocol == "sotw" and CLUSTER in sent:
            # Full state: the CDS response lists a again, at the version the client holds.
            assert client.offered(CLUSTER) == {"a": version(CL_A), "b": version(CL_B)}
        client.ack_all()
        assert set(client.held(CLUSTER)) == {"a", "b"}
        assert client.held(CLUSTER)["a"] == version(CL_A)

    # The route moves; while it is unanswered, a stays.
    assert client.poll(MOVED_TO_B) == [ROUTE]
    assert client.poll(MOVED_TO_B) == []
    client.ack(ROUTE)

    # The route that stopped naming a is ACKed: a goes now (SotW: CDS without it; Delta:
    # its removal), and the client drops its endpoints.
    sent = client.poll(MOVED_TO_B)
    assert sent[0] == CLUSTER, short(sent)
    assert client.removes(CLUSTER) == {"a"}
    client.ack_all()
    assert client.settle(MOVED_TO_B) == []
    assert client.held(CLUSTER) == {"b": version(CL_B)}
    assert client.held(ENDPOINT) == {"b": version(EP_B)}
    assert client.held(ROUTE) == {"r": version(RC_B)}


def test_old_endpoints_are_not_removed_while_a_held_cluster_names_them_delta() -> None:
    # A Delta client watching every endpoint: a's endpoints are not removed while it holds
    # cluster a (which warms on them); they go once cluster a is gone.
    client = Client("delta")
    client.subscribe(CLUSTER)
    client.subscribe(ENDPOINT)  # everything
    client.subscribe(LISTENER)
    client.subscribe(ROUTE, ["r"])
    client.settle(ON_A)
    endpoint_removals: list[tuple[set[str], set[str]]] = []
    for _ in range(10):
        sent = client.poll(MOVED_TO_B)
        if not sent:
            break
        if ENDPOINT in sent:
            endpoint_removals.append((client.removes(ENDPOINT), set(client.held(CLUSTER))))
        client.ack_all()
    assert any("a" in removed for removed, _ in endpoint_removals), endpoint_removals
    for removed, clusters in endpoint_removals:
        if "a" in removed:
            assert "a" not in clusters, "a's endpoints removed while cluster a was held"
    assert client.held(CLUSTER) == {"b": version(CL_B)}
    assert client.held(ENDPOINT) == {"b": version(EP_B)}


@PROTOCOLS
def test_nacked_route_keeps_the_old_cluster_and_the_new_one(protocol: Protocol) -> None:
    client = envoy_client(protocol, ON_A)
    round_(client, MOVED_TO_B)  # CDS +b
    round_(client, MOVED_TO_B)  # EDS b
    assert client.poll(MOVED_TO_B) == [ROUTE]
    client.nack(ROUTE)
    # The client kept r -> a: a stays, and b (in the snapshot) stays too; nothing is resent.
    for _ in range(3):
        assert client.poll(MOVED_TO_B) == []
    assert client.held(ROUTE) == {"r": version(RC_A)}
    assert set(client.held(CLUSTER)) == {"a", "b"}
    assert set(client.held(ENDPOINT)) == {"a", "b"}

    # A later snapshot moves the route to c: a still stays until that route is ACKed.
    for _ in range(10):
        sent = client.poll(MOVED_TO_C)
        if not sent:
            break
        if client.held(ROUTE) == {"r": version(RC_A)}:
            assert "a" not in client.removes(CLUSTER), short(sent)
        client.ack_all()
    assert client.held(ROUTE) == {"r": version(RC_C)}
    assert client.held(CLUSTER) == {"c": version(CL_C)}


# -- rules 2 and 3 count responses in flight: the client will apply them ------------------

ON_A_WITH_B = Snapshot([CL_A, EP_A, CL_B, EP_B, LS, RC_A])
ON_B_WITH_A = Snapshot([CL_A, EP_A, CL_B, EP_B, LS, RC_B])


@PROTOCOLS
def test_cluster_is_kept_while_an_unanswered_route_response_names_it(protocol: Protocol) -> None:
    client = envoy_client(protocol, ON_A_WITH_B)
    # The route moves to b (held and warm, so it goes at once) ...
    assert client.poll(ON_B_WITH_A) == [ROUTE]
    # ... and before the client answers, the next snapshot moves it back and deletes b.
    sent = client.poll(ON_A)
    # The client applies r -> b first (it was sent first): b must not go yet.
    assert "b" not in client.removes(CLUSTER), f"{short(sent)} removes b under r -> b"


@PROTOCOLS
def test_route_waits_while_an_unanswered_cluster_response_removes_its_cluster(
    protocol: Protocol,
) -> None:
    client = envoy_client(protocol, ON_A_WITH_B)
    # b is deleted (nothing refers to it) ...
    assert client.poll(ON_A)[0] == CLUSTER
    assert client.removes(CLUSTER) == {"b"}
    # ... and before the client answers, b comes back and the route moves to it.
    sent = client.poll(ON_B_WITH_A)
    # The client applies the removal of b first: the route must wait for b to be back.
    assert ROUTE not in sent, "r -> b sent behind a response that removes b"


# -- updates that do not change references are never held back ---------------------------


@PROTOCOLS
def test_endpoint_updates_are_not_held_back_while_a_route_waits(protocol: Protocol) -> None:
    client = envoy_client(protocol, ON_A)
    # The route moves to new cluster b (held back), and a's endpoints change meanwhile.
    moving = Snapshot([CL_A, EP_A2, CL_B, EP_B, LS, RC_B])
    sent = client.poll(moving)
    assert sent == [CLUSTER, ENDPOINT], short(sent)
    assert client.offered(ENDPOINT)["a"] == version(EP_A2)


@PROTOCOLS
def test_changes_that_keep_references_go_out_in_one_poll(protocol: Protocol) -> None:
    client = envoy_client(protocol, ON_A)
    # Cluster a changes, its endpoints change, the route gets a header but still names a:
    # nothing here points the client at something it lacks, so all of it goes at once.
    changed = Snapshot([CL_A2, EP_A2, LS, RC_A_HEADER])
    assert client.poll(changed) == [CLUSTER, ENDPOINT, ROUTE]
    assert client.offered(CLUSTER) == {"a": version(CL_A2)}
    assert client.offered(ENDPOINT) == {"a": version(EP_A2)}
    assert client.offered(ROUTE) == {"r": version(RC_A_HEADER)}
    client.ack_all()
    assert client.settle(changed) == []


@PROTOCOLS
def test_route_change_is_not_held_back_by_an_unanswered_cluster_update(
    protocol: Protocol,
) -> None:
    client = envoy_client(protocol, ON_A)
    sent = client.poll(Snapshot([CL_A2, EP_A, LS, RC_A]))
    assert sent[0] == CLUSTER, short(sent)
    # With that cluster update unanswered, a route change that still names a goes: the
    # client holds a (its old version), warm.
    assert client.poll(Snapshot([CL_A2, EP_A, LS, RC_A_HEADER])) == [ROUTE]
    assert client.offered(ROUTE) == {"r": version(RC_A_HEADER)}


# -- no deadlock: references the client does not ask for hold nothing back ----------------


@PROTOCOLS
def test_client_not_subscribed_to_clusters_is_not_held_back(protocol: Protocol) -> None:
    client = Client(protocol)
    client.subscribe(LISTENER)
    client.subscribe(ROUTE, ["r"])
    # The route names clusters the client never asked for on this stream.
    assert client.poll(ON_A) == [LISTENER, ROUTE]
    assert client.offered(ROUTE) == {"r": version(RC_A)}
    client.ack_all()
    assert client.poll(MOVED_TO_B) == [ROUTE]
    assert client.offered(ROUTE) == {"r": version(RC_B)}


@PROTOCOLS
def test_client_not_subscribed_to_endpoints_gets_route_once_cluster_is_held(
    protocol: Protocol,
) -> None:
    # No EDS subscription at all: a held cluster counts as warm.
    client = Client(protocol)
    client.subscribe(CLUSTER)
    client.subscribe(ROUTE, ["r"])
    client.settle(ON_A)
    assert client.poll(MOVED_TO_B) == [CLUSTER]
    client.ack(CLUSTER)
    assert client.poll(MOVED_TO_B) == [ROUTE]


@PROTOCOLS
def test_proxyless_client_is_not_held_back_by_a_cluster_it_has_not_asked_for(
    protocol: Protocol,
) -> None:
    client = Client(protocol, follow="grpc")
    client.check = False  # proxyless clients learn of c from the route and wait themselves
    client.subscribe(LISTENER, ["l"])
    client.subscribe(ROUTE, ["r"])
    client.subscribe(CLUSTER, ["a"])
    client.subscribe(ENDPOINT, ["a"])
    client.settle(ON_A)
    assert client.held(ROUTE) == {"r": version(RC_A)}

    # The route moves to c, which the client has not asked for: it cannot learn of c but
    # from the route, so the route goes at once; a, still named, is not removed.
    sent = client.poll(MOVED_TO_C)
    assert sent[-1] == ROUTE, short(sent)
    assert client.offered(ROUTE) == {"r": version(RC_C)}
    assert "a" not in client.removes(CLUSTER)
    assert "a" not in client.removes(ENDPOINT)
    client.ack_all()  # the route names c now: the client asks for cluster c, then its endpoints
    assert client.names[CLUSTER] == frozenset({"c"})
    history = client.settle(MOVED_TO_C)
    assert [sent[0] for sent in history] == [CLUSTER, ENDPOINT], history
    assert client.held(CLUSTER) == {"c": version(CL_C)}
    assert client.held(ENDPOINT) == {"c": version(EP_C)}


@PROTOCOLS
def test_proxyless_client_asking_for_old_and_new_cluster_keeps_old_until_route_ack(
    protocol: Protocol,
) -> None:
    client = Client(protocol)
    client.check = False  # proxyless clients learn of c from the route and wait themselves
    client.subscribe(LISTENER, ["l"])
    client.subscribe(ROUTE, ["r"])
    client.subscribe(CLUSTER, ["a"])
    client.subscribe(ENDPOINT, ["a"])
    client.settle(ON_A)
    sent = client.poll(MOVED_TO_C)
    assert sent[-1] == ROUTE, short(sent)
    assert CLUSTER not in sent
    # Having read the route, and before ACKing it, the client asks for c as well as a.
    client.subscribe(CLUSTER, ["a", "c"])
    assert client.poll(MOVED_TO_C) == [CLUSTER]
    assert "c" in client.offered(CLUSTER)
    assert "a" not in client.removes(CLUSTER), "a removed while the client's route names it"
    client.ack(CLUSTER)
    assert client.poll(MOVED_TO_C) == []
    client.ack(ROUTE)
    sent = client.poll(MOVED_TO_C)
    assert sent[0] == CLUSTER, short(sent)
    assert client.removes(CLUSTER) == {"a"}
    client.ack_all()
    assert client.held(CLUSTER) == {"c": version(CL_C)}
    assert client.held(ROUTE) == {"r": version(RC_C)}


# -- secrets before the clusters that use them --------------------------------------------


@PROTOCOLS
def test_secrets_go_before_clusters_that_reference_them(protocol: Protocol) -> None:
    client = Client(protocol)
    client.subscribe(CLUSTER)
    client.subscribe(SECRET, ["cert"])
    view = Snapshot([tls_cluster("s", certificates=["cert"]), secret("cert")])
    assert client.poll(view) == [SECRET]  # the cluster waits for its secret
    assert client.poll(view) == []
    client.ack(SECRET)
    assert client.poll(view) == [CLUSTER]
    assert client.offered(CLUSTER) == {"s": version(tls_cluster("s", certificates=["cert"]))}


@PROTOCOLS
def test_cluster_moving_to_a_new_secret_keeps_the_old_secret_until_acked(
    protocol: Protocol,
) -> None:
    client = Client(protocol)
    client.subscribe(SECRET, ["old", "new"])
    client.subscribe(CLUSTER)
    client.settle(Snapshot([tls_cluster("s", certificates=["old"]), secret("old")]))
    moved = Snapshot([tls_cluster("s", certificates=["new"]), secret("new")])
    assert client.poll(moved) == [SECRET]
    assert client.offered(SECRET) == {"new": version(secret("new"))}
    assert "old" not in client.removes(SECRET)
    assert client.poll(moved) == []
    client.ack(SECRET)
    assert client.poll(moved) == [CLUSTER]
    assert client.offered(CLUSTER) == {"s": version(tls_cluster("s", certificates=["new"]))}
    client.ack(CLUSTER)
    if protocol == "delta":  # the old secret is removed only now (SotW SDS never removes)
        assert client.poll(moved) == [SECRET]
        assert client.removes(SECRET) == {"old"}
        client.ack(SECRET)
    assert client.settle(moved) == []


# -- where ordering does not apply --------------------------------------------------------


@PROTOCOLS
def test_per_type_route_stream_is_never_ordered(protocol: Protocol) -> None:
    client = Client(protocol, type_url=ROUTE, ordered=True)
    client.subscribe(ROUTE, ["r"])
    # No cluster b anywhere on this stream: the route goes at once all the same.
    assert client.poll(MOVED_TO_B) == [ROUTE]
    assert client.offered(ROUTE) == {"r": version(RC_B)}


@PROTOCOLS
def test_per_type_cluster_stream_is_never_ordered(protocol: Protocol) -> None:
    cds = Client(protocol, type_url=CLUSTER, ordered=True)
    cds.subscribe(CLUSTER)
    cds.settle(ON_A)
    assert cds.poll(MOVED_TO_B) == [CLUSTER]
    assert cds.removes(CLUSTER) == {"a"}
    # A cluster whose secret this stream cannot know about goes at once too.
    sds_less = Client(protocol, type_url=CLUSTER, ordered=True)
    sds_less.subscribe(CLUSTER)
    view = Snapshot([tls_cluster("s", certificates=["cert"]), secret("cert")])
    assert sds_less.poll(view) == [CLUSTER]
    assert "s" in sds_less.offered(CLUSTER)


@PROTOCOLS
def test_unordered_ads_sends_everything_at_once(protocol: Protocol) -> None:
    """The negative control: with ``ordered=False`` the move is one burst of responses."""
    client = envoy_client(protocol, ON_A, ordered=False)
    sent = client.poll(MOVED_TO_B)
    assert CLUSTER in sent
    assert ROUTE in sent
    assert client.offered(ROUTE) == {"r": version(RC_B)}
    assert "a" in client.removes(CLUSTER)
    # Accepting it leaves the client routing to a cluster it does not have warm.
    client.ack_all()
    assert client.dangling()


@PROTOCOLS
def test_unordered_ads_sends_route_before_its_cluster_is_held(protocol: Protocol) -> None:
    client = Client(protocol, ordered=False)
    client.subscribe(ROUTE, ["r"])
    client.subscribe(CLUSTER)
    assert client.poll(ON_A) == [CLUSTER, ROUTE]


@PROTOCOLS
def test_reference_to_something_the_server_lacks_holds_nothing_back(protocol: Protocol) -> None:
    # Liveness: a route naming a cluster the snapshot does not have can never be satisfied,
    # so it is not withheld (else it would block every later change of that route).
    client = envoy_client(protocol, ON_A)
    client.check = False
    dangling = Snapshot([CL_A, EP_A, LS, RC_B])
    assert client.poll(dangling) == [ROUTE]
    assert client.offered(ROUTE) == {"r": version(RC_B)}


# -- all rules at once, under arbitrary interleavings -------------------------------------

_PORTS = {"a": 1, "b": 2, "c": 3}


def _world(route_to: str, others: frozenset[str], endpoints: int) -> Snapshot:
    """Listener l -> route r -> ``route_to``; also the clusters ``others``; every cluster
    with endpoints of generation ``endpoints``."""
    resources: list[object] = [LS, route_configuration("r", [("/", route_to)])]
    for name in sorted(others | {route_to}):
        resources.append(eds_cluster(name))
        resources.append(load_assignment(name, [(f"10.0.{endpoints}.{_PORTS[name]}", 80)]))
    return Snapshot(resources)


_worlds = st.builds(
    _world,
    st.sampled_from(sorted(_PORTS)),
    st.frozensets(st.sampled_from(sorted(_PORTS))),
    st.integers(0, 1),
)
_TYPES = st.sampled_from([CLUSTER, ENDPOINT, LISTENER, ROUTE])
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("snapshot"), _worlds),
        st.tuples(st.just("poll"), st.none()),
        st.tuples(st.just("ack"), _TYPES),
    ),
    max_size=40,
)
_steps_with_nacks = st.lists(
    st.one_of(
        st.tuples(st.just("snapshot"), _worlds),
        st.tuples(st.just("poll"), st.none()),
        st.tuples(st.just("ack"), _TYPES),
        st.tuples(st.just("nack"), _TYPES),
    ),
    max_size=40,
)


def _run(
    protocol: Protocol, first: Snapshot, steps: list[tuple[str, object]], *, racing: bool
) -> None:
    """Drive an Envoy-like client through ``steps``; then let it settle on the last view.

    Unless ``racing``, a snapshot step waits until the client has answered everything (the
    server then knows exactly what the client holds)."""
    client = envoy_client(protocol, first)
    view = first
    for action, argument in steps:
        if action == "snapshot":
            assert isinstance(argument, Snapshot)
            if racing or not client.pending:
                view = argument
        elif action == "poll":
            client.poll(view)
        elif argument in client.pending:
            assert isinstance(argument, str)
            if action == "ack":
                client.ack(argument)
            else:
                client.nack(argument)
    client.ack_all()
    client.settle(view)
    if any(action == "nack" for action, _ in steps):
        return  # what was rejected is not sent again: the client may rightly lag behind
    assert client.held(CLUSTER) == _versions(view, CLUSTER)
    assert client.held(ENDPOINT) == _versions(view, ENDPOINT)
    assert client.held(LISTENER) == _versions(view, LISTENER)
    assert client.held(ROUTE) == _versions(view, ROUTE)


@PROTOCOLS
@given(first=_worlds, steps=_steps)
def test_client_never_holds_a_dangling_reference_and_converges(
    protocol: Protocol, first: Snapshot, steps: list[tuple[str, object]]
) -> None:
    """Snapshot changes (each once the client has caught up), polls and per-type ACKs in any
    order: after every ACK the client holds no route to a cluster it lacks (or lacks the
    endpoints of), and once the changes stop it holds exactly the last snapshot (no
    deadlock, nothing kept for ever)."""
    _run(protocol, first, steps, racing=False)


# Snapshot changes that race the client's answers: the server has responses in flight that
# the client will apply, whatever the server last saw ACKed.
@PROTOCOLS
@example(
    first=_world("a", frozenset({"b"}), 0),
    steps=[
        ("snapshot", _world("b", frozenset({"a"}), 0)),
        ("poll", None),
        ("snapshot", _world("a", frozenset(), 0)),
        ("poll", None),
    ],
)
@example(
    first=_world("a", frozenset({"b"}), 0),
    steps=[
        ("snapshot", _world("a", frozenset(), 0)),
        ("poll", None),
        ("snapshot", _world("b", frozenset({"a"}), 0)),
        ("poll", None),
    ],
)
@given(first=_worlds, steps=_steps)
def test_client_never_holds_a_dangling_reference_when_changes_race_its_acks(
    protocol: Protocol, first: Snapshot, steps: list[tuple[str, object]]
) -> None:
    """As above, but snapshots change while responses are in flight (unanswered)."""
    _run(protocol, first, steps, racing=True)


@PROTOCOLS
@given(first=_worlds, steps=_steps_with_nacks)
def test_client_never_holds_a_dangling_reference_when_it_rejects_responses(
    protocol: Protocol, first: Snapshot, steps: list[tuple[str, object]]
) -> None:
    """As above, with NACKs of any type thrown in: still nothing dangling after any ACK,
    and the exchange still comes to rest."""
    _run(protocol, first, steps, racing=True)
