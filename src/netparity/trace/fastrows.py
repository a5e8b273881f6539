"""Index rows to :class:`~netparity.trace.schema.Record` objects, fast.

Reading hundreds of thousands of records is dominated by building Python objects; this loader
does the least per row: tuple unpacking into locals, a dict literal for the statistics (SQL flags
the rare rows holding a NaN statistic, so no row's values are scanned in Python), shapes parsed
once per distinct string, and no dataclass ``__init__``.

It unpacks rows by position, so it is used only while the schema's columns are exactly the ones
it spells out (:data:`FAST_OK`); otherwise the schema's own :func:`row_to_record` reads every
column, so a new column is never dropped or defaulted here.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from netparity.trace.schema import (
    COLUMN_NAMES,
    COUNT_STATS,
    STAT_FIELDS,
    Record,
    row_to_record,
)
from netparity.untrusted import load_json, parse_shape

_STATS = ("min", "max", "mean", "std", "norm", "abs_sum", "nan", "posinf", "neginf", "zeros",
          "fp16_overflow")
_COLUMNS = ("seq", "step", "rank", "kind", "op", "native", "module", "call", "module_call",
            "direction", "role", "arg", "event", "dtype", "shape", "numel",
            *(f"s_{k}" for k in _STATS), "shard", "offset", "nbytes", "hash", "source", "extra")
#: the schema is exactly what the positional loader unpacks (any new column: the slow path)
_FIELDS = {"kind", "op", "native", "module", "call", "module_call", "direction", "role", "arg",
           "dtype", "shape", "step", "rank", "seq", "event", "stats", "shard", "offset",
           "nbytes", "hash", "source", "extra"}
FAST_OK = (STAT_FIELDS == _STATS and COLUMN_NAMES == _COLUMNS
           and {f.name for f in dataclasses.fields(Record)} == _FIELDS)

#: the SELECT list: every column, then a flag for rows holding a NaN statistic (stored as the
#: text 'nan': SQLite turns a NaN REAL into NULL)
SELECT_LIST = (", ".join(f'"{c}"' for c in COLUMN_NAMES)
               + ", ('nan' IN (" + ", ".join(f'"s_{k}"' for k in STAT_FIELDS) + "))")


def rows_to_records(rows: list[tuple[Any, ...]]) -> list[Record]:
    """Rows of ``SELECT {SELECT_LIST}`` as records (same result as ``row_to_record``)."""
    if not FAST_OK:
        return [row_to_record(r[:-1]) for r in rows]
    shapes: dict[str, tuple[int, ...]] = {}
    new = object.__new__
    out: list[Record] = []
    append = out.append
    nan = float("nan")
    for (seq, step, rank, kind, op, native, module, call, module_call, direction, role, arg,
         event, dtype, s, _numel, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, shard, offset,
         nbytes, hsh, source, extra, has_nan) in rows:
        shp = shapes.get(s)
        if shp is None:
            shp = shapes[s] = parse_shape(s)
        if has_nan:
            stats = {k: (nan if v == "nan" else v) for k, v in
                     zip(_STATS, (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10))}
        else:
            stats = {"min": a0, "max": a1, "mean": a2, "std": a3, "norm": a4, "abs_sum": a5,
                     "nan": a6, "posinf": a7, "neginf": a8, "zeros": a9, "fp16_overflow": a10}
        r = new(Record)
        r.__dict__ = {
            "kind": kind, "op": op, "native": native, "module": module, "call": call,
            "module_call": module_call, "direction": direction, "role": role, "arg": arg,
            "dtype": dtype, "shape": shp, "step": step, "rank": rank, "seq": seq,
            "event": event, "stats": stats, "shard": shard, "offset": offset,
            "nbytes": nbytes, "hash": hsh, "source": source,
            "extra": load_json(extra, what="extra") if extra else {},
        }
        append(r)
    return out


class StatTable:
    """The statistics of one scan's rows: what :class:`ScannedRecord`\\ s read their ``stats``
    from, and what batch code reads many rows of at once.

    It holds no copy: it reads the scan's own ``s_*`` columns (views of a columnar copy's
    arrays) and gathers the rows asked for. ``floats[rows]`` is a ``(len(rows), 11)`` float64 matrix, column ``k`` ``s_<STAT_FIELDS[k]>``
    (counts converted exactly); ``null`` the same shape of NULL flags (``floats`` holds NaN or
    -1 there); ``floats[rows, k]`` one statistic. ``numel`` is the index's element counts,
    ``norm_ok[i]`` whether row ``i``'s norm is not NULL.
    """

    __slots__ = ("floats", "null", "numel", "norm_ok", "_ints", "_vals")

    def __init__(self, cols: Any):
        self.numel = cols["numel"]
        self._vals: list[np.ndarray] = [cols[f"s_{name}"] for name in _STATS]
        self.floats = _Gather(list(self._vals), np.float64, cols.n)
        masks = [cols.nulls.get(f"s_{name}") for name in _STATS]
        self.null = _Gather(masks, np.bool_, cols.n)
        self._ints = [name in COUNT_STATS for name in _STATS]
        self.norm_ok = _NotNull(masks[_STATS.index("norm")])

    def row_stats(self, i: int) -> dict[str, float | int | None]:
        """Row ``i``'s statistics as ``row_to_record`` makes them (ints for counts, None for
        NULL, NaN for a NaN statistic)."""
        return {name: (None if nul is not None and nul[i] else int(float(v[i])) if is_int
                       else float(v[i]))
                for name, v, nul, is_int in zip(_STATS, self._vals, self.null.cols,
                                                self._ints)}


class _Gather:
    """Equal-length columns seen as the ``(n, len(columns))`` matrix of them, of which only
    the rows asked for are made (a column of None: all False/zero). Indexing: ``[rows]``,
    ``[i]``, ``[rows, k]``."""

    __slots__ = ("cols", "dtype", "shape")

    def __init__(self, cols: list[np.ndarray | None], dtype: Any, n: int):
        self.cols, self.dtype, self.shape = cols, np.dtype(dtype), (n, len(cols))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        rows, k = key if isinstance(key, tuple) else (key, None)
        scalar = isinstance(rows, (int, np.integer))
        rows = np.arange(self.shape[0])[rows] if isinstance(rows, slice) else np.asarray(
            [rows] if scalar else rows)
        if rows.dtype == np.bool_:
            rows = np.nonzero(rows)[0]
        elif not rows.size:  # [] (float64 to NumPy): no rows
            rows = rows.astype(np.intp)
        if k is not None:
            c = self.cols[k]
            got = np.zeros(len(rows), self.dtype) if c is None else np.asarray(
                c[rows], dtype=self.dtype)
            return got[0] if scalar else got
        out = np.zeros((len(rows), self.shape[1]), dtype=self.dtype)
        for j, c in enumerate(self.cols):
            if c is not None:
                out[:, j] = c[rows]
        return out[0] if scalar else out


class _NotNull:
    """``[i]``: whether row ``i`` of a column with NULL mask ``mask`` (None: none) is not
    NULL, as a Python bool."""

    __slots__ = ("mask",)

    def __init__(self, mask: np.ndarray | None):
        self.mask = mask

    def __getitem__(self, i: int) -> bool:
        return self.mask is None or not self.mask[i]


class ScannedRecord(Record):
    """A :class:`Record` read by a column scan whose ``stats`` dict is made on first access
    (from its :class:`StatTable`): a comparison that judges statistics as whole arrays never
    makes the ~10^6 dicts and floats. ``numel`` is the index's count. It equals, pickles and
    copies as the plain :class:`Record` it stands for."""

    @property  # type: ignore[override]
    def stats(self) -> dict[str, float | int | None]:
        d = self.__dict__
        st = d.get("_stats")
        if st is None:
            st = d["_stats"] = d["_table"].row_stats(d["_row"])
        return st  # type: ignore[no-any-return]

    @stats.setter
    def stats(self, value: dict[str, float | int | None]) -> None:
        self.__dict__["_stats"] = value

    @property
    def numel(self) -> int:
        n = self.__dict__.get("_numel")  # absent after dataclasses.replace: from the shape
        return int(n) if n is not None else Record.numel.fget(self)  # type: ignore[attr-defined]

    def pristine_row(self) -> tuple[StatTable, int] | None:
        """(table, row) while ``stats`` was never made (so the table's row is what it holds)."""
        d = self.__dict__
        return None if "_stats" in d else (d["_table"], d["_row"])

    def plain(self) -> Record:
        """The same record as a plain :class:`Record`."""
        return Record(*(getattr(self, n) for n in _FIELD_ORDER))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Record):
            return all(getattr(self, n) == getattr(other, n) for n in _FIELD_ORDER)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Record, tuple(getattr(self, n) for n in _FIELD_ORDER))

    def __copy__(self) -> Record:
        return self.plain()


