"""Trace reader: validated opening, filtered record queries, lazy memory-mapped payloads.

Example:
    >>> tr = open_trace("runs/ref")                       # doctest: +SKIP
    >>> fwd = tr.records(step=0, kind="module", direction="forward")   # doctest: +SKIP
    >>> x = tr.tensor(fwd[0])                             # doctest: +SKIP
"""

from __future__ import annotations

import fnmatch
import mmap
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from netparity import inputs
from netparity.dtypes import decode, storage_dtype
from netparity.errors import TraceError
from netparity.trace import checksum, fastrows
from netparity.trace.fastrows import SELECT_LIST, columns_to_records, rows_to_records
from netparity.trace.payload import (
    PayloadReader,
    check_location,
    open_shard,
    shard_path,
    verify_checksum,
)
from netparity.trace.scan import Columns, _where, count, scan
from netparity.trace.schema import (
    COLUMN_NAMES,
    COUNT_STATS,
    SCHEMA_VERSION,
    STAT_FIELDS,
    Record,
    row_to_record,
)
from netparity.untrusted import ContentError, check_shape, load_json

INDEX_FILE = "index.sqlite"
"""File name of a rank's crash-safe SQLite index, inside ``rank<N>/``."""

#: a manifest is a few KiB; anything this big is not one (and is not read into memory)
_MAX_MANIFEST = 64 << 20

_SELECT = "SELECT " + ", ".join(f'"{c}"' for c in COLUMN_NAMES) + " FROM records"


def _as_list(v: Any) -> list[Any] | None:
    if v is None:
        return None
    if isinstance(v, (str, int)):
        return [v]
    return list(v)


