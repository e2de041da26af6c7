"""Every per-type transition of the server machines, in one table.

Rules
-----
Each type URL on a stream is its own sub-stream (inv. 3): its own subscription, nonces
and versions, and its own *phase*:

* ``IDLE``: the client has not asked for the type on this stream;
* ``REQUESTED``: it asked; nothing of the type was sent yet;
* ``SENT``: a response is in flight, awaiting its ACK or NACK (at most one per type, so a
  slow client coalesces to the latest state instead of queueing);
* ``ACKED`` / ``NACKED``: the latest response was applied / rejected, nothing is in flight.

A request is one *input*, decided by `classify` from its nonce alone (inv. 5, 6, 10,
11, 25), the same way for SotW and Delta:

* ``REQUEST``: it pairs with no response: no nonce, or the first request of the type;
* ``ACK`` / ``NACK``: it echoes the nonce of the response in flight, without / with
  ``error_detail``;
* ``STALE``: its nonce is not the latest one sent for the type;
* ``ECHO``: it echoes the latest nonce, whose response was already ACKed or NACKed;
* ``DUPLICATE``: an echo that repeats the request that answered that response (SotW: the
  same names and the same version), which asks for nothing new.

The server's own input is ``RESPOND``: the machine sends a response of the type.

What an input does depends on the protocol. In SotW a request is the client's whole wish
list, so a stale one is ignored once a response was sent (a newer request follows the
response it has not seen yet, inv. 6), and a request after an ACKed or NACKed response is answered
(the client asks again), unless it is a duplicate. In Delta every request changes the
subscription, stale nonce or not (inv. 26): the nonce only pairs ACK and NACK, so an echo
of an answered nonce pairs with nothing and is reported like a stale one.

Theory of operation
-------------------
A machine's ``receive`` classifies the request, looks up ``(protocol, phase, input)`` with
`step`, applies the cell's *effects* in their order, and moves the type to the cell's
next phase. ``poll`` does the same with ``RESPOND`` when it sends. The effects are:

* ``REPORT_STALE``: report [`StaleNonceSeen`][xdscore.protocol.StaleNonceSeen];
* ``ACCEPT`` / ``REJECT``: end the response in flight (record what the client now
  holds / the version it refused, which is never sent again);
* ``OWE``: the client wants an answer even if nothing changed (SotW);
* ``SUBSCRIBE``: apply the request's names to the subscription (wildcard rules in
  `xdscore.protocol._subscription`).

A cell that is not in the table is an input the protocol cannot produce in that phase (an
ACK with nothing in flight is classified ``STALE``, never ``ACK``), so reaching one means the
code driving the machine is wrong: `step` raises
[`LocalProtocolError`][xdscore.protocol.LocalProtocolError] naming the type URL, the phase and the
input. The whole stream has a life of its own, [`StreamState`][xdscore.protocol.StreamState]: OPEN,
then ERROR for good after any protocol error.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Literal

import attrs

from .._errors import LocalProtocolError

__all__ = [
    "TRANSITIONS",
    "Effect",
    "Input",
    "Phase",
    "ProtocolName",
    "StreamState",
    "Transition",
    "classify",
    "ensure_open",
    "step",
]

ProtocolName = Literal["sotw", "delta"]


class StreamState(enum.Enum):
    """OPEN until a protocol error, then ERROR for good (the stream must end)."""

    OPEN = "open"
    ERROR = "error"


def ensure_open(state: StreamState) -> None:
    """Refuse to drive a machine that already failed."""
    if state is not StreamState.OPEN:
        raise LocalProtocolError(f"stream machine is in state {state.name}")


class Phase(enum.Enum):
    """Where one type of one stream stands (see the module docstring)."""

    IDLE = "idle"
    REQUESTED = "requested"
    SENT = "sent"
    ACKED = "acked"
    NACKED = "nacked"

    # Members are singletons compared by identity: hashing them so too spares the Python
    # call Enum's hash costs on every transition lookup (every request, every response).
    __hash__ = object.__hash__


class Input(enum.Enum):
    """What a request (or the server's own response) is to one type's phase."""

    REQUEST = "request"
    ACK = "ack"
    NACK = "nack"
    STALE = "stale"
    ECHO = "echo"
    DUPLICATE = "duplicate"
    RESPOND = "respond"

    __hash__ = object.__hash__  # as Phase's


class Effect(enum.Enum):
    """What applying an input does, besides moving the phase."""

    REPORT_STALE = "report_stale"
    ACCEPT = "accept"
    REJECT = "reject"
    OWE = "owe"
    SUBSCRIBE = "subscribe"


@attrs.frozen
class Transition:
    """One cell: the effects to apply, in this order, and the phase that follows."""

    effects: tuple[Effect, ...]
    next: Phase


def classify(
    phase: Phase,
    nonce: str,
    *,
    error: bool,
    latest_nonce: str,
    outstanding_nonce: str | None,
    repeat: bool = False,
) -> Input:
    """The input a request with ``nonce`` (and ``error_detail`` if ``error``) is in ``phase``;
    ``repeat`` says it repeats the type's previous request (SotW: names and version)."""
    if phase is Phase.IDLE or not nonce:
        return Input.REQUEST
    if nonce == outstanding_nonce:
        return Input.NACK if error else Input.ACK
    if nonce == latest_nonce:
        return Input.DUPLICATE if repeat and not error else Input.ECHO
    return Input.STALE


_I, _R, _S, _A, _N = Phase.IDLE, Phase.REQUESTED, Phase.SENT, Phase.ACKED, Phase.NACKED
_STALE, _ACCEPT, _REJECT = Effect.REPORT_STALE, Effect.ACCEPT, Effect.REJECT
_OWE, _SUB = Effect.OWE, Effect.SUBSCRIBE


def _answered(
    phase: Phase, rows: Mapping[Input, tuple[Effect, ...]]
) -> dict[tuple[Phase, Input], Transition]:
    """The rows of a phase in which nothing is in flight (ACKED or NACKED)."""
    cells = {(phase, given): Transition(effects, phase) for given, effects in rows.items()}
    cells[(phase, Input.RESPOND)] = Transition((), _S)
    return cells


_SOTW: dict[tuple[Phase, Input], Transition] = {
    (_I, Input.REQUEST): Transition((_SUB,), _R),
    (_R, Input.REQUEST): Transition((_SUB,), _R),
    # Nothing of the type was sent, so no response is in flight that a newer request
    # will follow: the nonce is not ours, but the names still count.
    (_R, Input.STALE): Transition((_STALE, _SUB), _R),
    (_R, Input.RESPOND): Transition((), _S),
    (_S, Input.ACK): Transition((_ACCEPT, _SUB), _A),
    (_S, Input.NACK): Transition((_REJECT, _SUB), _N),
    (_S, Input.STALE): Transition((_STALE,), _S),
    (_S, Input.REQUEST): Transition((_SUB,), _S),
    **_answered(
        _A,
        {
            Input.REQUEST: (_OWE, _SUB),
            Input.ECHO: (_OWE, _SUB),
            Input.DUPLICATE: (),
            Input.STALE: (_STALE,),
        },
    ),
    **_answered(
        _N,
        {
            Input.REQUEST: (_OWE, _SUB),
            Input.ECHO: (_OWE, _SUB),
            Input.DUPLICATE: (),
            Input.STALE: (_STALE,),
        },
    ),
}

_DELTA: dict[tuple[Phase, Input], Transition] = {
    (_I, Input.REQUEST): Transition((_SUB,), _R),
    (_R, Input.REQUEST): Transition((_SUB,), _R),
    (_R, Input.STALE): Transition((_STALE, _SUB), _R),
    (_R, Input.RESPOND): Transition((), _S),
    (_S, Input.ACK): Transition((_ACCEPT, _SUB), _A),
    (_S, Input.NACK): Transition((_REJECT, _SUB), _N),
    (_S, Input.STALE): Transition((_STALE, _SUB), _S),
    (_S, Input.REQUEST): Transition((_SUB,), _S),
    **_answered(
        _A,
        {
            Input.REQUEST: (_SUB,),
            Input.ECHO: (_STALE, _SUB),
            Input.STALE: (_STALE, _SUB),
        },
    ),
    **_answered(
        _N,
        {
            Input.REQUEST: (_SUB,),
            Input.ECHO: (_STALE, _SUB),
            Input.STALE: (_STALE, _SUB),
        },
    ),
}

TRANSITIONS: Mapping[tuple[ProtocolName, Phase, Input], Transition] = {
    **{("sotw", phase, given): cell for (phase, given), cell in _SOTW.items()},
    **{("delta", phase, given): cell for (phase, given), cell in _DELTA.items()},
}
"""Every legal (protocol, phase, input), with its effects and next phase."""


def step(protocol: ProtocolName, type_url: str, phase: Phase, given: Input) -> Transition:
    """The cell for ``given`` in ``phase``; raises
    [`LocalProtocolError`][xdscore.protocol.LocalProtocolError] if there is none."""
    cell = TRANSITIONS.get((protocol, phase, given))
    if cell is None:
        raise LocalProtocolError(
            f"{protocol} machine: no transition for {type_url} in phase {phase.name} "
            f"on input {given.name}"
        )
    return cell
