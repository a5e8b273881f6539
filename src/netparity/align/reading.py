"""Reading a trace index for alignment: every record of a query (:func:`load_records`), and
the records of calls read on first access (:class:`LazyCall`).

:func:`~netparity.align.core.align_traces` reads only what alignment looks at
(:mod:`netparity.align.tableread`); the comparison engine then asks for the records of the calls
it compares, and :class:`RecordSource` reads them all at once with :func:`load_records`, so a
caller that never looks at records (``netparity align``) never pays for them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from netparity.align.model import Call, calls_from_records
from netparity.errors import UsageError
from netparity.gcpause import paused_gc
from netparity.trace.reader import _SELECT, Trace, _as_list
from netparity.trace.schema import COLUMN_NAMES, STAT_FIELDS, Record, row_to_record

#: the fast loader below unpacks rows by position and spells the statistics out
_FAST_STATS = ("min", "max", "mean", "std", "norm", "abs_sum", "nan", "posinf", "neginf", "zeros",
               "fp16_overflow")
_FAST_COLUMNS = ("seq", "step", "rank", "kind", "op", "native", "module", "call", "module_call",
                 "direction", "role", "arg", "event", "dtype", "shape",
                 *(f"s_{k}" for k in _FAST_STATS), "shard", "offset", "nbytes", "hash", "source",
                 "extra")
_FAST_SELECT = (
    "SELECT " + ", ".join(f'"{c}"' for c in _FAST_COLUMNS)
    # NaN statistics are stored as the text 'nan' (SQLite turns a NaN REAL into NULL): flag
    # the rare rows holding one in SQL instead of scanning every row's values in Python
    + ", ('nan' IN (" + ", ".join(f'"s_{k}"' for k in _FAST_STATS) + ")) FROM records"
)
_FAST_OK = STAT_FIELDS == _FAST_STATS and set(_FAST_COLUMNS) <= set(COLUMN_NAMES)


def _fast_records(rows: list[tuple[Any, ...]]) -> list[Record]:
    """Rows of ``_FAST_SELECT`` to :class:`Record` objects (same result as ``row_to_record``).

    The per-row work is what remains after everything else was hoisted out: tuple unpacking
    into locals, a dict literal for the statistics (no NaN scan: SQL flags those rows), shapes
    parsed once per distinct string, and no dataclass ``__init__``.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    new = object.__new__
    out: list[Record] = []
    append = out.append
    loads = json.loads
    nan = float("nan")
    for (seq, step, rank, kind, op, native, module, call, module_call, direction, role, arg,
         event, dtype, s, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, shard, offset, nbytes,
         hsh, source, extra, has_nan) in rows:
        shp = shapes.get(s)
        if shp is None:
            shp = shapes[s] = tuple(loads(s))
        if has_nan:
            stats = {k: (nan if v == "nan" else v) for k, v in
                     zip(_FAST_STATS, (a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10))}
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
            "extra": loads(extra) if extra else {},
        }
        append(r)
    return out


def load_records(
    trace: Trace,
    *,
    rank: int = 0,
    step: int | Iterable[int] | None = None,
    direction: str | Iterable[str] | None = None,
    kinds: Iterable[str] | None = None,
) -> list[Record]:
    """Records of one rank in execution order (what alignment uses: about twice as
    fast as :meth:`Trace.records <netparity.trace.reader.Trace.records>`).

    Example:
        >>> recs = load_records(open_trace("runs/ref"), kinds=("module",))   # doctest: +SKIP
    """
    check_rank(trace, rank)
    cond, params = where_clause(step, direction, kinds)
    if _FAST_OK:
        return _fast_records(trace._query(_FAST_SELECT + cond + " ORDER BY seq", params, rank))
    # the schema changed under the positional reader: the schema's own (slower) conversion
    return [row_to_record(r) for r in trace._query(_SELECT + cond + " ORDER BY seq", params,
                                                   rank)]


