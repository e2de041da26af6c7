"""The targets, judged from one run of the matrix.

Issue 32's (:func:`cpu_verdicts`) are ratios of server CPU seconds, judged on the rows of the
grpc-core clients; issue 17's (:func:`timing_verdicts`) are convergence times and memory,
judged on the rows of the project's own clients, as they were set. Each target gives what the
run measured and whether it is met (None: no point of the run measures it, e.g. without the
peer).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from matrix import MEMORY_CLUSTERS, OURS, PEER, PURE, Figures, Outcome, Point, Rows


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    met: bool | None


def _figures(outcomes: Mapping[str, Outcome], server: str) -> Figures | None:
    found = outcomes.get(server)
    return found if isinstance(found, Figures) else None


def _pairs(rows: Rows, other: str = PEER) -> list[tuple[Point, Figures, Figures]]:
    """(point, ours, other's) wherever both servers have figures."""
    found = []
    for point, outcomes in rows:
        ours, theirs = _figures(outcomes, OURS), _figures(outcomes, other)
        if ours is not None and theirs is not None:
            found.append((point, ours, theirs))
    return found


def _x(value: float) -> str:
    return f"{value:.2f}\N{MULTIPLICATION SIGN}"


def _faster(
    target: str, rows: Rows, keep: Callable[[Point], bool], field: str, at_least: float
) -> Verdict:
    """The peer's figure over ours is at least ``at_least`` at every kept point."""
    found = [
        (point, getattr(peer, field) / getattr(ours, field))
        for point, ours, peer in _pairs(rows)
        if keep(point) and getattr(ours, field) > 0
    ]
    if not found:
        return Verdict(target, "not measured in this run", None)
    measured = ", ".join(f"{point.label} {_x(value)}" for point, value in found)
    return Verdict(target, measured, all(value >= at_least for _, value in found))


def initial_3x(rows: Rows) -> Verdict:
    return _faster(
        "initial convergence at least 3\N{MULTIPLICATION SIGN} faster than go-cp at every point",
        rows,
        lambda point: True,
        "initial_s",
        3.0,
    )


def push_10x(rows: Rows) -> Verdict:
    return _faster(
        "pushes at least 10\N{MULTIPLICATION SIGN} faster than go-cp at N = 1000 "
        "(from the push command)",
        rows,
        lambda point: point.clients == 1000,
        "push_s",
        10.0,
    )


def delta_push_cost(rows: Rows) -> Verdict:
    """A Delta push's server CPU over the SotW push's of the same N and R, for xdscore."""
    target = (
        "a Delta push costs at most 1.5\N{MULTIPLICATION SIGN} the SotW push of the same "
        "change (xdscore's server CPU per push)"
    )
    by_shape: dict[tuple[int, int], dict[str, Figures]] = {}
    for point, outcomes in rows:
        ours = _figures(outcomes, OURS)
        if ours is not None:
            by_shape.setdefault((point.clients, point.clusters), {})[point.protocol] = ours
    found = [
        (shape, modes["delta"].cpu_per_push_s / modes["sotw"].cpu_per_push_s)
        for shape, modes in by_shape.items()
        if {"sotw", "delta"} <= modes.keys() and modes["sotw"].cpu_per_push_s > 0
    ]
    if not found:
        return Verdict(target, "not measured in this run", None)
    measured = ", ".join(f"{n} \N{MULTIPLICATION SIGN} {r} {_x(v)}" for (n, r), v in found)
    return Verdict(target, measured, all(value <= 1.5 for _, value in found))


def large_r(rows: Rows) -> list[Verdict]:
    """At R = 100000: push no slower than the initial sync; peak RSS at most half go-cp's."""
    push_target = "R = 100000, N = 10: push (from the cache set) no slower than the initial sync"
    rss_target = "R = 100000, N = 10: peak RSS after 20 pushes at most 0.5 of go-cp's"
    for point, outcomes in rows:
        ours = _figures(outcomes, OURS)
        if point.clusters != 100_000 or ours is None:
            continue
        push = Verdict(
            push_target,
            f"push {ours.push_from_set_s:.2f} s from the cache set "
            f"({ours.push_s:.2f} s from the command), initial {ours.initial_s:.2f} s",
            ours.push_from_set_s <= ours.initial_s,
        )
        peer = _figures(outcomes, PEER)
        if peer is None:
            return [push, Verdict(rss_target, "not measured in this run", None)]
        share = ours.peak_rss_mb / peer.peak_rss_mb
        rss = Verdict(
            rss_target,
            f"{ours.peak_rss_mb:.0f} MB against {peer.peak_rss_mb:.0f} MB ({share:.2f})",
            share <= 0.5,
        )
        return [push, rss]
    missing = "not measured in this run"
    return [Verdict(push_target, missing, None), Verdict(rss_target, missing, None)]


def memory_per_stream(rows: Rows) -> Verdict:
    target = "memory per stream at R = 100 at most 40 KB"
    found = [
        (point, ours.per_stream_kb)
        for point, outcomes in rows
        if point.clusters == MEMORY_CLUSTERS
        and (ours := _figures(outcomes, OURS)) is not None
        and ours.per_stream_kb is not None
    ]
    if not found:
        return Verdict(target, "not measured in this run", None)
    measured = ", ".join(f"{point.label} {kb:.1f} KB" for point, kb in found)
    return Verdict(target, measured, all(kb <= 40.0 for _, kb in found))


def initial_cpu_3x(rows: Rows) -> Verdict:
    return _faster(
        "initial sync: go-cp's server CPU at least 3\N{MULTIPLICATION SIGN} xdscore's at "
        "every point",
        rows,
        lambda point: True,
        "initial_cpu_s",
        3.0,
    )


def push_cpu_10x(rows: Rows) -> Verdict:
    return _faster(
        "pushes: go-cp's server CPU per push at least 10\N{MULTIPLICATION SIGN} xdscore's "
        "at N = 1000",
        rows,
        lambda point: point.clients == 1000,
        "cpu_per_push_s",
        10.0,
    )


def pure_within_1_5x(rows: Rows) -> Verdict:
    """The pure build's server CPU (initial sync and per push) over the compiled build's."""
    target = (
        "the pure build's server CPU at most 1.5\N{MULTIPLICATION SIGN} the compiled "
        "build's at every point (initial sync and per push)"
    )
    found = [
        (point, pure.initial_cpu_s / ours.initial_cpu_s, pure.cpu_per_push_s / ours.cpu_per_push_s)
        for point, ours, pure in _pairs(rows, PURE)
        if ours.initial_cpu_s > 0 and ours.cpu_per_push_s > 0
    ]
    if not found:
        return Verdict(target, "not measured in this run", None)
    measured = ", ".join(
        f"{point.label} {_x(initial)} / {_x(push)}" for point, initial, push in found
    )
    return Verdict(target, measured, all(max(i, p) <= 1.5 for _, i, p in found))


def cpu_verdicts(rows: Rows) -> list[Verdict]:
    """Issue 32's targets (server CPU seconds), for the rows of the grpc-core clients."""
    return [initial_cpu_3x(rows), push_cpu_10x(rows), pure_within_1_5x(rows)]


def timing_verdicts(rows: Rows) -> list[Verdict]:
    """Issue 17's targets, in its order, for the rows of the project's own clients."""
    return [
        initial_3x(rows),
        push_10x(rows),
        delta_push_cost(rows),
        *large_r(rows),
        memory_per_stream(rows),
    ]