class Trace:
    """A trace directory opened for reading. Use :func:`open_trace`."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        if not self.path.exists():
            raise TraceError(f"{self.path}: no such trace directory")
        if not self.path.is_dir():
            raise TraceError(f"{self.path}: not a trace directory (expected a folder)")
        mpath = self.path / "manifest.json"
        if not os.path.lexists(mpath):
            raise TraceError(f"{self.path}: not a netparity trace (no manifest.json)")
        try:
            self.manifest: dict[str, Any] = load_json(inputs.read_text(
                mpath, within=self.path, error=TraceError, tree="the trace", what="manifest",
                limit=_MAX_MANIFEST), what="manifest.json")
            if not isinstance(self.manifest, dict):
                raise ValueError("manifest is not an object")
        except (ValueError, UnicodeDecodeError) as e:
            raise TraceError(f"{mpath}: corrupt manifest ({e})") from None
        version = self.manifest.get("schema_version")
        if version is None:
            raise TraceError(f"{mpath}: corrupt manifest (no schema_version)")
        if type(version) is not int:
            raise TraceError(f"{mpath}: corrupt manifest (schema_version is a "
                             f"{type(version).__name__}, not an integer: {version!r:.40})")
        _check_manifest_types(mpath, self.manifest)
        if version > SCHEMA_VERSION:
            from netparity.errors import SchemaError

            raise SchemaError(
                f"{self.path}: trace schema version {version} is newer than this netparity "
                f"supports ({SCHEMA_VERSION}); upgrade netparity"
            )
        self.schema_version = version
        self.ranks = sorted(
            int(p.name[4:])
            for p in self.path.glob("rank*")
            # (lexists: an index that is a FIFO or a link is refused when opened, not skipped)
            if p.name[4:].isdigit() and os.path.lexists(p / INDEX_FILE)
        )
        if not self.ranks:
            raise TraceError(f"{self.path}: trace has no rank index (rank*/index.sqlite)")
        self._db: dict[int, sqlite3.Connection] = {}
        self._maps: dict[tuple[int, str], np.ndarray] = {}
        # shards opened (and checked: inside the trace, regular file) once for all payload
        # readers: (rank, shard) -> (fd, path); pread on a shared descriptor is thread-safe
        self._fds: dict[tuple[int, str], tuple[int, Path]] = {}
        self._sums: dict[int, dict[int, int]] = {}  # rank -> seq -> stored checksum
        self._checksum_algo: dict[int, str | None] = {}
        self._verified: set[tuple[int, int]] = set()
        self._scratch: list[str] = []  # temporary copies of indexes on read-only media
        for r in self.ranks:
            self._conn(r)  # validate every index up front: fail early, one line
            self._check_schema(r)
            self._check_run_id(r)

    @property
    def framework(self) -> str:
        return str(self.manifest.get("framework", "unknown"))

    def rank_info(self, rank: int) -> dict[str, Any]:
        p = self.path / f"rank{rank}" / "rank.json"
        if not os.path.lexists(p):
            return {}
        try:
            return dict(load_json(inputs.read_text(
                p, within=self.path, error=TraceError, tree="the trace", what="rank info",
                limit=_MAX_MANIFEST), what=str(p)))
        except (ValueError, TypeError):
            return {}

    def _conn(self, rank: int) -> sqlite3.Connection:
        if rank in self._db:
            return self._db[rank]
        p = self.path / f"rank{rank}" / "index.sqlite"
        try:
            db = _open_index(p, self.path, self._scratch)
            db.execute("SELECT count(*) FROM records").fetchone()
        except sqlite3.DatabaseError as e:
            raise TraceError(f"{p}: corrupt trace index ({e})") from None
        self._db[rank] = db
        return db

    def payload_checksum(self, rec: Record) -> tuple[str, int] | None:
        """``(algorithm, value)`` of the checksum stored for ``rec``'s payload at capture, or
        None: a trace from before checksums, a record without payload, or an algorithm this
        installation cannot compute (an xxh3 trace without the ``xxhash`` package)."""
        if rec.rank not in self._checksum_algo:
            algo: str | None = None
            if self._query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                           "name = 'payload_checksum'", (), rec.rank):
                rows = self._query("SELECT value FROM meta WHERE key = ?",
                                   (checksum.META_KEY,), rec.rank)
                algo = str(rows[0][0]) if rows else None
                if algo is not None and not checksum.available(algo):
                    algo = None
            self._checksum_algo[rec.rank] = algo
        algo = self._checksum_algo[rec.rank]
        if algo is None:
            return None
        sums = self._sums.get(rec.rank)
        if sums is None:  # the whole table once: one query instead of one per payload
            sums = {seq: v for seq, v in self._query("SELECT seq, value FROM payload_checksum",
                                                     (), rec.rank) if type(v) is int}
            self._sums[rec.rank] = sums
        value = sums.get(rec.seq)  # type: ignore[arg-type]
        return None if value is None else (algo, value)

    def _check_schema(self, rank: int) -> None:
        """The index's own schema version: a newer one is refused like a newer manifest."""
        from netparity.errors import SchemaError

        p = f"{self.path}/rank{rank}/{INDEX_FILE}"
        rows = self._query("SELECT value FROM meta WHERE key = 'schema_version'", (), rank)
        if rows:
            try:
                v = int(rows[0][0])
            except (TypeError, ValueError):
                raise TraceError(f"{p}: corrupt trace index (schema_version "
                                 f"{rows[0][0]!r:.40})") from None
            if v > SCHEMA_VERSION:
                raise SchemaError(f"{p}: index schema version {v} is newer than this netparity "
                                  f"supports ({SCHEMA_VERSION}); upgrade netparity")

    def check_rows(self, ranks: list[int] | None = None) -> None:
        """One pass of SQL over every index for values no writer produces (NULLs, text in
        integer columns, shapes that are not flat lists of non-negative integers, negative
        offsets, text statistics): such rows would surface much later as a ``TypeError`` or a
        ``math domain error`` deep in a comparison.

        Not run by :func:`open_trace`: it reads every row (about a second per 100k rows, as
        much as a comparison's own column scan), so the commands that read whole traces run it
        (``compare``, ``align``, ``inspect``, ``export``, ``recheck``). A rank whose columnar
        copy is current (:mod:`netparity.trace.columnar`: the index has not changed since the
        copy was written, its CRC-32 says so) is not scanned again: the copy records what this
        check found in the index then, and it holds for every reader of that index, SQL ones
        included. The copy's own rows (what scans read) are checked the same way, on its
        arrays: a forged copy is not trusted. ``ranks``: only these (default every rank; a
        multi-rank ``compare`` checks each rank in the worker that compares it).

        Raises:
            TraceError: the first bad row, with its ``seq`` and column.
        """
        from netparity.trace import columnar

        for rank in self.ranks if ranks is None else ranks:
            st = columnar.store(self, rank)
            known, found = st.bad_row() if st is not None else (False, None)
            bad = ([found] if found is not None else []) if known else self._query(
                _BAD_ROW_SQL, (), rank)
            if not bad and st is not None:  # what scans read: the copy's own rows
                got = st.check_rows()
                bad = [got] if got is not None else []
            if bad:
                seq, col = bad[0]
                raise TraceError(f"{self.path}/rank{rank}/{INDEX_FILE}: corrupt trace index "
                                 f"(record {seq!r:.40}: bad {col})")

    def _check_run_id(self, rank: int) -> None:
        """A ``rank<N>/`` left by an older run never mixes in: its index must carry the run id
        of ``manifest.json`` (traces from before run ids carry none and are not checked)."""
        want = self.manifest.get("run_id")
        rows = self._query("SELECT value FROM meta WHERE key = 'run_id'", (), rank)
        have = rows[0][0] if rows else None
        if want is not None and have is not None and have != want:
            raise TraceError(
                f"{self.path}/rank{rank} belongs to another run (run id {have}, manifest.json "
                f"says {want}): a stale rank from an older capture; remove it or recapture")

    def _query(self, sql: str, params: Sequence[Any], rank: int) -> list[tuple[Any, ...]]:
        try:
            return self._conn(rank).execute(sql, params).fetchall()
        except sqlite3.DatabaseError as e:
            raise TraceError(f"{self.path}/rank{rank}: corrupt trace index ({e})") from None

    # ---- queries ---------------------------------------------------------------------------
    def iter_records(
        self,
        *,
        step: int | Iterable[int] | None = None,
        rank: int | Iterable[int] | None = None,
        kind: str | Iterable[str] | None = None,
        direction: str | Iterable[str] | None = None,
        role: str | Iterable[str] | None = None,
        module: str | None = None,
        op: str | None = None,
        name: str | None = None,
        limit: int | None = None,
    ) -> Iterator[Record]:
        """Records in execution order (rank, then sequence number), filtered.

        ``module`` and ``op`` are glob patterns on the module path and the canonical or native op
        name; ``name`` matches either. ``limit``: at most that many records (without glob
        filters, only that many rows are read: a look at the first records of a large trace
        costs no more than they do).
        """
        where: list[str] = []
        params: list[Any] = []
        for col, val in (("step", step), ("kind", kind), ("direction", direction), ("role", role)):
            vals = _as_list(val)
            if vals is not None:
                where.append(f'"{col}" IN ({",".join("?" for _ in vals)})')
                params.extend(vals)
        sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq"
        ranks = _as_list(rank) or self.ranks
        left = limit
        globs = module is not None or op is not None or name is not None
        for r in ranks:
            if r not in self.ranks:
                continue
            if left is not None and left <= 0:
                return
            for row in self._query(sql if left is None or globs else f"{sql} LIMIT {int(left)}",
                                   params, r):
                try:
                    rec = row_to_record(row)
                except (TypeError, ValueError) as e:  # (json.JSONDecodeError is a ValueError)
                    raise TraceError(f"{self.path}/rank{r}: corrupt trace index (record "
                                     f"{row[0]!r:.40}: {e})") from None
                if module is not None and not fnmatch.fnmatchcase(rec.module, module):
                    continue
                if op is not None and not (
                    fnmatch.fnmatchcase(rec.op, op) or fnmatch.fnmatchcase(rec.native, op)
                ):
                    continue
                if name is not None and not any(
                    fnmatch.fnmatchcase(s, name) for s in (rec.module, rec.op, rec.native)
                ):
                    continue
                if left is not None:
                    if left <= 0:
                        return
                    left -= 1
                yield rec

    def records(self, **filters: Any) -> list[Record]:
        """Like :meth:`iter_records`, as a list."""
        return list(self.iter_records(**filters))

    def steps(self, rank: int | None = None) -> list[int]:
        out: set[int] = set()
        for r in [rank] if rank is not None else self.ranks:
            out.update(s for (s,) in self._query("SELECT DISTINCT step FROM records", (), r))
        return sorted(out)

    def counts(self) -> dict[str, int]:
        """Number of records per kind, all ranks together."""
        out: dict[str, int] = {}
        for r in self.ranks:
            for k, n in self._query("SELECT kind, count(*) FROM records GROUP BY kind", (), r):
                out[k] = out.get(k, 0) + n
        return out

    def __len__(self) -> int:
        return sum(
            self._query("SELECT count(*) FROM records", (), r)[0][0] for r in self.ranks
        )

    # ---- column scans ------------------------------------------------------------------------
    def scan(self, columns: Iterable[str], *, rank: int = 0, **filters: Any) -> Columns:
        """Columns of one rank's selected records as NumPy arrays; see :func:`~netparity.trace.scan.scan`."""
        try:
            return scan(self, columns, rank=rank, **filters)
        except (TypeError, ValueError) as e:  # NULLs or text where the schema has numbers
            raise TraceError(f"{self.path}/rank{rank}: corrupt trace index ({e})") from None

    def count(self, *, rank: int = 0, **filters: Any) -> int:
        """How many records of one rank the exact-match filters select (no rows are read)."""
        return count(self, rank=rank, **filters)

    def load_records(self, *, rank: int = 0, **filters: Any) -> list[Record]:
        """Records of one rank in execution order, exact-match filters as :meth:`scan` takes
        them: about twice as fast as :meth:`records` (no glob filters, one rank).

        Example:
            >>> recs = open_trace("runs/ref").load_records(kind=("module",))   # doctest: +SKIP
        """
        if rank not in self.ranks:
            from netparity.errors import UsageError

            raise UsageError(f"{self.path}: no rank {rank} (ranks: {self.ranks})")
        if fastrows.FAST_OK:  # one scan of every column (the columnar copy when there is one)
            return columns_to_records(scan(self, COLUMN_NAMES, rank=rank, **filters))
        cond, params = _where(filters)
        rows = self._query(f"SELECT {SELECT_LIST} FROM records{cond} ORDER BY seq", params, rank)
        try:
            return rows_to_records(rows)
        except (TypeError, ValueError) as e:  # bad JSON in shape/extra
            raise TraceError(f"{self.path}/rank{rank}: corrupt trace index ({e})") from None

    # ---- payloads --------------------------------------------------------------------------
    def raw_tensor(self, rec: Record) -> np.ndarray:
        """The stored bits of a record's payload as a read-only memory map (no copy).

        The location is validated (inside the trace, a regular file, sizes that agree with the
        row and the file) and the payload's checksum verified on its first read."""
        off, n = check_location(rec)
        key = (rec.rank, str(rec.shard))
        mm: np.ndarray | None = self._maps.get(key)
        if mm is None:
            fd, p = open_shard(self.path, rec)
            try:
                size = os.fstat(fd).st_size
                mm = (np.frombuffer(mmap.mmap(fd, size, access=mmap.ACCESS_READ), np.uint8)
                      if size else np.zeros(0, np.uint8))
            except OSError as e:
                raise TraceError(f"{p}: cannot map payload shard ({e.strerror})") from None
            finally:
                os.close(fd)
            self._maps[key] = mm
        end = off + n
        if end > mm.shape[0]:
            raise TraceError(f"{rec.shard}: truncated payload shard (need byte {end})")
        raw = mm[off:end]
        if (rec.rank, rec.seq) not in self._verified:
            verify_checksum(raw, self.payload_checksum(rec), shard_path(self.path, rec), rec)
            self._verified.add((rec.rank, rec.seq))
        return raw.view(storage_dtype(rec.dtype)).reshape(rec.shape)

    def payload_reader(self, rec: Record) -> PayloadReader:
        """A chunked ``pread`` reader of a record's payload (flat memory for huge tensors)."""
        return PayloadReader(self, rec)

    def tensor(self, rec: Record) -> np.ndarray:
        """The payload with real values (bf16/fp8 decoded to float32); lazily memory-mapped."""
        return decode(self.raw_tensor(rec), rec.dtype)

    def export(self, records: Iterable[Record], out: str | os.PathLike[str], *,
               overwrite: bool = True) -> int:
        """Write the payloads of ``records`` to an ``.npz`` file or a folder of ``.npy`` files.

        Names are the records' keys made file-safe, led by ``rank<N>.`` when the trace has
        more than one rank (a step and sequence number repeat across ranks: without the rank a
        rank's tensors would replace another's). The ``.npz`` is written atomically
        (:func:`netparity.outputs.atomic_output`), the folder through
        :func:`netparity.outputs.atomic_folder` (a new folder appears complete or not at all;
        files written into an existing one are marked incomplete until the last lands); with
        ``overwrite=False`` an existing
        ``.npz`` or a non-empty folder is refused before anything is read. Returns how many
        tensors were written.
        """
        from netparity.errors import UsageError
        from netparity.outputs import atomic_folder, atomic_output, write_npz_file

        out = Path(out)
        if not overwrite and (out.is_file() or out.is_dir() and any(out.iterdir())):
            raise UsageError(f"{out}: exists; pass --force to replace it")
        arrays: dict[str, np.ndarray] = {}
        for rec in records:
            if not rec.has_payload:
                continue
            name = f"{rec.step}.{rec.seq}.{rec.kind}.{rec.module or rec.op}.{rec.direction}.{rec.role}{('.' + rec.arg) if rec.arg else ''}"
            if len(self.ranks) > 1:
                name = f"rank{rec.rank}.{name}"
            name = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
            if name in arrays:  # (two records one name: never one silently replacing another)
                raise TraceError(f"{self.path}: two records export as {name!r} (rank{rec.rank} "
                                 f"record {rec.seq}; corrupt index)")
            arrays[name] = np.asarray(self.tensor(rec))
        if not arrays:
            return 0
        if out.suffix == ".npz":
            with atomic_output(out, overwrite=overwrite, what="export") as tmp:
                write_npz_file(tmp, arrays)
        else:  # built in a temporary sibling, renamed into place (outputs.atomic_folder)
            with atomic_folder(out, overwrite=overwrite, what="export") as tmp:
                for name, a in arrays.items():
                    np.save(tmp / f"{name}.npy", a)
        return len(arrays)

    def close(self) -> None:
        for db in self._db.values():
            db.close()
        self._db.clear()
        self._maps.clear()
        for fd, _ in self._fds.values():
            os.close(fd)
        self._fds.clear()
        for d in self._scratch:
            shutil.rmtree(d, ignore_errors=True)
        self._scratch.clear()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_INT_COLUMNS = ("seq", "step", "rank", "call", "module_call", "event", "numel")
