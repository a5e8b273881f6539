"""Reading a trace index for alignment: every record of a query (:func:`load_records`), and
the records of calls read on first access (:class:`LazyCall`).

:func:`~netparity.align.core.align_traces` reads only what alignment looks at
(:mod:`netparity.align.tableread`); the comparison engine then asks for the records of the calls
it compares, and :class:`RecordSource` reads them all at once with :func:`load_records`, so a
caller that never looks at records (``netparity align``) never pays for them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

import numpy as np

from netparity.align.model import Call, _arg_key, calls_from_records
from netparity.errors import UsageError
from netparity.gcpause import paused_gc
from netparity.trace import fastrows
from netparity.trace.reader import Trace
from netparity.trace.scan import Columns
from netparity.trace.schema import COLUMN_NAMES, Record


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
    return trace.load_records(rank=rank, step=step, direction=direction,
                              kind=None if kinds is None else list(kinds))


def count_records(trace: Trace, *, rank: int = 0, step: int | Iterable[int] | None = None,
                  direction: str | Iterable[str] | None = None) -> int:
    """How many records of a rank a query selects, of any kind (SQLite counts them on the
    step index without reading the table)."""
    check_rank(trace, rank)
    return trace.count(rank=rank, step=step, direction=direction)


def check_rank(trace: Trace, rank: int) -> None:
    if rank not in trace.ranks:
        raise UsageError(f"{trace.path}: no rank {rank} (ranks: {trace.ranks})")


# ---- calls whose records are read on first access ----------------------------------------------

class RecordSource:
    """Reads the records of one side's calls, all at once, when the first of them is asked for
    (the comparison engine asks for nearly all; ``netparity align`` for none)."""

    def __init__(self, trace: Trace, rank: int, step: Any, direction: Any, kinds: Any):
        self.trace, self.rank, self.step, self.direction = trace, rank, step, direction
        self.kinds = tuple(kinds)
        self.lock = threading.Lock()
        self.calls: dict[tuple[int, int, int], tuple[list[Record], list[Record]]] | None = None

    def get(self, key: tuple[int, int, int]) -> tuple[list[Record], list[Record]]:
        with self.lock:
            if self.calls is None:
                self.calls = self._read()
        return self.calls.get(key) or ([], [])

    def _read(self) -> dict[tuple[int, int, int], tuple[list[Record], list[Record]]]:
        with paused_gc():  # hundreds of thousands of objects and no garbage
            check_rank(self.trace, self.rank)
            if not fastrows.FAST_OK:
                recs = load_records(self.trace, rank=self.rank, step=self.step,
                                    direction=self.direction, kinds=self.kinds)
                return {(c.rank, c.step, c.event): (c.inputs, c.outputs)
                        for c in calls_from_records(recs)}
            cols = self.trace.scan(COLUMN_NAMES, rank=self.rank, step=self.step,
                                   direction=self.direction, kind=list(self.kinds))
            return group_calls(cols, fastrows.columns_to_records(cols, lazy_stats=True))


def group_calls(cols: Columns, recs: list[Record]) -> dict[tuple[int, int, int],
                                                           tuple[list[Record], list[Record]]]:
    """The records of a scan (every column, call kinds only) grouped by ``(rank, step,
    event)`` into (inputs, outputs), each run ordered as
    :func:`~netparity.align.model.calls_from_records` orders it: execution order, unless the
    arguments are not single characters in ascending order -- then sorted by argument path.

    The grouping and ordering run in NumPy; Python touches each call once (two list slices).
    """
    n = cols.n
    if not n:
        return {}
    rank, step, event = cols["rank"], cols["step"], cols["event"]
    is_out = (cols["role"] != "input").astype(np.int64)
    arg = cols["arg"]
    argc = arg.map(lambda a: ord(a) if len(a) == 1 else -1, dtype=np.int64)
    pos = np.arange(n)
    g = np.lexsort((pos, is_out, event, step, rank))
    run_keys = (rank[g], step[g], event[g], is_out[g])
    new_run = np.zeros(n, dtype=bool)
    new_run[0] = True
    for k in run_keys:
        new_run[1:] |= k[1:] != k[:-1]
    run = np.cumsum(new_run) - 1
    a = argc[g]
    bad = ~new_run[1:] & ((a[1:] < a[:-1]) | (a[1:] < 0) | (a[:-1] < 0))
    if bad.any():  # runs out of order: by argument path (stable: ties keep execution order)
        values = arg.values
        by_key = sorted(range(len(values)), key=lambda i: _arg_key(values[i]))
        arg_rank = np.zeros(len(values), dtype=np.int64)
        r = 0
        for j, i in enumerate(by_key):
            if j and _arg_key(values[i]) != _arg_key(values[by_key[j - 1]]):
                r += 1
            arg_rank[i] = r
        sort_run = np.zeros(int(run[-1]) + 1, dtype=bool)
        sort_run[run[1:][bad]] = True
        key2 = np.zeros(n, dtype=np.int64)
        sel = sort_run[run]  # positions (in g order) of runs to sort
        key2[g[sel]] = arg_rank[arg.codes[g[sel]]]
        g = np.lexsort((pos, key2, is_out, event, step, rank))
    new_call = new_run.copy()
    new_call[1:] = False
    for k in run_keys[:3]:
        new_call[1:] |= k[1:] != k[:-1]
    starts = np.nonzero(new_call)[0]
    ends = np.append(starts[1:], n)
    n_out = np.add.reduceat(is_out[g], starts)
    mids = ends - n_out
    ordered = [recs[i] for i in g.tolist()]
    out: dict[tuple[int, int, int], tuple[list[Record], list[Record]]] = {}
    for rk, st, ev, s, m, e in zip(rank[g][starts].tolist(), step[g][starts].tolist(),
                                   event[g][starts].tolist(), starts.tolist(), mids.tolist(),
                                   ends.tolist()):
        out[(rk, st, ev)] = (ordered[s:m], ordered[m:e])
    return out


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
