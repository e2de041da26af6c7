"""The compiled build is whole: every module pyproject.toml lists is compiled, or none is
(``make test`` sets ``XDSCORE_COMPILED=1``: then every one must be)."""

from __future__ import annotations

import os

from tests.compiled_build import ROOT, compiled, listed


def test_the_listed_modules_are_compiled_all_or_none() -> None:
    modules = listed()
    assert modules, "pyproject.toml lists no module to compile"
    built = {module: compiled(module) for module in modules}
    if os.environ.get("XDSCORE_COMPILED") == "1":
        assert all(built.values()), [m for m, done in built.items() if not done]
    else:
        assert len(set(built.values())) == 1, built


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
    extras = [
        path
        for path in (ROOT / "xdscore").rglob("*.so")
        if str(path.relative_to(ROOT)).split(".")[0].replace("/", ".") not in listed()
    ]
    assert extras == []
