"""A fleet moves from one replica to another with nothing changed: what is sent again.

Two servers start from the same workload (``--server-cmd``, as in loadgen.py), so they hold
identical content and, versions being content hashes, identical versions; they stand for
two replicas of one store. N clients converge on replica A; A is killed (SIGKILL); every
client reconnects to replica B with the machine it had, presenting what it holds (Delta:
``initial_resource_versions``; SotW: each type's ``version_info``), as Envoy does. After a
settle window, the report counts the resources B sent them (Delta: zero is the goal), then
B pushes one changed endpoint set and the time until every client has it shows they are
all attached and live.

    python benchmarks/failover.py --delta --clients 1000 --clusters 100 --server-cmd \\
        "python benchmarks/xds_server.py --addr {addr} --clusters {clusters} \\
         --endpoints {endpoints}"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from loadgen import Fleet, ServerProcess, _own_cpu


def _command(template: str, args: argparse.Namespace) -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return template.format(
        addr=f"127.0.0.1:{port}", clusters=args.clusters, endpoints=args.endpoints
    )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    os.sched_setaffinity(0, {1})
    replica_a = ServerProcess(_command(args.server_cmd, args))
    replica_b = ServerProcess(_command(args.server_cmd, args))
    target_a = await replica_a.start(args.timeout)
    target_b = await replica_b.start(args.timeout)
    fleet = Fleet(target_a, args.clients, args.clusters, args.delta, name="mover")
    report: dict[str, Any] = {
        "clients": args.clients,
        "clusters": args.clusters,
        "endpoints": args.endpoints,
        "protocol": "delta" if args.delta else "sotw",
    }
    tasks: list[asyncio.Task[None]] = []
    try:
        started = time.monotonic()
        tasks = [asyncio.create_task(fleet.run_client(c)) for c in fleet.clients]
        async with asyncio.timeout(args.timeout):
            await fleet.all_converged.wait()
        report["initial_convergence_s"] = round(time.monotonic() - started, 3)
        report["resources_from_a"] = sum(c.resources for c in fleet.clients)
        assert replica_a.process is not None
        replica_a.process.send_signal(signal.SIGKILL)
        await replica_a.process.wait()
        await asyncio.gather(*tasks, return_exceptions=True)
        lost = sum(1 for c in fleet.clients if c.error)
        report["streams_lost_with_a"] = lost
        for client in fleet.clients:
            client.error, client.responses, client.resources = "", 0, 0
        fleet.target = target_b
        cpu0, own0 = replica_b.cpu_seconds(), _own_cpu()
        moved = time.monotonic()
        tasks = [asyncio.create_task(fleet.run_client(c, resume=True)) for c in fleet.clients]
        await asyncio.sleep(args.settle)
        report["settle_s"] = args.settle
        report["resources_from_b_in_settle"] = sum(c.resources for c in fleet.clients)
        report["responses_from_b_in_settle"] = sum(c.responses for c in fleet.clients)
        report["server_b_cpu_in_settle_s"] = round(replica_b.cpu_seconds() - cpu0, 3)
        fleet.arm_push(1)
        set_at = await replica_b.push(f"{args.clusters} {args.endpoints} 1", args.timeout)
        async with asyncio.timeout(args.timeout):
            await fleet.all_updated.wait()
        report["probe_push_all_updated_s"] = round(
            max(c.updated_at for c in fleet.clients) - set_at, 3
        )
        report["moved_and_probed_s"] = round(time.monotonic() - moved, 3)
        report["loadgen_cpu_s"] = round(_own_cpu() - own0, 3)
        report["errors"] = [c.error for c in fleet.clients if c.error][:5]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await replica_b.stop()
        await replica_a.stop()
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server-cmd", required=True)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--delta", action="store_true", help="Delta ADS instead of SotW")
    parser.add_argument("--settle", type=float, default=5.0)
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
