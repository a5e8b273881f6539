"""Reading a record's payload in chunks, with ``pread`` into a reused buffer.

:meth:`Trace.tensor <netparity.trace.reader.Trace.tensor>` memory-maps a payload (no copy: the
right thing for a tensor a caller keeps). Streaming over very large tensors is better served by
this reader: pages touched through a map count as resident memory of the process, so peak RSS
would grow with the trace size, while ``pread`` into one buffer keeps it flat.

Example:
    >>> with open_trace("runs/ref").payload_reader(rec) as rd:      # doctest: +SKIP
    ...     first = rd.read(0, 1024)                                # real values, decoded
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from netparity.dtypes import decode, storage_dtype
from netparity.errors import TraceError
from netparity.trace.schema import Record

if TYPE_CHECKING:
    from netparity.trace.reader import Trace

#: the smallest read buffer, in bytes (reused across reads of one reader)
MIN_BUFFER = 1 << 18


def shard_path(root: Path, rec: Record) -> Path:
    """Where a record's payload shard lives (only :mod:`netparity.trace` knows the layout)."""
    return root / f"rank{rec.rank}" / str(rec.shard)


class PayloadReader:
    """Chunks of one record's payload as real values (bf16/fp8 decoded to float32; complex
    tensors as interleaved real/imaginary parts; bool as uint8)."""

    def __init__(self, trace: Trace, rec: Record):
        if rec.shard is None or rec.offset is None or rec.nbytes is None:
            raise TraceError(f"{rec.key()}: no tensor payload was captured for this record")
        self.rec = rec
        self.dtype = rec.dtype
        self.st = storage_dtype(rec.dtype)
        self.complex = self.st.kind == "c"
        self.item = self.st.itemsize
        p = shard_path(trace.path, rec)
        try:
            self.fd: int | None = os.open(p, os.O_RDONLY)
        except OSError as e:
            raise TraceError(f"{p}: payload shard is missing or unreadable ({e.strerror})") from None
        if os.fstat(self.fd).st_size < rec.offset + rec.nbytes:
            os.close(self.fd)
            self.fd = None
            raise TraceError(f"{p}: truncated payload shard (need byte {rec.offset + rec.nbytes})")
        self._buf = np.empty(0, np.uint8)

    @property
    def count(self) -> int:
        """Number of real values (complex tensors count two per element)."""
        return self.rec.numel * (2 if self.complex else 1)

    def read(self, start: int, n: int) -> np.ndarray:
        """Real values ``start .. start + n`` (a view of the reader's buffer: valid until the
        next read)."""
        if self.fd is None:
            raise TraceError(f"{self.rec.shard}: payload reader is closed")
        assert self.rec.offset is not None
        itemsize = self.item // 2 if self.complex else self.item
        nbytes = n * itemsize
        if self._buf.nbytes < nbytes:
            self._buf = np.empty(max(nbytes, MIN_BUFFER), np.uint8)
        mv = memoryview(self._buf)[:nbytes]  # type: ignore[arg-type]
        got = 0
        pos = self.rec.offset + start * itemsize
        while got < nbytes:
            k = os.preadv(self.fd, [mv[got:]], pos + got)
            if k <= 0:
                raise TraceError(f"{self.rec.shard}: truncated payload shard")
            got += k
        raw = self._buf[:nbytes]
        if self.complex:
            return raw.view(np.float32 if self.item == 8 else np.float64)
        if self.st == np.bool_:
            return raw.view(np.uint8)
        return decode(raw.view(self.st), self.dtype)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> PayloadReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
