"""The README's quick start works as written: its commands, run by bash, in order.

The block is the ``sh`` block after the README's ``<!-- test: quick start`` mark. Its first
line installs (the test runs in the installed virtualenv instead: its ``bin`` first on
PATH, where ``python``, ``xdscore`` and ``envoy`` are) and its last stops the two servers.
Between them, before the stop, the test waits until the Envoy the block started holds every
type (``xdscore status``), since a loaded machine may start Envoy more slowly than the
block's gRPC program runs. It runs in a directory of its own holding ``examples/`` as the
block names it, with the listener of ``demo-config`` on a port Envoy picks (the README's
10000 may be taken on a shared machine).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.envoy, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- test: quick start"
_BLOCK = re.compile(r"```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)

WAIT_FOR_SYNC = """\
for _ in $(seq 150); do
  xdscore status --server $XDS --format json > status.json
  grep -q edge-1 status.json && ! grep -q '"state": "[^S]' status.json && break
  sleep 0.2
done
"""
"""Until edge-1 is listed with every type SYNCED (or 30 s), leaving the last answer."""


def quick_start() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    found = _BLOCK.search(readme, readme.index(MARK))
    assert found is not None, "no sh block after the quick start mark"
    return found.group(1).strip().splitlines()


def test_the_quick_start_is_install_then_commands_then_stop() -> None:
    lines = quick_start()
    assert lines[0].startswith("pip install . ")
    assert lines[-1].startswith("kill %1 %2")
    assert "app.py" not in "\n".join(lines)
    for line in lines:
        # Ports are picked by the programs (port 0), never fixed where readers collide.
        assert not re.search(r"127\.0\.0\.1:[1-9]", line), line


def test_the_docs_home_page_shows_the_same_quick_start() -> None:
    page = (ROOT / "docs" / "index.md").read_text()
    assert "```sh\n" + "\n".join(quick_start()) + "\n```" in page


def test_the_quick_start_runs(tmp_path: Path) -> None:
    examples = tmp_path / "examples"
    shutil.copytree(ROOT / "examples" / "demo-config", examples / "demo-config")
    shutil.copy(ROOT / "examples" / "proxyless_grpc.py", examples)
    listeners = examples / "demo-config" / "listeners.yaml"
    listeners.write_text(listeners.read_text().replace("port_value: 10000", "port_value: 0"))
    lines = quick_start()
    script = "\n".join(
        [
            "set -euo pipefail",
            "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT",
            *lines[1:-1],
            WAIT_FOR_SYNC,
            lines[-1],
            "wait || true",
        ]
    )
    venv_bin = str(Path(sys.executable).parent)
    environment = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    logs = {name: (tmp_path / name) for name in ("xds.log", "envoy.log")}
    context = "\n".join(
        [done.stdout[-2000:], done.stderr[-2000:]]
        + [f"{name}:\n{path.read_text()[-2000:]}" for name, path in logs.items() if path.exists()]
    )
    assert done.returncode == 0, context
    assert "reply: backend A" in done.stdout, context
    assert "after the change: backend B" in done.stdout, context
    [proxy] = json.loads((tmp_path / "status.json").read_text())
    assert proxy["node"] == "edge-1"
    states = {type_url.rsplit(".", 1)[-1]: t["state"] for type_url, t in proxy["types"].items()}
    assert states == dict.fromkeys(
        ("Cluster", "ClusterLoadAssignment", "Listener", "RouteConfiguration"), "SYNCED"
    )