_TEXT_COLUMNS = ("kind", "op", "native", "module", "direction", "role", "arg", "dtype", "source")
#: the first row holding a value no writer produces, and which column (one scan of the table)
_BAD_ROW_SQL = (
    "SELECT seq, CASE "
    + " ".join(f"WHEN typeof(\"{c}\") != 'integer' THEN '{c}'" for c in _INT_COLUMNS)
    + " " + " ".join(f"WHEN typeof(\"{c}\") != 'text' THEN '{c}'" for c in _TEXT_COLUMNS)
    # a flat list of non-negative integers: only digits, commas, spaces, one '[' and ']' (GLOB
    # is cheaper than json_valid on every row; a malformed list that passes it, e.g. "[1,,2]",
    # fails the JSON parse of the row and is reported there)
    + " WHEN typeof(shape) != 'text' OR shape NOT GLOB '[[]*[]]'"
    " OR shape GLOB '*[^]0-9, []*' OR shape GLOB '?*[[]*' THEN 'shape'"
    " WHEN extra IS NOT NULL AND (typeof(extra) != 'text' OR NOT json_valid(extra)"
    " OR json_type(extra) != 'object') THEN 'extra'"
    " WHEN \"offset\" IS NOT NULL AND (typeof(\"offset\") != 'integer' OR \"offset\" < 0)"
    " THEN 'offset'"
    " WHEN nbytes IS NOT NULL AND (typeof(nbytes) != 'integer' OR nbytes < 0) THEN 'nbytes'"
    " WHEN shard IS NOT NULL AND typeof(shard) != 'text' THEN 'shard' "
    # statistics: numbers or NULL; a float statistic may be the text 'nan' (how NaN is stored)
    + " ".join(f"WHEN typeof(\"s_{k}\") NOT IN ('integer', 'real', 'null')"
               + ("" if k in COUNT_STATS else f" AND \"s_{k}\" != 'nan'") + f" THEN 's_{k}'"
               for k in STAT_FIELDS)
    + " END AS col FROM records WHERE col IS NOT NULL LIMIT 1"
)


