"""The installs a user gets: the sdist, the compiled wheel built from it, and the pure one.

``python -m build`` makes the sdist and, from it, the wheel, as a user's ``pip install`` of
the sdist does: ``hatch_build.py`` compiles the modules pyproject.toml lists with mypyc
(about 3 minutes here; once for this module, every test shares the build, and under ``make
test`` it is the build ``make compiled`` made with the same command). The compiled
wheel must hold an extension module for each listed module and nothing else compiled, and in
a new virtualenv those are what Python loads and what ``xdscore --version`` reports.
``XDSCORE_PURE=1`` builds the wheel of sources alone (any platform), which imports and
serves; without a C compiler the build falls back to it, saying why in one line.

The core install (that compiled wheel, no extras) must import, serve, and print its version
with nothing more: no envoy-data-plane (betterproto2, pydantic), no aetcd, and nothing of
xdscore importing grpcio (which xds-protos installs for its generated stubs). A user's
program type-checks with ``mypy --strict`` and no configuration, with typed messages (the
stubs in stubs/). The install takes about 20 s from the local wheels; the size of its
site-packages is printed and bounded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import venv
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from tests.compiled_build import listed
from xdscore.wire._messages import make_resource

ROOT = Path(__file__).resolve().parents[2]
MAX_SITE_PACKAGES_MB = 62
"""Bytes of files, in MB. The core install measured 53 with the compiled build's 7 MB of
extension modules (46 of sources alone; 63 MB by du -sh, which counts blocks: grpcio 19, the
envoy protos 19, the type stubs 2); envoy-data-plane and pydantic would add about 25 more."""

BUILD_SECONDS = 1200
"""The compiled wheel takes about 3 minutes on this machine; four times that under load."""

pytestmark = pytest.mark.timeout(BUILD_SECONDS + 300)

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
    "file": xdscore.__file__,
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


LOADED = r"""
import importlib, json, sys
found = {}
for name in json.loads(sys.argv[1]):
    spec = importlib.import_module(name).__spec__
    found[name] = [type(spec.loader).__name__, spec.origin]
print(json.dumps(found))
"""
"""Which loader Python took each listed module from, and which file."""


@dataclass(frozen=True)
class Built:
    sdist: Path
    compiled: Path
    pure: Path
    said: str
    """What ``python -m build`` printed (the build hook's lines among it)."""


def _environment(**settings: str) -> dict[str, str]:
    """This environment without the build switches, then ``settings``."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in ("XDSCORE_PURE", "XDSCORE_COMPILED")
    }
    return {**environment, "PIP_NO_INPUT": "1", **settings}


def _run(command: list[str], env: Mapping[str, str] | None = None, timeout: float = 240) -> str:
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, check=False, env=env
    )
    assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The sdist and the compiled wheel from it (``python -m build``, which must compile:
    XDSCORE_COMPILED=1), and the wheel of sources from the same sdist (XDSCORE_PURE=1).
    ``make test`` passes XDSCORE_DIST, where ``make compiled`` built the first two with the
    same command: they are taken from there when they are newer than every source."""
    out = tmp_path_factory.mktemp("dist")
    dist = os.environ.get("XDSCORE_DIST")
    reused = _fresh_build(ROOT / dist) if dist else None
    if reused is not None:
        sdist, compiled, said = reused
        print(f"the sdist and the compiled wheel from {sdist.parent} (make compiled)")
    else:
        started = time.monotonic()
        said = _run(
            [sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)],
            env=_environment(XDSCORE_COMPILED="1"),
            timeout=BUILD_SECONDS,
        )
        took = time.monotonic() - started
        print(f"python -m build (the sdist, then the compiled wheel): {took:.0f} s")
        (sdist,) = out.glob("*.tar.gz")
        (compiled,) = out.glob("*.whl")
    pure = _wheel_of(sdist, out / "pure", _environment(XDSCORE_PURE="1"))[0]
    return Built(sdist=sdist, compiled=compiled, pure=pure, said=said)


