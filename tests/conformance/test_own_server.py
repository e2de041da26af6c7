"""The project's own server passes every conformance case: ``xdscore serve`` on a directory
the suite writes (the directory driver), on both transports, SotW and Delta, and the
property mode finds nothing.

In CI each transport's cases are split between several servers run side by side, with the
tests' short clocks, and the property mode runs on one transport (about 30 s in all). With
``XDSCORE_CONFORMANCE_FULL=1``, the property mode runs on both, and a whole run as a team
would make one is timed: every case in order against one server, with the command line's
default clocks, in under two minutes (about 80 s here on each transport).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence

import attrs
import pytest

from xdscore.testing.conformance import (
    CASES,
    PROPERTY_CASES,
    Case,
    DirectoryDriver,
    Report,
    Settings,
    run_suite,
)

from ._harness import SETTINGS, TRANSPORTS, side_by_side

pytestmark = pytest.mark.anyio

FULL = "XDSCORE_CONFORMANCE_FULL"
SHARDS = 3
"""Servers a transport's cases are split between (each property case gets one besides)."""
PROPERTY_TRANSPORTS = list(TRANSPORTS) if os.environ.get(FULL) else ["http2"]
"""Where the property mode runs: it checks the protocol, which the transport does not
change, so in CI on one transport only."""


def serve(transport: str) -> str:
    """``xdscore serve`` as the directory driver starts it."""
    return (
        f"{sys.executable} -m xdscore serve {{dir}} --listen {{addr}} --debounce-ms 20"
        f" --transport {transport} --log-level warning"
    )


def failures(reports: Sequence[tuple[str, Report]]) -> str:
    return "\n\n".join(
        f"{transport} {r.case.id}: {r.outcome}: {r.detail}\n{r.trace}"
        for transport, report in reports
        for r in report.results
        if r.outcome != "passed"
    )


async def test_every_case_passes_on_xdscore_serve_on_each_transport() -> None:
    settings = attrs.evolve(SETTINGS, property_examples=8)
    shards = [
        (transport, CASES[index::SHARDS]) for transport in TRANSPORTS for index in range(SHARDS)
    ]
    shards += [(transport, [case]) for transport in PROPERTY_TRANSPORTS for case in PROPERTY_CASES]

    async def run(transport: str, cases: Sequence[Case]) -> tuple[str, Report]:
        async with DirectoryDriver(serve(transport)) as driver:
            return transport, await run_suite(driver, cases=cases, settings=settings)

    reports = await side_by_side([functools.partial(run, *shard) for shard in shards])
    for transport in TRANSPORTS:
        ran = [r.case.id for t, report in reports if t == transport for r in report.results]
        wanted = [*CASES, *(PROPERTY_CASES if transport in PROPERTY_TRANSPORTS else [])]
        assert sorted(ran) == sorted(case.id for case in wanted)
    assert len(CASES) >= 30
    assert all(report.count("passed") == len(report.results) for _, report in reports), failures(
        reports
    )


@pytest.mark.skipif(not os.environ.get(FULL), reason=f"about 3 minutes: set {FULL}=1")
@pytest.mark.parametrize("transport", list(TRANSPORTS))
async def test_a_whole_run_on_one_server_within_two_minutes(transport: str) -> None:
    async with DirectoryDriver(serve(transport)) as driver:
        report = await run_suite(driver, settings=Settings())
    assert report.count("passed") == len(CASES), failures([(transport, report)])
    assert report.seconds < 120, report.seconds
