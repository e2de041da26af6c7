"""``resource_errors`` read by gRPC's own xDS client (grpcio 1.85, gRFC A88).

grpcio asks for a listener whose route configuration does not exist. Told so in
``resource_errors`` it fails the RPC at once with the server's status and message, where
without them it can only wait for its does-not-exist timer (15 s; the RPC's own 5 s deadline
ends first). A route configuration the resource policy denies fails the same way, with the
policy's reason. grpcio 1.85 reads the field only with its
``GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING`` switch on (its log counts ``num_errors=0``
otherwise); without it the errors are ignored, which costs nothing. The client runs in a
subprocess (``grpc_xds_client_main.py``), as in ``test_grpc_xds_client.py``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Collection, Mapping
from pathlib import Path

import pytest

from xdscore import (
    ROUTE,
    Http2Transport,
    Snapshot,
    SnapshotCache,
    StreamInfo,
    XdsServer,
    same_for_all,
)
from xdscore import builders as b
from xdscore.protocol import ClientFeatures

from .test_grpc_xds_client import ROUTE_NAME, TARGET, Recorder, xds_client

pytestmark = [pytest.mark.anyio, pytest.mark.grpc_client]

SWITCH = "GRPC_EXPERIMENTAL_XDS_DATA_ERROR_HANDLING"
NOT_FOUND = "the server has no resource of this name"


def deny_route(stream: StreamInfo, type_url: str, name: str) -> str | None:
    if type_url != ROUTE:
        return None
    return f"node {stream.node.id if stream.node else '?'} may not have {name}"


@contextlib.asynccontextmanager
async def serving(
    snapshot: Snapshot,
    *,
    assumed: Mapping[str, Collection[str]] | None = None,
    deny: bool = False,
) -> AsyncIterator[tuple[int, Recorder]]:
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, snapshot)
    recorder = Recorder()
    server = XdsServer(
        cache,
        callbacks=recorder,
        assumed_features=assumed,
        authorize_resource=deny_route if deny else None,
    )
    async with Http2Transport(server) as transport:
        yield await transport.start(), recorder


def workdir(base: Path, name: str) -> Path:
    """A directory of its own for one client's log."""
    path = base / name
    path.mkdir()
    return path


async def first_call(port: int, directory: Path) -> tuple[str, float]:
    """The time the client's first RPC took, and its outcome."""
    async with xds_client(port, directory) as client:
        started = time.monotonic()
        reply = await client.call()
        return reply, time.monotonic() - started


async def test_grpcio_fails_fast_on_a_route_configuration_that_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    snapshot = Snapshot([b.api_listener(TARGET, ROUTE_NAME)], types=[ROUTE])
    monkeypatch.setenv(SWITCH, "true")
    async with serving(snapshot) as (port, recorder):
        reply, took = await first_call(port, workdir(tmp_path, "errors"))
    # What grpcio 1.85 advertises, and what the stream uses (the gRPC C-core default adds
    # resource_errors, for which there is no feature string).
    node = recorder.requests[0][1].node
    assert node is not None
    assert node.user_agent_name.startswith("gRPC C-core ")
    assert node.client_features == (
        "envoy.lb.does_not_support_overprovisioning",
        "xds.config.resource-in-sotw",
    )
    assert recorder.streams[0].features == ClientFeatures(
        resource_in_sotw=True, resource_errors=True
    )
    sent = [r for _, r in recorder.responses if r.errors]
    assert [(e.name, e.code) for r in sent for e in r.errors] == [(ROUTE_NAME, 5)]
    assert reply.startswith("ERR UNAVAILABLE"), reply
    assert NOT_FOUND in reply, reply
    assert took < 2.0, took

    # The same without resource_errors: the client cannot tell, and the RPC waits out its
    # deadline (5 s) with nothing from the server in its message.
    async with serving(snapshot, assumed={}) as (port, recorder):
        reply, took = await first_call(port, workdir(tmp_path, "silent"))
    assert all(not r.errors for _, r in recorder.responses)
    assert NOT_FOUND not in reply, reply
    assert took > 4.0, (took, reply)

    # Errors sent to a grpcio without its switch: ignored, and nothing else goes wrong.
    monkeypatch.delenv(SWITCH)
    async with serving(snapshot) as (port, recorder):
        reply, took = await first_call(port, workdir(tmp_path, "ignored"))
    assert [e.name for _, r in recorder.responses for e in r.errors] == [ROUTE_NAME]
    assert NOT_FOUND not in reply, reply
    assert took > 4.0, (took, reply)
    assert recorder.nacks() == []


async def test_grpcio_fails_fast_on_a_denied_route_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SWITCH, "true")
    snapshot = Snapshot(
        [b.api_listener(TARGET, ROUTE_NAME), b.route_configuration(ROUTE_NAME, [("/", "c")])]
    )
    async with serving(snapshot, deny=True) as (port, recorder):
        reply, took = await first_call(port, tmp_path)
    assert reply.startswith("ERR "), reply
    assert f"may not have {ROUTE_NAME}" in reply, reply
    assert took < 2.0, took
    errors = [(e.name, e.code) for _, r in recorder.responses for e in r.errors]
    assert errors == [(ROUTE_NAME, 7)]
    routes = [r for _, r in recorder.responses if r.type_url == ROUTE]
    assert all(not r.selection.resources for r in routes)  # withheld
