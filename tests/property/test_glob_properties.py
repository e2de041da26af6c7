"""Glob collections (invariant 40) under any sequence of subscriptions and cache changes.

A Delta server machine serves LEDS endpoints from a :class:`~xdscore.LinearCache` (so later
answers go through ``changed_since``) or from snapshots. The client, like Envoy, applies every
response (resources added, names removed), ACKs it, and drops by itself what it no longer
wants after an unsubscribe (no answer is owed for that, 29). The model decides membership from
the strings alone, written here from xRFC TP1 rather than from ``collection_of``: a glob
``<prefix>/*?<params>`` holds ``<prefix>/<id>?<params>`` where ``<id>`` has no ``/`` and the
(sorted) parameters are the same; ``*`` (the wildcard, subscribed and unsubscribed beside
the globs) holds everything.

Named invariants, checked after every step:

* ``inv40_only_wanted_resources_are_sent``: every resource sent is wanted by the model at the
  time it is sent;
* ``inv22_well_formed``: no duplicates, no name both sent and removed;
* ``inv40_client_holds_exactly_what_it_wants``: once the machine is quiet the client holds
  exactly the cache's wanted resources, at their current versions.
"""

from __future__ import annotations

from envoy.config.endpoint.v3 import endpoint_components_pb2
from hypothesis import given, settings
from hypothesis import strategies as st

from xdscore import LBENDPOINT, LinearCache, Resource, Snapshot, make_resource
from xdscore.protocol import DeltaResponse, DeltaServer, ResourceView
from xdscore.wire import canonical_name

from ..factories import NODE, delta_ack, delta_request, nonce_source

AUTHORITY = "xdstp://xdscore.test/envoy.config.endpoint.v3.LbEndpoint"
MEMBERS = [
    f"{AUTHORITY}/{path}"
    for path in (
        "a/x",
        "a/y",
        "b/x",
        "a/x/deep",
        "a/z?zone=z1",
        "a/z?app=web&zone=z1",
        "top",
    )
]
GLOBS = [f"{AUTHORITY}/{path}" for path in ("a/*", "b/*", "a/*?zone=z1", "*", "a/x/*")]
NAMES = [canonical_name(name) for name in MEMBERS + GLOBS] + ["*"]


def model_wants(subscribed: set[str], name: str) -> bool:
    """TP1 glob membership, from the strings: same parameters, one more path segment (or
    everything, under the wildcard ``*``)."""
    if name in subscribed or "*" in subscribed:
        return True
    path, _, params = name.partition("?")
    for glob in subscribed:
        glob_path, _, glob_params = glob.partition("?")
        if not glob_path.endswith("/*") or glob_params != params:
            continue
        prefix = glob_path[:-1]
        if path.startswith(prefix) and "/" not in path[len(prefix) :]:
            return True
    return False


def endpoint(name: str, port: int) -> Resource:
    lb_endpoint = endpoint_components_pb2.LbEndpoint()
    lb_endpoint.endpoint.address.socket_address.address = "10.0.0.1"
    lb_endpoint.endpoint.address.socket_address.port_value = port
    return make_resource(lb_endpoint, name=name)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("subscribe"), st.sampled_from(NAMES)),
        st.tuples(st.just("unsubscribe"), st.sampled_from(NAMES)),
        st.tuples(st.just("put"), st.sampled_from(MEMBERS), st.integers(1, 3)),
        st.tuples(st.just("delete"), st.sampled_from(MEMBERS)),
    ),
    max_size=25,
)


class Client:
    """What an Envoy-like client holds, and the checks on each response it gets."""

    def __init__(self, machine: DeltaServer) -> None:
        self.machine = machine
        self.subscribed: set[str] = set()
        self.held: dict[str, str] = {}

    def apply(self, response: DeltaResponse) -> None:
        names = [r.name for r in response.resources]
        assert len(names) == len(set(names)), f"inv22: duplicates in {response}"
        assert not set(names) & set(response.removed), f"inv22: sent and removed: {response}"
        for resource in response.resources:
            assert model_wants(self.subscribed, resource.name), (
                f"inv40: {resource.name} sent, not wanted by {sorted(self.subscribed)}"
            )
            self.held[resource.name] = resource.version
        for name in response.removed:
            self.held.pop(name, None)
        self.machine.receive(delta_ack(response))

    def settle(self, view: ResourceView) -> None:
        for _ in range(10):
            responses = self.machine.poll(view)
            if not responses:
                return
            for response in responses:
                self.apply(response)
        raise AssertionError("the machine never quiesced")

    def change(self, subscribe: list[str], unsubscribe: list[str]) -> None:
        self.subscribed |= set(subscribe)
        self.subscribed -= set(unsubscribe)
        self.held = {n: v for n, v in self.held.items() if model_wants(self.subscribed, n)}
        self.machine.receive(delta_request(LBENDPOINT, subscribe, unsubscribe))


@settings(max_examples=150, deadline=None)
@given(
    first=st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True),
    steps=operations,
    linear=st.booleans(),
)
def test_inv40_client_holds_exactly_what_it_wants(
    first: list[str], steps: list[tuple[object, ...]], linear: bool
) -> None:
    cache = LinearCache(LBENDPOINT, [endpoint(name, 1) for name in MEMBERS[::2]])
    machine = DeltaServer(nonce_source=nonce_source(""))
    client = Client(machine)
    client.subscribed = set(first)
    machine.receive(delta_request(LBENDPOINT, first, node=NODE))

    def view() -> ResourceView:
        """The linear cache's view (answers through ``changed_since``) or a snapshot of it
        (no history: every answer is the full comparison)."""
        current = cache.view()
        if linear:
            return current
        resources = current.resources(LBENDPOINT)
        assert resources is not None
        return Snapshot(resources.values(), types=[LBENDPOINT])

    client.settle(view())
    for step in steps:
        kind, name = step[0], str(step[1])
        if kind == "subscribe":
            client.change([name], [])
        elif kind == "unsubscribe":
            client.change([], [name])
        elif kind == "put":
            cache.set_resource(endpoint(name, int(str(step[2]))))
        else:
            cache.delete_resource(name)
        client.settle(view())
        current = cache.view().resources(LBENDPOINT)
        assert current is not None
        expected = {n: r.version for n, r in current.items() if model_wants(client.subscribed, n)}
        assert client.held == expected, (sorted(client.subscribed), steps)
