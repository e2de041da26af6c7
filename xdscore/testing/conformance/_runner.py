"""Running cases: selection, the baseline before each case, timeouts, results.

`run_suite` runs the selected cases one after the other against a driver's server
and returns a `Report`. Before a case the runner puts the driver's baseline world
back if an earlier case changed it; each case runs under the per-case timeout, and a case
that runs over it fails with its trace so far. ``on_result`` sees each result as it comes
(the command line prints it).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Iterable, Sequence

import anyio
import attrs

from ._case import CASES, Case, CaseContext, Settings, Suite
from ._drivers import Driver, DriverError
from ._trace import Trace
from ._verdicts import CaseFailed, CaseSkipped

__all__ = ["CaseResult", "Report", "run_case", "run_suite", "select"]

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@attrs.frozen
class CaseResult:
    """How one case ended: ``outcome`` is ``passed``, ``failed`` or ``skipped``; ``detail``
    the evidence or the reason; ``trace`` what was sent and received (for a failure)."""

    case: Case
    outcome: str
    detail: str = ""
    trace: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.outcome == PASSED

    @property
    def failed(self) -> bool:
        return self.outcome == FAILED


@attrs.frozen
class Report:
    """Every result of a run, and what it ran against."""

    results: tuple[CaseResult, ...]
    target: str
    seconds: float

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if r.failed]

    @property
    def ok(self) -> bool:
        return not self.failures

    def outcome(self, case_id: str) -> str:
        """The outcome of the case ``case_id`` (a ``KeyError`` if it did not run)."""
        for result in self.results:
            if result.case.id == case_id:
                return result.outcome
        raise KeyError(case_id)


def select(patterns: Sequence[str] = (), cases: Iterable[Case] | None = None) -> list[Case]:
    """The cases whose id matches one of ``patterns`` (a shell pattern, or a prefix such as
    ``sotw/`` or ``delta/nack``); every case without patterns. A pattern matching nothing
    is a ``ValueError``."""
    pool = list(CASES if cases is None else cases)
    if not patterns:
        return pool
    chosen: list[Case] = []
    for pattern in patterns:
        matched = [
            c for c in pool if fnmatch.fnmatchcase(c.id, pattern) or c.id.startswith(pattern)
        ]
        if not matched:
            raise ValueError(f"no case matches {pattern!r} (see --list)")
        chosen.extend(c for c in matched if c not in chosen)
    return [c for c in pool if c in chosen]


async def _restore(suite: Suite) -> None:
    """Put the baseline back if an earlier case changed the configuration."""
    driver = suite.driver
    baseline, current = driver.baseline, driver.world
    if baseline is None or current is None or current.shape() == baseline.shape():
        return
    target = baseline.evolve(epoch=current.epoch + 1)
    if driver.cannot(target) is None:
        suite.forget()
        await driver.apply(target)


async def run_case(suite: Suite, case: Case) -> CaseResult:
    """Run ``case`` within the suite's timeout."""
    trace = Trace()
    started = time.monotonic()
    settings = suite.settings
    timeout = settings.case_timeout * (settings.property_examples if case.per_example else 1)
    outcome, detail = PASSED, ""
    context = CaseContext(suite, case, trace)
    try:
        await _restore(suite)
        with anyio.fail_after(timeout):
            await case.run(context)
        if context.partial is not None:
            detail = f"in part: {context.partial}"
    except CaseFailed as exc:
        outcome, detail = FAILED, str(exc)
    except CaseSkipped as exc:
        outcome, detail = SKIPPED, str(exc)
    except TimeoutError:
        outcome, detail = FAILED, f"the case did not finish within {timeout:g} s"
    except DriverError as exc:
        outcome, detail = FAILED, f"the driver failed: {exc}"
    except anyio.get_cancelled_exc_class():
        raise
    except Exception as exc:
        outcome, detail = FAILED, f"the case stopped on an error: {type(exc).__name__}: {exc}"
    return CaseResult(
        case,
        outcome,
        detail,
        trace.render() if outcome == FAILED else "",
        time.monotonic() - started,
    )


async def run_suite(
    driver: Driver,
    *,
    cases: Sequence[Case] | None = None,
    settings: Settings | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
) -> Report:
    """Run ``cases`` (default: every case) against the server ``driver`` reaches."""
    suite = Suite(driver, settings or Settings())
    started = time.monotonic()
    results = []
    try:
        for case in CASES if cases is None else cases:
            result = await run_case(suite, case)
            results.append(result)
            if on_result is not None:
                on_result(result)
    finally:
        suite.close()
    return Report(tuple(results), driver.describe(), time.monotonic() - started)
