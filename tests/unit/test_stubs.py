"""The type stubs shipped for the Envoy protobuf modules are what stubs/generate.py writes
from the installed xds-protos (run it again after upgrading xds-protos)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_stubs_are_generated_from_the_installed_protos(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("generate_stubs", ROOT / "stubs" / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        written = module.generate(tmp_path)
    finally:
        del sys.modules[spec.name]
    fresh = {path.relative_to(tmp_path): path.read_text() for path in written}
    committed = {
        path.relative_to(ROOT / "stubs"): path.read_text()
        for path in (ROOT / "stubs").rglob("*")
        if path.is_file() and path.name != "generate.py"
    }
    assert sorted(committed) == sorted(fresh), "run python stubs/generate.py"
    stale = [str(path) for path, text in fresh.items() if committed[path] != text]
    assert not stale, f"stale stubs, run python stubs/generate.py: {stale[:5]}"
