"""Reading a trace index for alignment: every record of a query (:func:`load_records`), and
the records of calls read on first access (:class:`LazyCall`).

:func:`~netparity.align.core.align_traces` reads only what alignment looks at
(:mod:`netparity.align.tableread`); the comparison engine then asks for the records of the calls
it compares, and :class:`RecordSource` reads one side's index once (one scan of every
column) and makes the records of a kind of call (module or op) when a call of that kind is
first asked for, so a caller that never looks at records (``netparity align``) never pays for
them, and a comparison only for the level it compares.
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

#: the share of a kind's calls whose records are made call by call, when asked for (the
#: comparison engine pairs most calls from the rows and asks for the records of N:M groups and
#: odd calls: ~20 % of an op-level trace); past it, the next call asked for makes those of
#: every call of that kind at once (a caller that reads them all)
_ALONE = 0.5


class RecordSource:
    """Reads the records of one side's calls: the index once, when the first call is asked for
    (the comparison engine asks for nearly all; ``netparity align`` for none), then each call's
    records, all calls of one kind at once, when a call of that kind is first asked for (at op
    level the module calls' records are never made)."""

    def __init__(self, trace: Trace, rank: int, step: Any, direction: Any, kinds: Any):
        self.trace, self.rank, self.step, self.direction = trace, rank, step, direction
        self.kinds = tuple(kinds)
        self.lock = threading.Lock()
        #: (rank, step, event) -> the call's span in ``order``: (start, first output, end)
        self.calls: dict[tuple[int, int, int], tuple[int, int, int]] | None = None
        self._made: dict[tuple[int, int, int], tuple[list[Record], list[Record]]] = {}
        self._rows: fastrows.ScannedRows | None = None
        self._order: list[int] = []
        self._kind: dict[tuple[int, int, int], str] = {}  # a call's kind (module, op)
        self._one_by_one: dict[str, int] = {}  # per kind: calls whose records were made alone
        self._n_kind: dict[str, int] = {}  # per kind: how many calls

    def get(self, key: tuple[int, int, int]) -> tuple[list[Record], list[Record]]:
        with self.lock:
            if self.calls is None:
                self._read()
            got = self._made.get(key)
            if got is None:
                kind = self._kind.get(key)
                if kind is None or self._rows is None:
                    return [], []
                alone = self._one_by_one.get(kind, 0)
                if alone < _ALONE * self._n_kind.get(kind, 0):  # one call: alone
                    self._one_by_one[kind] = alone + 1
                    self._make([key])
                else:
                    with paused_gc():  # ~10^5 records and no garbage (as in _read)
                        self._make_kind(kind)
                got = self._made[key]
            return got

    def prefetch(self, keys: list[tuple[int, int, int]]) -> None:
        """Make the records of the calls ``keys`` now, in one pass (the comparison engine's
        N:M groups and odd calls: a minority of the calls, whose rows are then picked from
        the scan's arrays at once instead of call by call)."""
        with self.lock:
            if self.calls is None:
                self._read()
            if self._rows is None:
                return
            calls = self.calls
            assert calls is not None
            todo = list(dict.fromkeys(k for k in keys if k in calls and k not in self._made))
            if todo:
                with paused_gc():
                    self._make(todo)

    def rows(self) -> tuple[fastrows.ScannedRows, list[int],
                            dict[tuple[int, int, int], tuple[int, int, int]]] | None:
        """The scan every record of this side is a row of, the grouped order of its rows and
        each call's span in that order (see :func:`group_calls`); None where records are not
        read by a column scan (the schema has columns the fast loader does not know)."""
        with self.lock:
            if self.calls is None:
                self._read()
            if self._rows is None:
                return None
            return self._rows, self._order, self.calls  # type: ignore[return-value]

    def _make_kind(self, kind: str) -> None:
        """Make the records of every call of ``kind`` at once (one pass; a comparison that
        asks for most calls of its level) and hand each call its slices."""
        self._make([k for k, kd in self._kind.items() if kd == kind and k not in self._made])

    def _make(self, keys: list[tuple[int, int, int]]) -> None:
        """Make the records of the calls ``keys``."""
        assert self.calls is not None and self._rows is not None
        spans = [self.calls[k] for k in keys]
        order = self._order
        recs = self._rows.records([i for s, _, e in spans for i in order[s:e]])
        at = 0
        made = self._made
        for k, (s, m, e) in zip(keys, spans):
            made[k] = (recs[at : at + m - s], recs[at + m - s : at + e - s])
            at += e - s

    def _read(self) -> None:
        with paused_gc():  # hundreds of thousands of objects and no garbage
            check_rank(self.trace, self.rank)
            if not fastrows.FAST_OK:
                recs = load_records(self.trace, rank=self.rank, step=self.step,
                                    direction=self.direction, kinds=self.kinds)
                self._made = {(c.rank, c.step, c.event): (c.inputs, c.outputs)
                              for c in calls_from_records(recs)}
                self.calls = {k: (0, 0, 0) for k in self._made}
                return
            cols = self.trace.scan(COLUMN_NAMES, rank=self.rank, step=self.step,
                                   direction=self.direction, kind=list(self.kinds))
            self._rows = fastrows.ScannedRows(cols)
            self._order, self.calls = group_calls(cols)
            kinds = cols["kind"].tolist()
            self._kind = {k: kinds[self._order[s]] for k, (s, _, _) in self.calls.items()}
            for kd in self._kind.values():
                self._n_kind[kd] = self._n_kind.get(kd, 0) + 1


def group_calls(cols: Columns) -> tuple[list[int], dict[tuple[int, int, int],
                                                         tuple[int, int, int]]]:
    """The rows of a scan (call kinds only; ``rank``, ``step``, ``event``, ``role``, ``arg``)
    grouped by ``(rank, step, event)``: an order of the rows and each call's span in it
    ``(start, first output, end)``. Inputs come before outputs, each run ordered as
    :func:`~netparity.align.model.calls_from_records` orders it: execution order, unless the
    arguments are not single characters in ascending order -- then sorted by argument path.

    The grouping and ordering run in NumPy; Python touches each call once.
    """
    n = cols.n
    if not n:
        return [], {}
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
    out: dict[tuple[int, int, int], tuple[int, int, int]] = {}
    for rk, st, ev, s, m, e in zip(rank[g][starts].tolist(), step[g][starts].tolist(),
                                   event[g][starts].tolist(), starts.tolist(), mids.tolist(),
                                   ends.tolist()):
        out[(rk, st, ev)] = (s, m, e)
    return g.tolist(), out


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
