"""The server's Prometheus metrics, with istiod's meanings, in a registry of their own.

Every label is bounded: ``type`` is a registered type's short name (``cds``, ``eds``, ...)
or ``other``; ``protocol``, ``mode`` and ``reason`` take a handful of fixed values. No node
id is ever a label.

Recording is on the path of every request and response, so each series is a plain number
in a slotted object, bound once per label value and updated without a lock (the runtime
records from its one event loop); a collector turns them into metric families when
``/metrics`` is read, and ``prometheus-client`` writes the exposition. prometheus-client's
own counters took a lock and three calls an increment: 9 % of a stream's initial sync.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Literal, TypeVar

from mypy_extensions import mypyc_attr
from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.samples import Sample

from .._memos import usage
from ..wire._typeurls import all_types

__all__ = ["BUCKETS", "Distribution", "Family", "Metrics", "Value", "type_label"]

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Histogram buckets, 1 ms to 30 s."""
_LE = (*map(repr, BUCKETS), "+Inf")
"""Their ``le`` labels, as prometheus-client writes them."""

_SHORT = {info.type_url: info.short_name for info in all_types()}


def type_label(type_url: str) -> str:
    """The ``type`` label of ``type_url``: its short name, or ``other`` if unregistered."""
    return _SHORT.get(type_url, "other")


