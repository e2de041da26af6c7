"""gRPC's own xDS client, driven line by line over stdin (run by test_grpc_xds_client.py).

Usage: ``python grpc_xds_client_main.py XDS_PORT TARGET METHOD``

The bootstrap goes into ``GRPC_XDS_BOOTSTRAP_CONFIG`` before grpc is imported, so the
client process starts with a clean, known xDS configuration. Then every line read from
stdin is a command:

* ``call`` makes one unary RPC on ``xds:///TARGET`` and prints ``OK <reply>`` or
  ``ERR <status code> <details>`` on one line;
* ``quit`` (or end of input) closes the channel and exits 0.

The process prints ``READY`` once the channel exists.
"""

from __future__ import annotations

import json
import os
import sys

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
    os.environ["GRPC_XDS_BOOTSTRAP_CONFIG"] = bootstrap(xds_port)

    import grpc

    with grpc.insecure_channel(f"xds:///{target}") as channel:
        call = channel.unary_unary(method)  # no serializers: bytes in, bytes out
        say("READY")
        for raw in sys.stdin:
            command = raw.strip()
            if command == "quit":
                break
            if command != "call":
                say(f"ERR unknown-command {command!r}")
                continue
            try:
                reply = call(b"ping", timeout=RPC_TIMEOUT)
            except grpc.RpcError as exc:
                say(f"ERR {exc.code().name} {exc.details()}")
            else:
                say(f"OK {reply.decode()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