_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(Record))


class ScannedRows:
    """Every row of a scan of every index column, made into :class:`ScannedRecord`\\ s a few
    at a time: a comparison asks for the records of the calls it compares, and at op level
    the module calls' records (a third of the rows) are never made.

    ``cols`` (the scan) stays available: the comparison engine pairs the common case's tensors
    as row numbers of it (:mod:`netparity.compare.pairtable`) and asks for records only of the
    few pairs it shows. The Python lists every record is made from are built once, for a
    request of a large share of the rows (:data:`_FEW`); fewer rows are picked from the
    arrays."""

    def __init__(self, cols: Any):
        if not FAST_OK:
            raise NotImplementedError("the schema has columns the fast loader does not know")
        self.cols = cols
        self.table = StatTable(cols)
        ex = cols["extra"]
        self._extra = [ex.values[k] if ex.values[k] else None for k in range(len(ex.values))]
        self._lists: list[list[Any]] | None = None
        self._shapes: list[tuple[int, ...]] | None = None

    def __len__(self) -> int:
        return int(self.cols.n)

    def shapes(self) -> list[tuple[int, ...]]:
        """The shape tuple of each distinct ``shape`` value (index: the column's codes)."""
        if self._shapes is None:
            self._shapes = [parse_shape(s) for s in self.cols["shape"].values]
        return self._shapes

    def _columns(self, rows: list[int]) -> list[Any]:
        """The values of rows ``rows`` column by column (what ``zip`` makes records of)."""
        if self._lists is None and len(rows) * _FEW < len(self):
            # a minority of the rows: picked from the arrays (no list of every row)
            return _base_lists(self.cols, self.shapes(), np.asarray(rows, dtype=np.int64))
        if self._lists is None:
            self._lists = _base_lists(self.cols, self.shapes())
        if len(rows) == 1:
            return [(lst[rows[0]],) for lst in self._lists]
        pick = operator.itemgetter(*rows)
        return [pick(lst) for lst in self._lists]

    def records(self, rows: Iterable[int]) -> list[Record]:
        """The records of rows ``rows`` (positions in the scan), in that order."""
        rows = list(rows)
        if not rows:
            return []
        # the rows' values column by column, picked in C (no tuple per row of the whole scan)
        vals = self._columns(rows)
        new = object.__new__
        st, extra = self.table, self._extra
        out: list[Record] = []
        append = out.append
        for i, (seq, step, rank, kind, op, native, module, call, module_call, direction, role,
                arg, event, dtype, shp, shard, offset, nbytes, hsh, source, ec,
                numel) in zip(rows, zip(*vals)):
            r = new(ScannedRecord)
            x = extra[ec]
            r.__dict__ = {
                "kind": kind, "op": op, "native": native, "module": module, "call": call,
                "module_call": module_call, "direction": direction, "role": role, "arg": arg,
                "dtype": dtype, "shape": shp, "step": step, "rank": rank, "seq": seq,
                "event": event, "shard": shard, "offset": offset, "nbytes": nbytes,
                "hash": hsh, "source": source,
                "extra": load_json(x, what="extra") if x is not None else {},
                "_table": st, "_row": i, "_numel": numel,
            }
            append(r)
        return out


