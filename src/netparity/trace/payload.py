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

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from netparity import inputs
from netparity.dtypes import DTYPES, decode, storage_dtype
from netparity.errors import TraceError
from netparity.trace.checksum import Running, digest
from netparity.trace.schema import Record

if TYPE_CHECKING:
    from netparity.trace.reader import Trace

#: the smallest read buffer, in bytes (reused across reads of one reader)
MIN_BUFFER = 1 << 18
#: payloads of at least this many bytes are announced to the kernel when their reader opens
#: (``POSIX_FADV_WILLNEED``): on a cold page cache the disk reads the whole payload ahead while
#: the comparison works on its first chunks, instead of a readahead window at a time
WILLNEED_MIN = 1 << 20


def shard_path(root: Path, rec: Record) -> Path:
    """Where a record's payload shard lives (only :mod:`netparity.trace` knows the layout)."""
    return root / f"rank{rec.rank}" / str(rec.shard)


def check_location(rec: Record) -> tuple[int, int]:
    """The record's payload ``(offset, nbytes)``, validated against what the row declares.

    An index row is input like any other: its shard must be a plain file name (no ``/``, no
    ``..``: ``/etc/passwd`` or ``../../x`` would read outside the trace), and offset, length,
    dtype and shape must be integers that agree (``nbytes == numel * itemsize``).

    Raises:
        TraceError: no payload, or a location that is malformed or out of range.
    """
    if rec.shard is None or rec.offset is None or rec.nbytes is None:
        raise TraceError(f"{rec.key()}: no tensor payload was captured for this record")
    name = rec.shard
    where = f"rank{rec.rank} record {rec.seq}"
    if (not isinstance(name, str) or not name.endswith(".safetensors") or name.startswith(".")
            or "/" in name or "\\" in name or "\0" in name):
        raise TraceError(f"{where}: payload shard {name!r} is not a shard file name of this "
                         "trace (corrupt or tampered index)")
    off, n = rec.offset, rec.nbytes
    if type(off) is not int or type(n) is not int or off < 0 or n < 0:
        raise TraceError(f"{where}: invalid payload offset/length {off!r}/{n!r} (corrupt index)")
    if rec.dtype not in DTYPES:
        raise TraceError(f"{where}: unknown dtype {rec.dtype!r} (corrupt index)")
    if not all(type(d) is int and d >= 0 for d in rec.shape):
        raise TraceError(f"{where}: invalid shape {rec.shape!r} (corrupt index)")
    want = math.prod(rec.shape) * storage_dtype(rec.dtype).itemsize
    if n != want:
        raise TraceError(f"{where}: payload length {n} does not match shape {list(rec.shape)} "
                         f"{rec.dtype} ({want} bytes; corrupt index)")
    return off, n


def open_shard(root: Path, rec: Record) -> tuple[int, Path]:
    """Open the shard holding ``rec``'s payload: ``(file descriptor, path)``.

    The shard must resolve inside the trace directory and be a regular file (a FIFO would hang
    a read, a device would never end); it must hold the bytes the row points at. Opened with
    ``O_NONBLOCK`` so that a FIFO is refused instead of waiting for a writer.

    Raises:
        TraceError: a bad location (see :func:`check_location`), a shard outside the trace, a
            special file, a missing or truncated shard.
    """
    off, n = check_location(rec)
    p = shard_path(root, rec)
    fd, size = inputs.open_fd(p, within=root, error=TraceError, tree="the trace", what="payload shard")
    st = os.fstat(fd)
    if st.st_size < off + n:
        os.close(fd)
        raise TraceError(f"{p}: truncated payload shard (need byte {off + n}, has {st.st_size})")
    return fd, p


def shared_shard(trace: Trace, rec: Record) -> tuple[int, Path]:
    """:func:`open_shard` once per shard of an open trace: the descriptor is kept by the trace
    (closed by ``Trace.close``) and shared by its payload readers, so that a comparison of
    thousands of pairs does not resolve, open, stat and close a shard for each. The record's
    location is still checked against the row and the shard's size each time.

    Raises:
        TraceError: as :func:`open_shard`.
    """
    off, n = check_location(rec)
    key = (rec.rank, str(rec.shard))
    got = trace._fds.get(key)
    if got is None:
        fd, p = open_shard(trace.path, rec)
        got = trace._fds.setdefault(key, (fd, p))
        if got[0] != fd:  # another thread opened it meanwhile
            os.close(fd)
    elif os.fstat(got[0]).st_size < off + n:  # (a live writer's shard may have grown)
        raise TraceError(f"{got[1]}: truncated payload shard (need byte {off + n}, has "
                         f"{os.fstat(got[0]).st_size})")
    return got


