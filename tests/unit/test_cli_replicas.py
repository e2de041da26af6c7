"""``status``, ``dump`` and ``diff`` across replicas: a repeated ``--server``.

The grouping of the answers (`Answers`) is checked pure; the commands against two
in-process servers over gRPC (their proxies in memory), with a third address that nothing
listens on: every proxy labelled with the server it came from, one connected to both shown
for each, and the dead address named with exit status 1.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager

import anyio
import anyio.to_thread
import pytest

from xdscore import CLUSTER, LISTENER, GrpclibTransport
from xdscore.cli import main
from xdscore.cli._diff import admin_sources, compare, render_json, render_text
from xdscore.cli._replicas import Answers, Replica
from xdscore.protocol import SotwClient
from xdscore.testing import free_port
from xdscore.wire import make_node
from xdscore.wire._csds import ClientReport, ResourceReport

from .test_cli_diff import cluster, in_sync_dump, in_sync_reports, report
from .test_driver import config
from .test_status import Plane, plane

pytestmark = pytest.mark.anyio


def client(node: str, *names: str) -> ClientReport:
    resources = tuple(
        ResourceReport(
            type_url=CLUSTER, name=name, version="v1", config_status="SYNCED", client_status="ACKED"
        )
        for name in names
    )
    return ClientReport(node=make_node(id=node), resources=resources)


A = Replica("r-a", "127.0.0.1:1", "127.0.0.1:2")
B = Replica("127.0.0.1:3", "127.0.0.1:3")


def test_each_proxy_comes_with_the_replica_that_reported_it() -> None:
    answers = Answers(
        answered=((A, (client("edge-1", "x"),)), (B, (client("edge-1", "x"), client("edge-2")))),
        unanswered=("replica r-c at 127.0.0.1:5: refused",),
    )
    rows = answers.rows()
    assert [(label, c.node.id) for label, c in rows] == [
        ("r-a", "edge-1"),
        ("127.0.0.1:3", "edge-1"),
        ("127.0.0.1:3", "edge-2"),
    ]
    assert [(r.label, len(reports)) for r, reports in answers.of_node("edge-1")] == [
        ("r-a", 1),
        ("127.0.0.1:3", 1),
    ]
    assert [r.label for r, _ in answers.of_node("edge-2")] == ["127.0.0.1:3"]
    assert answers.of_node("edge-3") == []
    assert answers.without() == "none of the 2 replica(s) that answered"
    assert Answers(answered=answers.answered).without() == "no replica"
    assert A.describe() == "replica r-a at 127.0.0.1:1"
    assert B.describe() == "127.0.0.1:3"


def test_two_clients_of_one_node_on_one_replica_are_merged(
    capsys: pytest.CaptureFixture[str],
) -> None:
    answers = Answers(answered=((A, (client("edge-1", "x"), client("edge-1", "y"))),))
    ((replica, reports),) = answers.of_node("edge-1")
    assert replica == A
    assert sorted(r.name for r in reports) == ["x", "y"]
    Answers(unanswered=("127.0.0.1:9: refused",)).say_unanswered()
    assert capsys.readouterr().err == "xdscore: cannot ask 127.0.0.1:9: refused\n"


def test_diff_names_the_source_of_what_does_not_match() -> None:
    page = {
        "node": "proxy-1",
        "types": [
            {
                "type_url": CLUSTER,
                "resources": [
                    {"name": "backend", "version": "v", "source": "clusters.yaml (document 2)"},
                    {"name": "other", "version": "v", "source": None},
                ],
            },
            {"type_url": LISTENER, "resources": [{"name": "listener_0", "source": "l.yaml"}]},
        ],
    }
    sources = admin_sources(page)
    assert sources == {
        (CLUSTER, "backend"): "clusters.yaml (document 2)",
        (LISTENER, "listener_0"): "l.yaml",
    }
    reports = [r for r in in_sync_reports() if r.type_url != CLUSTER]
    reports.append(report(cluster(timeout="2s")))
    comparison = compare(in_sync_dump(), reports, sources=sources)
    text = render_text(comparison)
    lines = text.splitlines()
    (row,) = [i for i, line in enumerate(lines) if line.startswith("DIFFERS  cds  backend")]
    assert lines[row + 1] == "    source: clusters.yaml (document 2)", text
    assert "l.yaml" not in text  # the listener matches: its source is not shown
    shown = {(r["type"], r["name"]): r["source"] for r in render_json(comparison)["resources"]}
    assert shown[("cds", "backend")] == "clusters.yaml (document 2)"
    assert shown[("lds", "listener_0")] == "l.yaml"
    assert shown[("eds", "backend")] == ""


@asynccontextmanager
async def listening(count: int) -> AsyncIterator[list[tuple[Plane, int]]]:
    """``count`` servers, each serving over gRPC on a port of its own."""
    async with AsyncExitStack() as stack:
        found = []
        for _ in range(count):
            p = await stack.enter_async_context(plane())
            p.cache.set_snapshot(None, config(80))
            transport = await stack.enter_async_context(GrpclibTransport(p.server))
            found.append((p, await transport.start()))
        yield found


async def connect(p: Plane, node: str) -> None:
    driver = p.client(SotwClient(node=make_node(id=node)))
    await driver.watch(CLUSTER, None)
    await p.until(lambda: p.stream(node) is not None and p.expect(node, CLUSTER).acked_version)


async def xdscore(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = await anyio.to_thread.run_sync(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_status_and_dump_over_several_servers(capsys: pytest.CaptureFixture[str]) -> None:
    async with listening(2) as ((first, one), (second, two)):
        await connect(first, "edge-1")
        await connect(second, "edge-1")
        await connect(second, "edge-2")
        a, b, dead = f"127.0.0.1:{one}", f"127.0.0.1:{two}", f"127.0.0.1:{free_port()}"
        both = ("--server", a, "--server", b)

        code, out, err = await xdscore(["status", *both, "--format", "json"], capsys)
        assert code == 0, err
        document = json.loads(out)
        seen = [(p["node"], p["replica"]) for p in document["proxies"]]
        assert sorted(seen) == sorted([("edge-1", a), ("edge-1", b), ("edge-2", b)]), out
        assert document["unanswered"] == []
        code, out, err = await xdscore(["status", *both], capsys)
        assert code == 0, err
        header, *rows = out.splitlines()
        assert header.split()[:2] == ["NODE", "REPLICA"]
        labelled = sorted(row.split()[:2] for row in rows)
        assert labelled == sorted([["edge-1", a], ["edge-1", b], ["edge-2", b]]), out

        # One that does not answer is named, the others still shown, and the status is 1.
        code, out, err = await xdscore(["status", *both, "--server", dead], capsys)
        assert code == 1
        assert len(out.splitlines()) == 4, out
        assert err.startswith(f"xdscore: cannot ask {dead}: "), err

        code, out, err = await xdscore(["dump", *both, "--node", "edge-1", "--type", "cds"], capsys)
        assert code == 0, err
        document = json.loads(out)
        assert [r["replica"] for r in document["replicas"]] == [a, b]
        for entry in document["replicas"]:
            assert sorted(r["name"] for r in entry["types"][CLUSTER]) == ["a", "b"]
        code, out, err = await xdscore(["dump", *both, "--node", "edge-2"], capsys)
        assert code == 0, err
        assert [r["replica"] for r in json.loads(out)["replicas"]] == [b]

        code, out, err = await xdscore(
            ["dump", "--server", dead, *both, "--node", "edge-2"], capsys
        )
        assert code == 1
        assert [r["replica"] for r in json.loads(out)["replicas"]] == [b]
        (line,) = err.splitlines()
        assert line.startswith(f"xdscore: cannot ask {dead}: "), err
        code, out, err = await xdscore(["dump", *both, "--node", "edge-3"], capsys)
        assert (code, out) == (1, "")
        assert err == "xdscore: no replica has a client with node id 'edge-3'\n"

        # One --server: the output of one control plane, as before.
        code, out, err = await xdscore(["dump", "--server", a, "--node", "edge-1"], capsys)
        assert code == 0, err
        assert set(json.loads(out)) == {"node", "types"}
        code, out, err = await xdscore(["status", "--server", dead], capsys)
        assert (code, out) == (1, "")
        assert err.startswith(f"xdscore: cannot ask {dead}: "), err


async def test_diff_takes_admin_with_one_server_only(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["diff", "--server", "127.0.0.1:1", "--server", "127.0.0.1:2", "--admin"]
    code, _, err = await xdscore([*argv, "127.0.0.1:3", "--envoy-admin", "127.0.0.1:4"], capsys)
    assert code == 2
    assert err == "xdscore diff: --admin goes with one --server\n"


async def test_etcd_that_cannot_be_asked_is_exit_status_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for argv in (["status", "--etcd", url], ["dump", "--etcd", url, "--node", "edge-1"]):
        code, out, err = await xdscore(argv, capsys)
        assert (code, out) == (1, ""), err
        assert err.startswith("xdscore: cannot read the replicas of '/xdscore': "), err
    code, _, err = await xdscore(["status", "--etcd", "nope://x"], capsys)
    assert code == 2, err


async def test_a_server_that_does_not_answer_in_time_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--timeout``: a control plane that takes the connection and never answers is named
    once its time is up, and the exit status is 1."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        for argv in (["status"], ["dump", "--node", "edge-1"]):
            started = time.monotonic()
            code, out, err = await xdscore([*argv, "--server", address, "--timeout", "0.5"], capsys)
            assert (code, out) == (1, ""), err
            assert f"xdscore: cannot ask {address}: no answer in 0.5s" in err, err
            assert time.monotonic() - started < 5
