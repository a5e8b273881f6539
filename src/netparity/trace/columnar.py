"""A columnar copy of a rank's index, written when a trace is complete, read by column scans.

The SQLite index (``index.sqlite``) is what capture streams into: crash-safe, committed in
batches. Reading it back is the slow part of every large comparison -- at 100,000 ops per side
(~560k rows) SQLite's own row fetch takes seconds, whatever the caller does with the rows. So a
complete trace also gets ``index.columns.npz`` next to each rank's index: one NumPy array per
column, in sequence order, which :func:`netparity.trace.scan.scan` reads instead of SQLite
(a column is a read-only view of a memory map of the file -- no zip copy; its CRC-32 checked
on first use, see :class:`_Members` --; only the columns a scan names are touched; a scan of
every row hands out read-only views of them, a filtered scan gathers its rows; a column
holding one value on every row is kept as that value repeated, a stride-0 view: see
:func:`constant_view`).

Layout of the ``.npz`` (a zip of ``.npy`` members, stored uncompressed):

* ``meta``: UTF-8 JSON ``{"format", "schema_version", "columns", "n", "max_seq"}``;
* ``i.<col>`` int64 (integer columns; NULL as -1), ``f.<col>`` float64 (real columns; NULL and
  the text ``'nan'`` as NaN), ``c.<col>`` int32 codes and ``v.<col>`` the UTF-8 JSON list of
  distinct values (text columns; NULL as ``''``), ``n.<col>`` bool NULL mask (only for nullable
  columns that hold a NULL).

Why NumPy and not Parquet: the core depends on NumPy only, a column maps without decoding,
and ``Trace.scan`` already hands out exactly these arrays (``pandas.DataFrame(dict(cols))`` is
one line from there). The file is a cache of the SQLite index, never the only copy: it is used
only when its row count and last sequence number equal the index's and its column list equals
this schema's, so an index that grew after compaction, a newer schema or a damaged file fall
back to SQLite (which stays the source of truth and what older traces have).

Example:
    >>> compact("runs/ref")                                  # doctest: +SKIP
    1
"""

from __future__ import annotations

import functools
import io
import json
import mmap
import os
import re
import tempfile
import weakref
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from netparity import inputs
from netparity.errors import TraceError
from netparity.trace.parquet import PARQUET_FILE, ParquetMembers, write_index
from netparity.trace.schema import COLUMN_NAMES, COLUMNS, SCHEMA_VERSION

if TYPE_CHECKING:
    from netparity.trace.reader import Trace
    from netparity.trace.scan import Columns

COLUMNS_FILE = "index.columns.npz"
"""File name of a rank's columnar index copy, inside ``rank<N>/``."""
FORMAT = 1
#: set to 1 to ignore columnar copies (read SQLite only), e.g. to time the SQLite path
DISABLE_ENV = "NETPARITY_NO_COLUMNAR"

#: rows :meth:`Store.check_rows` checks at a time in a large copy (a row group's worth)
CHECK_ROWS = 1 << 20
#: the columns that check looks at (in the schema's order: it names the first bad one)
_CHECKED = [c for c in COLUMN_NAMES if c in ("shape", "extra", "offset", "nbytes")]
_TYPES = {c: t.split()[0] for c, t in COLUMNS}
_NULLABLE = frozenset(c for c, t in COLUMNS if "NOT NULL" not in t and "PRIMARY" not in t)


def constant_view(a: np.ndarray) -> np.ndarray:
    """``a`` itself, or, when every element of it is the same (bit for bit), a read-only view
    of one copy of that element repeated (stride 0: no memory per row). Many index columns
    are: ``rank``, a one-step trace's ``step``, the counts of NaN/Inf statistics, the payload
    location of a trace without payloads, ... -- ~half of a 100k-op side's column bytes."""
    if a.ndim != 1 or len(a) < 2 or a.strides == (0,):
        return a
    bits = a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a
    if not (bits == bits[0]).all():
        return a
    return np.broadcast_to(a[:1].copy(), a.shape)


