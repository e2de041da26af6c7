"""A reconnect storm: N new streams at once while M established proxies keep being pushed to.

    python benchmarks/storm.py --clients 5000 --established 20 --clusters 100 \\
        --server-cmd "python benchmarks/xds_server.py --addr {addr} --clusters {clusters} \\
        --endpoints {endpoints}"

The M established clients connect and converge first. Then all N storm clients open their
streams at once (each its own channel and TCP connection, as after a control plane
restart); a client the server sheds with RESOURCE_EXHAUSTED comes back after the hint the
refusal carries, as Envoy does. While the storm converges, the server pushes a change every
``--push-every`` seconds (one endpoint set, which every client holds) and the time each
established client takes to ACK it is recorded; ``--push-every 0`` pushes nothing.
The report (JSON) holds the storm's convergence time, how many refusals it took, the
established clients' push latencies (median, p99, max), the server's CPU seconds and peak
RSS, and the load generator's own CPU (a saturated generator is not a slow server).
Clients are those of benchmarks/loadgen.py: the library's client machines and driver.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from loadgen import Fleet, ServerProcess, _own_cpu, _percentile

from xdscore.server import tune_collector


async def _established_latency(
    fleet: Fleet, server: ServerProcess, endpoints: int, timeout: float
) -> float:
    """Push one changed endpoint set; the time until every established client ACKed it."""
    fleet.arm_push(1)
    set_at = await server.push(f"{fleet.clusters} {endpoints} 1", timeout)
    async with asyncio.timeout(timeout):
        await fleet.all_updated.wait()
    return max(client.updated_at for client in fleet.clients) - set_at


async def run(args: argparse.Namespace) -> dict[str, Any]:
    os.sched_setaffinity(0, {1})
    tune_collector()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ServerProcess(
        args.server_cmd.format(
            addr=f"127.0.0.1:{port}", clusters=args.clusters, endpoints=args.endpoints
        )
    )
    target = await server.start(args.timeout)
    established = Fleet(target, args.established, args.clusters, delta=False, name="established")
    storm = Fleet(target, args.clients, args.clusters, delta=False, name="storm")
    tasks: list[asyncio.Task[None]] = []
    report: dict[str, Any] = {
        "clients": args.clients,
        "established": args.established,
        "clusters": args.clusters,
        "endpoints": args.endpoints,
    }
    try:
        tasks += [asyncio.create_task(established.run_client(c)) for c in established.clients]
        async with asyncio.timeout(args.timeout):
            await established.all_converged.wait()
        cpu0, own0 = server.cpu_seconds(), _own_cpu()
        started = time.monotonic()
        tasks += [asyncio.create_task(storm.run_client(c)) for c in storm.clients]
        latencies: list[float] = []
        while not storm.all_converged.is_set():
            if args.push_every <= 0:
                async with asyncio.timeout(args.timeout):
                    await storm.all_converged.wait()
                break
            try:
                async with asyncio.timeout(args.push_every):
                    await storm.all_converged.wait()
            except TimeoutError:
                latencies.append(
                    await _established_latency(established, server, args.endpoints, args.timeout)
                )
            if time.monotonic() - started > args.timeout:
                raise TimeoutError("the storm did not converge")
        report["storm_convergence_s"] = round(time.monotonic() - started, 3)
        report["server_cpu_s"] = round(server.cpu_seconds() - cpu0, 3)
        report["loadgen_cpu_s"] = round(_own_cpu() - own0, 3)
        report["refusals"] = sum(client.refusals for client in storm.clients)
        report["pushes_during_storm"] = len(latencies)
        if latencies:
            report["established_push_median_s"] = round(statistics.median(latencies), 3)
            report["established_push_p99_s"] = round(_percentile(latencies, 0.99), 3)
            report["established_push_max_s"] = round(max(latencies), 3)
        report["server_peak_rss_mb"] = round(server.peak_rss_mb(), 1)
        report["errors"] = [c.error for c in storm.clients if c.error][:5]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-cmd", required=True)
    parser.add_argument("--clients", type=int, default=5000)
    parser.add_argument("--established", type=int, default=20)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--push-every", type=float, default=0.5)
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
