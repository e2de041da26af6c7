"""gRPC xDS clients run as subprocesses that take one command a line on stdin and answer on
stdout (``grpc_xds_client_main.py`` for grpcio, ``node/xds_client.js`` for Node.js): the
process, its log, and how it is started, stopped and always reaped."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TypeVar

import anyio

__all__ = ["ClientProcess", "running", "start"]


class ClientProcess:
    """A client subprocess whose stderr goes to the file ``stderr``."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path) -> None:
        self.process = process
        self.stderr = stderr

    def log_tail(self, lines: int = 60) -> str:
        text = self.stderr.read_text(errors="replace") if self.stderr.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    async def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        await self.process.stdin.drain()

    async def read_line(self, timeout: float) -> str:
        assert self.process.stdout is not None
        with anyio.fail_after(timeout):
            raw = await self.process.stdout.readline()
        if not raw:
            code = await self.process.wait()
            raise AssertionError(f"the client exited ({code}):\n{self.log_tail()}")
        return raw.decode().rstrip("\n")


Client = TypeVar("Client", bound=ClientProcess)


async def start(
    args: list[str], *, stderr: Path, env: dict[str, str], cwd: Path | None = None
) -> asyncio.subprocess.Process:
    """``args`` with pipes for stdin and stdout, and stderr into the file ``stderr``."""
    with stderr.open("wb") as log:
        return await asyncio.create_subprocess_exec(
            *args,
            cwd=cwd,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=env,
        )


@asynccontextmanager
async def running(client: Client) -> AsyncIterator[Client]:
    """``client`` once it printed ``READY``; on exit, ``quit`` and an exit status of 0 are
    expected. Whatever happens, the process is reaped (killed if it does not quit)."""
    process = client.process
    try:
        assert await client.read_line(timeout=20) == "READY"
        yield client
        await client.send("quit")
        with anyio.fail_after(10):
            code = await process.wait()
        assert code == 0, f"the client exited with {code}:\n{client.log_tail()}"
    finally:
        with anyio.CancelScope(shield=True):
            if process.returncode is None:
                with contextlib.suppress(OSError):  # it may be gone already
                    assert process.stdin is not None
                    process.stdin.close()
                with anyio.move_on_after(5):
                    await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
