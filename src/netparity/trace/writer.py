"""Trace writer: the training thread enqueues, a background thread writes.

Layout of one rank (see README "Trace format")::

    run_dir/manifest.json               run-wide facts (schema_version first)
    run_dir/rank0/rank.json             this process's facts (host, pid, device)
    run_dir/rank0/index.sqlite          one row per record, WAL journal, committed in batches
    run_dir/rank0/tensors-00000.safetensors, ...   payload shards rolled by size

Why this shape:

* **Crash safety.** Payload bytes are written to the shard *before* the index rows that point at
  them are committed, and the index stores absolute byte offsets. A process killed at any moment
  therefore leaves every committed row readable; rows of the last uncommitted batch are lost, never
  half-written. No fsync is needed for that (the page cache survives a killed process); a machine
  crash may lose the tail, like any buffered log. Rows are inserted into the open transaction as
  they arrive and only the commit waits for the batch: uncommitted rows are invisible to
  readers and to recovery alike, and a flush costs one commit instead of a batch of inserts.
* **Streaming shards that are still safetensors files.** Each shard reserves a fixed header region
  (JSON padded with spaces, which the safetensors format allows) and tensors are appended after it
  without holding a shard in memory. The header is rewritten when a shard is rolled and when the
  writer is flushed or closed, so a cleanly closed shard opens with the ``safetensors`` library. A
  shard rolls when its data passes ``shard_bytes`` or its header would overflow.
* **Bounded memory.** The queue is bounded by the bytes of pending payloads; ``add`` blocks
  (back-pressure) when the writer falls behind instead of growing without limit.

Example:
    >>> import numpy as np, tempfile
    >>> from netparity.trace import Record, TraceWriter, open_trace
    >>> d = tempfile.mkdtemp()
    >>> with TraceWriter(d, manifest={"framework": "numpy"}) as w:
    ...     w.add(Record(kind="custom", op="x", dtype="float32", shape=(2,)),
    ...           payload=np.array([1.0, 2.0], dtype=np.float32))
    >>> open_trace(d).tensor(open_trace(d).records()[0]).tolist()
    [1.0, 2.0]
"""

from __future__ import annotations

import json
import os
import queue
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from netparity.dtypes import DTYPES, storage_dtype
from netparity.errors import NetparityError, TraceError
from netparity.stats import content_hash
from netparity.trace import checksum
from netparity.trace.claim import claim
from netparity.trace.schema import (
    CREATE_SQL,
    INSERT_CHECKSUM_SQL,
    INSERT_SQL,
    SCHEMA_VERSION,
    Record,
    record_to_row,
)

HEADER_RESERVE = 1 << 20  # bytes reserved for each shard's JSON header
_STOP = object()
_FLUSH = object()

Payload = np.ndarray | Callable[[], np.ndarray]


def netparity_version() -> str:
    try:
        from importlib.metadata import version

        return version("netparity")
    except Exception:  # running from a source tree without installation
        return "0+unknown"


def build_manifest(**facts: Any) -> dict[str, Any]:
    """Run-wide manifest: schema version and process facts, plus what the adapter knows.

    Adapters pass ``framework``, ``framework_version``, ``device``, ``precision`` (dict of flags),
    ``seeds``, ``world_size`` and anything else worth keeping.
    """
    m: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "netparity_version": netparity_version(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": list(sys.argv),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "world_size": 1,
    }
    m.update({k: v for k, v in facts.items() if v is not None})
    return m


def _atomic_write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=False, default=str))
    os.replace(tmp, path)


