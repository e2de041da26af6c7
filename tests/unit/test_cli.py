"""The command line as a user meets it: usage errors, --version, global flags in either
place, help with examples, analyze and serve refusing the same directories, and how fast
``xdscore serve`` stops on SIGTERM and SIGINT (with and without a client)."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.discovery.v3 import discovery_pb2

import xdscore
from tests.compiled_build import listed
from xdscore import CLUSTER
from xdscore._build import describe, loaded_build
from xdscore.cli import main
from xdscore.transport.grpclib.client import open_channel

from .test_cli_analyze import ROUTES, _good

ROOT = Path(__file__).resolve().parents[2]
ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"
STOP_LIMIT = 0.5
"""Seconds from the signal to the process's exit, with no client connected."""


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["serve", "DIR", "--listen", ":99999"], "--listen: expected a port from 0 to 65535"),
        (["serve", "DIR", "--listen", "nocolon"], "--listen: expected HOST:PORT"),
        (["serve", "DIR", "--listen", "host:-1"], "--listen: expected HOST:PORT"),
        (["serve", "DIR", "--admin", "127.0.0.1:70000"], "--admin: expected a port"),
        (["serve", "DIR", "--debounce-ms", "-5"], "--debounce-ms: expected a number of 0 or"),
        (["serve", "DIR", "--debounce-ms", "1.5"], "--debounce-ms: expected a whole number"),
        (["serve", "DIR", "--max-delay-ms", "0"], "--max-delay-ms: expected a positive"),
        (["serve", "DIR", "--reload-timeout", "inf"], "--reload-timeout: expected a finite"),
        (["serve", "DIR", "--reload-timeout", "nan"], "--reload-timeout: expected a finite"),
        (["serve", "DIR", "--max-file-bytes", "1e3"], "--max-file-bytes: expected a whole"),
        (["serve", "DIR", "--max-stream-age", "5x"], "--max-stream-age: expected a duration"),
        (["serve", "DIR", "--max-stream-age=-1m"], "--max-stream-age: expected a duration"),
        (["serve", "DIR", "--max-stream-age", "nan"], "--max-stream-age: expected a duration"),
        (["serve", "DIR", "--max-stream-close-fraction", "2"], "expected a fraction above 0"),
        (["serve", "DIR", "--workers", "0"], "--workers: expected a whole number of at least 1"),
        (["serve", "DIR", "--node-field", "zone"], "--node-field: invalid choice: 'zone'"),
        (["--log-level", "verbose", "serve", "DIR"], "--log-level: invalid choice: 'verbose'"),
        (["serve", "DIR", "--log-level", "verbose"], "--log-level: invalid choice: 'verbose'"),
        (["serve", "DIR", "--log-format", "xml"], "--log-format: invalid choice: 'xml'"),
        (["serve", "DIR", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["analyze"], "the following arguments are required: DIR"),
        (["analyze", "DIR", "--format", "xml"], "--format: invalid choice: 'xml'"),
        (["analyze", "DIR", "--min-severity", "fatal"], "--min-severity: invalid choice"),
        (["apply", "DIR"], "the following arguments are required: --etcd"),
        (["apply", "DIR", "--etcd", "x", "--max-config-bytes", "0"], "expected a positive"),
        (["status", "--server", "x:123456"], "--server: expected a port"),
        (["dump", "--server", "127.0.0.1:1"], "the following arguments are required: --node"),
        (["diff", "--server", "a:1", "--envoy-admin", "b:2", "--timeout", "-1"], "positive"),
        (["bootstrap"], "the following arguments are required: KIND"),
        (["bootstrap", "istio"], "argument KIND: invalid choice: 'istio'"),
        (["bootstrap", "envoy", "--node", "n"], "the following arguments are required: --server"),
        (["bootstrap", "envoy", "--server", "h:1"], "the following arguments are required: --node"),
        (["bootstrap", "grpc", "--server", "h", "--node", "n"], "--server: expected HOST:PORT"),
        (["bootstrap", "envoy", "--server", "h:1", "--node", "n", "--format", "xml"], "invalid"),
        (["bootstrap", "grpc", "--server", "h:1", "--node", "n", "--delta"], "unrecognized"),
        (["bogus"], "invalid choice: 'bogus'"),
        ([], "the following arguments are required: COMMAND"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _usage_error(argv, capsys)
    assert expected in line
    assert line.startswith("xdscore")
    assert line.endswith("--help')")


def test_usage_error_from_the_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "xdscore", "serve", "DIR", "--listen", ":99999"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "xdscore serve: argument --listen: expected a port from 0 to 65535, got ':99999' "
        "(see 'xdscore serve --help')"
    ]


@pytest.mark.parametrize("kind", ["envoy", "grpc"])
@pytest.mark.parametrize(
    "tls",
    [["--tls-cert", "c.pem"], ["--tls-key", "k.pem"], ["--tls-cert", "c.pem", "--tls-key", "k"]],
)
def test_bootstrap_refuses_incomplete_tls_flags(
    kind: str, tls: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bootstrap", kind, "--server", "h:1", "--node", "n", *tls]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith(f"xdscore bootstrap {kind}: ")


def test_version_says_which_build_is_loaded(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    line = capsys.readouterr().out
    assert line == f"xdscore {xdscore.__version__} ({describe(loaded_build())})\n"
    if os.environ.get("XDSCORE_PURE") == "1":
        assert line.endswith(" (pure Python: XDSCORE_PURE=1)\n")
    elif os.environ.get("XDSCORE_COMPILED") == "1":
        assert line.endswith(f" (compiled: {len(listed())} modules by mypyc)\n")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
@pytest.mark.parametrize(
    "argv",
    [
        ["--log-level", "WARNING", "--log-format", "json", "analyze", "{dir}"],
        ["analyze", "{dir}", "--log-level", "warning", "--log-format", "json"],
        ["--log-format", "json", "analyze", "{dir}", "--log-level", "warning"],
    ],
)
def test_global_flags_before_or_after_the_command(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = _good(tmp_path / "config")
    assert main([arg.replace("{dir}", str(directory)) for arg in argv]) == 0
    root = logging.getLogger()
    assert root.level == logging.WARNING
    assert type(root.handlers[0].formatter).__name__ == "JsonFormatter"


@pytest.mark.usefixtures("restore_logging")
def test_a_global_flag_after_the_command_does_not_reset_one_before(tmp_path: Path) -> None:
    directory = _good(tmp_path / "config")
    assert main(["--log-level", "error", "analyze", str(directory), "--log-format", "text"]) == 0
    assert logging.getLogger().level == logging.ERROR


@pytest.mark.parametrize(
    "command",
    [
        "serve",
        "apply",
        "analyze",
        "status",
        "dump",
        "diff",
        "bootstrap",
        "bootstrap envoy",
        "bootstrap grpc",
    ],
)
def test_each_command_has_help_with_an_example(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*command.split(), "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    examples = text[text.index("\nexamples:\n") :]
    assert f"  xdscore {command} " in examples
    assert "--log-level" in text  # the global flags are listed after the command too


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for command in ("serve", "apply", "analyze", "status", "dump", "diff", "bootstrap"):
        assert f"    {command}" in text
    assert "--version" in text
    assert "examples:\n  xdscore serve" in text


# -- analyze and serve refuse the same directories -------------------------------------------


def _empty(tmp_path: Path) -> Path:
    directory = tmp_path / "empty"
    (directory / "sub").mkdir(parents=True)
    (directory / "README.md").write_text("not config\n")
    return directory


def _dangling(tmp_path: Path) -> Path:
    directory = _good(tmp_path / "config")
    (directory / "routes.yaml").write_text(ROUTES.replace("backend_b", "backend_c"))
    return directory


def _unreadable(tmp_path: Path) -> Path:
    directory = _good(tmp_path / "config")
    (directory / "broken.yaml").write_text("name: [unclosed\n")
    return directory


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "missing"


@pytest.mark.parametrize(
    ("make", "status"), [(_empty, 1), (_dangling, 1), (_unreadable, 1), (_missing, 2)]
)
def test_analyze_fails_on_every_directory_serve_refuses_with_the_same_status(
    make: object, status: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1: a configuration refused; 2: a DIR that is not there is a usage error."""
    assert callable(make)
    directory = make(tmp_path)
    serve = ["serve", str(directory), "--listen", "127.0.0.1:0", "--debounce-ms", "0"]
    assert main(serve) == status
    refused = capsys.readouterr().err
    assert f"cannot serve {directory}" in refused
    assert main(["analyze", str(directory)]) == status
    said = capsys.readouterr()
    assert str(directory) in said.out + said.err


def test_analyze_on_an_empty_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = _empty(tmp_path)
    assert main(["analyze", str(directory)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err == f"xdscore: {directory} holds no resources; serve refuses to serve nothing\n"
    )


# -- stopping ---------------------------------------------------------------------------


def _demo_copy(tmp_path: Path) -> Path:
    directory = tmp_path / "config"
    shutil.copytree(ROOT / "examples" / "demo-config", directory)
    return directory


def _start(directory: Path, *extra: str) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "xdscore",
            "serve",
            str(directory),
            "--listen",
            "127.0.0.1:0",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("xdscore: serving "), process.communicate(timeout=30)
    port = int(line.split(" on ")[1].split(":")[1])
    return process, port


def _stop(process: subprocess.Popen[str], signum: int) -> float:
    started = time.monotonic()
    process.send_signal(signum)
    process.wait(timeout=30)
    return time.monotonic() - started


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("debounce", ["300", "3000"])
def test_serve_stops_at_once_without_clients(signum: int, debounce: str, tmp_path: Path) -> None:
    # The file watcher's quiet window (--debounce-ms) no longer delays the stop.
    process, _port = _start(_demo_copy(tmp_path), "--debounce-ms", debounce)
    try:
        time.sleep(0.3)  # serving: past the start-up, the watcher running
        took = _stop(process, signum)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0, process.stderr.read() if process.stderr else ""
    assert took < STOP_LIMIT, f"stopping took {took:.3f} s"


@pytest.mark.anyio
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_serve_ends_a_client_stream_cleanly_when_stopped(signum: int, tmp_path: Path) -> None:
    process, port = _start(_demo_copy(tmp_path), "--debounce-ms", "0")
    try:
        request = discovery_pb2.DiscoveryRequest(
            type_url=CLUSTER, node=base_pb2.Node(id="cli-test")
        ).SerializeToString()
        async with open_channel("127.0.0.1", port) as channel, channel.stream(ADS) as stream:
            await stream.send(request)
            with anyio.fail_after(10):
                first = await stream.receive()
            assert first is not None
            response = discovery_pb2.DiscoveryResponse.FromString(first)
            assert len(response.resources) == 2
            started = time.monotonic()
            process.send_signal(signum)
            with anyio.fail_after(5):
                ended = await stream.receive()  # the server's trailers, not a reset
            assert ended is None
        await anyio.to_thread.run_sync(process.wait, 10)
        took = time.monotonic() - started
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 0
    assert took < 2 * STOP_LIMIT, f"stopping with a client took {took:.3f} s"
