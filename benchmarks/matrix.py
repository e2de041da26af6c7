"""The side-by-side benchmark matrix: its points, and the figures drawn from loadgen reports.

Pure functions over the JSON reports of ``benchmarks/loadgen.py``; running the servers is
``benchmarks/run.py``'s job. Every point is measured with each of the load generator's
client modes (``CLIENTS``): its neutral grpc-core clients (``--client grpcio``: grpcio's
channels, each client decoding its own responses), on which the targets are judged, and the
project's own lean clients (``--client h2``). For each client mode, point and server:

* initial convergence (s), with the load generator's saturation over the same interval
  (its own CPU seconds divided by the wall time: near 1.0, the figure is the client's),
  and the server's CPU seconds over it;
* push convergence (median over pushes, s) from the push command to the last client's ACK,
  with the median saturation over the same interval, and from the moment the server's
  cache holds the new version (its ``mono=``) to the last ACK. Both are given because a
  server may answer open watches before it reports the version set: go-control-plane's
  ``SetSnapshot`` does, so its second figure leaves out work the first one counts;
* server CPU per push (median, s) and peak RSS (MB, after the last push);
* at R = 100, memory per stream: RSS once every client holds the full config, minus the RSS
  of the same server serving the same workload to no stream, divided by N (KB).

Ratios are the peer's figure over xdscore's: above 1, xdscore is faster or smaller. The
servers are xdscore (its compiled build where ``make compiled`` made one), go-control-plane
(the peer) and, beside a compiled build, xdscore's pure build (``XDSCORE_PURE=1``).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Report = Mapping[str, Any]
"""One loadgen JSON report."""

ENDPOINTS = 10
"""E: endpoints per ClusterLoadAssignment at every point."""
MEMORY_CLUSTERS = 100
"""R at which memory per stream is figured (against a server with no streams)."""
NEUTRAL = "grpcio"
"""The client mode the targets are judged on: grpc-core, each client its own channel."""
OWN = "h2"
"""The project's own load generator: xdscore's client machines over a lean HTTP/2 client."""
CLIENTS = (NEUTRAL, OWN)
"""The load generator's client modes (``--client``) the matrix runs, in the page's order."""
CLIENT_LABELS = {
    NEUTRAL: "grpc-core clients (`--client grpcio`: one grpcio channel per client, each "
    "decoding its own responses with the protobuf runtime)",
    OWN: "the project's own clients (`--client h2`: xdscore's client machines over a lean "
    "HTTP/2 client, identical responses decoded once for the fleet)",
}


@dataclass(frozen=True, kw_only=True)
class Point:
    """One cell of the matrix: a protocol, N clients, R clusters and how many pushes."""

    protocol: str
    clients: int
    clusters: int
    pushes: int = 5

    @property
    def name(self) -> str:
        return f"{self.protocol}-n{self.clients}-r{self.clusters}"

    @property
    def label(self) -> str:
        mode = "Delta" if self.protocol == "delta" else "SotW"
        return f"{mode} {self.clients} \N{MULTIPLICATION SIGN} {self.clusters}"


FULL = (
    Point(protocol="sotw", clients=100, clusters=1000),
    Point(protocol="sotw", clients=1000, clusters=1000),
    Point(protocol="sotw", clients=1000, clusters=100),
    Point(protocol="delta", clients=100, clusters=1000),
    Point(protocol="delta", clients=1000, clusters=1000),
    Point(protocol="delta", clients=1000, clusters=100),
    Point(protocol="sotw", clients=2000, clusters=100),
    Point(protocol="sotw", clients=10, clusters=100_000, pushes=20),
)
"""The issue's table; peak RSS at 10 x 100000 is after its 20 pushes."""

QUICK = (
    Point(protocol="sotw", clients=100, clusters=1000, pushes=3),
    Point(protocol="delta", clients=100, clusters=1000, pushes=3),
    Point(protocol="sotw", clients=100, clusters=100, pushes=3),
    Point(protocol="delta", clients=100, clusters=100, pushes=3),
    Point(protocol="sotw", clients=10, clusters=10_000, pushes=5),
)
"""A few minutes' subset for trying the matrix out."""

IDLE = Point(protocol="sotw", clients=0, clusters=MEMORY_CLUSTERS, pushes=0)
"""A server serving the R = 100 workload to no stream: the base of memory per stream."""