def count_records(trace: Trace, *, rank: int = 0, step: int | Iterable[int] | None = None,
                  direction: str | Iterable[str] | None = None) -> int:
    """How many records of a rank a query selects, of any kind (SQLite counts them on the
    step index without reading the table)."""
    check_rank(trace, rank)
    cond, params = where_clause(step, direction, None)
    return int(trace._query("SELECT count(*) FROM records" + cond, params, rank)[0][0])


def check_rank(trace: Trace, rank: int) -> None:
    if rank not in trace.ranks:
        raise UsageError(f"{trace.path}: no rank {rank} (ranks: {trace.ranks})")


def where_clause(step: int | Iterable[int] | None, direction: str | Iterable[str] | None,
                 kinds: Iterable[str] | None) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (never empty, so callers can append ``AND ...``) and its values."""
    where: list[str] = ["1"]
    params: list[Any] = []
    for col, val in (("step", step), ("direction", direction), ("kind", kinds)):
        if val is None:
            continue
        vals = _as_list(val) or []
        where.append(f'"{col}" IN ({",".join("?" for _ in vals)})')
        params.extend(vals)
    return " WHERE " + " AND ".join(where), params


# ---- calls whose records are read on first access ----------------------------------------------

class RecordSource:
    """Reads the records of one side's calls, all at once, when the first of them is asked for
    (the comparison engine asks for nearly all; ``netparity align`` for none)."""

    def __init__(self, trace: Trace, rank: int, step: Any, direction: Any, kinds: Any):
        self.trace, self.rank, self.step, self.direction = trace, rank, step, direction
        self.kinds = tuple(kinds)
        self.lock = threading.Lock()
        self.calls: dict[tuple[int, int, int], Call] | None = None

    def get(self, key: tuple[int, int, int]) -> tuple[list[Record], list[Record]]:
        with self.lock:
            if self.calls is None:
                self.calls = self._read()
        c = self.calls.get(key)
        return (c.inputs, c.outputs) if c is not None else ([], [])

    def _read(self) -> dict[tuple[int, int, int], Call]:
        with paused_gc():  # hundreds of thousands of objects and no garbage
            recs = load_records(self.trace, rank=self.rank, step=self.step,
                                direction=self.direction, kinds=self.kinds)
            return {(c.rank, c.step, c.event): c for c in calls_from_records(recs)}


class _RecordsField:
    """``inputs`` / ``outputs`` of a :class:`LazyCall`: read on first access, then kept."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: LazyCall | None, owner: type) -> Any:
        if obj is None:
            return self
        d = obj.__dict__
        if self.name not in d:
            obj._load()
        return d[self.name]

    def __set__(self, obj: LazyCall, value: list[Record]) -> None:
        obj.__dict__[self.name] = value


class LazyCall(Call):
    """A :class:`~netparity.align.model.Call` of :func:`~netparity.align.tableread.read_table`:
    ``inputs`` and ``outputs`` are read from the trace on first access (the trace directory must
    still exist then); ``seq`` and ``to_json`` need no records. Pickles and copies as a plain
    ``Call``."""

    inputs = _RecordsField()  # type: ignore[assignment]
    outputs = _RecordsField()  # type: ignore[assignment]

    def _load(self) -> None:
        d = self.__dict__
        ins, outs = d["_source"].get((d["rank"], d["step"], d["event"]))
        d.setdefault("inputs", ins)
        d.setdefault("outputs", outs)

    @property
    def seq(self) -> int:
        return int(self.__dict__["_seq"])

    def _io_shapes(self) -> tuple[list[list[int]], list[list[int]]]:
        if "inputs" in self.__dict__:
            return super()._io_shapes()
        ins, outs = self.__dict__["_shapes"]
        return [list(s) for s in ins], [list(s) for s in outs]

    def __reduce__(self) -> tuple[Any, ...]:
        return (Call, tuple(getattr(self, f.name) for f in fields(Call)))
