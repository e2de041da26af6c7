"""``xdscore wait``'s verdict over replicas' answers, and its command line (pure)."""

from __future__ import annotations

import contextlib
import socket
import time
from typing import Any

import pytest

from xdscore.cli import main
from xdscore.cli._wait import Answer, verdict
from xdscore.testing import free_port


def document(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "0123456789abcdef",
        "label": "reload #2 of /etc/xds",
        "replica": "r1",
        "acked": 0,
        "changed": 0,
        "pending": 0,
        "converged": True,
        "left": [],
        "left_count": 0,
        "proxies": [],
    }
    return base | fields


NACK = {
    "type": "lds",
    "message": "cannot bind",
    "resources": [{"name": "l1", "type": "lds", "source": "extra.yaml (document 2)"}],
}


def test_every_replica_converged() -> None:
    answers = [Answer("a:1", document(acked=2, changed=2)), Answer("b:1", document(changed=1))]
    outcome = verdict("0123456789abcdef", answers)
    assert (outcome.done, outcome.converged) == (True, True)
    assert outcome.lines == (
        "revision 0123456789abcdef (reload #2 of /etc/xds): every proxy holds it (3 changed by it)",
    )


def test_a_nack_on_one_replica_is_named_with_its_source() -> None:
    proxies = [
        {"node": "edge-1", "state": "nacked", "nack": NACK},
        {"node": "edge-2", "state": "acked", "nack": None},
    ]
    answers = [
        Answer("a:1", document(converged=False, proxies=proxies)),
        Answer("b:1", document(replica="r2")),
    ]
    outcome = verdict("0123456789abcdef", answers)
    assert (outcome.done, outcome.converged) == (True, False)
    assert "NOT EVERY PROXY HOLDS IT" in outcome.lines[0]
    assert outcome.lines[1:] == (
        "NACKED   edge-1 (replica r1): rejected lds l1 from extra.yaml (document 2): cannot bind",
    )


def test_pending_left_and_unanswered_replicas_are_not_done() -> None:
    proxies = [{"node": "edge-3", "state": "pending", "unsynced": ["cds STALE"]}]
    pending = document(converged=False, pending=1, proxies=proxies, left=["edge-4"], left_count=3)
    answers = [Answer("a:1", pending), Answer("b:1", problem="has not adopted revision x")]
    outcome = verdict("x", answers)
    assert (outcome.done, outcome.converged) == (False, False)
    assert outcome.lines[1:] == (
        "PENDING  edge-3 (replica r1): has not answered (cds STALE)",
        "LEFT     edge-4 and 2 more (replica r1): disconnected before holding it",
        "REPLICA  b:1: has not adopted revision x",
    )


def test_a_replica_that_cannot_be_asked_fails_the_wait(capsys: pytest.CaptureFixture[str]) -> None:
    closed = free_port()
    code = main(["wait", "--admin", f"127.0.0.1:{closed}", "--timeout", "0.3s"])
    assert code == 1
    out = capsys.readouterr().out
    assert f"REPLICA  127.0.0.1:{closed}: cannot be asked" in out, out


def test_wait_needs_replicas_to_ask(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["wait", "--timeout", "1s"]) == 2
    assert "no replica to ask: none given (give --admin or --etcd)" in capsys.readouterr().err


def test_the_replicas_are_asked_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    """Three admin endpoints that take the connection and never answer, with a wait of 1 s:
    asked one after the other, the second and third would each take their own time too
    (3 s in all)."""
    with contextlib.ExitStack() as stack:
        silent = [stack.enter_context(socket.create_server(("127.0.0.1", 0))) for _ in range(3)]
        admins = [f"127.0.0.1:{s.getsockname()[1]}" for s in silent]
        started = time.monotonic()
        code = main(["wait", *(x for a in admins for x in ("--admin", a)), "--timeout", "1s"])
        took = time.monotonic() - started
    assert code == 1
    out = capsys.readouterr().out
    assert all(f"REPLICA  {admin}: cannot be asked" in out for admin in admins), out
    assert took < 2.5, took  # (one after the other: 3 s)
