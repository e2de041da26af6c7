"""Http2Transport's stream states (``xdscore/transport/h2/state.py``): the table against a
table written by hand from RFC 9113 section 5.1, the hot path's checks against the table,
and a real connection fed every frame kind in every stream state, then random sequences
of frames and server actions, each outcome checked against the table.

The connection runs in memory (a transport that records what the server writes), with
handlers that wait until they are cancelled; the server's own actions (trailers, a
message) are the calls' own methods, as a handler would call them.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xdscore import GrpcStatus, LocalProtocolError
from xdscore.transport import ConnectionLimits
from xdscore.transport.h2.call import Call
from xdscore.transport.h2.connection import Connection
from xdscore.transport.h2.state import (
    REFUSALS,
    TRANSITIONS,
    H2ConnectionError,
    H2StreamError,
    StreamInput,
    StreamState,
    ignored,
    receiving,
    sending,
    step,
)
from xdscore.transport.h2.wire import ErrorCode

from ._h2_peer import (
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PREFACE,
    RST_STREAM,
    WINDOW_UPDATE,
    frame,
    grpc_headers,
    header_block,
    settings_frame,
)

S = StreamState
I = StreamInput  # noqa: E741
RECEIVED = [given for given in StreamInput if not given.sent]
SENT = [given for given in StreamInput if given.sent]

# -- the table, against the RFC -----------------------------------------------------------

# What each received frame does in each state, read from RFC 9113 section 5.1 (and 8.1 for a
# second HEADERS without END_STREAM): the next state, "stream CODE" or "connection CODE".
# Columns: HEADERS, HEADERS+END_STREAM, DATA, DATA+END_STREAM, WINDOW_UPDATE, RST_STREAM,
# PRIORITY.
_C, _S, _P = "connection STREAM_CLOSED", "stream STREAM_CLOSED", "stream PROTOCOL_ERROR"
_IDLE_ERROR = "connection PROTOCOL_ERROR"
BY_THE_RFC: dict[StreamState, tuple[Any, ...]] = {
    S.IDLE: (
        S.OPEN,
        S.HALF_CLOSED_REMOTE,
        _IDLE_ERROR,
        _IDLE_ERROR,
        _IDLE_ERROR,
        _IDLE_ERROR,
        S.IDLE,
    ),
    S.OPEN: (
        _P,
        S.HALF_CLOSED_REMOTE,
        S.OPEN,
        S.HALF_CLOSED_REMOTE,
        S.OPEN,
        S.RESET_RECEIVED,
        S.OPEN,
    ),
    S.HALF_CLOSED_REMOTE: (
        _S,
        _S,
        _S,
        _S,
        S.HALF_CLOSED_REMOTE,
        S.RESET_RECEIVED,
        S.HALF_CLOSED_REMOTE,
    ),
    S.HALF_CLOSED_LOCAL: (
        _P,
        S.CLOSED,
        S.HALF_CLOSED_LOCAL,
        S.CLOSED,
        S.HALF_CLOSED_LOCAL,
        S.RESET_RECEIVED,
        S.HALF_CLOSED_LOCAL,
    ),
    S.CLOSED: (_C, _C, _C, _C, S.CLOSED, S.CLOSED, S.CLOSED),
    S.RESET_RECEIVED: (_S, _S, _S, _S, _S, S.RESET_RECEIVED, S.RESET_RECEIVED),
    S.RESET_SENT: (S.RESET_SENT,) * 7,
    S.FORGOTTEN: (
        "connection PROTOCOL_ERROR",
        "connection PROTOCOL_ERROR",
        *(S.FORGOTTEN,) * 5,
    ),
}
# What the server may send: the next state, or None (a LocalProtocolError).
# Columns: HEADERS, DATA, END_STREAM, RST_STREAM.
SENT_BY_THE_RFC: dict[StreamState, tuple[StreamState | None, ...]] = {
    S.IDLE: (None, None, None, None),
    S.OPEN: (S.OPEN, S.OPEN, S.HALF_CLOSED_LOCAL, S.RESET_SENT),
    S.HALF_CLOSED_REMOTE: (
        S.HALF_CLOSED_REMOTE,
        S.HALF_CLOSED_REMOTE,
        S.CLOSED,
        S.RESET_SENT,
    ),
    S.HALF_CLOSED_LOCAL: (None, None, None, S.RESET_SENT),
    S.CLOSED: (None, None, None, S.RESET_SENT),
    S.RESET_RECEIVED: (None, None, None, S.RESET_SENT),
    S.RESET_SENT: (None, None, None, None),
    S.FORGOTTEN: (None, None, None, None),
}


def outcome_of(state: StreamState, given: StreamInput) -> StreamState | str | None:
    """What the implementation's table makes of ``given`` in ``state``, in the same words."""
    try:
        return step(state, given)
    except H2ConnectionError as error:
        return f"connection {error.code.name}"
    except H2StreamError as error:
        return f"stream {error.code.name}"
    except LocalProtocolError:
        return None


