"""``xdscore conformance`` as a user meets it: the listing, usage errors, a run that passes
(the benchmark driver on the project's benchmark server, JUnit XML), one that fails (exit
status 1, the evidence and the trace), and TLS."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import anyio
import pytest

from xdscore.cli import main
from xdscore.testing.conformance import CASES, client_ssl_context, run_suite, select
from xdscore.transport import server_ssl_context

from ..tls_support import CertificateAuthority
from ._faults import FAULTS
from ._harness import SETTINGS, serving

ROOT = Path(__file__).resolve().parents[2]
XDSCORE = [sys.executable, "-m", "xdscore", "conformance"]
QUIET = ["--quiet-period", "0.3"]
BENCH = (
    f"{sys.executable} {ROOT}/benchmarks/xds_server.py"
    " --addr {addr} --clusters {clusters} --endpoints {endpoints}"
)


def test_list_names_every_case(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [case.id for case in CASES]


def test_list_with_clauses_and_a_selection(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", "--list", "--verbose", "--only", "delta/nack", "--property"]) == 0
    text = capsys.readouterr().out
    assert "delta/nack/no-resend: " in text
    assert "go-control-plane #962" in text
    assert "sotw/" not in text
    assert main(["conformance", "--list", "--only", "property/", "--property"]) == 0
    assert capsys.readouterr().out.count("property/") == 2


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "give exactly one of HOST:PORT, --server-cmd or --bench-cmd"),
        (["127.0.0.1:1", "--bench-cmd", "x"], "give exactly one of"),
        (["--server-cmd", "serve {addr}"], "must hold {dir} and {addr}"),
        (["--bench-cmd", "x", "--tls"], "the TLS flags go with HOST:PORT"),
        (["127.0.0.1:1", "--tls-cert", "c.pem"], "give both --tls-cert and --tls-key"),
        (["127.0.0.1:1", "--only", "nothing/such"], "no case matches 'nothing/such'"),
        (["127.0.0.1:1", "--config-dir", "d"], "--config-dir goes with --server-cmd"),
    ],
)
def test_usage_errors(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["conformance", *argv]) == 2
    captured = capsys.readouterr()
    assert expected in captured.err
    assert len(captured.err.splitlines()) == 1


def test_the_benchmark_driver_on_the_projects_benchmark_server(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    only = ["sotw/nack/", "delta/cds/", "sotw/eds/missing-name-remembered", "sotw/ttl/"]
    argv = [*XDSCORE, "--bench-cmd", BENCH]
    argv += [f"--only={pattern}" for pattern in only] + ["--junit", str(junit)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "✔ delta/cds/removal-on-delete" in done.stdout
    assert "could not give one: the benchmark protocol cannot give a resource a TTL" in done.stdout
    cases = ElementTree.parse(junit).getroot().findall("testsuite/testcase")
    assert len(cases) == len(select(only))
    assert not ElementTree.parse(junit).getroot().findall(".//failure")


@pytest.mark.anyio
async def test_a_failing_case_exits_1_with_its_evidence_and_trace(tmp_path: Path) -> None:
    junit = tmp_path / "report.xml"
    async with serving(fault=FAULTS["sotw/nack/no-resend"]) as driver:
        done = await anyio.run_process(
            [
                *XDSCORE,
                f"127.0.0.1:{driver.port}",
                "--only",
                "sotw/nack/",
                *QUIET,
                "--junit",
                str(junit),
            ],
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 1, out + done.stderr.decode()
    assert "✘ sotw/nack/no-resend" in out
    assert "was NACKed and nothing changed, yet the server sent a CDS response" in out
    assert "NACK(13: rejected by the xdscore conformance suite" in out  # the trace
    assert "- sotw/nack/next-change-delivered" in out  # passive: skipped
    assert "skipped: the case needs the configuration changed" in out
    assert "failed: sotw/nack/no-resend" in out
    (failure,) = ElementTree.parse(junit).getroot().findall(".//failure")
    assert "yet the server sent" in failure.get("message", "")


@pytest.mark.anyio
@pytest.mark.parametrize("transport", ["http2", "grpclib"])
async def test_over_mutual_tls(transport: str, tmp_path: Path) -> None:
    authority = CertificateAuthority()
    server = authority.server().write(tmp_path, "server")
    client = authority.client("spiffe://test/conformance").write(tmp_path, "client")
    ca = authority.write(tmp_path)
    server_tls = server_ssl_context(server.cert, server.key, client_ca=ca)
    client_tls = client_ssl_context(
        ca_file=str(ca), cert_file=str(client.cert), key_file=str(client.key)
    )
    tls = ["--tls-ca", str(ca), "--tls-cert", str(client.cert), "--tls-key", str(client.key)]
    async with serving(transport, server_tls=server_tls, client_tls=client_tls) as driver:
        report = await run_suite(
            driver, cases=select(["sotw/ack/", "delta/ack/"]), settings=SETTINGS
        )
        assert report.count("passed") == 2, [r.detail for r in report.results]
        done = await anyio.run_process(
            [*XDSCORE, f"127.0.0.1:{driver.port}", "--only", "delta/ack/silence", *tls],
            check=False,
        )
    assert done.returncode == 0, done.stdout.decode() + done.stderr.decode()
    assert "1 cases, 1 passed" in done.stdout.decode()
