"""The core install: ``pip install .`` into a new virtualenv, no extras, as a user gets it.

It must import, serve, and print its version with nothing more: no envoy-data-plane
(betterproto2, pydantic), no aetcd, and nothing of xdscore importing grpcio (which
xds-protos installs for its generated stubs). A user's program type-checks with
``mypy --strict`` and no configuration, with typed messages (the stubs in stubs/). The
install takes about 20 s from the local wheels; the size of its site-packages is printed
and bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path

import pytest

from xdscore.wire._messages import make_resource

ROOT = Path(__file__).resolve().parents[2]
MAX_SITE_PACKAGES_MB = 55
"""Bytes of files, in MB. The core install measured 46 (63 MB by du -sh, which counts blocks:
grpcio 19, the envoy protos 19, the type stubs 2); envoy-data-plane and pydantic would add
about 25 more."""

pytestmark = pytest.mark.timeout(300)

CHECK = r"""
import importlib, importlib.util, json, pkgutil, sys
import xdscore
from xdscore.wire._messages import import_all_protos
import_all_protos()
missing = {}
for module in pkgutil.walk_packages(xdscore.__path__, "xdscore."):
    if module.name != "xdscore.__main__":
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as exc:
            missing[module.name] = exc.name

class Message:  # what a betterproto2 message looks like to make_resource
    _betterproto = object()

try:
    xdscore.make_resource(Message())
except ImportError as exc:
    refused = str(exc)
else:
    refused = ""
print(json.dumps({
    "version": xdscore.__version__,
    "present": [name for name in ("envoy_data_plane", "betterproto2", "pydantic", "aetcd")
               if importlib.util.find_spec(name) is not None],
    "grpc_imported": "grpc" in sys.modules,
    "missing": missing,
    "refused": refused,
}))
"""


USER_PROGRAM = """\
from __future__ import annotations

import anyio
from envoy.config.cluster.v3.cluster_pb2 import Cluster
from envoy.config.endpoint.v3.endpoint_pb2 import ClusterLoadAssignment

from xdscore import Http2Transport, Snapshot, SnapshotCache, XdsServer, same_for_all
from xdscore import builders as b


def resources(port: int) -> list[object]:
    cluster: Cluster = b.eds_cluster("backend")
    cluster.connect_timeout.FromMilliseconds(250)
    endpoints: ClusterLoadAssignment = b.load_assignment("backend", [("127.0.0.1", port)])
    address = endpoints.endpoints[0].lb_endpoints[0].endpoint.address.socket_address
    assert address.port_value == port
    return [
        cluster,
        endpoints,
        b.http_listener("listener_0", 10000, "route_0"),
        b.route_configuration("route_0", [("/", "backend")]),
    ]


def report(server: XdsServer) -> list[str]:
    lines = [f"{status.node_id} {status.protocol}" for status in server.status()]
    return lines + [type(stream.machine).__name__ for stream in server.streams()]


async def main() -> None:
    cache = SnapshotCache(group=same_for_all)
    cache.set_snapshot(None, Snapshot(resources(8080)))
    server = XdsServer(cache)
    async with Http2Transport(server) as transport:
        port: int = await transport.start("127.0.0.1", 0)
        print(port, report(server))


anyio.run(main)
"""
"""A user's control plane: mypy --strict with no configuration must accept it."""

MISTAKES = """\
from xdscore import builders as b

cluster = b.eds_cluster("backend")
cluster.name = 5
print(cluster.no_such_field)
"""
"""...and find both mistakes here: the builders return typed messages, not Any."""


def _size_mb(directory: Path) -> float:
    total = sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
    return total / 1e6


def test_the_core_install_imports_serves_and_has_no_extras(tmp_path: Path) -> None:
    target = tmp_path / "venv"
    started = time.monotonic()
    venv.create(target, with_pip=False)
    python = target / "bin" / "python"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env={**os.environ, "PIP_NO_INPUT": "1"},
    )
    took = time.monotonic() - started
    assert installed.returncode == 0, installed.stderr[-3000:]

    checked = subprocess.run(
        [str(python), "-c", CHECK], capture_output=True, text=True, timeout=120, check=False
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    report = json.loads(checked.stdout)
    assert report["present"] == [], f"the core install brings {report['present']}"
    assert not report["grpc_imported"], "a module of xdscore imports grpc"
    # Only the test helpers built on the test extra's libraries need them.
    for module, needs in report["missing"].items():
        assert module.startswith("xdscore.testing."), (module, needs)
        assert needs in ("hypothesis", "pytest"), (module, needs)
    assert "pip install 'xdscore[betterproto]'" in report["refused"]

    script = target / "bin" / "xdscore"
    version = subprocess.run(
        [str(script), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert version.stdout == f"xdscore {report['version']}\n"
    analyzed = subprocess.run(
        [str(script), "analyze", str(ROOT / "examples" / "demo-config")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert analyzed.returncode == 0, analyzed.stderr

    # Serving needs nothing more: start on the demo config, then stop.
    serving = subprocess.Popen(
        [str(script), "serve", str(ROOT / "examples" / "demo-config"), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serving.stdout is not None
        line = serving.stdout.readline()
        assert line.startswith("xdscore: serving "), serving.communicate(timeout=30)
        serving.terminate()
        assert serving.wait(timeout=30) == 0
    finally:
        serving.kill()
        serving.wait()

    # Typed for its users: mypy --strict, no configuration, this install's packages.
    checks = tmp_path / "user"
    checks.mkdir()
    (checks / "mypy.ini").write_text("[mypy]\n")
    (checks / "app.py").write_text(USER_PROGRAM)
    (checks / "mistakes.py").write_text(MISTAKES)
    mypy = [sys.executable, "-m", "mypy", "--strict", "--python-executable", str(python)]
    typed = subprocess.run(
        [*mypy, "app.py"], cwd=checks, capture_output=True, text=True, timeout=180, check=False
    )
    assert typed.returncode == 0, typed.stdout + typed.stderr
    caught = subprocess.run(
        [*mypy, "mistakes.py"], cwd=checks, capture_output=True, text=True, timeout=180
    )
    assert caught.returncode == 1
    assert 'variable has type "str"' in caught.stdout, caught.stdout
    assert '"Cluster" has no attribute "no_such_field"' in caught.stdout, caught.stdout

    (site_packages,) = (target / "lib").glob("python*/site-packages")
    size = _size_mb(site_packages)
    print(f"core install: {took:.1f} s, site-packages {size:.1f} MB")
    assert size < MAX_SITE_PACKAGES_MB


def test_a_betterproto_message_without_the_extra_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "envoy_data_plane", None)
    monkeypatch.setitem(sys.modules, "envoy_data_plane.message_pool", None)

    class Cluster:
        _betterproto = object()

    with pytest.raises(ImportError, match=r"pip install 'xdscore\[betterproto\]'"):
        make_resource(Cluster())