class _Shard:
    """One safetensors file being appended to."""

    def __init__(self, path: Path):
        self.path = path
        self.f = open(path, "wb")  # noqa: SIM115 - closed in close()
        self.f.write(b"\0" * (8 + HEADER_RESERVE))
        self.entries: dict[str, dict[str, Any]] = {}
        self.data_bytes = 0
        self.header_bytes = 2  # "{}"
        self.dirty = True

    def fits_header(self, extra: int) -> bool:
        return self.header_bytes + extra + 64 < HEADER_RESERVE

    def append(self, key: str, tag: str, shape: tuple[int, ...], buf: memoryview) -> int:
        offset = 8 + HEADER_RESERVE + self.data_bytes
        n = buf.nbytes
        if n:
            self.f.write(buf)
        self.entries[key] = {
            "dtype": tag,
            "shape": list(shape),
            "data_offsets": [self.data_bytes, self.data_bytes + n],
        }
        self.header_bytes += len(key) + 80
        self.data_bytes += n
        self.dirty = True
        return offset

    def write_header(self) -> None:
        if not self.dirty:
            return
        self.f.flush()
        header = json.dumps(
            {"__metadata__": {"format": "netparity"}, **self.entries}, separators=(",", ":")
        ).encode()
        if len(header) > HEADER_RESERVE:  # cannot happen: fits_header keeps a margin
            raise TraceError(f"shard header overflow in {self.path}")
        header = header + b" " * (HEADER_RESERVE - len(header))
        with open(self.path, "r+b") as g:
            g.write(len(header).to_bytes(8, "little"))
            g.write(header)
        self.dirty = False

    def flush(self) -> None:
        self.f.flush()

    def close(self) -> None:
        self.write_header()
        self.f.close()


