"""The code's own transition table (``xdscore.protocol._state``), cell by cell.

For every ``(protocol, phase, input)`` in ``TRANSITIONS`` (one test each), hypothesis
builds a machine whose cluster type is in that phase, feeds it a request of that input (or
polls, for ``RESPOND``) with drawn names, and checks that the machine did what the cell
says: the next phase, and the events its effects imply. Every cell missing from the table
is a ``LocalProtocolError`` that names the type URL, the phase and the input; and no
request a client can send leads into a missing cell.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from xdscore import CLUSTER, GrpcStatus, LocalProtocolError, Snapshot
from xdscore.builders import eds_cluster, load_assignment
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DeltaServer,
    DiscoveryRequest,
    ErrorDetail,
    Event,
    ResponseAcked,
    ResponseNacked,
    SotwServer,
    StaleNonceSeen,
    SubscriptionChanged,
)
from xdscore.protocol._state import (
    TRANSITIONS,
    Effect,
    Input,
    Phase,
    ProtocolName,
    classify,
    step,
)
from xdscore.wire import make_node

from ..factories import nonce_source

NODE = make_node(id="transitions")
ERROR = ErrorDetail(code=GrpcStatus.INTERNAL, message="rejected")
VIEW = Snapshot([eds_cluster("a"), eds_cluster("b"), load_assignment("a", [("10.0.0.1", 80)])])
CHANGED = Snapshot(
    [
        eds_cluster("a", connect_timeout=3.0),
        eds_cluster("b"),
        load_assignment("a", [("10.0.0.1", 80)]),
    ]
)
PROTOCOLS: tuple[ProtocolName, ...] = ("sotw", "delta")
CELLS = sorted(TRANSITIONS, key=lambda key: (key[0], key[1].value, key[2].value))
MISSING = [
    (protocol, phase, given)
    for protocol, phase, given in itertools.product(PROTOCOLS, Phase, Input)
    if (protocol, phase, given) not in TRANSITIONS
]
NAMES = st.lists(st.sampled_from(["a", "b", "*"]), max_size=3, unique=True).map(tuple)


@attrs.define
class Harness:
    """A machine and how to speak to it in one protocol."""

    protocol: ProtocolName
    machine: Any

    @classmethod
    def new(cls, protocol: ProtocolName) -> Harness:
        server = SotwServer if protocol == "sotw" else DeltaServer
        machine: Any = server(nonce_source=nonce_source())
        return cls(protocol, machine)

    def request(
        self,
        names: tuple[str, ...],
        nonce: str = "",
        error: ErrorDetail | None = None,
        version: str = "",
    ) -> DiscoveryRequest | DeltaDiscoveryRequest:
        if self.protocol == "sotw":
            return DiscoveryRequest(
                type_url=CLUSTER, resource_names=names, response_nonce=nonce,
                error_detail=error, node=NODE, version_info=version,
            )  # fmt: skip
        return DeltaDiscoveryRequest(
            type_url=CLUSTER, resource_names_subscribe=names, response_nonce=nonce,
            error_detail=error, node=NODE,
        )  # fmt: skip

    def enter(self, phase: Phase) -> None:
        """Drive the cluster type into ``phase`` with real requests and responses."""
        if phase is Phase.IDLE:
            return
        self.machine.receive(self.request(("a",)))
        if phase is Phase.REQUESTED:
            return
        (response,) = self.machine.poll(VIEW)
        if phase is Phase.SENT:
            return
        error = ERROR if phase is Phase.NACKED else None
        self.machine.receive(self.request(self.names(), response.nonce, error))

    def names(self) -> tuple[str, ...]:
        """What repeats the current subscription (SotW); Delta subscribes nothing new."""
        if self.protocol == "delta":
            return ()
        subscription = self.machine.subscription(CLUSTER)
        return tuple(sorted(subscription.names)) + (("*",) if subscription.wildcard else ())

    def phase(self) -> Phase:
        state = self.machine.type_state(CLUSTER)
        return Phase.IDLE if state is None else state.phase

    def input_request(
        self, given: Input, names: tuple[str, ...]
    ) -> DiscoveryRequest | DeltaDiscoveryRequest:
        """A request that is ``given`` to the cluster type now (``names`` where free)."""
        state = self.machine.type_state(CLUSTER)
        outstanding = state.outstanding.nonce if state and state.outstanding else ""
        latest = state.latest_nonce if state else ""
        if given is Input.DUPLICATE:
            return self.request(state.requested, latest, version=state.held_version or "")
        nonce, error = {
            Input.REQUEST: ("", None),
            Input.ACK: (outstanding, None),
            Input.NACK: (outstanding, ERROR),
            Input.STALE: ("not-the-latest", None),
            Input.ECHO: (latest, None),
        }[given]
        # A version no response had: an echo is then never taken for a duplicate.
        return self.request(names, nonce, error, version="not-a-version")

    def repeats(self, request: DiscoveryRequest | DeltaDiscoveryRequest) -> bool:
        """What the SotW machine reads as repeating the type's previous request."""
        state = self.machine.type_state(CLUSTER)
        return (
            isinstance(request, DiscoveryRequest)
            and state is not None
            and request.resource_names == state.requested
            and request.version_info == (state.held_version or "")
        )


