"""Column scans of a trace index: the columns a caller names, for the rows a filter selects,
as NumPy arrays.

This is the way into a trace's index for everything outside :mod:`netparity.trace` (alignment,
comparison, analyzers): no caller writes SQL or knows a file name. The scan knows the schema's
columns (:data:`~netparity.trace.schema.COLUMN_NAMES`) and refuses names it does not have, so a
new index column never reaches a reader as a silent default.

What a scan returns (:class:`Columns`):

* integer columns (``seq``, ``step``, ``event``, counts ...) as ``int64`` arrays;
* real statistics (``s_mean`` ...) as ``float64`` arrays, NaN where the index holds NULL or a
  NaN statistic; :meth:`Columns.null` tells the two apart;
* text columns as :class:`Strings`: ``int32`` codes into a table of the distinct values, built
  without one Python object per row (SQLite's ``group_concat`` joins a column into one string in
  C, which is split once; every distinct value then exists once).

Example:
    >>> tr = open_trace("runs/ref")                                     # doctest: +SKIP
    >>> cols = tr.scan(["seq", "role", "s_norm"], step=0, kind="module")  # doctest: +SKIP
    >>> is_out = cols["role"] == "output"                                # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import TYPE_CHECKING, Any

import numpy as np

from netparity.errors import TraceError, UsageError
from netparity.trace import columnar
from netparity.trace.schema import COLUMNS

if TYPE_CHECKING:
    from netparity.trace.reader import Trace

#: SQL type of every index column, by name
_TYPES: dict[str, str] = {c: t.split()[0] for c, t in COLUMNS}
_TEXT = frozenset(c for c, t in _TYPES.items() if t == "TEXT")
_REAL = frozenset(c for c, t in _TYPES.items() if t == "REAL")
#: integer columns that may hold NULL (payload location of records without one)
#: columns that may hold NULL (payload location, hash, extra of records without one)
_NULLABLE = frozenset(c for c, t in COLUMNS if "NOT NULL" not in t and "PRIMARY" not in t)
_SEP = "\x1e"  # joins one text column in a group_concat; a value holding it falls back to rows
_CHUNK = 500  # values per "IN (...)" list, below every SQLite variable limit
#: filters that take a value or a list of values and match exactly
FILTER_COLUMNS = ("seq", "step", "kind", "direction", "role", "arg", "event", "dtype")


def check_columns(names: Iterable[str]) -> list[str]:
    """``names`` as a list, or a one-line error naming the first one the schema lacks."""
    out = list(names)
    for c in out:
        if c not in _TYPES:
            raise UsageError(
                f"trace index has no column {c!r} (columns: {', '.join(_TYPES)})")
    return out


class Strings:
    """A text column: ``codes`` (``int32``, one per row) into ``values`` (each distinct string
    once). Compare with a string to get a boolean mask without touching every row's text.

    Example:
        >>> s = Strings(np.array([0, 1, 0], np.int32), ["input", "output"])
        >>> (s == "input").tolist()
        [True, False, True]
    """

    __slots__ = ("codes", "values")

    def __init__(self, codes: np.ndarray, values: Sequence[str]):
        self.codes = codes
        self.values = list(values)

    def __len__(self) -> int:
        return len(self.codes)

    def code(self, value: str) -> int:
        """The code of ``value`` (-1 when no row holds it)."""
        try:
            return self.values.index(value)
        except ValueError:
            return -1

    def __eq__(self, value: object) -> np.ndarray:  # type: ignore[override]
        if not isinstance(value, str):
            return NotImplemented
        return self.codes == self.code(value)

    def __ne__(self, value: object) -> np.ndarray:  # type: ignore[override]
        if not isinstance(value, str):
            return NotImplemented
        return self.codes != self.code(value)

    def isin(self, values: Iterable[str]) -> np.ndarray:
        """Mask of rows whose value is one of ``values``."""
        want = set(values)
        codes = [k for k, v in enumerate(self.values) if v in want]
        return np.isin(self.codes, np.array(codes, dtype=np.int32))

    def map(self, fn: Any, dtype: Any = object) -> np.ndarray:
        """``fn`` of every row's value, computed once per distinct value."""
        table = np.array([fn(v) for v in self.values] or [fn("")], dtype=dtype)
        return table[self.codes] if len(self.values) else np.zeros(0, dtype=dtype)

    def objects(self) -> np.ndarray:
        """The column as an object array (each distinct string object shared)."""
        table = np.empty(len(self.values), dtype=object)
        table[:] = self.values
        return table[self.codes]

    def tolist(self) -> list[str]:
        return self.objects().tolist()

    def take(self, idx: np.ndarray) -> Strings:
        """Rows ``idx`` (same string table)."""
        return Strings(self.codes[idx], self.values)

    __hash__ = None  # type: ignore[assignment]