#: a request for fewer than 1/_FEW of a scan's rows picks them from the arrays; a larger one
#: builds the Python lists of every row once (then every request picks from those)
_FEW = 4


def _base_lists(cols: Any, shapes: list[tuple[int, ...]] | None = None,
                rows: np.ndarray | None = None) -> list[list[Any]]:
    """The non-statistics columns of a full scan as Python lists in :class:`Record` field
    order (shapes as tuples, NULLs as None; ``extra`` as codes into its value table), then
    ``numel``; of rows ``rows`` only when given."""
    if shapes is None:
        shapes = [parse_shape(s) for s in cols["shape"].values]
    sel: Any = slice(None) if rows is None else rows

    def ints(c: str) -> list[Any]:
        return cols[c][sel].tolist()  # type: ignore[no-any-return]

    def texts(c: str) -> list[Any]:
        s = cols[c]
        if rows is not None:  # a few rows: no table of every distinct value
            vals = s.values
            return [vals[k] for k in s.codes[rows].tolist()]
        table = np.empty(len(s.values), dtype=object)
        table[:] = s.values
        return table[s.codes].tolist()  # type: ignore[no-any-return]

    table = np.empty(len(shapes) + 1, dtype=object)
    table[:-1] = shapes
    shape_l = table[cols["shape"].codes[sel]].tolist() if cols.n else []
    tail = []
    for c in ("shard", "offset", "nbytes", "hash"):
        lst = cols[c][sel].tolist() if c in ("offset", "nbytes") else texts(c)
        for i in np.nonzero(cols.null(c)[sel])[0].tolist():
            lst[i] = None
        tail.append(lst)
    return [ints("seq"), ints("step"), ints("rank"), texts("kind"), texts("op"),
            texts("native"), texts("module"), ints("call"), ints("module_call"),
            texts("direction"), texts("role"), texts("arg"), ints("event"), texts("dtype"),
            shape_l, *tail, texts("source"), cols["extra"].codes[sel].tolist(), ints("numel")]