def _check_manifest_types(mpath: Path, m: dict[str, Any]) -> None:
    """The manifest's well-known keys have the types netparity writes (``"precision": [1, 2]``
    used to end in an ``AttributeError`` when a report listed the flags)."""
    kinds: dict[str, tuple[type, ...]] = {
        "framework": (str,), "framework_version": (str,), "device": (str,),
        "run_id": (str,), "world_size": (int,), "precision": (dict,), "capture": (dict,),
        "seeds": (dict, list, int), "argv": (list,), "host": (str,),
        # what netparity.profile adds (perf reads them)
        "loader": (dict,), "mode": (str,), "memory": (str,), "module_memory": (str,),
        "params": (list,), "param_bytes": (list,),
    }
    for key, types in kinds.items():
        v = m.get(key)
        if v is not None and (type(v) not in types):
            want = " or ".join({dict: "an object", list: "a list", str: "a string",
                                int: "an integer"}[t] for t in types)
            raise TraceError(f"{mpath}: corrupt manifest ({key!r} should be {want}, not "
                             f"{type(v).__name__} {v!r:.40})")
    for i, p in enumerate(m.get("params") or []):
        try:
            if not (isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)):
                raise ContentError("not a [name, shape] pair")
            check_shape(p[1], what="its shape")
        except ContentError as e:
            raise TraceError(f"{mpath}: corrupt manifest ('params' entry {i}: {e})") from None
    for i, b in enumerate(m.get("param_bytes") or []):
        if type(b) is not int or b < 0:
            raise TraceError(f"{mpath}: corrupt manifest ('param_bytes' entry {i} is not a "
                             f"byte count: {b!r:.40})")


