"""xdscore's own HTTP/2 server for gRPC: :class:`Http2Transport`.

It imports no HTTP/2 library (HPACK is ``hpack``'s). Read it in this order:

* :mod:`.state`: every stream state and transition, one table (RFC 9113 section 5.1);
* :mod:`.connection`: one connection, an ``asyncio.Protocol``: frames in, through the
  table, and frames out;
* :mod:`.call`: one gRPC call on one stream, the runtime's byte stream;
* :mod:`.headers`: request header blocks, decoded and checked in one pass;
* :mod:`.wire`: frames and the header blocks the server sends;
* :mod:`.transport`: the transport itself, its handlers and its stop;
* :mod:`.intake`, :mod:`.accept`: reads bounded per loop turn, connections bounded per
  process.
"""

from .transport import Http2Transport

__all__ = ["Http2Transport"]
