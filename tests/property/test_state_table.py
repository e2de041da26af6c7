"""Every (state, input) cell of the SotW and Delta server machines, against a written table.

Rows are per-type states of the Cluster type: ``fresh`` (no request on the stream yet),
``other_type`` (the stream only asked for listeners), and every phase (``requested``: asked,
nothing sent; ``outstanding``: a response awaits its ACK; ``acked``; ``nacked``) crossed
with every subscription shape (``legacy`` wildcard, explicit ``wildcard``, ``names`` = a,
``empty`` = a then nothing). Columns are inputs, each the request a client could send next:

* ``first``: no nonce, no names (Delta: and ``initial_resource_versions`` {a: current});
* ``ack`` / ``nack``: echoing the latest nonce (one never sent when there is none), the same
  names, without / with ``error_detail``;
* ``stale``: a nonce that is not the latest;
* ``stale_sub``: the same with the names becoming b (Delta: subscribing b): SotW ignores it
  once a response of the type was sent (a newer request will follow) and applies it before,
  Delta always applies it (inv. 26);
* ``no_nonce``: no nonce, the same names (Delta: nothing at all);
* ``sub_change``: the names become b (Delta: subscribe b, no nonce);
* ``new_node``: ``no_nonce`` from another node;
* ``no_type``: ``ack`` without a type URL;
* ``wrong_type``: ``ack`` for listeners.

A cell lists the events (``I`` NodeIdentified, ``X`` StaleNonceSeen, ``A`` ResponseAcked,
``N`` ResponseNacked, ``S`` SubscriptionChanged), ``!`` when a cluster response is due on
the next poll, ``.`` for nothing at all, and ``E`` for a RemoteProtocolError with
INVALID_ARGUMENT, after which the machine is in ERROR and refuses to go on. ``-``: the state
does not exist on that kind of stream. The view holds clusters a and b (with endpoints) and
listener l. The expectations come from XDS_INVARIANTS.md and the machines' docstrings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from xdscore import (
    CLUSTER,
    LISTENER,
    GrpcStatus,
    LocalProtocolError,
    RemoteProtocolError,
    ResponseAcked,
    ResponseNacked,
    Snapshot,
    make_resource,
)
from xdscore.builders import eds_cluster, http_listener, load_assignment
from xdscore.protocol import (
    DeltaDiscoveryRequest,
    DeltaServer,
    DiscoveryRequest,
    ErrorDetail,
    Event,
    NodeIdentified,
    SotwServer,
    StaleNonceSeen,
    StreamState,
    SubscriptionChanged,
)
from xdscore.wire import make_node

from ..factories import nonce_source

NODE = make_node(id="table")
OTHER_NODE = make_node(id="someone-else")
ERROR = ErrorDetail(code=GrpcStatus.INTERNAL, message="rejected")
VIEW = Snapshot(
    [
        eds_cluster("a"),
        eds_cluster("b"),
        load_assignment("a", [("10.0.0.1", 80)]),
        load_assignment("b", [("10.0.0.2", 80)]),
        http_listener("l", 10000, "r"),
    ]
)
VERSION_A = make_resource(eds_cluster("a")).version

INPUTS = (
    "first",
    "ack",
    "nack",
    "stale",
    "stale_sub",
    "no_nonce",
    "sub_change",
    "new_node",
    "no_type",
    "wrong_type",
)

SOTW_ADS = """
                     first ack nack stale stale_sub no_nonce sub_change new_node no_type wrong_type
fresh                IS!   IS! IS!  IS!   IS!       IS!      IS!        IS!      E       IS
other_type           S!    S!  S!   S!    S!        S!       S!         E        E       X
requested/legacy     !     X!  X!   X!    SX!       !        SX!        E        E       S!
requested/wildcard   S!    X!  X!   X!    SX!       !        SX!        E        E       S!
requested/names      S!    X!  X!   X!    SX!       !        SX!        E        E       S!
requested/empty      !     X!  X!   X!    SX!       !        SX!        E        E       S!
outstanding/legacy   .     A   N    X     X         .        AS!        E        E       S
outstanding/wildcard S     A   N    X     X         .        AS!        E        E       S
outstanding/names    S     A   N    X     X         .        AS!        E        E       S
outstanding/empty    .     A   N    X     X         .        AS!        E        E       S
acked/legacy         !     .   !    X     X         !        S!         E        E       S
acked/wildcard       S!    .   !    X     X         !        S!         E        E       S
acked/names          S!    .   !    X     X         !        S!         E        E       S
acked/empty          !     .   !    X     X         !        S!         E        E       S
nacked/legacy        .     .   .    X     X         .        S!         E        E       S
nacked/wildcard      S!    .   .    X     X         .        S!         E        E       S
nacked/names         S!    .   .    X     X         .        S!         E        E       S
nacked/empty         .     .   .    X     X         .        S!         E        E       S
"""

SOTW_PER_TYPE = """
                     first ack nack stale stale_sub no_nonce sub_change new_node no_type wrong_type
