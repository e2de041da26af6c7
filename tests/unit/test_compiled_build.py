"""The compiled build is whole: every module pyproject.toml lists is compiled, or none is
(``make test`` sets ``XDSCORE_COMPILED=1``: then every one must be; its pure leg sets
``XDSCORE_PURE=1``: then none may be loaded, compiled modules present or not). What
``xdscore --version`` says of a build, and the switch to the sources."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

from tests.compiled_build import ROOT, built, compiled, listed, tools
from xdscore._build import Build, describe, loaded_build


def _tool_built(tool: Path) -> bool:
    return any(tool.with_suffix(suffix).exists() for suffix in EXTENSION_SUFFIXES)


def test_the_listed_modules_are_compiled_all_or_none() -> None:
    modules = listed()
    assert modules, "pyproject.toml lists no module to compile"
    done = {module: compiled(module) for module in modules}
    if os.environ.get("XDSCORE_PURE") == "1":
        assert not any(done.values()), [m for m, ok in done.items() if ok]
        return
    done.update({str(tool.relative_to(ROOT)): _tool_built(tool) for tool in tools()})
    if os.environ.get("XDSCORE_COMPILED") == "1":
        assert all(done.values()), [m for m, ok in done.items() if not ok]
    else:
        assert len(set(done.values())) == 1, done


def test_the_build_loaded_is_the_one_found_module_by_module() -> None:
    build = loaded_build()
    assert list(build.listed) == listed()
    assert list(build.compiled) == [module for module in listed() if compiled(module)]
    assert build.failed == ()
    assert build.sources_only == (os.environ.get("XDSCORE_PURE") == "1")


_CHILD = """
import json, sys
import xdscore.wire._framing as module
print(json.dumps([module.__file__, "xdscore.wire._framing" in sys.modules]))
"""


@pytest.mark.parametrize("pure", ["1", ""])
def test_xdscore_pure_loads_the_sources_beside_a_compiled_build(pure: str) -> None:
    """In a process of its own, as a user sets it: XDSCORE_PURE=1 passes over compiled
    modules; without it they are loaded where they are built."""
    environment = {**os.environ, "XDSCORE_PURE": pure}
    found = subprocess.run(
        [sys.executable, "-c", _CHILD],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=60,
        check=True,
    )
    origin, loaded = json.loads(found.stdout)
    assert loaded
    have_build = any(path.parent.name == "wire" for path in built())
    if pure == "1" or not have_build:
        assert origin.endswith("_framing.py"), origin
    else:
        assert origin.endswith(tuple(EXTENSION_SUFFIXES)), origin


_LISTED = ("xdscore.wire._codec", "xdscore.wire._framing", "xdscore.server._driver")


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (
            Build(_LISTED, _LISTED, compiler="mypyc (mypy 2.4.1)"),
            "compiled: 3 modules by mypyc (mypy 2.4.1)",
        ),
        (Build(_LISTED, ()), "pure Python"),
        (Build((), ()), "pure Python"),
        (Build(_LISTED, (), sources_only=True), "pure Python: XDSCORE_PURE=1"),
        (
            Build(_LISTED, _LISTED[:1]),
            "partially compiled: 1 of 3 modules; from source: xdscore.wire._framing, "
            "xdscore.server._driver",
        ),
        (
            Build(_LISTED, _LISTED[:2], failed=(("xdscore.server._driver", "no shared library"),)),
            "partially compiled: 2 of 3 modules; from source: xdscore.server._driver; "
            "xdscore.server._driver does not import: no shared library",
        ),
    ],
)
def test_what_version_says_of_a_build(build: Build, said: str) -> None:
    assert describe(build) == said


def test_no_module_outside_the_list_is_compiled() -> None:
    """A compiled module left behind by an older list would be loaded in place of its
    source."""
    expected = {
        *(module.replace(".", "/") for module in listed()),
        *(str(tool.relative_to(ROOT)).removesuffix(".py") for tool in tools()),
    }
    extras = [path for path in built() if str(path.relative_to(ROOT)).split(".")[0] not in expected]
    assert extras == []