@dataclass(frozen=True, kw_only=True)
class Figures:
    """What one server did at one point (medians over its runs and pushes)."""

    initial_s: float
    initial_saturation: float
    initial_cpu_s: float
    """The server's CPU seconds from the first connection to the last client's convergence."""
    push_s: float
    push_saturation: float
    push_from_set_s: float
    cpu_per_push_s: float
    peak_rss_mb: float
    per_stream_kb: float | None = None
    initial_sys_s: float | None = None
    """Of ``initial_cpu_s``, the kernel's (system time); None for reports without it."""
    sys_per_push_s: float | None = None
    """Of ``cpu_per_push_s``, the kernel's."""


def saturation(loadgen_cpu_s: float, wall_s: float) -> float:
    """The load generator's CPU over wall time: 1.0 is one core busy all the time."""
    if wall_s <= 0:
        return 0.0
    return loadgen_cpu_s / wall_s


def per_stream_kb(converged_rss_mb: float, idle_rss_mb: float, clients: int) -> float:
    """Memory each stream adds: (RSS with N synced streams - RSS with none) / N, in KB."""
    return (converged_rss_mb - idle_rss_mb) * 1024 / clients


def _from_command(push: Report) -> float:
    """A push's convergence from the push command: until set, then until the last ACK."""
    return float(push["command_to_set_s"] + push["update_convergence_s"])


def figures(reports: Sequence[Report], idle_rss_mb: float | None = None) -> Figures:
    """The figures of one server at one point from its runs' reports (at least one).

    ``idle_rss_mb`` is the same server's RSS with no streams at R = ``MEMORY_CLUSTERS``;
    given, and the point at that R, memory per stream is figured too.
    """
    if not reports:
        raise ValueError("no reports to draw figures from")
    pushes = [push for report in reports for push in report["pushes"]]
    if not pushes:
        raise ValueError("the reports hold no pushes")
    per_stream = None
    first = reports[0]
    if idle_rss_mb is not None and first["clusters"] == MEMORY_CLUSTERS and first["clients"]:
        per_stream = statistics.median(
            per_stream_kb(report["initial_server_rss_mb"], idle_rss_mb, report["clients"])
            for report in reports
        )
    return Figures(
        initial_s=statistics.median(r["initial_convergence_s"] for r in reports),
        initial_saturation=statistics.median(
            saturation(r["initial_loadgen_cpu_s"], r["initial_convergence_s"]) for r in reports
        ),
        initial_cpu_s=statistics.median(r["initial_server_cpu_s"] for r in reports),
        push_s=statistics.median(_from_command(p) for p in pushes),
        push_saturation=statistics.median(
            saturation(p["loadgen_cpu_to_ack_s"], _from_command(p)) for p in pushes
        ),
        push_from_set_s=statistics.median(p["update_convergence_s"] for p in pushes),
        cpu_per_push_s=statistics.median(p["server_cpu_s"] for p in pushes),
        peak_rss_mb=statistics.median(r["server_peak_rss_mb"] for r in reports),
        per_stream_kb=per_stream,
        initial_sys_s=_median_of(reports, "initial_server_sys_s"),
        sys_per_push_s=_median_of(pushes, "server_sys_s"),
    )


def _median_of(reports: Sequence[Report], key: str) -> float | None:
    """The median of ``key`` over ``reports``, or None if one lacks it (an older report)."""
    if not all(key in report for report in reports):
        return None
    return statistics.median(report[key] for report in reports)


OURS = "xdscore"
PEER = "go-cp"
PURE = "xdscore-pure"
"""xdscore's pure build, measured beside a compiled one."""
Outcome = Figures | str
"""A server's figures at a point, or why it has none."""
Rows = Sequence[tuple[Point, Mapping[str, Outcome]]]
"""Each point measured (with one client mode), with every server's outcome there."""

RATIO_FIELDS = (
    "initial_s",
    "initial_cpu_s",
    "push_s",
    "push_from_set_s",
    "cpu_per_push_s",
    "peak_rss_mb",
    "per_stream_kb",
)
"""The figures compared between the servers (saturations are the client's, not compared)."""


def ratio(peer: float | None, ours: float | None) -> float | None:
    """The peer's figure over ours; None when either is missing or ours is not positive."""
    if peer is None or ours is None or ours <= 0:
        return None
    return peer / ours


def ratios(peer: Figures, ours: Figures) -> dict[str, float | None]:
    """Peer / xdscore for every compared figure."""
    return {name: ratio(getattr(peer, name), getattr(ours, name)) for name in RATIO_FIELDS}
