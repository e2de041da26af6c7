"""The pure parts of benchmarks/converge.py: which clients a change reached and when each
ACKed it, the config directory each change writes, and the human summary. Nothing here
starts a process or times anything."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from xdscore import CLUSTER, ENDPOINT, LISTENER, ROUTE
from xdscore.config import load_directory

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from converge import changed_ack_times, summary, write_config  # noqa: E402


def test_a_client_counts_from_the_ack_of_the_newest_changed_type() -> None:
    before = [
        {CLUSTER: ["c1", 1.0], ENDPOINT: ["e1", 1.5]},
        {CLUSTER: ["c1", 1.0], ENDPOINT: ["e1", 1.4]},
        {CLUSTER: ["c1", 1.0], ENDPOINT: ["e1", 1.3]},
    ]
    after = [
        # EDS changed: its ACK; CDS untouched, though its ACK time is later.
        {CLUSTER: ["c1", 9.0], ENDPOINT: ["e2", 5.0]},
        # Two types changed: the later ACK of the two.
        {CLUSTER: ["c2", 6.0], ENDPOINT: ["e2", 5.5]},
        # Nothing changed.
        {CLUSTER: ["c1", 1.0], ENDPOINT: ["e1", 1.3]},
    ]
    assert changed_ack_times(before, after) == [5.0, 6.0, None]


def test_a_type_the_client_did_not_hold_before_counts_as_changed() -> None:
    before = [{CLUSTER: ["c1", 1.0]}]
    after = [{CLUSTER: ["c1", 1.0], ROUTE: ["r1", 2.5]}]
    assert changed_ack_times(before, after) == [2.5]


def test_each_change_alters_the_endpoints_every_client_holds_and_nothing_else(
    tmp_path: Path,
) -> None:
    snapshots = []
    for change in (0, 1, 2):
        directory = tmp_path / str(change)
        directory.mkdir()
        write_config(directory, clusters=3, endpoints=2, change=change)
        snapshots.append(load_directory(directory))
    first, *rest = snapshots
    assert len(first.resources(CLUSTER) or {}) == len(first.resources(ENDPOINT) or {}) == 3
    for later in rest:
        for type_url in (CLUSTER, LISTENER, ROUTE):
            assert later.version(type_url) == first.version(type_url)
        assert later.version(ENDPOINT) != first.version(ENDPOINT)
    assert len({s.version(ENDPOINT) for s in snapshots}) == 3
    assert len({s.revision for s in snapshots}) == 3


def test_the_summary_gives_each_change_and_the_lag() -> None:
    replica: dict[str, Any] = {"convergence_seconds": {"max": 0.25}}
    step = {
        "change": 1,
        "exit": 0,
        "apply_s": 3.1,
        "last_ack_s": 2.9,
        "lag_s": 0.2,
        "changed_clients": 10,
        "acked_after_return": 0,
        "replicas": [replica, {"problem": "HTTP 404"}],
    }
    report = {
        "clients": 10,
        "client_processes": 2,
        "clusters": 3,
        "build": "pure",
        "nproc": 2,
        "loadavg_start": (1.0, 0.5, 0.25),
        "initial_convergence_s": 1.5,
        "steps": [step],
        "lag_p50_s": 0.2,
        "lag_max_s": 0.2,
        "ok": True,
    }
    text = summary(report)
    assert "load average at start 1.00 0.50 0.25" in text
    row = text.splitlines()[3].split()
    assert row[:5] == ["1", "0", "3.1", "2.9", "0.2"]
    assert row[-2:] == ["0.250,", "?"]
    assert text.splitlines()[-2:] == ["lag p50 0.2 s, max 0.2 s", "ok"]
    assert summary(report | {"ok": False}).endswith("NOT OK (see the steps)")