fresh                IS!   IS! IS!  IS!   IS!       IS!      IS!        IS!      IS!     E
other_type           -     -   -    -     -         -        -          -        -       -
requested/legacy     !     X!  X!   X!    SX!       !        SX!        E        X!      E
requested/wildcard   S!    X!  X!   X!    SX!       !        SX!        E        X!      E
requested/names      S!    X!  X!   X!    SX!       !        SX!        E        X!      E
requested/empty      !     X!  X!   X!    SX!       !        SX!        E        X!      E
outstanding/legacy   .     A   N    X     X         .        AS!        E        A       E
outstanding/wildcard S     A   N    X     X         .        AS!        E        A       E
outstanding/names    S     A   N    X     X         .        AS!        E        A       E
outstanding/empty    .     A   N    X     X         .        AS!        E        A       E
acked/legacy         !     .   !    X     X         !        S!         E        .       E
acked/wildcard       S!    .   !    X     X         !        S!         E        .       E
acked/names          S!    .   !    X     X         !        S!         E        .       E
acked/empty          !     .   !    X     X         !        S!         E        .       E
nacked/legacy        .     .   .    X     X         .        S!         E        .       E
nacked/wildcard      S!    .   .    X     X         .        S!         E        .       E
nacked/names         S!    .   .    X     X         .        S!         E        .       E
nacked/empty         .     .   .    X     X         .        S!         E        .       E
"""

DELTA_ADS = """
                     first ack nack stale stale_sub no_nonce sub_change new_node no_type wrong_type
fresh                IS!   IS! IS!  IS!   IS!       IS!      IS!        IS!      E       IS
other_type           S!    S!  S!   S!    S!        S!       S!         E        E       X
requested/legacy     !     X!  X!   X!    SX!       !        S!         E        E       S!
requested/wildcard   !     X!  X!   X!    SX!       !        S!         E        E       S!
requested/names      !     X!  X!   X!    SX!       !        S!         E        E       S!
requested/empty      .     X   X    X     SX!       .        S!         E        E       S
outstanding/legacy   .     A   N    X     SX        .        S          E        E       S
outstanding/wildcard .     A   N    X     SX        .        S          E        E       S
outstanding/names    .     A   N    X     SX        .        S          E        E       S
outstanding/empty    .     A   N    X     SX        .        S          E        E       S
acked/legacy         .     X   X    X     SX!       .        S!         E        E       S
acked/wildcard       .     X   X    X     SX!       .        S!         E        E       S
acked/names          .     X   X    X     SX!       .        S!         E        E       S
acked/empty          .     X   X    X     SX!       .        S!         E        E       S
nacked/legacy        .     X   X    X     SX!       .        S!         E        E       S
nacked/wildcard      .     X   X    X     SX!       .        S!         E        E       S
nacked/names         .     X   X    X     SX!       .        S!         E        E       S
nacked/empty         .     X   X    X     SX!       .        S!         E        E       S
"""

DELTA_PER_TYPE = """
                     first ack nack stale stale_sub no_nonce sub_change new_node no_type wrong_type