def _open_index(p: Path, root: Path, scratch: list[str]) -> sqlite3.Connection:
    """Open a rank's index for reading without creating or changing any file of the trace.

    Every file SQLite will touch goes through :mod:`netparity.inputs` first: a regular file
    inside the trace (an index, ``-wal`` or ``-shm`` linked to ``/dev/zero`` or out of the
    trace is refused). A cleanly closed index has no ``-wal`` file: it is opened ``immutable``
    (SQLite then takes no locks and creates no ``-wal``/``-shm``; works on read-only media). A
    ``-wal`` and its ``-shm`` next to it mean a live writer (or a killed one whose last commits
    live only in the WAL): opened read-only through them. A ``-wal`` without ``-shm`` (SQLite
    would create one in the trace), or read-only media: the index and the whole frames of its
    WAL (bounded by the page size its header declares) are copied to a temporary directory (in
    ``scratch``, removed on close) and read there.
    """
    for suffix in ("", "-wal", "-shm"):
        if suffix == "" or os.path.lexists(f"{p}{suffix}"):
            os.close(inputs.open_fd(f"{p}{suffix}", within=root, error=TraceError, tree="the trace",
                                    what="trace index")[0])
    if not os.path.lexists(f"{p}-wal"):
        return sqlite3.connect(f"{p.resolve().as_uri()}?immutable=1", uri=True,
                               check_same_thread=False)
    if os.path.lexists(f"{p}-shm"):
        try:
            db = sqlite3.connect(f"{p.resolve().as_uri()}?mode=ro", uri=True,
                                 check_same_thread=False)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            pass
    d = tempfile.mkdtemp(prefix="netparity-index-")
    scratch.append(d)
    inputs.copy_file(p, os.path.join(d, INDEX_FILE), within=root, error=TraceError, tree="the trace",
                     what="trace index")
    inputs.copy_file(f"{p}-wal", os.path.join(d, f"{INDEX_FILE}-wal"), within=root,
                     error=TraceError, tree="the trace", what="trace index WAL", limit=_wal_extent(f"{p}-wal"))
    return sqlite3.connect(os.path.join(d, INDEX_FILE), check_same_thread=False)


