"""The event loop a server process runs on: uvloop's where installed, or as asked."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from xdscore.cli import main
from xdscore.server import loop_options


def test_auto_takes_uvloop_where_it_is_installed() -> None:
    assert importlib.util.find_spec("uvloop") is not None  # the test extra brings it
    assert loop_options("auto") == {"use_uvloop": True}
    assert loop_options("uvloop") == {"use_uvloop": True}
    assert loop_options("asyncio") == {"use_uvloop": False}


def test_without_uvloop_auto_is_asyncio_and_uvloop_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "uvloop" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert loop_options("auto") == {"use_uvloop": False}
    with pytest.raises(RuntimeError, match=r"pip install 'xdscore\[uvloop\]'"):
        loop_options("uvloop")


def test_serve_runs_on_the_loop_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def run(args: Any) -> int:
        import asyncio

        seen.append(type(asyncio.get_running_loop()).__module__.split(".")[0])
        return 0

    monkeypatch.setattr("xdscore.cli._serve.run", run)
    assert main(["serve", "--loop", "uvloop", "."]) == 0
    assert main(["serve", "--loop", "asyncio", "."]) == 0
    assert main(["serve", "."]) == 0
    assert seen == ["uvloop", "asyncio", "uvloop"]
