"""Every Python block of the guides in docs/ and of the README runs, as a reader would run it.

Each block runs alone in a new interpreter, in a directory holding the certificate files
the pages name (``server.crt``, ``server.key``, ``ca.crt``, ``clients-ca.crt``). A block
that serves until stopped is marked ``<!-- test: serves -->`` on the line before it: it must
still be running, without a traceback, a few seconds later. One that needs something the
test cannot give (a running etcd) is marked ``<!-- test: skip, REASON -->``.
docs/reference/ holds mkdocstrings directives, not programs, and is not read.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _pytest.mark import ParameterSet

from ..tls_support import CertificateAuthority

DOCS = Path(__file__).resolve().parents[2] / "docs"
SERVES_FOR = 4.0
"""Seconds a block marked ``serves`` must keep running."""
_BLOCK = re.compile(r"(?m)^```python\n(.*?)^```", re.DOTALL)
_MARK = re.compile(r"<!-- test: (serves|skip, [^>]+) -->\s*$")


def _blocks() -> list[ParameterSet]:
    params = []
    for page in [*sorted(DOCS.glob("*.md")), DOCS.parent / "README.md"]:
        text = page.read_text()
        for block in _BLOCK.finditer(text):
            before = text[: block.start()].rstrip("\n").rsplit("\n", 1)[-1]
            mark = _MARK.search(before)
            line = text[: block.start()].count("\n") + 1
            params.append(
                pytest.param(
                    block.group(1),
                    mark.group(1) if mark else "runs",
                    id=f"{page.name}:{line}",
                    marks=[pytest.mark.skip(reason=mark.group(1))]
                    if mark and mark.group(1).startswith("skip")
                    else [],
                )
            )
    return params


def _port_taken(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    ca = CertificateAuthority()
    ca.write(tmp_path, "ca")
    ca.write(tmp_path, "clients-ca")
    ca.server("127.0.0.1").write(tmp_path, "server")
    return tmp_path


def test_the_guides_have_python_blocks() -> None:
    assert len(_blocks()) >= 20


def test_the_proxyless_example_is_the_tutorials_program() -> None:
    """examples/proxyless_grpc.py (the README's quick start runs it) is the program that
    docs/tutorial-proxyless-grpc.md shows and this module runs."""
    found = _BLOCK.search((DOCS / "tutorial-proxyless-grpc.md").read_text())
    assert found is not None
    assert found.group(1) in (DOCS.parent / "examples" / "proxyless_grpc.py").read_text()


@pytest.mark.parametrize(("code", "how"), _blocks())
def test_block_runs(code: str, how: str, workdir: Path) -> None:
    command = [sys.executable, "-c", code]
    if how == "runs":
        done = subprocess.run(
            command, cwd=workdir, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return
    if "18000" in code and _port_taken(18000):
        pytest.skip("the block serves on port 18000, which something else holds")
    process = subprocess.Popen(
        command, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + SERVES_FOR
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.1)
        still_running = process.poll() is None
    finally:
        process.terminate()
        try:
            _out, err = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            _out, err = process.communicate()
    assert still_running, f"it stopped (status {process.returncode}):\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