def _fresh_build(dist: Path) -> tuple[Path, Path, str] | None:
    """The sdist, wheel and build log ``make compiled`` left in ``dist``, if the sdist is
    newer than every source of the package, its stubs and its build."""
    sdists, wheels, log = list(dist.glob("*.tar.gz")), list(dist.glob("*.whl")), dist / "build.log"
    if len(sdists) != 1 or len(wheels) != 1 or not log.is_file():
        return None
    sources = [
        *(
            path
            for path in (ROOT / "xdscore").rglob("*")
            if path.suffix in (".py", ".pyi", ".typed")
        ),
        *(ROOT / "stubs").rglob("*.pyi"),
        ROOT / "pyproject.toml",
        ROOT / "hatch_build.py",
    ]
    built_at = sdists[0].stat().st_mtime
    if any(path.stat().st_mtime > built_at for path in sources):
        return None
    return sdists[0], wheels[0], log.read_text()


def _wheel_of(sdist: Path, out: Path, env: Mapping[str, str]) -> tuple[Path, str]:
    """``pip wheel`` of the sdist (verbose: the build hook's lines are in what it says)."""
    command = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(out), str(sdist)]
    said = _run(command, env=env)
    (wheel,) = out.glob("*.whl")
    return wheel, said


def _install(wheel: Path, target: Path) -> Path:
    """A new virtualenv with ``wheel`` and its dependencies; its python."""
    venv.create(target, with_pip=False)
    python = target / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", str(wheel)],
        env=_environment(),
    )
    return python


