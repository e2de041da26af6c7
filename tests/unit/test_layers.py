"""The layout contract that import-linter cannot see: what importing a layer loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import xdscore

PACKAGE = Path(xdscore.__file__).parent
IO_LIBRARIES = ("anyio", "grpclib", "h2", "watchfiles", "yaml", "envoy_data_plane", "betterproto2")


def _loaded_after(statement: str) -> set[str]:
    probe = (
        f"import sys, json; {statement}; "
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    return set(json.loads(out))


def test_importing_the_protocol_loads_no_io_library() -> None:
    loaded = _loaded_after("import xdscore.protocol")
    assert "xdscore" in loaded
    assert loaded.isdisjoint(IO_LIBRARIES), sorted(loaded.intersection(IO_LIBRARIES))


def test_importing_the_cache_loads_no_io_library() -> None:
    loaded = _loaded_after("import xdscore.cache")
    assert loaded.isdisjoint(IO_LIBRARIES), sorted(loaded.intersection(IO_LIBRARIES))


def test_the_embedder_names_load_on_first_use() -> None:
    assert _loaded_after("import xdscore").isdisjoint(IO_LIBRARIES)
    assert "grpclib" in _loaded_after("from xdscore import GrpclibTransport")


def test_xdscores_own_http2_server_loads_no_http2_library() -> None:
    """``Http2Transport`` runs on hpack alone: neither h2 nor grpclib (nor grpcio) is loaded
    for it, through ``xdscore`` or ``xdscore.transport``."""
    for statement in (
        "from xdscore import Http2Transport",
        "from xdscore.transport import Http2Transport, ConnectionLimits, server_ssl_context",
    ):
        loaded = _loaded_after(statement)
        assert "hpack" in loaded
        assert loaded.isdisjoint({"h2", "grpclib", "grpc"}), statement


def test_every_transport_name_resolves() -> None:
    import xdscore.transport

    for name in xdscore.transport.__all__:
        assert getattr(xdscore.transport, name) is not None, name
    assert sorted(dir(xdscore.transport)) == sorted(xdscore.transport.__all__)


def test_every_public_name_of_the_package_resolves() -> None:
    for name in xdscore.__all__:
        assert getattr(xdscore, name) is not None, name


def test_the_embedders_face_stays_small() -> None:
    # What an embedder needs; the rest lives in the subpackage of its audience.
    assert len(xdscore.__all__) <= 35, len(xdscore.__all__)


def test_the_package_root_holds_at_most_eight_modules() -> None:
    modules = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(modules) <= 8, modules
