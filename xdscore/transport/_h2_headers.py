"""Request header blocks, decoded with HPACK, the first of a connection from a memo.

Every connection's HPACK decoder starts from the same state, so its first header block
decodes to the same fields, and leaves the same dynamic table, whenever the bytes are the
same: and a fleet of clients of one build sends the same first block (an xDS client opens
one stream a connection, so that block is usually the only one). The fields of recent first
blocks are kept; a connection whose first block is one of them decodes nothing, and brings
its decoder up to date by decoding that block only if a second one arrives.
"""

from __future__ import annotations

from collections import OrderedDict

from hpack import Decoder

__all__ = ["HeaderDecoder"]

Fields = tuple[tuple[bytes, bytes], ...]

_KEPT_BLOCKS = 64
_KEPT_BLOCK_BYTES = 4096
_first_blocks: OrderedDict[tuple[int, bytes], Fields] = OrderedDict()
"""By (the decoder's header list limit, the block)."""


class HeaderDecoder:
    """One connection's HPACK decoding; :meth:`decode` raises hpack's ``HPACKError``."""

    __slots__ = ("_decoder", "_first", "_limit", "_replay")

    def __init__(self, max_header_list_size: int) -> None:
        self._decoder = Decoder()
        self._decoder.max_header_list_size = max_header_list_size
        self._limit = max_header_list_size
        self._first = True
        self._replay: bytes | None = None
        """A first block taken from the memo: not yet decoded into this decoder's table."""

    def decode(self, block: bytes) -> Fields:
        """The (name, value) fields of the next header block of the connection."""
        decoder = self._decoder
        if self._first:
            self._first = False
            key = (self._limit, block)
            fields = _first_blocks.get(key)
            if fields is not None:
                _first_blocks.move_to_end(key)
                self._replay = block
                return fields
            fields = tuple(decoder.decode(block, raw=True))
            if len(block) <= _KEPT_BLOCK_BYTES:
                _first_blocks[key] = fields
                if len(_first_blocks) > _KEPT_BLOCKS:
                    _first_blocks.popitem(last=False)
            return fields
        if self._replay is not None:
            replay, self._replay = self._replay, None
            decoder.decode(replay, raw=True)
        return tuple(decoder.decode(block, raw=True))