@dataclass
class Columns(Mapping[str, Any]):
    """The result of a scan: one array (or :class:`Strings`) per requested column, all of the
    same length, rows in the order asked for (sequence order by default)."""

    data: dict[str, Any]
    nulls: dict[str, np.ndarray]
    n: int

    def __getitem__(self, name: str) -> Any:
        try:
            return self.data[name]
        except KeyError:
            raise UsageError(f"column {name!r} was not scanned "
                             f"(scanned: {', '.join(self.data)})") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def null(self, name: str) -> np.ndarray:
        """Mask of rows where column ``name`` is NULL in the index (all False for columns that
        cannot be)."""
        m = self.nulls.get(name)
        return m if m is not None else np.zeros(self.n, dtype=bool)


def _filter_values(filters: Mapping[str, Any]) -> list[tuple[str, list[Any]]]:
    """Exact-match filters as ``(column, values)``, checked against the schema (``None``
    filters dropped; ``nonempty`` kept as ``("nonempty", columns)``)."""
    out: list[tuple[str, list[Any]]] = []
    for col, val in filters.items():
        if val is None:
            continue
        if col == "nonempty":  # text columns that must hold something (not '' nor NULL)
            out.append((col, check_columns([val] if isinstance(val, str) else val)))
            continue
        if col not in FILTER_COLUMNS:
            raise UsageError(f"cannot filter a trace scan on {col!r} "
                             f"(filters: {', '.join(FILTER_COLUMNS)}, nonempty, module, op, "
                             "name)")
        vals = [val] if isinstance(val, (str, int, np.integer)) else list(val)
        out.append((col, [int(v) if isinstance(v, np.integer) else v for v in vals]))
    return out


