"""The compiled build (``make compiled``): which modules it holds, and whether it is stale."""

from __future__ import annotations

import importlib
import tomllib
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def listed() -> list[str]:
    """The modules pyproject.toml says to compile, as dotted names."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        paths = tomllib.load(file)["tool"]["xdscore"]["compiled"]
    return [path.removesuffix(".py").replace("/", ".") for path in paths]


def compiled(module: str) -> bool:
    """Whether Python loads ``module`` from its compiled build."""
    origin = importlib.import_module(module).__file__ or ""
    return origin.endswith(tuple(EXTENSION_SUFFIXES))


def stale_sources() -> list[Path]:
    """The sources of the package newer than its oldest compiled module (none without a
    compiled build)."""
    built = [path.stat().st_mtime for path in (ROOT / "xdscore").rglob("*.so")]
    if not built:
        return []
    oldest = min(built)
    return sorted(p for p in (ROOT / "xdscore").rglob("*.py") if p.stat().st_mtime > oldest)