class TraceWriter:
    """Writes one rank of a trace. Thread-safe ``add``; all I/O on a background thread.

    Args:
        run_dir: the trace directory (created if missing).
        rank: this process's rank; records go to ``run_dir/rank{rank}/``.
        manifest: run-wide facts (see :func:`build_manifest`); written to ``manifest.json`` by rank
            0, or by any rank when none exists yet.
        shard_bytes: roll payload shards past this size.
        batch_records: commit the index every this many records (also every ``commit_seconds``).
        max_queue_bytes: pending payload bytes above which ``add`` blocks.
        overwrite: replace an existing trace in ``run_dir`` instead of refusing; the old one is
            moved aside and deleted only when this writer closes cleanly (:mod:`.claim`).
        rank_info: per-process facts saved in ``rank.json``.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        rank: int = 0,
        manifest: dict[str, Any] | None = None,
        shard_bytes: int = 1 << 30,
        batch_records: int = 2048,
        commit_seconds: float = 0.5,
        max_queue_bytes: int = 256 << 20,
        overwrite: bool = False,
        rank_info: dict[str, Any] | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.rank = rank
        self.rank_dir = self.run_dir / f"rank{rank}"
        # one writer per trace: lock, refuse foreign files, set an old trace aside (claim.py)
        self._claim = claim(self.run_dir, rank, overwrite=overwrite)
        try:
            self.run_id = self._claim.run_id
            self.rank_dir.mkdir()
            self.manifest = build_manifest(**(manifest or {}))
            self.manifest["run_id"] = self.run_id
            mpath = self.run_dir / "manifest.json"
            if rank == 0 or self._claim.first:
                _atomic_write_json(mpath, self.manifest)
            info = {"rank": rank, "pid": os.getpid(), "host": socket.gethostname(),
                    "run_id": self.run_id}
            info.update(rank_info or {})
            _atomic_write_json(self.rank_dir / "rank.json", info)
        except OSError as e:
            self._claim.release(clean=False)
            raise TraceError(f"{self.run_dir}: cannot write the trace ({e.strerror})") from None
        except BaseException:
            self._claim.release(clean=False)
            raise

        self.shard_bytes = shard_bytes
        self.batch_records = batch_records
        self.commit_seconds = commit_seconds
        self.max_queue_bytes = max_queue_bytes
        self._q: queue.Queue[Any] = queue.Queue()
        self._pending_bytes = 0
        self._cv = threading.Condition()
        self._seq = 0
        self._event = 0
        self._seq_lock = threading.Lock()
        self._error: BaseException | None = None
        self._closed = False
        #: set when the code writing the trace raised: the trace may lack what it meant to
        #: record, so an old trace it replaces is kept (set aside, see :mod:`.claim`)
        self.interrupted = False
        self.records_written = 0
        self.bytes_written = 0
        self._flush_done = threading.Event()
        self._checksum = checksum.default_algorithm()
        try:
            self._db = sqlite3.connect(self.rank_dir / "index.sqlite", check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(CREATE_SQL)
            self._db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                 [("schema_version", str(SCHEMA_VERSION)),
                                  ("run_id", self.run_id),
                                  (checksum.META_KEY, self._checksum)])
            self._db.commit()
        except sqlite3.Error as e:
            self._claim.release(clean=False)
            raise TraceError(f"{self.rank_dir}: cannot create the trace index ({e})") from None
        self._shard: _Shard | None = None
        self._shard_no = 0
        self._sums: list[tuple[int, int]] = []  # (seq, checksum) of payloads not yet inserted
        self._thread = threading.Thread(target=self._run, name="netparity-writer", daemon=True)
        self._thread.start()

    # ---- training-thread side -------------------------------------------------------------
    def next_event(self) -> int:
        """A new call identifier for :attr:`Record.event`."""
        with self._seq_lock:
            self._event += 1
            return self._event

    def add(
        self,
        rec: Record,
        payload: Payload | None = None,
        *,
        nbytes: int | None = None,
        want_hash: bool = False,
        store: bool = True,
    ) -> Record:
        """Queue one record (and optionally its payload). Assigns ``rec.seq``; returns ``rec``.

        ``payload`` is a numpy array in the storage dtype of ``rec.dtype`` (see
        :mod:`netparity.dtypes`) or a callable producing one on the writer thread (e.g. a device
        to host copy of a tensor the caller already cloned). ``nbytes`` sizes a callable payload
        for back-pressure. With ``store=False`` the payload is only hashed (``want_hash``), not
        written.
        """
        self._check()
        with self._seq_lock:
            rec.seq = self._seq
            self._seq += 1
        size = 0
        if payload is not None:
            size = payload.nbytes if isinstance(payload, np.ndarray) else int(nbytes or 0)
            with self._cv:
                while self._pending_bytes > 0 and self._pending_bytes + size > self.max_queue_bytes:
                    self._cv.wait(0.1)
                    self._check()
                self._pending_bytes += size
        self._q.put((rec, payload, size, want_hash, store))
        return rec

    def add_many(self, recs: list[Record]) -> None:
        """Queue records without payloads in one go (one hand-over to the writer thread for the
        lot, where :meth:`add` wakes it once per record). Assigns each ``rec.seq`` in order."""
        self._check()
        if not recs:
            return
        with self._seq_lock:
            seq = self._seq
            for rec in recs:
                rec.seq = seq
                seq += 1
            self._seq = seq
        self._q.put(recs)

    def flush(self) -> None:
        """Block until everything queued so far is committed and shard headers are current."""
        self._check()
        self._flush_done.clear()
        self._q.put(_FLUSH)
        while not self._flush_done.wait(0.1):
            self._check()
            if not self._thread.is_alive():
                break
        self._check()

    def close(self) -> None:
        """Flush, stop the writer thread and close files. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._q.put(_STOP)
        self._thread.join()
        self._db.close()
        if self._error is None:
            self._compact()
        # the old trace (if overwritten) goes only once this one is complete: not when the
        # writer failed, nor when the code writing it raised (``interrupted``)
        self._claim.release(clean=self._error is None and not self.interrupted)
        if self._error is not None:
            raise TraceError(f"trace writer failed: {self._error}") from self._error

    def _compact(self) -> None:
        """Write this rank's columnar index copy (``trace.columnar``): readers scan it instead
        of SQLite (the 100k-op compare reads its index ~5x faster). A cache only: when it cannot
        be written the trace is complete without it, and readers fall back to SQLite."""
        from netparity.trace.columnar import compact

        try:
            compact(self.run_dir, ranks=[self.rank])
        except (NetparityError, OSError):
            pass

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None:
            self.interrupted = True
        self.close()

    def _check(self) -> None:
        if self._error is not None:
            raise TraceError(f"trace writer failed: {self._error}") from self._error

    # ---- writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        # Rows are inserted as they arrive, inside the open transaction, and committed every
        # batch_records rows or commit_seconds: the per-row work (record_to_row, binding) then
        # overlaps the training step instead of piling up until the commit -- a flush at the
        # end of a step waits only for the commit, not for a step's worth of rows.
        pending = 0
        last_commit = time.monotonic()
        try:
            while True:
                timeout = max(0.0, self.commit_seconds - (time.monotonic() - last_commit))
                try:
                    item = self._q.get(timeout=timeout if pending else None)
                except queue.Empty:
                    item = None
                if item is _STOP or item is _FLUSH:
                    self._commit(pending)
                    pending = 0
                    if self._shard is not None:
                        self._shard.write_header()
                    last_commit = time.monotonic()
                    if item is _STOP:
                        if self._shard is not None:
                            self._shard.close()
                        self._flush_done.set()
                        return
                    self._flush_done.set()
                    continue
                if type(item) is list:  # add_many
                    self._insert(item)
                    pending += len(item)
                elif item is not None:
                    rec, payload, size, want_hash, store = item
                    if payload is not None and store:
                        self._write_payload(rec, payload, want_hash)
                    elif payload is not None and want_hash:
                        arr = payload() if callable(payload) else payload
                        rec.hash = content_hash(np.ascontiguousarray(arr))
                    if payload is not None:
                        with self._cv:
                            self._pending_bytes -= size
                            self._cv.notify_all()
                    self._insert([rec])
                    pending += 1
                if pending and (
                    pending >= self.batch_records
                    or time.monotonic() - last_commit >= self.commit_seconds
                ):
                    self._commit(pending)
                    pending = 0
                    last_commit = time.monotonic()
        except BaseException as e:  # surfaced to the training thread by _check()
            self._error = e
            self._flush_done.set()
            with self._cv:
                self._cv.notify_all()

    def _write_payload(self, rec: Record, payload: Payload, want_hash: bool) -> None:
        arr = payload() if callable(payload) else payload
        arr = np.ascontiguousarray(arr)
        if rec.dtype in DTYPES:
            want = storage_dtype(rec.dtype)
            if arr.dtype != want:
                if arr.dtype.itemsize != want.itemsize:
                    raise TraceError(
                        f"payload of {rec.key()} is {arr.dtype}, expected storage {want}"
                    )
                arr = arr.view(want)
        tag = DTYPES.get(rec.dtype, ("", "U8"))[1]
        key = str(rec.seq)
        if (
            self._shard is None
            or self._shard.data_bytes + arr.nbytes > self.shard_bytes
            and self._shard.data_bytes > 0
            or not self._shard.fits_header(len(key) + 80)
        ):
            if self._shard is not None:
                self._shard.close()
            self._shard = _Shard(self.rank_dir / f"tensors-{self._shard_no:05d}.safetensors")
            self._shard_no += 1
        buf = arr.reshape(-1).data.cast("B") if arr.size else memoryview(b"")
        # (xxhash and zlib release the GIL for large buffers: the training thread keeps going)
        self._sums.append((rec.seq, checksum.digest(self._checksum, buf)))
        rec.offset = self._shard.append(key, tag, tuple(arr.shape), buf)
        rec.shard = self._shard.path.name
        rec.nbytes = arr.nbytes
        if want_hash and rec.hash is None:
            rec.hash = content_hash(arr)
        self.bytes_written += arr.nbytes

    def _insert(self, recs: list[Record]) -> None:
        """Insert rows into the open transaction (visible to readers once committed)."""
        self._db.executemany(INSERT_SQL, [record_to_row(r) for r in recs])
        if self._sums:  # (same transaction as the rows: committed, or lost, together)
            self._db.executemany(INSERT_CHECKSUM_SQL, self._sums)
            self._sums.clear()

    def _commit(self, count: int) -> None:
        """Commit the ``count`` rows inserted since the last commit."""
        if not count:
            return
        if self._shard is not None:
            self._shard.flush()  # payload bytes reach the OS before rows that point at them
        self._db.commit()
        self.records_written += count
