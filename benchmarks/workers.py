"""``xdscore serve --workers N`` against one process: initial convergence of a fleet.

    python benchmarks/workers.py --clients 2000 --clusters 100 --runs 3

Writes a config directory of R EDS clusters (E endpoints each), one listener and one route
configuration, then, alternating ``--workers 1`` and ``--workers 2`` (``--compare``), starts
``xdscore serve DIR --workers N``, connects N clients at once (the load generator's, see
benchmarks/loadgen.py: SotW ADS, each its own TCP connection) and times until every client
holds the full configuration. Nothing is pinned: the workers and this load generator share
the machine's cores, and the report says how much CPU each side used. It prints a JSON
report: every run, the median initial convergence per worker count and their ratio, and
``uptime`` before and after (other load on the machine skews the figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from google.protobuf import json_format

sys.path.insert(0, str(Path(__file__).parent))

from loadgen import Fleet, _own_cpu

from xdscore import builders as b

_SERVING = re.compile(rb"^xdscore: serving .* on 127\.0\.0\.1:(\d+): ")


def write_config(directory: Path, clusters: int, endpoints: int, change: int = 0) -> None:
    """R EDS clusters with E endpoints each, listener_0 and route_0 (-> the first cluster);
    ``change`` offsets the first cluster's endpoint port (a new value changes every
    client's EDS)."""
    resources: list[Any] = []
    for i in range(clusters):
        name = f"c_{i:05d}"
        resources.append(b.eds_cluster(name))
        port = 8000 + (change if i == 0 else 0)
        addresses = [(f"127.{i // 250 % 250}.{i % 250}.{e + 1}", port) for e in range(endpoints)]
        resources.append(b.load_assignment(name, addresses))
    resources.append(b.http_listener("listener_0", 10000, "route_0"))
    resources.append(b.route_configuration("route_0", [("/", "c_00000")]))
    documents = []
    for message in resources:
        document = json_format.MessageToDict(message)
        document["@type"] = f"type.googleapis.com/{message.DESCRIPTOR.full_name}"
        documents.append(document)
    (directory / "resources.json").write_text(json.dumps(documents))


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _family(pid: int) -> list[int]:
    """``pid`` and its children."""
    found = [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


async def one_run(directory: Path, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "xdscore", "--log-level", "warning", "serve", str(directory),
        "--listen", "127.0.0.1:0", "--workers", str(workers),
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert process.stdout is not None
    try:
        async with asyncio.timeout(60):
            while not (found := _SERVING.match(await process.stdout.readline())):
                pass
        await asyncio.sleep(1.0)  # let the workers settle after their start
        family = _family(process.pid)
        cpu0 = {pid: _cpu_seconds(pid) for pid in family}
        own0 = _own_cpu()
        fleet = Fleet(f"127.0.0.1:{int(found[1])}", args.clients, args.clusters, delta=False)
        started = time.monotonic()
        tasks = [asyncio.create_task(fleet.run_client(client)) for client in fleet.clients]
        try:
            async with asyncio.timeout(args.timeout):
                await fleet.all_converged.wait()
            converged = time.monotonic() - started
            server_cpu = {pid: _cpu_seconds(pid) - cpu0[pid] for pid in family}
            loadgen_cpu = _own_cpu() - own0
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "workers": workers,
            "initial_convergence_s": round(converged, 3),
            "server_cpu_s": round(sum(server_cpu.values()), 3),
            "server_cpu_by_process_s": [round(v, 3) for v in server_cpu.values()],
            "loadgen_cpu_s": round(loadgen_cpu, 3),
            "errors": [c.error for c in fleet.clients if c.error][:3],
            "refusals": sum(c.refusals for c in fleet.clients),
        }
    finally:
        process.terminate()
        await process.wait()


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {
        "clients": args.clients,
        "clusters": args.clusters,
        "endpoints": args.endpoints,
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "uptime_before": _uptime(),
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        write_config(directory, args.clusters, args.endpoints)
        for _ in range(args.runs):
            for workers in args.compare:
                result = await one_run(directory, workers, args)
                print(json.dumps(result), file=sys.stderr, flush=True)
                report["runs"].append(result)
    report["uptime_after"] = _uptime()
    medians = {}
    for workers in args.compare:
        runs = [r for r in report["runs"] if r["workers"] == workers]
        medians[workers] = {
            "initial_convergence_s": statistics.median(r["initial_convergence_s"] for r in runs),
            "server_cpu_s": statistics.median(r["server_cpu_s"] for r in runs),
            "loadgen_cpu_s": statistics.median(r["loadgen_cpu_s"] for r in runs),
        }
    report["medians"] = medians
    first, *rest = args.compare
    report["speedup"] = {
        f"{first}/{other}": round(
            medians[first]["initial_convergence_s"] / medians[other]["initial_convergence_s"], 2
        )
        for other in rest
    }
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=2000)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3, help="runs per worker count")
    parser.add_argument("--compare", type=int, nargs="+", default=[1, 2], metavar="N")
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--json", help="write the report here too")
    args = parser.parse_args()
    report = asyncio.run(run(args))
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
