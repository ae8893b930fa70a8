"""Post lists Redis keeps for hours, packed once they stop changing (pure).

The speed layer's newest and top post lists (JSON, trendcore.post_lists) are written plain while they change
and packed with zlib once they stop: a closed hour's are kept for a day. A reader unpacks whatever it gets: a
zlib stream starts with 0x78 at every level, a JSON list with `[`, so plain lists (changing ones, or an older
worker's) read as they are. Author sketches have a packed form of their own (trendcore.hll).
"""

from __future__ import annotations

import zlib

LEVEL = 1
"""zlib's fastest level: a list of 20 generator posts shrinks to 0.52 of its bytes (0.51 at level 6) in about
30 us, paid once a list stops changing (docs/decisions.md)."""


def pack(value: bytes) -> bytes:
    """A list as stored once it stopped changing: zlib-compressed."""
    return zlib.compress(value, LEVEL)


def unpack(blob: bytes) -> bytes:
    """The JSON of a stored list; a list stored plain as it is."""
    return zlib.decompress(blob) if is_packed(blob) else blob


def is_packed(blob: bytes) -> bool:
    """Whether a stored list is packed (zlib's first byte, 0x78; a JSON list starts with `[`)."""
    return blob[:1] == b"\x78"


def packed_if_smaller(value: bytes) -> bytes | None:
    """The packed list when packing shrinks it, else None (a list of a post or two)."""
    packed = pack(value)
    return packed if len(packed) < len(value) else None
