"""What ``xdscore analyze`` warns about with XDS014, seen from gRPC's real xDS clients: a
locality without ``load_balancing_weight`` is skipped, without a NACK, by grpcio and by the
Node.js client, and RPCs fail with UNAVAILABLE; the same endpoints with a weight are served."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from xdscore import ENDPOINT, Snapshot
from xdscore import builders as b
from xdscore.analysis import analyze

from ..factories import wait_until
from .test_grpc_xds_client import (
    ROUTE_NAME,
    TARGET,
    Recorder,
    control_plane,
    grpc_backend,
    xds_client,
)
from .test_node_xds_client import node_client

pytestmark = [pytest.mark.anyio, pytest.mark.grpc_client, pytest.mark.timeout(60)]

Rpc = Callable[[], Awaitable[str]]
"""One RPC through the client: ``OK <reply>`` or ``ERR <code> <details>``."""


@asynccontextmanager
async def grpcio_rpc(xds_port: int, tmp_path: Path) -> AsyncIterator[Rpc]:
    async with xds_client(xds_port, tmp_path) as client:
        yield client.call


@asynccontextmanager
async def node_rpc(xds_port: int, tmp_path: Path) -> AsyncIterator[Rpc]:
    async with node_client(xds_port, tmp_path) as client:

        async def call() -> str:
            summary = await client.calls(1)
            answers: list[str] = [*summary["replies"], *summary["errors"]]
            assert len(answers) == 1, summary
            return f"ERR {answers[0]}" if summary["failed"] else f"OK {answers[0]}"

        yield call


CLIENTS: dict[str, Callable[[int, Path], AbstractAsyncContextManager[Rpc]]] = {
    "grpcio": grpcio_rpc,
    "node": node_rpc,
}


def one_locality(port: int, *, weighted: bool) -> Snapshot:
    endpoints = b.load_assignment("cluster-a", [("127.0.0.1", port)])
    if not weighted:
        endpoints.endpoints[0].ClearField("load_balancing_weight")
    return Snapshot(
        [
            b.api_listener(TARGET, ROUTE_NAME),
            b.route_configuration(ROUTE_NAME, [("/", "cluster-a")]),
            b.eds_cluster("cluster-a", http2=True),
            endpoints,
        ]
    )


async def outcome(rpc: Rpc, expected: str, recorder: Recorder) -> str:
    """Call until the outcome starts with ``expected``; the last outcome."""
    seen = [""]

    async def reached() -> bool:
        seen.append(await rpc())
        return seen[-1].startswith(expected)

    try:
        await wait_until(reached, timeout=10, interval=0.1, what=expected)
    except TimeoutError:
        raise AssertionError(
            f"no {expected!r}; last {seen[-1]!r}\nexchange:\n{recorder.transcript()}"
        ) from None
    return seen[-1]


@pytest.mark.parametrize("client", sorted(CLIENTS))
async def test_a_locality_without_weight_is_skipped_by_grpc_clients(
    client: str, tmp_path: Path
) -> None:
    with grpc_backend("backend-a") as port:
        unweighted, weighted = one_locality(port, weighted=False), one_locality(port, weighted=True)
        (warning,) = analyze(unweighted).diagnostics
        assert (warning.code, warning.type_url, warning.name) == ("XDS014", ENDPOINT, "cluster-a")
        assert analyze(weighted).diagnostics == ()

        async with control_plane(unweighted) as cp, CLIENTS[client](cp.port, tmp_path) as rpc:
            failed = await outcome(rpc, "ERR UNAVAILABLE", cp.recorder)
            # The client took the endpoints (an ACK, no NACK) and says nothing of the weight.
            assert cp.recorder.acked_latest(ENDPOINT), cp.recorder.transcript()
            assert "load_balancing_weight" not in failed, failed

            cp.cache.set_snapshot(None, weighted)
            assert await outcome(rpc, "OK", cp.recorder) == "OK backend-a"

    assert not cp.recorder.nacks(), cp.recorder.transcript()
    if client == "node":  # the version package-lock.json pins
        assert failed == "ERR UNAVAILABLE priority policy has empty priority list"
    else:  # grpcio 1.85: "... no children in weighted_target policy (EDS resource
        # cluster-a: contains no localities)"
        assert "contains no localities" in failed, failed
