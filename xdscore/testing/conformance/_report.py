"""Results as text (a line per case, then a summary, as h2spec prints them) and as JUnit XML."""

from __future__ import annotations

import textwrap
from xml.etree import ElementTree

from ._case import Case
from ._runner import FAILED, PASSED, SKIPPED, CaseResult, Report

__all__ = ["case_listing", "junit_xml", "result_lines", "summary"]

_MARKS = {PASSED: "✔", FAILED: "✘", SKIPPED: "-"}


def result_lines(result: CaseResult) -> str:
    """One line for the case; for a failure, the evidence and the trace under it; for a
    skip, why; for a case checked in part, what was left out."""
    case = result.case
    line = f"  {_MARKS[result.outcome]} {case.id}: {case.title} ({result.seconds:.2f} s)"
    if result.outcome == PASSED:
        return f"{line}\n      {result.detail}" if result.detail else line
    if result.outcome == SKIPPED:
        return f"{line}\n      skipped: {result.detail}"
    lines = [line, _indent("clause: " + case.clause, 6), f"      failed: {result.detail}"]
    if result.trace:
        lines.append("      trace:")
        lines.append(textwrap.indent(result.trace, "        "))
    return "\n".join(lines)


def _indent(text: str, width: int) -> str:
    return textwrap.fill(text, 100, initial_indent=" " * width, subsequent_indent=" " * (width + 2))


def summary(report: Report) -> str:
    """The closing lines: counts, time, and the failed case ids."""
    total = len(report.results)
    text = (
        f"{total} cases, {report.count(PASSED)} passed, {report.count(SKIPPED)} skipped, "
        f"{report.count(FAILED)} failed ({report.seconds:.1f} s; {report.target})"
    )
    if report.failures:
        text += "\nfailed: " + " ".join(r.case.id for r in report.failures)
    return text


def case_listing(cases: list[Case], *, verbose: bool = False) -> str:
    """``--list``: each case's id and title (and with ``verbose`` its clause and invariants)."""
    lines = []
    for case in cases:
        lines.append(f"{case.id}: {case.title}")
        if verbose:
            numbers = ", ".join(str(n) for n in case.invariants)
            lines.append(_indent(f"{case.clause} [invariants {numbers}]", 4))
    return "\n".join(lines)


def junit_xml(report: Report) -> bytes:
    """The report as JUnit XML: one ``testcase`` a case, ``failure`` with the evidence and
    trace, ``skipped`` with the reason."""
    suite = ElementTree.Element(
        "testsuite",
        name="xdscore conformance",
        tests=str(len(report.results)),
        failures=str(report.count(FAILED)),
        errors="0",
        skipped=str(report.count(SKIPPED)),
        time=f"{report.seconds:.3f}",
    )
    ElementTree.SubElement(
        ElementTree.SubElement(suite, "properties"),
        "property",
        name="target",
        value=report.target,
    )
    for result in report.results:
        case = result.case
        element = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"xds.{case.protocol}",
            name=case.id,
            time=f"{result.seconds:.3f}",
        )
        if result.outcome == FAILED:
            failure = ElementTree.SubElement(element, "failure", message=result.detail)
            failure.text = f"clause: {case.clause}\n\n{result.detail}\n\n{result.trace}"
        elif result.outcome == SKIPPED:
            ElementTree.SubElement(element, "skipped", message=result.detail)
    root = ElementTree.Element("testsuites")
    root.append(suite)
    ElementTree.indent(root)
    data: bytes = ElementTree.tostring(root, encoding="utf-8", xml_declaration=True)
    return data