fresh                IS!   IS! IS!  IS!   IS!       IS!      IS!        IS!      IS!     E
other_type           -     -   -    -     -         -        -          -        -       -
requested/legacy     !     X!  X!   X!    SX!       !        S!         E        X!      E
requested/wildcard   !     X!  X!   X!    SX!       !        S!         E        X!      E
requested/names      !     X!  X!   X!    SX!       !        S!         E        X!      E
requested/empty      .     X   X    X     SX!       .        S!         E        X       E
outstanding/legacy   .     A   N    X     SX        .        S          E        A       E
outstanding/wildcard .     A   N    X     SX        .        S          E        A       E
outstanding/names    .     A   N    X     SX        .        S          E        A       E
outstanding/empty    .     A   N    X     SX        .        S          E        A       E
acked/legacy         .     X   X    X     SX!       .        S!         E        X       E
acked/wildcard       .     X   X    X     SX!       .        S!         E        X       E
acked/names          .     X   X    X     SX!       .        S!         E        X       E
acked/empty          .     X   X    X     SX!       .        S!         E        X       E
nacked/legacy        .     X   X    X     SX!       .        S!         E        X       E
nacked/wildcard      .     X   X    X     SX!       .        S!         E        X       E
nacked/names         .     X   X    X     SX!       .        S!         E        X       E
nacked/empty         .     X   X    X     SX!       .        S!         E        X       E
"""


KNOWN_BUGS: Mapping[tuple[str, str, str], str] = {}
"""Cells where the machine is known to differ from the table: (table, state, input) → why.
They run as strict xfails, so a fix shows up as an XPASS to be moved back into the table."""


def parse(table: str) -> dict[tuple[str, str], str]:
    """The cells of a table, by (state, input)."""
    lines = [line.split() for line in table.strip().splitlines()]
    header, rows = lines[0], lines[1:]
    assert tuple(header) == INPUTS, header
    cells: dict[tuple[str, str], str] = {}
    for row in rows:
        state, values = row[0], row[1:]
        assert len(values) == len(INPUTS), f"row {state} has {len(values)} cells"
        cells.update({(state, column): value for column, value in zip(INPUTS, values, strict=True)})
    return cells


# --- driving the machines ------------------------------------------------------------------


@attrs.frozen
class Context:
    """What the client knows in a state: its names and the latest response, if any."""

    names: tuple[str, ...] = ()
    nonce: str = ""
    version: str = ""


_CODES = {
    NodeIdentified: "I",
    StaleNonceSeen: "X",
    ResponseAcked: "A",
    ResponseNacked: "N",
    SubscriptionChanged: "S",
}


def outcome(events: list[Event], due: bool) -> str:
    codes = "".join(sorted(_CODES[type(e)] for e in events))
    return (codes + ("!" if due else "")) or "."


def canonical(cell: str) -> str:
    due = cell.endswith("!")
    codes = "".join(sorted(cell.rstrip("!").strip(".")))
    return (codes + ("!" if due else "")) or "."


class Sotw:
    """Builds the SotW states and inputs."""

    @staticmethod
    def machine(per_type: bool) -> SotwServer:
        return SotwServer(nonce_source=nonce_source(), type_url=CLUSTER if per_type else None)

    @staticmethod
    def request(
        names: tuple[str, ...] = (),
        *,
        type_url: str = CLUSTER,
        nonce: str = "",
        version: str = "",
        error: ErrorDetail | None = None,
        node: Any = NODE,
    ) -> DiscoveryRequest:
        return DiscoveryRequest(
            type_url=type_url,
            resource_names=names,
            response_nonce=nonce,
            version_info=version,
            error_detail=error,
            node=node,
        )

    @classmethod
    def enter(cls, machine: SotwServer, state: str) -> Context:
        if state == "fresh":
            return Context()
        if state == "other_type":
            machine.receive(cls.request(type_url=LISTENER))
            return Context()
        phase, shape = state.split("/")
        names = {"legacy": (), "wildcard": ("*",), "names": ("a",), "empty": ("a",)}[shape]
        machine.receive(cls.request(names))
        if shape == "empty":
            names = ()
            machine.receive(cls.request(names))
        if phase == "requested":
            return Context(names)
        (response,) = [r for r in machine.poll(VIEW) if r.type_url == CLUSTER]
        if phase != "outstanding":
            error = ERROR if phase == "nacked" else None
            version = response.version_info if phase == "acked" else ""
            machine.receive(cls.request(names, nonce=response.nonce, version=version, error=error))
        return Context(names, response.nonce, response.version_info)

    @classmethod
    def input(cls, context: Context, name: str) -> DiscoveryRequest:
        echo = context.nonce or "never-sent"
        ack = cls.request(context.names, nonce=echo, version=context.version)
        return {
            "first": cls.request(),
            "ack": ack,
            "nack": attrs.evolve(ack, error_detail=ERROR),
            "stale": attrs.evolve(ack, response_nonce="not-the-latest"),
            "stale_sub": attrs.evolve(ack, response_nonce="not-the-latest", resource_names=("b",)),
            "no_nonce": attrs.evolve(ack, response_nonce=""),
            "sub_change": attrs.evolve(ack, resource_names=("b",)),
            "new_node": attrs.evolve(ack, response_nonce="", node=OTHER_NODE),
            "no_type": attrs.evolve(ack, type_url=""),
            "wrong_type": attrs.evolve(ack, type_url=LISTENER),
        }[name]


class Delta:
    """Builds the Delta states and inputs."""

    @staticmethod
    def machine(per_type: bool) -> DeltaServer:
        return DeltaServer(nonce_source=nonce_source(), type_url=CLUSTER if per_type else None)

    @staticmethod
    def request(
        subscribe: tuple[str, ...] = (),
        unsubscribe: tuple[str, ...] = (),
        *,
        type_url: str = CLUSTER,
        nonce: str = "",
        error: ErrorDetail | None = None,
        initial: Mapping[str, str] | None = None,
        node: Any = NODE,
    ) -> DeltaDiscoveryRequest:
        return DeltaDiscoveryRequest(
            type_url=type_url,
            resource_names_subscribe=subscribe,
            resource_names_unsubscribe=unsubscribe,
            initial_resource_versions=dict(initial or {}),
            response_nonce=nonce,
            error_detail=error,
            node=node,
        )

    @classmethod
    def enter(cls, machine: DeltaServer, state: str) -> Context:
        if state == "fresh":
            return Context()
        if state == "other_type":
            machine.receive(cls.request(type_url=LISTENER))
            return Context()
        phase, shape = state.split("/")
        names = {"legacy": (), "wildcard": ("*",), "names": ("a",), "empty": ("a",)}[shape]
        machine.receive(cls.request(names))
        nonce = ""
        if phase != "requested":
            (response,) = [r for r in machine.poll(VIEW) if r.type_url == CLUSTER]
            nonce = response.nonce
            if phase != "outstanding":
                error = ERROR if phase == "nacked" else None
                machine.receive(cls.request(nonce=nonce, error=error))
        if shape == "empty":
            machine.receive(cls.request(unsubscribe=("a",)))
        return Context(nonce=nonce)

    @classmethod
    def input(cls, context: Context, name: str) -> DeltaDiscoveryRequest:
        ack = cls.request(nonce=context.nonce or "never-sent")
        return {
            "first": cls.request(initial={"a": VERSION_A}),
            "ack": ack,
            "nack": attrs.evolve(ack, error_detail=ERROR),
            "stale": attrs.evolve(ack, response_nonce="not-the-latest"),
            "stale_sub": cls.request(("b",), nonce="not-the-latest"),
            "no_nonce": cls.request(),
            "sub_change": cls.request(("b",)),
            "new_node": cls.request(node=OTHER_NODE),
            "no_type": attrs.evolve(ack, type_url=""),
            "wrong_type": attrs.evolve(ack, type_url=LISTENER),
        }[name]


TABLES: dict[str, tuple[type[Sotw] | type[Delta], bool, str]] = {
    "sotw-ads": (Sotw, False, SOTW_ADS),
    "sotw-per-type": (Sotw, True, SOTW_PER_TYPE),
    "delta-ads": (Delta, False, DELTA_ADS),
    "delta-per-type": (Delta, True, DELTA_PER_TYPE),
}


def cells() -> list[Any]:
    params = []
    for table, (_, _, text) in TABLES.items():
        for (state, column), expected in parse(text).items():
            if expected == "-":
                continue
            marks = []
            bug = KNOWN_BUGS.get((table, state, column))
            if bug is not None:
                marks.append(pytest.mark.xfail(strict=True, reason=bug))
            params.append(
                pytest.param(
                    table, state, column, expected, id=f"{table}:{state}:{column}", marks=marks
                )
            )
    return params


@pytest.mark.parametrize(("table", "state", "column", "expected"), cells())
def test_cell(table: str, state: str, column: str, expected: str) -> None:
    protocol, per_type, _ = TABLES[table]
    machine: Any = protocol.machine(per_type)
    context = protocol.enter(machine, state)
    request = protocol.input(context, column)
    where = f"{table} in state {state!r} given input {column!r}"
    if expected == "E":
        with pytest.raises(RemoteProtocolError) as raised:
            machine.receive(request)
        assert raised.value.status == GrpcStatus.INVALID_ARGUMENT, where
        assert machine.state is StreamState.ERROR, where
        with pytest.raises(LocalProtocolError):
            machine.receive(request)
        with pytest.raises(LocalProtocolError):
            machine.poll(VIEW)
        return
    try:
        events = machine.receive(request)
    except RemoteProtocolError as error:
        pytest.fail(f"{where}: expected {expected}, got RemoteProtocolError({error})")
    due = any(r.type_url == CLUSTER for r in machine.poll(VIEW))
    got = outcome(events, due)
    assert got == canonical(expected), f"{where}: expected {expected}, got {got}"


def test_every_cell_is_written() -> None:
    """Each table names every state and every input exactly once."""
    states = ["fresh", "other_type"] + [
        f"{phase}/{shape}"
        for phase in ("requested", "outstanding", "acked", "nacked")
        for shape in ("legacy", "wildcard", "names", "empty")
    ]
    for table, (_, _, text) in TABLES.items():
        written = parse(text)
        assert sorted({state for state, _ in written}) == sorted(states), table
        assert len(written) == len(states) * len(INPUTS), table
