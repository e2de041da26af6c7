"""benchmarks/storm.py with its storm clients spread over two load-generator processes apart
from the established clients: every client of both converges, and the report adds up both
processes' refusals and CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(120)


def test_a_storm_over_two_workers_converges_and_reports_both() -> None:
    server = (
        f"{sys.executable} benchmarks/xds_server.py --addr {{addr}} --clusters {{clusters}} "
        "--endpoints {endpoints}"
    )
    result = subprocess.run(
        [
            sys.executable, "benchmarks/storm.py", "--clients", "60", "--established", "3",
            "--clusters", "20", "--workers", "2", "--push-every", "0.2", "--timeout", "60",
            "--server-cmd", server,
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert report["workers"] == 2
    assert report["converged_clients"] == 60
    assert report["errors"] == []
    assert report["refusals"] == 0
    assert 0 < report["storm_convergence_s"] < 60
    assert report["loadgen_cpu_s"] > 0
    assert report["server_cpu_s"] > 0
