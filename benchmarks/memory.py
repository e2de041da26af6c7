"""Memory under pushes: what stalled consumers cost, and whether memory creeps in a soak.

    python benchmarks/memory.py stalled --server-cmd "..."   # 10 stalled consumers, R = 1000
    python benchmarks/memory.py soak --server-cmd "..."      # 100 clients, 2,000 small pushes

``stalled``: N healthy clients and K clients that open their streams, ask for everything and
never read. The server is pushed to P times (every endpoint set changes); its RSS is read
after each push. Run with ``--stalled 0`` and with ``--stalled 10`` to get what the stalled
ones cost.

``soak``: N clients; P pushes that change one endpoint set each; every ``--churn-every``
pushes, ``--churn`` clients close their streams and reconnect. The server's RSS is read
after every push; the report gives the slope (KB per push, least squares over the second
half of the run, after warm-up, and over the last quarter, to tell growth that levels off
from growth that does not), and the JSON file every reading. ``--progress N`` says the RSS
every N pushes. To see what grows, give the server ``--diag DIR`` (see
``xds_server.py``).

The steady-state figure (RSS after 20 pushes of R = 10,000 against after the first) comes
from ``loadgen.py --clients 10 --clusters 10000 --pushes 20``, whose pushes report
``server_rss_mb``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).parent))

from loadgen import ADS, UNLIMITED, Fleet, ServerProcess

from xdscore import CLUSTER, ENDPOINT
from xdscore.protocol import SotwClient
from xdscore.wire import encode_request, make_node


async def _start(args: argparse.Namespace) -> ServerProcess:
    os.sched_setaffinity(0, {1})
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ServerProcess(
        args.server_cmd.format(
            addr=f"127.0.0.1:{port}", clusters=args.clusters, endpoints=args.endpoints
        )
    )
    await server.start(args.timeout)
    return server


async def _push(fleet: Fleet, server: ServerProcess, args: argparse.Namespace) -> None:
    fleet.arm_push(args.changed or args.clusters)
    push = f"{args.clusters} {args.endpoints}" + (f" {args.changed}" if args.changed else "")
    await server.push(push, args.timeout)
    async with asyncio.timeout(args.timeout):
        await fleet.all_updated.wait()


async def stalled(args: argparse.Namespace) -> dict[str, Any]:
    server = await _start(args)
    fleet = Fleet(server.addr, args.clients, args.clusters, delta=False)
    channels = [
        grpc.aio.insecure_channel(server.addr, options=UNLIMITED) for _ in range(args.stalled)
    ]
    tasks = [asyncio.create_task(fleet.run_client(c)) for c in fleet.clients]
    try:
        async with asyncio.timeout(args.timeout):
            await fleet.all_converged.wait()
        names = [f"c_{i:05d}" for i in range(args.clusters)]
        calls = []
        for index, channel in enumerate(channels):
            client = SotwClient(node=make_node(id=f"stalled-{index}"))
            call = channel.stream_stream(ADS + "StreamAggregatedResources")()
            await call.write(encode_request(client.watch(CLUSTER, None)))
            await call.write(encode_request(client.watch(ENDPOINT, names)))
            calls.append(call)  # never read
        rss = []
        for _ in range(args.pushes):
            await asyncio.sleep(args.settle)
            await _push(fleet, server, args)
            rss.append(round(server.rss_mb(), 1))
        for call in calls:
            call.cancel()
        return {
            "mode": "stalled",
            "clients": args.clients,
            "stalled": args.stalled,
            "clusters": args.clusters,
            "pushes": args.pushes,
            "server_rss_mb": rss,
            "server_peak_rss_mb": round(server.peak_rss_mb(), 1),
        }
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for channel in channels:
            await channel.close()
        await server.stop()


def _slope(values: list[float]) -> float:
    """Least-squares slope of ``values`` against their index."""
    n = len(values)
    mean_x = (n - 1) / 2
    mean_y = sum(values) / n
    num = sum((i - mean_x) * (v - mean_y) for i, v in enumerate(values))
    den = sum((i - mean_x) ** 2 for i in range(n))
    return num / den if den else 0.0


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    server = await _start(args)
    fleet = Fleet(server.addr, args.clients, args.clusters, delta=False)
    tasks = {c.index: asyncio.create_task(fleet.run_client(c)) for c in fleet.clients}
    try:
        async with asyncio.timeout(args.timeout):
            await fleet.all_converged.wait()
        rss = []
        for push in range(args.pushes):
            if args.churn and push and push % args.churn_every == 0:
                for client in fleet.clients[: args.churn]:
                    tasks[client.index].cancel()
                    await asyncio.gather(tasks[client.index], return_exceptions=True)
                    client.error = ""
                    tasks[client.index] = asyncio.create_task(fleet.run_client(client))
            await _push(fleet, server, args)
            rss.append(server.rss_mb())
            if args.progress and (push + 1) % args.progress == 0:
                print(f"push {push + 1}: server RSS {rss[-1]:.1f} MB", file=sys.stderr, flush=True)
        half = rss[len(rss) // 2 :]
        quarter = rss[3 * len(rss) // 4 :]
        return {
            "mode": "soak",
            "clients": args.clients,
            "clusters": args.clusters,
            "pushes": args.pushes,
            "churn": f"{args.churn} every {args.churn_every}",
            "server_rss_first_mb": round(rss[0], 1),
            "server_rss_last_mb": round(rss[-1], 1),
            "rss_slope_kb_per_push": round(_slope(half) * 1024, 3),
            "rss_slope_last_quarter_kb_per_push": round(_slope(quarter) * 1024, 3),
            "server_peak_rss_mb": round(server.peak_rss_mb(), 1),
            "server_rss_mb": [round(value, 3) for value in rss],
        }
    finally:
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("stalled", "soak"))
    parser.add_argument("--server-cmd", required=True)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--stalled", type=int, default=10)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--pushes", type=int, default=20)
    parser.add_argument("--changed", type=int, default=0)
    parser.add_argument("--settle", type=float, default=0.2)
    parser.add_argument("--churn", type=int, default=10)
    parser.add_argument("--churn-every", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--progress", type=int, default=0, help="soak: say the RSS every N pushes")
    parser.add_argument("--json", help="write the report here too")
    args = parser.parse_args()
    report = asyncio.run(stalled(args) if args.mode == "stalled" else soak(args))
    text = json.dumps(report, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    # The RSS series goes to the JSON file only.
    print(json.dumps({k: v for k, v in report.items() if k != "server_rss_mb"}, indent=2))


if __name__ == "__main__":
    main()
