"""``xdscore serve``'s TLS and identity flags against scopes.yaml: a node field scopes select
on that the SPIFFE binding leaves free is refused before anything listens (exit 2), and so
are flags that cannot hold; a scopes.yaml edited while the directory first loads is read
again as a reload. tests/integration/test_security_tenants.py runs the accepted
configurations against real clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from xdscore.cache import ScopedCache
from xdscore.cli import _serve, main
from xdscore.server import XdsServer

from ..tls_support import CertificateAuthority
from .test_cli_analyze import _good

pytestmark = pytest.mark.timeout(60)

SPIFFE = "spiffe://{trust_domain}/ns/{namespace}/sa/{account}"
BY_CLUSTER = "scopes: [{name: team-a, nodes: {cluster: team-a}, egress: ['*']}]\n"
BY_METADATA = "scopes: [{name: edge, nodes: {metadata: {tier: edge}}, egress: ['*']}]\n"
BY_ID = "scopes: [{name: edge, nodes: {id: 'edge.*'}, egress: ['*']}]\n"


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    directory.mkdir()
    ca = CertificateAuthority()
    ca.write(directory)
    ca.server().write(directory, "server")
    return directory


def serve(config: Path, certs: Path, *flags: str) -> list[str]:
    return [
        "serve", str(config), "--listen", "127.0.0.1:0",
        "--tls-cert", str(certs / "server.crt"), "--tls-key", str(certs / "server.key"),
        "--client-ca", str(certs / "ca.crt"), *flags,
    ]  # fmt: skip


def config(tmp_path: Path, scopes: str) -> Path:
    directory = _good(tmp_path / "config")
    (directory / "scopes.yaml").write_text(scopes)
    return directory


@pytest.mark.parametrize(
    ("scopes", "flags", "expected"),
    [
        (
            BY_CLUSTER,
            [],
            "scope 'team-a' selects nodes by cluster, but --node-from-spiffe binds only the "
            "node id: any client with a valid certificate could claim any cluster and be served "
            "another tenant's scope. Bind it too (--bind-field cluster={namespace}), or select "
            "nodes by the bound fields only",
        ),
        (
            BY_METADATA,
            ["--bind-field", "cluster={namespace}"],
            "scope 'edge' selects nodes by metadata.tier, but --node-from-spiffe binds only "
            "the cluster and node id",
        ),
        (
            BY_ID,
            ["--node-field", "cluster"],
            "scope 'edge' selects nodes by node id, but --node-from-spiffe binds only the cluster",
        ),
    ],
)
def test_scopes_selecting_a_field_the_binding_leaves_free_are_refused(
    scopes: str,
    flags: list[str],
    expected: str,
    tmp_path: Path,
    certs: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    directory = config(tmp_path, scopes)
    node = "{account}.{namespace}" if "cluster" not in flags else "{namespace}"
    argv = serve(directory, certs, "--node-from-spiffe", SPIFFE, node, *flags)
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing was served
    assert captured.err.startswith(f"xdscore: cannot serve {directory}: "), captured.err
    assert expected in captured.err


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (
            ["--bind-field", "cluster={namespace}"],
            "--bind-field needs --node-from-spiffe",
        ),
        (
            ["--node-from-spiffe", SPIFFE, "{account}", "--bind-field", "cluster={team}"],
            "the template of node cluster '{team}' uses ['team']",
        ),
        (
            ["--node-from-spiffe", SPIFFE, "{account}", "--bind-field", "id={account}"],
            "node field 'id' is bound twice",
        ),
        (["--operator-id", "ops"], "'ops' is not a SPIFFE ID pattern"),
    ],
)
def test_identity_flags_that_cannot_hold_are_refused(
    flags: list[str],
    expected: str,
    tmp_path: Path,
    certs: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(serve(_good(tmp_path / "config"), certs, *flags)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"cannot serve with these TLS settings: {expected}" in captured.err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["serve", "DIR", "--bind-field", "cluster"], "expected FIELD=TEMPLATE, got 'cluster'"),
        (["serve", "DIR", "--bind-field", "zone=x"], "a node field is id, cluster or metadata"),
    ],
)
def test_bind_field_usage_errors(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert expected in capsys.readouterr().err


def test_operator_ids_need_mutual_tls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", str(_good(tmp_path / "config")), "--operator-id", "spiffe://x/ops"]
    assert main(argv) == 2
    assert "--operator-id needs --client-ca" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("edited", "served"),
    [
        (BY_ID.replace("edge", "edge-2"), ["edge-2"]),  # applied
        (BY_CLUSTER, ["edge"]),  # selects on an unbound field: refused, the first scopes stay
    ],
)
def test_a_scopes_edit_made_while_the_directory_first_loads_is_read_again(
    edited: str, served: list[str], tmp_path: Path, certs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = config(tmp_path, BY_ID)
    watch_directory = _serve.watch_directory

    async def edit_then_watch(*args: Any, **kwargs: Any) -> None:
        # After serve read scopes.yaml, before the file watcher starts: no reload sees it.
        (directory / "scopes.yaml").write_text(edited)
        await watch_directory(*args, **kwargs)

    seen: list[list[str]] = []

    async def record(_args: Any, server: XdsServer, *_: Any) -> int:
        assert isinstance(server.cache, ScopedCache)
        seen.append([scope.name for scope in server.cache.scopes])
        return 0

    monkeypatch.setattr(_serve, "watch_directory", edit_then_watch)
    monkeypatch.setattr(_serve, "_serve", record)
    argv = serve(directory, certs, "--node-from-spiffe", SPIFFE, "{account}.{namespace}")
    assert main(argv) == 0
    assert seen == [served]
