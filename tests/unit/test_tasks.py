"""A stream's two loops, its first-request deadline and the server's stop, on asyncio.

Each test drives the loops with events (no sleeps but the deadline's own timer) and checks
what ended, what was raised and that no cancellation leaks to the caller or is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from xdscore import GrpcStatus, RemoteProtocolError
from xdscore._errors import StreamClosed
from xdscore.server._tasks import Deadline, StreamStop, run_pair

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(10)]


class Loop:
    """A loop that waits for ``release``, then returns or raises ``outcome``; it records
    whether it was cancelled and whether it ended."""

    def __init__(self, outcome: BaseException | None = None) -> None:
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.outcome = outcome
        self.cancelled = False
        self.ended = False

    async def __call__(self) -> None:
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        finally:
            self.ended = True
        if self.outcome is not None:
            raise self.outcome


async def running(
    reader: Callable[[], Awaitable[None]], writer: Callable[[], Awaitable[None]]
) -> asyncio.Task[None]:
    task = asyncio.get_running_loop().create_task(run_pair(reader, writer))
    for _ in range(3):
        await asyncio.sleep(0)
    return task


async def test_the_writer_ending_ends_the_reader() -> None:
    reader, writer = Loop(), Loop()
    task = await running(reader, writer)
    writer.release.set()
    await task
    assert reader.cancelled
    assert reader.ended
    assert not writer.cancelled
    assert task.cancelling() == 0


async def test_a_reader_that_fails_cancels_the_writer_and_its_error_is_raised() -> None:
    failure = RemoteProtocolError("bad request", GrpcStatus.INVALID_ARGUMENT)
    reader, writer = Loop(failure), Loop()
    task = await running(reader, writer)
    reader.release.set()
    with pytest.raises(RemoteProtocolError) as raised:
        await task
    assert raised.value is failure
    assert writer.cancelled
    assert not reader.cancelled
    assert task.cancelling() == 0  # (the writer's cancellation was taken back)


async def test_the_peer_going_away_is_a_clean_end() -> None:
    reader, writer = Loop(StreamClosed("gone")), Loop()
    task = await running(reader, writer)
    reader.release.set()
    await task
    assert writer.cancelled


async def test_a_reader_that_returns_leaves_the_writer_going() -> None:
    reader, writer = Loop(), Loop()
    task = await running(reader, writer)
    reader.release.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert reader.ended
    assert not writer.ended
    assert not task.done()
    writer.release.set()
    await task
    assert not writer.cancelled


async def test_a_writer_that_fails_ends_the_reader_and_its_error_is_raised() -> None:
    reader, writer = Loop(), Loop(RuntimeError("encoder broke"))
    task = await running(reader, writer)
    writer.release.set()
    with pytest.raises(RuntimeError, match="encoder broke"):
        await task
    assert reader.cancelled


async def test_a_protocol_error_wins_over_another_failure() -> None:
    failure = RemoteProtocolError("too big", GrpcStatus.RESOURCE_EXHAUSTED)

    async def writer() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("while cancelled")  # (its cancellation turned into an error)

    reader = Loop(failure)
    task = await running(reader, writer)
    reader.release.set()
    with pytest.raises(RemoteProtocolError) as raised:
        await task
    assert raised.value is failure


async def test_a_cancellation_from_outside_ends_both_loops_and_goes_on() -> None:
    reader, writer = Loop(), Loop()
    task = await running(reader, writer)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert reader.cancelled
    assert writer.cancelled
    assert reader.ended
    assert task.cancelled()


async def test_a_cancellation_from_outside_goes_on_when_the_reader_fails_too() -> None:
    reader, writer = Loop(StreamClosed("gone")), Loop()
    task = await running(reader, writer)
    reader.release.set()
    task.cancel()  # (before the reader's failure cancels the writer)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_a_cancellation_while_the_reader_ends_goes_on() -> None:
    """Cancelled while it waits for the reader to end: the reader still ends first."""
    reader_done = asyncio.Event()
    ended: list[str] = []

    async def reader() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            # A reader slow to end, even cancelled again.
            while not reader_done.is_set():
                try:
                    await reader_done.wait()
                except asyncio.CancelledError:
                    ended.append("cancelled again")
            ended.append("ended")

    writer = Loop()
    task = await running(reader, writer)
    writer.release.set()
    for _ in range(3):
        await asyncio.sleep(0)
    task.cancel()
    for _ in range(3):
        await asyncio.sleep(0)
    assert not task.done()
    reader_done.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ended == ["cancelled again", "ended"]


async def waits_until_cancelled(caught: Callable[[], bool]) -> str:
    """Wait until cancelled; say so if ``caught`` takes the cancellation as its own."""
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        if not caught():
            raise
        return "caught"
    return "released"


async def under_deadline(seconds: float) -> str:
    deadline = Deadline(seconds)
    try:
        return await waits_until_cancelled(deadline.passed)
    finally:
        deadline.clear()


async def test_the_deadline_cancels_and_says_so() -> None:
    task = asyncio.get_running_loop().create_task(under_deadline(0.05))
    assert await task == "caught"
    assert task.cancelling() == 0


async def test_a_cleared_deadline_cancels_nothing() -> None:
    deadline = Deadline(0.02)
    deadline.clear()
    await asyncio.sleep(0.05)  # (would be cancelled here if the timer were still set)
    assert not deadline.passed()


async def test_a_cancellation_from_outside_is_not_the_deadline() -> None:
    task = asyncio.get_running_loop().create_task(under_deadline(10))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def stoppable(stops: list[StreamStop]) -> str:
    stop = StreamStop()
    stops.append(stop)
    try:
        return await waits_until_cancelled(stop.caught)
    finally:
        stop.done()


async def test_the_stop_ends_the_stream_quietly_once() -> None:
    stops: list[StreamStop] = []
    task = asyncio.get_running_loop().create_task(stoppable(stops))
    await asyncio.sleep(0)
    stops[0].cancel()
    stops[0].cancel()  # (a second call changes nothing)
    assert await task == "caught"
    assert task.cancelling() == 0
    assert stops[0].called


async def test_the_stop_of_an_ended_stream_cancels_nothing() -> None:
    stop = StreamStop()
    stop.done()
    stop.cancel()
    await asyncio.sleep(0)  # (would raise here if the stop had cancelled this task)
    assert not stop.called


async def test_a_cancellation_from_outside_goes_through_the_stop() -> None:
    stops: list[StreamStop] = []
    task = asyncio.get_running_loop().create_task(stoppable(stops))
    await asyncio.sleep(0)
    stops[0].cancel()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
