"""benchmarks/profile_sync.py: the profiler commands it attaches to the server."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from profile_sync import profiler_command  # noqa: E402


def test_py_spy_samples_without_stopping_the_server_unless_asked_for_c_frames() -> None:
    command = profiler_command("py-spy", 42, "out.txt", native=False, rate=500)
    assert command == [
        "py-spy", "record", "-p", "42", "-r", "500", "-f", "raw", "-o", "out.txt", "--nonblocking",
    ]  # fmt: skip
    native = profiler_command("py-spy", 42, "out.txt", native=True, rate=500)
    assert native[-1] == "--native"
    assert "--nonblocking" not in native


def test_perf_records_call_graphs_of_the_server() -> None:
    command = profiler_command("perf", 7, "sync.data", native=False, rate=2000)
    assert command == [
        "perf", "record", "-F", "2000", "--call-graph", "dwarf,32768", "-p", "7", "-o", "sync.data",
    ]  # fmt: skip
