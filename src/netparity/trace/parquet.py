"""A rank's compacted index as Apache Parquet (``rank<N>/index.parquet``): the open format.

:func:`netparity.trace.columnar.compact` writes it when a trace is complete; scans read it
instead of SQLite (which stays what capture streams into, crash-safe, and the source of
truth). Any Parquet reader opens it::

    duckdb -c "SELECT module, count(*) FROM 'run/rank0/index.parquet' GROUP BY module"
    pandas.read_parquet("run/rank0/index.parquet")

Schema (docs/trace-format.md): one column per index column (:data:`netparity.trace.schema.
COLUMNS`), in that order, one row per record in sequence order: ``INTEGER`` columns as
``int64``, ``REAL`` as ``double``, ``TEXT`` as ``dictionary<int32, string>``; SQL NULL is a
Parquet null. The file's key-value metadata ``netparity`` holds the JSON the reader checks the
copy against its index with (``format``, ``schema_version``, ``columns``, ``n``, ``max_seq``,
``index_stamp``, ``index_crc``, ``bad_row``: see :mod:`netparity.trace.columnar`).

A copy is untrusted input: it is opened through :func:`netparity.inputs.open_parquet` (a
regular file inside the trace, no decompression bomb, exactly this schema's columns and
types), and every column read is checked (one value per row, codes within the dictionary).

Example:
    >>> arrow_types()["seq"], arrow_types()["op"]
    ('int64', 'dictionary<values=string, indices=int32, ordered=0>')
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import IO, Any

import numpy as np

from netparity import inputs
from netparity.errors import TraceError
from netparity.trace.schema import COLUMNS

PARQUET_FILE = "index.parquet"
"""File name of a rank's Parquet index copy, inside ``rank<N>/``."""
META_KEY = b"netparity"

_TYPES = {c: t.split()[0] for c, t in COLUMNS}


def _arrow_type(sql: str) -> Any:
    import pyarrow as pa

    return {"INTEGER": pa.int64(), "REAL": pa.float64(),
            "TEXT": pa.dictionary(pa.int32(), pa.string())}[sql]


def arrow_types() -> dict[str, str]:
    """Each column's Arrow type, as ``str(type)`` spells it (what a copy must hold)."""
    return {c: str(_arrow_type(t)) for c, t in _TYPES.items()}


