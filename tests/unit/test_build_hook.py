"""The wheel's build hook (hatch_build.py) decides without compiling anything here: what it
adds to a compiled wheel, the one line it says when it falls back to the sources, when
``XDSCORE_COMPILED=1`` makes that an error, and what it asks pip to install. The compile
itself is run by tests/integration/test_core_install.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import hatch_build
from hatch_build import CompiledWheel
from tests.compiled_build import ROOT, listed

SUFFIX = ".cpython-311-x86_64-linux-gnu.so"


def _hook(config: dict[str, Any] | None = None) -> CompiledWheel:
    metadata = type("Metadata", (), {"core": type("Core", (), {"dependencies": ["anyio>=4"]})})
    return CompiledWheel(str(ROOT), config or {}, None, metadata, "", "wheel")


def _build_data() -> dict[str, Any]:
    return {"force_include": {}, "pure_python": True, "infer_tag": False}


@pytest.fixture
def switches(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No build switch set, and a compiler present (whatever this machine has)."""
    monkeypatch.delenv("XDSCORE_PURE", raising=False)
    monkeypatch.delenv("XDSCORE_COMPILED", raising=False)
    monkeypatch.setattr(hatch_build, "compiler_problem", lambda: None)
    return monkeypatch


def _compiled_into(lib: Path, sources: list[str]) -> list[Path]:
    """What mypyc leaves under ``lib``: a shared library and a module for each source."""
    built = [lib / f"abc__mypyc{SUFFIX}"]
    built += [lib / (source.removesuffix(".py") + SUFFIX) for source in sources]
    for path in built:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
    return built


def test_a_compiled_wheel_holds_every_module_built_and_the_record(
    switches: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def compile_modules(sources: list[str], *, build: Path, **_: object) -> list[Path]:
        return _compiled_into(build / "lib", sources)

    switches.setattr(hatch_build, "compile_modules", compile_modules)
    hook, data = _hook(), _build_data()
    hook.initialize("standard", data)
    assert data["pure_python"] is False
    assert data["infer_tag"] is True
    included = data["force_include"]
    expected = {f"abc__mypyc{SUFFIX}", hatch_build.RECORD}
    expected |= {name.replace(".", "/") + SUFFIX for name in listed()}
    assert set(included.values()) == expected
    (record,) = [source for source, target in included.items() if target == hatch_build.RECORD]
    assert json.loads(Path(record).read_text())["compiled"] == listed()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"xdscore: compiled {len(listed())} modules with mypyc (mypy ")
    hook.finalize("standard", data, "")
    assert not Path(record).exists()


def test_a_compile_that_fails_leaves_the_wheel_of_sources_and_says_why(
    switches: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def compile_modules(*_: object, **__: object) -> list[Path]:
        raise SystemExit(1)  # as mypyc does after printing mypy's errors

    switches.setattr(hatch_build, "compile_modules", compile_modules)
    data = _build_data()
    _hook().initialize("standard", data)
    assert data == _build_data()
    assert capsys.readouterr().err.splitlines() == [
        "xdscore: building the pure-Python wheel: the mypyc compile failed "
        "(SystemExit: mypy's errors are above)"
    ]
    switches.setenv("XDSCORE_COMPILED", "1")
    with pytest.raises(SystemExit):
        _hook().initialize("standard", _build_data())


def test_a_module_mypyc_did_not_build_fails_the_build(switches: pytest.MonkeyPatch) -> None:
    def compile_modules(sources: list[str], *, build: Path, **_: object) -> list[Path]:
        return _compiled_into(build / "lib", sources[1:])

    switches.setattr(hatch_build, "compile_modules", compile_modules)
    with pytest.raises(RuntimeError, match=r"no extension module for xdscore/"):
        _hook().initialize("standard", _build_data())


def test_without_a_compiler_nothing_more_is_installed_and_one_line_says_why(
    switches: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    hook = _hook({"compile-requires": ["mypy==2.4.1"]})
    assert hook.dependencies() == ["mypy==2.4.1", "anyio>=4"]
    switches.setattr(hatch_build, "compiler_problem", lambda: "no C compiler here (cc: none)")
    assert hook.dependencies() == []
    data = _build_data()
    hook.initialize("standard", data)
    assert data == _build_data()
    assert capsys.readouterr().err.splitlines() == [
        "xdscore: building the pure-Python wheel: no C compiler here (cc: none)"
    ]
    switches.setenv("XDSCORE_COMPILED", "1")
    with pytest.raises(RuntimeError, match=r"XDSCORE_COMPILED=1 is set, and no C compiler"):
        hook.initialize("standard", _build_data())


def test_xdscore_pure_asks_for_nothing_and_compiles_nothing(
    switches: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    switches.setenv("XDSCORE_PURE", "1")
    switches.setenv("XDSCORE_COMPILED", "1")  # the request for the sources wins
    hook = _hook({"compile-requires": ["mypy==2.4.1"]})
    assert hook.dependencies() == []
    data = _build_data()
    hook.initialize("standard", data)
    assert data == _build_data()
    assert capsys.readouterr().err.splitlines() == [
        "xdscore: building the pure-Python wheel: XDSCORE_PURE=1 is set"
    ]


def test_an_editable_install_compiles_nothing(
    switches: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    switches.setattr(hatch_build, "compile_modules", pytest.fail)
    data = _build_data()
    _hook().initialize("editable", data)
    assert data == _build_data()
    assert capsys.readouterr().err == ""


def test_the_compiler_probe_finds_a_missing_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    said = hatch_build.compiler_problem()
    assert said is not None
    assert said.startswith("no C compiler here can build a Python extension (")
    assert "/nonexistent/cc" in said
