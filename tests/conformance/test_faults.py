"""Each conformance case catches what it checks: against the project's server with the one
fault made for that case (tests/conformance/_faults.py), the case fails.

Each case runs against a server of its own, several side by side, with the property mode
against a fault of its own (about 15 s for all). With
``XDSCORE_CONFORMANCE_FULL=1``, also the whole suite against each fault: only the case the
fault was made for fails (about 6 minutes).
"""

from __future__ import annotations

import functools
import os

import attrs
import pytest

from xdscore.testing.conformance import (
    CASES,
    PROPERTY_CASES,
    Case,
    CaseResult,
    Report,
    run_suite,
)

from ._faults import FAULTS, ResendNacked
from ._harness import SETTINGS, serving, side_by_side

pytestmark = pytest.mark.anyio

FULL = "XDSCORE_CONFORMANCE_FULL"
IN_PROCESS = 12
"""Runs at once: their servers are in this process and cost little to start."""


def test_every_case_has_its_fault() -> None:
    assert sorted(FAULTS) == sorted(case.id for case in CASES)


async def fails_against_its_fault(case: Case) -> CaseResult:
    async with serving(fault=FAULTS[case.id]) as driver:
        report = await run_suite(driver, cases=[case], settings=SETTINGS)
    (result,) = report.results
    return result


async def the_property_mode_against_a_resent_nack() -> CaseResult:
    """The SotW property case against a server that sends a rejected response again."""
    fault = type("ResendNackedSotw", (ResendNacked,), {"protocols": ("sotw",)})
    async with serving(fault=fault) as driver:
        report = await run_suite(
            driver,
            cases=PROPERTY_CASES[:1],
            settings=attrs.evolve(SETTINGS, property_examples=30),
        )
    (result,) = report.results
    return result


async def test_each_case_and_the_property_mode_fail_against_their_faults() -> None:
    """Every case fails against its fault. The property mode finds a server that sends a
    rejected response again, and Hypothesis shrinks the sequence to the two steps that show
    it. (One test, so that all of them run side by side.)"""
    jobs = [functools.partial(fails_against_its_fault, case) for case in CASES]
    # the longest first
    found, *results = await side_by_side([the_property_mode_against_a_resent_nack, *jobs])
    assert [r.case.id for r in results] == [case.id for case in CASES]
    missed = [f"{r.case.id} {r.outcome}: {r.detail}" for r in results if not r.failed]
    assert not missed, "\n".join(missed)

    assert found.outcome == "failed", found.detail
    assert "sends again what the client rejected" in found.detail
    steps = found.detail.split("the shortest sequence found", 1)[1]
    assert steps.count(";") <= 2, steps
    assert "reject the next" in steps
    assert "← [sotw#" in found.trace


@pytest.mark.skipif(not os.environ.get(FULL), reason=f"about 6 minutes: set {FULL}=1")
async def test_the_whole_suite_against_each_fault_fails_its_cases_alone() -> None:
    """Every case run against each fault: only the case the fault was made for fails."""

    async def run(case: Case) -> Report:
        async with serving(fault=FAULTS[case.id]) as driver:
            return await run_suite(driver, settings=SETTINGS)

    reports = await side_by_side([functools.partial(run, case) for case in CASES], IN_PROCESS)
    wrong = [
        f"{case.id}'s fault: failed {[r.case.id for r in report.failures]}\n"
        + "\n".join(f"  {r.case.id}: {r.detail}" for r in report.failures)
        for case, report in zip(CASES, reports, strict=True)
        if [r.case.id for r in report.failures] != [case.id]
    ]
    assert not wrong, "\n".join(wrong)