class Store:
    """The columnar copy of one rank's index, opened lazily: each column is read from the
    file the first time a scan asks for it, then kept."""

    def __init__(self, path: Path, meta: dict[str, Any],
                 npz: _Members | ParquetMembers | _Window):
        self.path, self.n, self.max_seq = path, int(meta["n"]), int(meta["max_seq"])
        self.meta = meta
        self._npz = npz
        self._cols: dict[str, Any] = {}
        self._nulls: dict[str, np.ndarray | None] = {}
        self._seq_up: bool | None = None
        self._step_up: bool | None = None
        #: a window's whole-copy store and first row (see :meth:`for_steps`)
        self._parent: Store | None = None
        self._first = 0
        self._window: Store | None = None

    def for_steps(self, steps: list[Any] | None) -> Store | None:
        """The rows of steps ``steps`` as a store of their own (None: read the whole copy).

        Compaction writes rows in sequence order, so a trace's steps are consecutive runs of
        rows: a scan of some steps (``compare --steps``, the alignment of one step) reads
        the columns of those rows only, from the row groups holding them, instead of every
        step's -- its memory is the steps asked for, not the trace. The last such window is
        kept for the scans that follow (the same step's other columns); a column read whole
        already is a view of it there. Not used when the steps cover every row or when the
        ``step`` column is not in order (a copy some other tool wrote)."""
        if steps is None or self._parent is not None or not steps or not all(
                isinstance(v, int) for v in steps):
            return None
        step = self.column("step")
        if self._step_up is None:
            self._step_up = bool(np.all(step[1:] >= step[:-1]))
        if not self._step_up:
            return None
        a = int(np.searchsorted(step, min(steps), "left"))
        b = int(np.searchsorted(step, max(steps), "right"))
        if b - a >= self.n:
            return None
        w = self._window
        if w is None or (w._first, w._first + w.n) != (a, b):
            w = self._window = self._rows_store(a, b)
        return w

    def _rows_store(self, a: int, b: int) -> Store:
        """Rows ``[a, b)`` as a store (its columns read from those rows only)."""
        npz = self._npz
        assert not isinstance(npz, _Window), "a window of a window"
        w = Store(self.path, {**self.meta, "n": b - a}, npz.window(a, b))
        w._parent, w._first = self, a
        return w

    def column(self, name: str) -> Any:
        """Column ``name`` for every row: an array, or a ``Strings`` for text. Checked as
        strictly as SQLite's typing checks the index: the member's dtype is the column's, it
        has one value per row, a text column's codes index its values (a forged copy is an
        error, never wrong statistics or an ``IndexError`` later)."""
        from netparity.trace.scan import Strings

        got = self._cols.get(name)
        if got is None and self._parent is not None and name in self._parent._cols:
            # read whole already: this window's rows are a view of it
            whole, null = self._parent._cols[name], self._parent._nulls[name]
            rows = slice(self._first, self._first + self.n)
            got = Strings(whole.codes[rows], whole.values) if isinstance(whole, Strings) \
                else whole[rows]
            self._nulls[name] = None if null is None else null[rows]
            self._cols[name] = got
        if got is None:
            t = _TYPES[name]
            try:
                if t == "TEXT":
                    got = Strings(*self._npz.text(name))
                else:
                    got = self._member(f"{'f' if t == 'REAL' else 'i'}.{name}",
                                       "f8" if t == "REAL" else "i8")
                null = self._npz.get(f"n.{name}")
                if null is not None:
                    if null.dtype != np.bool_ or len(null) != self.n:
                        raise ValueError(f"NULL mask of {name!r} is not {self.n} booleans")
                    if name not in _NULLABLE:
                        raise ValueError(f"column {name!r} cannot hold NULL")
                self._nulls[name] = null
            except (KeyError, ValueError, OSError, UnicodeDecodeError) as e:
                raise self._corrupt(str(e)) from None
            if len(got) != self.n:
                raise self._corrupt(f"column {name!r} has {len(got)} rows, not {self.n}")
            if isinstance(got, Strings):
                got.codes = constant_view(got.codes)
            else:
                got = constant_view(got)
            null = self._nulls[name]
            if null is not None:
                self._nulls[name] = constant_view(null)
            self._cols[name] = got
        return got

    def _member(self, name: str, dtype: str) -> np.ndarray:
        a = self._npz[name]
        if a.dtype != np.dtype(dtype):
            raise ValueError(f"member {name!r} is {a.dtype}, not {np.dtype(dtype)}")
        return a

    def _corrupt(self, why: str) -> TraceError:
        return TraceError(f"{self.path}: corrupt columnar index ({why}); delete it to read the "
                          "SQLite index")

    def check_rows(self) -> tuple[Any, str] | None:
        """The copy's first row (``(seq, column)``) holding what no writer produces -- what
        :data:`~netparity.trace.reader._BAD_ROW_SQL` finds in an index, checked on the arrays
        a scan reads (a few vectorised passes); None: every row is clean.

        Every column is read (:meth:`column` checks its type, length and codes: a forged
        copy is refused here, whatever the command goes on to read). A copy of more than
        :data:`CHECK_ROWS` rows and more than one step is checked that many rows at a time and
        nothing is kept, so that a scan of some steps then holds only those steps' rows
        (:meth:`for_steps`); a scan of every step reads the columns again (~0.7 s per 1M
        rows)."""
        if self.n <= CHECK_ROWS or self._parent is not None or self.column("step").strides == (0,):
            # small, or one step (every scan reads every row): read whole, and kept
            return self._check_rows()
        for a in range(0, self.n, CHECK_ROWS):
            got = self._rows_store(a, min(self.n, a + CHECK_ROWS))._check_rows()
            if got is not None:  # the first part holding a bad row holds the first one
                return got
        return None

    def _check_rows(self) -> tuple[Any, str] | None:
        from netparity.trace.scan import Strings

        bad = np.zeros(self.n, dtype=bool)
        first: dict[int, str] = {}
        for c in COLUMN_NAMES:
            v, null = self.column(c), self.null(c)
            if c not in _CHECKED:
                continue
            if isinstance(v, Strings):
                wrong = _shapes_wrong(v.values) if c == "shape" else _extras_wrong(v.values)
                m = wrong[v.codes] if len(wrong) else np.zeros(self.n, dtype=bool)
                if null is not None:
                    m &= ~null
            elif c in ("offset", "nbytes"):
                m = v < 0 if null is None else (v < 0) & ~null
            else:
                continue
            new = m & ~bad
            if new.any():
                first.setdefault(int(np.argmax(new)), c)
                bad |= m
        if not first:
            return None
        row = min(first)
        return int(self.column("seq")[row]), first[row]

    def seq_increasing(self) -> bool:
        """Whether the ``seq`` column is strictly increasing (what :func:`compact` writes)."""
        if self._seq_up is None:
            q = self.column("seq")
            self._seq_up = bool(np.all(q[1:] > q[:-1]))
        return self._seq_up

    def null(self, name: str) -> np.ndarray | None:
        """NULL mask of column ``name`` (None: no row is NULL)."""
        self.column(name)
        return self._nulls[name]

    def bad_row(self) -> tuple[bool, tuple[Any, str] | None]:
        """What :meth:`Trace.check_rows <netparity.trace.reader.Trace.check_rows>` found in
        the index when this copy was written: ``(True, None)`` nothing (:func:`compact`
        refuses an index with bad rows), ``(True, (seq, column))`` a bad row; ``(False,
        None)``: not known (a copy written before the check or the index's checksum were
        recorded, or an index whose bytes are no longer those the copy was made of: check the
        index itself)."""
        if "bad_row" not in self.meta or self.meta.get("index_crc") != _index_crc(
                self.path.parent / self.index_file):
            return False, None
        got = self.meta["bad_row"]
        if not (got is None or isinstance(got, list) and len(got) == 2):
            return False, None
        return True, (None if got is None else (got[0], str(got[1])))

    index_file = "index.sqlite"