def _where(filters: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """A ``WHERE`` clause (never empty) and its values for exact-match filters."""
    where: list[str] = ["1"]
    params: list[Any] = []
    for col, vals in _filter_values(filters):
        if col == "nonempty":
            where += [f'"{c}" <> \'\'' for c in vals]
            continue
        where.append(f'"{col}" IN ({",".join("?" for _ in vals)})')
        params.extend(vals)
    return " WHERE " + " AND ".join(where), params


def _ints(s: str | None, n: int) -> np.ndarray | None:
    """A ``group_concat`` of ``n`` integers as an int64 array (None when it is not one)."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if s is None:
        return None
    a = np.fromstring(s, dtype=np.int64, sep=",")  # type: ignore[call-overload]
    return a if len(a) == n else None


def _strings(vals: Sequence[str]) -> Strings:
    """Codes and table of a list of strings, values in first-seen order. Both steps run in C
    (``dict.fromkeys`` for the distinct values, ``map`` of the table's ``__getitem__`` for the
    codes): no Python-level code per row."""
    values = list(dict.fromkeys(vals))
    table = {v: i for i, v in enumerate(values)}
    codes = np.fromiter(map(table.__getitem__, vals), dtype=np.int32, count=len(vals))
    return Strings(codes, values)


def _floats(rows: Sequence[tuple[Any, ...]], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of REAL values as a float matrix and a NULL mask ('nan' text -> NaN, not NULL)."""
    try:  # the usual case, all numbers: one pass without a list in between
        flat = np.fromiter(chain.from_iterable(rows), dtype=np.float64, count=width * len(rows))
        m = flat.reshape(len(rows), width)
    except (TypeError, ValueError):
        obj = np.array(rows, dtype=object).reshape(len(rows), width)
        obj[(obj == None) | (obj == "nan")] = np.nan  # noqa: E711 (elementwise)
        m = obj.astype(np.float64)
    null = np.zeros((len(rows), width), dtype=bool)
    # NumPy turns None into NaN without a word: the (rare) rows holding a NaN say which it was
    for i in np.nonzero(np.isnan(m).any(axis=1))[0].tolist():
        null[i] = [v is None for v in rows[i]]
    return m, null


def scan(
    trace: Trace,
    columns: Iterable[str],
    *,
    rank: int = 0,
    module: str | None = None,
    op: str | None = None,
    name: str | None = None,
    **filters: Any,
) -> Columns:
    """Columns ``columns`` of rank ``rank``'s records that the filters select, in sequence order.

    Exact-match filters (a value or a list of values): ``seq``, ``step``, ``kind``,
    ``direction``, ``role``, ``arg``, ``event``, ``dtype``. ``nonempty``: text columns that must
    not be empty or NULL (``nonempty="source"``). Glob filters: ``module`` (module path), ``op``
    (canonical or native op name), ``name`` (any of the three).

    Raises:
        UsageError: a column or filter the schema does not have, or a rank the trace lacks.
        TraceError: a corrupt index.
    """
    cols = check_columns(columns)
    if rank not in trace.ranks:
        raise UsageError(f"{trace.path}: no rank {rank} (ranks: {trace.ranks})")
    globs = {"module": module, "op": op, "name": name}
    need = list(dict.fromkeys([*cols, "seq"] + (
        ["module", "op", "native"] if any(v is not None for v in globs.values()) else [])))
    st = columnar.store(trace, rank)
    seqs = filters.pop("seq", None)
    if st is not None:  # the columnar copy of a complete trace: no SQLite, no chunks
        out = columnar.scan_store(st, need, {**filters, "seq": seqs})
    elif seqs is not None:
        seq_list = sorted({int(s) for s in ([seqs] if isinstance(seqs, (int, np.integer))
                                            else list(seqs))})
        parts = [_scan_sql(trace, rank, need, {**filters, "seq": seq_list[k : k + _CHUNK]})
                 for k in range(0, len(seq_list), _CHUNK)] or [
                     _scan_sql(trace, rank, need, {**filters, "seq": []})]
        out = _concat(parts, need)
    else:
        out = _scan_sql(trace, rank, need, filters)
    if any(v is not None for v in globs.values()):
        out = _apply_globs(out, module, op, name)
    data = {c: out.data[c] for c in cols}
    nulls = {c: m for c, m in out.nulls.items() if c in cols}
    for v in (*data.values(), *nulls.values()):
        # read-only whichever way the rows were read: a scan of every row of a columnar
        # copy hands out views of its memory map (no copy of ~100 MB per 100k-op side)
        (v.codes if isinstance(v, Strings) else v).flags.writeable = False
    return Columns(data, nulls, out.n)


def _scan_sql(trace: Trace, rank: int, cols: list[str], filters: Mapping[str, Any]) -> Columns:
    cond, params = _where(filters)
    ints = [c for c in cols if c not in _TEXT and c not in _REAL]
    texts = [c for c in cols if c in _TEXT]
    reals = [c for c in cols if c in _REAL]
    # integers and text in one scan, each column one group_concat string built in C
    # (NULL handling only where the schema allows NULL: every wrapper costs SQLite per row)
    exprs = [f'group_concat(ifnull("{c}", -1))' if c in _NULLABLE else f'group_concat("{c}")'
             for c in ints] + [
        f'group_concat(ifnull("{c}", \'\'), char(30))' if c in _NULLABLE
        else f'group_concat("{c}", char(30))' for c in texts]
    nul = [c for c in ints + texts if c in _NULLABLE]
    exprs += [f'sum("{c}" IS NULL)' for c in nul]
    sql = f"SELECT count(*), {', '.join(exprs)} FROM records{cond} ORDER BY seq"
    data: dict[str, Any] = {}
    nulls: dict[str, np.ndarray] = {}
    n = -1
    try:
        row: tuple[Any, ...] | None = trace._query(sql, params, rank)[0]
    except TraceError:  # longer than SQLite's string limit: rows instead
        row = None
    ok = row is not None
    if row is not None:
        n = int(row[0])
        got = row[1:]
        for c, s in zip(ints, got):
            a = _ints(s, n)
            if a is None:
                ok = False
                break
            data[c] = a
        if ok:
            for c, s in zip(texts, got[len(ints):]):
                parts = s.split(_SEP) if n else []
                if len(parts) != n:
                    ok = False
                    break
                data[c] = _strings(parts)
        has_null = dict(zip(nul, got[len(ints) + len(texts):]))
    if not ok:
        data = {}
        has_null = {c: 1 for c in nul}
        n = -1
    # group_concat gives no order guarantee: every scan reads seq and sorts by it below
    need_rows = [c for c in ints + texts if c not in data or has_null.get(c)]
    if need_rows or reals:
        # seq comes along only when the group_concat scan did not deliver it (both reads are
        # in sequence order, so their rows line up)
        rcols = list(dict.fromkeys(([] if "seq" in data else ["seq"]) + [*need_rows, *reals]))
        rows = trace._query(
            f"SELECT {', '.join(chr(34) + c + chr(34) for c in rcols)} FROM records{cond}"
            " ORDER BY seq", params, rank)
        n_rows = len(rows)
        if n >= 0 and n_rows != n:
            raise TraceError(f"{trace.path}/rank{rank}: the index changed while being read")
        n = n_rows
        if "seq" in data:  # align the group_concat columns to this (seq-ordered) read
            o = np.argsort(data["seq"], kind="stable")
            for c in list(data):
                data[c] = _take(data[c], o)
        for k, c in enumerate(rcols):
            if c in reals or c == "seq" and "seq" in data:
                continue
            vals = [r[k] for r in rows]
            if c in _TEXT:
                nulls[c] = np.fromiter((v is None for v in vals), dtype=bool, count=n)
                data[c] = _strings(["" if v is None else v for v in vals])
            else:
                nulls[c] = np.fromiter((v is None for v in vals), dtype=bool, count=n)
                data[c] = np.fromiter((-1 if v is None else v for v in vals), dtype=np.int64,
                                      count=n)
        if reals:
            k0 = len(rcols) - len(reals)
            m, null = _floats([r[k0:] for r in rows], len(reals))
            for j, c in enumerate(reals):
                data[c] = m[:, j].copy()
                nulls[c] = null[:, j].copy()
    else:
        o = np.argsort(data["seq"], kind="stable")
        data = {c: _take(v, o) for c, v in data.items()}
    return Columns(data, nulls, max(n, 0))


def _take(v: Any, idx: np.ndarray) -> Any:
    return v.take(idx) if isinstance(v, Strings) else v[idx]


def _concat(parts: list[Columns], cols: list[str]) -> Columns:
    """Scans of disjoint sequence ranges joined, in sequence order."""
    data: dict[str, Any] = {}
    nulls: dict[str, np.ndarray] = {}
    for c in cols:
        vs = [p.data[c] for p in parts]
        if isinstance(vs[0], Strings):
            table: dict[str, int] = {}
            codes = []
            for s in vs:
                remap = np.array([table.setdefault(v, len(table)) for v in s.values] or [0],
                                 dtype=np.int32)
                codes.append(remap[s.codes] if len(s.values) else s.codes)
            data[c] = Strings(np.concatenate(codes) if codes else np.zeros(0, np.int32),
                              list(table))
        else:
            data[c] = np.concatenate(vs)
        if any(c in p.nulls for p in parts):
            nulls[c] = np.concatenate([p.null(c) for p in parts])
    n = sum(p.n for p in parts)
    o = np.argsort(data["seq"], kind="stable")
    return Columns({c: _take(v, o) for c, v in data.items()},
                   {c: m[o] for c, m in nulls.items()}, n)


def _apply_globs(cols: Columns, module: str | None, op: str | None, name: str | None) -> Columns:
    import fnmatch

    keep = np.ones(cols.n, dtype=bool)

    def match(col: str, pat: str) -> np.ndarray:
        s: Strings = cols.data[col]
        return s.map(lambda v: fnmatch.fnmatchcase(v, pat), dtype=bool)

    if module is not None:
        keep &= match("module", module)
    if op is not None:
        keep &= match("op", op) | match("native", op)
    if name is not None:
        keep &= match("module", name) | match("op", name) | match("native", name)
    idx = np.nonzero(keep)[0]
    return Columns({c: _take(v, idx) for c, v in cols.data.items()},
                   {c: m[idx] for c, m in cols.nulls.items()}, len(idx))


def count(trace: Trace, *, rank: int = 0, **filters: Any) -> int:
    """How many records of rank ``rank`` the exact-match filters select (no rows are read)."""
    if rank not in trace.ranks:
        raise UsageError(f"{trace.path}: no rank {rank} (ranks: {trace.ranks})")
    cond, params = _where(filters)
    return int(trace._query("SELECT count(*) FROM records" + cond, params, rank)[0][0])
