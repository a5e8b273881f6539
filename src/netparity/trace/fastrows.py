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
import json
from typing import Any

from netparity.trace.schema import COLUMN_NAMES, STAT_FIELDS, Record, row_to_record

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
    loads = json.loads
    nan = float("nan")
    for (seq, step, rank, kind, op, native, module, call, module_call, direction, role, arg,
         event, dtype, s, _numel, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, shard, offset,
         nbytes, hsh, source, extra, has_nan) in rows:
        shp = shapes.get(s)
        if shp is None:
            shp = shapes[s] = tuple(loads(s))
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
            "extra": loads(extra) if extra else {},
        }
        append(r)
    return out
