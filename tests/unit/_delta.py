"""Driving a :class:`DeltaServer` by hand, for the Delta state-machine tests (test_delta_*.py).

An ACK here changes the subscription only by the lists it is given (Delta requests carry
changes); :func:`settle` ACKs everything the machine sends until it is quiet, checking that
each response is well formed on the way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from xdscore import Node, StreamLimits
from xdscore.builders import eds_cluster, load_assignment
from xdscore.protocol import DeltaResponse, DeltaServer, ResourceView

from ..factories import NODE, delta_ack, delta_nack, delta_request, nonce_source

req = delta_request
"""A Delta request record (:func:`tests.factories.delta_request`)."""

SAME_ID_OTHER_NODE = Node(id="node-1", raw=b"\n\x06node-1\x12\x01x")
"""A node with :data:`~tests.factories.NODE`'s id and another encoding: a different node."""

CL_B2 = eds_cluster("b", connect_timeout=7.0)
CL_SVC = eds_cluster("s", service_name="svc-s")
CL_SVC2 = eds_cluster("s", service_name="svc-s", connect_timeout=3.0)
EP_SVC = load_assignment("svc-s", [("10.0.3.1", 80)])


def stream(
    type_url: str | None = None,
    limits: StreamLimits | None = None,
    *,
    ordered: bool = True,
) -> DeltaServer:
    """A machine for an ADS stream, or for ``type_url``'s own discovery service."""
    return DeltaServer(
        nonce_source=nonce_source(""), type_url=type_url, limits=limits, ordered=ordered
    )


def start(
    machine: DeltaServer,
    type_url: str,
    subscribe: Iterable[str] = (),
    *,
    initial: Mapping[str, str] | None = None,
) -> list[object]:
    """The first request of a type; carries the node only if the stream has none yet."""
    node = NODE if machine.node is None else None
    return list(machine.receive(req(type_url, subscribe, initial=initial, node=node)))


def change(
    machine: DeltaServer,
    type_url: str,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
    *,
    nonce: str = "",
) -> list[object]:
    """A spontaneous subscription change (no nonce unless given)."""
    return list(machine.receive(req(type_url, subscribe, unsubscribe, nonce=nonce)))


def ack(
    machine: DeltaServer,
    response: DeltaResponse,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
) -> list[object]:
    """The client ACKs ``response`` (changing the subscription by the lists); the events."""
    return list(machine.receive(delta_ack(response, subscribe, unsubscribe)))


def nack(
    machine: DeltaServer,
    response: DeltaResponse,
    subscribe: Iterable[str] = (),
    unsubscribe: Iterable[str] = (),
) -> list[object]:
    """The client NACKs ``response`` (changing the subscription by the lists); the events."""
    return list(machine.receive(delta_nack(response, subscribe, unsubscribe)))


def sent(response: DeltaResponse) -> list[str]:
    """The names of the resources ``response`` carries, in order."""
    return [resource.name for resource in response.resources]


def sent_versions(response: DeltaResponse) -> dict[str, str]:
    return {resource.name: resource.version for resource in response.resources}


def assert_well_formed(response: DeltaResponse) -> None:
    """Invariants 4, 22 and 24 for one response."""
    names = sent(response)
    assert response.nonce
    assert len(names) == len(set(names)), f"duplicate resources in {response}"
    assert len(response.removed) == len(set(response.removed)), f"duplicate removals {response}"
    assert not set(names) & set(response.removed), f"name both sent and removed: {response}"
    assert all(resource.type_url == response.type_url for resource in response.resources)


def settle(machine: DeltaServer, view: ResourceView | None) -> list[DeltaResponse]:
    """Poll and ACK until nothing more is due; every response sent on the way."""
    out: list[DeltaResponse] = []
    for _ in range(20):
        responses = machine.poll(view)
        if not responses:
            return out
        for response in responses:
            assert_well_formed(response)
            ack(machine, response)
        out.extend(responses)
    raise AssertionError(f"the machine never quiesced: {out}")
