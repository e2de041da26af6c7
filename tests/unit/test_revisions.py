"""Revisions, in memory: each snapshot the cache adopts, and which streams hold it.

Real machines and the real codec over memory streams (the rig of ``test_status``): the
revision log is checked from outside, through ``XdsServer.converged`` and the metrics,
against what each client machine holds.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio
import pytest

from xdscore import CLUSTER, ENDPOINT, LISTENER, Snapshot, XdsServer
from xdscore import builders as b
from xdscore.cache import content_revision
from xdscore.config import load_directory
from xdscore.etcd._check import evaluate
from xdscore.etcd._layout import encode_state, resource_key
from xdscore.server._revisions import _mentions
from xdscore.transport._admin import AdminApp
from xdscore.wire._messages import make_resource

from .test_driver import config
from .test_status import (
    REASON,
    ByHand,
    machine_for,
    plane,
    reject_bad,
    want_everything,
)

pytestmark = pytest.mark.anyio

WAIT = 5.0
DEMO = Path(__file__).parents[2] / "examples" / "demo-config"


def admin_get(server: XdsServer, path: str, query: str = "") -> Any:
    """GET ``path`` of the server's admin endpoint, handled in place: the JSON body."""
    app = AdminApp(server, ready=lambda: True)
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query.encode()}
    try:
        status, _, body = app._handle(scope)
    except Exception as exc:
        raise AssertionError(f"{getattr(exc, 'status', '?')} {exc}") from exc
    assert status == 200
    return json.loads(body)


