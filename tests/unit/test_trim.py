"""The trimmer: freed memory given back once after a burst of stream ends, a full
collection first only when one of them received a large request."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from xdscore.server._trim import Trimmer, _malloc_trim

pytestmark = pytest.mark.anyio


def _full_collections() -> tuple[list[int], Any]:
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            seen.append(1)

    return seen, callback


@pytest.mark.parametrize("large", [False, True])
async def test_a_burst_of_ends_trims_once_and_collects_only_after_a_large_request(
    large: bool,
) -> None:
    trimmer = Trimmer(delay=0.05)
    if _malloc_trim() is None:
        pytest.fail("the test machine runs glibc: malloc_trim must be found")
    seen, callback = _full_collections()
    gc.callbacks.append(callback)
    try:
        trimmer.stream_ended()
        trimmer.stream_ended(collect=large)
        trimmer.stream_ended()
        await asyncio.sleep(0.2)
        assert trimmer.trims == 1
        assert len(seen) == (1 if large else 0)
        # The next burst starts afresh: no collection is carried over.
        trimmer.stream_ended()
        await asyncio.sleep(0.2)
    finally:
        gc.callbacks.remove(callback)
    assert trimmer.trims == 2
    assert len(seen) == (1 if large else 0)