_SHAPE = re.compile(r"\[[0-9, \]]*\]")


def _shapes_wrong(values: list[str]) -> np.ndarray:
    """Which shapes are not what the index check accepts (a flat list of integers)."""
    return np.array([_SHAPE.fullmatch(s) is None for s in values], dtype=bool)


def _extras_wrong(values: list[str]) -> np.ndarray:
    """Which ``extra`` values are neither NULL (``''``) nor a JSON object. One parse of all
    of them as a JSON list first (~0.02 s per 100k distinct values, against ~0.15 s one by
    one); a value that breaks it (or splits into two) is then found one by one."""
    body = [x for x in values if x != ""]
    try:
        got = json.loads("[" + ",".join(body) + "]")
        if len(got) == len(body) and all(isinstance(x, dict) for x in got):
            return np.zeros(len(values), dtype=bool)
    except ValueError:
        pass
    return np.array([not _extra_ok(x) for x in values], dtype=bool)


def _extra_ok(s: str) -> bool:
    if s == "":  # (how NULL is stored in a text column's values)
        return True
    try:
        return isinstance(json.loads(s), dict)
    except ValueError:
        return False


def _index_crc(path: Path) -> int | None:
    """CRC-32 of a rank's SQLite index file (read through the opener), None if unreadable."""
    try:
        fd, _ = inputs.open_fd(path, error=TraceError, what="trace index")
    except TraceError:
        return None
    crc = 0
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(1 << 22):
            crc = zlib.crc32(chunk, crc)
    return crc