def test_a_revision_id_is_the_content_only() -> None:
    """Two snapshots of the same resources have one id, whatever they say of their
    provenance; any change of content gives another."""
    first = config(80)
    same = Snapshot(
        [r for t in first.type_urls for r in (first.resources(t) or {}).values()],
        provenance="elsewhere",
        label="etcd revision 7",
        store_revision=7,
    )
    assert first.revision == same.revision
    assert len(first.revision) == 16
    assert config(81).revision != first.revision
    assert config(80, ("a", "c")).revision != first.revision
    # An empty type it is authoritative for counts: it removes what a client held.
    assert Snapshot(types=[CLUSTER]).revision != Snapshot().revision
    by_type = {t: first.resources(t) or {} for t in first.type_urls}
    assert content_revision(by_type) == first.revision
    assert same.source_of(CLUSTER, "a") == "elsewhere"
    sources = {(CLUSTER, "a"): "clusters.yaml, document 1"}
    assert Snapshot(provenance=sources).source_of(CLUSTER, "a") == "clusters.yaml, document 1"
    assert Snapshot(provenance=sources).source_of(CLUSTER, "b") is None


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
async def test_a_revision_converges_when_every_proxy_holds_it(protocol: str) -> None:
    async with plane() as p:
        first = config(80)
        p.cache.set_snapshot(None, first)
        clients = [p.client(machine_for(protocol, f"edge-{i}")) for i in (1, 2)]
        for client in clients:
            await want_everything(client, CLUSTER)  # (endpoints follow)
        status = await p.server.converged(timeout=WAIT)
        assert status.converged, status
        assert status.id == first.revision
        assert status.acked == 2
        assert status.joined == 2  # they connected after it was adopted
        assert status.changed == 0

        second = config(81)
        p.cache.set_snapshot(None, second)
        status = await p.server.converged(second.revision, timeout=WAIT)
        assert status.converged, status
        assert (status.id, status.seq, status.newest) == (second.revision, 2, True)
        assert status.connected == 2
        assert status.changed == 2
        assert {proxy.node for proxy in status.proxies} == {"edge-1", "edge-2"}
        assert all(proxy.state == "acked" for proxy in status.proxies)
        assert status.convergence is not None
        assert 0 <= status.convergence[0] <= status.convergence[1] <= status.convergence[2]
        for client in clients:
            held = client.machine.holds(ENDPOINT)["a"]
            assert held.version == second.resources(ENDPOINT)["a"].version  # type: ignore[index]
        assert p.value("xdscore_revisions_total") == 2
        assert p.value("xdscore_revision_convergence_seconds_count") == 1
        assert p.value("xdscore_revision_proxy_seconds_count") == 2
        assert p.value("xdscore_revision_pending_proxies") == 0

        # A proxy that connects later holds every revision once it settles (joined), and
        # observes no revision's convergence again.
        late = p.client(machine_for(protocol, "edge-3"))
        await want_everything(late, CLUSTER)
        # (Endpoints too: between its cluster ACK and its request for their endpoints, a
        # proxy holds all it asked for; docs/operations.md says so.)
        await p.until(lambda: p.synced_at("edge-3", second, (CLUSTER, ENDPOINT)))
        status = await p.server.converged(timeout=WAIT)
        assert status.converged, status
        assert (status.acked, status.joined, status.changed) == (3, 1, 2)
        assert p.value("xdscore_revision_convergence_seconds_count") == 1
        assert p.value("xdscore_revision_proxy_seconds_count") == 2
        earlier = await p.server.converged(1, timeout=WAIT)
        assert (earlier.acked, earlier.joined) == (3, 3)

        # A revision that changes nothing a proxy asked for (listeners: nobody did) is
        # held at once by both.
        third = Snapshot(
            [
                *(r for t in (CLUSTER, ENDPOINT) for r in second.resources(t).values()),  # type: ignore[union-attr]
                b.http_listener("l2", 10001, "r"),
            ]
        )
        p.cache.set_snapshot(None, third)
        status = await p.server.converged(timeout=WAIT)
        assert status.converged, status
        assert (status.acked, status.changed) == (3, 0)


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
async def test_a_nack_is_reported_with_what_was_rejected_and_where_it_came_from(
    protocol: str,
) -> None:
    async with plane() as p:
        good = config(80)
        p.cache.set_snapshot(None, good)
        picky = p.client(machine_for(protocol, "picky", validate=reject_bad))
        easy = p.client(machine_for(protocol, "easy"))
        for client in (picky, easy):
            await want_everything(client, CLUSTER)
        assert (await p.server.converged(timeout=WAIT)).converged

        resources = [r for t in good.type_urls for r in (good.resources(t) or {}).values()]
        bad = Snapshot(
            [*resources, b.eds_cluster("bad")],
            provenance={(CLUSTER, "bad"): "clusters.yaml, document 3"},
            label="reload 2",
        )
        p.cache.set_snapshot(None, bad)
        status = await p.server.converged(bad.revision, timeout=WAIT)
        assert status.done
        assert not status.converged
        assert status.label == "reload 2"
        (nacked,) = status.nacked
        assert nacked.node == "picky"
        assert nacked.nack is not None
        assert nacked.nack.message == REASON
        assert nacked.nack.type_url == CLUSTER
        (blamed,) = nacked.nack.resources
        assert (blamed.name, blamed.source) == ("bad", "clusters.yaml, document 3")
        assert nacked.nack.describe("picky") == (
            f"bad (clusters.yaml, document 3) NACKed by picky: {REASON}"
        )
        (acked,) = [proxy for proxy in status.proxies if proxy.state == "acked"]
        assert acked.node == "easy"
        assert not status.pending

        # The admin endpoint says the same.
        page = admin_get(p.server, "/revision", f"id={bad.revision}")
        assert (page["id"], page["done"], page["converged"]) == (bad.revision, True, False)
        assert (page["nacked"], page["pending"], page["replica"]) == (1, 0, p.server.replica_id)
        (shown,) = [proxy for proxy in page["proxies"] if proxy["state"] == "nacked"]
        assert shown["nack"]["resources"] == [
            {
                "name": "bad",
                "type": "cds",
                "version": bad.resources(CLUSTER)["bad"].version,  # type: ignore[index]
                "source": "clusters.yaml, document 3",
            }
        ]
        assert shown["nack"]["description"].startswith("bad (clusters.yaml, document 3)")
        status_page = admin_get(p.server, "/status")
        assert status_page["revision"]["id"] == bad.revision
        assert [r["seq"] for r in status_page["revisions"]] == [1, 2]
        held = {proxy["node"]: proxy["revision"] for proxy in status_page["proxies"]}
        assert held == {"easy": bad.revision, "picky": good.revision}
        with pytest.raises(AssertionError, match="404"):
            admin_get(p.server, "/revision", "id=0123456789abcdef")
        # /config_dump names each resource's source (diff reads it); None where not said.
        dumped = admin_get(p.server, "/config_dump", "node=picky&type=cds")
        (clusters,) = dumped["types"]
        sources = {r["name"]: r["source"] for r in clusters["resources"]}
        assert sources == {"a": None, "b": None, "bad": "clusters.yaml, document 3"}

        # The fix: both hold it, the NACK is behind them.
        p.cache.set_snapshot(None, config(81))
        status = await p.server.converged(timeout=WAIT)
        assert status.converged, status
        assert status.changed == 2