@pytest.mark.parametrize("state", list(StreamState), ids=lambda s: s.name)
def test_the_table_is_the_rfcs(state: StreamState) -> None:
    assert [outcome_of(state, given) for given in RECEIVED] == list(BY_THE_RFC[state])
    assert [outcome_of(state, given) for given in SENT] == list(SENT_BY_THE_RFC[state])


def test_every_refusal_names_its_rule() -> None:
    for state in StreamState:
        for frame_in in RECEIVED:
            if (state, frame_in) not in TRANSITIONS:
                with pytest.raises((H2StreamError, H2ConnectionError)) as raised:
                    step(state, frame_in)
                rule = raised.value.rule
                assert rule.endswith(")"), rule  # "(5.1)" and such
                assert state.value in rule
                assert frame_in.value in rule
    assert set(REFUSALS) == {s for s in StreamState if s is not S.RESET_SENT}


@pytest.mark.parametrize("state", list(StreamState), ids=lambda s: s.name)
def test_the_hot_paths_checks_agree_with_the_table(state: StreamState) -> None:
    """The connection and the call skip the table where these say so: they must say what
    the table does."""
    assert sending(state) == (TRANSITIONS.get((state, I.SEND_DATA)) is state)
    assert receiving(state) == (
        TRANSITIONS.get((state, I.RECV_DATA)) is state and not ignored(state)
    )
    # Ignored: DATA is taken (and dropped), and no frame changes anything.
    quiet = all(TRANSITIONS.get((state, given), state) is state for given in RECEIVED)
    assert ignored(state) == ((state, I.RECV_DATA) in TRANSITIONS and quiet)
    # The fast paths: DATA on an open stream, WINDOW_UPDATE on a stream the server writes to.
    if state is S.OPEN:
        assert step(state, I.RECV_DATA) is S.OPEN
    if sending(state):
        assert step(state, I.RECV_WINDOW_UPDATE) is state


# -- a connection, against the table ------------------------------------------------------

PATH = "/test.Service/Call"
STREAMS = (1, 3, 5, 7)


class Recording:
    """The transport of a connection in memory: what the server writes."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def can_write_eof(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default


def frames_of(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    at = 0
    while at + 9 <= len(data):
        size = int.from_bytes(data[at : at + 3], "big")
        kind, flags = data[at + 3], data[at + 4]
        stream_id = struct.unpack_from(">L", data, at + 5)[0] & 0x7FFFFFFF
        yield kind, flags, stream_id, bytes(data[at + 9 : at + 9 + size])
        at += 9 + size


@attrs.frozen
class Received:
    """A frame of the client's, as a stream input."""

    given: StreamInput
    stream_id: int


@attrs.frozen
class Finish:
    """The server ends the call on the stream (trailers; a reset if it is inside a request
    the client is still sending)."""

    stream_id: int


@attrs.frozen
class Respond:
    """The server sends one message on the stream."""

    stream_id: int