#: open stores per trace object and rank (dropped with the trace)
_OPEN: weakref.WeakKeyDictionary[Trace, dict[int, Store | None]] = weakref.WeakKeyDictionary()


def store(trace: Trace, rank: int) -> Store | None:
    """The columnar copy of ``rank``'s index when there is a current one, else None (read
    SQLite). Checked against the index once per trace object and rank."""
    if os.environ.get(DISABLE_ENV) == "1":
        return None
    per = _OPEN.setdefault(trace, {})
    if rank in per:
        return per[rank]
    per[rank] = s = _open(trace, rank)
    return s


class _Members:
    """The ``.npy`` members of an uncompressed ``.npz``, each an array viewing a read-only
    memory map of the file (no copy): what ``np.load`` would return for them.

    ``np.load`` reads a member through ``zipfile`` -- a copy into a bytes object, a CRC-32 over
    it, and another copy into the array -- which cost ~0.2 s CPU per 100k-op side for columns
    a scan then copies once more anyway. Here the zip's central directory is read once and a
    member is located, its ``.npy`` header parsed and checked (dtype, shape, size within the
    file) and its CRC-32 compared with the zip's on first use (~0.03 s per 100 MB: a damaged
    copy is an error, not wrong statistics). A member that is not
    stored uncompressed (a file some other tool wrote) is read through ``zipfile``.

    The mapped file is never modified in place: :func:`compact` replaces it with
    ``os.replace``, so a reader's map keeps the old file's bytes.
    """

    def __init__(self, path: Path, root: Path):
        fd, size = inputs.open_fd(path, within=root, error=TraceError, what="columnar index",
                                  tree="the trace")
        with os.fdopen(fd, "rb") as f:
            if not size:
                raise ValueError("empty file")
            self._map = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
            with zipfile.ZipFile(f) as z:
                inputs.check_zip(z, size, path, TraceError)
                self._infos = {i.filename[:-4]: i for i in z.infolist()
                               if i.filename.endswith(".npy")}
        self.path, self.size, self._root = path, size, root
        self.files = list(self._infos)

    def window(self, a: int, b: int) -> _Window:
        """The members at rows ``[a, b)`` (views of the map)."""
        return _Window(self, a, b)

    def text(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Codes and distinct values of text column ``name`` (members ``c.`` and ``v.``)."""
        values = json.loads(bytes(self._typed(f"v.{name}", "u1")).decode("utf-8"))
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise ValueError(f"values of {name!r} are not a list of strings")
        codes = self._typed(f"c.{name}", "i4")
        if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= len(values)):
            raise ValueError(f"codes of {name!r} out of range")
        return codes, values

    def _typed(self, name: str, dtype: str) -> np.ndarray:
        a = self[name]
        if a.dtype != np.dtype(dtype):
            raise ValueError(f"member {name!r} is {a.dtype}, not {np.dtype(dtype)}")
        return a

    def get(self, name: str) -> np.ndarray | None:
        """Member ``name``, or None when the file has none."""
        return self[name] if name in self._infos else None

    def __getitem__(self, name: str) -> np.ndarray:
        info = self._infos[name]  # KeyError: no such member
        if info.compress_type != zipfile.ZIP_STORED:  # (header checked against the member)
            with inputs.NpzReader(self.path, within=self._root, error=TraceError,
                                  what="columnar index", tree="the trace") as z:
                return z[name]
        mm, off = self._map, info.header_offset
        head = mm[off : off + 30]
        if len(head) < 30 or head[:4] != b"PK\x03\x04":
            raise ValueError(f"bad zip member header for {name!r}")
        start = off + 30 + int.from_bytes(head[26:28], "little") + int.from_bytes(
            head[28:30], "little")
        end = start + info.file_size
        if end > self.size:
            raise ValueError(f"member {name!r} runs past the end of the file")
        f = io.BytesIO(mm[start : min(end, start + 65536)])
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"member {name!r}: unsupported .npy version {version}")
        if dtype.hasobject or len(shape) != 1 or fortran:
            raise ValueError(f"member {name!r} is not a flat array of plain values")
        data = start + f.tell()
        if data + shape[0] * dtype.itemsize != end:  # forged (a header bomb): refused
            raise TraceError(f"{self.path}: member {name!r}: .npy header declares "
                             f"{shape[0] * dtype.itemsize} bytes, the member holds "
                             f"{max(end - data, 0)} (a corrupt columnar index, forged or "
                             "damaged); delete it to read the SQLite index")
        with memoryview(mm) as whole, whole[start:end] as member:
            crc = zlib.crc32(member)  # ~0.03 s per 100 MB: a flipped bit is not read as data
        if crc != info.CRC:
            raise ValueError(f"member {name!r}: CRC-32 mismatch (the file is damaged)")
        return np.frombuffer(mm, dtype=dtype, count=shape[0], offset=data)


class _Window:
    """Rows ``[a, b)`` of an ``.npz`` copy's members: views of the memory map (its pages are
    the file's, read only when touched)."""

    def __init__(self, members: _Members, a: int, b: int):
        self._m, self._rows = members, slice(a, b)

    def text(self, name: str) -> tuple[np.ndarray, list[str]]:
        codes, values = self._m.text(name)
        return codes[self._rows], values

    def get(self, name: str) -> np.ndarray | None:
        got = self._m.get(name)
        return None if got is None else got[self._rows]

    def __getitem__(self, name: str) -> np.ndarray:
        return self._m[name][self._rows]


def check_files(trace: Trace, ranks: list[int] | None = None) -> None:
    """Every rank's columnar copy opened through the safe opener and closed (a link out of the
    trace, a FIFO or a device is refused: :mod:`netparity.inputs`), nothing read: what a
    multi-rank ``compare`` checks for every rank before any rank is compared, so a hostile file
    in rank 1 is refused as such whatever rank 0's comparison would have said (the rows
    themselves are checked where each rank is compared)."""
    for rank in trace.ranks if ranks is None else ranks:
        for name in (PARQUET_FILE, COLUMNS_FILE):
            path = trace.path / f"rank{rank}" / name
            if os.path.lexists(path):
                fd, _ = inputs.open_fd(path, within=trace.path, error=TraceError,
                                       what="columnar index", tree="the trace")
                os.close(fd)


def _open(trace: Trace, rank: int) -> Store | None:
    """The current copy of ``rank``'s index; None: none, or an outdated or unreadable one
    (SQLite has everything). A special file, a link out of the trace or a header or zip bomb
    is refused (:mod:`netparity.inputs`), not skipped."""
    members: _Members | ParquetMembers
    path = trace.path / f"rank{rank}" / PARQUET_FILE
    try:
        if os.path.lexists(path):  # the open format (what compact writes)
            members = ParquetMembers(path, trace.path)
            meta = members.meta
        else:  # the copy netparity wrote before Parquet
            path = trace.path / f"rank{rank}" / COLUMNS_FILE
            if not os.path.lexists(path):
                return None
            members = _Members(path, trace.path)
            meta = json.loads(bytes(members["meta"]).decode("utf-8"))
        if not isinstance(meta, dict) or type(meta.get("n")) is not int or type(
                meta.get("max_seq")) is not int:
            return None
        fresh = (meta.get("format") == FORMAT and meta.get("columns") == list(COLUMN_NAMES)
                 # an older version's copy has the same layout (schema.SCHEMA_HISTORY)
                 and type(meta.get("schema_version")) is int
                 and 1 <= meta["schema_version"] <= SCHEMA_VERSION)
    except (OSError, ValueError, KeyError, UnicodeDecodeError, zipfile.BadZipFile):
        return None  # unreadable copy: SQLite still has everything
    if not fresh:
        return None
    if _index_stamp(trace.path / f"rank{rank}") != meta.get("index_stamp"):
        # the index file was written after compaction (an edit that kept the row count and
        # the last seq too), or it has uncheckpointed WAL pages: SQLite is the truth
        return None
    n, max_seq = _extent(trace, rank)
    if (meta.get("n"), meta.get("max_seq")) != (n, max_seq):
        return None  # the index changed after compaction (or the copy is of another index)
    return Store(path, meta, members)


def _index_stamp(rank_dir: Path) -> list[int] | None:
    """(size, mtime in ns) of a rank's SQLite index; None while its WAL holds pages (the file
    alone is then not the index). A copy made with ``cp -r`` (new mtimes) reads through SQLite
    until compacted again; ``cp -p`` / ``rsync -a`` keep the stamp."""
    from netparity.trace.reader import INDEX_FILE

    wal = rank_dir / (INDEX_FILE + "-wal")
    try:
        if wal.exists() and wal.stat().st_size > 0:
            return None
        st = (rank_dir / INDEX_FILE).stat()
    except OSError:
        return None
    return [int(st.st_size), int(st.st_mtime_ns)]


def _extent(trace: Trace, rank: int) -> tuple[int, int]:
    """Row count and last sequence number of ``rank``'s SQLite index."""
    n, mx = trace._query("SELECT count(*), ifnull(max(seq), -1) FROM records", (), rank)[0]
    return int(n), int(mx)


def compact(path: str | os.PathLike[str], ranks: Iterable[int] | None = None, *,
            fmt: str = "parquet") -> int:
    """Write the columnar copy of the index of every rank (or of ``ranks``) of the complete
    trace at ``path``, replacing an older copy atomically. Returns the number of ranks written.

    ``fmt``: ``"parquet"`` (``index.parquet``, :mod:`netparity.trace.parquet`: what pandas,
    polars and DuckDB open) or ``"npz"`` (``index.columns.npz``, what netparity wrote before;
    still read). The copy of the other format is removed (a reader prefers Parquet).

    Call it when a capture is closed (a rank's writer: ``ranks=[rank]``): a copy of an index
    that is still growing is simply not used once the index has more rows.

    Raises:
        TraceError: not a trace, or a corrupt index. An unwritable directory is an OSError.
    """
    from netparity.trace.reader import _BAD_ROW_SQL, open_trace
    from netparity.trace.scan import Strings, _scan_sql

    tr = open_trace(path)
    todo = tr.ranks if ranks is None else [int(r) for r in ranks]
    try:
        for rank in todo:
            if rank not in tr.ranks:
                raise TraceError(f"{tr.path}: no rank {rank} index to compact")
            stamp = _index_stamp(tr.path / f"rank{rank}")
            n, max_seq = _extent(tr, rank)
            # check_rows' scan first: a copy is made of clean rows only, and says so (while
            # it is current -- the index unchanged -- the check reads that instead of
            # scanning the index again)
            bad = tr._query(_BAD_ROW_SQL, (), rank)
            if bad:
                raise TraceError(f"{tr.path}/rank{rank}: corrupt trace index (record "
                                 f"{bad[0][0]!r:.40}: bad {bad[0][1]}); not compacted")
            cols = _scan_sql(tr, rank, list(COLUMN_NAMES), {})
            if cols.n != n or stamp is None or _index_stamp(tr.path / f"rank{rank}") != stamp:
                raise TraceError(f"{tr.path}/rank{rank}: the index changed while being read")
            meta = {"format": FORMAT, "schema_version": SCHEMA_VERSION,
                    "columns": list(COLUMN_NAMES), "n": n, "max_seq": max_seq,
                    "index_stamp": stamp,
                    "index_crc": _index_crc(tr.path / f"rank{rank}" / Store.index_file),
                    "bad_row": None}
            rank_dir = tr.path / f"rank{rank}"
            if fmt == "parquet":
                _save_atomic(rank_dir / PARQUET_FILE,
                             functools.partial(_write_parquet, cols=cols, meta=meta))
                _remove(rank_dir / COLUMNS_FILE)
                continue
            arrays: dict[str, np.ndarray] = {}
            for c in COLUMN_NAMES:
                v = cols.data[c]
                if isinstance(v, Strings):
                    arrays[f"c.{c}"] = v.codes.astype(np.int32)
                    arrays[f"v.{c}"] = _json_bytes(v.values)
                else:
                    arrays[f"{'f' if _TYPES[c] == 'REAL' else 'i'}.{c}"] = v
                null = cols.nulls.get(c)
                if null is not None and null.any():
                    arrays[f"n.{c}"] = null
            arrays["meta"] = _json_bytes(meta)
            _save_atomic(rank_dir / COLUMNS_FILE, functools.partial(_write_npz, arrays=arrays))
            _remove(rank_dir / PARQUET_FILE)
        return len(todo)
    finally:
        tr.close()


def _json_bytes(obj: Any) -> np.ndarray:
    return np.frombuffer(json.dumps(obj).encode("utf-8"), dtype=np.uint8)


def _write_parquet(f: IO[bytes], cols: Columns, meta: dict[str, Any]) -> None:
    write_index(f, cols.data, cols.nulls, meta)


def _write_npz(f: IO[bytes], arrays: dict[str, np.ndarray]) -> None:
    np.savez(f, **arrays)


def _remove(path: Path) -> None:
    """Remove a copy of the other format (gone already: fine)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _save_atomic(dest: Path, write: Callable[[IO[bytes]], None]) -> None:
    """``write`` into a temporary file beside ``dest``, then ``os.replace``: a reader sees
    the old copy or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as readable as the index (mkstemp makes it 0600)
        os.replace(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise


def scan_store(st: Store, cols: list[str], filters: dict[str, Any]) -> Columns:
    """Columns ``cols`` of the rows the exact-match ``filters`` select (see
    :func:`netparity.trace.scan.scan`), from a columnar copy, in sequence order."""
    from netparity.trace.scan import Columns, Strings, _filter_values, check_columns

    part = st.for_steps(dict(_filter_values(filters)).get("step"))
    if part is not None:  # a scan of some steps reads those steps' rows only
        st = part
    keep: np.ndarray | None = None

    def narrow(mask: np.ndarray) -> None:
        nonlocal keep
        keep = mask if keep is None else keep & mask

    for col, vals in _filter_values(filters):
        if col == "nonempty":
            for c in check_columns(vals):
                v = st.column(c)
                m = (v.codes != v.code("")) if isinstance(v, Strings) else np.ones(st.n, bool)
                null = st.null(c)
                narrow(m if null is None else m & ~null)
            continue
        v = st.column(col)
        if isinstance(v, Strings):
            narrow(v.isin([x for x in vals if isinstance(x, str)]))
            continue
        want = np.array([x for x in vals if not isinstance(x, str)], dtype=np.int64)
        if col == "seq" and st.seq_increasing():  # look the values up: no pass over each row
            at = np.minimum(np.searchsorted(v, want), max(st.n - 1, 0))
            m = np.zeros(st.n, dtype=bool)
            if st.n:
                m[at[v[at] == want]] = True
            narrow(m)
        else:
            narrow(np.isin(v, want))
    # every row: views of the map (read-only, as every scan's arrays are); the selected
    # rows: a gather
    if keep is not None and keep.all():  # a filter every row passes: no gather
        keep = None
    idx: Any = slice(None) if keep is None else np.nonzero(keep)[0]
    data: dict[str, Any] = {}
    nulls: dict[str, np.ndarray] = {}
    n = st.n if keep is None else len(idx)

    def rows(a: np.ndarray) -> np.ndarray:  # a constant column stays a view (no gather)
        return np.broadcast_to(a[:1], (n,)) if a.strides == (0,) and n else a[idx]

    for c in cols:
        v = st.column(c)
        if isinstance(v, Strings):
            data[c] = Strings(rows(v.codes), v.values)
        else:
            data[c] = rows(v)
        null = st.null(c)
        if null is not None:
            nulls[c] = rows(null)
    return Columns(data, nulls, n)
