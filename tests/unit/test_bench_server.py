"""benchmarks/xds_server.py --workers: two processes on one port, both accepting, the
protocol relayed to both, and all of them gone after ``quit``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"

pytestmark = pytest.mark.timeout(120)


def _children(pid: int) -> list[int]:
    children: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as handle:
            children += [int(child) for child in handle.read().split()]
    return children


def _sockets(pid: int) -> int:
    fds = Path(f"/proc/{pid}/fd")
    return sum(1 for fd in fds.iterdir() if os.readlink(fd).startswith("socket:"))


def test_two_workers_share_the_port_and_the_protocol() -> None:
    server = subprocess.Popen(
        [sys.executable, "benchmarks/xds_server.py", "--addr", "127.0.0.1:0",
         "--clusters", "20", "--endpoints", "2", "--workers", "2", "--max-streams", "100"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdin is not None
    assert server.stdout is not None
    try:
        listening = server.stdout.readline()
        assert listening.startswith("LISTENING addr=127.0.0.1:"), listening
        addr = listening.split("addr=", 1)[1].strip()
        workers = _children(server.pid)
        assert len(workers) == 2
        idle = [_sockets(worker) for worker in workers]
        host, _, port = addr.rpartition(":")
        connections = [socket.create_connection((host, int(port))) for _ in range(40)]
        try:
            deadline = time.monotonic() + 10
            while sum(_sockets(w) for w in workers) - sum(idle) < 40:
                assert time.monotonic() < deadline, "the workers did not accept 40 connections"
                time.sleep(0.05)
            accepted = [_sockets(w) - before for w, before in zip(workers, idle, strict=True)]
        finally:
            for connection in connections:
                connection.close()
        assert sum(accepted) == 40
        assert min(accepted) > 0, accepted  # the kernel spread them over both workers
        report_path = Path(f"/tmp/xdscore-bench-server-{os.getpid()}.json")
        subprocess.run(
            [sys.executable, "benchmarks/loadgen.py", "--target", addr, "--clients", "60",
             "--clusters", "20", "--endpoints", "2", "--pushes", "0",
             "--json", str(report_path)],
            cwd=ROOT, check=True, timeout=60, capture_output=True,
        )  # fmt: skip
        report = json.loads(report_path.read_text())
        report_path.unlink()
        assert not report.get("errors")
        assert report["refusals"] == 0
        assert report["initial_convergence_s"] > 0
        server.stdin.write("push 20 2\n")
        server.stdin.flush()
        answer = server.stdout.readline()
        assert answer.startswith("SNAPSHOT_SET version=2 clusters=20 endpoints=2 mono="), answer
        server.stdin.write("quit\n")
        server.stdin.flush()
        assert server.wait(20) == 0
        assert all(not Path(f"/proc/{worker}").exists() for worker in workers)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