Action = Received | Finish | Respond


@attrs.define
class Model:
    """What the table says the connection holds."""

    states: dict[int, StreamState] = attrs.field(factory=dict)
    last: int = 0
    running: set[int] = attrs.field(factory=set)
    """Streams whose handler runs."""
    unread: set[int] = attrs.field(factory=set)
    """Running streams with request bytes their handler has not read."""

    def state(self, stream_id: int) -> StreamState:
        known = self.states.get(stream_id)
        if known is not None:
            return known
        return S.IDLE if stream_id > self.last else S.FORGOTTEN


class Harness:
    """One connection in memory, driven by actions and checked against :class:`Model`."""

    def __init__(self) -> None:
        self.model = Model()
        self.transport = Recording()
        self.read = 0
        self.gone = False
        self.handlers: set[asyncio.Task[None]] = set()
        self.connection = Connection(
            lambda path: self._handler if path == PATH else None,
            limit=1 << 20,
            limits=ConnectionLimits(resets_per_second=0, pings_per_second=0, settings_per_second=0),
            on_cut=lambda reason: None,
            on_close=lambda connection: None,
        )
        self.connection.connection_made(self.transport)  # type: ignore[arg-type]
        self.connection.data_received(PREFACE + settings_frame())
        self.written()

    async def _handler(self, call: Call) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        await asyncio.get_running_loop().create_future()  # until cancelled

    def written(self) -> list[tuple[int, int, int, bytes]]:
        """The frames the server wrote since the last look."""
        self.connection.flush()
        data = bytes(self.transport.written[self.read :])
        self.read = len(self.transport.written)
        return list(frames_of(data))

    def _frame(self, action: Received) -> bytes:
        stream_id = action.stream_id
        given = action.given
        end = END_STREAM if given in (I.RECV_HEADERS_END, I.RECV_DATA_END) else 0
        if given in (I.RECV_HEADERS, I.RECV_HEADERS_END):
            opening = self.model.state(stream_id) is S.IDLE
            fields = grpc_headers(PATH) if opening else [("x-trailer", "1")]
            return frame(HEADERS, END_HEADERS | end, stream_id, header_block(fields))
        if given in (I.RECV_DATA, I.RECV_DATA_END):
            return frame(DATA, end, stream_id, b"x")
        if given is I.RECV_WINDOW_UPDATE:
            return frame(WINDOW_UPDATE, 0, stream_id, (1).to_bytes(4, "big"))
        if given is I.RECV_RST_STREAM:
            return frame(RST_STREAM, 0, stream_id, int(ErrorCode.CANCEL).to_bytes(4, "big"))
        assert given is I.RECV_PRIORITY
        return frame(2, 0, stream_id, bytes(5))

    def _expect_received(self, action: Received) -> tuple[str | None, int | None]:
        """Update the model for ``action``; what the server must send: ("reset", code),
        ("goaway", code) or (None, None)."""
        model = self.model
        stream_id, given = action.stream_id, action.given
        state = model.state(stream_id)
        if (state, given) not in TRANSITIONS:
            refusal = REFUSALS[state]
            if refusal.connection:
                return "goaway", refusal.code
            model.states[stream_id] = step(state, I.SEND_RST_STREAM)
            model.running.discard(stream_id)
            return "reset", refusal.code
        after = TRANSITIONS[(state, given)]
        if state is S.IDLE and after is not S.IDLE:
            model.last = stream_id
            model.running.add(stream_id)
        if given is I.RECV_RST_STREAM:
            model.running.discard(stream_id)
        if given in (I.RECV_DATA, I.RECV_DATA_END) and stream_id in model.running:
            model.unread.add(stream_id)
        if after is not S.IDLE and after is not S.FORGOTTEN:
            model.states[stream_id] = after
        return None, None

    def _expect_server(self, action: Finish | Respond) -> tuple[str | None, int | None]:
        model = self.model
        stream_id = action.stream_id
        if isinstance(action, Respond):
            return None, None
        state = step(model.state(stream_id), I.SEND_END_STREAM)
        model.running.discard(stream_id)
        if state is S.HALF_CLOSED_LOCAL and stream_id in model.unread:
            model.states[stream_id] = step(state, I.SEND_RST_STREAM)
            return "reset", ErrorCode.NO_ERROR
        model.states[stream_id] = state
        return None, None

    async def apply(self, action: Action) -> None:
        """Apply ``action``, then check what the server sent and holds against the model."""
        if isinstance(action, Received):
            sent = self._frame(action)
            expected = self._expect_received(action)
            self.connection.data_received(sent)
        else:
            call = self.connection.calls.get(action.stream_id)
            if call is None or action.stream_id not in self.model.running:
                return  # no handler runs there: nothing for the server to do
            expected = self._expect_server(action)
            if isinstance(action, Finish):
                call.finish(GrpcStatus.OK, None)
            else:
                assert call.try_send_parts([b"answer"])
        await asyncio.sleep(0)  # the handlers started, or cancelled, run
        control = [
            (kind, stream_id, payload)
            for kind, _, stream_id, payload in self.written()
            if kind in (RST_STREAM, GOAWAY)
        ]
        what, code = expected
        if what == "goaway":
            assert [
                (kind, int.from_bytes(payload[4:8], "big")) for kind, _, payload in control
            ] == [(GOAWAY, code)], (action, control)
            assert self.connection.closing
            self.gone = True
            return
        resets = [(stream_id, int.from_bytes(p, "big")) for kind, stream_id, p in control]
        assert resets == ([(action.stream_id, code)] if what == "reset" else []), (action, resets)
        for stream_id in STREAMS:
            assert self.connection.stream_state(stream_id) is self.model.state(stream_id), (
                action,
                stream_id,
            )
        assert set(self.connection.calls) == self.model.running, action

    async def close(self) -> None:
        self.connection.connection_lost(None)
        for task in self.handlers:  # those whose call the server finished wait still
            task.cancel()
        await asyncio.gather(*self.handlers, return_exceptions=True)


