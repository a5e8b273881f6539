"""Checksums of stored payloads: xxh3-64 where the ``xxhash`` package is installed, else CRC-32.

The writer records which algorithm it used in the index (meta key ``payload_checksum``), so a
reader checks each trace with the algorithm it was written with. xxh3 hashes at memory speed
(tens of GB/s on one core); zlib's CRC-32 at about 2 GB/s, which would cost a full-tensor
comparison a quarter of its throughput -- hence the preference.

Values are stored as SQLite integers (signed 64-bit): an xxh3 digest above ``2**63`` is stored
as its two's-complement negative.

Example:
    >>> import numpy as np
    >>> a = np.arange(4, dtype=np.float32)
    >>> r = Running("crc32"); r.update(a.data[:8]); r.update(a.data[8:])
    >>> r.value() == digest("crc32", a.data)
    True
"""

from __future__ import annotations

import importlib
import zlib
from typing import Any

_xxhash: Any
try:
    _xxhash = importlib.import_module("xxhash")
except ImportError:  # optional: CRC-32 then
    _xxhash = None

#: meta key naming the algorithm of a trace's payload checksums
META_KEY = "payload_checksum"


def default_algorithm() -> str:
    """The algorithm new traces use: ``"xxh3_64"`` when ``xxhash`` is installed, else
    ``"crc32"``."""
    return "xxh3_64" if _xxhash is not None else "crc32"


def available(algo: str) -> bool:
    """Whether this installation can compute ``algo`` (an xxh3 trace read without ``xxhash``
    cannot be verified)."""
    return algo == "crc32" or (algo == "xxh3_64" and _xxhash is not None)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def digest(algo: str, buf: Any) -> int:
    """Checksum of a buffer (bytes, memoryview, contiguous array's ``.data``)."""
    if algo == "xxh3_64":
        assert _xxhash is not None
        return _signed(_xxhash.xxh3_64_intdigest(buf))
    return zlib.crc32(buf)


class Running:
    """A checksum fed chunk by chunk (same value as :func:`digest` of the whole)."""

    def __init__(self, algo: str):
        self.algo = algo
        self._h: Any = _xxhash.xxh3_64() if algo == "xxh3_64" and _xxhash is not None else None
        self._crc = 0

    def update(self, buf: Any) -> None:
        if self._h is not None:
            self._h.update(buf)
        else:
            self._crc = zlib.crc32(buf, self._crc)

    def value(self) -> int:
        return _signed(self._h.intdigest()) if self._h is not None else self._crc