def verify_checksum(data: np.ndarray, want: tuple[str, int] | None, where: Path,
                    rec: Record) -> None:
    """Compare a payload's checksum with the ``(algorithm, value)`` stored at capture (None:
    a trace from before checksums, not checked). A mismatch is corruption, never a numerical
    difference."""
    if want is None:
        return
    got = digest(want[0], np.ascontiguousarray(data).data)
    if got != want[1]:
        raise _checksum_error(where, rec, want[0])


def _checksum_error(where: Path, rec: Record, algo: str) -> TraceError:
    return TraceError(f"{where}: corrupt payload of record {rec.seq} (rank {rec.rank}): its "
                      f"{algo} checksum differs from the one stored at capture; the shard was "
                      "damaged or swapped")


class PayloadReader:
    """Chunks of one record's payload as real values (bf16/fp8 decoded to float32; complex
    tensors as interleaved real/imaginary parts; bool as uint8)."""

    def __init__(self, trace: Trace, rec: Record):
        fd, self.path = shared_shard(trace, rec)
        self.fd: int | None = fd  # the trace's (shared_shard): not closed by this reader
        self.rec = rec
        self.dtype = rec.dtype
        self.st = storage_dtype(rec.dtype)
        self.complex = self.st.kind == "c"
        self.item = self.st.itemsize
        self._buf = np.empty(0, np.uint8)
        if (rec.nbytes or 0) >= WILLNEED_MIN and hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(fd, rec.offset or 0, rec.nbytes or 0, os.POSIX_FADV_WILLNEED)
            except OSError:  # advice only
                pass
        # the checksum is verified when the payload is read front to back (the streaming
        # comparison's way), once per record and open trace; reads out of order skip it
        self._verified = trace._verified
        key = (rec.rank, rec.seq)
        self._want = None if key in self._verified else trace.payload_checksum(rec)
        self._sum = Running(self._want[0]) if self._want is not None else None
        self._sum_pos = 0 if self._want is not None else -1

    @property
    def count(self) -> int:
        """Number of real values (complex tensors count two per element)."""
        return self.rec.numel * (2 if self.complex else 1)

    def read(self, start: int, n: int) -> np.ndarray:
        """Real values ``start .. start + n`` (a view of the reader's buffer: valid until the
        next read)."""
        raw = self.read_stored(start, n)
        return raw if raw.dtype != self.st else decode(raw, self.dtype)

    def read_stored(self, start: int, n: int) -> np.ndarray:
        """Values ``start .. start + n`` as stored, not decoded: bf16 as ``uint16`` bits, fp8
        as ``uint8`` codes (complex as interleaved real parts, bool as ``uint8``, as
        :meth:`read`). A view of the reader's buffer, valid until the next read; the checksum
        is fed as by :meth:`read` (the comparison's C kernel decodes bf16 itself)."""
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
        if self._sum_pos >= 0:
            self._check_sum(pos - self.rec.offset, raw)
        if self.complex:
            return raw.view(np.float32 if self.item == 8 else np.float64)
        if self.st == np.bool_:
            return raw.view(np.uint8)
        return raw.view(self.st)

    def _check_sum(self, at: int, raw: np.ndarray) -> None:
        if at != self._sum_pos or self._sum is None or self._want is None:
            self._sum_pos = -1  # not the next bytes in order: cannot check incrementally
            return
        self._sum.update(raw.data)
        self._sum_pos += raw.nbytes
        if self._sum_pos == self.rec.nbytes:
            self._sum_pos = -1
            if self._sum.value() != self._want[1]:
                raise _checksum_error(self.path, self.rec, self._want[0])
            self._verified.add((self.rec.rank, self.rec.seq))  # (set.add: atomic, any thread)

    def close(self) -> None:
        self.fd = None

    def __enter__(self) -> PayloadReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