#: a WAL file's magic numbers (big- or little-endian frame checksums) and its header size
_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER, _WAL_FRAME_HEADER = 32, 24


def _wal_extent(wal: str) -> int:
    """How many bytes of a WAL file SQLite can use: its header and the whole frames after it
    (the page size is the header's). Anything else in the file (not a WAL: a sparse or
    zero-filled file) is 0 bytes: the copy then holds no WAL and reads the index alone."""
    fd, size = inputs.open_fd(wal, error=TraceError, tree="the trace", what="trace index WAL")
    try:
        head = os.pread(fd, _WAL_HEADER, 0)
    finally:
        os.close(fd)
    if len(head) < _WAL_HEADER or int.from_bytes(head[:4], "big") not in _WAL_MAGIC:
        return 0
    page = int.from_bytes(head[8:12], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page > 65536 or page & (page - 1):
        return 0
    frame = _WAL_FRAME_HEADER + page
    return _WAL_HEADER + (size - _WAL_HEADER) // frame * frame


def holds_trace(path: str | os.PathLike[str]) -> bool:
    """Whether the directory ``path`` already holds a trace's rank index (any rank).

    Example:
        >>> import tempfile
        >>> holds_trace(tempfile.mkdtemp())
        False
    """
    return any(Path(path).glob(f"rank*/{INDEX_FILE}"))


def open_trace(path: str | os.PathLike[str]) -> Trace:
    """Open a trace directory, validating manifest, schema version and every rank's index."""
    return Trace(path)
