"""Loopback networking helpers: free ports, a tiny HTTP backend and an HTTP client."""

from __future__ import annotations

import http.client
import http.server
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import anyio.to_thread

__all__ = ["HttpBackend", "free_port", "http_get"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (bind port 0, then release)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class HttpBackend:
    """An HTTP server on loopback answering every GET with ``body`` (status 200).

    Runs the standard library's threading server on a background thread; use it as a
    context manager. ``requests`` counts what it answered.
    """

    def __init__(self, body: str, *, host: str = "127.0.0.1", port: int = 0) -> None:
        backend = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                payload = backend.body.encode()
                backend.requests += 1
                self.send_response(200)
                self.send_header("content-type", "text/plain")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                return

        self.body = body
        self.requests = 0
        self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> HttpBackend:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def _connection(host: str, port: int, timeout: float) -> Iterator[http.client.HTTPConnection]:
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        yield connection
    finally:
        connection.close()


async def http_get(
    host: str, port: int, path: str = "/", *, timeout: float = 5.0
) -> tuple[int, dict[str, str], str]:
    """GET ``path``; returns (status, lower-cased headers, body). Raises ``OSError``."""

    def fetch() -> tuple[int, dict[str, str], str]:
        with _connection(host, port, timeout) as connection:
            connection.request("GET", path)
            response = connection.getresponse()
            body = response.read().decode(errors="replace")
            headers = {key.lower(): value for key, value in response.getheaders()}
            return response.status, headers, body

    return await anyio.to_thread.run_sync(fetch)
