"""Each conformance case catches what it checks: against the project's server with the one
fault made for that case (tests/conformance/_faults.py), the case fails."""

from __future__ import annotations

import os

import attrs
import pytest

from xdscore.testing.conformance import CASES, PROPERTY_CASES, Case, run_suite

from ._faults import FAULTS, ResendNacked
from ._harness import SETTINGS, serving

pytestmark = pytest.mark.anyio


def test_every_case_has_its_fault() -> None:
    assert sorted(FAULTS) == sorted(case.id for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
async def test_the_case_fails_against_its_fault(case: Case) -> None:
    async with serving(fault=FAULTS[case.id]) as driver:
        report = await run_suite(driver, cases=[case], settings=SETTINGS)
    (result,) = report.results
    assert result.outcome == "failed", f"{case.id} {result.outcome}: {result.detail}"


async def test_the_property_mode_finds_a_fault_and_shrinks_it() -> None:
    """A server that sends a rejected response again: the generated sequences find it,
    and Hypothesis shrinks the sequence to the two steps that show it."""
    fault = type("ResendNackedSotw", (ResendNacked,), {"protocols": ("sotw",)})
    async with serving(fault=fault) as driver:
        report = await run_suite(
            driver,
            cases=PROPERTY_CASES[:1],
            settings=attrs.evolve(SETTINGS, property_examples=30),
        )
    (result,) = report.results
    assert result.outcome == "failed", result.detail
    assert "sends again what the client rejected" in result.detail
    steps = result.detail.split("the shortest sequence found", 1)[1]
    assert steps.count(";") <= 2, steps
    assert "reject the next" in steps
    assert "← [sotw#" in result.trace


MATRIX = "XDSCORE_CONFORMANCE_MATRIX"


@pytest.mark.skipif(not os.environ.get(MATRIX), reason=f"about 50 minutes: set {MATRIX}=1")
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
async def test_the_whole_suite_against_each_fault_fails_that_case_alone(case: Case) -> None:
    """Every case run against each fault: only the cases the fault was made for fail (two
    share one: the server without ordering)."""
    fault = FAULTS[case.id]
    async with serving(fault=fault) as driver:
        report = await run_suite(driver, settings=SETTINGS)
    expected = {known for known, made in FAULTS.items() if made is fault}
    assert {r.case.id for r in report.failures} == expected, [
        (r.case.id, r.detail) for r in report.failures
    ]
