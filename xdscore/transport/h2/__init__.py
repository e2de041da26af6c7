"""xdscore's own HTTP/2 server for gRPC: [`Http2Transport`][xdscore.Http2Transport].

It imports no HTTP/2 library (HPACK is ``hpack``'s). Read it in this order:

* `.state`: every stream state and transition, one table (RFC 9113 section 5.1);
* `.connection`: one connection, an ``asyncio.Protocol``: frames in, through the
  table, and frames out;
* `.call`: one gRPC call on one stream, the runtime's byte stream;
* `.headers`: request header blocks, decoded and checked in one pass;
* `.wire`: frames and the header blocks the server sends;
* `.transport`: the transport itself, its handlers and its stop;
* `.intake`, `.accept`: reads bounded per loop turn, connections bounded per
  process.
"""

from .transport import Http2Transport

__all__ = ["Http2Transport"]