RECIPES: dict[StreamState, list[Action]] = {
    S.IDLE: [],
    S.OPEN: [Received(I.RECV_HEADERS, 1)],
    S.HALF_CLOSED_REMOTE: [Received(I.RECV_HEADERS_END, 1)],
    S.HALF_CLOSED_LOCAL: [Received(I.RECV_HEADERS, 1), Finish(1)],
    S.CLOSED: [Received(I.RECV_HEADERS_END, 1), Respond(1), Finish(1)],
    S.RESET_RECEIVED: [Received(I.RECV_HEADERS, 1), Received(I.RECV_RST_STREAM, 1)],
    S.RESET_SENT: [Received(I.RECV_HEADERS, 1), Received(I.RECV_HEADERS, 1)],
    S.FORGOTTEN: [Received(I.RECV_HEADERS, 3)],
}
"""How stream 1 gets into each state."""


async def run(actions: list[Action]) -> None:
    harness = Harness()
    try:
        for action in actions:
            await harness.apply(action)
            if harness.gone:
                return
    finally:
        await harness.close()


@pytest.mark.parametrize("given", RECEIVED, ids=lambda given: given.name)
@pytest.mark.parametrize("state", list(StreamState), ids=lambda state: state.name)
def test_every_frame_in_every_state_does_what_the_table_says(
    state: StreamState, given: StreamInput
) -> None:
    recipe = RECIPES[state]
    asyncio.run(run([*recipe, Received(given, 1)]))


actions = st.one_of(
    st.builds(Received, st.sampled_from(RECEIVED), st.sampled_from(STREAMS)),
    st.builds(Finish, st.sampled_from(STREAMS)),
    st.builds(Respond, st.sampled_from(STREAMS)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(actions, max_size=25))
def test_any_sequence_of_frames_does_what_the_table_says(sequence: list[Action]) -> None:
    asyncio.run(run(sequence))
