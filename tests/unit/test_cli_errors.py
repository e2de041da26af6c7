"""What the command line says when something is wrong, as a new user meets it: a TLS file
that is missing or does not load (the flag and the path named), a YAML or JSON file that does
not parse (file, line, column and the problem, none of the parser's own rendering), a
server with no proxy connected, and the exit statuses ``xdscore --help`` documents."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from xdscore import Http2Transport, SnapshotCache, XdsServer
from xdscore.cli import main

from ..tls_support import CertificateAuthority
from .test_cli_analyze import _good

pytestmark = pytest.mark.anyio


@pytest.fixture
def certs(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    directory.mkdir()
    ca = CertificateAuthority()
    ca.write(directory)
    ca.server().write(directory, "server")
    (directory / "garbage.pem").write_text("not a certificate\n")
    return directory


# -- TLS files --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--tls-cert", "--tls-cert {missing}: No such file or directory"),
        ("--tls-key", "--tls-key {missing}: No such file or directory"),
        ("--client-ca", "--client-ca {missing}: No such file or directory"),
    ],
)
def test_a_missing_tls_file_is_named_with_its_flag(
    flag: str, message: str, tmp_path: Path, certs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = {
        "--tls-cert": certs / "server.crt",
        "--tls-key": certs / "server.key",
        "--client-ca": certs / "ca.crt",
    }
    missing = tmp_path / "nowhere" / "file.pem"
    files[flag] = missing
    argv = ["serve", str(_good(tmp_path / "config")), "--listen", "127.0.0.1:0"]
    for name, path in files.items():
        argv += [name, str(path)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"xdscore: cannot serve with these TLS settings: {message.format(missing=missing)}\n"
    )


def test_tls_files_that_do_not_load_are_named(
    tmp_path: Path, certs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = str(_good(tmp_path / "config"))
    garbage = certs / "garbage.pem"
    argv = ["serve", directory, "--tls-cert", str(garbage), "--tls-key", str(garbage)]
    assert main(argv) == 2
    error = capsys.readouterr().err
    assert f"--tls-cert {garbage} and --tls-key {garbage} are not a PEM certificate" in error
    assert "_ssl.c" not in error
    server = ["--tls-cert", str(certs / "server.crt"), "--tls-key", str(certs / "server.key")]
    assert main(["serve", directory, *server, "--client-ca", str(garbage)]) == 2
    error = capsys.readouterr().err
    assert f"--client-ca {garbage} holds no PEM CA certificate: " in error
    assert "_ssl.c" not in error


def test_status_names_a_missing_tls_file_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "ca.pem"
    assert main(["status", "--server", "127.0.0.1:1", "--tls-ca", str(missing)]) == 2
    assert capsys.readouterr().err == (
        f"xdscore status: --tls-ca {missing}: No such file or directory\n"
    )


# -- files that do not parse ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        (
            "broken.yaml",
            "name: a\nports: [80, 81\nother: 1\n",
            "line 3, column 6: expected ',' or ']', but got ':' "
            "(while parsing a flow sequence that began at line 2, column 8)",
        ),
        (
            "broken.yaml",
            "name: a\n  bad: x\n",
            "line 2, column 6: mapping values are not allowed here",
        ),
        (
            "broken.json",
            '{"@type": "x",\n "name": "a"\n',
            "line 3, column 1: expected ',' or '}', but got '<stream end>' "
            "(while parsing a flow mapping that began at line 1, column 1)",
        ),
    ],
)
def test_a_file_that_does_not_parse_is_located_cleanly(
    name: str, text: str, problem: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _good(tmp_path / "config")
    (directory / name).write_text(text)
    expected = f"{directory / name}: cannot be read: {problem}"
    for argv in (["serve", str(directory), "--listen", "127.0.0.1:0"], ["analyze", str(directory)]):
        assert main(argv) == 1
        error = capsys.readouterr().err
        assert expected in error, error
        assert "<unicode string>" not in error
        assert "^" not in error  # no quoted line with a caret


# -- status with no proxy --------------------------------------------------------------------


async def test_status_with_no_proxy_says_so() -> None:
    async with Http2Transport(XdsServer(SnapshotCache())) as transport:
        port = await transport.start("127.0.0.1", 0)
        for extra, expected in (
            ([], f"no proxy is connected to 127.0.0.1:{port}\n"),
            (
                ["--node", "edge-"],
                f"no proxy whose node id starts with 'edge-' is connected to 127.0.0.1:{port}\n",
            ),
            (["--format", "json"], "[]\n"),
        ):
            command = [sys.executable, "-m", "xdscore", "status", "--server", f"127.0.0.1:{port}"]
            done = await anyio.run_process([*command, *extra], check=False)
            assert done.returncode == 0, done.stderr
            assert done.stdout.decode() == expected


# -- exit statuses ---------------------------------------------------------------------------


def test_help_documents_the_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    statuses = text[text.index("\nexit status:\n") :]
    for status in ("  0  done", "  1  the command ran", "  2  the command line is wrong"):
        assert status in statuses


@pytest.mark.parametrize("command", ["serve", "analyze", "apply"])
def test_a_missing_directory_is_a_usage_error_for_every_command(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    argv = [command, str(missing)]
    if command == "apply":
        argv += ["--etcd", "http://127.0.0.1:1"]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"xdscore: cannot {command} {missing}: no such directory\n"