@pytest.mark.parametrize("protocol", ["sotw", "delta"])
async def test_a_proxy_that_does_not_answer_is_pending_then_left(protocol: str) -> None:
    async with plane() as p:
        first = config(80)
        p.cache.set_snapshot(None, first)
        silent = ByHand(machine_for(protocol, "silent"), p.open(protocol)[0])
        await silent.ask(CLUSTER)
        response = await silent.read()
        await silent.answer(response)
        assert (await p.server.converged(timeout=WAIT)).converged

        second = config(80, ("a", "c"))
        p.cache.set_snapshot(None, second)
        await silent.read()  # read, never answered
        status = await p.server.converged(timeout=0.2)
        assert not status.done
        (pending,) = status.pending
        assert pending.node == "silent"
        assert pending.unsynced == ("cds STALE",)
        assert p.value("xdscore_revision_pending_proxies") == 1

        silent.end.reset()
        status = await p.server.converged(second.revision, timeout=WAIT)
        assert status.converged  # nobody is left to hold it
        assert status.left == ("silent",)
        assert status.left_count == 1


async def test_unknown_revisions_are_a_lookup_error() -> None:
    async with plane() as p:
        with pytest.raises(LookupError):
            await p.server.converged(timeout=0.1)
        p.cache.set_snapshot(None, config(80))
        with pytest.raises(LookupError):
            await p.server.converged("0123456789abcdef", timeout=0.1)
        status = await p.server.converged(1, timeout=0.1)
        assert status.converged  # no stream: nobody to wait for
        with anyio.fail_after(1):
            assert (await p.server.converged(config(80).revision)).seq == 1


def test_a_directory_names_each_resources_file_and_document(tmp_path: Path) -> None:
    for name in ("listeners.yaml", "routes.yaml", "clusters.yaml", "endpoints.yaml"):
        shutil.copy(DEMO / name, tmp_path / name)
    listener = (DEMO / "listeners.yaml").read_text()
    second = listener.replace("listener_0", "listener_1").replace("10000}", "10001}")
    (tmp_path / "listeners.yaml").write_text(listener + "---\n" + second)
    snapshot = load_directory(tmp_path)
    assert snapshot.source_of(LISTENER, "listener_0") == "listeners.yaml (document 1)"
    assert snapshot.source_of(LISTENER, "listener_1") == "listeners.yaml (document 2)"
    # (A document holding a list: the entry is named by its index.)
    assert snapshot.source_of(CLUSTER, "backend_a") == "clusters.yaml (document 1) [0]"
    assert snapshot.source_of(CLUSTER, "nothing") is None
    # Where a resource comes from is not part of the revision.
    (tmp_path / "more.yaml").write_text(second)
    (tmp_path / "listeners.yaml").write_text(listener)
    moved = load_directory(tmp_path)
    assert moved.source_of(LISTENER, "listener_1") == "more.yaml (document 1)"
    assert moved.revision == snapshot.revision


def test_etcd_keys_and_mod_revisions_are_the_provenance() -> None:
    prefix = "/xds/"
    key = resource_key(prefix, CLUSTER, "a").decode()
    state = encode_state(prefix, [make_resource(b.eds_cluster("a"))])
    evaluation = evaluate(prefix, state, complete=False)
    assert not evaluation.problems, evaluation.problems
    snapshot = evaluation.snapshot(mods={key: 7}, revision=9, prefix=prefix)
    assert snapshot.source_of(CLUSTER, "a") == f"{key} (mod revision 7)"
    assert (snapshot.label, snapshot.store_revision) == ("etcd revision 9 under /xds/", 9)


def test_a_nack_message_names_a_resource_as_a_word_of_its_own() -> None:
    message = "Error adding/updating listener(s) listener_blocked: cannot bind '127.0.0.1:1'"
    assert _mentions(message, "listener_blocked")
    assert not _mentions(message, "listener_block")
    assert not _mentions(message, "blocked")
    assert _mentions("cluster a.b.", "a.b")
    assert not _mentions("cluster a.bc", "a.b")
    assert not _mentions("route r:1 refused", "r")
