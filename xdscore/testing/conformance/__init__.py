"""A black-box xDS conformance suite for any control plane (public API).

Theory of operation
-------------------
Each `Case` checks one clause of the xDS protocol, named after the invariants of
``docs/protocol.md`` (its id says where: ``sotw/nack/no-resend``), over real gRPC streams
to the server under test: ADS, State-of-the-World and Delta, and the per-type services
where the server offers them. Its streams are driven by the library's client machines,
which behave like Envoy's, and every message is recorded, so a failure comes with the
exact evidence and the short trace that shows it.

A `Driver` says where the server listens and how the suite changes what it serves:
`PassiveDriver` (changes nothing: the cases that need a change are skipped),
`DirectoryDriver` (a server started on a directory of Envoy resources the suite
writes), `BenchmarkDriver` (a server speaking the benchmark peers' stdin protocol)
and `HookDriver` (an embedder's `ConfigHook`). The configuration is a small
`World`; cases read what the server actually serves from an `Inventory`.

`run_suite` runs cases and returns a `Report`. The two cases of
`PROPERTY_CASES` generate request sequences with Hypothesis and check every
response against the protocol model, shrinking a failure to a minimal trace.
``xdscore conformance`` is the command line.

In pytest::

    @pytest.mark.parametrize("case", conformance.CASES, ids=lambda c: c.id)
    async def test_conformance(server_address, case):
        async with conformance.PassiveDriver(*server_address) as driver:
            report = await conformance.run_suite(driver, cases=[case])
        assert report.ok, report.results[0].detail
"""

from . import _catalogue  # noqa: F401  (registers the cases, in order)
from ._case import CASES, Case, CaseContext, Settings
from ._channel import Channel, StreamEnded, client_ssl_context
from ._drivers import (
    BenchmarkDriver,
    ConfigHook,
    DirectoryDriver,
    Driver,
    DriverError,
    HookDriver,
    PassiveDriver,
    SnapshotCacheHook,
)
from ._inventory import Inventory
from ._property import PROPERTY_CASES
from ._report import case_listing, junit_xml, result_lines, summary
from ._runner import CaseResult, Report, run_case, run_suite, select
from ._verdicts import CaseFailed, CaseSkipped
from ._world import World

__all__ = [
    "CASES",
    "PROPERTY_CASES",
    "BenchmarkDriver",
    "Case",
    "CaseContext",
    "CaseFailed",
    "CaseResult",
    "CaseSkipped",
    "Channel",
    "ConfigHook",
    "DirectoryDriver",
    "Driver",
    "DriverError",
    "HookDriver",
    "Inventory",
    "PassiveDriver",
    "Report",
    "Settings",
    "SnapshotCacheHook",
    "StreamEnded",
    "World",
    "case_listing",
    "client_ssl_context",
    "junit_xml",
    "result_lines",
    "run_case",
    "run_suite",
    "select",
    "summary",
]
