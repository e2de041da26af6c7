"""gRPC's own xDS client, driven line by line over stdin (run by test_grpc_xds_client.py).

Usage: ``python grpc_xds_client_main.py XDS_PORT TARGET METHOD [BOOTSTRAP_FILE]``

The bootstrap goes into ``GRPC_XDS_BOOTSTRAP_CONFIG`` before grpc is imported, so the
client process starts with a clean, known xDS configuration; with ``BOOTSTRAP_FILE``,
``GRPC_XDS_BOOTSTRAP`` names that file instead (XDS_PORT is then unused). Then every line read from
stdin is a command:

* ``call`` makes one unary RPC on ``xds:///TARGET`` and prints ``OK <reply>`` or
  ``ERR <status code> <details>`` on one line;
* ``burst SECONDS`` prints ``BURSTING``, makes RPCs back to back for SECONDS, then prints
  one JSON line: ``{"runs": [[outcome, count], ...], "calls": total}``, where the runs are
  the consecutive outcomes (``OK <reply>`` / ``ERR ...`` as above) in order;
* ``quit`` (or end of input) closes the channel and exits 0.

The process prints ``READY`` once the channel exists. Its stderr is the grpc log: run the
tests with ``GRPC_TRACE=xds_client,xds_resolver GRPC_VERBOSITY=debug`` to trace the client.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

NODE_ID = "grpc-client"
RPC_TIMEOUT = 5.0


def bootstrap(xds_port: int) -> str:
    return json.dumps(
        {
            "xds_servers": [
                {
                    "server_uri": f"127.0.0.1:{xds_port}",
                    "channel_creds": [{"type": "insecure"}],
                    "server_features": ["xds_v3"],
                }
            ],
            "node": {"id": NODE_ID, "locality": {"zone": "z"}},
        }
    )


def say(line: str) -> None:
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


def main() -> int:
    xds_port, target, method = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    os.environ.pop("GRPC_XDS_BOOTSTRAP", None)
    os.environ.pop("GRPC_XDS_BOOTSTRAP_CONFIG", None)
    if len(sys.argv) > 4:
        os.environ["GRPC_XDS_BOOTSTRAP"] = sys.argv[4]
    else:
        os.environ["GRPC_XDS_BOOTSTRAP_CONFIG"] = bootstrap(xds_port)

    import grpc

    with grpc.insecure_channel(f"xds:///{target}") as channel:
        call = channel.unary_unary(method)  # no serializers: bytes in, bytes out
        say("READY")
        for raw in sys.stdin:
            command = raw.strip()
            if command == "quit":
                break
            if command == "call":
                say(once(call))
            elif command.startswith("burst "):
                say("BURSTING")
                say(json.dumps(burst(call, float(command.split()[1]))))
            else:
                say(f"ERR unknown-command {command!r}")
    return 0


def once(call: Any) -> str:
    import grpc

    try:
        reply = call(b"ping", timeout=RPC_TIMEOUT)
    except grpc.RpcError as exc:
        return f"ERR {exc.code().name} {exc.details()}"
    return f"OK {reply.decode()}"


def burst(call: Any, seconds: float) -> dict[str, Any]:
    runs: list[list[Any]] = []
    calls = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        outcome = once(call)
        calls += 1
        if runs and runs[-1][0] == outcome:
            runs[-1][1] += 1
        else:
            runs.append([outcome, 1])
    return {"runs": runs, "calls": calls}


if __name__ == "__main__":
    sys.exit(main())
