"""Wakeup: level-triggered, collapsing, timed, and cancellable in an anyio scope."""

from __future__ import annotations

import time

import anyio
import anyio.lowlevel
import pytest

from xdscore.server._wakeup import Wakeup

pytestmark = pytest.mark.anyio


async def test_a_raised_flag_is_consumed_without_waiting_and_sets_collapse() -> None:
    wake = Wakeup(raised=True)
    with anyio.fail_after(1):
        await wake.wait()
    wake.set()
    wake.set()
    with anyio.fail_after(1):
        await wake.wait()
    with anyio.move_on_after(0.05) as scope:
        await wake.wait()  # the two sets were one wake-up
    assert scope.cancelled_caught


async def test_a_set_wakes_the_waiter() -> None:
    wake = Wakeup()
    woken: list[bool] = []

    async def waiter() -> None:
        await wake.wait()
        woken.append(True)

    async with anyio.create_task_group() as group:
        group.start_soon(waiter)
        await anyio.lowlevel.checkpoint()
        assert woken == []
        wake.set()
    assert woken == [True]


async def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    wake = Wakeup()
    with anyio.move_on_after(0.01) as scope:
        await wake.wait()
    assert scope.cancelled_caught
    assert wake._waiter is None
    wake.set()
    with anyio.fail_after(1):
        await wake.wait()


async def test_a_wait_until_a_time_returns_then_without_lowering_anything() -> None:
    wake = Wakeup()
    with anyio.fail_after(1):
        await wake.wait(time.monotonic() + 0.02)
    assert not wake.raised
    wake.set()
    with anyio.fail_after(1):
        await wake.wait(time.monotonic() + 10)  # raised: at once, and lowered
    assert not wake.raised
    with anyio.move_on_after(0.05) as scope:
        await wake.wait(time.monotonic() + 10)
    assert scope.cancelled_caught
