"""The compiled build is whole: every module pyproject.toml lists is compiled, or none is
(``make test`` sets ``XDSCORE_COMPILED=1``: then every one must be)."""

from __future__ import annotations

import os
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from tests.compiled_build import ROOT, built, compiled, listed, tools


def _tool_built(tool: Path) -> bool:
    return any(tool.with_suffix(suffix).exists() for suffix in EXTENSION_SUFFIXES)


def test_the_listed_modules_are_compiled_all_or_none() -> None:
    modules = listed()
    assert modules, "pyproject.toml lists no module to compile"
    done = {module: compiled(module) for module in modules}
    done.update({str(tool.relative_to(ROOT)): _tool_built(tool) for tool in tools()})
    if os.environ.get("XDSCORE_COMPILED") == "1":
        assert all(done.values()), [m for m, ok in done.items() if not ok]
    else:
        assert len(set(done.values())) == 1, done


def test_a_compiled_module_keeps_the_sources_behaviour_for_subclasses() -> None:
    """Public classes users extend stay open to subclasses written in Python."""
    from xdscore import XdsServer

    class Named(XdsServer):
        label = "mine"

    assert Named.label == "mine"
    assert issubclass(Named, XdsServer)


def test_no_module_outside_the_list_is_compiled() -> None:
    """A compiled module left behind by an older list would be loaded in place of its
    source."""
    expected = {
        *(module.replace(".", "/") for module in listed()),
        *(str(tool.relative_to(ROOT)).removesuffix(".py") for tool in tools()),
    }
    extras = [path for path in built() if str(path.relative_to(ROOT)).split(".")[0] not in expected]
    assert extras == []