def columns_to_records(cols: Any, *, lazy_stats: bool = False) -> list[Record]:
    """A scan of every index column (:data:`COLUMN_NAMES`, a
    :class:`~netparity.trace.scan.Columns`) as records, equal to ``row_to_record`` of the same
    rows: NULL statistics are ``None``, a NaN statistic is ``nan``, count statistics are ints.
    With ``lazy_stats``, :class:`ScannedRecord`\\ s sharing one :class:`StatTable`.

    The per-row work is one ``zip`` over column lists and one or two dicts; every distinct text
    value and shape exists once, and rows with a NULL statistic (rare) are patched afterwards.
    """
    if not FAST_OK:
        raise NotImplementedError("the schema has columns the fast loader does not know")
    if lazy_stats:
        return ScannedRows(cols).records(range(cols.n))
    extra_v = cols["extra"]
    has_extra = [bool(x) for x in extra_v.values] or [False]
    new = object.__new__
    out: list[Record] = []
    append = out.append
    stat_l = [cols[f"s_{k}"].tolist() for k in _STATS]
    keys = _STATS
    for (seq, step, rank, kind, op, native, module, call, module_call, direction, role, arg,
         event, dtype, shp, shard, offset, nbytes, hsh, source, ec, _n, *stv) in zip(
            *_base_lists(cols), *stat_l):
        rec = new(Record)
        rec.__dict__ = {
            "kind": kind, "op": op, "native": native, "module": module, "call": call,
            "module_call": module_call, "direction": direction, "role": role, "arg": arg,
            "dtype": dtype, "shape": shp, "step": step, "rank": rank, "seq": seq,
            "event": event, "stats": dict(zip(keys, stv)), "shard": shard, "offset": offset,
            "nbytes": nbytes, "hash": hsh, "source": source,
            # a fresh dict per record, as row_to_record makes (callers may add to it)
            "extra": load_json(extra_v.values[ec], what="extra") if has_extra[ec] else {},
        }
        append(rec)
    # NULL statistics: None (the arrays hold NaN or -1 there)
    for k in _STATS:
        for i in np.nonzero(cols.null(f"s_{k}"))[0].tolist():
            out[i].stats[k] = None
    return out