def _codes(events: list[Event]) -> set[type]:
    return {type(event) for event in events}


@pytest.mark.parametrize("cell", CELLS, ids=[f"{p}-{a.name}-{b.name}" for p, a, b in CELLS])
@given(names=NAMES)
def test_the_machine_does_what_its_cell_says(
    cell: tuple[ProtocolName, Phase, Input], names: tuple[str, ...]
) -> None:
    protocol, phase, given_input = cell
    expected = TRANSITIONS[cell]
    harness = Harness.new(protocol)
    harness.enter(phase)
    assert harness.phase() is phase
    where = f"{protocol} {phase.name} + {given_input.name}"
    if given_input is Input.RESPOND:
        responses = harness.machine.poll(CHANGED)
        assert [r.type_url for r in responses] == [CLUSTER], where
        assert harness.phase() is expected.next, where
        return
    before = harness.machine.subscription(CLUSTER)
    request = harness.input_request(given_input, names)
    state = harness.machine.type_state(CLUSTER)
    outstanding = state.outstanding if state is not None else None
    assert (
        classify(
            phase,
            request.response_nonce,
            error=request.error_detail is not None,
            latest_nonce=state.latest_nonce if state else "",
            outstanding_nonce=outstanding.nonce if outstanding else None,
            repeat=harness.repeats(request),
        )
        is given_input
    ), where
    events = harness.machine.receive(request)
    kinds = _codes(events)
    assert harness.phase() is expected.next, where
    assert (StaleNonceSeen in kinds) == (Effect.REPORT_STALE in expected.effects), where
    assert (ResponseAcked in kinds) == (Effect.ACCEPT in expected.effects), where
    assert (ResponseNacked in kinds) == (Effect.REJECT in expected.effects), where
    after = harness.machine.subscription(CLUSTER)
    if Effect.SUBSCRIBE not in expected.effects:
        assert SubscriptionChanged not in kinds, where
        assert after == before, where
    else:
        assert (SubscriptionChanged in kinds) == (after != before), where
    if Effect.OWE in expected.effects:
        assert harness.machine.type_state(CLUSTER).owed, where


@pytest.mark.parametrize(
    ("protocol", "phase", "given_input"),
    MISSING,
    ids=[f"{p}-{a.name}-{b.name}" for p, a, b in MISSING],
)
def test_a_missing_cell_is_a_local_error_naming_it(
    protocol: ProtocolName, phase: Phase, given_input: Input
) -> None:
    with pytest.raises(LocalProtocolError) as raised:
        step(protocol, CLUSTER, phase, given_input)
    message = str(raised.value)
    assert CLUSTER in message
    assert phase.name in message
    assert given_input.name in message


@given(
    protocol=st.sampled_from(PROTOCOLS),
    phase=st.sampled_from(list(Phase)),
    nonce=st.sampled_from(["", "outstanding", "latest", "n1", "n2", "n3", "other"]),
    error=st.booleans(),
    names=NAMES,
)
def test_no_request_leads_into_a_missing_cell(
    protocol: ProtocolName, phase: Phase, nonce: str, error: bool, names: tuple[str, ...]
) -> None:
    harness = Harness.new(protocol)
    harness.enter(phase)
    state = harness.machine.type_state(CLUSTER)
    if nonce == "outstanding":
        nonce = state.outstanding.nonce if state and state.outstanding else ""
    elif nonce == "latest":
        nonce = state.latest_nonce if state else ""
    harness.machine.receive(harness.request(names, nonce, ERROR if error else None))
    assert harness.phase() is not Phase.IDLE
    for response in harness.machine.poll(CHANGED):
        assert response.type_url == CLUSTER
    assert harness.phase() in {Phase.REQUESTED, Phase.SENT, Phase.ACKED, Phase.NACKED}