class Value:
    """One series of a counter or a gauge."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount


class Distribution:
    """One series of a histogram: observations per bucket (not cumulative) and their sum."""

    __slots__ = ("counts", "created", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, value: float) -> None:
        self.counts[bisect_left(BUCKETS, value)] += 1
        self.sum += value


_Series = TypeVar("_Series", Value, Distribution)
_Kind = Literal["counter", "gauge", "histogram"]


class Family(Generic[_Series]):
    """One metric: its series by label values, each made on first use."""

    def __init__(
        self,
        name: str,
        documentation: str,
        kind: _Kind,
        labelnames: Sequence[str],
        make: Callable[[], _Series],
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.kind = kind
        self.labelnames = tuple(labelnames)
        self._make: Callable[[], _Series] = make
        self._series: dict[tuple[str, ...], _Series] = {}

    def labels(self, *values: str) -> _Series:
        """The series of these label values (in the order of the label names)."""
        series = self._series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name} takes the labels {self.labelnames}")
            series = self._series[values] = self._make()
        return series

    def family(self, *, samples: bool = True) -> Metric:
        """The metric family prometheus-client writes (``samples=False``: its name only)."""
        labels = list(self.labelnames)
        if self.kind == "gauge":
            gauge = GaugeMetricFamily(self.name, self.documentation, labels=labels)
            for values, series in self._series.items() if samples else ():
                assert isinstance(series, Value)
                gauge.add_metric(values, series.value)
            return gauge
        if self.kind == "counter":
            counter = CounterMetricFamily(self.name, self.documentation, labels=labels)
            for values, series in self._series.items() if samples else ():
                assert isinstance(series, Value)
                counter.add_metric(values, series.value, created=series.created)
            return counter
        histogram = HistogramMetricFamily(self.name, self.documentation, labels=labels)
        for values, series in self._series.items() if samples else ():
            assert isinstance(series, Distribution)
            cumulative = 0.0
            buckets: list[tuple[str, float]] = []
            for le, count in zip(_LE, series.counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            histogram.add_metric(values, buckets, series.sum)
            named = dict(zip(labels, values, strict=True))
            histogram.samples.append(Sample(f"{self.name}_created", named, series.created))
        return histogram


def counter(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Family[Value]:
    return Family(name, documentation, "counter", labelnames, Value)


def gauge(name: str, documentation: str, labelnames: Sequence[str] = ()) -> Family[Value]:
    return Family(name, documentation, "gauge", labelnames, Value)


def histogram(
    name: str, documentation: str, labelnames: Sequence[str] = ()
) -> Family[Distribution]:
    return Family(name, documentation, "histogram", labelnames, Distribution)


class _Collector:
    """Hands a registry the families' values when it is read."""

    def __init__(self, families: Sequence[Family[Value] | Family[Distribution]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        for family in self._families:
            yield family.family()

    def describe(self) -> Iterator[Metric]:
        for family in self._families:
            yield family.family(samples=False)


class _Memos:
    """The process's memos (``xdscore._memos``), read when ``/metrics`` is."""

    def collect(self) -> Iterator[Metric]:
        used = GaugeMetricFamily(
            "xdscore_memo_bytes",
            "Bytes a process-wide memo holds, counted from what its entries hold.",
            labels=["memo"],
        )
        entries = GaugeMetricFamily(
            "xdscore_memo_entries", "Entries a process-wide memo holds.", labels=["memo"]
        )
        limit = GaugeMetricFamily(
            "xdscore_memo_limit_bytes",
            "The most bytes a process-wide memo may hold (0: it holds nothing of its own).",
            labels=["memo"],
        )
        for memo in usage():
            used.add_metric([memo.name], memo.bytes)
            entries.add_metric([memo.name], memo.entries)
            limit.add_metric([memo.name], memo.limit)
        yield from (used, entries, limit)

    def describe(self) -> Iterator[Metric]:
        return iter(())


class _ByType(Generic[_Series]):
    """One metric's series by type URL, bound on first use."""

    __slots__ = ("_family", "_series")

    def __init__(self, family: Family[_Series]) -> None:
        self._family: Family[_Series] = family
        self._series: dict[str, _Series] = {}

    def __call__(self, type_url: str) -> _Series:
        series = self._series.get(type_url)
        if series is None:
            series = self._series[type_url] = self._family.labels(type_label(type_url))
        return series


@mypyc_attr(allow_interpreted_subclasses=True)
class Metrics:
    """What the runtime records; ``registry`` is exposed at ``/metrics``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        by_type = ["type"]
        push = histogram(
            "xdscore_push_seconds",
            "Time to write one response to a proxy, from reading the cache to the write's end.",
            by_type,
        )
        convergence = histogram(
            "xdscore_proxy_convergence_seconds",
            "Delay between a cache change and the proxy's ACK of the response carrying it.",
            by_type,
        )
        nacks = counter("xdscore_nacks", "Responses proxies rejected.", by_type)
        acks = counter("xdscore_acks", "Responses proxies applied.", by_type)
        responses = counter("xdscore_responses", "Responses written.", by_type)
        sent = counter("xdscore_response_bytes", "Bytes of responses written.", by_type)
        stale = counter(
            "xdscore_stale_nonces",
            "Requests whose nonce was not the latest sent for their type.",
            by_type,
        )
        updates = counter(
            "xdscore_cache_updates",
            "Cache writes that changed a type (one per type per snapshot or linear write).",
            by_type,
        )
        heartbeats = counter(
            "xdscore_heartbeats",
            "Heartbeat responses written (they restart the TTLs of unchanged resources).",
            by_type,
        )
        beaten = counter(
            "xdscore_heartbeat_resources", "Resources carried by heartbeat responses.", by_type
        )
        in_flight = gauge("xdscore_pushes_in_flight", "Responses being written now.")
        self.streams = gauge(
            "xdscore_streams",
            "Streams being served, by protocol (sotw, delta) and mode (ads, per_type).",
            ["protocol", "mode"],
        )
        self.refused_streams = counter(
            "xdscore_refused_streams",
            "Streams (and unary fetches, when the authorizer denies them) refused, by reason.",
            ["reason"],
        )
        rebalanced = counter(
            "xdscore_rebalanced_streams",
            "Streams ended cleanly because they reached their maximum age (rebalancing).",
        )
        self.fetches = counter(
            "xdscore_fetches",
            "Unary Fetch calls answered, by type and gRPC status (ok, not_found, ...).",
            ["type", "code"],
        )
        self.connections_cut = counter(
            "xdscore_connections_cut",
            "HTTP/2 connections cut for abuse, or closed at accept past max_connections.",
            ["reason"],
        )
        reads_deferred = counter(
            "xdscore_reads_deferred",
            "Reads of connections still in their initial sync handled in a later loop turn "
            "(Http2Transport's intake bound).",
        )
        wakes_deferred = counter(
            "xdscore_wakes_deferred",
            "Streams a cache change woke in a later loop turn, while syncs waited for slots.",
        )
        self.registry.register(
            _Collector(
                [
                    push,
                    convergence,
                    nacks,
                    acks,
                    responses,
                    sent,
                    stale,
                    updates,
                    heartbeats,
                    beaten,
                    in_flight,
                    self.streams,
                    self.refused_streams,
                    rebalanced,
                    self.fetches,
                    self.connections_cut,
                    reads_deferred,
                    wakes_deferred,
                ]
            )
        )
        self.registry.register(_Memos())
        self.heartbeats = _ByType(heartbeats)
        self.heartbeat_resources = _ByType(beaten)
        self.push_seconds = _ByType(push)
        self.convergence_seconds = _ByType(convergence)
        self.nacks = _ByType(nacks)
        self.acks = _ByType(acks)
        self.responses = _ByType(responses)
        self.response_bytes = _ByType(sent)
        self.stale_nonces = _ByType(stale)
        self.cache_updates = _ByType(updates)
        self.pushes_in_flight = in_flight.labels()
        self.rebalanced_streams = rebalanced.labels()
        self.reads_deferred = reads_deferred.labels()
        self.wakes_deferred = wakes_deferred.labels()
        for protocol in ("sotw", "delta"):
            for mode in ("ads", "per_type"):
                self.streams.labels(protocol, mode)
        for reason in ("closing", "max_streams", "initial_syncs", "rate", "permission_denied"):
            self.refused_streams.labels(reason)
        for reason in ("rapid_reset", "ping_flood", "settings_flood", "max_connections"):
            self.connections_cut.labels(reason)
        for info in all_types():
            # Every registered type's series exists from the start, so that increase()
            # sees the first NACK.
            for each in (self.nacks, self.acks, self.responses, self.stale_nonces):
                each(info.type_url)