def write_index(f: IO[bytes], data: dict[str, Any], nulls: dict[str, np.ndarray],
                meta: dict[str, Any]) -> None:
    """Write one rank's columns (a scan's ``data`` and ``nulls``: arrays, or ``Strings`` for
    text) and ``meta`` into ``f`` (:func:`netparity.trace.columnar.compact` makes it the
    copy atomically)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from netparity.trace.scan import Strings

    arrays = []
    for c, t in _TYPES.items():
        v, null = data[c], nulls.get(c)
        mask = null if null is not None and null.any() else None
        if isinstance(v, Strings):
            arrays.append(pa.DictionaryArray.from_arrays(
                pa.array(np.asarray(v.codes, dtype=np.int32), mask=mask),
                pa.array(v.values, type=pa.string())))
        else:
            arrays.append(pa.array(np.asarray(v), type=_arrow_type(t), mask=mask))
    table = pa.Table.from_arrays(arrays, names=list(_TYPES))
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode("utf-8")})
    pq.write_table(table, f, compression="zstd", row_group_size=1 << 20)


class ParquetMembers:
    """A Parquet copy seen as the members :class:`netparity.trace.columnar.Store` reads
    (``meta``, ``i.<col>``, ``f.<col>``, ``n.<col>`` and :meth:`text`), each column decoded
    from the file the first time it is asked for."""

    def __init__(self, path: Path, root: Path):
        self.path = path
        self._pf = inputs.open_parquet(path, within=root, error=TraceError,
                                       what="columnar index", tree="the trace",
                                       columns=arrow_types(), damaged=ValueError)
        self.n = int(self._pf.metadata.num_rows)
        raw = (self._pf.schema_arrow.metadata or {}).get(META_KEY)
        if raw is None:
            raise ValueError("no netparity metadata")
        self.meta = json.loads(raw.decode("utf-8"))
        self._nulls: dict[str, np.ndarray | None] = {}
        #: the rows this reader reads, ``[a, b)`` (None: every row; see :meth:`window`)
        self._rows: tuple[int, int] | None = None
        #: per text column, the last dictionary a window read and its values (shared by the
        #: windows: a file's row groups share one dictionary, converted once)
        self._dicts: dict[str, tuple[Any, list[str]]] = {}

    def window(self, a: int, b: int) -> ParquetMembers:
        """A reader of rows ``[a, b)`` only: each column is decoded from the row groups those
        rows lie in and copied out (a step's rows of a many-step trace, without the other
        steps' rows in memory)."""
        w = copy.copy(self)
        w.n, w._rows, w._nulls = b - a, (a, b), {}
        return w

    def _read(self, name: str) -> Any:
        import pyarrow as pa

        try:
            if self._rows is None:
                col = self._pf.read(columns=[name], use_threads=False).column(0)
            else:
                col = self._read_rows(name, *self._rows)
        except (pa.ArrowException, OSError) as e:
            raise ValueError(f"column {name!r} unreadable ({str(e).splitlines()[0]:.200})") \
                from None
        if len(col) != self.n:
            raise ValueError(f"column {name!r} has {len(col)} rows, not {self.n}")
        if col.null_count:
            self._nulls[name] = np.asarray(col.is_null().to_numpy(zero_copy_only=False),
                                           dtype=bool)
        else:
            self._nulls[name] = None
        return col

    def _read_rows(self, name: str, a: int, b: int) -> Any:
        """Column ``name`` at rows ``[a, b)``, read from the row groups holding them."""
        md = self._pf.metadata
        groups: list[int] = []
        start = first = 0
        for g in range(md.num_row_groups):
            n = md.row_group(g).num_rows
            if start < b and start + n > a:
                if not groups:
                    first = start
                groups.append(g)
            start += n
        col = self._pf.read_row_groups(groups, columns=[name], use_threads=False).column(0)
        return col.slice(a - first, b - a)

    def text(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Codes (int32, NULL as the code of ``''``) and distinct values of text column
        ``name``."""
        try:
            return self._text(name)
        finally:
            _release(self._pf)

    def _text(self, name: str) -> tuple[np.ndarray, list[str]]:
        col = self._read(name)
        values: list[str] = []
        index: dict[str, int] = {}
        parts = []
        last: Any = None  # the previous chunk's dictionary and its remap
        for chunk in col.chunks:
            if last is not None and chunk.dictionary.equals(last[0]):
                # the row groups of a file written at once share one dictionary (a 1M-op
                # side: 5 groups of ~900k module names): converted once
                d, remap = last[1], last[2]
            else:
                seen = self._dicts.get(name)
                if seen is not None and chunk.dictionary.equals(seen[0]):
                    d = seen[1]
                else:
                    d = chunk.dictionary.to_pylist()
                    if any(v is None for v in d):
                        raise ValueError(f"values of {name!r} hold a null")
                    if self._rows is not None:
                        self._dicts[name] = (chunk.dictionary, d)
                remap = np.array([index.setdefault(v, len(index)) for v in d] or [0],
                                 dtype=np.int32)
                last = (chunk.dictionary, d, remap)
            idx = chunk.indices.fill_null(0) if chunk.null_count else chunk.indices
            codes = idx.to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
            if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= len(d)):
                raise ValueError(f"codes of {name!r} out of range")
            if chunk.null_count:  # NULL: the code of '' (what a SQLite scan gives)
                codes = remap[codes]
                codes[chunk.is_null().to_numpy(zero_copy_only=False)] = index.setdefault(
                    "", len(index))
                parts.append(codes)
            else:
                parts.append(remap[codes] if len(d) else codes)
        values = list(index)
        out = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)
        return out.astype(np.int32, copy=False), values

    def _number(self, name: str, dtype: str) -> np.ndarray:
        col = self._read(name)
        fill = -1 if dtype == "i8" else np.nan
        if col.null_count:
            col = col.fill_null(fill)
        a = col.to_numpy()
        if a.dtype != np.dtype(dtype):
            raise ValueError(f"column {name!r} is {a.dtype}, not {np.dtype(dtype)}")
        if self._rows is not None and col.num_chunks == 1:
            a = a.copy()  # a view would keep the whole row group's buffer
        a.flags.writeable = False
        return a

    def __getitem__(self, name: str) -> np.ndarray:
        kind, _, col = name.partition(".")
        if kind in ("i", "f") and _TYPES.get(col) == ("INTEGER" if kind == "i" else "REAL"):
            try:
                return self._number(col, "i8" if kind == "i" else "f8")
            finally:
                _release(self._pf)
        raise KeyError(name)

    def get(self, name: str) -> np.ndarray | None:
        """The NULL mask ``n.<col>`` of a column read already (None: no NULL)."""
        kind, _, col = name.partition(".")
        if kind != "n" or col not in self._nulls:
            raise KeyError(name)
        return self._nulls[col]


def _release(pf: Any) -> None:
    """Hand the memory Arrow's pool holds unused back to the system: what decoding a column
    used and freed (~55 MB for a column of 200k distinct strings), which the pool (mimalloc)
    would otherwise keep for the life of the process, one such block per column read; and the
    pages of the file the read brought in (:func:`netparity.inputs.drop_read_pages`)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
    inputs.drop_read_pages(pf)
