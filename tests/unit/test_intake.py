"""What one loop turn of ``Http2Transport`` handles: reads of connections still syncing
(the intake), and when a handler's message is written.

``Intake`` on its own, then ``Connection`` with a transport that records what the server
writes and whether it reads: a connection past the turn's share holds its bytes unparsed
until a later turn, a settled connection is never held, and a message leaves as it is
written once its call settled (with the turn's other answers before).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from xdscore.transport import ConnectionLimits
from xdscore.transport.h2.call import Call
from xdscore.transport.h2.connection import HELD_BYTES, Connection
from xdscore.transport.h2.intake import Intake

from ._h2_peer import (
    END_HEADERS,
    HEADERS,
    PREFACE,
    frame,
    grpc_headers,
    header_block,
    settings_frame,
)

pytestmark = pytest.mark.anyio

ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"


class Held:
    def __init__(self, name: str, turns: list[str]) -> None:
        self.name = name
        self.closing = False
        self._turns = turns

    def resume_intake(self) -> None:
        self._turns.append(self.name)


async def test_a_turn_admits_its_share_then_the_rest_in_order() -> None:
    counted: list[None] = []
    intake = Intake(2, on_deferred=lambda: counted.append(None))
    resumed: list[str] = []
    held = [Held(name, resumed) for name in "abcde"]
    admitted = [intake.admit(each) for each in held]
    assert admitted == [True, True, False, False, False]
    assert (intake.waiting, len(counted)) == (3, 3)
    await asyncio.sleep(0)
    assert resumed == ["c", "d"]  # the next turn's share, in arrival order
    assert not intake.admit(Held("f", resumed))  # behind those still waiting
    await asyncio.sleep(0)
    assert resumed == ["c", "d", "e", "f"]
    await asyncio.sleep(0)
    assert intake.waiting == 0
    assert intake.admit(Held("g", resumed))


async def test_a_connection_closed_while_waiting_is_skipped() -> None:
    intake = Intake(1)
    resumed: list[str] = []
    first, gone, last = Held("first", resumed), Held("gone", resumed), Held("last", resumed)
    assert intake.admit(first)
    assert not intake.admit(gone)
    assert not intake.admit(last)
    gone.closing = True
    await asyncio.sleep(0)
    assert resumed == ["last"]  # the closed one took no share


def test_no_bound() -> None:
    intake = Intake(0)
    assert all(intake.admit(Held(str(n), [])) for n in range(1000))
    with pytest.raises(ValueError):
        Intake(-1)


class FakeTransport:
    """Records writes and whether reading is paused."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.writes = 0
        self.paused = False

    def write(self, data: bytes) -> None:
        self.written += data
        self.writes += 1

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def abort(self) -> None:
        pass


def connection(intake: Intake, calls: list[Call]) -> tuple[Connection, FakeTransport]:
    async def handler(call: Call) -> None:
        calls.append(call)
        await asyncio.Event().wait()

    conn = Connection(
        lambda path: handler,
        limit=1 << 20,
        limits=ConnectionLimits(),
        on_cut=lambda reason: None,
        on_close=lambda c: None,
        intake=intake,
    )
    transport = FakeTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    return conn, transport


OPENING = PREFACE + settings_frame()


def two_opened(intake: Intake) -> tuple[Connection, FakeTransport, Connection, FakeTransport]:
    """Two connections that sent their preface in one turn, in that order."""
    first, first_out = connection(intake, [])
    second, second_out = connection(intake, [])
    first.data_received(OPENING)
    second.data_received(OPENING)
    return first, first_out, second, second_out


async def test_a_connection_past_the_turns_share_is_read_in_a_later_turn() -> None:
    first, first_out, second, second_out = two_opened(Intake(1))
    await asyncio.sleep(0)
    assert first_out.written  # its SETTINGS, answered in the turn it arrived
    assert not second_out.written  # held, unparsed
    assert not second_out.paused  # a few bytes: it keeps reading into its buffer
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert second_out.written
    for each in (first, second):
        each.connection_lost(None)


async def test_a_held_connection_that_sends_much_stops_reading() -> None:
    first, _, second, second_out = two_opened(Intake(1))
    second.data_received(frame(0xFF, 0, 0, bytes(16_000)) * (HELD_BYTES // 16_000 + 1))
    assert second_out.paused
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not second_out.paused  # its turn came: read again
    for each in (first, second):
        each.connection_lost(None)


async def test_a_settled_connection_is_never_held() -> None:
    intake = Intake(1)
    calls: list[Call] = []
    settled, settled_out = connection(intake, calls)
    headers = frame(HEADERS, END_HEADERS, 1, header_block(grpc_headers(ADS)))
    settled.data_received(OPENING + headers)
    await asyncio.sleep(0)
    assert settled.unsettled
    assert len(calls) == 1
    calls[0].settled()
    assert not settled.unsettled
    other, _ = connection(intake, [])
    other.data_received(OPENING)  # uses the turn's share
    before = len(settled_out.written)
    settled.data_received(frame(0x6, 0, 0, bytes(8)))  # a PING, read at once
    await asyncio.sleep(0)
    assert len(settled_out.written) > before  # its PING ACK, in this turn
    # A new call that is still syncing makes the connection unsettled again.
    settled.data_received(frame(HEADERS, END_HEADERS, 3, header_block(grpc_headers(ADS))))
    await asyncio.sleep(0)
    assert settled.unsettled
    for each in (settled, other):
        each.connection_lost(None)


async def test_a_message_written_by_a_handler_leaves_at_once() -> None:
    """Once the call has settled, not at the end of the turn: a push to the first of 10,000
    streams woken by a change would otherwise wait for all the others."""
    calls: list[Call] = []
    conn, out = connection(Intake(0), calls)
    conn.data_received(OPENING + frame(HEADERS, END_HEADERS, 1, header_block(grpc_headers(ADS))))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    calls[0].settled()
    before = len(out.written)
    assert calls[0].try_send_parts([b"response"])
    assert out.written[before:].endswith(b"response")  # written before anything else runs
    conn.connection_lost(None)


async def test_the_answers_of_an_initial_sync_leave_together_at_the_end_of_the_turn() -> None:
    """A client's first requests arrive together: their answers go in one write."""
    calls: list[Call] = []
    conn, out = connection(Intake(0), calls)
    conn.data_received(OPENING + frame(HEADERS, END_HEADERS, 1, header_block(grpc_headers(ADS))))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    before, writes = len(out.written), out.writes
    assert calls[0].try_send_parts([b"clusters"])
    assert calls[0].try_send_parts([b"listeners"])
    assert len(out.written) == before  # not yet
    await asyncio.sleep(0)
    assert out.writes == writes + 1
    assert out.written[before:].endswith(b"listeners")
    assert b"clusters" in out.written[before:]
    conn.connection_lost(None)
