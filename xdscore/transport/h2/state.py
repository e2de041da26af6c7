"""Every stream transition of :class:`~xdscore.transport.Http2Transport`'s HTTP/2 server,
in one table (RFC 9113 section 5.1).

Rules
-----
A stream is in one of the RFC's states, seen from the server (which never pushes, so the
two "reserved" states never occur):

* ``IDLE``: no frame opened it yet; its id is above every id the client has used;
* ``OPEN``: the client sent the request's headers; both sides may still send;
* ``HALF_CLOSED_REMOTE``: the client ended its side (END_STREAM); the server may still send;
* ``HALF_CLOSED_LOCAL``: the server ended its side (its trailers); the client may still send;
* ``CLOSED``: both sides ended with END_STREAM.

The RFC tells three ways of closing apart, because what may still arrive differs, so
they are three states here:

* ``CLOSED``: after END_STREAM both ways, only WINDOW_UPDATE, RST_STREAM and PRIORITY may
  arrive; DATA or HEADERS is a connection error STREAM_CLOSED;
* ``RESET_RECEIVED``: the client reset the stream: anything but PRIORITY is a stream error
  STREAM_CLOSED (never answered with a reset for a reset, section 5.4.2);
* ``RESET_SENT``: the server reset the stream: what the client sent before it knew is
  ignored, whatever it is.

A connection remembers a bounded number of closed streams. One it no longer remembers (or
an id the client skipped, which the RFC closes implicitly, section 5.1.1) is ``FORGOTTEN``:
its frames are ignored, as after a reset, except HEADERS, which would open a stream whose
id is not above every earlier one: a connection error PROTOCOL_ERROR.

An *input* is a frame received (``RECV_*``; HEADERS and DATA with END_STREAM are inputs of
their own, ``*_END``) or one the server sends (``SEND_*``; END_STREAM on the trailers or on
the last DATA frame is ``SEND_END_STREAM``). CONTINUATION is not an input: it belongs to
the header block its HEADERS frame began, which the connection reassembles first.

Theory of operation
-------------------
:func:`step` looks up ``(state, input)`` in :data:`TRANSITIONS` and returns the next state.
A cell that is not in the table is an input the RFC forbids in that state:

* for a frame received, :data:`REFUSALS` names, per state, what the RFC makes of it: a
  :class:`H2StreamError` (the connection resets that stream with the code) or an
  :class:`H2ConnectionError` (GOAWAY with the code), each naming the rule;
* for a frame sent, the server itself broke the protocol: a
  :class:`~xdscore.LocalProtocolError` (a bug; the server checks :func:`sending` first).

What a frame carries is checked by the connection, once the table has allowed it: a zero
WINDOW_UPDATE increment, a window past 2^31-1, a stream that depends on itself, a
malformed request. The connection's hot path (DATA and WINDOW_UPDATE on an open stream,
a message sent) asks :func:`receiving` and :func:`sending`, two identity checks that
agree with the table (``tests/unit/test_h2_state.py`` checks it), and calls :func:`step`
for everything else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

import attrs

from ..._errors import LocalProtocolError
from .wire import ErrorCode

__all__ = [
    "REFUSALS",
    "TRANSITIONS",
    "H2ConnectionError",
    "H2Error",
    "H2StreamError",
    "Refusal",
    "StreamInput",
    "StreamState",
    "ignored",
    "receiving",
    "sending",
    "step",
]


class StreamState(enum.Enum):
    """Where one stream stands (see the module docstring)."""

    IDLE = "idle"
    OPEN = "open"
    HALF_CLOSED_REMOTE = "half-closed (remote)"
    HALF_CLOSED_LOCAL = "half-closed (local)"
    CLOSED = "closed"
    RESET_RECEIVED = "closed (reset by the client)"
    RESET_SENT = "closed (reset by the server)"
    FORGOTTEN = "closed (forgotten)"

    # Members are singletons compared by identity: hashing them so too spares the Python
    # call Enum's hash costs on a table lookup.
    __hash__ = object.__hash__


class StreamInput(enum.Enum):
    """A frame on a stream, received (``RECV_*``) or sent (``SEND_*``)."""

    RECV_HEADERS = "HEADERS received"
    RECV_HEADERS_END = "HEADERS with END_STREAM received"
    RECV_DATA = "DATA received"
    RECV_DATA_END = "DATA with END_STREAM received"
    RECV_WINDOW_UPDATE = "WINDOW_UPDATE received"
    RECV_RST_STREAM = "RST_STREAM received"
    RECV_PRIORITY = "PRIORITY received"
    SEND_HEADERS = "HEADERS sent"
    SEND_DATA = "DATA sent"
    SEND_END_STREAM = "END_STREAM sent"
    SEND_RST_STREAM = "RST_STREAM sent"

    __hash__ = object.__hash__  # as StreamState's

    @property
    def sent(self) -> bool:
        return self.name.startswith("SEND_")


class H2Error(Exception):
    """The client broke HTTP/2: ``code`` is what the server answers with, ``rule`` why."""

    def __init__(self, code: ErrorCode, rule: str) -> None:
        super().__init__(rule)
        self.code = code
        self.rule = rule


class H2StreamError(H2Error):
    """A stream error (RFC 9113 section 5.4.2): the stream is reset with ``code``."""


class H2ConnectionError(H2Error):
    """A connection error (RFC 9113 section 5.4.1): GOAWAY with ``code``, then the end."""


@attrs.frozen
class Refusal:
    """What a received frame that a state does not allow is: an error of the stream or of
    the whole connection, with its code and the rule it breaks."""

    connection: bool
    code: ErrorCode
    rule: str

    def error(self, state: StreamState, given: StreamInput) -> H2Error:
        kind = H2ConnectionError if self.connection else H2StreamError
        return kind(self.code, f"{given.value} on a stream {state.value}: {self.rule}")


_S = StreamState
_I = StreamInput
IDLE: Final = _S.IDLE
OPEN: Final = _S.OPEN
HALF_CLOSED_REMOTE: Final = _S.HALF_CLOSED_REMOTE
HALF_CLOSED_LOCAL: Final = _S.HALF_CLOSED_LOCAL
CLOSED: Final = _S.CLOSED
RESET_RECEIVED: Final = _S.RESET_RECEIVED
RESET_SENT: Final = _S.RESET_SENT
FORGOTTEN: Final = _S.FORGOTTEN

_RECEIVED = [given for given in StreamInput if not given.sent]


def _ignoring(state: StreamState) -> dict[tuple[StreamState, StreamInput], StreamState]:
    """Every frame received leaves ``state`` as it is (and is ignored)."""
    return {(state, given): state for given in _RECEIVED}


TRANSITIONS: Mapping[tuple[StreamState, StreamInput], StreamState] = {
    # idle: HEADERS opens the stream; PRIORITY may name an idle stream (5.1, 5.3).
    (IDLE, _I.RECV_HEADERS): OPEN,
    (IDLE, _I.RECV_HEADERS_END): HALF_CLOSED_REMOTE,
    (IDLE, _I.RECV_PRIORITY): IDLE,
    # open: anything, except a second HEADERS without END_STREAM (8.1).
    (OPEN, _I.RECV_HEADERS_END): HALF_CLOSED_REMOTE,
    (OPEN, _I.RECV_DATA): OPEN,
    (OPEN, _I.RECV_DATA_END): HALF_CLOSED_REMOTE,
    (OPEN, _I.RECV_WINDOW_UPDATE): OPEN,
    (OPEN, _I.RECV_RST_STREAM): RESET_RECEIVED,
    (OPEN, _I.RECV_PRIORITY): OPEN,
    (OPEN, _I.SEND_HEADERS): OPEN,
    (OPEN, _I.SEND_DATA): OPEN,
    (OPEN, _I.SEND_END_STREAM): HALF_CLOSED_LOCAL,
    (OPEN, _I.SEND_RST_STREAM): RESET_SENT,
    # half-closed (remote): the client only adjusts windows, reprioritises or resets.
    (HALF_CLOSED_REMOTE, _I.RECV_WINDOW_UPDATE): HALF_CLOSED_REMOTE,
    (HALF_CLOSED_REMOTE, _I.RECV_RST_STREAM): RESET_RECEIVED,
    (HALF_CLOSED_REMOTE, _I.RECV_PRIORITY): HALF_CLOSED_REMOTE,
    (HALF_CLOSED_REMOTE, _I.SEND_HEADERS): HALF_CLOSED_REMOTE,
    (HALF_CLOSED_REMOTE, _I.SEND_DATA): HALF_CLOSED_REMOTE,
    (HALF_CLOSED_REMOTE, _I.SEND_END_STREAM): CLOSED,
    (HALF_CLOSED_REMOTE, _I.SEND_RST_STREAM): RESET_SENT,
    # half-closed (local): the client may still send (and end) its request.
    (HALF_CLOSED_LOCAL, _I.RECV_HEADERS_END): CLOSED,
    (HALF_CLOSED_LOCAL, _I.RECV_DATA): HALF_CLOSED_LOCAL,
    (HALF_CLOSED_LOCAL, _I.RECV_DATA_END): CLOSED,
    (HALF_CLOSED_LOCAL, _I.RECV_WINDOW_UPDATE): HALF_CLOSED_LOCAL,
    (HALF_CLOSED_LOCAL, _I.RECV_RST_STREAM): RESET_RECEIVED,
    (HALF_CLOSED_LOCAL, _I.RECV_PRIORITY): HALF_CLOSED_LOCAL,
    (HALF_CLOSED_LOCAL, _I.SEND_RST_STREAM): RESET_SENT,
    # closed: WINDOW_UPDATE and RST_STREAM may still be in flight after END_STREAM (5.1).
    (CLOSED, _I.RECV_WINDOW_UPDATE): CLOSED,
    (CLOSED, _I.RECV_RST_STREAM): CLOSED,
    (CLOSED, _I.RECV_PRIORITY): CLOSED,
    (CLOSED, _I.SEND_RST_STREAM): RESET_SENT,
    # reset by the client: PRIORITY only; a reset is never answered with a reset (5.4.2).
    (RESET_RECEIVED, _I.RECV_RST_STREAM): RESET_RECEIVED,
    (RESET_RECEIVED, _I.RECV_PRIORITY): RESET_RECEIVED,
    (RESET_RECEIVED, _I.SEND_RST_STREAM): RESET_SENT,
    # reset by the server: whatever the client sent before it knew is ignored (5.1).
    **_ignoring(RESET_SENT),
    # forgotten: ignored as after a reset, except a HEADERS that would reopen it.
    (FORGOTTEN, _I.RECV_DATA): FORGOTTEN,
    (FORGOTTEN, _I.RECV_DATA_END): FORGOTTEN,
    (FORGOTTEN, _I.RECV_WINDOW_UPDATE): FORGOTTEN,
    (FORGOTTEN, _I.RECV_RST_STREAM): FORGOTTEN,
    (FORGOTTEN, _I.RECV_PRIORITY): FORGOTTEN,
}
"""``(state, input) → next state``; a missing cell is an error (see :func:`step`)."""

_MALFORMED = Refusal(
    False, ErrorCode.PROTOCOL_ERROR, "a HEADERS frame without END_STREAM after the request's (8.1)"
)
REFUSALS: Mapping[StreamState, Refusal] = {
    IDLE: Refusal(
        True, ErrorCode.PROTOCOL_ERROR, "only HEADERS or PRIORITY may name an idle stream (5.1)"
    ),
    OPEN: _MALFORMED,
    HALF_CLOSED_LOCAL: _MALFORMED,
    HALF_CLOSED_REMOTE: Refusal(
        False, ErrorCode.STREAM_CLOSED, "the client already ended its side (5.1)"
    ),
    CLOSED: Refusal(True, ErrorCode.STREAM_CLOSED, "both sides already ended the stream (5.1)"),
    RESET_RECEIVED: Refusal(
        False, ErrorCode.STREAM_CLOSED, "the client already reset the stream (5.1)"
    ),
    FORGOTTEN: Refusal(
        True,
        ErrorCode.PROTOCOL_ERROR,
        "a new stream's id must be above every id used before it (5.1.1)",
    ),
}
"""Per state, what a received frame the table does not allow is."""


def step(state: StreamState, given: StreamInput) -> StreamState:
    """The state after ``given`` in ``state``; raises :class:`H2StreamError` or
    :class:`H2ConnectionError` for a frame the client may not send in ``state``, and
    :class:`~xdscore.LocalProtocolError` for one the server may not."""
    after = TRANSITIONS.get((state, given))
    if after is not None:
        return after
    if given.sent:
        raise LocalProtocolError(f"the server cannot send {given.value} on a stream {state.value}")
    raise REFUSALS[state].error(state, given)


def receiving(state: StreamState) -> bool:
    """Whether the client may still send DATA on a stream in ``state``."""
    return state is OPEN or state is HALF_CLOSED_LOCAL


def sending(state: StreamState) -> bool:
    """Whether the server may still send HEADERS or DATA on a stream in ``state``."""
    return state is OPEN or state is HALF_CLOSED_REMOTE


def ignored(state: StreamState) -> bool:
    """Whether every frame received on a stream in ``state`` is dropped unread."""
    return state is RESET_SENT or state is FORGOTTEN
