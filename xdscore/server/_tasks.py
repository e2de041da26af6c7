"""A stream's tasks on asyncio, without a task group or an anyio cancel scope per stream.

Every stream runs two loops (reading, writing), may be ended by the server closing, and
must send its first request within a deadline. A task group, a ``move_on_after`` and a
cancel scope cost about 40 us a stream together on the benchmark machine, an eighth of a
stream's initial sync at R = 100; here the writer runs in the stream's own task, the reader
in one task more, and the deadline and the server's stop are a timer and a flag.

Cancellation is counted the way ``asyncio.timeout`` counts it: a cancellation made here is
taken back (``Task.uncancel``) when it is the one that arrived, and one from outside (the
transport's, a caller's) always goes through.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from .._errors import ProtocolError, StreamClosed

__all__ = ["Deadline", "StreamStop", "forget_frames", "run_pair"]


class _CancelOnFailure:
    """The reader's done callback: a reader that failed cancels the writer's task."""

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.armed = True
        self.fired = False

    def __call__(self, reading: asyncio.Task[None]) -> None:
        if self.armed and not reading.cancelled() and reading.exception() is not None:
            self.fired = True
            self.task.cancel()


async def run_pair(
    reader: Callable[[], Awaitable[None]], writer: Callable[[], Awaitable[None]]
) -> None:
    """Run both loops until the writer ends or either fails; the peer going away is a clean
    end. The reader ending (the peer closed its side) leaves the writer going.

    The writer runs in the calling task and the reader in a task of its own, which is always
    finished when this returns. Of the errors, a :class:`ProtocolError` is raised first,
    then any other exception but :class:`StreamClosed`; a cancellation from outside ends
    both loops and goes on."""
    task = asyncio.current_task()
    assert task is not None
    reading = task.get_loop().create_task(_forgetting(reader()))
    watch = _CancelOnFailure(task)
    reading.add_done_callback(watch)
    errors: list[BaseException] = []
    try:
        await writer()
    except asyncio.CancelledError as cancelled:
        watch.armed = False
        if not watch.fired or task.uncancel() > 0:
            await _finish(reading, task)
            forget_frames(cancelled)
            raise
    except BaseException as error:
        watch.armed = False
        if watch.fired:
            task.uncancel()
        errors.append(error)
    else:
        watch.armed = False
        if watch.fired:
            task.uncancel()
    ended: BaseException | None = None
    try:
        if not reading.done():
            await _finish(reading, task)
        ended = None if reading.cancelled() else reading.exception()
        if ended is not None:
            errors.append(ended)
        _raise_first(errors)
    finally:
        # Not locals of this frame, which the raised error's traceback holds: a cycle.
        del errors, ended, reading, watch


async def _finish(reading: asyncio.Task[None], task: asyncio.Task[object]) -> None:
    """Cancel the reader and wait for it to end; a cancellation of ``task`` goes on."""
    reading.cancel()
    try:
        await reading
    except asyncio.CancelledError:
        if task.cancelling():
            raise
    except BaseException as error:
        # Its error is the task's, read by the caller. Raised here, its traceback holds this
        # frame, which holds the task that holds the error: a cycle, keeping the stream's
        # whole state until a full collection, but for this.
        forget_frames(error)


def _raise_first(errors: list[BaseException]) -> None:
    """Raise the error that ended the stream (none if the peer only went away), dropping the
    frames of every other one; a non-``Exception`` goes through first."""
    failure: BaseException | None = next(
        (e for e in errors if not isinstance(e, Exception)), None
    ) or next((e for e in errors if isinstance(e, ProtocolError)), None)
    if failure is None:
        failure = next((e for e in errors if not isinstance(e, StreamClosed)), None)
    for each in errors:
        if each is not failure:
            forget_frames(each)
    errors.clear()
    if failure is not None:
        try:
            raise failure
        finally:
            del failure


async def _forgetting(loop: Awaitable[None]) -> None:
    """Run ``loop``; if it is cancelled, drop the frames the cancellation holds."""
    try:
        await loop
    except asyncio.CancelledError as cancelled:
        # A cancelled task keeps its exception, and its traceback holds this stream's
        # frames: the driver and all it refers to.
        forget_frames(cancelled)
        raise


def forget_frames(error: BaseException) -> None:
    """Clear the traceback of ``error`` and of every exception it was raised from or while
    handling (an exception group's members too).

    For an exception that ends a stream, or cancels one of its tasks, once nothing needs
    its traceback: grpclib and anyio keep such an exception in a reference cycle, and its
    traceback holds the stream's frames, so the stream's whole state (the driver, the state
    machine, the last response it held) would wait for a full collection, which a busy
    server runs rarely.
    """
    pending = [error]
    seen: set[int] = set()
    while pending:
        each = pending.pop()
        if id(each) in seen:
            continue
        seen.add(id(each))
        each.__traceback__ = None
        pending += [linked for linked in (each.__cause__, each.__context__) if linked is not None]
        if isinstance(each, BaseExceptionGroup):
            pending += each.exceptions


class Deadline:
    """Cancels the current task ``seconds`` from now unless :meth:`clear` comes first;
    :meth:`passed` tells, of a cancellation caught, whether it was this one's (and then
    takes it back). Cleared, it lets go of the task (an error raised past the frame that
    holds the deadline keeps that frame: not the task too)."""

    def __init__(self, seconds: float) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task: asyncio.Task[object] | None = task
        self._fired = False
        self._timer = task.get_loop().call_later(seconds, self._fire)

    def _fire(self) -> None:
        self._fired = True
        if self._task is not None:
            self._task.cancel()

    def clear(self) -> None:
        self._timer.cancel()
        self._task = None

    def passed(self) -> bool:
        return self._fired and self._task is not None and self._task.uncancel() == 0


class StreamStop:
    """Ends the task serving a stream from outside (the server closing): :meth:`cancel`
    cancels it once, while :meth:`running`; :meth:`caught` tells, of a cancellation
    caught, whether it was only this one (and then takes it back)."""

    def __init__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self.called = False
        self._running = True

    def cancel(self) -> None:
        if self._running and not self.called:
            self.called = True
            self._task.cancel()

    def done(self) -> None:
        """The stream has ended: a later :meth:`cancel` does nothing."""
        self._running = False

    def caught(self) -> bool:
        return self.called and self._task.uncancel() == 0
