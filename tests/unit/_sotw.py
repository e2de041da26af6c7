"""Driving a :class:`SotwServer` by hand, for the SotW state-machine tests (test_sotw_*.py).

An ACK here repeats the client's subscription (SotW requests carry the full desired set);
:func:`settle` ACKs everything the machine sends until it is quiet.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdscore import Snapshot, StreamLimits
from xdscore.builders import http_listener
from xdscore.protocol import SotwResponse, SotwServer

from ..factories import NODE, nonce_source, sotw_ack, sotw_nack, sotw_request

req = sotw_request
"""A SotW request record (:func:`tests.factories.sotw_request`)."""

LS_2B = http_listener("l2", 10003, "r2")
"""Listener ``l2`` changed (another port)."""


def ads(limits: StreamLimits | None = None) -> SotwServer:
    """A machine for an ADS stream."""
    return SotwServer(nonce_source=nonce_source(), limits=limits)


def per_type(type_url: str) -> SotwServer:
    """A machine for ``type_url``'s own discovery service."""
    return SotwServer(nonce_source=nonce_source(), type_url=type_url)


def first(
    machine: SotwServer, type_url: str, names: Iterable[str] = (), *, version: str = ""
) -> list[object]:
    """The first request of a type; carries the node only if the stream has none yet."""
    node = NODE if machine.node is None else None
    return list(machine.receive(req(type_url, names, version=version, node=node)))


def ack(machine: SotwServer, response: SotwResponse, names: Iterable[str] = ()) -> list[object]:
    """The client ACKs ``response``, asking for ``names``; the events."""
    return list(machine.receive(sotw_ack(response, names)))


def nack(
    machine: SotwServer,
    response: SotwResponse,
    names: Iterable[str] = (),
    *,
    held: str = "",
) -> list[object]:
    """The client NACKs ``response``, still holding version ``held``; the events."""
    return list(machine.receive(sotw_nack(response, names, held=held)))


def echo_names(machine: SotwServer, type_url: str) -> tuple[str, ...]:
    """The resource_names a client repeats to keep its current subscription."""
    subscription = machine.type_states()[type_url].subscription
    if subscription.legacy:
        return ()
    wildcard = ("*",) if subscription.wildcard else ()
    return wildcard + tuple(sorted(subscription.names))


def settle(machine: SotwServer, view: Snapshot, limit: int = 20) -> list[SotwResponse]:
    """Poll and ACK everything until nothing more is sent; every response, in order."""
    sent: list[SotwResponse] = []
    for _ in range(limit):
        responses = machine.poll(view)
        if not responses:
            return sent
        sent.extend(responses)
        for response in responses:
            ack(machine, response, echo_names(machine, response.type_url))
    raise AssertionError(f"still sending after {limit} rounds")


def names(response: SotwResponse) -> list[str]:
    """The names of the resources ``response`` carries, in order."""
    return list(response.selection.resources)