@pytest.fixture(scope="module")
def installed(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The core install: the compiled wheel in a new virtualenv, no extras; its python."""
    started = time.monotonic()
    python = _install(built.compiled, tmp_path_factory.mktemp("core") / "venv")
    print(f"core install: {time.monotonic() - started:.1f} s")
    return python


def _loaded(python: Path, cwd: Path, **settings: str) -> dict[str, tuple[str, str]]:
    """Which loader and file each listed module comes from, in a process of ``python``
    started away from the clone (so that the install is what it imports)."""
    said = subprocess.run(
        [str(python), "-c", LOADED, json.dumps(listed())],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        cwd=cwd,
        env=_environment(**settings),
    )
    return {name: (loader, origin) for name, (loader, origin) in json.loads(said.stdout).items()}


def _version(python: Path, cwd: Path, **settings: str) -> str:
    script = python.parent / "xdscore"
    return subprocess.run(
        [str(script), "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=cwd,
        env=_environment(**settings),
    ).stdout


def _serves(python: Path, cwd: Path) -> None:
    """``xdscore serve`` of the demo config starts, then stops on SIGTERM with status 0."""
    serving = subprocess.Popen(
        [
            str(python.parent / "xdscore"),
            "serve",
            str(ROOT / "examples" / "demo-config"),
            "--listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=_environment(),
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


def _size_mb(directory: Path) -> float:
    total = sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
    return total / 1e6


def test_the_sdist_holds_the_sources_and_the_build_hook(built: Built) -> None:
    import tarfile

    with tarfile.open(built.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"pyproject.toml", "hatch_build.py", "xdscore/wire/_framing.py"} <= names
    assert not [name for name in names if name.endswith((".so", ".pyd"))]


def test_the_wheel_from_the_sdist_holds_every_listed_module_compiled(built: Built) -> None:
    suffix = EXTENSION_SUFFIXES[0]  # this interpreter built the wheel
    with zipfile.ZipFile(built.compiled) as wheel:
        names = set(wheel.namelist())
        record = json.loads(wheel.read("xdscore/_build.json"))
        (info,) = {name.split("/")[0] for name in names if ".dist-info/" in name}
        metadata = wheel.read(f"{info}/WHEEL").decode()
    assert not built.compiled.name.endswith("-none-any.whl"), built.compiled.name
    assert "Root-Is-Purelib: false" in metadata
    modules = [name.replace(".", "/") for name in listed()]
    shared = [name for name in names if "/" not in name and name.endswith(f"__mypyc{suffix}")]
    assert len(shared) == 1, shared
    compiled = {name for name in names if name.endswith(tuple(EXTENSION_SUFFIXES))}
    assert compiled == {*(module + suffix for module in modules), *shared}
    assert all(f"{module}.py" in names for module in modules)  # the sources stay beside them
    assert record["compiled"] == listed()
    assert record["compiler"].startswith("mypyc (mypy ")
    (line,) = [
        line.strip() for line in built.said.splitlines() if line.strip().startswith("xdscore: ")
    ]
    assert line.startswith(f"xdscore: compiled {len(modules)} modules with mypyc"), line
    print(line)


def test_the_installed_compiled_wheel_is_what_python_loads(installed: Path) -> None:
    away = installed.parent.parent
    site = str(away)
    loaded = _loaded(installed, away)
    assert sorted(loaded) == sorted(listed())
    for name, (loader, origin) in loaded.items():
        assert loader == "ExtensionFileLoader", (name, loader, origin)
        assert origin.startswith(site), origin
        assert origin.endswith(tuple(EXTENSION_SUFFIXES)), origin
    version = _version(installed, away)
    assert f" (compiled: {len(listed())} modules by mypyc (mypy " in version, version
    assert version.endswith("))\n"), version
    # XDSCORE_PURE=1 passes over the compiled modules of the same install.
    for name, (loader, origin) in _loaded(installed, away, XDSCORE_PURE="1").items():
        assert loader == "SourceFileLoader", (name, loader, origin)
        assert origin.startswith(site), origin
        assert origin.endswith(".py"), origin
    assert _version(installed, away, XDSCORE_PURE="1").endswith(" (pure Python: XDSCORE_PURE=1)\n")


def test_the_pure_wheel_installs_imports_and_serves(built: Built, tmp_path: Path) -> None:
    assert built.pure.name.endswith("-py3-none-any.whl"), built.pure.name
    with zipfile.ZipFile(built.pure) as wheel:
        names = wheel.namelist()
    assert not [name for name in names if name.endswith((".so", ".pyd", "_build.json"))]
    python = _install(built.pure, tmp_path / "venv")
    for name, (loader, origin) in _loaded(python, tmp_path).items():
        assert loader == "SourceFileLoader", (name, loader, origin)
        assert origin.startswith(str(tmp_path / "venv")), origin
    assert _version(python, tmp_path).endswith(" (pure Python)\n")
    _serves(python, tmp_path)


def test_without_a_c_compiler_the_wheel_is_pure_and_says_why(built: Built, tmp_path: Path) -> None:
    wheel, said = _wheel_of(built.sdist, tmp_path, _environment(CC=str(tmp_path / "no-cc")))
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    lines = [line.strip() for line in said.splitlines() if line.strip().startswith("xdscore: ")]
    assert len(lines) == 1, lines
    assert (
        "xdscore: building the pure-Python wheel: no C compiler here can build a Python "
        in (lines[0])
    )
    assert "No such file or directory" in lines[0], lines[0]
    # With XDSCORE_COMPILED=1 the same build fails instead.
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-w",
            str(tmp_path / "no"),
            str(built.sdist),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=_environment(CC=str(tmp_path / "no-cc"), XDSCORE_COMPILED="1"),
    )
    assert refused.returncode != 0
    assert "XDSCORE_COMPILED=1" in refused.stdout + refused.stderr


def test_the_core_install_imports_serves_and_has_no_extras(installed: Path, tmp_path: Path) -> None:
    python = installed
    target = python.parent.parent
    checked = subprocess.run(
        [str(python), "-c", CHECK],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=tmp_path,
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    report = json.loads(checked.stdout)
    assert report["file"].startswith(str(target)), report["file"]
    assert report["present"] == [], f"the core install brings {report['present']}"
    assert not report["grpc_imported"], "a module of xdscore imports grpc"
    # Only the test helpers built on the test extra's libraries need them.
    for module, needs in report["missing"].items():
        assert module.startswith("xdscore.testing."), (module, needs)
        assert needs in ("hypothesis", "pytest"), (module, needs)
    assert "pip install 'xdscore[betterproto]'" in report["refused"]

    assert _version(python, tmp_path).startswith(f"xdscore {report['version']} (compiled: ")
    script = python.parent / "xdscore"
    analyzed = subprocess.run(
        [str(script), "analyze", str(ROOT / "examples" / "demo-config")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert analyzed.returncode == 0, analyzed.stderr

    # Serving needs nothing more: start on the demo config, then stop.
    _serves(python, tmp_path)

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
    print(f"core install: site-packages {size:.1f} MB")
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
