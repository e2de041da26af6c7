"""The project's own server passes every conformance case: on both transports (in process,
through a hook driver), as ``xdscore serve`` on a directory the suite writes (the
directory driver, with the command line's default clocks, in under two minutes), and the
property mode finds nothing."""

from __future__ import annotations

import sys

import attrs
import pytest

from xdscore.testing.conformance import (
    CASES,
    PROPERTY_CASES,
    DirectoryDriver,
    Report,
    Settings,
    run_suite,
)

from ._harness import SETTINGS, serving

pytestmark = pytest.mark.anyio

SERVE = f"{sys.executable} -m xdscore serve {{dir}} --listen {{addr}} --debounce-ms 20"


def failures(report: Report) -> str:
    return "\n\n".join(
        f"{r.case.id}: {r.detail}\n{r.trace}" for r in report.results if r.outcome != "passed"
    )


@pytest.mark.parametrize("transport", ["http2", "grpclib"])
async def test_every_case_passes_on_each_transport(transport: str) -> None:
    async with serving(transport) as driver:
        report = await run_suite(driver, settings=SETTINGS)
    assert len(report.results) == len(CASES) >= 30
    assert report.count("passed") == len(CASES), failures(report)


async def test_every_case_passes_on_xdscore_serve_within_two_minutes() -> None:
    async with DirectoryDriver(SERVE + " --log-level warning") as driver:
        report = await run_suite(driver, settings=Settings())
    assert report.count("passed") == len(CASES), failures(report)
    assert report.seconds < 120


@pytest.mark.parametrize("transport", ["http2", "grpclib"])
async def test_generated_sequences_hold_the_model(transport: str) -> None:
    async with serving(transport) as driver:
        report = await run_suite(
            driver, cases=PROPERTY_CASES, settings=attrs.evolve(SETTINGS, property_examples=8)
        )
    assert report.count("passed") == len(PROPERTY_CASES), failures(report)
